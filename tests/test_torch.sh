#!/bin/bash
# An unmodified PyTorch job (tests/torch/job.py: no hpct import) under one
# libhpct_preload.so, with Debian's torch 1.13, torch 2.13.0 (a CPU venv:
# HPCT_TORCH_PYTHON_2_13) and torch 2.15.0 (its CUDA 13.2 build, run on the
# CPU: HPCT_TORCH_PYTHON_2_15), else the cache tools/scripts/torch-venv.sh fills,
# as a user runs it: through hpct-run --rootless and through
# python3 -m torch.distributed.run, N = 2, 4, 8, three incarnations of
# init -> collectives, subgroups, object collectives, the store -> destroy,
# with subgroups kept referenced; tcp:// and a dist.TCPStore the script
# makes; N = 4 with HPCT_SECRET.  Local rank 0 holds MASTER_PORT and
# records any connection to it: there must be none.  (All of it on 1.13
# and 2.15, the oldest and the newest; 2.13 runs hpct-run and torchrun at
# N = 4, stock and the rank killed during init, the rest listed as skips
# saying so.)  The same job with
# HPCT_USE_ROOTLESS=0 runs stock (in a network namespace of its own, as
# stock binds the wildcard address); a rank killed during init makes the
# others fail, naming it, within HPCT_TIMEOUT; a rank killed while a forked
# child of it lives on is answered for by its keys' other homes at once.
# TAP output.
# Then torch 2.15 calling itself 2.16.0 (a copy of its package folder, links
# but version.py): served on 2.15's protocol, one line a rank (the rule for
# releases hpct has not seen); and 32 ranks of 1.13 (tests/torch/conns.py)
# under strace: the store's sockets at each rank, and each re-init's
# connects against the first's.
# Last, hpct-bench --scenario torch --reinit prints a row per torch,
# launch (direct, and under the release's own torchrun), path and phase.
# Usage: test_torch.sh HPCT_RUN PRELOAD JOB_PY HPCT_BENCH
# TORCH_TESTS=TAG,... runs only those parts (the others are listed as
# skips, so the plan stays the same): reuse, hpct-run, tcp, store, secret,
# torchrun, stock, killed-init, killed-fork, newer, conns, bench; TORCH_VERSIONS=
# 1.13,2.13,2.15 the torches (all by default).  Unset, everything runs.
set -u
run=$1
preload=$2
job=$3
bench=$4
dir=$(mktemp -d)
child_pids=()
cleanup() {
	for p in "${child_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$dir"
}
trap cleanup EXIT
. "$(dirname "$0")/tap.sh"
# ok when a count is the one wanted
expect_count() { # name got want what
	if [ "$2" = "$3" ]; then
		ok "$1"
	else
		not_ok "$1" "$2 $4, not $3"
	fi
}
# want TAG [VERSION]: TORCH_TESTS (and TORCH_VERSIONS) leave it in; else
# lists COUNT skips (the tests the part would have run) and says no
want() { # tag version count
	local tag=$1 v=${2:-} count=${3:-1} i
	if { [ -z "${TORCH_TESTS:-}" ] || [[ ",$TORCH_TESTS," == *",$tag,"* ]]; } &&
		{ [ -z "$v" ] || [ -z "${TORCH_VERSIONS:-}" ] || [[ ",$TORCH_VERSIONS," == *",$v,"* ]]; }; then
		return 0
	fi
	for ((i = 0; i < count; i++)); do
		skip "torch${v:+ $v}: $tag not in TORCH_TESTS/TORCH_VERSIONS"
	done
	return 1
}
# MASTER_PORT for the next job: fixed, below the kernel's ephemeral range
# (32768) and outside hpct's own (10000-18191, its store's 1808-9999), so
# that no outgoing connection can take it between its choice and its use
# (a port found free, then bound later, was taken so once: EADDRINUSE)
master_next=29000
next_port() {
	port=$master_next
	master_next=$((master_next + 1))
}
# every rank printed "ok R" and, with JOB_SHOW_SHIM, whether the shim
# served its store; its exec'd child (not routed: rank 0's server took it)
# and its double-forked one (served as its rank) read rank 0's key, and the
# forked one set a key its rank read: one keyspace for them all
check_ranks() { # name n expect_shim log
	local name=$1 n=$2 shim=$3 log=$4 r bad=""
	for ((r = 0; r < n; r++)); do
		grep -Eq "(^|:)ok $r\$" "$log" || bad="$bad rank $r did not finish;"
		grep -Eq "(^|:)shim $r $shim\$" "$log" || bad="$bad rank $r: shim not '$shim';"
		grep -Eq "(^|:)child-shim $r no saw 0\$" "$log" ||
			bad="$bad rank $r's exec'd child: $(grep -E "(^|:)child-shim $r " "$log");"
		grep -Eq "(^|:)forked-shim $r $shim saw 0 set $r\$" "$log" ||
			bad="$bad rank $r's forked child: $(grep -E "(^|:)forked-shim $r " "$log");"
	done
	if [ -z "$bad" ]; then
		ok "$name"
	else
		not_ok "$name" "$bad" "$(grep -v 'HPCT WARN store: wait' "$log" | tail -15)"
	fi
}

