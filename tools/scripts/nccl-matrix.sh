# Sourced by tools/check: the nccl suite against every NCCL release users
# run, each from its PyPI wheel (tools/scripts/nccl-wheel.sh), through HPCT_NCCL_LIB
# in one build; then one table, release x what was verified.

# The releases: the oldest hpct supports, the first with ncclCommInitRankScalable
# (2.23.4), the last before and the first with the env plugin (2.28.3,
# 2.28.7), what PyTorch 2.10-2.14 ship (2.28.9, 2.29.3, 2.29.7, 2.30.7), the
# first that lets ranks share a GPU (2.30.3), and the newest of each line.
hpct_nccl_releases=${HPCT_NCCL_MATRIX:-2.19.3 2.21.5 2.23.4 2.26.5 2.27.7 2.28.3 2.28.7 \
2.28.9 2.29.3 2.29.7 2.30.3 2.30.7 2.31.2 2.32.3}

# The table's columns: a heading, and the meson tests that verify it.
hpct_nccl_columns=(codec route tier2 shim ranks)
declare -A hpct_nccl_tests=(
	[codec]="nccl-codec"
	[route]="nccl-env"
	[tier2]="nccl-roots nccl-ids"
	[shim]="preload"
	[ranks]="nccl-ranks"
)
# Real NCCL ranks through the stand-in driver (tests/standin): every test of
# nccl-ranks on a representative few (the oldest and its 64-byte wire, the
# first of Tier 2 and the 172-byte one, the first of the 176-byte one and
# of ncclCommGrow, the newest; the ASan build runs them all with the
# default release, and torch-nccl PyTorch 2.14's and 2.15's 2.30.7), the
# shim's PyTorch
# pattern to Init COMPLETE (nccl-ranks-core) on the rest: all of them on
# every release would not fit the suite's time.
hpct_nccl_ranks_full=${HPCT_NCCL_RANKS_FULL:-2.19.3 2.23.4 2.29.3 2.32.3}

# hpct_nccl_col_tests COLUMN RELEASE: the meson tests of a column there
hpct_nccl_col_tests() {
	if [ "$1" = ranks ] && [[ " $hpct_nccl_ranks_full " != *" $2 "* ]]; then
		echo nccl-ranks-core
	else
		echo "${hpct_nccl_tests[$1]}"
	fi
}

# 2.19.3 -> 21903, as ncclGetVersion says it
hpct_nccl_code() {
	local IFS=.
	set -- $1
	echo $(($1 * 10000 + $2 * 100 + $3))
}

# What each column means for a release (what the tests of that column
# check there): the id's layout, how NCCL is shown NCCL_COMM_ID, the root
# wire and tier, what the shim does.
hpct_nccl_cell() {
	local col=$1 v=$2
	case $col in
	codec) [ "$v" -ge 22900 ] && echo "nRanks@36" || echo "128 B" ;;
	route) if [ "$v" -ge 23007 ]; then echo "plugin v2"
	       elif [ "$v" -ge 22807 ]; then echo "plugin v1"
	       else echo "getenv"; fi ;;
	tier2) if [ "$v" -ge 22900 ]; then echo "176 B"
	       elif [ "$v" -ge 22300 ]; then echo "172 B"
	       else echo "T1 only, 64 B"; fi ;;
	shim) [ "$v" -ge 22300 ] && echo "Tier 2" || echo "Tier 1" ;;
	ranks) [[ " $hpct_nccl_ranks_full ${nccl_release:-} " == *" $3 "* ]] && echo "8, all" ||
	       echo "8, shim" ;;
	esac
}

# hpct_nccl_status LOGJSON COLUMN RELEASE: ok, FAIL, skip or "not run",
# from meson's JSON test log (one object a line; the newest entry of a
# test counts)
hpct_nccl_status() {
	python3 - "$1" $(hpct_nccl_col_tests "$2" "$3") <<'EOF'
import json, sys
res = {}
try:
    for line in open(sys.argv[1]):
        t = json.loads(line)
        res[t["name"].split(" / ")[-1]] = t["result"]
except OSError:
    pass
# ok when every test ran and passed or (where the release lacks what it
# tests: the cell's text says so) skipped, and at least one passed
got = [res.get(name) for name in sys.argv[2:]]
if None in got:
    print("not run")
elif any(r not in ("OK", "SKIP") for r in got):
    print("FAIL")
else:
    print("ok" if "OK" in got else "skip")
EOF
}

