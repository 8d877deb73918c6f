#!/bin/bash
# PyTorch's NCCL process groups, an unmodified job (tests/torch/nccl_pg.py),
# under hpct-run --rootless as a user runs it, real NCCL ranks through the
# stand-in driver (tests/standin: no kernel runs, so no collective's result
# is checked here; tools/scripts/gpu-check does that on a GPU), on each
# torch's own NCCL (2.30.7 for both), from their venvs
# (HPCT_TORCH_PYTHON_2_14 / _2_15, else the cache tools/scripts/torch-venv.sh
# fills):
#   torch 2.14.1, ProcessGroupNCCL, and torch 2.15.0, nccl2 (its default
#   "nccl", ProcessGroupNCCL2 on the torchcomms engine):
#   - eager init (device_id) and new_group, 4 ranks: Init COMPLETE on every
#     communicator, Tier 2, nothing connects to MASTER_PORT;
#   - TORCH_NCCL_RANKS_PER_ROOT=2 at 4 (both) and 8 (2.15) ranks, so that
#     PyTorch makes several ids (ncclCommInitRankScalable): Tier 2 in place
#     of its roots;
#   - shrink_group (ncclCommShrink) after the last rank, then rank 0, is
#     SIGKILLed: the survivors shrink and finish, nothing on MASTER_PORT;
#   - stock (HPCT_USE_ROOTLESS=0) for comparison: the same job at 4 ranks,
#     and with rank 0 killed, where PyTorch's store dies with rank 0 and no
#     survivor can shrink (2.15);
#   - hpct-bench --scenario torch --backend nccl (2.14.1 only): its stock
#     and rootless rows at 4 ranks, the store's operations timed;
#   torch 2.15.0 only:
#   - nccl2's lazy init (no device_id): the communicator made at the first
#     collective, Tier 2;
#   - dist._reconfigure (nccl2, enable_reconfigure: a non-blocking init that
#     PyTorch polls) of the 4 ranks, and of 3 after the last is SIGKILLed;
#   - nccl-lazy: a 2-rank communicator a point-to-point pair, each on an id
#     derived in the pair's first rank (Tier 1, its root there: no rank 0
#     of the job in it), the primary Tier 2;
#   - nccl-legacy (ProcessGroupNCCL by name): eager init and new_group.
# TAP output.  Usage: test_torch_nccl.sh HPCT_RUN PRELOAD NCCL_PG_PY STANDIN_DIR HPCT_BENCH
set -u
run=$1
preload=$2
job=$3
standin=$4
bench=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/tap.sh"
cache=${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}
py214=${HPCT_TORCH_PYTHON_2_14:-$cache/venv-torch-2.14.1/bin/python}
py215=${HPCT_TORCH_PYTHON_2_15:-$cache/venv-torch-2.15.0/bin/python}
tests214=8 tests215=14
echo "1..$((tests214 + tests215))"
# the stand-in first on the library path, and the NCCL settings its
# README lists (sockets on loopback; SHM stays on); every wait of hpct's 60 s
export LD_LIBRARY_PATH=$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 HPCT_TIMEOUT=60 OMP_NUM_THREADS=1
# its yield library: ranks that poll their sockets on 2 cores give the
# processor away (hpct-run --rootless puts the shim before it)
export LD_PRELOAD=$standin/libstandin_yield.so
port=29720 # MASTER_PORT: below the ephemeral range, one per run
t=0

# job TAG N MODE [hpct-run options] [-- VAR=VALUE...]: runs the job on
# torch $py; its output in $dir/TAG, NCCL's log in $dir/TAG.nccl.*, hpct's
# in $dir/TAG.hpct.*
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
# the NCCL backend class every one of N ranks said it has
backend_is() { # tag n class
	[ "$(grep -c "^backend [0-9]* $3\$" "$dir/$1")" = "$2" ]
}

