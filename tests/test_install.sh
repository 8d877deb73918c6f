#!/bin/sh
# The installed tree is usable: `meson install --destdir` puts the header,
# the shared library and hpct.pc in place, and a small program built with
# `pkg-config --cflags --libs hpct` against that tree links and runs.
#
# usage: test_install.sh MESON BUILD_ROOT CC VERSION HPCT_H
# (CC: the C compiler command, split at spaces, e.g. "ccache cc"; HPCT_H:
# the source header the installed one must equal)
# Exit 0 on success, 1 on a failed check (what failed is printed).
set -u

if [ $# -ne 5 ]; then
	echo "usage: $0 meson build-root cc version hpct.h" >&2
	exit 2
fi
meson=$1 build=$2 cc=$3 version=$4 srchdr=$5

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpct-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest

fail() {
	echo "FAIL: $*"
	exit 1
}

# --no-rebuild: meson test has built the tree already, and a rebuild here
# would race with the other tests running from the same build dir.
if ! "$meson" install -C "$build" --no-rebuild --destdir "$dest" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	fail "meson install --destdir $dest failed"
fi

hdr=$(find "$dest" -path '*/include/hpct/hpct.h' | head -n 1)
[ -n "$hdr" ] || fail "include/hpct/hpct.h not installed"
cmp -s "$hdr" "$srchdr" || fail "installed $hdr differs from $srchdr"

libs=$(find "$dest" -path '*/lib*/libhpct.so*' | sort)
[ -n "$libs" ] || fail "no lib*/libhpct.so* installed"
echo "$libs" | grep -q '/libhpct\.so$' || fail "no libhpct.so link for -lhpct (have: $libs)"
echo "$libs" | grep -q '/libhpct\.so\.0$' || fail "no libhpct.so.0 (the soname) (have: $libs)"

pc=$(find "$dest" -name hpct.pc | head -n 1)
[ -n "$pc" ] || fail "hpct.pc not installed"
case $pc in
*/pkgconfig/hpct.pc) ;;
*) fail "hpct.pc installed outside a pkgconfig directory: $pc" ;;
esac

# Only the destdir's .pc files; the sysroot prefixes -I and -L with it.
PKG_CONFIG_LIBDIR=$(dirname "$pc")
PKG_CONFIG_PATH=
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_LIBDIR PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
flags=$(pkg-config --cflags --libs hpct) || fail "pkg-config --cflags --libs hpct failed"
pcver=$(pkg-config --modversion hpct)
[ "$pcver" = "$version" ] || fail "hpct.pc says version '$pcver', expected '$version'"

cat >"$tmp/prog.c" <<'EOF'
#include <hpct/hpct.h>
#include <stdio.h>

int main(void)
{
	printf("version %s\n", hpct_version());
	printf("timeout %s\n", hpct_strerror(HPCT_ETIMEDOUT));
	return 0;
}
EOF
# shellcheck disable=SC2086 # $cc and $flags are lists of words.
$cc -std=c11 -Wall -Werror -o "$tmp/prog" "$tmp/prog.c" $flags >"$tmp/cc.log" 2>&1 || {
	cat "$tmp/cc.log"
	fail "$cc prog.c $flags did not compile and link"
}

libdir=$(dirname "$(echo "$libs" | head -n 1)")
out=$(LD_LIBRARY_PATH=$libdir "$tmp/prog") || fail "the program failed to run: $out"
# It must have loaded the installed copy, not one from the build tree.
deps=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/prog" 2>/dev/null | grep libhpct)
case $deps in
*"$dest"/*) ;;
*) fail "the program did not load libhpct from $dest: $deps" ;;
esac
echo "$out" | grep -qx "version $version" || fail "printed '$out', expected 'version $version'"
echo "$out" | grep -qx "timeout deadline passed" ||
	fail "printed '$out', expected hpct_strerror(HPCT_ETIMEDOUT) to be 'deadline passed'"

echo "ok: installed to $dest, built with: $flags"
echo "$out"
exit 0
