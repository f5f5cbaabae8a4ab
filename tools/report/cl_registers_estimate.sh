#!/usr/bin/env bash
# Estimates, without a GPU, the registers and spills of an OpenCL kernel variant on an NVIDIA sm_90 card:
# clang's OpenCL front end and NVPTX back end (with libclc's builtins linked in) write PTX, and the CUDA
# toolkit's ptxas assembles it for sm_90 with -v. NVIDIA's driver compiles the same source with its own front
# end, so the counts are an estimate of what the driver's ptxas reports; on the GPU host the real ones come
# from KVCOMP_CL_BUILD_OPTIONS=-cl-nv-verbose KVCOMP_CL_BUILD_LOG=1 (README, environment variables). Checked
# against those in visit 131 (docs/kernel_notes.md, "Registers of the per-warp decodes"): the estimates of the
# per-warp decodes were 20-93 registers above the driver's, so use it for spills and private memory, not counts.
#
# Usage: tools/report/cl_registers_estimate.sh KERNEL_FILE DEFINES [MAXREG ...]
#   KERNEL_FILE  a file of cl_kernels/ (common.cl is prepended, as lib/opencl/program_cache.cpp does)
#   DEFINES      the preamble the launcher would pass, e.g. "G=4 GB=4 MW=128 PAGE_SIZE=16 NW=4 STAGE_H=4352"
#                (KVC_ASM=__asm__ is added)
#   MAXREG       register limits to assemble with as well (ptxas -maxrregcount; the driver's
#                -cl-nv-maxrregcount)
# Needs clang-15 and libclc-15 (apt-get install clang-15 libclc-15) and ptxas (/usr/local/cuda/bin).
# Example: tools/report/cl_registers_estimate.sh attn_decode_ragged_mma.cl \
#            "G=4 GB=4 MW=128 PAGE_SIZE=16 NW=4 STAGE_H=4352" 128 96
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
kernel=$root/cl_kernels/$1
defines=$2
shift 2
libclc=/usr/lib/clc/nvptx64--nvidiacl.bc
ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
[ -f "$kernel" ] || { echo "no kernel file $kernel" >&2; exit 2; }
[ -f "$libclc" ] || { echo "no $libclc: apt-get install libclc-15" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
  for d in $defines KVC_ASM=__asm__; do echo "#define ${d%%=*} ${d#*=}"; done
  # What libclc leaves to the platform (native_exp2's exp2f; native_cos / native_sin, which clang's NVPTX back
  # end cannot select): the PTX approximations the driver uses for them
  echo 'float exp2f(float x) { float r; __asm__("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }'
  echo 'float kvc_est_cos(float x) { float r; __asm__("cos.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }'
  echo 'float kvc_est_sin(float x) { float r; __asm__("sin.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }'
  echo '#define native_cos kvc_est_cos'
  echo '#define native_sin kvc_est_sin'
  cat "$root/cl_kernels/common.cl" "$kernel"
} > "$work/k.cl"
clang-15 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -O3 -march=sm_80 -Wno-linker-warnings \
  -Xclang -mlink-builtin-bitcode -Xclang "$libclc" -S "$work/k.cl" -o "$work/k.ptx"
# clang writes PTX for sm_80 at its own ISA version; ptxas takes it for sm_90
sed -i -e 's/^\.target sm_[0-9]*.*/.target sm_90/' -e 's/^\.version .*/.version 8.0/' "$work/k.ptx"
for limit in none "$@"; do
  opt=()
  [ "$limit" = none ] || opt=(-maxrregcount="$limit")
  "$ptxas" -arch=sm_90 -v "${opt[@]}" "$work/k.ptx" -o "$work/k.cubin" 2>&1 |
    awk -v l="$limit" '/Compiling entry function/ {name = $(NF - 2)}
      /spill stores/ {spill = $5 " B spill stores, " $9 " B spill loads"}
      /Used [0-9]+ registers/ {print "maxreg " l ": " name " " $5 " registers, " spill}'
done
