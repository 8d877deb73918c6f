# Sourced by tools/check: a release of NCCL as users get it, from PyPI's
# nvidia-nccl-cu12 (or -cu13) wheel, unpacked once into a cache outside the
# tree (HPCT_CACHE, default ~/.cache/hpct) and reused when present.  Only the
# library and nccl.h are kept; lib/libnccl.so is a link for the linker.

# hpct_nccl_home VERSION: prints the folder to give -Dnccl_home.  Returns 1
# with a line on stderr naming the release and the cause; returns 2 when the
# registry could not be reached at all (a skip, not a failure).
hpct_nccl_home() {
	local ver=$1 cache=${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}
	local dir=$cache/nccl-$ver tmp pkg whl py=python3
	if [ -f "$dir/.complete" ]; then
		echo "$dir"
		return 0
	fi
	"$py" -m pip --version >/dev/null 2>&1 || {
		hpct_ensure_packages python3-pip || return 1
		py=/usr/bin/python3
	}
	tmp=$(mktemp -d)
	for pkg in nvidia-nccl-cu12 nvidia-nccl-cu13; do
		"$py" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$pkg==$ver" \
			>>"$tmp/pip.log" 2>&1 && break
	done
	whl=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
	if [ -z "$whl" ]; then
		if grep -qE 'No matching distribution|Could not find a version' "$tmp/pip.log" &&
			! grep -qiE 'connection|resolve|network is unreachable|timed out' "$tmp/pip.log"; then
			echo "hpct: NCCL $ver: neither nvidia-nccl-cu12 nor -cu13 has it on PyPI" >&2
			rm -rf "$tmp"
			return 1
		fi
		echo "hpct: NCCL $ver: PyPI could not be reached ($(grep -m1 -iE 'error|warning' "$tmp/pip.log"))" >&2
		rm -rf "$tmp"
		return 2
	fi
	# the wheel's zip, read with Python's zipfile: no unzip package needed
	"$py" - "$whl" "$tmp/x" <<'EOF' || {
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.startswith('nvidia/nccl/lib/libnccl.so') or n == 'nvidia/nccl/include/nccl.h':
        z.extract(n, sys.argv[2])
EOF
		echo "hpct: NCCL $ver: could not unpack $(basename "$whl")" >&2
		rm -rf "$tmp"
		return 1
	}
	[ -f "$tmp/x/nvidia/nccl/lib/libnccl.so.2" ] || {
		echo "hpct: NCCL $ver: $(basename "$whl") holds no lib/libnccl.so.2" >&2
		rm -rf "$tmp"
		return 1
	}
	rm -rf "$dir"
	mkdir -p "$cache"
	mv "$tmp/x/nvidia/nccl" "$dir"
	ln -sf libnccl.so.2 "$dir/lib/libnccl.so"
	echo "$(basename "$whl")" >"$dir/.complete"
	rm -rf "$tmp"
	echo "$dir"
}
