#!/bin/bash
# PyTorch's NCCL process group (torch 2.14.1, its CUDA build and its NCCL
# 2.30.7, from a venv: HPCT_TORCH_PYTHON_2_14, else the cache
# tools/scripts/torch-venv.sh fills), an unmodified job (tests/torch/nccl_pg.py),
# under hpct-run --rootless as a user runs it, real NCCL ranks through the
# stand-in driver (tests/standin: no kernel runs, so no collective's result
# is checked here; tools/scripts/gpu-check does that on a GPU):
#   - eager init (device_id) and new_group, 4 ranks: Init COMPLETE on every
#     communicator, Tier 2, nothing connects to MASTER_PORT;
#   - TORCH_NCCL_RANKS_PER_ROOT=2 at 4 and 8 ranks, so that PyTorch makes
#     several ids (ncclCommInitRankScalable): Tier 2 in place of its roots;
#   - shrink_group (ncclCommShrink) after the last rank, then rank 0, is
#     SIGKILLed: the survivors shrink and finish, nothing on MASTER_PORT;
#   - stock (HPCT_USE_ROOTLESS=0) for comparison: the same job at 4 ranks,
#     and with rank 0 killed, where PyTorch's store dies with rank 0 and no
#     survivor can shrink.
# TAP output.  Usage: test_torch_nccl.sh HPCT_RUN PRELOAD NCCL_PG_PY STANDIN_DIR
set -u
run=$1
preload=$2
job=$3
standin=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/tap.sh"
py=${HPCT_TORCH_PYTHON_2_14:-${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}/venv-torch-2.14.1/bin/python}
tests=8
echo "1..$tests"
if ! "$py" -c 'import torch, torch.distributed' 2>/dev/null; then
	for ((i = 0; i < tests; i++)); do
		skip "no torch 2.14.1 at $py (tools/scripts/torch-venv.sh 2.14 makes it)"
	done
	exit 0
fi
# the stand-in first on the library path, and the NCCL settings its
# README lists (sockets on loopback; SHM stays on); every wait of hpct's 60 s
export LD_LIBRARY_PATH=$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 HPCT_TIMEOUT=60 OMP_NUM_THREADS=1
# its yield library: ranks that poll their sockets on 2 cores give the
# processor away (hpct-run --rootless puts the shim before it)
export LD_PRELOAD=$standin/libstandin_yield.so
port=29720 # MASTER_PORT: below the ephemeral range, one per run
t=0

# job TAG N MODE [hpct-run options] [-- VAR=VALUE...]: runs the job; its
# output in $dir/TAG, NCCL's log in $dir/TAG.nccl.*, hpct's in $dir/TAG.hpct.*
job() {
	local tag=$1 n=$2 mode=$3 opts=() vars=()
	shift 3
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	vars=("$@")
	port=$((port + 1))
	t=$((t + 1))
	env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_DEBUG_FILE="$dir/$tag.nccl.%p" \
		HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=NCCL HPCT_DEBUG_FILE="$dir/$tag.hpct.%p" \
		HPCT_JOB_ID="torch-nccl-$$-$t" JOB_HOLD_MASTER=1 "${vars[@]}" \
		"$run" -n "$n" --master-port "$port" --timeout 150 "${opts[@]}" -- \
		"$py" "$job" "$mode" >"$dir/$tag" 2>&1
}
# in: how often a line of $dir/TAG* (the pattern PAT: extended grep) occurs
in_logs() { cat "$dir/$1"$2 2>/dev/null | grep -Ec "$3"; }
# every rank of 0..N-1 but SKIP printed "ok R"
all_ok() { # tag n skip
	local r bad=""
	for ((r = 0; r < $2; r++)); do
		[ "$r" = "${3:--1}" ] && continue
		grep -q "^ok $r\$" "$dir/$1" || bad="$bad $r"
	done
	echo "$bad"
}
show() { tail -n 30 "$dir/$1"; }