# check_rootless NAME TAG N CLASS COMPLETE [LINE]: every rank finished, on
# the backend CLASS; Tier 2 on each (an hpct line "Tier 2, ... nId N"); NCCL
# said Init COMPLETE at least COMPLETE times; nothing on MASTER_PORT; and
# LINE, if given, said by every rank
check_rootless() {
	local name=$1 tag=$2 n=$3 class=$4 want=$5 bad complete tier held
	bad=$(all_ok "$tag" "$n")
	complete=$(in_logs "$tag" '.nccl.*' 'Init COMPLETE')
	tier=$(in_logs "$tag" '.hpct.*' "Tier 2, ncclCommInitRankScalable with nId $n,")
	held=$(grep -E '^held ' "$dir/$tag")
	if [ -n "$bad" ]; then
		not_ok "$name" "ranks that did not finish:$bad" "$(show "$tag")"
	elif ! backend_is "$tag" "$n" "$class"; then
		not_ok "$name" "not $class on every rank: $(grep '^backend ' "$dir/$tag" | tr '\n' ' ')"
	elif [ "$tier" -lt "$n" ]; then
		not_ok "$name" "Tier 2 on $tier of $n ranks" "$(show "$tag")"
	elif [ "$complete" -lt "$want" ]; then
		not_ok "$name" "NCCL said Init COMPLETE $complete times, not $want"
	elif [ "$held" != "held 0 " ]; then
		not_ok "$name" "a connection reached MASTER_PORT: $held"
	elif [ -n "${6:-}" ] && [ "$(in_logs "$tag" '.hpct.*' "$6")" != "$n" ]; then
		not_ok "$name" "not every rank said '$6'" "$(cat "$dir/$tag".hpct.* | head -20)"
	else
		ok "$name"
	fi
}

# check_shrink NAME TAG N VICTIM WORD: every rank but VICTIM (-1: none)
# said "WORD R SIZE K" (its new group's size and its rank there) and
# finished; nothing on MASTER_PORT unless rank 0 was the victim (its
# listener went with it)
check_shrink() {
	local name=$1 tag=$2 n=$3 victim=$4 word=$5 r bad="" k=0 size=$3
	[ "$victim" -lt 0 ] || size=$((n - 1))
	for ((r = 0; r < n; r++)); do
		[ "$r" = "$victim" ] && continue
		grep -q "^$word $r $size $k\$" "$dir/$tag" && grep -q "^ok $r\$" "$dir/$tag" ||
			bad="$bad rank $r;"
		k=$((k + 1))
	done
	if [ -n "$bad" ]; then
		not_ok "$name" "did not end in the new group and finish:$bad" "$(show "$tag")"
	elif [ "$victim" != 0 ] && [ "$(grep -E '^held ' "$dir/$tag")" != "held 0 " ]; then
		not_ok "$name" "a connection reached MASTER_PORT: $(grep -E '^held ' "$dir/$tag")"
	else
		ok "$name"
	fi
}

