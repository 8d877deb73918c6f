#!/bin/bash
# The recovery frameworks users run on top of PyTorch, real, with and
# without hpct's shim (LD_PRELOAD=libhpct_preload.so HPCT_USE_ROOTLESS=1):
#   torchft 0.2.0: its lighthouse and two replica groups of one rank, each
#     under its own torchrun, the way torchft's train_ddp example runs;
#     one group exits at step 20 (or the first past it) and torchrun
#     restarts it (the other
#     group, then the primary one, whose store configures every quorum's
#     process group); both must reach step 60, as stock does.
#   NVIDIA Resiliency Extension 0.4.1: its in-process restart (Wrapper)
#     around a 4-rank DDP loop, the Wrapper's store on rank 0 and the job's
#     store at MASTER_PORT, a monitor process forked and double-forked by
#     each rank: stock with rank 2 killed (the survivors restart and
#     finish, 3 ranks); under the shim with no fault (all finish: the
#     Wrapper's, the job's and the monitors' stores are one keyspace), with
#     rank 2 killed (as stock), and with rank 0 killed, which stock cannot
#     survive (its store dies with rank 0): every key is on two ranks.
# Each over torch 2.13 (CPU) and torch 2.15 (CUDA 13.2, its CPU side: the
# oldest and the newest torch both frameworks install on).
# Usage: test_frameworks.sh PRELOAD HPCT_RUN; the Pythons of venvs with
# torchft 0.2.0 and nvidia-resiliency-ext 0.4.1 over torch 2.13.0 and 2.15.0
# in HPCT_FRAMEWORKS_PYTHON and HPCT_FRAMEWORKS_PYTHON_2_15
# (tools/scripts/torch-venv.sh frameworks 2.13|2.15), else the cache's.
# TAP on stdout.
set -u
preload=$1
cache=${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}
py213=${HPCT_FRAMEWORKS_PYTHON:-$cache/venv-frameworks-2.13.0/bin/python}
py215=${HPCT_FRAMEWORKS_PYTHON_2_15:-$cache/venv-frameworks-2.15.0/bin/python}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$dir"
}
trap cleanup EXIT
. "$here/tap.sh"

echo "1..16"
export OMP_NUM_THREADS=1 HPCT_TIMEOUT=60

# torchft: lighthouse, then two groups; group $1 exits at step 20 in its
# first run.  Each group's torchrun's exit status and log in $dir.
torchft_run() { # tag exiting_group path(stock|hpct) port_base
	local tag=$1 ex=$2 path=$3 base=$4 g lh env=()
	[ "$path" = hpct ] && env=(HPCT_USE_ROOTLESS=1 LD_PRELOAD="$preload") ||
		env=(HPCT_USE_ROOTLESS=0)
	"$lighthouse" --min_replicas 1 --quorum_tick_ms 100 --join_timeout_ms 2000 \
		--bind "127.0.0.1:$base" >"$dir/$tag.lh" 2>&1 &
	lh=$!
	pids+=("$lh")
	local gp=()
	for g in 0 1; do
		env "${env[@]}" TORCHFT_LIGHTHOUSE="http://127.0.0.1:$base" REPLICA_GROUP_ID=$g \
			JOB_EXIT_AT=$([ "$g" = "$ex" ] && echo 20 || echo -1) JOB_STEPS=60 \
			timeout 240 "$py" -m torch.distributed.run --nnodes 1 --nproc_per_node 1 \
			--max-restarts 2 --master-addr 127.0.0.1 --master-port $((base + 1 + g)) \
			--rdzv-backend static --node-rank 0 "$here/frameworks/torchft_job.py" \
			>"$dir/$tag.g$g" 2>&1 &
		gp+=($!)
		pids+=($!)
	done
	for g in 0 1; do
		wait "${gp[$g]}"
		echo $? >"$dir/$tag.rc$g"
	done
	kill "$lh" 2>/dev/null
	wait "$lh" 2>/dev/null
}

torchft_verdict() { # tag exiting_group name
	local tag=$1 ex=$2 name=$3 g bad=""
	for g in 0 1; do
		grep -q "^done $g at step 60\$" "$dir/$tag.g$g" || bad="$bad group $g did not reach step 60;"
		[ "$(cat "$dir/$tag.rc$g")" = 0 ] || bad="$bad group $g's torchrun exited $(cat "$dir/$tag.rc$g");"
	done
	grep -Eq "^group $ex exits at step [2-5][0-9]\$" "$dir/$tag.g$ex" || bad="$bad group $ex never exited;"
	[ "$(grep -c "participants" "$dir/$tag.g$ex")" -ge 2 ] || bad="$bad group $ex did not train again;"
	if [ -z "$bad" ]; then
		ok "$name"
	else
		not_ok "$name" "$bad" "$(grep -hE 'Error|error|hpct|done|exits' "$dir/$tag.g0" "$dir/$tag.g1" | tail -12)"
	fi
}

