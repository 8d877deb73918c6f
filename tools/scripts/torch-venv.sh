#!/bin/bash
# Sourced by tools/check (or run: tools/scripts/torch-venv.sh VERSION): the Python
# that runs a given PyTorch, for hpct-bench --torch and the tests.  1.13 is
# Debian's python3-torch in /usr/bin/python3; 2.13 is the CPU build of
# torch 2.13.0 from PyPI in a venv in a cache outside the tree (HPCT_CACHE,
# default ~/.cache/hpct), made once and reused when present; 2.14 the CUDA
# build of torch 2.14.1 in another (its ProcessGroupNCCL, run through the
# stand-in driver of tests/standin where no GPU is); 2.15 torch 2.15.0's
# (CUDA 13.2; its nccl2 backend), its NVIDIA libraries hard-linked with
# 2.14.1's where the versions agree (hpct_venv_share).  Only those pinned
# versions: a plain `pip install torch` takes whatever CUDA build is newest.

# hpct_venv_make LABEL DIR: makes the venv DIR unless it is there
# (hpct_venv_made then names it: a failed install removes it, so that the
# next call starts clean); 1 with a line naming LABEL on failure.
hpct_venv_made=""
hpct_venv_make() {
	local label=$1 dir=$2
	hpct_venv_made=""
	[ -x "$dir/bin/python" ] && return 0
	/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || {
		if type hpct_ensure_packages >/dev/null 2>&1; then
			hpct_ensure_packages python3-venv || return 1
		else
			echo "hpct: $label: python3 -m venv needs Debian package python3-venv" >&2
			return 1
		fi
	}
	mkdir -p "$(dirname "$dir")"
	/usr/bin/python3 -m venv "$dir" || {
		echo "hpct: $label: python3 -m venv $dir failed" >&2
		rm -rf "$dir"
		return 1
	}
	hpct_venv_made=$dir
}

# hpct_venv_pip LABEL DIR PIP-ARGS...: pip install into DIR's venv; 0, 2
# when the registry could not be reached (a skip, not a failure), else 1,
# with a line naming LABEL.
hpct_venv_pip() {
	local label=$1 dir=$2 log
	shift 2
	log=$(mktemp)
	"$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1 && {
		rm -f "$log"
		return 0
	}
	[ "$hpct_venv_made" != "$dir" ] || rm -rf "$dir" # the next call starts clean
	# "(from versions: none)": the index gave no such package at all, so it
	# was not reached (pip says so only when it retried)
	if grep -qiE 'connection|resolve|network is unreachable|timed out|from versions: none' "$log"; then
		echo "hpct: $label: pip could not download it ($(grep -m1 -iE 'error|warning' "$log"))" >&2
		rm -f "$log"
		return 2
	fi
	echo "hpct: $label: pip install into $dir failed: $(tail -n 1 "$log")" >&2
	rm -f "$log"
	return 1
}

# hpct_venv_share CACHE DIR: the files of DIR's NVIDIA wheels (nvidia/*)
# that another torch venv in CACHE holds at the same version become one
# file (hard links): pip installs each venv's copy, and 2.14.1 and 2.15.0
# share NCCL 2.30.7, cuSPARSELt and nvJitLink (about 500 MB).
hpct_venv_share() {
	local cache=$1 dir=$2
	"$dir/bin/python" - "$cache" "$dir" <<-'EOF' || true
		import filecmp, glob, os, sys
		cache, mine = sys.argv[1], os.path.realpath(sys.argv[2])
		def dists(venv):
		    return {os.path.basename(d): d for d in glob.glob(venv + "/lib/python*/site-packages/nvidia_*.dist-info")}
		ours = dists(mine)
		saved = 0
		for other in glob.glob(cache + "/venv-*"):
		    other = os.path.realpath(other)
		    if other == mine:
		        continue
		    for name, d in dists(other).items():
		        if name not in ours:
		            continue  # another version, or not there
		        site_o, site_m = os.path.dirname(d), os.path.dirname(ours[name])
		        for line in open(os.path.join(d, "RECORD")):
		            rel = line.split(",")[0]
		            a, b = os.path.join(site_o, rel), os.path.join(site_m, rel)
		            if (rel.startswith("nvidia/") and os.path.isfile(a) and os.path.isfile(b)
		                    and not os.path.samefile(a, b) and filecmp.cmp(a, b, shallow=False)):
		                tmp = b + ".hpct-link"
		                os.link(a, tmp)
		                os.replace(tmp, b)
		                saved += os.path.getsize(a)
		print("hpct: %s: %d MB of NVIDIA libraries shared with the other torch venvs (hard links)"
		      % (mine, saved >> 20), file=sys.stderr)
	EOF
}