# nccl_suite VERSION CLASS: what both torches run ($py is the torch)
nccl_suite() {
	local v=$1 class=$2 n complete
	job r4 4 init --rootless
	check_rootless "torch $v $class, 4 ranks under the shim: eager init and new_group, Tier 2, Init COMPLETE, nothing on MASTER_PORT" \
		r4 4 "$class" 6
	grep -q '^nccl 2.30.7$' "$dir/r4" && ok "torch $v loads NCCL 2.30.7 (its wheel's)" ||
		not_ok "torch $v loads NCCL 2.30.7" "$(grep '^nccl ' "$dir/r4")"
	for n in 4 8; do
		[ "$v.$n" = 2.14.1.8 ] && continue # (the 8-rank run: on the newest torch)
		job "ids$n" "$n" init --rootless -- TORCH_NCCL_RANKS_PER_ROOT=2
		check_rootless "torch $v $class, $n ranks, TORCH_NCCL_RANKS_PER_ROOT=2: its $((n / 2)) ids become Tier 2" \
			"ids$n" "$n" "$class" $((n + 2)) \
			"every id derived and the comm is the world: Tier 2 over it, in place of the $((n / 2)) roots"
	done
	# shrink_group after a rank is SIGKILLed: survivors' sizes and ranks
	if [ "$v" != 2.15.0 ]; then
		skip "torch $v $class shrink_group after rank 3 is SIGKILLed: on torch 2.15.0 (rank 0's, the harder, here)"
	else
		job k3 4 shrink --rootless --keep-going
		check_shrink "torch $v $class shrink_group after rank 3 is SIGKILLed, under the shim: 3 survivors, nothing on MASTER_PORT" k3 4 3 shrunk
	fi
	job k0 4 shrink --rootless --keep-going -- JOB_VICTIM=0
	check_shrink "torch $v $class shrink_group after rank 0 is SIGKILLed, under the shim: the survivors shrink and finish" k0 4 0 shrunk
	# stock, for comparison (on the newest torch): the same job reaches Init
	# COMPLETE (the world's 4 and the group's 2, NCCL's root on rank 0, hpct
	# not acting), and with rank 0 then SIGKILLed no survivor can shrink:
	# its store died with it
	if [ "$v" != 2.15.0 ]; then
		skip "torch $v $class, 4 ranks stock: stock runs on torch 2.15.0 (for comparison)"
		skip "torch $v $class stock with rank 0 SIGKILLed: stock runs on torch 2.15.0 (for comparison)"
		return
	fi
	job s0 4 shrink --keep-going -- HPCT_USE_ROOTLESS=0 JOB_HOLD_MASTER=0 JOB_VICTIM=0
	complete=$(in_logs s0 '.nccl.*' 'Init COMPLETE')
	if [ "$(grep -c '^group ' "$dir/s0")" = 4 ] && [ "$complete" -ge 6 ] &&
		[ "$(in_logs s0 '.hpct.*' Tier)" = 0 ] && backend_is s0 4 "$class"; then
		ok "torch $v $class, 4 ranks stock (for comparison): Init COMPLETE $complete times"
	else
		not_ok "torch $v $class, 4 ranks stock" "Init COMPLETE $complete" "$(show s0)"
	fi
	if [ "$(grep -c '^shrunk ' "$dir/s0")" = 0 ] && grep -q 'DistNetworkError\|Connection reset\|refused' "$dir/s0"; then
		ok "torch $v $class stock with rank 0 SIGKILLed (for comparison): no survivor shrinks, PyTorch's store died with rank 0"
	else
		not_ok "torch $v $class stock with rank 0 SIGKILLed" "$(show s0)"
	fi
}

