#!/bin/sh
# The include rule (docs/internals.md, "Layout"): every folder of the library
# includes only itself and the folders below it, spelled from the
# repository root.  Lists every #include "..." that breaks it.
# Usage: test_layers.sh SOURCE_ROOT
set -eu
cd "$1"
# folder: the prefixes its files may include (besides hpct/, the public API)
allowed() {
	case $1 in
	transport) echo "transport/ bootstrap/base/bytes.h bootstrap/base/fdtrack.h" ;;
	bootstrap/base) echo "bootstrap/base/" ;;
	bootstrap/topo) echo "bootstrap/base/ bootstrap/topo/" ;;
	bootstrap/rootless) echo "bootstrap/base/ bootstrap/topo/ bootstrap/rootless/ transport/transport.h bootstrap/world.h bootstrap/world_access.h" ;;
	bootstrap/stdpath) echo "bootstrap/base/ bootstrap/topo/ bootstrap/stdpath/ bootstrap/world.h bootstrap/world_access.h" ;;
	bootstrap) echo "bootstrap/base/ bootstrap/topo/ transport/transport.h bootstrap/world.h bootstrap/world_access.h" ;;
	bootstrap/xchg) echo "bootstrap/base/ bootstrap/topo/ bootstrap/xchg/ bootstrap/world.h bootstrap/world_access.h" ;;
	bootstrap/fanout) echo "bootstrap/base/ bootstrap/topo/ bootstrap/fanout/ bootstrap/world.h bootstrap/world_access.h" ;;
	bootstrap/store) echo "bootstrap/base/ bootstrap/topo/ bootstrap/store/ bootstrap/world.h bootstrap/world_access.h" ;;
	bootstrap/nccl) echo "bootstrap/base/ bootstrap/topo/ bootstrap/nccl/ bootstrap/world.h bootstrap/world_access.h" ;;
	bootstrap/gloo) echo "bootstrap/base/ bootstrap/stdpath/stdpath.h bootstrap/world_access.h bootstrap/gloo/" ;;
	bootstrap/shim) echo "bootstrap/" ;;
	*) echo "?" ;;
	esac
}
bad=0 files=0
for f in $(find transport bootstrap -name '*.[ch]' -o -name '*.cc' -o -name '*.hpp' | sort); do
	dir=$(dirname "$f")
	ok=$(allowed "$dir")
	if [ "$ok" = "?" ]; then
		echo "FAIL: $f: folder $dir is not in the layer list of tests/test_layers.sh"
		bad=1
		continue
	fi
	files=$((files + 1))
	for inc in $(sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
		case $inc in hpct/*) continue ;; esac
		if [ ! -f "$inc" ]; then
			echo "FAIL: $f includes \"$inc\": not a path from the repository root"
			bad=1
			continue
		fi
		hit=0
		for p in $ok; do
			case $inc in "$p"*) hit=1 ;; esac
		done
		if [ $hit = 0 ]; then
			echo "FAIL: $f ($dir) includes \"$inc\", which is not below it"
			bad=1
		fi
	done
done
[ $files -gt 40 ] || { echo "FAIL: only $files files looked at"; exit 1; }
[ $bad = 0 ] && echo "ok: $files files keep to their layers"
exit $bad
