# Sourced by the shell tests: a scratch folder removed at exit, and fail,
# which names what went wrong and ends the test.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
