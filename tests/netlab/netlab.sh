#!/usr/bin/env bash
# netlab.sh: a lab of N test hosts on this machine, as Linux network namespaces joined by a
# switch, with every link shaped to a chosen rate, for running one rank per host over a network
# that is not loopback.
#
# Topology: hosts NAME-h0 .. NAME-h<N-1>, each with one interface lab0 at 198.18.0.<i+1>/24
# (198.18.0.0/15 is reserved for benchmarking; no other range is ever used), joined by veth pairs
# to a bridge inside a switch namespace NAME-sw. Traffic stays between those namespaces: the
# machine's own namespace has no address on the lab. Each link is shaped in both directions with
# tc tbf (the host's egress on lab0, and the switch port's egress towards the host), as a switch
# with per-port rate limits would; netem is not in this kernel, so there is no added delay: the
# -l latency is tbf's bound on queueing delay. With --shape switch only the switch ports are
# shaped: the hosts send at the veth's speed and the bottleneck queue, where packets are dropped
# when it overflows, is the switch's (faster hosts behind a slower link, or a switch port with a
# shallow buffer); with both (the default) a host's own qdisc holds its queue and TCP backs off
# before the switch drops anything.
#
#   netlab.sh [opts] -- PROGRAM ARGS   up, verify, run one rank per host, down (always, on any exit)
#   netlab.sh up [opts]                create and verify the lab, leave it up
#   netlab.sh run [opts] -- PROGRAM    run one rank per host on the lab that is up
#   netlab.sh mpirun [opts] -- PROGRAM run PROGRAM with Open MPI's mpirun, one rank per host
#   netlab.sh exec HOST -- COMMAND     run a command on host HOST (0-based)
#   netlab.sh verify [opts]            measure every link again (see below)
#   netlab.sh down [opts]              delete the lab (idempotent)
#   netlab.sh check                    exit 0 if this machine can make a lab, else print why, exit 77
#
# Options: -n N hosts (default 4), -r RATE (tc rate such as 1gbit, 10gbit, 500mbit; 'none': not
# shaped; default none), -l LATENCY (tbf queueing bound, default 20ms), --shape both|switch
# (where the links are shaped, default both), --name NAME (default
# sqzlab), --timeout SECONDS (bound on a run, default 900), --mtu BYTES (default 1500),
# --no-verify.
#
# Verification: every host sends to the next one at once (a ring, as ring all-reduce loads the
# links) for 2 s with sqz-netprobe; each stream's goodput must be within 10% of the rate (TCP/IP
# headers take about 4.4% of a 1500-byte frame), or the lab is torn down with an error. One
# failed round is retried, since this machine's other load can stall a sender. The measured
# rates are printed; unshaped labs only report them. A rate the machine's CPUs cannot carry
# (on 2 cores, 4 hosts top out near 2.5 Gbit/s per link) fails verification rather than being
# reported as if it held: `up` (and a run) then exits 3, where a lab that cannot be made, a
# stream that carried nothing or a stream over its rate exits 1 or 2.
#
# Ranks get SQZ_ROOT=198.18.0.1:<random port> (rank 0 hosts the rendezvous), SQZ_RANK,
# SQZ_WORLD_SIZE, SQZ_LOCAL_RANK=0, SQZ_LOCAL_SIZE=1, a fresh SQZ_SECRET, SQZ_SOCKET_IFNAME==lab0
# and GLOO_SOCKET_IFNAME=lab0; other SQZ_* variables pass through (nothing tells the tuner the
# links' rate: its init-time calibration measures every link, src/core/calibrate.h). Rank 0's output goes to stdout
# and stderr; the others' to logs that are printed when a rank fails (all of them with
# --tag-output). Exit status: the first failing rank's, 124 on timeout. Needs root, iproute2 and
# the sch_tbf qdisc; sqz-netprobe is found next to the build's perf binaries (SQZ_NETPROBE overrides).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

nhosts=4 rate=none latency=20ms shape_at=both name=sqzlab timeout_s=900 mtu=1500 verify=1 tag_output=0
netprobe=${SQZ_NETPROBE:-}

die() { echo "netlab: $*" >&2; exit 2; }

