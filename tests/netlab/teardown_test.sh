#!/usr/bin/env bash
# netlab.sh leaves nothing behind: a one-shot run interrupted with Ctrl-C (SIGINT) while its ranks
# run, a run whose rank fails, and a bad option all end with no namespace of the lab left. And
# --shape switch shapes the switch ports, not the hosts.
#
# Usage: teardown_test.sh NETLAB_SH NETPROBE. Exit 77 where namespaces cannot be made.
set -uo pipefail
netlab=$1
export SQZ_NETPROBE=$2

if ! reason=$(bash "$netlab" check); then echo "SKIP: $reason"; exit 77; fi
name="td$((RANDOM % 100000))"
left() { ip netns list | awk '{print $1}' | grep -cE "^$name-" ; }
fail=0

# Ctrl-C while every host runs a rank. Job control on, so the background run does not start
# with SIGINT ignored, as a non-interactive shell's background jobs otherwise do.
set -m
bash "$netlab" --name "$name" -n 3 --no-verify -- sleep 60 &
pid=$!
for ((i = 0; i < 100 && $(left) < 4; i++)); do sleep 0.1; done
(($(left) == 4)) || { echo "FAIL: the lab did not come up (namespaces: $(left))"; fail=1; }
sleep 0.5
kill -INT "$pid"
wait "$pid"; rc=$?
set +m
((rc != 0)) || { echo "FAIL: an interrupted run exited 0"; fail=1; }
(($(left) == 0)) || { echo "FAIL: $(left) namespaces left after SIGINT"; fail=1; }
# Anchored: a bare "sleep 60" would also match anyone's "sleep 600" on this machine.
pgrep -f "^sleep 60$" >/dev/null && pgrep -af "^sleep 60$" && {
  echo "FAIL: a rank outlived the interrupted lab"; fail=1; }

# A rank that fails: its status comes back and the lab goes down.
bash "$netlab" --name "$name" -n 2 --no-verify -- sh -c 'exit $((3 + NETLAB_HOST))' 2>/dev/null
rc=$?
((rc == 3)) || { echo "FAIL: a failing run exited $rc, expected rank 0's status 3"; fail=1; }
(($(left) == 0)) || { echo "FAIL: $(left) namespaces left after a failed run"; fail=1; }

# A bad rate is refused before anything is made.
msg=$(bash "$netlab" --name "$name" -r 1gb -- true 2>&1); rc=$?
((rc == 2)) && [[ $msg == *"-r 1gb"* ]] || { echo "FAIL: bad rate gave $rc: $msg"; fail=1; }
(($(left) == 0)) || { echo "FAIL: namespaces made for a bad option"; fail=1; }

# --shape switch: tbf on the switch ports only, none on the hosts; a bad --shape is refused.
if bash "$netlab" up --name "$name" -n 2 -r 1gbit -l 5ms --shape switch --no-verify >/dev/null; then
  host_q=$(ip netns exec "$name-h0" tc qdisc show dev lab0)
  port_q=$(ip netns exec "$name-sw" tc qdisc show dev p0)
  [[ $host_q != *tbf* ]] || { echo "FAIL: --shape switch shaped the host: $host_q"; fail=1; }
  [[ $port_q == *tbf*"lat 5ms"* ]] || { echo "FAIL: --shape switch left the port unshaped: $port_q"; fail=1; }
  grep -qx shape_at=switch "/run/netlab-$name.state" || { echo "FAIL: the state lacks shape_at"; fail=1; }
  bash "$netlab" down --name "$name"
else
  echo "FAIL: netlab.sh up --shape switch failed"; fail=1
fi
msg=$(bash "$netlab" --name "$name" --shape host -- true 2>&1); rc=$?
((rc == 2)) && [[ $msg == *"--shape host"* ]] || { echo "FAIL: bad --shape gave $rc: $msg"; fail=1; }
(($(left) == 0)) || { echo "FAIL: $(left) namespaces left after the --shape cases"; fail=1; }

((fail == 0)) && echo "netlab teardown: ok"
exit "$fail"
