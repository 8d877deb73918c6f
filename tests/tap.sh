# Sourced by the shell tests that print TAP: ok, not_ok (its further
# arguments become comment lines) and skip, numbered in order; failed is
# 1 once one did not pass.
n_test=0
failed=0
ok() {
	n_test=$((n_test + 1))
	echo "ok $n_test - $*"
}
not_ok() {
	n_test=$((n_test + 1))
	failed=1
	echo "not ok $n_test - $1"
	shift
	for line in "$@"; do printf "%s\n" "$line" | sed "s/^/# /"; done # every line a TAP comment
}
skip() {
	n_test=$((n_test + 1))
	echo "ok $n_test - # SKIP $*"
}
