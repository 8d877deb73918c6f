#!/bin/sh
# hpct-bench --scenario nccl-root as a user runs it, against the real NCCL
# (NCCL_HOME): N players until each has its ring neighbour, from hpct's roots
# (rootless) and from the root NCCL's ncclGetUniqueId starts (standard).
# A player that gets a wrong answer or none makes its row "failed".
# Usage: test_bench_nccl.sh HPCT_BENCH
set -eu
bench=$1
. "$(dirname "$0")/sh_common.sh"
"$bench" --scenario nccl-root --ranks 2,4,64 --repeat 1 --port 16700 --json "$dir/n.json" \
	>"$dir/out" 2>"$dir/err" || fail "the nccl-root run failed: $(cat "$dir/out" "$dir/err")"
for p in rootless standard; do
	for n in 2 4 64; do
		grep -Eq "^nccl-root +$p +$n +[0-9]+ +1 +[0-9.]+ " "$dir/out" ||
			fail "no nccl-root row for $p N=$n: $(cat "$dir/out")"
		grep -q "\"scenario\":\"nccl-root\",\"path\":\"$p\",\"ranks\":$n," "$dir/n.json" ||
			fail "no nccl-root JSON row for $p N=$n"
	done
done
# hpct's roots: at most 6 connections at the busiest root, whatever N
grep -Eq "^nccl-root +rootless +64 +[0-9]+ +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[1-6] +6 " "$dir/out" ||
	fail "hpct's roots took more than 6 connections at N=64: $(grep '^nccl-root +rootless +64' "$dir/out")"
echo ok
