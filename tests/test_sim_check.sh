#!/bin/sh
# The simulator's model check (hpct-bench --scenario sim without --no-check),
# on a release build: real cold runs of 64 and 256 ranks on both paths
# against the model of the same runs on this machine's cores.  The check
# either validates the model (every error within ±25%) or says plainly that
# it does not, naming every miss; this test holds it to what it prints: the
# four rows there, in the table and in the JSON alike, each error what its
# model and real figures make it, and the verdict the one those errors
# give.  It does not require the model to agree: a shared machine's real
# runs can be slowed by others' work.
# Usage: test_sim_check.sh HPCT_BENCH
set -eu
bench=$1
. "$(dirname "$0")/sh_common.sh"
# ports 17400-17791: the calibration's (17400-17496), then the real runs'
"$bench" --scenario sim --ranks 64 --port 17400 --json "$dir/s.json" >"$dir/s.out" 2>&1 ||
	fail "the simulation or its real runs failed: $(cat "$dir/s.out")"
cat "$dir/s.out"
cores=$(nproc)
grep -q "^on $cores shared cores (this machine's" "$dir/s.out" ||
	fail "the check did not run on this machine's $cores cores"
check=$(grep -o '"check":{.*}' "$dir/s.json") || fail "no check in the JSON: $(cat "$dir/s.json")"
echo "$check" | grep -q "^\"check\":{\"cores\":$cores,\"tolerance_pct\":25," ||
	fail "the JSON's check does not name $cores cores and 25%: $check"

misses=""
for n in 64 256; do
	for path in rootless standard; do
		row=$(echo "$check" | grep -o "{\"ranks\":$n,\"path\":\"$path\",[^}]*}") ||
			fail "no $path row at $n ranks in the JSON's check: $check"
		model=$(echo "$row" | sed -n 's/.*"model_ms":\([-0-9.]*\).*/\1/p')
		real=$(echo "$row" | sed -n 's/.*"real_ms":\([-0-9.]*\).*/\1/p')
		err=$(echo "$row" | sed -n 's/.*"error_pct":\([-0-9.]*\).*/\1/p')
		line=$(grep -E "^  N=$n +$path +model " "$dir/s.out") ||
			fail "no printed $path row at $n ranks"
		# the printed figures are the JSON's, to their one decimal
		echo "$line" | awk -v m="$model" -v r="$real" -v e="$err" '
			function off(a, b) { return a - b > 0.051 || b - a > 0.051 }
			{ pe = $10; sub(/%$/, "", pe) }
			!(m > 0 && r > 0) { print "model " m " ms, real " r " ms: not both measured"; exit 1 }
			off(e, (m - r) / r * 100) { print "error " e "% is not (model - real) / real"; exit 1 }
			$3 != "model" || $6 != "real" || $9 != "error" { print "not a row of figures"; exit 1 }
			off($4, m) || off($7, r) || off(pe, e) { print "printed " $4 ", " $7 ", " $10 "; JSON " m ", " r ", " e; exit 1 }' \
			>"$dir/why" || fail "N=$n $path: $(cat "$dir/why"): $line"
		if awk -v e="$err" 'BEGIN { exit !(e > 25 || e < -25) }'; then
			# as printed: the JSON's figure rounded again may differ in
			# its last digit
			misses="$misses $path N=$n $(echo "$line" | awk '{ print $10 }')"
		fi
	done
done

validated=$(echo "$check" | sed -n 's/.*"validated":\(true\|false\).*/\1/p')
if [ -z "$misses" ]; then
	[ "$validated" = true ] || fail "every error is within 25%, yet the JSON says validated: $validated"
	grep -q "^model check: validated on this machine: the model is within ±25% of every real run" \
		"$dir/s.out" || fail "every error is within 25%, yet no such verdict is printed"
	grep -q "NOT validated" "$dir/s.out" && fail "every error is within 25%, yet it says NOT validated"
else
	[ "$validated" = false ] || fail "misses of$misses, yet the JSON says validated: $validated"
	verdict=$(grep "^model check: NOT validated on this machine: the model misses the real runs by more than ±25%: " \
		"$dir/s.out") || fail "misses of$misses, yet no NOT-validated verdict is printed"
	echo "$verdict" | grep -q "the projections above are not validated here" ||
		fail "the verdict does not say the projections are not validated: $verdict"
	for m in $(echo "$misses" | sed 's/ \([a-z]*\) N=\([0-9]*\) \([-+0-9.%]*\)/ \1@N=\2@\3/g'); do
		echo "$verdict" | grep -qF "$(echo "$m" | tr @ ' ')" ||
			fail "the verdict does not name the miss $(echo "$m" | tr @ ' '): $verdict"
	done
	echo "the model check does not validate the model on this machine:$misses"
fi
echo ok
