#!/usr/bin/env bash
# "The secret is never logged": runs jobs with every debug subsystem at the most verbose level
# (SQZ_DEBUG=TRACE, SQZ_DEBUG_SUBSYS=ALL), captures every byte they print, and fails if a job
# secret appears in it in any form: hex in either case (whole, or any 8-byte run of it, also
# byte-reversed per 8 bytes as a printed integer would be), raw bytes, or base64. Cases:
#   torchrun      3 ranks, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and a known SQZ_SECRET
#   wrong-secret  the same with rank 2 given another secret (both secrets looked for), so the
#                 authentication error paths log; the job must fail, saying so
#   bad-secret    an SQZ_SECRET that is not hex (31 of the real digits and a 'g'): the message
#                 must not echo it
#   sqzrun        sqzrun --verbose with the job attacked by sqz-attacker (wrong secrets, garbage,
#                 half-open: the acceptor's error paths); the secret is read from the job's
#                 SQZ_UNIQUE_ID, where unique_id.cc puts it (bytes 28..43)
#   sqz-info      sqz-info under sqzrun with SQZ_SECRET set: it prints every parameter
# Each case's log must hold debug lines (the debug output really was on).
# Usage: secret_log_test.sh SQZRUN ATTACK_JOB ATTACKER SQZ_INFO
set -uo pipefail
sqzrun=$1 job=$2 attacker=$3 info=$4
export SQZ_SOCKET_IFNAME=lo SQZ_DEBUG=TRACE SQZ_DEBUG_SUBSYS=ALL
unset SQZ_DEBUG_FILE  # everything to stderr, where we capture it
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
random_secret() { od -An -v -tx1 -N16 /dev/urandom | tr -d ' \n'; }

# Bytes of HEX (even length) in reverse order.
reverse_bytes() { local h=$1 out=""; while [ -n "$h" ]; do out="${h:0:2}$out"; h=${h:2}; done; echo "$out"; }

# Fails if secret HEX (32 lowercase digits) is in LOG in any form above.
scan_log() {  # LABEL LOG HEX
  local label=$1 log=$2 hex=$3 i window
  [ -s "$log" ] || fail "$label: the log is empty"
  grep -aqE "SQZ (INFO|DEBUG|TRACE) " "$log" || fail "$label: no INFO/DEBUG lines: debug output was not on"
  for ((i = 0; i <= 16; i += 2)); do
    window=${hex:i:16}
    grep -aqiF "$window" "$log" && fail "$label: secret bytes $((i / 2))..$((i / 2 + 7)) appear in hex ($window)"
  done
  for window in "$(reverse_bytes "${hex:0:16}")" "$(reverse_bytes "${hex:16:16}")"; do
    grep -aqiF "$window" "$log" && fail "$label: half the secret appears as a little-endian integer ($window)"
  done
  od -An -v -tx1 "$log" | tr -d ' \n' | grep -qF "$hex" && fail "$label: the raw secret bytes appear"
  local b64
  b64=$(xxd -r -p <<<"$hex" | base64 | tr -d '=\n')
  grep -aqF "$b64" "$log" && fail "$label: the secret appears in base64"
  echo "$label: $(wc -l <"$log") lines, $(grep -acE 'SQZ (INFO|DEBUG|TRACE) ' "$log") of them INFO/DEBUG, no trace of the secret"
}

# A 3-rank torchrun-style job; SECRET_R2 is rank 2's SQZ_SECRET. Output of all ranks in LOG.
# Retries on a port someone else took. Returns the first failing rank's status.
torchrun_job() {  # LOG SECRET SECRET_R2 TIMEOUT_MS
  local log=$1 secret=$2 secret2=$3 timeout_ms=$4 attempt port r rc status pids
  for attempt in 1 2 3; do
    port=$((20000 + (RANDOM % 30000)))
    pids=()
    for r in 0 1 2; do
      env -u SQZ_UNIQUE_ID RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        SQZ_SECRET="$([ $r = 2 ] && echo "$secret2" || echo "$secret")" SQZ_TIMEOUT_MS="$timeout_ms" \
        timeout -k 5 60 "$job" --rounds 2 --count 1024 >"$dir/rank$r.out" 2>&1 &
      pids+=($!)
    done
    rc=0
    for r in 0 1 2; do
      wait "${pids[$r]}"
      status=$?
      [ $rc = 0 ] && rc=$status
    done
    cat "$dir"/rank?.out >"$log"
    grep -aq "Address already in use" "$log" || return $rc
  done
  fail "no free port in 3 attempts"
}

secret=$(random_secret)
other=$(random_secret)

# The scanner itself: each form of a leak planted in a debug log must be caught.
plant=$dir/planted.log
for form in upper window little-endian raw base64; do
  { echo "vm:1:1 [0] SQZ INFO INIT x.cc:1 an ordinary line"
    case $form in
      upper) echo "key=${secret^^}" ;;
      window) echo "partial ${secret:6:16} leak" ;;
      little-endian) echo "word $(reverse_bytes "${secret:16:16}")" ;;
      raw) printf 'raw:'; xxd -r -p <<<"$secret"; echo ;;
      base64) xxd -r -p <<<"$secret" | base64 ;;
    esac
  } >"$plant"
  ( scan_log "planted $form" "$plant" "$secret" ) >/dev/null && fail "the scanner misses a secret in $form form"
