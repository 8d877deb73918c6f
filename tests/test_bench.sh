#!/bin/sh
# hpct-bench as a user runs it: one run of several scenarios prints one
# table, writes the same rows as JSON (with the measured round trip) and a
# PNG drawn by gnuplot; bad arguments, and a missing gnuplot, are named.
# Usage: test_bench.sh HPCT_BENCH
set -eu
bench=$1
. "$(dirname "$0")/sh_common.sh"

"$bench" --scenario cold,restart,kill-root --recovery full,inprocess --ranks 2,4 --repeat 1 \
	--port 16600 --json "$dir/r.json" --plot "$dir/r.png" >"$dir/out" 2>"$dir/err" ||
	fail "the run failed: $(cat "$dir/err")"
for s in cold restart/full restart/inprocess kill-root/full kill-root/inprocess; do
	js=${s%/*} rec=${s#*/}
	for p in rootless standard; do
		for n in 2 4; do
			grep -Eq "^$s +$p +$n +" "$dir/out" || fail "no table row for $s $p N=$n"
			if [ "$s" = cold ]; then
				grep -q "\"scenario\":\"$js\",\"path\":\"$p\",\"ranks\":$n," "$dir/r.json" ||
					fail "no JSON row for $s $p N=$n"
			else
				forced=false
				[ "$s" = kill-root/inprocess ] && [ $p = standard ] && forced=true
				grep -Eq "\"scenario\":\"$js\",\"path\":\"$p\",\"ranks\":$n,[^}]*\"recovery\":\"$rec\",\"forced_full\":$forced" \
					"$dir/r.json" || fail "no JSON row for $s $p N=$n (forced_full $forced)"
			fi
		done
	done
done
# the floor beside every rootless row (ceil(log2 N) round trips), none beside standard ones
grep -Eq "^cold +rootless +4 +4 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0\.[0-9]{3} +[0-9]+ +6 " "$dir/out" ||
	fail "no floor beside cold rootless N=4: $(grep '^cold' "$dir/out")"
grep -Eq "^cold +standard +4 +4 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +" "$dir/out" ||
	fail "a floor beside a standard row: $(grep '^cold' "$dir/out")"
# in-process on both paths: survivors open nothing new on the standard path,
# the root's death forces the standard path to restart in full
for s in restart/inprocess kill-root/inprocess; do
	grep -Eq "^$s N=4 rootless: new connections, at most per survivor [0-9]+, per replacement [0-9]+; run by run \(survivor/replacement\): [0-9]+/[0-9]+\$" "$dir/out" ||
		fail "no new-connection line for $s N=4 rootless: $(grep "^$s N=4" "$dir/out")"
done
grep -Eq "^restart/inprocess N=4 standard: new connections, at most per survivor 0, per replacement 1; run by run \(survivor/replacement\): 0/1\$" "$dir/out" ||
	fail "standard in-process recovery opened connections: $(grep "^restart/inprocess N=4" "$dir/out")"
grep -q "^kill-root/inprocess N=4 standard: full restart forced: the root died" "$dir/out" ||
	fail "the forced full restart was not said: $(grep "^kill-root/inprocess N=4" "$dir/out")"
for s in restart kill-root; do
	grep -Eq "^$s N=4: the root's cost, standard/rootless: [0-9.]+ in a full restart, [0-9.]+ in-process.*; what in-process recovery saves, full/in-process: [0-9.]+ rootless, [0-9.]+ standard\$" "$dir/out" ||
		fail "no ratio line for $s N=4: $(grep "^$s N=4" "$dir/out")"
done
grep -Eq "^loopback TCP round trip between two processes: [0-9.]+ us" "$dir/out" || fail "no round trip printed"
grep -Eq "^fork\+exec of /bin/true, to its exit: [0-9.]+ ms" "$dir/out" || fail "no fork cost printed"
if "$bench" --scenario restart --recovery full,partial --ranks 2 >/dev/null 2>"$dir/err7"; then
	fail "--recovery partial was accepted"
