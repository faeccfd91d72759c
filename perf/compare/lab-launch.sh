# Sourced by compare.sh -L: runs every library's ranks on the network lab that is up
# (tests/netlab/netlab.sh up --name "$NETLAB_NAME"), one rank per lab host, instead of on
# loopback. Squeeze, Gloo and torch ranks start through 'netlab.sh run' (SQZ_RANK and friends,
# GLOO_SOCKET_IFNAME=lab0); Open MPI's through 'netlab.sh mpirun' (mpirun on host 0, the tcp
# BTL on lab0, so only the mpi-tcp run means anything there). The rank count must equal the
# lab's host count.
NETLAB=${NETLAB:-$here/../../tests/netlab/netlab.sh}
NETLAB_NAME=${NETLAB_NAME:-sqzlab}
netlab_hosts=$(sed -n 's/^nhosts=//p' "/run/netlab-$NETLAB_NAME.state" 2>/dev/null)
if [ -z "$netlab_hosts" ]; then
  echo "lab-launch.sh: no lab '$NETLAB_NAME' is up (tests/netlab/netlab.sh up --name $NETLAB_NAME)" >&2
  exit 2
fi
if [ "$netlab_hosts" != "$NRANKS" ]; then
  echo "lab-launch.sh: the lab has $netlab_hosts hosts but -n is $NRANKS: one rank per host" >&2
  exit 2
fi
# The lab as the table states it: netlab.sh up's rate, tbf queue bound and where it shapes.
lab_state() { sed -n "s/^$1=//p" "/run/netlab-$NETLAB_NAME.state" 2>/dev/null; }
SETTING="network lab '$NETLAB_NAME', $netlab_hosts hosts, links $(lab_state rate), tbf queue bound \
$(lab_state latency), shaped at $(lab_state shape_at | sed 's/^$/both/') ends"
SETTING=${SETTING/shaped at switch ends/shaped at the switch only}
SETTING=${SETTING/shaped at both ends/shaped at both ends (host and switch)}
launch_squeeze() {  # NRANKS CMD...
  shift
  bash "$NETLAB" run --name "$NETLAB_NAME" --timeout "$TIMEOUT" -- "$@"
}
launch_gloo() { launch_squeeze "$@"; }
launch_torch() { launch_squeeze "$@"; }
launch_mpi() {
  shift
  bash "$NETLAB" mpirun --name "$NETLAB_NAME" --timeout "$TIMEOUT" -- "$@"
}
