#!/usr/bin/env bash
# Test of one peer driver (meson test --suite compare): 4 ranks, 4K to 64K, checking on. Passes
# when the table says 0 wrong elements and the -J file is squeeze-perf/1 JSON with the rows the
# sizes call for, every one checked and right; exits 77 (skip) when the peer is not installed.
# Kind `script` runs compare.sh itself at small sizes: every run it does not skip must succeed
# and appear in the combined table.
# Usage: compare_test.sh gloo|mpi|torch SQZRUN DRIVER
#        compare_test.sh script BUILD_ROOT COMPARE_SH
set -euo pipefail

if (($# != 3)); then
  echo "usage: $0 gloo|mpi|torch SQZRUN DRIVER, or $0 script BUILD_ROOT COMPARE_SH" >&2
  exit 2
fi
kind=$1 sqzrun=$2 driver=$3
py=/usr/bin/python3  # Debian's, where numpy and torch live
skip() {
  echo "SKIP: $*"
  exit 77
}
[ -x "$py" ] || skip "$py is needed to read the JSON"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "$kind" = script ]; then
  status=0
  # With no SQZ_* variable at all (as a user's shell has), which once made the table's settings
  # line fail the script under pipefail before any run.
  mapfile -t sqz_vars < <(env | sed -n 's/^\(SQZ_[A-Z0-9_]*\)=.*/-u\n\1/p')
  env "${sqz_vars[@]}" bash "$driver" -B "$sqzrun" -o "$work" -b 4K -e 16K -f 4 -i 2 -w 1 -t 120 ||
    status=$?
  if ((status != 0)); then
    echo "FAIL: compare.sh exited with status $status"
    exit 1
  fi
  if grep -q "Squeeze ran with" "$work/table.md"; then
    echo "FAIL: table.md names SQZ_* settings where none was set"
    exit 1
  fi
  # Every run that ran must have rows in the table, none of them wrong.
  while IFS=$'\t' read -r name library transport _ outcome; do
    [ "$outcome" = ok ] || continue
    rows=$(grep -c "^| [0-9.]*[KMG]\? | $library | $transport |" "$work/table.md" || true)
    if ((rows < 2)); then
      echo "FAIL: run $name ($library, $transport) has $rows rows in table.md, not one per size"
      exit 1
    fi
  done <"$work/manifest.tsv"
  if grep -q WRONG "$work/table.md"; then
    echo "FAIL: table.md reports wrong results"
    exit 1
  fi
  ran=$(grep -c $'\tok$' "$work/manifest.tsv" || true)
  if ((ran == 0)); then
    echo "FAIL: compare.sh ran nothing"
    exit 1
  fi
  echo "compare.sh ok: $ran runs in the table"
  exit 0
fi
args=(-b 4K -e 64K -f 4 -n 2 -w 1 -c 1 -J "$work/out.json")
case "$kind" in
  gloo)
    cmd=("$sqzrun" --timeout 120 -n 4 "$driver" --store "$work" -A all "${args[@]}")
    library=gloo rows_per_size=3  # three algorithms, in place only
    ;;
  mpi)
    mpirun=$(command -v mpirun) || skip "mpirun not found (openmpi-bin is not installed)"
    # Loopback only: Open MPI's out-of-band channel on lo, the ranks over shared memory.
    cmd=("$mpirun" --allow-run-as-root --oversubscribe --timeout 120
      --mca oob_tcp_if_include lo --mca btl 'self,vader' -np 4 "$driver" "${args[@]}")
    library=openmpi rows_per_size=2  # out of place and in place
    ;;
  torch)
    "$py" -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null ||
      skip "python3-torch with torch.distributed is not installed"
    cmd=("$sqzrun" --timeout 120 -n 4 "$py" "$driver" --store "$work" "${args[@]}")
    library=torch-gloo rows_per_size=1  # in place only
    ;;
  *)
    echo "$0: unknown driver kind '$kind' (gloo, mpi, torch)" >&2
    exit 2
    ;;
esac

echo "+ ${cmd[*]}"
status=0
"${cmd[@]}" >"$work/out.txt" 2>&1 || status=$?
cat "$work/out.txt"
if ((status != 0)); then
  echo "FAIL: the driver exited with status $status"
  exit 1
fi
grep -q '^# Out of bounds values : 0 OK' "$work/out.txt" || {
  echo "FAIL: the table does not say '# Out of bounds values : 0 OK'"
  exit 1
}
"$py" - "$work/out.json" "$library" "$((3 * rows_per_size))" <<'EOF'
import json, sys
path, library, want_rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path) as f:
    doc = json.load(f)
problems = []
def expect(cond, what):
    if not cond:
        problems.append(what)
expect(doc.get("format") == "squeeze-perf/1", "format is %r" % doc.get("format"))
expect(doc.get("library") == library, "library is %r, not %r" % (doc.get("library"), library))
expect(doc.get("collective") == "allreduce", "collective is %r" % doc.get("collective"))
expect(doc.get("nranks") == 4, "nranks is %r, not 4" % doc.get("nranks"))
expect(len(doc.get("hosts", [])) == 4, "hosts has %d names, not 4" % len(doc.get("hosts", [])))
rows = doc.get("rows", [])
expect(len(rows) == want_rows, "%d rows, not %d" % (len(rows), want_rows))
sizes = sorted({r["size"] for r in rows})
expect(sizes == [4096, 16384, 65536], "sizes %r, not 4K 16K 64K" % sizes)
for r in rows:
    where = "row %s B inplace=%s algo=%s" % (r.get("size"), r.get("inplace"), r.get("algo"))
    expect(r.get("wrong") == 0, where + ": wrong is %r" % r.get("wrong"))
    expect(r.get("count") == r.get("size", 0) // 4, where + ": count does not match size")
    expect(r.get("type") == "float" and r.get("redop") == "sum", where + ": not float sum")
    expect(isinstance(r.get("time_us"), (int, float)) and r["time_us"] > 0, where + ": no time")
    bus = r.get("algbw", 0) * 1.5
    expect(abs(r.get("busbw", -1) - bus) <= 1e-3 * max(bus, 1e-9) + 1e-6,
           where + ": busbw is not algbw * 2(n-1)/n")
if problems:
    print("FAIL: " + path + ":\n  " + "\n  ".join(problems))
    sys.exit(1)
print("JSON ok: %d rows, library %s" % (len(rows), library))
EOF