# has VERSION PY COUNT: PY holds torch VERSION, else COUNT skips and no
has() {
	local i
	if "$2" -c 'import torch, torch.distributed' 2>/dev/null; then
		py=$2
		rm -f "$dir"/* # (the last torch's logs, under the same tags)
		return 0
	fi
	for ((i = 0; i < $3; i++)); do
		skip "no torch $1 at $2 (tools/scripts/torch-venv.sh ${1%.*} makes it)"
	done
	return 1
}

if has 2.14.1 "$py214" "$tests214"; then
	nccl_suite 2.14.1 ProcessGroupNCCL
	# hpct-bench's torch scenario on the nccl backend: a stock and a
	# rootless row, each rank's communicator made in init_process_group
	# (device_id), the store's operations timed after it
	name="hpct-bench --scenario torch --torch 2.14 --backend nccl, 4 ranks: a stock and a rootless row, store operations timed"
	HPCT_TORCH_PYTHON_2_14=$py "$bench" --scenario torch --torch 2.14 --backend nccl \
		--ranks 4 --repeat 1 --launch direct --path stock,rootless --store-ops 3 \
		--port 17300 --json "$dir/bench.json" >"$dir/bench" 2>&1
	brc=$? bad=""
	[ "$brc" = 0 ] || bad="exit $brc;"
	for p in rootless stock; do
		grep -Eq "^torch-2.14-nccl +$p +4 +4 +1 +[0-9.]+ " "$dir/bench" || bad="$bad no $p row;"
		grep -Eq "^torch-2.14-nccl +$p +4( +[0-9]+ / [0-9]+){6}\$" "$dir/bench" ||
			bad="$bad no store operations of $p;"
		grep -q "\"path\":\"$p\",\"ranks\":4,[^}]*\"torch\":\"2.14\",\"launch\":\"direct\",\"backend\":\"nccl\"" \
			"$dir/bench.json" || bad="$bad no $p nccl row in the JSON;"
	done
	if [ -z "$bad" ]; then
		ok "$name"
	else
		not_ok "$name" "$bad" "$(grep -v 'hostname of the client' "$dir/bench" | tail -12)"
	fi
fi

if has 2.15.0 "$py215" "$tests215"; then
	nccl_suite 2.15.0 ProcessGroupNCCL2
	# nccl2's lazy init: no device_id, the communicator made at the first
	# all_reduce (which the stand-in runs no kernel of)
	job lazy 4 lazy --rootless
	check_rootless "torch 2.15.0 nccl2, lazy init (no device_id): the communicator made at the first collective, Tier 2, nothing on MASTER_PORT" \
		lazy 4 ProcessGroupNCCL2 4
	# dist._reconfigure: nccl2 inits non-blocking and polls; every rank's
	# handle through the store, then a new communicator of them all, and of
	# the 3 left after the last is SIGKILLed (not the world: Tier 1, NCCL's
	# root at a derived address in its new rank 0)
	job rc 4 reconfigure --rootless
	check_shrink "torch 2.15.0 nccl2 dist._reconfigure of its 4 ranks under the shim (a non-blocking init)" rc 4 -1 reconfigured
	job rc3 4 reconfigure --rootless --keep-going -- JOB_VICTIM=3
	# (the root's rank says where it is; the others reach it, saying nothing)
	tier1=$(in_logs rc3 '.hpct.*' 'NCCL id [0-9a-f]* \(3 ranks\): Tier 1, root here')
	if [ "$tier1" = 1 ]; then
		check_shrink "torch 2.15.0 nccl2 dist._reconfigure after rank 3 is SIGKILLed: the 3 survivors, Tier 1 on a derived id" rc3 4 3 reconfigured
	else
		not_ok "torch 2.15.0 nccl2 dist._reconfigure after rank 3 is SIGKILLed" "$tier1 Tier 1 roots, not 1" "$(show rc3)"
	fi
	# nccl-lazy: a communicator a point-to-point pair, its id derived in the
	# pair's first rank (Tier 1: the root there), 2 rounds of 2 pairs
	job pairs 4 pairs --rootless -- JOB_BACKEND=nccl-lazy
	pair_ids=$(cat "$dir"/pairs.hpct.* 2>/dev/null | grep -E 'NCCL id [0-9a-f]+ \(2 ranks\): Tier 1, root here' | grep -c .)
	complete=$(in_logs pairs '.nccl.*' 'nranks 2 .*Init COMPLETE')
	bad=$(all_ok pairs 4)
	if [ -n "$bad" ] || ! backend_is pairs 4 ProcessGroupNCCLLazy; then
		not_ok "torch 2.15.0 nccl-lazy, 4 ranks: a communicator a pair" "did not finish:$bad" "$(show pairs)"
	elif [ "$pair_ids" != 4 ] || [ "$complete" != 8 ]; then
		not_ok "torch 2.15.0 nccl-lazy, 4 ranks: a communicator a pair" \
			"$pair_ids of 4 pairs' ids derived with a root in their first rank; $complete of 8 pair ranks Init COMPLETE"
	elif [ "$(grep -E '^held ' "$dir/pairs")" != "held 0 " ]; then
		not_ok "torch 2.15.0 nccl-lazy, 4 ranks: a communicator a pair" "a connection reached MASTER_PORT: $(grep '^held ' "$dir/pairs")"
	else
		ok "torch 2.15.0 nccl-lazy, 4 ranks: a communicator a pair (4 pairs, each id derived, its root in the pair's first rank), nothing on MASTER_PORT"
	fi
	# nccl-legacy: ProcessGroupNCCL by name, as 2.14's
	job legacy 4 init --rootless -- JOB_BACKEND=nccl-legacy
	check_rootless "torch 2.15.0 nccl-legacy (ProcessGroupNCCL), 4 ranks under the shim: eager init and new_group, Tier 2, nothing on MASTER_PORT" \
		legacy 4 ProcessGroupNCCL 6
	job legacy-k0 4 shrink --rootless --keep-going -- JOB_BACKEND=nccl-legacy JOB_VICTIM=0
	check_shrink "torch 2.15.0 nccl-legacy shrink_group after rank 0 is SIGKILLed, under the shim" legacy-k0 4 0 shrunk
fi
exit 0
