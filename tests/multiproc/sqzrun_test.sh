#!/usr/bin/env bash
# Tests for the two tools, run by meson (tests/multiproc/meson.build):
#   sqzrun_test.sh sqzrun PATH-TO-SQZRUN     launcher: environment, exit statuses, failure
#                                            propagation, --timeout, signals, --tag-output, --bind
#   sqzrun_test.sh sqz-info PATH-TO-SQZ-INFO sqz-info runs and lists the parameters
# Every check prints PASS or FAIL with what it ran; the script exits 1 if any failed.
# Every sqzrun run is bounded by timeout(1), so a broken launcher fails instead of hanging.
# The rank commands are single-quoted on purpose: the ranks expand them.
# shellcheck disable=SC2016
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 sqzrun|sqz-info PATH" >&2
  exit 2
fi
mode=$1
bin=$2
# shellcheck source=../checks.sh
source "$(dirname "$0")/../checks.sh" sqzrun_test

now_ms() { echo $(($(date +%s%N) / 1000000)); }
show() {  # indents a captured output file into the log
  sed 's/^/    | /' "$1"
}

# run NAME BOUND CMD...: runs CMD under `timeout BOUND`, leaving its status in $status, its time
# in $elapsed_ms and its output in $tmp/out and $tmp/err.
run() {
  local name=$1 bound=$2
  shift 2
  echo "--- $name: $*"
  local t0
  t0=$(now_ms)
  timeout "$bound" "$@" >"$tmp/out" 2>"$tmp/err"
  status=$?
  elapsed_ms=$(($(now_ms) - t0))
}

# expect NAME WANT-STATUS MAX-SECONDS CMD...
expect() {
  local name=$1 want=$2 max_s=$3
  shift 3
  run "$name" 20 "$@"
  if [ "$status" -eq "$want" ] && [ "$elapsed_ms" -le $((max_s * 1000)) ]; then
    pass "$name: exit $status in ${elapsed_ms} ms"
    return 0
  fi
  fail "$name: exit $status (want $want) in ${elapsed_ms} ms (limit ${max_s} s)"
  show "$tmp/out"
  show "$tmp/err"
  return 1
}

# expect_text NAME FILE TEXT: FILE contains TEXT (fixed string).
expect_text() {
  if grep -qF -- "$3" "$2"; then
    pass "$1: output has '$3'"
  else
    fail "$1: output lacks '$3'"
    show "$2"
  fi
}

# no_survivors NAME DIR: no pid recorded in DIR/pid.* is still alive.
no_survivors() {
  local alive=""
  for f in "$2"/pid.*; do
    [ -e "$f" ] || continue
    local pid
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      alive="$alive $pid"
      kill -KILL "$pid" 2>/dev/null
    fi
  done
  if [ -z "$alive" ]; then
    pass "$1: no rank survived"
  else
    fail "$1: ranks still alive:$alive"
  fi
}

