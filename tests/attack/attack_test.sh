#!/usr/bin/env bash
# A live job under attack: runs `sqzrun -n 4 sqz-attack-job` once alone (for its wall time),
# then again while sqz-attacker hits every loopback port sqzrun and the ranks listen on (scans,
# garbage, wrong secrets, half-open and slow connections). Passes only if the attacked job exits
# 0 with its "0 wrong" line, the attacker saw no wrong secret accepted, and the attacker really
# attacked: it saw at least 2 listening ports, and every kind connected at least 3 times.
# The attacker keeps connecting until sqzrun has exited, so after every rank and sqzrun itself
# have run their exit handlers; sqzrun -v reports each rank's exit status, and each must be 0.
# Usage: attack_test.sh SQZRUN ATTACK_JOB ATTACKER
# ATTACK_ROUNDS (default 30) and ATTACK_PAUSE_MS (default 300, the sleep between rounds: the job
# then lives long enough for connections held on sqzrun's root to meet the 5 s handshake cap).
set -uo pipefail
sqzrun=$1 job=$2 attacker=$3
rounds=${ATTACK_ROUNDS:-30} pause_ms=${ATTACK_PAUSE_MS:-300}
export SQZ_SOCKET_IFNAME=lo SQZ_TIMEOUT_MS=30000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
now() { date +%s.%N; }

check_job() {  # NAME RC OUTPUT-FILE
  [ "$2" = 0 ] || fail "$1: sqzrun exited $2"
  grep -q "^attack-job: $rounds rounds, 0 wrong$" "$3" || fail "$1: no 'attack-job: $rounds rounds, 0 wrong' line"
}

echo "== the job alone: sqzrun -n 4 $(basename "$job") --rounds $rounds --pause-ms $pause_ms"
start=$(now)
timeout -k 5 150 "$sqzrun" --timeout 140 -n 4 "$job" --rounds "$rounds" --pause-ms "$pause_ms" >"$dir/alone.out" 2>&1
rc=$?
alone=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
cat "$dir/alone.out"
check_job "the job alone" "$rc" "$dir/alone.out"

echo "== the job under attack"
start=$(now)
"$sqzrun" -v --timeout 170 -n 4 "$job" --rounds "$rounds" --pause-ms "$pause_ms" >"$dir/job.out" 2>&1 &
job_pid=$!
# sqzrun --timeout bounds the job; this bounds sqzrun itself, should it hang. It polls, so it
# ends within a second of the job and holds none of our output open.
(
  for _ in $(seq 185); do sleep 1; kill -0 "$job_pid" 2>/dev/null || exit 0; done
  kill -TERM "$job_pid"; sleep 5; kill -KILL "$job_pid"
) >/dev/null 2>&1 &
watchdog_pid=$!
timeout -k 5 200 "$attacker" --pid "$job_pid" --seconds 190 >"$dir/attacker.out" 2>&1 &
attacker_pid=$!
wait "$job_pid"
job_rc=$?
attacked=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
kill "$watchdog_pid" 2>/dev/null
wait "$attacker_pid"
attacker_rc=$?
echo "-- job output (exit $job_rc)"
cat "$dir/job.out"
echo "-- attacker output (exit $attacker_rc)"
cat "$dir/attacker.out"
echo "wall time: alone ${alone} s, under attack ${attacked} s, ratio" \
  "$(awk -v a="$alone" -v b="$attacked" 'BEGIN { printf "%.2f", b / a }')"
# The wall time is mostly the pauses; the setup an attacker can stall is the splits.
split_ms() { sed -n 's/.*sqzCommSplit on rank 0: \([0-9.]*\) ms in all.*/\1/p' "$1"; }
split_alone=$(split_ms "$dir/alone.out") split_attacked=$(split_ms "$dir/job.out")
[ -n "$split_alone" ] && [ -n "$split_attacked" ] &&
  echo "sqzCommSplit time on rank 0 over $rounds rounds: alone ${split_alone} ms, under attack" \
    "${split_attacked} ms, ratio $(awk -v a="$split_alone" -v b="$split_attacked" 'BEGIN { printf "%.2f", b / a }')"

check_job "the job under attack" "$job_rc" "$dir/job.out"
for r in 0 1 2 3; do
  grep -q "^sqzrun: rank $r (pid [0-9]*) exited with status 0$" "$dir/job.out" ||
    fail "the job under attack: sqzrun did not report rank $r exiting with status 0"
done
[ "$attacker_rc" = 0 ] || fail "the attacker exited $attacker_rc"
# Every port the job listened on was attacked on sight; the split rendezvous listeners live a few
# ms, so how many of them a connection reaches in time is luck (1 to 17 distinct ports in runs on
# one machine): the test asks that several were seen and every kind connected.
seen=$(sed -n 's/.* \([0-9]*\) loopback listening ports seen.*/\1/p' "$dir/attacker.out")
[ "${seen:-0}" -ge 2 ] || fail "the attacker saw only ${seen:-0} listening ports: the job was not really attacked"
for kind in scan garbage wrong-secret half-open slow-client; do
  line=$(grep "^sqz-attacker: kind $kind " "$dir/attacker.out") || fail "no counts for $kind"
  read -r connected ports < <(awk '{ for (i = 1; i < NF; ++i) { if ($i == "connected") c = $(i + 1); if ($i == "ports") p = $(i + 1) } } END { print c, p }' <<<"$line")
  [ "${connected:-0}" -ge 3 ] || fail "$kind connected only ${connected:-0} times: the job was not really attacked"
  [ "${ports:-0}" -ge 1 ] || fail "$kind reached no port: the job was not really attacked"
done
echo "PASS: attack"