export HPCT_TIMEOUT=60 OMP_NUM_THREADS=1 JOB_SHOW_SHIM=1
per_torch=16
echo "1..$((3 * per_torch + 5))"

cache=${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}
py213=${HPCT_TORCH_PYTHON_2_13:-$cache/venv-torch-2.13.0/bin/python}
py215=${HPCT_TORCH_PYTHON_2_15:-$cache/venv-torch-2.15.0/bin/python}

# four ranks of a rootless job started by hand (no launcher), output in
# $dir/<tag><rank>, pids in pids; VAR=VALUE arguments are added to their
# environment.  Uses t, py and port of the caller.
start4() { # tag VAR=VALUE...
	local tag=$1 r
	shift
	pids=()
	for r in 0 1 2 3; do
		env HPCT_USE_ROOTLESS=1 LD_PRELOAD="$preload" HPCT_HOSTS=127.0.0.1 WORLD_SIZE=4 \
			LOCAL_WORLD_SIZE=4 RANK=$r LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
			HPCT_JOB_ID="$tag-$$-$t" JOB_SHOW_SHIM=0 "$@" timeout 120 "$py" "$job" \
			>"$dir/$tag$r" 2>&1 &
		pids+=($!)
	done
}

# After start4 TAG with rank 2 killed: waits for the ranks (so not in a
# subshell); sets bad to what is wrong: a survivor that did not fail, or
# whose log does not name rank 2 at its address, or names another rank at
# its address on a line that does not name rank 2 too (it blamed a
# messenger, not the cause; a list of the ranks whose store did not answer
# in time may hold late ranks beside it).  Uses pids.
survivors_name_2() { # tag
	local r st line
	local two="rank 2( \(the key's home\))? at 127\.0\.0\.1:[0-9]+|[:,] 2 \(127\.0\.0\.1:[0-9]+\)"
	local other="rank [013]( \(the key's home\))? at 127\.0\.0\.1:[0-9]+|[:,] [013] \(127\.0\.0\.1:[0-9]+\)"
	for r in 0 1 2 3; do
		wait "${pids[$r]}"
		st=$?
		[ "$r" = 2 ] && continue
		[ "$st" != 0 ] || bad="$bad rank $r exited 0;"
		[ "$st" != 124 ] || bad="$bad rank $r hung (killed by timeout 120);"
		grep -Eq "$two" "$dir/$1$r" ||
			bad="$bad rank $r's error does not name rank 2: $(grep -m1 -E 'Error|HPCT' "$dir/$1$r");"
		# (not the store's background forwarding to a rank that has
		# since failed and left, as the survivors do it: a copy of keys,
		# "all keys sent", the ranks gone; it blames no one)
		line=$(grep -E "$other" "$dir/$1$r" | grep -Ev "$two" |
			grep -Ev "store: (replicate|say all keys sent|tell the ranks gone): rank [013] \(the key's home\) at 127\.0\.0\.1:[0-9]+ closed its connection: it died or left" |
			head -1)
		[ -z "$line" ] || blame="$blame rank $r blames another rank: $line;"
	done
	# when wrong, how each survivor failed first: who passed what on
	if [ -n "$bad$blame" ]; then
		for r in 0 1 3; do
			blame="$blame rank $r's first warning: $(grep -m1 'HPCT WARN' "$dir/$1$r");"
		done
	fi
}

