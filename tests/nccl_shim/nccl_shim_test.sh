#!/usr/bin/env bash
# An unmodified NCCL program (nccl_program.c) over libsqueeze-nccl.so.2, found as libnccl.so.2
# through LD_LIBRARY_PATH. Usage: nccl_shim_test.sh CASE SQZRUN PROGRAM SHIM_DIR
#   sqzrun   collectives bit-exact at 2, 3 and 4 ranks under sqzrun
#   mpirun   the same under Open MPI's mpirun at 2, 3 and 4 ranks (skips without it)
#   initall  ncclCommInitAll: 3 communicators in one process, driven from one thread in groups
#   recovery a rank leaves; the others revoke and shrink as NCCL documents, at 2 and 4 ranks
#   codec    SQZ_NCCL_CODEC: the same gradient loop dense and through top-k; the compressed run
#            sends a fraction of the dense run's bytes (SQZ_DEBUG=INFO's counts per communicator
#            and per codec, here through NCCL_DEBUG=INFO) and its errors stay within top-k's
#            bounds (below); float32 buffers under 1M and int32 ones stay exact; with
#            NCCL_SHIM_CODEC_DEVICE=1 on device buffers only (skipped, 77, without a GPU)
#   device   collectives on device buffers (a GPU, or the CUDA stand-in) under sqzrun at 2 and 4
#            ranks, one rank per process, each with CUDA_DEVICE_MAX_CONNECTIONS (a GPU's hardware
#            work queues per process) at 8 (CUDA's default), 4 and 1 (NCCL_SHIM_CONNECTIONS
#            overrides the list); the program frees its buffers right after enqueueing a reduce,
#            as NCCL programs do. Every run is bounded (NCCL_SHIM_RUN_S, default 45 s); it
#            passes when sqzrun -v reports every rank exited with status 0 and rank 0 printed
#            the program's verdict on device buffers. A run that times out ends the case (the
#            rest would wait as long); other failures are reported per run. Host buffers (no
#            GPU visible): skipped (77), or a failure with NCCL_SHIM_NEED_DEVICE=1 (the
#            stand-in's build sets it: the emulated GPU is always there)
set -uo pipefail
case_name=$1 sqzrun=$2 program=$3 shim_dir=$4
fail() { echo "FAIL: $*"; exit 1; }
# Each run's time limit: SECONDS times NCCL_SHIM_TIMEOUT_FACTOR (default 1). The GPU bundle's
# run.sh raises it so that its own limit comes first and takes the ranks' backtraces.
limit() { echo $(($1 * ${NCCL_SHIM_TIMEOUT_FACTOR:-1})); }
export LD_LIBRARY_PATH=$shim_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# The loader must pick the shim for libnccl.so.2 (the CUDA toolkit's real one may be on the path).
resolved=$(ldd "$program" | awk '$1 == "libnccl.so.2" {print $3}')
[ "$(readlink -f "$resolved")" = "$(readlink -f "$shim_dir/libsqueeze-nccl.so.2")" ] \
  || fail "libnccl.so.2 resolves to '$resolved', not the shim in $shim_dir"

