#!/bin/sh
# Exports are explicit (STYLE habit 10): the dynamic symbols libhpct.so
# defines are exactly the global list of its version script, and every
# function the public header declares with HPCT_API is in that list.
#
# usage: test_symbols.sh LIBHPCT_SO LIBHPCT_MAP HEADER...
# Exit 0 when all agree, 1 on a mismatch (the difference is printed),
# 2 on bad usage or unreadable input.  NM may name another nm.
set -u

if [ $# -lt 3 ]; then
	echo "usage: $0 libhpct.so libhpct.map header..." >&2
	exit 2
fi
lib=$1 map=$2
shift 2
hdr="$*"
for f in "$lib" "$map" "$@"; do
	if [ ! -r "$f" ]; then
		echo "$0: cannot read $f" >&2
		exit 2
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpct-symbols.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

# Version node names ("HPCT_0 {" and "} HPCT_0;") and the names listed in
# any global: section, without wildcards.  Comments (# and /* */ on one
# line) are dropped first.
awk '
	{ sub(/#.*/, ""); gsub(/\/\*[^*]*\*\//, "") }
	/^[ \t]*[A-Za-z_][A-Za-z0-9_.]*[ \t]*\{/ {
		n = $0; sub(/^[ \t]*/, "", n); sub(/[ \t]*\{.*/, "", n)
		print n > "'"$tmp"'/nodes"
		scope = ""
	}
	/global:/ { scope = "global"; sub(/.*global:/, "") }
	/local:/ { scope = "local"; sub(/.*local:/, "") }
	/\}/ { scope = "" }
	scope == "global" {
		n = split($0, w, /[ \t;]+/)
		for (i = 1; i <= n; i++)
			if (w[i] ~ /^[A-Za-z_][A-Za-z0-9_]*$/)
				print w[i]
	}
' "$map" | sort -u >"$tmp/map" || exit 2
touch "$tmp/nodes"

# Defined dynamic symbols of code and data (T, D, B, R, W, V, i, ...);
# absolute symbols (A) are the version nodes.  "@@HPCT_0" is cut off.
"${NM:-nm}" -D --defined-only "$lib" >"$tmp/nm.out" || {
	echo "$0: ${NM:-nm} -D --defined-only $lib failed" >&2
	exit 2
}
awk 'NF >= 3 && $2 ~ /^[TtDdBbRrWwVvGgSsiu]$/ { s = $3; sub(/@.*/, "", s); print s }' \
	"$tmp/nm.out" | sort -u >"$tmp/so.all"
grep -vxF -f "$tmp/nodes" "$tmp/so.all" >"$tmp/so" || true

# Public functions: each declaration starting with HPCT_API (or the
# marker in API_MARK), joined up to its ';', named by the identifier
# before the first '('.
mark=${API_MARK:-HPCT_API}
awk -v mark="$mark" '
	$0 ~ ("^[ \t]*" mark "[ \t]") { decl = ""; on = 1 }
	on { decl = decl " " $0 }
	on && /;/ {
		on = 0
		sub(/\(.*/, "", decl)
		n = split(decl, w, /[^A-Za-z0-9_]+/)
		while (n > 0 && w[n] == "") n--
		if (n > 0) print w[n]
	}
' "$@" | sort -u >"$tmp/api" || exit 2

fail=0
for f in map so api; do
	if [ ! -s "$tmp/$f" ]; then
		echo "FAIL: no symbols found in the $f list (parse error?)"
		fail=1
	fi
done

comm -23 "$tmp/so" "$tmp/map" >"$tmp/leaked"
comm -13 "$tmp/so" "$tmp/map" >"$tmp/missing"
comm -23 "$tmp/api" "$tmp/map" >"$tmp/unmapped"

if [ -s "$tmp/leaked" ]; then
	echo "FAIL: exported by $lib but not in the global list of $map:"
	sed 's/^/  + /' "$tmp/leaked"
	fail=1
fi
if [ -s "$tmp/missing" ]; then
	echo "FAIL: in the global list of $map but not exported by $lib:"
	sed 's/^/  - /' "$tmp/missing"
	fail=1
fi
if [ -s "$tmp/unmapped" ]; then
	echo "FAIL: declared $mark in $hdr but not in $map:"
	sed 's/^/  ! /' "$tmp/unmapped"
	fail=1
fi

if [ $fail -eq 0 ]; then
	echo "ok: $(wc -l <"$tmp/so" | tr -d ' ') exported symbols match $map;" \
		"$(wc -l <"$tmp/api" | tr -d ' ') $mark functions all listed"
fi
exit $fail
