# Sourced by the GPU-host scripts: makes the carried build runnable on the GPU host (Ubuntu 24.04,
# CUDA 13.0, no package manager). Unpacks the Debian runtime packages carried in .carry/debs
# (CLBlast, Boost.Program_options) without installing them, and registers NVIDIA's OpenCL driver
# for this shell only (the host registers only PoCL). See ../shared/GPU_HOST.md.
KVCOMP_CARRY=${KVCOMP_CARRY:-$PWD/.carry}
mkdir -p /tmp/kvcomp_debs
for deb in "$KVCOMP_CARRY"/debs/*.deb; do
  dpkg -x "$deb" /tmp/kvcomp_debs
done
export LD_LIBRARY_PATH=/tmp/kvcomp_debs/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/kvcomp_icd
echo /usr/lib/libnvidia-opencl.so.1 > /tmp/kvcomp_icd/nvidia.icd
if [ ! -e /usr/lib/libnvidia-opencl.so.1 ]; then
  found=$(ls /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/local/nvidia/lib64/libnvidia-opencl.so.1 2>/dev/null | head -1)
  [ -n "$found" ] && echo "$found" > /tmp/kvcomp_icd/nvidia.icd
fi
export OCL_ICD_VENDORS=/tmp/kvcomp_icd
export KVCOMP_CL_CACHE_DIR=/tmp/kvcomp_cl_cache

# Shared by the visit scripts: the carried binaries, the output folder, the commit they were built
# from, and a runner that logs each step with its exit code.
# The binaries travel xz-compressed (.carry/bin.tar.xz, with the checkout under the carry limit);
# an unpacked .carry/bin is used as is.
B=.carry/bin
if [ -f "$KVCOMP_CARRY/bin.tar.xz" ]; then
  mkdir -p /tmp/kvcomp_bin
  tar -xJf "$KVCOMP_CARRY/bin.tar.xz" -C /tmp/kvcomp_bin
  B=/tmp/kvcomp_bin/bin
fi
OUT=${OUT:-/tmp/kvcomp_out}
mkdir -p "$OUT"
commit=$(cat .carry/commit 2>/dev/null || echo unknown)
step() { echo; echo "=== $*"; "$@"; echo "=== rc=$? ($1)"; }

# The OpenCL device of the GPU (the host also registers PoCL, usually as opencl:0): tests and
# benchmarks name it explicitly so they never fall back to the CPU device.
OCL_GPU=$($B/kvcomp info 2>/dev/null | awk '/^opencl:[0-9]+ .*\(OpenCL\)$/ && !/cpu-|CPU/ {print $1; exit}')
# Without a carried kvcomp there is nothing to ask: say so on stdout (the visit scripts source this file with
# stderr silenced), or the runs below would take the first OpenCL device, often PoCL on the host's CPU.
[ -x "$B/kvcomp" ] || echo "env.sh: no kvcomp among the carried binaries: OCL_GPU is '${OCL_GPU:-opencl}' unless the script sets it"
OCL_GPU=${OCL_GPU:-opencl}