fi
grep -q "recovery full,partial: partial: want full and/or inprocess, each once" "$dir/err7" || fail "not named: $(cat "$dir/err7")"
grep -Eq '^\{"rtt_ms":0\.[0-9]+,' "$dir/r.json" || fail "no round trip in the JSON: $(head -c 80 "$dir/r.json")"
grep -q "^plot written to $dir/r.png\$" "$dir/out" || fail "the plot was not announced"
sig=$(head -c 8 "$dir/r.png" | od -An -tx1 | tr -d ' \n')
[ "$sig" = 89504e470d0a1a0a ] || fail "$dir/r.png is not a PNG (starts $sig)"
[ "$(wc -c <"$dir/r.png")" -gt 10000 ] || fail "$dir/r.png is too small to hold the plot"

# gloo: each rank connects a Gloo context over the world and finishes one
# allreduce, checked exactly by the rank (a wrong element fails the run).
# Three rows: rootless and standard through hpct's pair pool, std-mesh
# through Gloo's connectFullMesh; the JSON says how each connected, and the
# ratios set each standard row against rootless and std-mesh against
# standard.  In a list with cold, std-mesh is gloo's row only.
"$bench" --scenario cold,gloo --ranks 2,4 --repeat 1 --port 16600 --json "$dir/g.json" \
	>"$dir/g.out" 2>"$dir/g.err" || fail "the gloo run failed: $(cat "$dir/g.err")"
