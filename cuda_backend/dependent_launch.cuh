// Programmatic dependent launch (sm_90+) between a decode kernel and the kernel that merges its
// partials (attn_decode, attn_decode_quant, the ragged decodes and Palu's).
//
// Why: the merge is a second launch of a few microseconds that can only start once the decode grid
// has ended. Launched as a dependent, its blocks are made resident while the decode's last blocks
// still run and wait for the decode in griddepcontrol.wait, so the launch's latency overlaps the
// decode's tail instead of following it (batch 1, where a decode takes 20-100 us, is where it
// shows).
//
// Contract: a producer calls allow_consumer_launch() in every block after its main loop, before
// the block's epilogue (blocks that exit early count as having called it); the consumer is launched
// once every block has. A consumer calls wait_for_producer() in every block before it reads anything
// the producer writes or writes anything a preceding kernel may still read, and before it exits;
// before that it may only read the op's inputs. The wait returns once the producer grid has completed
// and its writes are visible, so results written after allow_consumer_launch() are seen too. Without
// the launch attribute (older GPUs, or KVCOMP_DEPENDENT_LAUNCH=0) both are no-ops and the stream
// orders the kernels as usual.
//
// Measured on an H200 (docs/RESULTS.md, "The decodes' merge as a dependent launch"): 1.01-1.11x at
// batch 1, within 1-2 % at batch 16. Allowing the launch at each decode block's start instead made
// the merge's blocks resident beside the whole decode, and KIVI-2 lost 2-3 % at 1 x 32K and 1 x 128K.
#pragma once

#include <utility>

#include "common.cuh"

namespace kvcomp::cuda {

__device__ __forceinline__ void allow_consumer_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Launches `kernel` on ctx's stream as the dependent of the kernel enqueued before it, where the
// context allows it (context::dependent_launch), else as a plain launch.
template <typename... Params, typename... Args>
void launch_consumer(context & ctx, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args &&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx.stream;
    cudaLaunchAttribute attr[1]{};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = ctx.dependent_launch ? 1 : 0;
    KVCOMP_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace kvcomp::cuda