parse_opts() {
  while (($#)); do
    case $1 in
      -n) nhosts=${2:?-n needs a host count}; shift 2 ;;
      -r) rate=${2:?-r needs a rate}; shift 2 ;;
      -l) latency=${2:?-l needs a latency}; shift 2 ;;
      --shape) shape_at=${2:?--shape needs both or switch}; shift 2 ;;
      --name) name=${2:?--name needs a name}; shift 2 ;;
      --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
      --mtu) mtu=${2:?--mtu needs bytes}; shift 2 ;;
      --no-verify) verify=0; shift ;;
      --tag-output) tag_output=1; shift ;;
      --) shift; program=("$@"); return ;;
      *) die "unknown option '$1' (see the top of $0)" ;;
    esac
  done
  program=()
}

validate() {
  [[ $nhosts =~ ^[0-9]+$ ]] && ((nhosts >= 1 && nhosts <= 200)) ||
    die "-n $nhosts: the lab has 1 to 200 hosts"
  [[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
    die "--name $name: 1-8 lowercase letters and digits, starting with a letter"
  [[ $rate == none || $rate =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit)$ ]] ||
    die "-r $rate: a tc rate such as 1gbit, 10gbit or 500mbit, or 'none'"
  [[ $latency =~ ^[0-9]+(ms|us)$ ]] || die "-l $latency: a time such as 20ms"
  [[ $shape_at == both || $shape_at == switch ]] || die "--shape $shape_at: both or switch"
  [[ $timeout_s =~ ^[0-9]+$ ]] && ((timeout_s > 0)) || die "--timeout $timeout_s: seconds > 0"
  [[ $mtu =~ ^[0-9]+$ ]] && ((mtu >= 576 && mtu <= 65000)) || die "--mtu $mtu: 576 to 65000"
}

# Rate in bit/s from a tc rate string.
rate_bps() {
  local r=$1 num unit
  num=${r%%[kmg]bit}; num=${num%bit}
  unit=${r#"$num"}
  case $unit in
    kbit) awk -v n="$num" 'BEGIN{printf "%.0f", n*1e3}' ;;
    mbit) awk -v n="$num" 'BEGIN{printf "%.0f", n*1e6}' ;;
    gbit) awk -v n="$num" 'BEGIN{printf "%.0f", n*1e9}' ;;
    *) awk -v n="$num" 'BEGIN{printf "%.0f", n}' ;;
  esac
}

host_ns() { echo "$name-h$1"; }
host_addr() { echo "198.18.0.$(($1 + 1))"; }
switch_ns() { echo "$name-sw"; }
state_file() { echo "/run/netlab-$name.state"; }

check() {
  if [ "$(id -u)" != 0 ]; then echo "netlab: needs root to create network namespaces"; return 77; fi
  command -v ip >/dev/null || { echo "netlab: no 'ip' command (install iproute2)"; return 77; }
  command -v tc >/dev/null || { echo "netlab: no 'tc' command (install iproute2)"; return 77; }
  local probe="sqzprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netlab: 'ip netns add' is not allowed here (no CAP_SYS_ADMIN or no netns support)"
    return 77
  fi
  local ok=0
  if ip -n "$probe" link add p0 type veth peer name p1 2>/dev/null &&
     ip -n "$probe" link set p0 up 2>/dev/null &&
     ip netns exec "$probe" tc qdisc add dev p0 root tbf rate 1gbit burst 128kb latency 20ms \
       2>/dev/null; then
    ok=1
  fi
  ip netns del "$probe" 2>/dev/null
  ((ok)) || { echo "netlab: veth pairs or the tbf qdisc are not available in this kernel"; return 77; }
  return 0
}

find_netprobe() {
  if [ -n "$netprobe" ]; then [ -x "$netprobe" ] || die "SQZ_NETPROBE=$netprobe is not executable"; return; fi
  local b
  for b in "$repo/build/tests/netlab/sqz-netprobe" "$repo"/build*/tests/netlab/sqz-netprobe; do
    if [ -x "$b" ]; then netprobe=$b; return; fi
  done
  die "sqz-netprobe not found: build the project (scripts/build.sh) or set SQZ_NETPROBE"
}

# Whatever still runs on a host gets SIGTERM, then SIGKILL after a grace period; then every
# namespace goes, and with it every interface of the lab.
down() {
  local ns spaces pids=""
  spaces=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(h[0-9]+|sw)$")
  for ns in $spaces; do pids+=" $(ip netns pids "$ns" 2>/dev/null)"; done
  if [ -n "${pids// /}" ]; then
    kill -TERM $pids 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 $pids 2>/dev/null || break; sleep 0.2; done
    kill -KILL $pids 2>/dev/null
  fi
  for ns in $spaces; do ip netns del "$ns" 2>/dev/null; done
  rm -f "$(state_file)"
  [ -n "${run_dir:-}" ] && rm -rf "$run_dir"
  return 0
}

