#!/bin/bash
# Under the launchers users run (TAP), on a cluster of 4 nodes on this
# machine (tools/cluster/cluster: network + UTS namespaces on a bridge, nodes
# n1..n4 at 10.78.0.1-4):
#   Slurm (slurmctld, a slurmd per node): srun -N4 -n16 (Slurm's own uneven
#   layout, 8,6,1,1) of the rank program, of its Gloo job, of the PyTorch
#   job under the shim (Debian's 1.13 and 2.13): rootless, every address
#   derived from Slurm's node list; a second step of one allocation is a new
#   epoch, and so is a requeue; a rank of another Slurm job that reaches
#   this job's port is refused, naming it;
#   Open MPI: mpirun -np 16 --host n1:4,... with no HPCT_HOSTS (PMIx), in
#   blocks and --map-by node, with MPI_Init after hpct (PMIx shared), one
#   node, and mpirun inside a Slurm allocation;
#   torchrun across the 4 nodes, 4 workers a node, the PyTorch job under
#   the shim: on torch 2.13, c10d (the workers rootless), c10d with its
#   endpoint where nothing listens and static (the agent's store kept,
#   said); on torch 2.15, the newest, c10d and a killed worker restarted
#   by --max-restarts (the restart benchmark's hpct run:
#   tools/cluster/bench-torchrun-cluster).
# Needs root; a listed skip otherwise, or without Slurm or Open MPI.
# Usage: test_cluster.sh CLUSTER RANK RANK_MPI PRELOAD JOB_PY
set -u
cluster_tool=$(realpath "$1") rank=$(realpath "$2") rank_mpi=$(realpath "$3") preload=$4 job=$(realpath "$5")
. "$(dirname "$0")/tap.sh"
plan=19
echo "1..$plan"
skip_all() {
	while [ $n_test -lt $plan ]; do skip "$1"; done
	exit 0
}
[ "$(id -u)" = 0 ] || skip_all "needs root for network namespaces"
for p in srun slurmctld slurmd munged mpirun nsenter unshare; do
	command -v $p >/dev/null || skip_all "no $p (Debian's slurmctld, slurmd, slurm-client, munge, openmpi-bin, util-linux)"
done
name=c$(($$ % 100000))
dir=$(mktemp -d)
cleanup() {
	"$cluster_tool" --name "$name" down
	rm -rf "$dir"
}
trap cleanup EXIT
if ! "$cluster_tool" --name "$name" up >"$dir/up" 2>&1; then
	skip_all "cannot make the cluster here: $(tail -1 "$dir/up")"
fi
on() { "$cluster_tool" --name "$name" exec "$@"; }