# The verdict of a killed-rank test from bad and blame: any blame of a
# rank but the killed one fails (a rank that failed because of it passes
# the cause on: the exchange's ABORT on 1.13, the store's answer of a
# leaving rank on 2.x).
killed_verdict() { # name took
	if [ -n "$bad$blame" ]; then
		not_ok "$1" "$bad$blame"
	else
		ok "$1${2:+ (in $2 s, HPCT_TIMEOUT=5)}"
	fi
}

# only TAG COUNT: 0 when a part runs on this torch in full; else (a torch
# between the oldest and the newest, whose wire is theirs) lists COUNT
# skips saying where it runs.  Uses full of the caller.
only() {
	local i
	[ "$full" = 1 ] && return 0
	for ((i = 0; i < $2; i++)); do
		skip "torch $t: $1 runs on 1.13 and 2.15, the oldest and the newest (this torch's wire is 2.15's)"
	done
	return 1
}

torch_suite() { # label python full (1: every part; 0: a few, the rest on the oldest and newest)
	local t=$1 py=$2 full=$3 n port t0 r st bad blame took secs ns
	ns="2 4 8"
	[ "$full" = 1 ] || ns=4

	# a second incarnation takes the first's Gloo pairs: 1.13's Gloo is the
	# one whose connectFullMesh the shim replaces (2.x links Gloo in)
	if want reuse "$t" 1; then
		if [ "$t" = 1.13 ]; then
			next_port
			HPCT_DEBUG=INFO JOB_INCARNATIONS=2 timeout 300 "$run" -n 4 --rootless \
				--master-port "$port" -- "$py" "$job" >"$dir/reuse" 2>&1
			local made reused
			made=$(grep -c 'persistent Gloo domain of 4 members (ranks 0-3), generation 0 at epoch 0: 3 pairs new, 0 kept' "$dir/reuse")
			reused=$(grep -c 'persistent Gloo domain of 4 members (ranks 0-3), generation 0 at epoch 0: reused, 3 pairs kept' "$dir/reuse")
			if [ "$made $reused" = "4 4" ] && grep -Eq '(^|:)ok 3$' "$dir/reuse"; then
				ok "torch $t: a second init_process_group reuses the first's Gloo pairs (4 ranks)"
			else
				not_ok "torch $t: a second init_process_group reuses the first's Gloo pairs (4 ranks)" \
					"$made ranks connected the world's pairs, $reused reused them (want 4 and 4)" \
					"$(grep -v 'HPCT INFO' "$dir/reuse" | tail -8)"
			fi
		else
			skip "torch $t: PyTorch 2.x links its Gloo in: no connectFullMesh to replace, nothing reused"
		fi
	fi

	# rootless, hpct-run
	if want hpct-run "$t" 3; then
		only "hpct-run N=2 and N=8" 2 || true
		for n in $ns; do
			next_port
			JOB_HOLD_MASTER=1 JOB_INCARNATIONS=3 timeout 300 "$run" -n "$n" --rootless \
				--master-port "$port" -- "$py" "$job" >"$dir/hr$n" 2>&1
			check_ranks "torch $t: hpct-run --rootless, N=$n, 3 incarnations, nothing on MASTER_PORT" "$n" yes "$dir/hr$n"
		done
	fi

	# tcp://
	if want tcp "$t" 1 && only "init_method=tcp://" 1; then
		next_port
		JOB_INIT=tcp JOB_HOLD_MASTER=1 JOB_INCARNATIONS=2 timeout 300 "$run" -n 2 --rootless \
			--master-port "$port" -- "$py" "$job" >"$dir/tcp" 2>&1
		check_ranks "torch $t: init_method=tcp://, N=2, 2 incarnations" 2 yes "$dir/tcp"
	fi

	# a dist.TCPStore the script makes
	if want store "$t" 1 && only "a dist.TCPStore the script makes" 1; then
		next_port
		# (one incarnation: rank 0's server holds MASTER_PORT while the subgroups
		# that keep its store live, so a second server there cannot bind, stock
		# or not)
		JOB_INIT=store JOB_HOLD_MASTER=1 JOB_INCARNATIONS=1 timeout 300 "$run" -n 4 --rootless \
			--master-port "$port" -- "$py" "$job" >"$dir/store" 2>&1
		check_ranks "torch $t: dist.TCPStore made by the script, N=4" 4 yes "$dir/store"
	fi

	# with a shared secret: the store's connections, the engine's links and the
	# Gloo pairs are all checked, and the job runs as before
	if want secret "$t" 1 && only "HPCT_SECRET" 1; then
		next_port
		HPCT_SECRET=torch-secret JOB_HOLD_MASTER=1 JOB_INCARNATIONS=2 timeout 300 "$run" -n 4 --rootless \
			--master-port "$port" -- "$py" "$job" >"$dir/hs4" 2>&1
		check_ranks "torch $t: hpct-run --rootless with HPCT_SECRET, N=4, 2 incarnations" 4 yes "$dir/hs4"
	fi

	# rootless, torchrun --standalone (a c10d rendezvous): 2.x's agent
	# would share its store with its workers; the shim sets PyTorch's
	# TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in the agent, so they make their
	# own, rank 0's server the store, as 1.13's always do and as launched
	# directly (TORCHELASTIC_USE_AGENT_STORE=False), which the shim serves.
	# One incarnation: stock cannot init again over the agent's store
	# (Debian's 1.13 on Python 3.11 needs --redirects/--tee other than 0:
	# Std.from_str("0") returns None there)
	if want torchrun "$t" 4; then
		local served=yes line="HPCT INFO preload: torch .*: TCPStore served in this rank"
		only "torchrun --standalone N=2 and N=8" 2 || true
		for n in $ns; do
			HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=INIT HPCT_USE_ROOTLESS=1 LD_PRELOAD=$preload JOB_INCARNATIONS=1 timeout 300 \
				"$py" -m torch.distributed.run --standalone --nproc_per_node="$n" --redirects 1 --tee 1 \
				"$job" >"$dir/tr$n" 2>&1
			check_ranks "torch $t: torchrun --standalone, N=$n, served: $served" "$n" "$served" "$dir/tr$n"
		done

		# one line per worker, none from the agent (not a rank)
		expect_count "torch $t: torchrun: each of the 4 workers says where its store is" \
			"$(grep -c "$line" "$dir/tr4")" 4 processes
	fi

	# stock, with the shim preloaded: own network namespace (stock binds [::]).
	# One incarnation: stock 1.13 cannot init again while subgroups of the last
	# one are referenced (pytorch#55967: stale keys, dead ports)
	if want stock "$t" 2; then
		if unshare -rn true 2>/dev/null; then
			HPCT_USE_ROOTLESS=0 JOB_INCARNATIONS=1 timeout 300 unshare -rn sh -c \
				'ip link set lo up && GLOO_SOCKET_IFNAME=lo LD_PRELOAD="$0" exec "$1" -n 4 --master-port 29500 -- "$2" "$3"' \
				"$preload" "$run" "$py" "$job" >"$dir/st" 2>&1
			check_ranks "torch $t: HPCT_USE_ROOTLESS=0 with the preload: stock, N=4" 4 no "$dir/st"
			# one line per rank (their children's go to the job's capture)
			expect_count "torch $t: one notice line per rank when off" \
				"$(grep -c "^hpct: HPCT_USE_ROOTLESS=0: PyTorch keeps its own TCPStore\$" "$dir/st")" 4 \
				"notice lines"
		else
			skip "no network namespaces here (unshare -rn)"
			skip "no network namespaces here (unshare -rn)"
		fi
	fi

	# a rank killed in the middle of init: the others fail naming it (none
	# hangs): Gloo's connect (1.13), the store's wait for its key (2.x)
	if want killed-init "$t" 1; then
		next_port
		t0=$(date +%s)
		start4 die HPCT_TIMEOUT=5 JOB_DIE_RANK=2
		bad="" blame=""
		survivors_name_2 die
		took=$(($(date +%s) - t0)) # reported, never asserted: timeout 120 is the hang guard
		killed_verdict "torch $t: a rank killed during init is named by the others" "$took"
	fi

	# the same, with ranks 1 and 3 coming to Gloo's connect only once rank
	# 0 has failed (a loaded machine's order): they must hear from rank 0
	# who the culprit is, not blame rank 0, which left (1.13: hpct's
	# exchange; 2.x waits on the store, whose keys live on their homes)
	if want killed-init "$t" 1; then
		if [ "$t" = 1.13 ]; then
			next_port
			: >"$dir/late0"
			start4 late HPCT_TIMEOUT=5 JOB_DIE_RANK=2 JOB_HOLD_RANKS=1,3 \
				JOB_HOLD_FILE="$dir/late0" JOB_HOLD_TEXT="no answer from rank 2"
			bad="" blame=""
			survivors_name_2 late
			killed_verdict "torch $t: ranks that come after the first to fail name the killed rank, not it"
		else
			skip "torch $t: Gloo waits on the store's keys: no exchange to come late to"
		fi
	fi

	# a rank killed while a forked child of it lives on: the child dropped
	# the rank's sockets at fork, so the others' next request to its store
	# is answered by its keys' other homes (or, with one home, fails naming
	# it) at once, not after HPCT_TIMEOUT (60 s) on connections the child
	# would hold
	if want killed-fork "$t" 1 && only "a killed rank's forked child" 1; then
		next_port
		bad=""
		start4 fork JOB_FORK_DIE_RANK=2 JOB_CHILD_PID_FILE="$dir/child-$t"
		for r in 0 1 2 3; do
			wait "${pids[$r]}"
			st=$?
			[ "$r" = 2 ] && continue
			secs=$(sed -n 's/^\(failed\|answered\)-after \([0-9.]*\) s.*/\2/p' "$dir/fork$r")
			if [ -z "$secs" ]; then
				bad="$bad rank $r neither answered nor failed (exit $st): $(tail -3 "$dir/fork$r" | tr '\n' ' ');"
			elif [ "${secs%.*}" -ge 30 ]; then
				bad="$bad rank $r answered only after $secs s (the child held the dead rank's sockets);"
			elif grep -q "^failed-after" "$dir/fork$r" &&
				! grep -Eq "rank 2 |: 2 \(|rank 2\)|rank 2," "$dir/fork$r"; then
				bad="$bad rank $r's failure does not name rank 2: $(grep -m2 -E 'HPCT|failed-after' "$dir/fork$r" | tr '\n' ' ');"
			fi
		done
		if [ -s "$dir/child-$t" ]; then
			child_pids+=("$(cat "$dir/child-$t")")
			kill -9 "$(cat "$dir/child-$t")" 2>/dev/null
		else
			bad="$bad rank 2 never forked its child;"
		fi
		if [ -z "$bad" ]; then
			ok "torch $t: a killed rank's forked child does not keep it alive to its peers"
		else
			not_ok "torch $t: a killed rank's forked child does not keep it alive to its peers" "$bad"
		fi
	fi
}