for pc in rootless:pool standard:pool std-mesh:fullmesh; do
	p=${pc%:*} c=${pc#*:}
	for n in 2 4; do
		grep -Eq "^gloo +$p +$n +$n +1 +[0-9.]+ " "$dir/g.out" ||
			fail "no gloo row for $p N=$n: $(cat "$dir/g.out")"
		grep -Eq "\"scenario\":\"gloo\",\"path\":\"$p\",\"ranks\":$n,[^}]*,\"connect\":\"$c\"[,}]" \
			"$dir/g.json" || fail "no gloo JSON row for $p N=$n connecting by $c: $(cat "$dir/g.json")"
	done
done
for r in standard/rootless std-mesh/rootless std-mesh/standard; do
	for n in 2 4; do
		grep -Eq "^gloo N=$n: $r median ratio [0-9]+\.[0-9]+\$" "$dir/g.out" ||
			fail "no $r ratio for gloo N=$n: $(cat "$dir/g.out")"
	done
done
if grep -Eq "^cold +std-mesh|^cold N=[0-9]+: std-mesh" "$dir/g.out"; then
	fail "cold has a std-mesh row: $(cat "$dir/g.out")"
fi
grep -Eq "^cold +standard +2 " "$dir/g.out" || fail "no cold row beside gloo: $(cat "$dir/g.out")"

# gloo-reuse: a persistent and a temporary context, each created twice
# over the world, every allreduce checked by the ranks; the persistent
# one's second creation makes no pair and exchanges nothing, the temporary
# one makes all N(N-1) pair ends again.  gloo-replace: after one rank is
# replaced in process, the persistent context makes only that rank's N-1
# pairs (2(N-1) ends), the temporary one all of them.
"$bench" --scenario gloo-reuse,gloo-replace --ranks 2,4 --repeat 1 --port 16600 \
	--json "$dir/d.json" >"$dir/d.out" 2>"$dir/d.err" ||
	fail "the gloo-reuse/gloo-replace run failed: $(cat "$dir/d.err")"
for p in rootless standard; do
	for n in 2 4; do
		all=$((n * (n - 1)))
		# context, creation, its label, pair ends new, kept
		for row in persistent:first:1st:$all:0 persistent:second:2nd:0:$all \
			temporary:first:1st:$all:0 temporary:second:2nd:$all:0; do
			ctx=${row%%:*} row=${row#*:}
			cr=${row%%:*} row=${row#*:}
			tag=${row%%:*} row=${row#*:}
			new=${row%%:*} kept=${row#*:}
			grep -Eq "^gloo-reuse/$ctx/$tag +$p +$n +$n +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +[0-9]+ +- " "$dir/d.out" ||
				fail "no gloo-reuse/$ctx/$tag row for $p N=$n: $(cat "$dir/d.out")"
			grep -Eq "\"scenario\":\"gloo-reuse\",\"path\":\"$p\",\"ranks\":$n,[^}]*,\"connect\":\"pool\",\"context\":\"$ctx\",\"creation\":\"$cr\",\"context_ms\":[0-9.]+,\"pairs_new\":$new,\"max_pairs_new\":$((new / n)),\"pairs_kept\":$kept,\"bytes_exchanged\":[0-9]+[,}]" \
				"$dir/d.json" || fail "gloo-reuse $ctx $cr $p N=$n: want $new pair ends new, $kept kept: $(cat "$dir/d.json")"
		done
		grep -Eq "\"path\":\"$p\",\"ranks\":$n,[^}]*\"context\":\"persistent\",\"creation\":\"second\",[^}]*\"bytes_exchanged\":0[,}]" "$dir/d.json" ||
			fail "the persistent context's second creation exchanged bytes ($p N=$n): $(cat "$dir/d.json")"
		grep -Eq "^gloo-reuse N=$n $p: second/first creation, median: persistent [0-9.]+ \([0-9.]+ -> [0-9.]+ ms; pairs new per rank $((n - 1)) -> 0; bytes exchanged [1-9][0-9]* -> 0\); temporary [0-9.]+ \([0-9.]+ -> [0-9.]+ ms; pairs new per rank $((n - 1)) -> $((n - 1)); " \
			"$dir/d.out" || fail "no first/second line for gloo-reuse $p N=$n: $(grep "^gloo-reuse N=" "$dir/d.out")"
		# context, pair ends new, kept
		for row in persistent:$((2 * (n - 1))):$(((n - 1) * (n - 2))) temporary:$all:0; do
			ctx=${row%%:*} row=${row#*:}
			new=${row%%:*} kept=${row#*:}
			grep -Eq "^gloo-replace/$ctx +$p +$n +$n +1 +[0-9.]+ " "$dir/d.out" ||
				fail "no gloo-replace/$ctx row for $p N=$n: $(cat "$dir/d.out")"
			grep -Eq "\"scenario\":\"gloo-replace\",\"path\":\"$p\",\"ranks\":$n,[^}]*,\"context\":\"$ctx\",\"recovery\":\"inprocess\",\"context_ms\":[0-9.]+,\"pairs_new\":$new,\"max_pairs_new\":$((n - 1)),\"pairs_kept\":$kept," \
				"$dir/d.json" || fail "gloo-replace $ctx $p N=$n: want $new pair ends new, $kept kept: $(cat "$dir/d.json")"
		done
		grep -Eq "^gloo-replace N=$n $p: new pairs after the recovery, persistent $((n - 1)) \($((2 * (n - 1))) pair ends\), most per rank $((n - 1)), temporary $((all / 2)) \($all\), most $((n - 1)); persistent/temporary, median: [0-9.]+ from the kill" \
			"$dir/d.out" || fail "no gloo-replace line for $p N=$n: $(grep "^gloo-replace N=" "$dir/d.out")"
	done
done

# --state: after the kill every new rank gets the state and checks every
# byte (a wrong byte fails the run): in-process from the survivors
# (hpct_fanout), in a full restart from a file whose pages were dropped
"$bench" --scenario restart --recovery full,inprocess --state 64K --ranks 2,4 --repeat 1 \
	--port 16600 --json "$dir/st.json" >"$dir/st.out" 2>"$dir/st.err" ||
	fail "the --state run failed: $(cat "$dir/st.err")"
for rec in full inprocess; do
	for p in rootless standard; do
		for n in 2 4; do
			grep -Eq "^restart/$rec +$p +$n +" "$dir/st.out" || fail "no --state row restart/$rec $p N=$n"
			grep -Eq "\"scenario\":\"restart\",\"path\":\"$p\",\"ranks\":$n,[^}]*\"recovery\":\"$rec\",[^}]*\"state_bytes\":65536" \
				"$dir/st.json" || fail "no state_bytes in the JSON row restart/$rec $p N=$n: $(cat "$dir/st.json")"
		done
	done
done
grep -Eq "^state: 64K per rank .*at most 4 ranks x 64K = 0.00 GiB held at once; in-process: the survivors deliver it" "$dir/st.out" ||
	fail "the state's line is missing: $(grep '^state' "$dir/st.out")"
grep -Eq "^state: before each of the 4 full restarts its pages left the page cache by posix_fadvise.*at most [0-9]+ of its 16 pages were still resident" \
	"$dir/st.out" || fail "the drop of the state's pages was not said: $(grep '^state' "$dir/st.out")"
file=$(sed -n 's/^state: .* every rank reads it from \(.*\), inside the time$/\1/p' "$dir/st.out")
[ -n "$file" ] && [ ! -e "$file" ] || fail "the state's file '$file' was not named, or left behind"
if "$bench" --scenario restart --state 1024G --ranks 1024 >/dev/null 2>"$dir/st2.err"; then
	fail "--state 1024G at 1024 ranks was accepted"
fi
grep -q "state 1048576 MiB with 1024 ranks: 1024 ranks x 1048576 MiB plus the file's pages = .* GiB, more than 60% of this machine's" "$dir/st2.err" ||
	fail "the memory --state needs was not named: $(cat "$dir/st2.err")"
if "$bench" --scenario cold --state 1M --ranks 2 >/dev/null 2>"$dir/st3.err"; then
	fail "--state with cold was accepted"
fi
grep -q -e "--state goes with --scenario restart or kill-root" "$dir/st3.err" || fail "not said: $(cat "$dir/st3.err")"

# fanout: every plan in the same ranks, every receiver checks every byte;
# the bound and the machine's bandwidth are printed, and a combination too
# big for this machine's memory is not run, and said
"$bench" --scenario fanout --bytes 1M,64G --sources 1,2 --receivers 1,3 --repeat 1 --port 16600 \
	--json "$dir/f.json" >"$dir/f.out" 2>"$dir/f.err" || fail "the fanout run failed: $(cat "$dir/f.err")"
for s in 1 2; do
	for r in 1 3; do
		for p in waves pull tree; do
			grep -Eq "^1M +$s +$r +$p +default +1 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9]+\$" \
				"$dir/f.out" || fail "no fanout row 1M S=$s R=$r $p: $(cat "$dir/f.out")"
			grep -Eq "\"scenario\":\"fanout\",\"path\":\"rootless\",\"plan\":\"$p\",\"bytes\":1048576,\"sources\":$s,\"receivers\":$r,\"ranks\":$((s + r)),[^}]*\"bytes_received\":$((r * 1048576))[,}]" \
				"$dir/f.json" || fail "no fanout JSON row 1M S=$s R=$r $p with $r MiB received: $(cat "$dir/f.json")"
			grep -Eq "^64G +$s +$r +$p +default +1 +0 +not run\$" "$dir/f.out" || fail "no not-run row 64G S=$s R=$r $p"
		done
		grep -Eq "^fanout 1M S=$s R=$r budget default: median pull/waves [0-9.]+, tree/waves [0-9.]+\$" "$dir/f.out" ||
			fail "no ratio line for S=$s R=$r: $(grep '^fanout' "$dir/f.out")"
		grep -Eq "^fanout 64G S=$s R=$r: not run: $((s + r)) processes x 1 x 65536 MiB = [0-9.]+ GiB of buffers, more than 60% of MemTotal" \
			"$dir/f.out" || fail "the refusal of 64G S=$s R=$r was not said: $(grep '^fanout' "$dir/f.out")"
	done
done
# the rounds: waves ceil(log2((S+R)/S)); tree ceil(log2(R+1)); pull ceil(R/S)
for row in 1:3:waves:2 2:3:waves:2 2:1:waves:1 1:3:pull:3 2:3:pull:2 1:3:tree:2 2:3:tree:2 2:1:tree:1; do
	s=${row%%:*} row=${row#*:}
	r=${row%%:*} row=${row#*:}
	p=${row%%:*} k=${row#*:}
	grep -Eq "^1M +$s +$r +$p +default +1 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +$k\.00 " "$dir/f.out" ||
		fail "$p S=$s R=$r: not $k rounds: $(grep "^1M +$s +$r +$p" "$dir/f.out")"
done
grep -Eq "^loopback TCP bandwidth, 4096 KiB writes: one pair of processes [0-9]+ MB/s; [0-9]+ pairs at once" "$dir/f.out" ||
	fail "no bandwidth line: $(cat "$dir/f.out")"
grep -Eq '^\{"rtt_ms":[0-9.]+,"fork_exec_ms":[0-9.]+,"bw_pair_mbs":[0-9.]+,' "$dir/f.json" || fail "no bandwidth in the JSON"
grep -Eq "^fork\+exec of /bin/true, to its exit: [0-9.]+ ms" "$dir/f.out" || fail "no fork cost printed by fanout"
# two fan-outs at once per rank (a world each), under a 1 MiB budget and
# with none: the budget holds the bytes in flight
"$bench" --scenario fanout --bytes 2M --sources 1 --receivers 3 --plan waves --concurrent 2 \
	--budget 1M,none --repeat 1 --port 16600 --json "$dir/c.json" >"$dir/c.out" 2>"$dir/c.err" ||
	fail "the concurrent fanout run failed: $(cat "$dir/c.err")"
for b in 1M none; do
	grep -Eq "^2M +1 +3 +waves +$b +2 +1 +[0-9.]+ " "$dir/c.out" || fail "no concurrent row, budget $b: $(cat "$dir/c.out")"
done
grep -Eq "\"budget\":\"1M\",[^}]*\"fds_sampled\":true,\"inflight_peak_bytes\":(1048576|[0-9]{1,6}),\"inflight_waits\":[0-9]+,\"bytes_received\":$((2 * 3 * 2097152))[,}]" \
	"$dir/c.json" || fail "over the 1 MiB budget, or not every byte received: $(cat "$dir/c.json")"
grep -q "descriptors: the most of a rank, sampled every 1 ms during the fan-outs" "$dir/c.out" ||
	fail "the sampling of descriptors was not said"
# --link: every node its own link (tc on lo, in a namespace of the run's
# own); the pair's bandwidth is measured through one of them
if "$bench" --scenario fanout --bytes 1M --sources 1 --receivers 3 --link 800mbit --repeat 1 \
	--port 16600 >"$dir/l.out" 2>"$dir/l.err"; then
	grep -Eq "^links: every one of the 4 loopback nodes sends at most 800mbit \(tc htb on lo" "$dir/l.out" ||
		fail "the links were not said: $(cat "$dir/l.out")"
	grep -Eq "^1M +1 +3 +pull +default +1 +1 +[0-9.]+ " "$dir/l.out" || fail "no row over links: $(cat "$dir/l.out")"
	bw=$(sed -n 's/^loopback TCP bandwidth, .*one pair of processes \([0-9]*\) MB\/s (through one node.s link.*/\1/p' "$dir/l.out")
	[ -n "$bw" ] && [ "$bw" -le 110 ] || fail "a node's link of 800mbit (100 MB/s) carried ${bw:-?} MB/s"
elif ! grep -q "cannot make a network namespace\|tc.*failed" "$dir/l.err"; then
	fail "the --link run failed: $(cat "$dir/l.err")"
fi
if "$bench" --scenario fanout --plan waves,ring >/dev/null 2>"$dir/f2.err"; then
	fail "--plan ring was accepted"
fi
grep -q "plan waves,ring: ring: want waves, pull and/or tree, each once" "$dir/f2.err" || fail "not named: $(cat "$dir/f2.err")"
if "$bench" --scenario cold,fanout --ranks 2 >/dev/null 2>"$dir/f3.err"; then
	fail "fanout in a list was accepted"
fi
grep -q "sim and fanout run on their own" "$dir/f3.err" || fail "not said: $(cat "$dir/f3.err")"

# --gate and --transport: the rows name the transport, with resident memory
"$bench" --scenario cold --transport tcp --gate --ranks 2,4 --repeat 1 --port 16600 \
	>"$dir/gate.out" 2>"$dir/gate.err" || fail "a gated run failed: $(cat "$dir/gate.err")"
for n in 2 4; do
	grep -Eq "^cold +tcp +$n +[0-9]+ +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9]+\.[0-9]\$" "$dir/gate.out" ||
		fail "no gated tcp row for N=$n: $(cat "$dir/gate.out")"
done
if "$bench" --scenario cold --transport udp --ranks 2 >/dev/null 2>"$dir/err5"; then
	fail "--transport udp was accepted"
fi
grep -q "transport udp: want tcp and/or ofi" "$dir/err5" || fail "not named: $(cat "$dir/err5")"

# an unknown scenario in the list is named, nothing runs
if "$bench" --scenario cold,bogus --ranks 2 >"$dir/out2" 2>"$dir/err2"; then
	fail "an unknown scenario was accepted"
fi
grep -q "scenario bogus: want cold, gloo, gloo-reuse, gloo-replace, nccl-root, restart, kill-root or torch" "$dir/err2" ||
	fail "the unknown scenario was not named: $(cat "$dir/err2")"
[ ! -s "$dir/out2" ] || fail "something ran before the bad scenario was refused"

# --torch names a release it has no Python for, and how to make one
if HPCT_TORCH_PYTHON_2_13=/nonexistent "$bench" --scenario torch --torch 2.13 --ranks 2 \
	>"$dir/out6" 2>"$dir/err6"; then
	fail "--torch 2.13 without its Python was accepted"
fi
grep -q "torch 2.13: no Python at /nonexistent (HPCT_TORCH_PYTHON_2_13; .*tools/scripts/torch-venv.sh 2.13" \
	"$dir/err6" || fail "the missing Python was not named: $(cat "$dir/err6")"
[ ! -s "$dir/out6" ] || fail "something ran without the Python"

# --launch names a way it does not know, and the word; nothing runs (checked
# before any Python is looked for); and goes with --scenario torch only
if "$bench" --scenario torch --launch direct,mpirun --ranks 2 >"$dir/out7" 2>"$dir/err7"; then
	fail "--launch mpirun was accepted"
fi
grep -q "launch direct,mpirun: mpirun: want direct and/or torchrun, each once" "$dir/err7" ||
	fail "the unknown launch was not named: $(cat "$dir/err7")"
[ ! -s "$dir/out7" ] || fail "something ran before the bad launch was refused"
if "$bench" --scenario cold --launch torchrun --ranks 2 >"$dir/out8" 2>"$dir/err8"; then
	fail "--launch without --scenario torch was accepted"
fi
grep -q -e "--launch goes with --scenario torch only" "$dir/err8" ||
	fail "--launch without torch was not named: $(cat "$dir/err8")"
if "$bench" --scenario cold --store-ops 5 --ranks 2 >"$dir/out8" 2>"$dir/err8"; then
	fail "--store-ops without --scenario torch was accepted"
fi
grep -q -e "--store-ops goes with --scenario torch only" "$dir/err8" ||
	fail "--store-ops without torch was not named: $(cat "$dir/err8")"

# a plot file that is not a PNG name
if "$bench" --scenario cold --ranks 2 --plot "$dir/x.jpg" 2>"$dir/err3"; then
	fail "--plot x.jpg was accepted"
fi
grep -q "plot $dir/x.jpg: want a file name ending in .png" "$dir/err3" ||
	fail "--plot x.jpg not named: $(cat "$dir/err3")"

# without gnuplot the table still comes, then the package to install, exit 1
rc=0
PATH=/nonexistent "$bench" --scenario cold --ranks 2 --repeat 1 --port 16600 \
	--plot "$dir/y.png" >"$dir/out4" 2>"$dir/err4" || rc=$?
[ $rc -eq 1 ] || fail "a run without gnuplot exited $rc, want 1"
grep -Eq "^cold +rootless +2 +" "$dir/out4" || fail "no table without gnuplot"
grep -q "apt-get install gnuplot-nox" "$dir/err4" || fail "missing gnuplot not said: $(cat "$dir/err4")"
[ ! -e "$dir/y.png" ] || fail "a plot appeared without gnuplot"
echo "ok"
