#!/bin/bash
# Partitions (TAP): 4 "nodes" made of network namespaces, each with a veth
# pair to a bridge in a fifth namespace, 2 ranks per node (addresses
# 10.77.0.1-4, nothing on the machine's own network).  The job is
# tests/partition_rank.c, rootless.  Node 4's link is cut (its bridge port
# set down):
#   1. during bootstrap (before its ranks start): every rank fails (a rank
#      still running HPCT_TIMEOUT + 60 s on hung), the failures name node
#      4's ranks or address;
#   2. after the link is restored, the job at the next epoch succeeds;
#   3. during a collective (every rank is past bootstrap, allgathers going):
#      the same;
#   4. after the link is restored, the next epoch succeeds again.
# Needs root (ip netns); skips with the reason otherwise.
# Usage: test_partition.sh RANK_PROGRAM   (HPCT_TEST_PORT_BASE: the ports)
set -u
prog=$1
nodes=4 per=2
n=$((nodes * per))
timeout_s=5
hang_s=$((timeout_s + 60)) # a rank still running after this hung: it is killed
ns=hpctp$$
dir=$(mktemp -d)
echo "1..4"

skip_all() {
	for i in 1 2 3 4; do echo "ok $i # SKIP $1"; done
	rm -rf "$dir"
	exit 0
}
[ "$(id -u)" = 0 ] || skip_all "needs root for network namespaces"
command -v ip >/dev/null || skip_all "no ip (iproute2)"

cleanup() {
	for pid in $(jobs -p); do kill -9 "$pid" 2>/dev/null; done
	wait 2>/dev/null
	for i in $(seq 0 $((nodes - 1))); do ip netns del "${ns}n$i" 2>/dev/null; done
	ip netns del "${ns}b" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

# the layout: bridge namespace, and per node a namespace with eth0 on it
if ! { ip netns add "${ns}b" && ip -n "${ns}b" link add br0 type bridge &&
	ip -n "${ns}b" link set br0 up; } 2>"$dir/err"; then
	skip_all "cannot make network namespaces here: $(head -1 "$dir/err")"
fi
hosts=""
for i in $(seq 0 $((nodes - 1))); do
	node=${ns}n$i
	ip netns add "$node" &&
		ip -n "$node" link set lo up &&
		ip -n "$node" link add eth0 type veth peer name p$i netns "${ns}b" &&
		ip -n "$node" addr add 10.77.0.$((i + 1))/24 dev eth0 &&
		ip -n "$node" link set eth0 up &&
		ip -n "${ns}b" link set p$i master br0 up || {
		echo "Bail out! could not build node $i"
		exit 1
	}
	hosts="$hosts${hosts:+,}10.77.0.$((i + 1))"
done

# the namespaces are the test's own: these ports collide with nothing
port=${HPCT_TEST_PORT_BASE:-15200}
start_rank() { # rank epoch iters
	local r=$1 node=$(($1 / per))
	ip netns exec "${ns}n$node" env RANK="$r" LOCAL_RANK=$((r % per)) WORLD_SIZE=$n \
		GROUP_RANK=$node LOCAL_WORLD_SIZE=$per HPCT_HOSTS="$hosts" \
		HPCT_TASKS_PER_NODE="$per(x$nodes)" HPCT_JOB_ID=partition-$$ HPCT_EPOCH="$2" \
		HPCT_USE_ROOTLESS=1 HPCT_PORT_BASE="$port" HPCT_TIMEOUT=$timeout_s \
		timeout -s KILL $hang_s "$prog" "$dir" "$3" >"$dir/out.$r" 2>&1 &
}
cut() { ip -n "${ns}b" link set p$((nodes - 1)) down; }
restore() { ip -n "${ns}b" link set p$((nodes - 1)) up; }
now() { date +%s.%N; }
n_test=0

# Every rank failed (none hung: each was under a hang guard of
# HPCT_TIMEOUT + 60 s); the ranks off node 4 name one of its ranks or its
# address.  How long after `since` the last failed is reported, never
# asserted.  name since
check_failed() {
	local name=$1 since=$2 r bad="" line t worst=0
	local last=$(((nodes - 1) * per))
	for ((r = 0; r < n; r++)); do
		line=$(grep "^rank $r " "$dir/out.$r" | head -1)
		case "$line" in
		"rank $r failed in "*) ;;
		*) bad="$bad rank $r did not fail, or hung until killed after $hang_s s ($(tail -c 300 "$dir/out.$r"));" && continue ;;
		esac
		t=$(echo "$line" | sed -E 's/.* at ([0-9.]+): .*/\1/')
		worst=$(awk -v t="$t" -v s="$since" -v w="$worst" 'BEGIN { d = t - s; printf "%.1f", (d > w ? d : w) }')
		if [ "$r" -lt "$last" ] &&
			! echo "$line" | grep -Eq "rank ($last|$((last + 1)))([^0-9]|$)|10\.77\.0\.$nodes:"; then
			bad="$bad rank $r does not name node $nodes's ranks;"
		fi
	done
	n_test=$((n_test + 1))
	if [ -z "$bad" ]; then
		echo "ok $n_test - $name (the last $worst s after the cut)"
	else
		echo "not ok $n_test - $name"
		echo "#$bad"
	fi
	for ((r = 0; r < n; r++)); do grep "^rank $r " "$dir/out.$r" | sed 's/^/# /'; done
}
check_ok() { # name
	local name=$1 r bad=""
	for ((r = 0; r < n; r++)); do
		grep -q "^rank $r ok" "$dir/out.$r" || bad="$bad rank $r: $(tail -c 300 "$dir/out.$r");"
	done
	n_test=$((n_test + 1))
	if [ -z "$bad" ]; then echo "ok $n_test - $name"; else echo "not ok $n_test - $name"; echo "#$bad"; fi
}
wait_all() { wait; }
# the link back, then every rank at the given epoch: it must succeed
restored_epoch() {
	restore
	rm -f "$dir"/out.* "$dir"/ready.*
	for ((r = 0; r < n; r++)); do start_rank $r "$1" 20; done
	wait_all
	check_ok "link restored: the job at epoch $1 succeeds"
}