# torch_at VERSION PYTHON: the suite on that torch, or its tests listed as
# skips when PYTHON has no such torch; 0 when it ran
torch_at() { # version python full
	local v=$1 py=$2 got i
	if got=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) && [ "${got#"$v"}" != "$got" ]; then
		torch_suite "$v" "$py" "$3"
		return 0
	fi
	for ((i = 0; i < per_torch; i++)); do
		skip "torch $v: no interpreter at $py (tools/scripts/torch-venv.sh $v makes it)"
	done
	return 1
}
# every part on the oldest (Debian's 1.13: its own Gloo, whose
# connectFullMesh the shim replaces) and the newest (2.15); 2.13, whose
# wire is 2.15's, runs a few (hpct-run and torchrun at N=4, stock, a rank
# killed during init): what a release between them could break
torch_suite 1.13 /usr/bin/python3 1
py213_ok=0
torch_at 2.13 "$py213" 0 && py213_ok=1
py215_ok=0
torch_at 2.15 "$py215" 1 && py215_ok=1

# the rule for a torch newer than any hpct was checked with: torch 2.15
# whose version.py says 2.16.0 (a copy of its package folder, every entry
# a link to 2.15's but version.py, first on PYTHONPATH), which the shim
# serves on 2.15's protocol, each rank saying so in one line; its
# connections speak that protocol, so the job runs as 2.15's does
if want newer 2.15 1; then
	name="torch 2.15 calling itself 2.16.0: served on 2.15's protocol, one line a rank, N=4, 2 incarnations"
	if [ "$py215_ok" = 1 ]; then
		site=$("$py215" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
		mkdir -p "$dir/newer/torch"
		for f in "$site"/torch/*; do
			[ "${f##*/}" = version.py ] || ln -s "$f" "$dir/newer/torch/"
		done
		sed "s/^__version__ = .*/__version__ = '2.16.0'/" "$site/torch/version.py" >"$dir/newer/torch/version.py"
		next_port
		PYTHONPATH=$dir/newer JOB_HOLD_MASTER=1 JOB_INCARNATIONS=2 timeout 300 "$run" -n 4 --rootless \
			--master-port "$port" -- "$py215" "$job" >"$dir/newer.log" 2>&1
		lines=$(grep -c "^hpct: torch 2.16.0 at $dir/newer/torch is newer than the releases hpct was checked with (torch 1.13 and 2.4 to 2.15): its TCPStore is served on the newest one's protocol" "$dir/newer.log")
		if [ "$lines" != 4 ]; then
			not_ok "$name" "$lines ranks said so, not 4" "$(grep -v 'HPCT WARN store: wait' "$dir/newer.log" | tail -8)"
		else
			check_ranks "$name" 4 yes "$dir/newer.log"
		fi
	else
		skip "$name: no torch 2.15 at $py215"
	fi