case $case_name in
  sqzrun)
    for n in 2 3 4; do
      rm -f "$dir/id"
      timeout "$(limit 120)" "$sqzrun" -n "$n" "$program" collectives "$dir/id" || fail "$n ranks: exit $?"
    done
    ;;
  mpirun)
    mpirun=$(command -v mpirun) || { echo "SKIP: mpirun not found (install openmpi-bin)"; exit 77; }
    for n in 2 3 4; do
      rm -f "$dir/id"
      timeout "$(limit 120)" "$mpirun" --allow-run-as-root --oversubscribe -np "$n" --timeout "$(limit 100)" \
        --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
        -x LD_LIBRARY_PATH -x SQZ_SOCKET_IFNAME -x SQZ_TIMEOUT_MS \
        "$program" collectives "$dir/id" || fail "mpirun -np $n: exit $?"
    done
    ;;
  initall)
    timeout "$(limit 60)" "$program" initall 3 || fail "initall: exit $?"
    ;;
  recovery)
    for n in 2 4; do
      rm -f "$dir/id"
      SQZ_TIMEOUT_MS=5000 timeout "$(limit 60)" "$sqzrun" -n "$n" "$program" recovery "$dir/id" \
        || fail "$n ranks: exit $?"
    done
    ;;
  codec)
    run() {  # run NAME [VAR=VALUE...]: 4 ranks of the gradient loop; output in $dir/NAME
      local name=$1; shift
      rm -f "$dir/id"
      env "$@" NCCL_DEBUG=INFO SQZ_DEBUG_SUBSYS=INIT,COMPRESS timeout "$(limit 180)" "$sqzrun" -n 4 "$program" gradients "$dir/id" \
        >"$dir/$name" 2>&1 || { cat "$dir/$name"; fail "$name run: exit $?"; }
      grep "nccl_program" "$dir/$name"
    }
    # Bytes rank 0 sent over its communicator's life ("rank 0: communicator ... sent N payload").
    sent() { grep -o "rank 0: communicator [0-9a-f]* closed after [0-9]* calls; sent [0-9]*" "$dir/$1" | awk '{print $NF}'; }
    field() { grep -o "$2=[0-9.e+-]*" "$dir/$1" | head -1 | cut -d= -f2; }
    # A bad value fails ncclCommInitRank on every rank, saying why, before any all-reduce.
    for bad in "1M-inf=nosuch:ratio=0.1" "1M-1K=topk"; do
      rm -f "$dir/id"
      out=$(SQZ_NCCL_CODEC=$bad timeout "$(limit 60)" "$sqzrun" -n 2 "$program" gradients "$dir/id" 2>&1) \
        && fail "SQZ_NCCL_CODEC=$bad was accepted"
      grep -q "ncclCommInitRank.*SQZ_NCCL_CODEC" <<<"$out" || { echo "$out"; fail "SQZ_NCCL_CODEC=$bad: no message naming it"; }
      echo "SQZ_NCCL_CODEC=$bad refused: $(grep -o "SQZ_NCCL_CODEC.*" <<<"$out" | head -1)"
    done
    run dense
    # NCCL_SHIM_CODEC_DEVICE=1 (suite 'gpu'): the same on device buffers, where ranks on one host
    # run their calls on the stream; host buffers (no GPU visible) skip, as the device case does.
    if [ "${NCCL_SHIM_CODEC_DEVICE:-0}" = 1 ] &&
      grep -q "gradients: .* host buffers" "$dir/dense"; then
      [ "${NCCL_SHIM_NEED_DEVICE:-0}" = 1 ] &&
        fail "no device buffers, though NCCL_SHIM_NEED_DEVICE=1"
      echo "SKIP: no GPU visible: nccl_program ran on host buffers"
      exit 77
    fi
    run topk SQZ_NCCL_CODEC=1M-inf=topk:ratio=0.1,0-1M=dense
    dense_bytes=$(sent dense) topk_bytes=$(sent topk)
    [ -n "$dense_bytes" ] && [ -n "$topk_bytes" ] || fail "no 'sent N payload bytes' INFO line"
    echo "rank 0 sent $dense_bytes payload bytes dense, $topk_bytes with SQZ_NCCL_CODEC"
    # The codec's own count, from rank 0's log line (the first "codec ... destroyed" line).
    codec_line=$(grep -o "codec topk:ratio=0.1 destroyed after 30 calls; sent [0-9]* payload bytes for [0-9]* dense" "$dir/topk" | head -1)
    [ -n "$codec_line" ] || fail "no INFO line of a top-k codec used for the 30 gradient all-reduces"
    echo "$codec_line"
    read -r codec_wire codec_dense <<<"$(awk '{print $8, $12}' <<<"$codec_line")"
    [ "$(field dense first_rel_err)" = 0 ] && [ "$(field dense cumulative_rel_err)" = 0 ] \
      || fail "the dense run is not exact"
    # Bounds an NCCL program can check without the codec's residuals: top-k keeps the largest
    # values, so one step's error is well below the sum itself (relative error < 1; Squeeze
    # re-selects k at every hop, so sqrt(1 - k/n) per rank is not a bound on the result), and
    # error feedback sends later what a step held back, so over 30 steps the summed result's
    # relative error falls far below one step's. (The exact identity, results plus residuals
    # equal the exact sum, needs the residuals: examples/mpi/allreduce_mpi.c checks it.)
    awk -v d="$dense_bytes" -v t="$topk_bytes" -v cw="$codec_wire" -v cd="$codec_dense" \
        -v e1="$(field topk first_rel_err)" -v ec="$(field topk cumulative_rel_err)" 'BEGIN {
      printf "top-k: first step relative error %.4f, summed over 30 steps %.4f; bytes %.1f%% of dense\n", e1, ec, 100 * t / d
      if (!(cw < cd / 3)) { print "FAIL: the top-k codec sent more than a third of its dense bytes"; exit 1 }
      # The int32 and small float buffers stay dense: the total over the communicator falls less.
      if (!(t < d * 0.6)) { print "FAIL: the communicator sent as much with top-k as without"; exit 1 }
      if (!(e1 > 0 && e1 < 1)) { print "FAIL: first-step error not in (0, 1)"; exit 1 }
      if (!(ec < e1 / 2)) { print "FAIL: error feedback did not bring the summed error down"; exit 1 }
    }' || exit 1
    ;;
  device)
    run_s=$(limit "${NCCL_SHIM_RUN_S:-45}") failed=() host=0
    for n in 2 4; do
      for conns in ${NCCL_SHIM_CONNECTIONS:-8 4 1}; do
        what="$n ranks, CUDA_DEVICE_MAX_CONNECTIONS=$conns"
        log="$dir/device-n$n-c$conns"
        rm -f "$dir/id"
        t0=$SECONDS
        # sqzrun stops every rank at --timeout (exit 124); timeout(1) bounds sqzrun itself.
        CUDA_DEVICE_MAX_CONNECTIONS=$conns timeout -k 5 $((run_s + 10)) "$sqzrun" -v \
          --timeout "$run_s" -n "$n" "$program" collectives "$dir/id" >"$log" 2>&1
        rc=$?
        secs=$((SECONDS - t0))
        bad=""
        for ((r = 0; r < n; r++)); do
          grep -Eq "^sqzrun: rank $r \(pid [0-9]+\) exited with status 0$" "$log" ||
            bad+=" rank $r: $(grep -Eo "^sqzrun: rank $r \(pid [0-9]+\) (exited|was killed).*" "$log" |
              sed 's/^sqzrun: rank [0-9]* (pid [0-9]*) //' | head -1 || echo 'no exit reported');"
        done
        if [ "$rc" = 0 ] && [ -z "$bad" ] && grep -q "^nccl_program collectives: $n ranks, host buffers" "$log"; then
          host=1
          echo "$what: the program ran on host buffers (no GPU visible)"
          break 2
        fi
        if [ "$rc" = 0 ] && [ -z "$bad" ] &&
          grep -Eq "^nccl_program collectives: $n ranks, device buffers, .*bit-exact: OK$" "$log"; then
          echo "$what: OK in ${secs}s: $(grep -o "$n ranks, device buffers.*" "$log")"
          continue
        fi
        failed+=("$what")
        echo "==== $what: FAILED after ${secs}s: exit $rc;${bad:- every rank exited 0, but no verdict line}"
        tail -n 40 "$log"
        # 124: sqzrun's --timeout (or timeout's); 137 after the limit: timeout's SIGKILL.
        if [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ "$secs" -ge "$run_s" ]; }; then
          echo "==== stopped at ${run_s}s: not trying the other configurations"
          break 2
        fi
      done
    done
    [ ${#failed[@]} = 0 ] || fail "device buffers: ${#failed[@]} run(s) failed: $(IFS=';'; echo "${failed[*]}")"
    if [ $host = 1 ]; then
      [ "${NCCL_SHIM_NEED_DEVICE:-0}" = 1 ] && fail "no device buffers, though NCCL_SHIM_NEED_DEVICE=1"
      echo "SKIP: no GPU visible: nccl_program ran on host buffers"
      exit 77
    fi
    ;;
  *) fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