test_sqzrun() {
  local sqzrun=$1 d

  # (a) the environment every rank gets
  expect "env-basic" 0 10 "$sqzrun" -n 3 sh -c 'test "$SQZ_WORLD_SIZE" = 3 && test -n "$SQZ_UNIQUE_ID"'

  d="$tmp/env" && mkdir -p "$d"
  expect "env-all" 0 10 env -u SQZ_SOCKET_IFNAME SQZ_RANK=99 "$sqzrun" -n 3 sh -c \
    'echo "$SQZ_RANK $SQZ_WORLD_SIZE $SQZ_LOCAL_RANK $SQZ_LOCAL_SIZE $SQZ_SOCKET_IFNAME $SQZ_UNIQUE_ID" >"$0/env.$SQZ_RANK"' "$d"
  local ids="" ok=1
  for r in 0 1 2; do
    if [ ! -s "$d/env.$r" ] || ! read -r rank ws lr ls ifname id <"$d/env.$r"; then
      ok=0 && echo "    rank $r wrote nothing"
      continue
    fi
    [ "$rank $ws $lr $ls $ifname" = "$r 3 $r 3 lo" ] || { ok=0 && echo "    rank $r: $rank $ws $lr $ls $ifname"; }
    [[ "$id" =~ ^[0-9a-fA-F]{256}$ ]] || { ok=0 && echo "    rank $r: SQZ_UNIQUE_ID is not 256 hex digits"; }
    ids="$ids $id"
  done
  [ "$(echo "$ids" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)" = 1 ] || { ok=0 && echo "    ranks got different ids"; }
  if [ $ok = 1 ]; then
    pass "env-all: SQZ_RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_SIZE per rank, SQZ_SOCKET_IFNAME=lo, one 128-byte id"
  else
    fail "env-all: wrong rank environment"
  fi
  expect "env-torch" 0 10 env -u MASTER_ADDR -u MASTER_PORT RANK=99 "$sqzrun" -n 3 sh -c \
    'test "$RANK" = "$SQZ_RANK" && test "$LOCAL_RANK" = "$SQZ_RANK" && test "$WORLD_SIZE" = 3 &&
     test "$LOCAL_WORLD_SIZE" = 3 && test "$MASTER_ADDR" = 127.0.0.1 && test "$MASTER_PORT" -gt 0'
  expect "env-torch-master-kept" 0 10 env MASTER_ADDR=198.18.0.1 MASTER_PORT=29500 "$sqzrun" -n 2 \
    sh -c 'test "$MASTER_ADDR:$MASTER_PORT" = 198.18.0.1:29500'
  expect "env-ifname-kept" 0 10 env SQZ_SOCKET_IFNAME=lo0x "$sqzrun" -n 2 sh -c \
    'test "$SQZ_SOCKET_IFNAME" = lo0x'
  expect "all-zero" 0 10 "$sqzrun" -n 4 true
  expect "single-rank-status" 5 10 "$sqzrun" -n 1 sh -c 'exit 5'

  # (b) one rank fails: the others are stopped, sqzrun exits with its status
  d="$tmp/fail" && mkdir -p "$d"
  expect "rank-exit-3" 3 10 "$sqzrun" -n 4 sh -c \
    'if [ "$SQZ_RANK" = 2 ]; then exit 3; fi; echo $$ >"$0/pid.$SQZ_RANK"; exec sleep 60' "$d"
  expect_text "rank-exit-3" "$tmp/err" "rank 2 (pid "
  expect_text "rank-exit-3" "$tmp/err" "exited with status 3; stopping the other 3 ranks"
  no_survivors "rank-exit-3" "$d"

  # a rank that ignores SIGTERM gets SIGKILL after the grace period
  d="$tmp/stubborn" && mkdir -p "$d"
  expect "sigterm-ignored" 4 10 "$sqzrun" -n 2 sh -c \
    'if [ "$SQZ_RANK" = 0 ]; then while [ ! -e "$0/pid.1" ]; do sleep 0.05; done; exit 4; fi; trap "" TERM; echo $$ >"$0/pid.$SQZ_RANK"; while :; do sleep 1; done' "$d"
  expect_text "sigterm-ignored" "$tmp/err" "sending SIGKILL"
  no_survivors "sigterm-ignored" "$d"

  # (c) a rank killed by a signal: 128 + signal
  d="$tmp/kill" && mkdir -p "$d"
  expect "rank-sigkill" 137 10 "$sqzrun" -n 3 sh -c \
    'if [ "$SQZ_RANK" = 1 ]; then kill -KILL $$; fi; echo $$ >"$0/pid.$SQZ_RANK"; exec sleep 60' "$d"
  expect_text "rank-sigkill" "$tmp/err" "SIGKILL"
  no_survivors "rank-sigkill" "$d"

  # (d) a program that cannot be run
  expect "no-such-program" 127 10 "$sqzrun" -n 2 sqzrun-test-no-such-program
  expect_text "no-such-program" "$tmp/err" "sqzrun-test-no-such-program"
  expect "no-such-path" 127 10 "$sqzrun" -n 2 "$tmp/missing/prog"
  printf 'echo hi\n' >"$tmp/noexec" && chmod 644 "$tmp/noexec"
  expect "not-executable" 127 10 "$sqzrun" -n 1 "$tmp/noexec"
  expect_text "not-executable" "$tmp/err" "$tmp/noexec"
  printf 'test -n "$SQZ_RANK"\n' >"$tmp/script" && chmod 755 "$tmp/script"
  expect "script-without-shebang" 0 10 "$sqzrun" -n 2 "$tmp/script"

  # (e) bad usage: message, usage, exit 2
  expect "usage-no-args" 2 5 "$sqzrun"
  expect_text "usage-no-args" "$tmp/err" "Usage: sqzrun"
  expect "usage-no-n" 2 5 "$sqzrun" true
  expect_text "usage-no-n" "$tmp/err" "-n N is required"
  expect "usage-n-zero" 2 5 "$sqzrun" -n 0 true
  expect "usage-n-too-big" 2 5 "$sqzrun" -n 1025 true
  expect "usage-n-not-number" 2 5 "$sqzrun" -n three true
  expect "usage-no-program" 2 5 "$sqzrun" -n 2
  expect "usage-unknown-option" 2 5 "$sqzrun" --frobnicate -n 2 true
  expect_text "usage-unknown-option" "$tmp/err" "--frobnicate"
  expect "usage-bad-timeout" 2 5 "$sqzrun" --timeout -1 -n 2 true
  expect "help" 0 5 "$sqzrun" --help
  expect_text "help" "$tmp/out" "Usage: sqzrun"
  expect "glued-forms" 0 10 "$sqzrun" -n2 --timeout=30 -- sh -c 'test "$SQZ_WORLD_SIZE" = 2'

  # (f) --timeout
  d="$tmp/timeout" && mkdir -p "$d"
  expect "timeout" 124 8 "$sqzrun" --timeout 1 -n 3 sh -c 'echo $$ >"$0/pid.$SQZ_RANK"; exec sleep 60' "$d"
  expect_text "timeout" "$tmp/err" "--timeout"
  no_survivors "timeout" "$d"
  expect "timeout-not-reached" 0 10 "$sqzrun" --timeout 30 -n 2 true

  # SIGTERM to sqzrun reaches every rank; sqzrun dies by it too (bash: 143)
  d="$tmp/signal" && mkdir -p "$d"
  echo "--- forward-sigterm: $sqzrun -n 3 sh -c 'exec sleep 60', then kill -TERM sqzrun"
  timeout 30 "$sqzrun" -n 3 sh -c 'echo $$ >"$0/pid.$SQZ_RANK"; exec sleep 60' "$d" 2>"$tmp/err" &
  local tpid=$!
  for _ in $(seq 100); do
    [ "$(find "$d" -name "pid.*" | wc -l)" = 3 ] && break
    sleep 0.1
  done
  # timeout(1) runs sqzrun as its child: signal sqzrun itself, not timeout
  local spid
  spid=$(pgrep -P "$tpid" -x sqzrun || true)
  if [ -n "$spid" ]; then
    kill -TERM "$spid"
    wait "$tpid"
    status=$?
    if [ "$status" -eq 143 ]; then pass "forward-sigterm: exit $status"; else
      fail "forward-sigterm: exit $status (want 143)"
      show "$tmp/err"
    fi
  else
    fail "forward-sigterm: could not find the sqzrun process"
    kill "$tpid"
    wait "$tpid"
  fi
  no_survivors "forward-sigterm" "$d"

  # --tag-output
  expect "tag-output" 0 10 "$sqzrun" --tag-output -n 2 sh -c 'echo "hello $SQZ_RANK"; printf "no newline" >&2'
  expect_text "tag-output" "$tmp/out" "[0] hello 0"
  expect_text "tag-output" "$tmp/out" "[1] hello 1"
  expect_text "tag-output" "$tmp/err" "[1] no newline"

  # --bind: works with hwloc (each rank on one core), warns and runs without
  # (with -v sqzrun names each rank's PUs; the kernel's view must match)
  expect "bind" 0 10 "$sqzrun" --bind --tag-output -v -n 2 sh -c 'grep Cpus_allowed_list /proc/self/status'
  show "$tmp/out"
  show "$tmp/err"
  if grep -q "bound to core" "$tmp/err"; then
    for r in 0 1; do
      local want got
      want=$(sed -n "s/^sqzrun: rank $r: pid [0-9]*, bound to core [0-9]* (PUs \(.*\))\$/\1/p" "$tmp/err")
      got=$(sed -n "s/^\[$r\] Cpus_allowed_list:[[:space:]]*//p" "$tmp/out")
      if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "bind: rank $r runs on PUs $got"; else
        fail "bind: rank $r runs on PUs '$got', sqzrun bound it to '$want'"
      fi
    done
  else
    expect_text "bind" "$tmp/err" "ranks run unbound"
  fi
}

