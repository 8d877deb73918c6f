#!/bin/sh
# hpct-bench --scenario nccl-root as a user runs it, against the real NCCL
# (NCCL_HOME): N players until each has its ring neighbour, from hpct's roots
# (rootless) and from the root NCCL's ncclGetUniqueId starts (standard).
# A player that gets a wrong answer or none makes its row "failed".
# Then --scenario nccl-init: real NCCL ranks (hpct-bench-nccl) through the
# stand-in driver (HPCT_CUDA_STANDIN), stock and rootless, 4 ranks.
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
grep -Eq "^nccl-root +rootless +64 +[0-9]+ +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +[1-6] +6 " "$dir/out" ||
	fail "hpct's roots took more than 6 connections at N=64: $(grep -E "^nccl-root +rootless +64" "$dir/out")"
# --nccl: the same runs against each library listed, one table with the
# release in its first column (here this build's NCCL, twice over)
lib=$NCCL_HOME/lib/libnccl.so.2
"$bench" --scenario nccl-root --ranks 4 --repeat 1 --port 16700 --nccl "$lib,$lib" \
	--json "$dir/r.json" >"$dir/rout" 2>"$dir/rerr" ||
	fail "nccl-root --nccl failed: $(cat "$dir/rout" "$dir/rerr")"
[ "$(grep -Ec '^[0-9]+\.[0-9]+\.[0-9]+ +(rootless|standard) +4 +1 ' "$dir/rout")" -eq 4 ] ||
	fail "--nccl: want 4 rows (2 releases x 2 paths): $(cat "$dir/rout")"
[ "$(grep -c 'standard/rootless median ratio' "$dir/rout")" -eq 2 ] ||
	fail "--nccl: want a ratio line per release: $(cat "$dir/rout")"
grep -q '"nccl":"[0-9]*\.[0-9]*\.[0-9]*","path":"rootless","ranks":4' "$dir/r.json" ||
	fail "--nccl: no JSON row naming its release: $(cat "$dir/r.json")"
"$bench" --scenario nccl-root --ranks 4 --nccl /nonexistent/libnccl.so.2 >"$dir/rout" 2>&1 &&
	fail "--nccl with a missing library succeeded"
grep -q '/nonexistent/libnccl.so.2' "$dir/rout" || fail "the missing library is not named: $(cat "$dir/rout")"
# nccl-init: both rows at 4 ranks, the ratio line, the JSON; stock's root
# takes a report from every rank, so its busiest process accepted more
lib=$NCCL_HOME/lib/libnccl.so.2
# (an instrumented build: the sanitizer's runtime first, before the yield
# library the bench preloads for its ranks)
HPCT_NCCL_LIB=$lib LD_PRELOAD=${HPCT_PRELOAD_FIRST:-} "$bench" --scenario nccl-init --ranks 4 --repeat 1 --port 16720 \
	--timeout 120 --json "$dir/i.json" >"$dir/iout" 2>"$dir/ierr" ||
	fail "the nccl-init run failed: $(cat "$dir/iout" "$dir/ierr")"
for p in stock rootless; do
	grep -Eq "^nccl-init +$p +4 +1/1 +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+\$" "$dir/iout" ||
		fail "no nccl-init row for $p: $(cat "$dir/iout")"
	grep -q "\"scenario\":\"nccl-init\",\"path\":\"$p\",\"ranks\":4,\"ok\":1," "$dir/i.json" ||
		fail "no nccl-init JSON row for $p: $(cat "$dir/i.json")"
done
grep -q '^4 ranks: stock/rootless init [0-9.]*x, NCCL.s bootstrap [0-9.]*x' "$dir/iout" ||
	fail "no nccl-init ratio line: $(cat "$dir/iout")"
echo ok