check_rootless() { # name tag n ids_line
	local name=$1 tag=$2 n=$3 bad
	bad=$(all_ok "$tag" "$n")
	local complete held tier
	complete=$(in_logs "$tag" '.nccl.*' 'Init COMPLETE')
	tier=$(in_logs "$tag" '.hpct.*' "Tier 2, ncclCommInitRankScalable with nId $n,")
	held=$(grep -E '^held ' "$dir/$tag")
	if [ -n "$bad" ]; then
		not_ok "$name" "ranks that did not finish:$bad" "$(show "$tag")"
	elif [ "$tier" != "$n" ]; then
		not_ok "$name" "Tier 2 on $tier of $n ranks" "$(show "$tag")"
	elif [ "$complete" -lt $((n + 2)) ]; then
		not_ok "$name" "NCCL said Init COMPLETE $complete times (the world's $n and the group's 2)"
	elif [ "$held" != "held 0 " ]; then
		not_ok "$name" "a connection reached MASTER_PORT: $held"
	elif [ -n "${4:-}" ] && [ "$(in_logs "$tag" '.hpct.*' "$4")" != "$n" ]; then
		not_ok "$name" "not every rank said '$4'" "$(cat "$dir/$tag".hpct.* | head -20)"
	else
		ok "$name"
	fi
}

job r4 4 init --rootless
check_rootless "torch 2.14.1 NCCL, 4 ranks under the shim: eager init and new_group, Tier 2, Init COMPLETE, nothing on MASTER_PORT" r4 4
for n in 4 8; do
	job "ids$n" "$n" init --rootless -- TORCH_NCCL_RANKS_PER_ROOT=2
	check_rootless "torch 2.14.1 NCCL, $n ranks, TORCH_NCCL_RANKS_PER_ROOT=2: its $((n / 2)) ids become Tier 2" \
		"ids$n" "$n" "every id derived and the comm is the world: Tier 2 over it, in place of the $((n / 2)) roots"
done
grep -q '^nccl 2.30.7$' "$dir/r4" && ok "torch 2.14.1 loads NCCL 2.30.7 (its wheel's)" ||
	not_ok "torch 2.14.1 loads NCCL 2.30.7" "$(grep '^nccl ' "$dir/r4")"

# shrink_group after a rank is SIGKILLed: survivors' sizes and ranks
check_shrink() { # name tag n victim
	local name=$1 tag=$2 n=$3 victim=$4 r bad="" k=0
	for ((r = 0; r < n; r++)); do
		[ "$r" = "$victim" ] && continue
		grep -q "^shrunk $r $((n - 1)) $k\$" "$dir/$tag" && grep -q "^ok $r\$" "$dir/$tag" ||
			bad="$bad rank $r;"
		k=$((k + 1))
	done
	if [ -n "$bad" ]; then
		not_ok "$name" "did not shrink and finish:$bad" "$(show "$tag")"
	elif [ "$victim" != 0 ] && [ "$(grep -E '^held ' "$dir/$tag")" != "held 0 " ]; then
		not_ok "$name" "a connection reached MASTER_PORT: $(grep -E '^held ' "$dir/$tag")"
	else
		ok "$name"
	fi
}
job k3 4 shrink --rootless --keep-going
check_shrink "torch 2.14.1 shrink_group after rank 3 is SIGKILLed, under the shim: 3 survivors, nothing on MASTER_PORT" k3 4 3
job k0 4 shrink --rootless --keep-going -- JOB_VICTIM=0
check_shrink "torch 2.14.1 shrink_group after rank 0 is SIGKILLed, under the shim: the survivors shrink and finish" k0 4 0
# stock, for comparison: the same job reaches Init COMPLETE (the world's 4
# and the group's 2, NCCL's root on rank 0, hpct not acting), and with
# rank 0 then SIGKILLed no survivor can shrink: its store died with it
job s0 4 shrink --keep-going -- HPCT_USE_ROOTLESS=0 JOB_HOLD_MASTER=0 JOB_VICTIM=0
complete=$(in_logs s0 '.nccl.*' 'Init COMPLETE')
if [ "$(grep -c '^group ' "$dir/s0")" = 4 ] && [ "$complete" -ge 6 ] &&
	[ "$(in_logs s0 '.hpct.*' Tier)" = 0 ]; then
	ok "torch 2.14.1 NCCL, 4 ranks stock (for comparison): Init COMPLETE $complete times"
else
	not_ok "torch 2.14.1 NCCL, 4 ranks stock" "Init COMPLETE $complete" "$(show s0)"
fi
if [ "$(grep -c '^shrunk ' "$dir/s0")" = 0 ] && grep -q 'DistNetworkError\|Connection reset\|refused' "$dir/s0"; then
	ok "torch 2.14.1 stock with rank 0 SIGKILLed (for comparison): no survivor shrinks, PyTorch's store died with rank 0"
else
	not_ok "torch 2.14.1 stock with rank 0 SIGKILLed" "$(show s0)"
fi
exit 0