# 1. cut during bootstrap: node 4 cut before its ranks start; every rank
# waits until all are up (started.R), then all join at once (go): their
# deadlines run together, as when a launcher starts a job
rm -f "$dir"/out.* "$dir"/ready.* "$dir"/started.* "$dir"/go
touch "$dir/hold"
for ((r = 0; r < (nodes - 1) * per; r++)); do start_rank $r 0 50; done
cut
for ((r = (nodes - 1) * per; r < n; r++)); do start_rank $r 0 50; done
for ((i = 0; i < 1200; i++)); do
	[ "$(ls "$dir" | grep -c '^started\.')" -eq $n ] && break
	sleep 0.1 # a poll of the started files (a hang guard of 120 s), no ordering sleep
done
rm -f "$dir/hold"
since=$(now)
touch "$dir/go"
wait_all
rm -f "$dir"/started.* "$dir/go"
check_failed "node $nodes cut during bootstrap: every rank fails, naming node $nodes's ranks" "$since"

# 2. restored: the next epoch joins and works
restored_epoch 1

# 3. cut during a collective: every rank past bootstrap (its ready file),
# allgathers going until they fail (ITERS 0: no end of their own)
rm -f "$dir"/out.* "$dir"/ready.*
for ((r = 0; r < n; r++)); do start_rank $r 2 0; done
for _ in $(seq 1 $((hang_s * 100))); do # a poll; the bound is a hang guard
	[ "$(ls "$dir" | grep -c '^ready\.')" -eq $n ] && break
	sleep 0.01
done
cut
since=$(now)
wait_all
check_failed "node $nodes cut during allgathers: every rank fails, naming node $nodes's ranks" "$since"

# 4. restored again: epoch 3 succeeds
restored_epoch 3