# NVRx: four ranks started by hand, rank 0's Wrapper store the server at
# MASTER_PORT; output in $dir/<tag><rank>
nvrx_run() { # tag path(stock|hpct) port VAR=VALUE...
	local tag=$1 path=$2 port=$3 r env=()
	shift 3
	[ "$path" = hpct ] && env=(HPCT_USE_ROOTLESS=1 LD_PRELOAD="$preload" HPCT_HOSTS=127.0.0.1
		HPCT_JOB_ID="$tag-$$") || env=(HPCT_USE_ROOTLESS=0)
	local rp=()
	for r in 0 1 2 3; do
		env "${env[@]}" "$@" RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 \
			MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" timeout 150 "$py" \
			"$here/../tools/bench/hpct-bench-nvrx.py" >"$dir/$tag$r" 2>&1 &
		rp+=($!)
		pids+=($!)
	done
	for r in 0 1 2 3; do wait "${rp[$r]}" 2>/dev/null; done
}

nvrx_verdict() { # tag name size ranks...
	local tag=$1 name=$2 size=$3 r bad=""
	shift 3
	for r in "$@"; do
		grep -q "^done $r $size\$" "$dir/$tag$r" ||
			bad="$bad rank $r did not finish in a world of $size: $(grep -E 'done|iteration|Error|HPCT WARN' "$dir/$tag$r" | tail -3 | tr '\n' ' ');"
	done
	if [ -z "$bad" ]; then
		ok "$name"
	else
		not_ok "$name" "$bad"
	fi
}

# frameworks_suite TORCH PY PORT STOCK: the 8 tests over that torch, PY its
# venv's Python, ports from PORT (40 of them); STOCK 0: the stock runs
# (for comparison) are skips, run on the other torch
frameworks_suite() {
	local v=$1 i path ex what port=$3 stock=$4
	py=$2
	if ! "$py" -c 'import torchft, nvidia_resiliency_ext.inprocess' 2>/dev/null; then
		for i in 1 2 3 4 5 6 7 8; do skip "torch $v: no torchft and NVRx at $py (tools/scripts/torch-venv.sh frameworks $v)"; done
		return
	fi
	lighthouse=$(dirname "$py")/torchft_lighthouse
	for path in stock hpct; do
		for ex in 1 0; do
			what="group 1 restarted"
			[ "$ex" = 0 ] && what="the primary group (0) restarted"
			if [ "$path.$stock" = stock.0 ]; then
				skip "torch $v, torchft 0.2.0, stock: $what: stock runs on torch 2.15 (for comparison)"
				port=$((port + 4))
				continue
			fi
			torchft_run "tf-$path-$ex" "$ex" "$path" "$port"
			port=$((port + 4))
			torchft_verdict "tf-$path-$ex" "$ex" "torch $v, torchft 0.2.0, $path: two replica groups, $what, both reach step 60"
		done
	done
	if [ "$stock" = 1 ]; then
		nvrx_run nv-stock-2 stock $((port + 20)) JOB_KILL_RANK=2
		nvrx_verdict nv-stock-2 "torch $v, NVRx 0.4.1, stock: rank 2 killed, the 3 survivors restart in-process and finish" 3 0 1 3
	else
		skip "torch $v, NVRx 0.4.1, stock: rank 2 killed: stock runs on torch 2.15 (for comparison)"
	fi
	nvrx_run nv-hpct hpct $((port + 21))
	nvrx_verdict nv-hpct "torch $v, NVRx 0.4.1, hpct: the Wrapper's, the job's and the monitors' stores are one keyspace, all 4 finish" 4 0 1 2 3
	nvrx_run nv-hpct-2 hpct $((port + 22)) JOB_KILL_RANK=2
	nvrx_verdict nv-hpct-2 "torch $v, NVRx 0.4.1, hpct: rank 2 killed, the 3 survivors restart in-process and finish (as stock)" 3 0 1 3
	nvrx_run nv-hpct-0 hpct $((port + 23)) JOB_KILL_RANK=0
	nvrx_verdict nv-hpct-0 "torch $v, NVRx 0.4.1, hpct: rank 0 killed (stock cannot: its store dies with it), the 3 survivors restart in-process and finish" 3 1 2 3
}

# under the shim on both; stock, for comparison, on the newest
frameworks_suite 2.13 "$py213" 29640 0
frameworks_suite 2.15 "$py215" 29680 1
exit $failed
