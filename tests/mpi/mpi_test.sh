#!/usr/bin/env bash
# Squeeze in MPI programs, under mpirun (meson test --suite mpi). Cases:
#   example     examples/mpi/allreduce_mpi.c (sqzCommInitFromMpi, checked against MPI_Allreduce)
#               at 2, 3 and 4 ranks: every check passes and rank 0 says "allreduce_mpi: OK";
#   init-error  the same at 3 ranks with rank 0 unable to make the unique id (SQZ_SOCKET_IFNAME
#               names no interface there): every rank returns the error and exits 1, promptly,
#               rather than waiting in MPI_Bcast for an id that never comes;
#   env         the plain C example (examples/allreduce.c, no MPI calls) under mpirun -np 3:
#               sqzCommInitFromEnv reads OMPI_COMM_WORLD_RANK/SIZE, with MASTER_ADDR/MASTER_PORT
#               for the rendezvous that rank 0 hosts.
# Open MPI runs on loopback only: its out-of-band channel on lo, the ranks over shared memory
# (the flags perf/compare/compare_test.sh uses). Exits 77 (meson's skip) when mpirun or the
# example is missing. Usage: mpi_test.sh example|init-error|env EXAMPLE
set -uo pipefail

if (($# != 2)); then
  echo "usage: $0 example|init-error|env EXAMPLE" >&2
  exit 2
fi
case_name=$1 example=$2
skip() {
  echo "SKIP: $*"
  exit 77
}
mpirun=$(command -v mpirun) || skip "mpirun not found (install openmpi-bin: scripts/install-deps.sh)"
[ -x "$example" ] || skip "$example is not built (meson found no MPI for C: install libopenmpi-dev)"
# shellcheck source=../checks.sh
source "$(dirname "$0")/../checks.sh" "mpi-$case_name"

# A launcher environment outside would outrank Open MPI's in sqzCommInitFromEnv.
unset SQZ_UNIQUE_ID SQZ_RANK SQZ_WORLD_SIZE SQZ_ROOT RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
export SQZ_SOCKET_IFNAME=${SQZ_SOCKET_IFNAME:-lo}
# Each run is bounded twice: mpirun's own --timeout (it kills the job and exits non-zero) and
# timeout(1) around it in case mpirun itself hangs.
mpi=(timeout 90 "$mpirun" --allow-run-as-root --oversubscribe --timeout 60
  --mca oob_tcp_if_include lo --mca btl 'self,vader')

run() {  # run NAME ARGS...: the command's output in $tmp/NAME.out, its exit status in $status
  local name=$1
  shift
  echo "+ $*"
  status=0
  "$@" >"$tmp/$name.out" 2>&1 || status=$?
  cat "$tmp/$name.out"
}

case $case_name in
  example)
    for n in 2 3 4; do
      run "np$n" "${mpi[@]}" -np "$n" "$example"
      out=$tmp/np$n.out
      if ((status != 0)); then
        fail "$n ranks: exit status $status"
      elif grep -q "FAILED" "$out" || [ "$(grep -c '^allreduce_mpi: OK$' "$out")" != 1 ]; then
        fail "$n ranks: no single 'allreduce_mpi: OK', or a check failed"
      elif [ "$(grep -c '^allreduce_mpi: ok: ' "$out")" -lt 6 ]; then
        fail "$n ranks: fewer than the 6 checks of the default top-k run passed"
      else
        pass "$n ranks: $(grep -c '^allreduce_mpi: ok: ' "$out") checks"
      fi
    done
    ;;
  init-error)
    # Rank 0 alone gets an interface name that matches nothing, so its sqzGetUniqueId fails.
    start=$SECONDS
    # shellcheck disable=SC2016  # expanded by the sh that mpirun starts, per rank
    run init-error "${mpi[@]}" -np 3 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then
        export SQZ_SOCKET_IFNAME=sqz-no-such-interface; fi; exec "$0"' "$example"
    out=$tmp/init-error.out
    elapsed=$((SECONDS - start))
    failed=$(grep -c "sqzCommInitFromMpi(MPI_COMM_WORLD) failed" "$out")
    if ((status == 0 || status == 124)); then
      fail "exit status $status: expected 1 from every rank (124: timed out)"
    elif grep -q "MPI_ABORT\|time limit" "$out" || ((elapsed > 30)); then
      fail "the job was aborted or ran into a time limit (${elapsed}s) instead of every rank \
returning the error"
    elif ((failed != 3)); then
      fail "$failed of 3 ranks reported that sqzCommInitFromMpi failed"
    elif ! grep -q "rank 0: sqzCommInitFromMpi(MPI_COMM_WORLD) failed: system error" "$out"; then
      fail "rank 0 did not report its sqzGetUniqueId failure as a system error"
    else
      pass "rank 0's failed sqzGetUniqueId reached all 3 ranks; each exited 1"
    fi
    ;;
  env)
    # Rank 0 hosts the rendezvous on MASTER_PORT; retry on a port someone else took.
    secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    for attempt in 1 2 3; do
      port=$((20000 + RANDOM % 30000))
      run "env$attempt" "${mpi[@]}" -np 3 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port \
        -x SQZ_SECRET="$secret" -x SQZ_SOCKET_IFNAME -x SQZ_TIMEOUT_MS=20000 "$example"
      out=$tmp/env$attempt.out
      ((status != 0)) && grep -q "Address already in use" "$out" && continue
      break
    done
    means=$(grep -c 'mean gradient = \[1 2 3 4\]' "$out")
    if ((status != 0)); then
      fail "sqzCommInitFromEnv under mpirun -np 3: exit status $status"
    elif ((means != 3)); then
      fail "$means of 3 ranks printed the mean [1 2 3 4]"
    else
      pass "sqzCommInitFromEnv under mpirun -np 3 (OMPI_COMM_WORLD_RANK/SIZE, port $port)"
    fi
    ;;
  *)
    echo "$0: unknown case '$case_name' (example, init-error, env)" >&2
    exit 2
    ;;
esac
if ((failures != 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
