#!/usr/bin/env bash
# Multi-host test: 4 lab hosts (network namespaces, netlab.sh) with links at RATE ('none' or a tc
# rate), one rank per host. Every all-reduce algorithm runs dense (float32 sum up to 4 MiB, and
# without shaping every datatype and op at small sizes) and through every codec, checked bit for
# bit by the perf binary (dense: against the exact result; compressed: every rank's output
# identical), and rank 0 must report tcp, not shm, to each of its peers.
#
# Usage: multihost_test.sh RATE NETLAB_SH NETPROBE PERF_ALLREDUCE
# Exit 77 (skipped) where this machine cannot make network namespaces.
set -uo pipefail

rate=$1 netlab=$2 netprobe=$3 perf=$4
export SQZ_NETPROBE=$netprobe

if ! reason=$(bash "$netlab" check); then
  echo "SKIP: $reason"
  exit 77
fi

name="mh$((RANDOM % 100000))"
lab_cmd() { local sub=$1; shift; bash "$netlab" "$sub" --name "$name" "$@"; }
trap 'lab_cmd down' EXIT
trap 'exit 130' INT TERM HUP

lab_cmd up -n 4 -r "$rate"
case $? in
  0) ;;
  # Its link check (above): every stream slower than the rate, never faster. The lab measures
  # itself (sqz-netprobe) before any rank runs: the machine's CPUs, busy or slow, did not carry
  # the rate, and no figure of this test would mean what it says.
  3) echo "SKIP: this machine did not carry $rate on every link of the lab (its check, above)"
     exit 77 ;;
  *) echo "FAIL: the lab did not come up at $rate"; exit 1 ;;
esac

fail=0
out=$(mktemp)
run() {  # run DESCRIPTION PERF-ARGS...
  local what=$1; shift
  SQZ_DEBUG=INFO SQZ_DEBUG_SUBSYS=INIT lab_cmd run --timeout 300 -- "$perf" "$@" >"$out" 2>&1
  local rc=$?
  if ((rc != 0)); then
    echo "FAIL: $what (exit $rc):"; tail -n 30 "$out"; fail=1; return
  fi
  if ! grep -q "rank 0's peers 1:tcp 2:tcp 3:tcp" "$out"; then
    echo "FAIL: $what: rank 0 did not report tcp to every peer:"
    grep -i "peers" "$out" || tail -n 5 "$out"
    fail=1; return
  fi
  local rows
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$out")
  if ((rows == 0)); then echo "FAIL: $what: no result rows"; cat "$out"; fail=1; return; fi
  echo "ok: $what ($rows rows, tcp to every peer)"
}

for algo in naive ps ring rhd tree; do
  run "$algo dense float sum 4 B..4 MiB" -a "$algo" -b 4 -e 4M -f 32 -n 2 -w 1 -c 1
  grep -E '^ +4194304 ' "$out" | grep -qw "$algo" ||
    { echo "FAIL: $algo: the 4 MiB row does not show algorithm $algo"; fail=1; }
  # The datatype and op sweep moves at most 64 KiB: what it proves does not depend on the rate.
  [ "$rate" = none ] &&
    run "$algo dense every datatype and op" -a "$algo" -b 1K -e 64K -f 64 -n 1 -w 1 -c 1 -d all -o all
  run "$algo every codec 64K and 1M" -a "$algo" -b 64K -e 1M -f 16 -n 1 -w 1 -c 1 \
    -z fp16 -z bf16 -z int8 -z qsgd -z onebit -z terngrad -z topk:ratio=0.01 -z randk:ratio=0.01 \
    -z threshold:threshold=1 -z dgc:ratio=0.01 -z powersgd:rank=2
done
rm -f "$out"
((fail == 0)) && echo "multihost $rate: every algorithm bit-exact over tcp between 4 lab hosts"
exit "$fail"