# every rank printed its line on the node its address says, with the
# path, size, node count, job and epoch wanted; the layout (ranks per
# node, in order) is the one given
check_ranks() { # log n nodes job epoch layout (e.g. "n1 n1 n2 ...")
	local log=$1 n=$2 nodes=$3 job=$4 epoch=$5 layout=$6 r host bad="" line
	local -a hosts=($layout)
	for ((r = 0; r < n; r++)); do
		line=$(grep -E "^rank $r of " "$log" | head -1)
		host=${hosts[$r]}
		if [ -z "$line" ]; then
			bad="$bad rank $r printed nothing;"
		elif ! [[ $line == "rank $r of $n host $host listens 10.78.0.${host#n}:"*" path rootless nodes $nodes job $job epoch $epoch" ]]; then
			bad="$bad rank $r: '$line';"
		fi
	done
	echo "$bad"
}
layout() { # COUNT NODE COUNT NODE ...: NODE repeated COUNT times, in order
	local out=""
	while [ $# -gt 0 ]; do
		for ((i = 0; i < $1; i++)); do out="$out $2"; done
		shift 2
	done
	echo "$out"
}
verdict() { # name bad log
	if [ -z "$2" ]; then ok "$1"; else not_ok "$1" "$2" "$(tail -8 "$3")"; fi
}

export HPCT_TIMEOUT=30

# --- Slurm
if ! "$cluster_tool" --name "$name" slurm >"$dir/slurm" 2>&1; then
	not_ok "Slurm starts on the cluster" "$(tail -12 "$dir/slurm")"
	skip_all "no Slurm"
fi
ok "cluster of 4 nodes, each its own hostname and address, Slurm on it (slurmctld, 4 slurmd)"

slurm_layout=$(layout 8 n1 6 n2 1 n3 1 n4)
run_srun() { # log args...
	local log=$1
	shift
	HPCT_USE_ROOTLESS=1 on n1 timeout 120 srun -N4 -n16 "$@" >"$log" 2>&1
}
run_srun "$dir/hello" "$rank"
jobid=$(on n1 sacct -X -n -o JobID 2>/dev/null | tail -1 | tr -d ' ')
# sacct needs accounting: the job id from squeue's history is in the ranks' lines
jobid=$(sed -n 's/.* job \([0-9]*\) epoch.*/\1/p' "$dir/hello" | head -1)
bad=$(check_ranks "$dir/hello" 16 4 "${jobid:-?}" 0 "$slurm_layout")
verdict "srun -N4 -n16 (8,6,1,1 a node): rootless, every address derived from Slurm's node list" "$bad" "$dir/hello"

# srun -m cyclic: Slurm's round robin, which hpct lays out the same way;
# the layout wanted is where each rank ran (its hostname)
run_srun "$dir/cyclic" -m cyclic "$rank"
ran=$(for ((r = 0; r < 16; r++)); do sed -n "s/^rank $r of 16 host \([a-z0-9]*\) .*/\1/p" "$dir/cyclic"; done)
bad=$(check_ranks "$dir/cyclic" 16 4 "$(sed -n 's/.* job \([0-9]*\) epoch.*/\1/p' "$dir/cyclic" | head -1)" 0 "$ran")
[ "$(echo $ran | cut -d' ' -f1-4)" = "n1 n2 n3 n4" ] || bad="$bad ranks 0-3 ran on $(echo $ran | cut -d' ' -f1-4), not one a node;"
verdict "srun -m cyclic -N4 -n16: rootless, each rank's address on the node Slurm put it" "$bad" "$dir/cyclic"

run_srun "$dir/gloo" "$rank" gloo
bad=$(check_ranks "$dir/gloo" 16 4 "$(sed -n 's/.* job \([0-9]*\) epoch.*/\1/p' "$dir/gloo" | head -1)" 0 "$slurm_layout")
[ "$(grep -c '^gloo ok' "$dir/gloo")" = 16 ] || bad="$bad $(grep -c '^gloo ok' "$dir/gloo") of 16 Gloo allreduces checked;"
verdict "srun -N4 -n16: a Gloo context over the world, rootless, allreduce exact" "$bad" "$dir/gloo"

# PyTorch: the job as a user writes its srun line (torch's env:// from
# Slurm's variables), under the shim; local rank 0 of each node records
# any connection to MASTER_PORT: there must be none
py213=${HPCT_TORCH_PYTHON_2_13:-${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}/venv-torch-2.13.0/bin/python}
port=29400
for t in 1.13 2.13; do
	py=/usr/bin/python3
	[ $t = 2.13 ] && py=$py213
	if [ ! -x "$py" ] || ! "$py" -c 'import torch' 2>/dev/null; then
		skip "torch $t under srun: no torch $t ($py)"
		continue
	fi
	port=$((port + 1))
	HPCT_USE_ROOTLESS=1 LD_PRELOAD="$preload" JOB_SHOW_SHIM=1 JOB_NO_CHILDREN=1 JOB_HOLD_MASTER=1 \
		OMP_NUM_THREADS=1 \
		MASTER_ADDR=n1 MASTER_PORT=$port on n1 timeout 300 srun -N4 -n16 sh -c \
		'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID exec "$0" "$1"' \
		"$py" "$job" >"$dir/torch$t" 2>&1
	bad=""
	for ((r = 0; r < 16; r++)); do
		grep -Eq "(^|:)ok $r\$" "$dir/torch$t" || bad="$bad rank $r did not finish;"
		grep -Eq "(^|:)shim $r yes\$" "$dir/torch$t" || bad="$bad rank $r: its store not served;"
	done
	verdict "torch $t: srun -N4 -n16 of the PyTorch job under the shim: rootless, nothing on MASTER_PORT" "$bad" "$dir/torch$t"
done

# one allocation, two steps: epochs 0 and 1
HPCT_USE_ROOTLESS=1 on n1 timeout 120 salloc -N4 -n16 sh -c \
	"srun $rank >$dir/step0 2>&1; srun $rank >$dir/step1 2>&1" >"$dir/salloc" 2>&1
jobid=$(sed -n 's/.* job \([0-9]*\) epoch.*/\1/p' "$dir/step0" | head -1)
bad=$(check_ranks "$dir/step0" 16 4 "${jobid:-?}" 0 "$slurm_layout")
bad="$bad$(check_ranks "$dir/step1" 16 4 "${jobid:-?}" 1 "$slurm_layout")"
verdict "salloc: its second srun is the same job at epoch 1" "$bad" "$dir/step1"

# a requeued batch job: SLURM_RESTART_COUNT=1 is epoch 2^32 (+ step 0)
cat >"$dir/batch.sh" <<EOF
#!/bin/sh
srun $rank >$dir/batch.\${SLURM_RESTART_COUNT:-0} 2>&1
[ -n "\${SLURM_RESTART_COUNT:-}" ] || { scontrol requeue \$SLURM_JOB_ID; sleep 60; }
EOF
chmod +x "$dir/batch.sh"
HPCT_USE_ROOTLESS=1 on n1 sbatch --parsable -N4 -n16 --requeue -o "$dir/batch.out" "$dir/batch.sh" \
	>"$dir/sbatch" 2>&1
batch=$(head -1 "$dir/sbatch")
# Slurm holds a requeued job for 2 minutes (its BeginTime): released at
# once, and again every 2 s until it runs (Restarts=1 shows while the job
# is still completing; an update then is lost when it turns pending, with
# a new BeginTime: the second run then missed the wait, twice here)
for _ in $(seq 1 600); do
	on n1 scontrol show job "$batch" 2>/dev/null | grep -q 'Restarts=1' && break
	sleep 0.1
done
for i in $(seq 0 899); do
	[ $((i % 20)) = 0 ] && on n1 scontrol update jobid="$batch" starttime=now >/dev/null 2>&1
	[ -s "$dir/batch.1" ] && grep -q '^done 15' "$dir/batch.1" && break
	sleep 0.1
done
jobid=$(sed -n 's/.* job \([0-9]*\) epoch.*/\1/p' "$dir/batch.0" 2>/dev/null | head -1)
bad=$(check_ranks "$dir/batch.0" 16 4 "${jobid:-?}" 0 "$slurm_layout")
bad="$bad$(check_ranks "$dir/batch.1" 16 4 "${jobid:-?}" 4294967296 "$slurm_layout")"
verdict "sbatch --requeue: the requeued job's step is epoch 2^32 (restart count 1)" "$bad" "$dir/batch.1"

# Another Slurm job on the same nodes, in the same port window (a port
# range as wide as a node's ranks: one window for every job): job A holds
# n1 and n2; job B's rank 0 finds its port on n1 taken, its rank 1 on n3
# reaches A's rank 0 there and is refused as another job.
HPCT_USE_ROOTLESS=1 HPCT_PORT_RANGE=2 HPCT_DEBUG=WARN on n1 timeout 120 \
	srun -w n1,n2 -N2 -n4 --ntasks-per-node=2 "$rank" hold "$dir/release" >"$dir/jobA" 2>&1 &
a_pid=$!
for _ in $(seq 1 600); do [ "$(grep -c '^rank' "$dir/jobA")" = 4 ] && break; sleep 0.1; done
HPCT_USE_ROOTLESS=1 HPCT_PORT_RANGE=1 HPCT_TIMEOUT=10 on n1 timeout 120 \
	srun -w n1,n3 -N2 -n2 --ntasks-per-node=1 "$rank" >"$dir/jobB" 2>&1
touch "$dir/release"
wait $a_pid
a_rc=$?
bad=""
grep -Eq "^cluster_rank 1: .*rank 0 .*10\.78\.0\.1:[0-9]+.*another job" "$dir/jobB" ||
	bad="$bad job B's rank 1 was not refused by rank 0 at 10.78.0.1 as another job;"
grep -Eq "^cluster_rank -1: .*rank 0: cannot listen on 10\.78\.0\.1:[0-9]+, derived for job '[0-9]+'.*the port is taken" "$dir/jobB" ||
	bad="$bad job B's rank 0 did not name its taken port;"
grep -Eq "rank 0: refused connection from 10\.78\.0\.3:[0-9]+ claiming rank 1 of job [0-9a-f]+ epoch 0 \(size 2, for rank 0\): another job" "$dir/jobA" ||
	bad="$bad job A's rank 0 did not log whom it refused;"
[ $a_rc = 0 ] && [ "$(grep -c '^done' "$dir/jobA")" = 4 ] || bad="$bad job A did not finish (rc $a_rc);"
cat "$dir/jobA" >>"$dir/jobB"
verdict "a rank of another Slurm job reaching this job's port is refused, naming both" "$bad" "$dir/jobB"

# --- Open MPI: a rank's view from its PMIx server; mpirun on n1 starts its
# daemons on the others through tools/cluster/cluster (as ssh would)
agent=$dir/agent
cat >"$agent" <<EOF
#!/bin/sh
host=\$1
shift
exec "$cluster_tool" --name "$name" exec "\$host" sh -c "\$*"
EOF
chmod +x "$agent"
mpi() { # log args...
	local log=$1
	shift
	HPCT_USE_ROOTLESS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		on n1 timeout 120 mpirun --mca plm_rsh_agent "$agent" "$@" >"$log" 2>&1
}
mpi_job() { sed -n 's/.* job \([0-9]*\) epoch.*/\1/p' "$1" | head -1; }
env | grep -q '^HPCT_HOSTS=' && bad="HPCT_HOSTS is set;" || bad=""
mpi "$dir/mpi" -np 16 --host n1:4,n2:4,n3:4,n4:4 "$rank" gloo
bad="$bad$(check_ranks "$dir/mpi" 16 4 "$(mpi_job "$dir/mpi")" 0 "$(layout 4 n1 4 n2 4 n3 4 n4)")"
[ "$(grep -c '^gloo ok' "$dir/mpi")" = 16 ] || bad="$bad $(grep -c '^gloo ok' "$dir/mpi") of 16 Gloo allreduces checked;"
verdict "mpirun -np 16 --host n1:4,n2:4,n3:4,n4:4, no HPCT_HOSTS: rootless from PMIx, Gloo too" "$bad" "$dir/mpi"

mpi "$dir/mpi-node" -np 8 --map-by node --host n1:4,n2:4 "$rank_mpi" mpi
bad=$(check_ranks "$dir/mpi-node" 8 2 "$(mpi_job "$dir/mpi-node")" 0 "n1 n2 n1 n2 n1 n2 n1 n2")
[ "$(grep -c '^mpi ok' "$dir/mpi-node")" = 8 ] || bad="$bad $(grep -c '^mpi ok' "$dir/mpi-node") of 8 ranks did MPI_Init, MPI_Allreduce, MPI_Finalize after hpct;"
verdict "mpirun --map-by node (ranks round robin): PMIx's map; MPI_Init after hpct still works" "$bad" "$dir/mpi-node"

mpi "$dir/mpi-one" -np 4 --host n3:4 "$rank"
bad=$(check_ranks "$dir/mpi-one" 4 1 "$(mpi_job "$dir/mpi-one")" 0 "n3 n3 n3 n3")
verdict "mpirun -np 4 on one node: rootless" "$bad" "$dir/mpi-one"

# mpirun inside an allocation: Open MPI starts its daemons with srun, and
# its ranks inherit a daemon's SLURM_PROCID: mpirun's numbering must win
HPCT_USE_ROOTLESS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 on n1 timeout 120 \
	salloc -N4 -n16 mpirun -np 16 "$rank" >"$dir/mpi-slurm" 2>&1
bad=$(check_ranks "$dir/mpi-slurm" 16 4 "$(mpi_job "$dir/mpi-slurm")" 0 "$slurm_layout")
verdict "mpirun inside salloc -N4 -n16: Open MPI's ranks and PMIx's map, not the daemons' Slurm variables" "$bad" "$dir/mpi-slurm"

# --- torchrun across the 4 nodes, 4 workers a node, torch 2.13, the
# PyTorch job under the shim with HPCT_HOSTS naming the nodes
torchrun_job() { # tag workers-a-node rdzv-args...
	local tag=$1 nproc=$2 k rc=0 pids=()
	shift 2
	for k in 1 2 3 4; do
		HPCT_USE_ROOTLESS=1 LD_PRELOAD="$preload" HPCT_HOSTS=n1,n2,n3,n4 OMP_NUM_THREADS=1 \
			JOB_SHOW_SHIM=1 JOB_NO_CHILDREN=1 HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=INIT HPCT_TIMEOUT=60 \
			on "n$k" timeout 300 "${tr_py:-$py213}" -m torch.distributed.run --nnodes 4 \
			--nproc-per-node "$nproc" "${@/@NODE_RANK@/$((k - 1))}" "$job" >"$dir/$tag.n$k" 2>&1 &
		pids+=($!)
	done
	for k in "${!pids[@]}"; do wait "${pids[$k]}" || rc=$((rc + 1)); done
	cat "$dir/$tag".n* >"$dir/$tag"
	echo $rc
}
# every agent served the agents' rendezvous store at ENDPOINT on its own
# node, its part of the agents' world on the range's top port (18191),
# which no worker took
agents_served() { # tag endpoint
	local k bad=""
	for k in 1 2 3 4; do
		grep -Eq "^n$k:[0-9]+ HPCT INFO preload: torchrun's agent $((k - 1)) of 4: its rendezvous store at $2 served in it \(127\.0\.0\.1:[0-9]+\), on the agents' world \(this agent at 10\.78\.0\.$k:18191\)" "$dir/$1.n$k" ||
			bad="$bad agent on n$k: its store not served on the agents' world;"
	done
	grep -Eq "rank [0-9]+ of [0-9]+ listening on [0-9.]+:18191 over tcp \(node [0-3] n[1-4], job '[^t]" "$dir/$1" &&
		bad="$bad a worker took the agents' port;"
	echo "$bad"
}
torchrun_verdict() { # name tag rc workers served line [endpoint]
	local r bad=""
	[ "$3" = 0 ] || bad="$3 of 4 torchrun agents failed;"
	for ((r = 0; r < $4; r++)); do
		grep -Eq "(^|:)ok $r\$" "$dir/$2" || bad="$bad worker $r did not finish;"
		grep -Eq "(^|:)shim $r $5\$" "$dir/$2" || bad="$bad worker $r: served not '$5';"
	done
	[ "$(grep -c "$6" "$dir/$2")" = "$4" ] || bad="$bad $(grep -c "$6" "$dir/$2") of $4 workers say '$6';"
	[ -z "${7:-}" ] || bad="$bad$(agents_served "$2" "$7")"
	verdict "$1" "$bad" "$dir/$2"
}
# restarted LABEL PY TAG: a worker killed under torchrun --max-restarts 1
# (tools/cluster/bench-torchrun-cluster's hpct run, torch at PY, its output
# in $dir/TAG): all 16 train again in one new world
restarted() {
	local name="${1}torchrun --max-restarts 1, a worker killed: all 16 train again in one new world"
	if "$(dirname "$cluster_tool")/bench-torchrun-cluster" --preload "$preload" --python "$2" \
		--reps 1 --paths hpct >"$dir/$3" 2>&1 && grep -Eq '^hpct +1 +[0-9.]+ ' "$dir/$3"; then
		ok "$name ($(grep -E '^hpct +1' "$dir/$3" | awk '{print $3}') s)"
	else
		not_ok "$name" "$(tail -12 "$dir/$3")"
	fi
}
if [ ! -x "$py213" ]; then
	skip "torchrun across nodes: no torch 2.13 ($py213)"
	skip "torchrun across nodes: no torch 2.13 ($py213)"
	skip "torchrun across nodes: no torch 2.13 ($py213)"
	skip "torchrun across nodes: no torch 2.13 ($py213)"
else
	# c10d: the agents' rendezvous store served in every agent (n1's own
	# listener at the endpoint reached by none); the workers make their own
	# store (the shim asks the agents so), served in every worker:
	# rootless, nothing on MASTER_PORT
	rc=$(JOB_HOLD_MASTER=1 torchrun_job c10d 4 --rdzv-backend c10d --rdzv-endpoint n1:29500 --rdzv-id c10d-$$)
	torchrun_verdict "torchrun c10d across 4 nodes (16 workers): the agents' rendezvous and the workers rootless" \
		c10d "$rc" 16 yes "HPCT INFO rootless: rank [0-9]* of 16 listening on 10\.78\.0\.[1-4]:[0-9]* over tcp (node [0-3] n[1-4], job 'c10d-$$@" \
		10.78.0.1:29500
	# the endpoint a name where nothing listens (ctl, no agent): stock
	# agents would find no store there; these meet all the same
	rc=$(torchrun_job noroot 1 --rdzv-backend c10d --rdzv-endpoint ctl:29502 --rdzv-id noroot-$$)
	torchrun_verdict "torchrun c10d, its endpoint where nothing listens (ctl:29502): the 4 agents meet, no root" \
		noroot "$rc" 4 yes "HPCT INFO rootless: rank [0-3] of 4 listening on 10\.78\.0\.[1-4]:[0-9]* over tcp (node [0-3] n[1-4], job 'noroot-$$@" \
		10.78.0.254:29502
	# static: the agents' rendezvous store served in every agent; PyTorch
	# hands the workers node 0's agent's store instead (no switch), which
	# PyTorch keeps, said in every worker
	rc=$(torchrun_job static 4 --rdzv-backend static --master-addr n1 --master-port 29501 --node-rank @NODE_RANK@)
	torchrun_verdict "torchrun static across 4 nodes (16 workers): the agents' rendezvous rootless, the workers' store node 0's, one line a worker" \
		static "$rc" 16 no "hpct: torchrun's agent holds this job's store (TORCHELASTIC_USE_AGENT_STORE=True)" \
		10.78.0.1:29501
	skip "torch 2.13: torchrun --max-restarts 1, a worker killed: on torch 2.15, the newest, below"
fi

# torch 2.15 (the newest): c10d (the agents' rendezvous store served in
# every agent, n1's own listener at the endpoint reached by none; the
# workers make their own store, as the shim asks the agents, served in
# every worker: rootless, nothing on MASTER_PORT) and a worker killed,
# torchrun restarting them all (the benchmark's hpct run)
py215=${HPCT_TORCH_PYTHON_2_15:-${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}/venv-torch-2.15.0/bin/python}
if [ ! -x "$py215" ]; then
	skip "torchrun across nodes: no torch 2.15 ($py215)"
	skip "torchrun across nodes: no torch 2.15 ($py215)"
else
	rc=$(tr_py=$py215 JOB_HOLD_MASTER=1 torchrun_job c10d15 4 --rdzv-backend c10d --rdzv-endpoint n1:29503 --rdzv-id c10d15-$$)
	torchrun_verdict "torch 2.15: torchrun c10d across 4 nodes (16 workers): the agents' rendezvous and the workers rootless" \
		c10d15 "$rc" 16 yes "HPCT INFO rootless: rank [0-9]* of 16 listening on 10\.78\.0\.[1-4]:[0-9]* over tcp (node [0-3] n[1-4], job 'c10d15-$$@" \
		10.78.0.1:29503
	restarted "torch 2.15: " "$py215" bench15
fi

[ $n_test = $plan ] || not_ok "the plan" "$n_test tests run, $plan planned"
exit 0