done
echo "scanner: catches the secret in upper-case hex, as an 8-byte window, little-endian, raw and base64"

echo "== torchrun: 3 ranks, SQZ_SECRET set, every subsystem at TRACE"
torchrun_job "$dir/torchrun.log" "$secret" "$secret" 20000 || { cat "$dir/torchrun.log"; fail "torchrun job failed"; }
grep -q "attack-job: 2 rounds, 0 wrong" "$dir/torchrun.log" || fail "torchrun job: no result line"
scan_log torchrun "$dir/torchrun.log" "$secret"

echo "== wrong-secret: rank 2 has another secret"
torchrun_job "$dir/wrong.log" "$secret" "$other" 4000 && { cat "$dir/wrong.log"; fail "a rank with the wrong secret joined"; }
grep -aq "does not know this job's secret" "$dir/wrong.log" || { cat "$dir/wrong.log"; fail "wrong-secret: no authentication error logged"; }
grep -a "does not know this job's secret" "$dir/wrong.log" | head -2
scan_log "wrong-secret (the job's secret)" "$dir/wrong.log" "$secret"
scan_log "wrong-secret (rank 2's secret)" "$dir/wrong.log" "$other"

echo "== bad-secret: SQZ_SECRET is not hex"
torchrun_job "$dir/bad.log" "${secret:0:31}g" "${secret:0:31}g" 4000 && fail "a non-hex SQZ_SECRET was accepted"
grep -aq "SQZ_SECRET must be 32 hex digits" "$dir/bad.log" || { cat "$dir/bad.log"; fail "bad-secret: no error naming SQZ_SECRET"; }
grep -a "SQZ_SECRET must be" "$dir/bad.log" | head -1
# Debug lines before the failure are few here; the secret check is what matters.
grep -aqiF "${secret:0:16}" "$dir/bad.log" && fail "bad-secret: the value of SQZ_SECRET was echoed"
grep -aqiF "${secret:15:16}" "$dir/bad.log" && fail "bad-secret: the value of SQZ_SECRET was echoed"
echo "bad-secret: $(wc -l <"$dir/bad.log") lines, the value is not echoed"

echo "== sqzrun --verbose, the job under attack"
SQZ_TIMEOUT_MS=30000 "$sqzrun" --verbose --timeout 60 -n 3 "$job" --rounds 8 --pause-ms 200 \
  --count 1024 --id-file "$dir/id.hex" >"$dir/sqzrun.log" 2>&1 &
job_pid=$!
timeout -k 5 80 "$attacker" --pid "$job_pid" --seconds 70 >"$dir/attacker.out" 2>&1 &
attacker_pid=$!
wait "$job_pid" || { cat "$dir/sqzrun.log"; fail "sqzrun job failed"; }
wait "$attacker_pid" || { cat "$dir/attacker.out"; fail "the attacker failed"; }
grep "^sqz-attacker: kind" "$dir/attacker.out"
id=$(cat "$dir/id.hex")
[ ${#id} = 256 ] || fail "the job wrote no 128-byte SQZ_UNIQUE_ID (got ${#id} hex digits)"
job_secret=${id:56:32}  # unique_id.cc: kOffSecret = 28, 16 bytes
grep -aq "does not know this job's secret" "$dir/sqzrun.log" || fail "sqzrun: the attacker's wrong secrets were not logged"
grep -aqiF "$id" "$dir/sqzrun.log" && fail "sqzrun: SQZ_UNIQUE_ID appears in the log"
scan_log "sqzrun --verbose" "$dir/sqzrun.log" "$job_secret"

echo "== sqz-info under sqzrun, SQZ_SECRET set"
SQZ_SECRET=$secret "$sqzrun" -n 1 sh -c 'echo "$SQZ_UNIQUE_ID" >"$1"; exec "$2"' sh "$dir/info-id.hex" "$info" \
  >"$dir/info.log" 2>&1 || { cat "$dir/info.log"; fail "sqz-info failed"; }
info_id=$(cat "$dir/info-id.hex")
[ ${#info_id} = 256 ] || fail "no SQZ_UNIQUE_ID from sqzrun"
grep -aq "SQZ_SECRET" "$dir/info.log" || fail "sqz-info did not list SQZ_SECRET"
grep -a "SQZ_SECRET\|SQZ_UNIQUE_ID" "$dir/info.log" | head -2
# sqz-info itself prints no debug lines: check the secrets directly.
for s in "$secret" "${info_id:56:32}"; do
  grep -aqiF "${s:0:16}" "$dir/info.log" && fail "sqz-info: a secret appears in its output"
  grep -aqiF "${s:16:16}" "$dir/info.log" && fail "sqz-info: a secret appears in its output"
done
echo "sqz-info: $(wc -l <"$dir/info.log") lines, no trace of either secret"
echo "PASS: secret-log"
