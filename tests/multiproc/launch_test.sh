#!/usr/bin/env bash
# Ranks as processes: the perf binary and the C example under sqzrun over one transport, and a
# torchrun-style rendezvous (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, rank 0 hosting the root).
# guard-info: a codec whose pay-off guard sends calls dense says so at SQZ_DEBUG=INFO (on
# 8f72c45 nothing did, and a user saw only a compression ratio near 1).
# Usage: launch_test.sh CASE SQZRUN PERF EXAMPLE
#   (CASE: perf-tcp, perf-shm, example, torchrun, guard-info)
# Exit 77 (meson's skip) when the transport is not in this build.
set -uo pipefail
case_name=$1 sqzrun=$2 perf=$3 example=$4
fail() { echo "FAIL: $*"; exit 1; }

perf_case() {
  local transport=$1
  if ! SQZ_TRANSPORT=$transport timeout 60 "$sqzrun" -n 1 "$perf" -b 8 -e 8 -n 1 -w 0 >/dev/null 2>&1; then
    if SQZ_TRANSPORT=$transport "$perf" -b 8 -e 8 -n 1 -w 0 2>&1 | grep -q "not a transport of this build"; then
      echo "SKIP: transport $transport is not in this build"; exit 77
    fi
  fi
  for n in 2 3 4 5; do
    echo "== $n ranks over $transport, float sum 1K..4M"
    SQZ_TRANSPORT=$transport timeout 120 "$sqzrun" -n "$n" "$perf" -b 1K -e 4M -f 4 -n 2 -w 1 -c 1 \
      || fail "$n ranks over $transport: exit $?"
  done
  echo "== 3 ranks over $transport, every datatype and op"
  SQZ_TRANSPORT=$transport timeout 180 "$sqzrun" -n 3 "$perf" -b 8 -e 64K -f 64 -n 1 -w 0 -c 1 -d all -o all \
    || fail "3 ranks over $transport, all types: exit $?"
}

case $case_name in
  perf-tcp) perf_case tcp ;;
  perf-shm) perf_case shm ;;
  example)
    out=$(timeout 60 "$sqzrun" -n 3 "$example") || fail "example exited $?"
    echo "$out"
    [ "$(grep -c 'mean gradient = \[1 2 3 4\]' <<<"$out")" = 3 ] || fail "expected 3 ranks with mean [1 2 3 4]"
    ;;
  torchrun)
    # rank 0 hosts the rendezvous at MASTER_ADDR:MASTER_PORT; retry on a port someone else took.
    for attempt in 1 2 3; do
      port=$((20000 + (RANDOM % 30000)))
      pids=() ; dir=$(mktemp -d)
      for r in 0 1 2; do
        env -u SQZ_UNIQUE_ID RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          SQZ_SECRET=00112233445566778899aabbccddeeff SQZ_TIMEOUT_MS=20000 \
          timeout 60 "$example" >"$dir/$r.out" 2>&1 &
        pids+=($!)
      done
      ok=1
      for p in "${pids[@]}"; do wait "$p" || ok=0; done
      cat "$dir"/*.out
      if [ $ok = 1 ] && [ "$(cat "$dir"/*.out | grep -c 'mean gradient = \[1 2 3 4\]')" = 3 ]; then
        rm -rf "$dir"; echo "torchrun-style rendezvous on port $port: OK"; exit 0
      fi
      grep -q "Address already in use" "$dir"/*.out || { rm -rf "$dir"; fail "torchrun-style run failed"; }
      rm -rf "$dir"
    done
    fail "no free port in 3 attempts"
    ;;
  guard-info)
    # SQZ_CODEC_DELAY_US makes every compressed call 20 ms slower: after its warm-up (calls 1-4)
    # the guard sends the calls dense, and says so, with the setting that turns it off.
    out=$(SQZ_DEBUG=INFO SQZ_DEBUG_SUBSYS=COMPRESS SQZ_CODEC_DELAY_US=20000 timeout 120 \
      "$sqzrun" -n 2 "$perf" -b 1M -e 1M -n 8 -w 0 -z topk:ratio=0.01 --guard 2>&1) ||
      fail "perf with the guard on exited $?: $out"
    echo "$out" | grep "pay-off guard"
    grep -q "the pay-off guard runs this call and the 4th dense" <<<"$out" ||
      fail "no INFO line for the warm-up's dense calls"
    grep -q "the pay-off guard sends its calls dense: measured.*auto_dense=0" <<<"$out" ||
      fail "no INFO line for the guard's decision to send dense, naming auto_dense=0"
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