test_sqz_info() {
  local info=$1
  expect "sqz-info" 0 10 "$info"
  expect_text "sqz-info" "$tmp/out" "SQZ_TIMEOUT_MS"
  expect_text "sqz-info" "$tmp/out" "Squeeze"
  expect_text "sqz-info" "$tmp/out" "transports"
  expect "sqz-info-value" 0 10 env SQZ_TIMEOUT_MS=4242 "$info" --params
  expect_text "sqz-info-value" "$tmp/out" "4242"
  if grep -q "^Features" "$tmp/out"; then fail "sqz-info --params: printed more than the table"; else
    pass "sqz-info --params: only the table"
  fi
  expect "sqz-info-secret" 0 10 env SQZ_SECRET=00112233445566778899aabbccddeeff "$info" --params
  if grep -q 00112233445566778899aabbccddeeff "$tmp/out"; then fail "sqz-info printed SQZ_SECRET"; else
    pass "sqz-info-secret: SQZ_SECRET not printed"
  fi
  expect "sqz-info-usage" 2 5 "$info" --frobnicate
  # --codecs: the table sqzCodecCreate looks methods up in, with each one's keys.
  expect "sqz-info-codecs" 0 10 "$info" --codecs
  expect_text "sqz-info-codecs" "$tmp/out" "ratio,sample"
  expect_text "sqz-info-codecs" "$tmp/out" "rank,cols,seed"
  expect_text "sqz-info-codecs" "$tmp/out" "ef, min_bytes and auto_dense"
  if grep -q "^Features\|SQZ_TIMEOUT_MS" "$tmp/out"; then fail "sqz-info --codecs: printed more than the table"; else
    pass "sqz-info --codecs: only the table"
  fi
  expect "sqz-info-all" 0 10 "$info"
  expect_text "sqz-info-all" "$tmp/out" "Codecs (sqzCodecCreate specs"
}

case "$mode" in
  sqzrun) test_sqzrun "$bin" ;;
  sqz-info) test_sqz_info "$bin" ;;
  *)
    echo "unknown mode '$mode'" >&2
    exit 2
    ;;
esac

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