fi

# the served store's connections, at 32 ranks of 1.13 (its Gloo's pairs
# are hpct's, kept across inits: what is left to count is the store's and
# PyTorch's own), three incarnations, each rank under strace (connect
# only): a rank holds one connection to each store it asks, whichever
# TCPStore or process group asks, so its store sockets stay within 2N + 12
# (its lines out, one per rank; those of the others in; its server's
# links to the members of its three groups, both ways), and each re-init
# (destroy, init again, in the same processes) makes at most a quarter of
# the first incarnation's connects
if want conns 1.13 2; then
	n=32 name="torch 1.13: N=32, 3 incarnations"
	next_port
	JOB_INCARNATIONS=3 timeout 300 "$run" -n $n --rootless --master-port "$port" -- \
		sh -c "exec strace -f --seccomp-bpf -qq -ttt -e trace=connect -o $dir/conns.st.\$RANK timeout 240 /usr/bin/python3 ${job%/*}/conns.py" \
		>"$dir/conns" 2>&1
	if [ "$(grep -c '^ok ' "$dir/conns")" != $n ]; then
		# (a rank strace left behind when hpct-run stopped the job: by
		# its pid, while that is still this job's rank)
		for p in $(sed -n 's/^pid [0-9]* \([0-9]*\)$/\1/p' "$dir/conns"); do
			grep -qs conns.py "/proc/$p/cmdline" && kill -9 "$p"
		done
		not_ok "$name: a rank's store sockets within 2N + 12" "$(grep -c '^ok ' "$dir/conns") of $n ranks finished" "$(tail -8 "$dir/conns")"
		not_ok "$name: each re-init's connects at most a quarter of the first's" "the job failed (above)"
	else
		read -r most store < <(awk '$1 == "sockets" { if ($4 > m) m = $4; if ($5 > s) s = $5 } END { print m, s }' "$dir/conns")
		if [ "$store" -le $((2 * n + 12)) ]; then
			ok "$name: a rank's store sockets within 2N + 12 ($store at the busiest rank; all its TCP sockets $most)"
		else
			not_ok "$name: a rank's store sockets within 2N + 12" "$store at the busiest rank (all its TCP sockets $most)"
		fi
		# connects per incarnation, summed over the ranks: from a rank's
		# "begin" of it to its next (or its "end": after it, its exit)
		counts=$(awk -v n=$n -v dir="$dir" '
			$1 == "begin" { at[$2, $3] = $4; if ($3 + 1 > incs) incs = $3 + 1 }
			$1 == "end" { fin[$2] = $3 }
			END {
				for (r = 0; r < n; r++) {
					f = dir "/conns.st." r
					while ((getline line < f) > 0) {
						if (line !~ / connect\(/ || line !~ /= (0|-1 EINPROGRESS)/) continue
						split(line, w, " "); t = w[2] + 0
						if (t >= fin[r]) continue
						k = -1
						for (i = 0; i < incs; i++) if (t >= at[r, i]) k = i
						if (k >= 0) c[k]++
					}
					close(f)
				}
				for (i = 0; i < incs; i++) printf "%d ", c[i] + 0
			}' "$dir/conns")
		read -r -a per <<<"$counts"
		bad=""
		for ((i = 1; i < ${#per[@]}; i++)); do
			[ $((4 * per[i])) -le "${per[0]}" ] || bad="$bad incarnation $i made ${per[i]};"
		done
		if [ ${#per[@]} = 3 ] && [ -z "$bad" ]; then
			ok "$name: each re-init's connects at most a quarter of the first's (${per[*]})"
		else
			not_ok "$name: each re-init's connects at most a quarter of the first's" "connects per incarnation: ${per[*]};$bad"
		fi
	fi
fi

# the benchmark of the issue, smallest size: both paths, both torches, both
# launches (the default: ranks started together, and torchrun's workers on
# one node with the agent's store), one row each for init and re-init,
# their ratios, and what a process start costs here.  PyTorch cannot init
# again over torchrun's agent's store (it keeps the first incarnation's
# keys), which hpct leaves the job's: those rows say "not run", and why.
if want bench; then
	bad=""
	torches=1.13
	[ "$py213_ok" = 1 ] && torches=1.13,2.13
	"$bench" --scenario torch --torch "$torches" --ranks 2 --repeat 1 --path stock,rootless --reinit \
		--port 16800 --json "$dir/bench.json" >"$dir/bench" 2>&1 || bad="$bad exit $?;"
	for v in ${torches//,/ }; do
		for launch in direct torchrun; do
			tag=torch-$v nodes=2
			[ "$launch" = torchrun ] && tag=torch-$v-torchrun nodes=1
			for s in $tag $tag-reinit; do
				for p in rootless stock; do
					if [ "$s" = "torch-$v-torchrun-reinit" ]; then
						grep -Eq "^$s +$p +2 +1 +0 +not run\$" "$dir/bench" &&
							grep -Eq "^(.*, )?$s $p[,:].* not run: PyTorch cannot init again over torchrun's store" \
								"$dir/bench" || bad="$bad no 'not run' $s $p row, or no reason;"
						continue
					fi
					grep -Eq "^$s +$p +2 +$nodes +1 +[0-9.]+ " "$dir/bench" || bad="$bad no $s $p row;"
				done
				[ "$s" = "torch-$v-torchrun-reinit" ] ||
					grep -q "^$s N=2: stock/rootless median ratio [0-9.]*\$" "$dir/bench" || bad="$bad no $s ratio;"
			done
			# the second incarnation beside the first, per path
			for p in rootless stock; do
				[ "$launch" = torchrun ] && continue
				grep -Eq "^$tag N=2 $p: second/first incarnation, median ratio [0-9.]+ \([0-9.]+ -> [0-9.]+ ms\)\$" \
					"$dir/bench" || bad="$bad no second/first line for $tag $p;"
			done
			for kind in torch torch-reinit; do
				for p in rootless stock; do
					[ "$launch $kind" = "torchrun torch-reinit" ] && continue
					grep -q "\"scenario\":\"$kind\",\"path\":\"$p\",\"ranks\":2,\"nodes\":$nodes,[^}]*\"torch\":\"$v\",\"launch\":\"$launch\"[,}]" \
						"$dir/bench.json" || bad="$bad no $kind $v $p $launch row in the JSON;"
				done
			done
		done
	done
	grep -Eq "^fork\+exec of /bin/true, to its exit: [0-9.]+ ms \(median of 200\)\$" "$dir/bench" ||
		bad="$bad no fork+exec line;"
	if [ -z "$bad" ]; then
		ok "hpct-bench --scenario torch --torch $torches --reinit: a row per torch, launch, path and phase, their ratios"
	else
		not_ok "hpct-bench --scenario torch --torch $torches --reinit: a row per torch, launch, path and phase, their ratios" "$bad" \
			"$(grep -v 'hostname of the client' "$dir/bench" | tail -8)"
	fi
fi

# the same with a rootless row per HPCT_STORE_REPLICAS and the store's
# operations timed after init: rows rootless-r1, rootless-r2 and stock,
# and a table of their set/get/add/wait medians
if want bench-store; then
	bad=""
	v=1.13
	[ "$py213_ok" = 1 ] && v=2.13
	"$bench" --scenario torch --torch "$v" --ranks 2 --repeat 1 --launch direct \
		--path stock,rootless --replicas 1,2 --store-ops 5 --port 16900 >"$dir/bench2" 2>&1 ||
		bad="$bad exit $?;"
	for p in rootless-r1 rootless-r2 stock; do
		grep -Eq "^torch-$v +$p +2 +2 +1 +[0-9.]+ " "$dir/bench2" || bad="$bad no $p row;"
		grep -Eq "^torch-$v +$p +2( +[0-9]+ / [0-9]+){6}\$" "$dir/bench2" ||
			bad="$bad no store operations of $p;"
	done
	grep -q "^store operations, us, median / p99 (5 of each per rank" "$dir/bench2" || bad="$bad no store table;"
	grep -Eq "^torch-$v +rootless-r2 +any +- +4 x = [0-9]+ +3 x = " "$dir/bench2" || bad="$bad no floor of rootless-r2;"
	if [ -z "$bad" ]; then
		ok "hpct-bench --scenario torch --torch $v --replicas 1,2 --store-ops 5: a rootless row per HPCT_STORE_REPLICAS, the store's operations timed"
	else
		not_ok "hpct-bench --scenario torch --torch $v --replicas 1,2 --store-ops 5: a rootless row per HPCT_STORE_REPLICAS, the store's operations timed" "$bad" \
			"$(grep -v 'hostname of the client' "$dir/bench2" | tail -10)"
	fi
fi
exit $failed
