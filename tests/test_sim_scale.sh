#!/bin/sh
# The simulator at the demo's largest size (tools/demo: 98,304 ranks) under
# a memory cap, so that state a world keeps per peer cannot come back
# unnoticed: the simulator holds every simulated rank's world in one
# process, so O(N) bytes a world become O(N^2) there (98,304 ranks once
# needed more than this machine's 24 GiB).  hpct-bench-sim --max-rss ends
# the run, naming the path and the size, the moment its resident memory
# passes the cap; this test also holds a rootless rank's heap to the same
# bytes at 98,304 ranks as at 4,096 (O(1) per rank), and every row to
# having finished.  Release build only (suite model): a sanitizer's heap
# is another program's.
# Usage: test_sim_scale.sh HPCT_BENCH
set -eu
bench=$1
. "$(dirname "$0")/sh_common.sh"
cap_mb=${HPCT_SIM_MAX_RSS_MB:-4096}
# ports 17800-17899: the simulator's calibration
"$bench" --scenario sim --ranks 4096,98304 --no-check --port 17800 --max-rss "$cap_mb" \
	--json "$dir/s.json" >"$dir/s.out" 2>&1 || fail "the simulation failed (exit $?): $(tail -5 "$dir/s.out")"
cat "$dir/s.out"
for n in 4096 98304; do
	for path in rootless standard nccl-root; do
		row=$(grep -o "{\"path\":\"$path\",\"ranks\":$n,[^}]*}" "$dir/s.json") ||
			fail "no $path row at $n ranks in the JSON"
		rss=$(echo "$row" | sed -n 's/.*"peak_rss_kb":\([0-9]*\).*/\1/p')
		[ -n "$rss" ] && [ "$rss" -gt 0 ] || fail "$path at $n ranks: no peak memory in $row"
		[ "$rss" -le $((cap_mb * 1024)) ] || fail "$path at $n ranks: peak $rss kB over the cap"
	done
done
heap() { # path ranks: the heap a simulated rank held, bytes
	grep -o "{\"path\":\"$1\",\"ranks\":$2,[^}]*}" "$dir/s.json" |
		sed -n 's/.*"heap_bytes_per_rank":\([0-9]*\).*/\1/p'
}
small=$(heap rootless 4096) big=$(heap rootless 98304)
[ -n "$small" ] && [ "$small" -gt 0 ] && [ -n "$big" ] || fail "no heap per rank in the JSON"
# O(1) a rank: 24x the ranks may add a few hundred bytes (the sim's own
# event heap, a longer path of the tree), not 8 bytes per peer (768 KiB)
[ "$big" -le $((small + small / 4 + 512)) ] ||
	fail "a rootless rank holds $big bytes at 98304 ranks against $small at 4096: state grows with N"
echo "ok: 98304 ranks under ${cap_mb} MiB; a rootless rank's heap $small B at 4096, $big B at 98304"
