#!/bin/sh
# hpct-bench --scenario sim: libhpct's engine and collectives over the
# simulated transport send exactly the messages real ranks send (cold
# start, N = 2..64, against real runs of hpct-bench), the same model and
# seed give the same figures, the rows say which counts are simulated and
# which modelled, every path does the same work, a node's NIC is shared,
# NCCL's ranks stagger past 256, and bad arguments are named.  (The model
# check against real runs is test_sim_check.sh, on a release build.)
# Usage: test_sim.sh HPCT_BENCH
set -eu
bench=$1
. "$(dirname "$0")/sh_common.sh"
sizes=2,3,5,8,13,16,31,32,64
# ports: the real runs 17000-17263, the simulator's calibration 17264-17360
port=17264

"$bench" --scenario cold --ranks $sizes --path rootless --repeat 1 --port 17000 \
	--json "$dir/real.json" >"$dir/real.out" 2>&1 || fail "real runs failed: $(cat "$dir/real.out")"
"$bench" --scenario sim --work cold --ranks $sizes --no-check --port $port --json "$dir/a.json" \
	>"$dir/a.out" 2>&1 || fail "the simulation failed: $(cat "$dir/a.out")"
grep -q "^model, calibrated on this machine" "$dir/a.out" || fail "no calibration printed"
grep -q "^this machine: [0-9]* cores, fork+exec" "$dir/a.out" || fail "the machine is not described"
for n in $(echo $sizes | tr , ' '); do
	real=$(grep -o "\"path\":\"rootless\",\"ranks\":$n,[^}]*" "$dir/real.json" |
		sed -n 's/.*"total_msgs":\([0-9]*\).*/\1/p')
	sim=$(grep -o "\"path\":\"rootless\",\"ranks\":$n,[^}]*" "$dir/a.json" |
		sed -n 's/.*"total_msgs":\([0-9]*\).*/\1/p')
	[ -n "$real" ] && [ "$real" -gt 0 ] || fail "no message count for a real run of $n ranks"
	[ "$sim" = "$real" ] || fail "N=$n: the simulation sent $sim messages, real ranks $real"
done
grep -q '"check"' "$dir/a.json" && fail "--no-check still ran the model check"

