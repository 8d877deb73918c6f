#!/bin/bash
# Soak (TAP): tests/soak.c under hpct-run, rootless, 4 ranks on 2 loopback
# nodes: 10,000 subgroups made, used for an allgather and freed, then 1,000
# Gloo contexts made, used for an allreduce and freed; each rank fails if a
# descriptor stayed open or resident memory grew by more than 2 MB (counted
# after a warm-up tenth and at the end; the figures are printed; not on a
# sanitizer build).  Then a
# short version (100 groups, 20 contexts, 3 ranks) under valgrind's memcheck:
# no error and no definite or indirect leak, not on a sanitizer build.
# Usage: test_soak.sh HPCT_RUN SOAK   (HPCT_TEST_PORT_BASE: the ports to use)
set -u
run=$1
soak=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# a sanitizer's allocator grows by design (quarantine, a record per thread
# that ran): there, descriptors are counted and LeakSanitizer checks at exit
[ "${HPCT_SANITIZED:-0}" = 1 ] && export HPCT_SOAK_RSS_SLACK_KB=off
export HPCT_USE_ROOTLESS=1 HPCT_PORT_BASE=${HPCT_TEST_PORT_BASE:-15000} HPCT_TIMEOUT=60
echo "1..2"

# ok/not ok N name log: every rank printed its figures and the job passed
report() {
	local i=$1 name=$2 rc=$3 log=$4 n=$5
	if [ "$rc" -eq 0 ] && [ "$(grep -c '^soak rank' "$log")" -eq "$n" ]; then
		echo "ok $i - $name"
	else
		echo "not ok $i - $name (exit $rc)"
	fi
	sed 's/^/# /' "$log"
}

timeout 600 "$run" -n 4 --nodes 2 --timeout 540 -- "$soak" 10000 1000 >"$dir/full" 2>&1
report 1 "10,000 groups and 1,000 Gloo contexts on 4 ranks: descriptors and memory flat" $? \
	"$dir/full" 4

if [ "${HPCT_SANITIZED:-0}" = 1 ]; then
	echo "ok 2 # SKIP valgrind on a sanitizer build"
elif ! command -v valgrind >/dev/null; then
	echo "ok 2 # SKIP no valgrind"
else
	# memcheck: any error or leak of ours exits 99; one rank per process
	timeout 600 "$run" -n 3 --nodes 2 --timeout 540 -- valgrind -q --error-exitcode=99 \
		--leak-check=full --show-leak-kinds=definite,indirect \
		--errors-for-leak-kinds=definite,indirect "$soak" 100 20 >"$dir/vg" 2>&1
	report 2 "100 groups and 20 Gloo contexts on 3 ranks under valgrind: no error, no leak" $? \
		"$dir/vg" 3
fi
