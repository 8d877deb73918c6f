#!/bin/sh
# hpct-bench --scenario sim: libhpct's engine and collectives over the
# simulated transport send exactly the messages real ranks send (cold
# start, N = 2..64, against real runs of hpct-bench), the same model and
# seed give the same figures, and bad arguments are named.
# Usage: test_sim.sh HPCT_BENCH
set -eu
bench=$1
. "$(dirname "$0")/sh_common.sh"
sizes=2,3,5,8,13,16,31,32,64

"$bench" --scenario cold --ranks $sizes --path rootless --repeat 1 --port 17000 \
	--json "$dir/real.json" >"$dir/real.out" 2>&1 || fail "real runs failed: $(cat "$dir/real.out")"
"$bench" --scenario sim --work cold --ranks $sizes --no-check --json "$dir/a.json" \
	>"$dir/a.out" 2>&1 || fail "the simulation failed: $(cat "$dir/a.out")"
grep -q "^model, calibrated on this machine" "$dir/a.out" || fail "no calibration printed"
for n in $(echo $sizes | tr , ' '); do
	real=$(grep -o "\"path\":\"rootless\",\"ranks\":$n,[^}]*" "$dir/real.json" |
		sed -n 's/.*"total_msgs":\([0-9]*\).*/\1/p')
	sim=$(grep -o "\"path\":\"rootless\",\"ranks\":$n,[^}]*" "$dir/a.json" |
		sed -n 's/.*"total_msgs":\([0-9]*\).*/\1/p')
	[ -n "$real" ] && [ "$real" -gt 0 ] || fail "no message count for a real run of $n ranks"
	[ "$sim" = "$real" ] || fail "N=$n: the simulation sent $sim messages, real ranks $real"
done

# the same model and seed: the same figures, to the last digit
for f in b c; do
	"$bench" --scenario sim --model-from "$dir/a.json" --seed 7 --ranks 16,256,4096 \
		--no-check --json "$dir/$f.json" >"$dir/$f.out" 2>&1 ||
		fail "a run on the saved model failed: $(cat "$dir/$f.out")"
done
cmp -s "$dir/b.json" "$dir/c.json" || fail "two runs with seed 7 differ: $(diff "$dir/b.json" "$dir/c.json")"
grep -q "^model, from $dir/a.json" "$dir/b.out" || fail "the saved model was not named"
grep -Eq '"path":"rootless","ranks":4096,"projected_ms":[0-9.]+,"busiest_msgs":[0-9]+,"busiest_conns":([1-9]|1[0-9]|2[0-6]),' \
	"$dir/b.json" || fail "4096 ranks: no result, or a rank with more than 2*ceil(log2 N)+2 connections"

# bad arguments are named
if "$bench" --scenario sim --work cold --ranks 8192 >/dev/null 2>"$dir/err1"; then
	fail "cold at 8192 simulated ranks was accepted"
fi
grep -q "work cold --ranks 8192" "$dir/err1" || fail "not named: $(cat "$dir/err1")"
if "$bench" --scenario sim --ranks 64 --model-from "$dir/none.json" >/dev/null 2>"$dir/err2"; then
	fail "a missing model file was accepted"
fi
grep -q "model-from $dir/none.json" "$dir/err2" || fail "not named: $(cat "$dir/err2")"
echo ok