# simulated counts and modelled ones are told apart, in the table and the JSON
for p in rootless:simulated standard:model nccl-root:model; do
	path=${p%%:*} how=${p#*:}
	[ "$(grep -c "\"path\":\"$path\",[^}]*\"counts\":\"$how\"" "$dir/a.json")" -ge 1 ] ||
		fail "$path's rows are not marked \"counts\":\"$how\" in the JSON"
	[ "$(grep -o '"path":"'"$path"'"' "$dir/a.json" | wc -l)" = \
		"$(grep -o "\"path\":\"$path\",[^}]*\"counts\":\"$how\"" "$dir/a.json" | wc -l)" ] ||
		fail "a $path row is not marked \"counts\":\"$how\""
	grep -Eq "^$path +64 +[0-9.]+ +[0-9]+ +[0-9]+ +$how " "$dir/a.out" ||
		fail "the table's $path row at 64 does not say its counts are $how: $(cat "$dir/a.out")"
done
# the same work on every path, said once
grep -q "^sim: cold (world allgather of 64 bytes + barrier) on every path" "$dir/a.out" ||
	fail "the work is not the same on every path: $(cat "$dir/a.out")"

# the same model and seed: the same figures, to the last digit
for f in b c; do
	"$bench" --scenario sim --model-from "$dir/a.json" --seed 7 --ranks 16,256,4096 \
		--no-check --json "$dir/$f.json" >"$dir/$f.out" 2>&1 ||
		fail "a run on the saved model failed: $(cat "$dir/$f.out")"
done
# (less what each run measures of its own process: its memory and time)
for f in b c; do
	sed -E 's/,"(heap_bytes_per_rank|peak_rss_kb|sim_s)":[0-9.]+//g' "$dir/$f.json" >"$dir/$f.fig"
done
grep -q '"heap_bytes_per_rank"' "$dir/b.json" && ! grep -q '"peak_rss_kb"' "$dir/b.fig" ||
	fail "no memory in the JSON's rows, or the comparison left it in: $(head -c 600 "$dir/b.json")"
cmp -s "$dir/b.fig" "$dir/c.fig" || fail "two runs with seed 7 differ: $(diff "$dir/b.fig" "$dir/c.fig")"
grep -q "^model, from $dir/a.json" "$dir/b.out" || fail "the saved model was not named"
grep -q "^sim: join (world barrier) on every path" "$dir/b.out" || fail "join is not a barrier on every path"
grep -Eq '"path":"rootless","ranks":4096,"projected_ms":[0-9.]+,"busiest_msgs":[0-9]+,"busiest_conns":([1-9]|1[0-9]|2[0-6]),' \
	"$dir/b.json" || fail "4096 ranks: no result, or a rank with more than 2*ceil(log2 N)+2 connections"
# the store serves every rank: its process holds N connections and more
grep -Eq '"path":"standard","ranks":4096,"projected_ms":[0-9.]+,"busiest_msgs":[0-9]+,"busiest_conns":4097,' \
	"$dir/b.json" || fail "4096 ranks: the store's process should hold 4096 + 1 connections"

# a figure of a row: field $3 of path $1 at $2 ranks in JSON $4
field() {
	grep -o "\"path\":\"$1\",\"ranks\":$2,[^}]*" "$4" | sed -n "s/.*\"$3\":\([0-9.]*\).*/\1/p"
}

# NCCL's ranks hold back past 256 to a root: the last of 512 starts
# 511/7000 s after the first; at 256, none does
"$bench" --scenario sim --model-from "$dir/a.json" --ranks 256,512 --no-check \
	--json "$dir/n.json" >"$dir/n.out" 2>&1 || fail "256 and 512 ranks: $(cat "$dir/n.out")"
awk -v a="$(field nccl-root 256 projected_ms "$dir/n.json")" \
	-v b="$(field nccl-root 512 projected_ms "$dir/n.json")" \
	'BEGIN { exit !(a > 0 && a < 73 && b >= 511 / 7.0) }' ||
	fail "NCCL's stagger: 256 ranks took $(field nccl-root 256 projected_ms "$dir/n.json") ms, 512 ranks $(field nccl-root 512 projected_ms "$dir/n.json") ms (want under 73 ms, and at least 73 ms)"

# a node's NIC is shared: whatever goes through it goes one message after
# the other, so no run is over before its busiest NIC's bytes could pass
# at the NIC's bandwidth (1 MB/s here: ms = bytes / 1000).  With a
# bandwidth per connection instead, the tree's parents and the store, which
# send to many at once, would finish sooner.  And at 1 MB/s the store's
# node sends every rank of the other 7 nodes the N-1 others' items (56 x 63
# x 68 bytes) through it.
"$bench" --scenario sim --model-from "$dir/a.json" --work cold --ranks 64 --no-check \
	--bandwidth 1 --ranks-per-node 8 --json "$dir/bw.json" >"$dir/bw.out" 2>&1 ||
	fail "--bandwidth 1 --ranks-per-node 8: $(cat "$dir/bw.out")"
for path in rootless standard nccl-root; do
	awk -v ms="$(field $path 64 projected_ms "$dir/bw.json")" \
		-v b="$(field $path 64 busiest_nic_bytes "$dir/bw.json")" \
		'BEGIN { exit !(b > 0 && ms >= b / 1000) }' ||
		fail "$path: 64 ranks at 1 MB/s took $(field $path 64 projected_ms "$dir/bw.json") ms with $(field $path 64 busiest_nic_bytes "$dir/bw.json") bytes through one NIC"
done
awk -v s="$(field standard 64 busiest_nic_bytes "$dir/bw.json")" \
	'BEGIN { exit !(s >= 56 * 63 * 68) }' ||
	fail "the store's NIC carried $(field standard 64 busiest_nic_bytes "$dir/bw.json") bytes, not every rank's answer"

# bad arguments are named
if "$bench" --scenario sim --work cold --ranks 8192 >/dev/null 2>"$dir/err1"; then
	fail "cold at 8192 simulated ranks was accepted"
fi
grep -q "work cold --ranks 8192" "$dir/err1" || fail "not named: $(cat "$dir/err1")"
if "$bench" --scenario sim --ranks 64 --model-from "$dir/none.json" >/dev/null 2>"$dir/err2"; then
	fail "a missing model file was accepted"
fi
grep -q "model-from $dir/none.json" "$dir/err2" || fail "not named: $(cat "$dir/err2")"
for bad in "--ranks-per-node 0" "--cores 0" "--bandwidth -3" "--port 80"; do
	# shellcheck disable=SC2086 # the option and its value, split on purpose
	if "$bench" --scenario sim --ranks 64 $bad >/dev/null 2>"$dir/err3"; then
		fail "$bad was accepted"
	fi
	grep -q -- "${bad%% *} ${bad#* }" "$dir/err3" || fail "$bad: not named: $(cat "$dir/err3")"
done
echo ok