# hpct_nccl_skipped LOGJSON: the tests meson's JSON log says were skipped
hpct_nccl_skipped() {
	python3 - "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t["result"] == "SKIP":
        print(t["name"].split(" / ")[-1])
EOF
}

# hpct_nccl_matrix BUILDDIR: runs the columns' tests against each release
# (the build's own, nccl_release, too: the -Werror build runs the nccl
# suite only here), adds to passed/failed/skipped like run_suite, and
# prints the table.
hpct_nccl_matrix() {
	local dir=$1 v home rc code out log tests col row
	local rows="" k=0 nrel
	nrel=$(echo $hpct_nccl_releases | wc -w)
	for v in $hpct_nccl_releases; do
		k=$((k + 1))
		code=$(hpct_nccl_code "$v")
		tests=""
		for col in "${hpct_nccl_columns[@]}"; do tests="$tests $(hpct_nccl_col_tests "$col" "$v")"; done
		rc=0
		home=$(hpct_nccl_home "$v") || rc=$?
		if [ $rc -eq 2 ]; then
			rows="$rows$(printf '%-8s %s' "$v" "not run: PyPI could not be reached")
"
			skips="$skips  nccl matrix: NCCL $v: PyPI could not be reached
"
			skipped=$((skipped + 1))
			continue
		elif [ $rc -ne 0 ]; then
			rows="$rows$(printf '%-8s %s' "$v" "FAILED: no wheel (see above)")
"
			failed=$((failed + 1))
			continue
		fi
		echo "== nccl suite against NCCL $v (release $k of $nrel; $home) =="
		out=$(mktemp)
		rc=0
		HPCT_NCCL_LIB=$home/lib/libnccl.so.2 HPCT_NCCL_EXPECT_VERSION=$code \
			meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 \
			--logbase "matrix-$v" $tests >"$out" 2>&1 || rc=$?
		grep -E '^ *[0-9]+/[0-9]+ |^Ok:|^Fail:' "$out" || true
		count_run "$out"
		passed=$((passed + p)) failed=$((failed + f)) programs=$((programs + n))
		[ $rc -eq 0 ] || [ $f -gt 0 ] || failed=$((failed + 1))
		[ $rc -eq 0 ] || sed -n '/^Summary of Failures/,$p; /-------- 8< --------/,/^$/p' "$out" | tail -n 80
		rm -f "$out"
		! declare -F note_fails >/dev/null || note_fails "nccl $v" "$dir/meson-logs/matrix-$v.txt"
		log=$dir/meson-logs/matrix-$v.json
		# a program whose every test skipped is listed: the release
		# lacks what it tests (the table's cell says what)
		for t in $(hpct_nccl_skipped "$log"); do
			skips="$skips  nccl matrix: NCCL $v: $t: every test skipped (the release lacks what it tests)
"
			skipped=$((skipped + 1))
		done
		row=$(printf '%-8s' "$v")
		for col in "${hpct_nccl_columns[@]}"; do
			row="$row $(printf '%-22s' "$(hpct_nccl_cell "$col" "$code" "$v"): $(hpct_nccl_status "$log" "$col" "$v")")"
		done
		rows="$rows$row
"
	done
	hpct_nccl_table=$(
		echo "NCCL releases verified here (nccl suite through HPCT_NCCL_LIB; no GPU here:"
		echo "real ranks run through the stand-in driver, no kernel runs):"
		printf '%-8s %-22s %-22s %-22s %-22s %-22s\n' release "codec (id layout)" \
			"route (NCCL_COMM_ID)" "roots (report size)" "shim (tier)" "real ranks (tests)"
		printf '%s' "$rows"
	)
	printf '%s\n' "$hpct_nccl_table"
	if printf '%s' "$rows" | grep -qE ': FAIL|: not run'; then
		echo "check: the NCCL matrix has failures"
		failed=$((failed + 1))
	fi
}