# tbf: burst of 1 ms at the rate (at least 64 KiB, so a timer tick never starves the link).
shape() {  # shape NS DEV
  [ "$rate" = none ] && return 0
  local bps burst
  bps=$(rate_bps "$rate")
  burst=$(( bps / 8 / 1000 )); ((burst < 65536)) && burst=65536
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst "$burst" \
    latency "$latency" || die "tc tbf on $1/$2 failed"
}

up() {
  check >/dev/null || { check; exit 77; }
  down
  local sw i h
  sw=$(switch_ns)
  ip netns add "$sw" || die "cannot create namespace $sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge || die "cannot create the bridge in $sw"
  ip -n "$sw" link set br0 up
  for ((i = 0; i < nhosts; i++)); do
    h=$(host_ns "$i")
    ip netns add "$h" || die "cannot create namespace $h"
    ip -n "$h" link set lo up
    ip netns exec "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null
    ip link add "${name}v$i" mtu "$mtu" netns "$h" type veth peer name "p$i" mtu "$mtu" netns "$sw" ||
      die "cannot create the veth pair of host $i"
    ip -n "$h" link set "${name}v$i" name lab0
    ip -n "$h" addr add "$(host_addr "$i")/24" dev lab0
    ip -n "$h" link set lab0 up
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    [ "$shape_at" = switch ] || shape "$h" lab0
    shape "$sw" "p$i"
  done
  printf 'nhosts=%s\nrate=%s\nlatency=%s\nshape_at=%s\nmtu=%s\n' "$nhosts" "$rate" "$latency" \
    "$shape_at" "$mtu" >"$(state_file)"
  local shaping="tbf latency $latency, shaped at both ends"
  [ "$shape_at" = switch ] && shaping="tbf latency $latency, shaped at the switch only"
  [ "$rate" = none ] && shaping="unshaped"
  echo "netlab: $nhosts hosts $(host_addr 0)..$(host_addr $((nhosts - 1))), links $rate ($shaping), mtu $mtu"
}

load_state() {
  local f
  f=$(state_file)
  [ -f "$f" ] || die "no lab '$name' is up (run: $0 up)"
  # shellcheck disable=SC1090
  source "$f"
}

verify_links() {
  verify_round || { echo "netlab: retrying the link check once" >&2; verify_round; }
}

# Every host sends to the next for 2 s at once; prints each stream's Gbit/s and fails when a
# shaped stream is off its rate by more than 10%: 3 where every such stream was only slower (the
# machine's CPUs did not carry the rate), else 1.
verify_round() {
  ((nhosts >= 2)) || { echo "netlab: one host, no links to verify"; return 0; }
  find_netprobe
  local dir i next port=5201 fail=0 slow=0 want="" got
  dir=$(mktemp -d)
  for ((i = 0; i < nhosts; i++)); do
    next=$(((i + 1) % nhosts))
    timeout 30 ip netns exec "$(host_ns "$next")" "$netprobe" recv "$(host_addr "$next")" "$port" \
      >"$dir/recv$next" 2>&1 &
  done
  for ((i = 0; i < nhosts; i++)); do
    next=$(((i + 1) % nhosts))
    timeout 30 ip netns exec "$(host_ns "$i")" "$netprobe" send "$(host_addr "$next")" "$port" 2 \
      >"$dir/send$i" 2>&1 &
  done
  wait
  [ "$rate" != none ] && want=$(awk -v b="$(rate_bps "$rate")" 'BEGIN{printf "%.4f", b/1e9}')
  local line="netlab: link check (every host sends to the next for 2 s, Gbit/s):"
  for ((i = 0; i < nhosts; i++)); do
    next=$(((i + 1) % nhosts))
    got=$(awk 'NF==3{print $3}' "$dir/recv$next")
    if [ -z "$got" ]; then
      echo "netlab: link $i -> $next carried nothing: $(cat "$dir/recv$next" "$dir/send$i")" >&2
      fail=1; continue
    fi
    line+=" $i->$next $got"
    if [ -n "$want" ] &&
       ! awk -v g="$got" -v w="$want" 'BEGIN{exit !(g >= 0.9*w && g <= 1.1*w)}'; then
      echo "netlab: link $i -> $next carried $got Gbit/s, not within 10% of $want" >&2
      if awk -v g="$got" -v w="$want" 'BEGIN{exit !(g < 0.9*w)}'; then slow=1; else fail=1; fi
    fi
  done
  echo "$line${want:+ (rate $want)}"
  rm -rf "$dir"
  ((fail)) && return 1
  ((slow)) && return 3
  return 0
}

