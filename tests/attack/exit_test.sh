#!/usr/bin/env bash
# Every rank exits cleanly while connections keep arriving, however it ends: RUNS times each of
# `sqz-exit-job --end destroy`, `--end abort` and `--end return` (the communicator still alive),
# 4 ranks started by hand with SQZ_ROOT so that rank 0 hosts the rendezvous root (and an unused
# sqzGetUniqueId root) in its own process, each with a 300 ms exit handler of its own that runs
# after libcrypto's cleanup, while sqz-attacker connects to every port the ranks listen on until
# the last rank has exited. Passes only if every rank of every run exits 0 with its "0 wrong"
# line, and the attacker really attacked. On 8f72c45 rank 0 died of SIGSEGV at exit (the root's
# thread started a handshake on a cleaned-up libcrypto).
# Usage: exit_test.sh EXIT_JOB ATTACKER [RUNS (default 3)]
set -uo pipefail
job=$1 attacker=$2 runs=${3:-3}
nranks=4
export SQZ_SOCKET_IFNAME=lo SQZ_TIMEOUT_MS=30000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A port free now, for rank 0's root (a race with other programs is possible but harmless here:
# rank 0 then fails to listen, and the run fails with that error in its output).
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run_once() {  # MODE N
  local mode=$1 n=$2 out="$dir/$1.$2"
  mkdir -p "$out"
  local port secret
  port=$(free_port) || fail "no free port"
  secret=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  # The ranks in one subshell, whose pid the attacker follows (it attacks the ports of a
  # process's descendants, until that process is gone), and which records each rank's status.
  # It starts them once the attacker says it watches (at most 10 s on): the ranks' setup ports
  # live for milliseconds, and an attacker still starting up (ASan, a loaded machine) missed
  # them all once, attacking nothing.
  local go="$out/go" i
  (
    for ((i = 0; i < 1000; ++i)); do [ -e "$go" ] && break; sleep 0.01; done
    pids=()
    # Under ASan, 'return' leaves the communicator to the exit on purpose: that is the
    # program's leak, not Squeeze's, so LeakSanitizer does not judge that mode.
    local asan=${ASAN_OPTIONS:-}
    [ "$mode" = return ] && asan="${asan:+$asan:}detect_leaks=0"
    for ((r = 0; r < nranks; ++r)); do
      ASAN_OPTIONS=$asan SQZ_RANK=$r SQZ_WORLD_SIZE=$nranks SQZ_ROOT=127.0.0.1:$port \
        SQZ_SECRET=$secret timeout -k 5 60 "$job" --end "$mode" --exit-delay-ms 300 \
        >"$out/rank$r" 2>&1 &
      pids+=($!)
    done
    for ((r = 0; r < nranks; ++r)); do
      wait "${pids[r]}"
      echo $? >"$out/status$r"
    done
  ) &
  local group=$!
  timeout -k 5 90 "$attacker" --pid "$group" --seconds 80 >"$out/attacker" 2>&1 &
  local attacker_pid=$!
  for ((i = 0; i < 1000; ++i)); do
    grep -q '^sqz-attacker: watching' "$out/attacker" 2>/dev/null && break
    sleep 0.01
  done
  touch "$go"
  wait "$group"
  wait "$attacker_pid"
  local attacker_rc=$? bad=0
  for ((r = 0; r < nranks; ++r)); do
    local status
    status=$(cat "$out/status$r" 2>/dev/null || echo "none")
    if [ "$status" != 0 ] || ! grep -q "^exit-job: rank $r of $nranks: 0 wrong, ending by $mode$" "$out/rank$r"; then
      echo "-- $mode run $n: rank $r exited with status $status$([ "$status" = 139 ] && echo " (SIGSEGV)"); its output:"
      tail -20 "$out/rank$r"
      bad=1
    fi
  done
  [ "$attacker_rc" = 0 ] || { echo "-- $mode run $n: the attacker exited $attacker_rc:"; cat "$out/attacker"; bad=1; }
  local connected
  connected=$(awk '/^sqz-attacker: kind / { for (i = 1; i < NF; ++i) if ($i == "connected") c += $(i + 1) } END { print c + 0 }' "$out/attacker")
  if [ "$connected" -lt 1 ]; then
    echo "-- $mode run $n: the attacker made no connection: the job was not attacked"
    cat "$out/attacker"
    bad=1
  fi
  echo "$mode run $n: $([ $bad = 0 ] && echo ok || echo FAILED) ($connected connections)"
  return $bad
}

failed=0 total=0
for mode in destroy abort return; do
  for ((n = 1; n <= runs; ++n)); do
    total=$((total + 1))
    run_once "$mode" "$n" || failed=$((failed + 1))
  done
done
echo "exit test: $((total - failed)) of $total runs with every rank exiting 0"
[ "$failed" = 0 ] || fail "$failed of $total runs had a rank that did not exit cleanly"
echo "PASS: exit"
