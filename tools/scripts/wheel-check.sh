#!/usr/bin/env bash
# tools/scripts/wheel-check.sh: hpct installed the way PyTorch users install
# things, checked (tools/check runs it): into a fresh venv, `pip install`
# of this tree (meson-python builds the wheel: libhpct, the shim, hpct-run,
# hpct-info, hpct-bench) beside torch 2.13.0 (CPU) and the nvidia-nccl-cu12
# wheel, then
#   1. `python -m hpct` names the shim inside the package, and the settings;
#   2. `hpct-run --preload -- python -m torch.distributed.run --standalone
#      --nproc-per-node 2 tests/torch/job.py`: every worker's TCPStore served
#      by the shim, rootless, and the job finishes;
#   3. the wheel's libhpct.so finds NCCL in the nvidia-nccl wheel beside it
#      (site-packages/nvidia/nccl/lib), with no HPCT_NCCL_LIB or NCCL_HOME.
# One line "ok N - ..." or "not ok N - ..." each; exit 1 when any failed, 2
# when pip could not build or install (the output says why).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nccl=${HPCT_NCCL_RELEASE:-2.28.9}
venv=$work/venv
python3 -m venv "$venv" || exit 2
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }
echo "wheel: pip install $top, torch==2.13.0 and nvidia-nccl-cu12==$nccl into a fresh venv"
if ! pip install -q torch==2.13.0 numpy "nvidia-nccl-cu12==$nccl" "$top" >"$work/pip.log" 2>&1; then
	echo "wheel: pip install failed:"
	grep -v "is ignored: it is neither" "$work/pip.log" | tail -20
	exit 2
fi
fails=0
check() { # n name ok-or-not detail
	if [ "$3" = ok ]; then echo "ok $1 - $2"; else echo "not ok $1 - $2: $4"; fails=$((fails + 1)); fi
}
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')

out=$(cd "$work" && "$venv/bin/python" -m hpct 2>&1)
r=bad
[[ $out == *"shim: $site/hpct/lib/libhpct_preload.so"* ]] && [[ $out != *missing* ]] &&
	[[ $out == *HPCT_USE_ROOTLESS* ]] && r=ok
check 1 "python -m hpct: the shim in the package ($site/hpct/lib), the settings table" $r "$out"

log=$work/torchrun
(cd "$work" && PATH=$venv/bin:$PATH JOB_SHOW_SHIM=1 JOB_NO_CHILDREN=1 OMP_NUM_THREADS=1 \
	HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=INIT timeout 300 hpct-run --preload -- \
	python -m torch.distributed.run --standalone --nproc-per-node 2 "$top/tests/torch/job.py") \
	>"$log" 2>&1
rc=$?
r=ok
for w in 0 1; do
	grep -Eq "(^|:)ok $w\$" "$log" || r=bad
	grep -Eq "(^|:)shim $w yes\$" "$log" || r=bad
	grep -q "\[$w\] HPCT INFO preload: torch 2.13.0+cpu at $site/torch: TCPStore served in this rank" "$log" || r=bad
done
[ $rc = 0 ] || r=bad
check 2 "hpct-run --preload -- torchrun --standalone --nproc-per-node 2 (torch 2.13): both workers' stores served by the wheel's shim, the job done" $r "exit $rc; $(tail -5 "$log")"

out=$(cd "$work" && HPCT_DEBUG=INFO HPCT_DEBUG_SUBSYS=NCCL "$venv/bin/python" -c '
import ctypes, hpct
lib = ctypes.CDLL(hpct.lib_dir() + "/libhpct.so")
v = ctypes.c_int(0)
print("version", lib.hpct_nccl_version(ctypes.byref(v)), v.value)' 2>&1)
code=$(echo "$nccl" | awk -F. '{printf "%d", $1 * 10000 + $2 * 100 + $3}')
r=bad
[[ $out == *"loaded from $site/nvidia/nccl/lib/libnccl.so.2"* ]] && [[ $out == *"version 0 $code"* ]] && r=ok
check 3 "the wheel's libhpct finds NCCL $nccl in the nvidia-nccl-cu12 wheel beside it" $r "$out"
exit $((fails > 0))