# hpct_torch_python VERSION: prints the interpreter (1.13, 2.13 or 2.13.0).
# Returns 1 with a line on stderr naming the version and the cause; returns
# 2 when pip could not reach the registry (a skip, not a failure).
hpct_torch_python() {
	local ver=$1 cache=${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}
	local want full py dir got build uncap=""
	case $ver in
	1.13) want=1.13 ;;
	2.13 | 2.13.0) want=2.13 full=2.13.0 build="CPU build" ;;
	2.14 | 2.14.1) want=2.14 full=2.14.1 build="CUDA 13 build, about 5.5 GB: its NCCL 2.30.7" ;;
	2.15 | 2.15.0) want=2.15 full=2.15.0 build="CUDA 13.2 build, about 5.4 GB: its NCCL 2.30.7"
		uncap=/dev/null ;;
	*)
		echo "hpct: torch $ver: want 1.13 (Debian's python3-torch), 2.13, 2.14 or 2.15 (a venv)" >&2
		return 1
		;;
	esac
	if [ "$want" = 1.13 ]; then
		py=/usr/bin/python3
		got=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) || {
			if type hpct_ensure_packages >/dev/null 2>&1; then
				hpct_ensure_packages python3-torch || return 1
			fi
			got=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) || {
				echo "hpct: torch 1.13: $py cannot import torch (Debian package python3-torch)" >&2
				return 1
			}
		}
		case $got in
		1.13*) echo "$py" ;;
		*)
			echo "hpct: torch 1.13: $py has torch $got" >&2
			return 1
			;;
		esac
		return 0
	fi
	dir=$cache/venv-torch-$full
	py=$dir/bin/python
	got=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) || got=""
	case $got in
	"$want"*)
		echo "$py"
		return 0
		;;
	esac
	hpct_venv_make "torch $full" "$dir" || return 1
	echo "hpct: torch $full: installing it ($build) and numpy into $dir" >&2
	# a machine's pip configuration may cap torch below the release wanted
	# (this kind's caps it at 2.14.1, and points pip at the files of 2.13.0
	# and 2.14.1 on its disk): only 2.15's install ignores it
	if [ -n "$uncap" ]; then
		PIP_CONFIG_FILE=$uncap hpct_venv_pip "torch $full" "$dir" "torch==$full" numpy || return
	else
		hpct_venv_pip "torch $full" "$dir" "torch==$full" numpy || return
	fi
	hpct_venv_share "$cache" "$dir"
	got=$("$py" -c 'import torch; print(torch.__version__)' 2>&1) || {
		echo "hpct: torch $full: installed, but $py cannot import it: $(echo "$got" | tail -n 1)" >&2
		return 1
	}
	case $got in
	"$want"*) echo "$py" ;;
	*)
		echo "hpct: torch $full: $dir has torch $got" >&2
		return 1
		;;
	esac
}

# hpct_frameworks_python [2.13|2.15]: prints the interpreter of a venv (in
# the cache, made once) holding the recovery frameworks the tests run over
# that torch (2.13 by default): torchft 0.2.0 (its lighthouse binary ships
# in the wheel) and NVIDIA Resiliency Extension 0.4.1 (--no-deps: its
# pynvml wants a GPU's driver only when asked; 0.7.0 needs Python 3.12).
# 2.13: torch 2.13.0 (CPU) installed in it; 2.15: torch 2.15.0 is the one
# of hpct_torch_python's venv, on its path (a .pth file: nothing of its
# 5.4 GB copied), the frameworks beside it.  Returns as hpct_torch_python.
hpct_frameworks_python() {
	local ver=${1:-2.13} cache=${HPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpct}
	local dir py torch_py="" site site_here
	case $ver in
	2.13) ;;
	2.15) torch_py=$(hpct_torch_python 2.15) || return ;;
	*)
		echo "hpct: frameworks over torch $ver: want 2.13 or 2.15" >&2
		return 1
		;;
	esac
	dir=$cache/venv-frameworks-$ver.0
	py=$dir/bin/python
	if "$py" -c 'import torch, torchft, nvidia_resiliency_ext.inprocess' 2>/dev/null; then
		echo "$py"
		return 0
	fi
	hpct_venv_make "frameworks $ver" "$dir" || return 1
	if [ -n "$torch_py" ]; then
		site=$("$torch_py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') &&
			site_here=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
			echo "$site" >"$site_here/hpct-torch-$ver.pth" || {
			echo "hpct: frameworks $ver: cannot put torch $ver's $site on $dir's path" >&2
			rm -rf "$dir"
			return 1
		}
		echo "hpct: frameworks: installing torchft 0.2.0 and nvidia-resiliency-ext 0.4.1 into $dir, over torch 2.15.0 of $site" >&2
		PIP_CONFIG_FILE=/dev/null hpct_venv_pip "frameworks $ver" "$dir" torchft==0.2.0 psutil \
			packaging pyyaml defusedxml nvidia-ml-py || return
	else
		echo "hpct: frameworks: installing torch 2.13.0 (CPU), torchft 0.2.0 and nvidia-resiliency-ext 0.4.1 into $dir" >&2
		hpct_venv_pip "frameworks $ver" "$dir" torch==2.13.0 numpy torchft==0.2.0 psutil packaging \
			pyyaml defusedxml nvidia-ml-py || return
	fi
	hpct_venv_pip "frameworks $ver" "$dir" --no-deps nvidia-resiliency-ext==0.4.1 || return
	"$py" -c 'import torch, torchft, nvidia_resiliency_ext.inprocess' 2>/dev/null || {
		echo "hpct: frameworks $ver: installed, but $py cannot import torch, torchft and nvidia_resiliency_ext.inprocess" >&2
		return 1
	}
	echo "$py"
}

# run, not sourced: print the interpreter for $1
if [ -n "${BASH_SOURCE:-}" ] && [ "${BASH_SOURCE[0]}" = "$0" ]; then
	. "$(dirname "$0")/debian-deps.sh"
	case ${1:?usage: tools/scripts/torch-venv.sh 1.13|2.13|2.14|2.15|frameworks [2.13|2.15]} in
	frameworks) hpct_frameworks_python "${2:-2.13}" ;;
	*) hpct_torch_python "$1" ;;
	esac
fi