run_ranks() {
  ((${#program[@]})) || die "nothing to run: give the program after --"
  local port secret dir i pid rc=0 first_rc=0 status
  port=$((20000 + RANDOM % 20000))
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  dir=$(mktemp -d)
  run_dir=$dir
  local pids=()
  for ((i = 0; i < nhosts; i++)); do
    local envs=(env -u SQZ_UNIQUE_ID SQZ_ROOT="$(host_addr 0):$port" SQZ_RANK="$i"
      SQZ_WORLD_SIZE="$nhosts" SQZ_LOCAL_RANK=0 SQZ_LOCAL_SIZE=1 SQZ_SECRET="$secret"
      SQZ_SOCKET_IFNAME="=lab0" GLOO_SOCKET_IFNAME=lab0 NETLAB_HOST="$i")
    if ((i == 0 && !tag_output)); then
      timeout -k 5 "$timeout_s" ip netns exec "$(host_ns "$i")" "${envs[@]}" "${program[@]}" &
    else
      timeout -k 5 "$timeout_s" ip netns exec "$(host_ns "$i")" "${envs[@]}" "${program[@]}" \
        >"$dir/rank$i.log" 2>&1 &
    fi
    pids+=($!)
  done
  for ((i = 0; i < nhosts; i++)); do
    wait "${pids[$i]}"; status=$?
    if ((status != 0)); then
      rc=1
      ((first_rc == 0)) && first_rc=$status
      echo "netlab: rank $i exited with status $status$( ((status == 124)) && echo " (timed out after ${timeout_s}s)")" >&2
    fi
  done
  for ((i = 0; i < nhosts; i++)); do
    [ -f "$dir/rank$i.log" ] || continue
    if ((tag_output)); then
      sed "s/^/[$i] /" "$dir/rank$i.log"
    elif ((rc)); then
      echo "--- rank $i ---" >&2; tail -n 20 "$dir/rank$i.log" >&2
    fi
  done
  rm -rf "$dir"
  return "$first_rc"
}

# Open MPI across the hosts: mpirun runs on host 0 and starts its daemons on the others through
# an rsh agent that enters their namespaces (there is no ssh between namespaces).
run_mpi() {
  ((${#program[@]})) || die "nothing to run: give the program after --"
  command -v mpirun >/dev/null || die "mpirun not found (install openmpi-bin)"
  local hosts="" i agent
  for ((i = 0; i < nhosts; i++)); do hosts+="${hosts:+,}$(host_addr "$i")"; done
  agent=$(mktemp /tmp/netlab-rsh.XXXXXX)
  cat >"$agent" <<EOF
#!/usr/bin/env bash
# mpirun's rsh agent for netlab '$name': "agent HOST COMMAND..." runs COMMAND on that lab host.
host=\$1; shift
case \$host in 198.18.0.*) ;; *) echo "netlab-rsh: \$host is not a lab host" >&2; exit 1 ;; esac
exec ip netns exec "$name-h\$(( \${host##*.} - 1 ))" /bin/sh -c "\$*"
EOF
  chmod +x "$agent"
  timeout -k 5 "$timeout_s" ip netns exec "$(host_ns 0)" mpirun --allow-run-as-root -np "$nhosts" \
    --host "$hosts" --mca plm_rsh_agent "$agent" --mca btl tcp,self \
    --mca btl_tcp_if_include lab0 --mca oob_tcp_if_include lab0 "${program[@]}"
  local rc=$?
  rm -f "$agent"
  return "$rc"
}

cmd=oneshot
case ${1:-} in
  up | run | mpirun | exec | verify | down | check) cmd=$1; shift ;;
esac

case $cmd in
  check) check; exit $? ;;
  exec)
    host=${1:?exec needs a host number}; shift
    [ "${1:-}" = -- ] && shift
    exec ip netns exec "$name-h$host" "$@" ;;
esac

parse_opts "$@"
validate
case $cmd in
  up)
    up
    if ((verify)); then
      verify_links || { rc=$?; down; exit "$rc"; }
    fi ;;
  verify) load_state; verify_links ;;
  down) down ;;
  run) load_state; run_ranks ;;
  mpirun) load_state; run_mpi ;;
  oneshot)
    ((${#program[@]})) || die "nothing to run: give the program after -- (or a subcommand)"
    trap down EXIT
    trap 'exit 130' INT TERM HUP
    up
    if ((verify)); then verify_links || exit; fi
    run_ranks ;;
esac
