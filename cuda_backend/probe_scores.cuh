// Internal to the CUDA probe_scores kernels (probe_scores.cu: dispatch and the SIMT kernels;
// probe_scores_mma.cu: the tensor-core kernels): kernel arguments and the ragged-batch lookups
// (which keys a probe sees, which probes see a key) both kernel families share.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace kvcomp::cuda::probe {

struct probe_args {
    const float * q;  // [n_probes, n_q_heads, hd]
    const int32_t * probe_pos;
    const int32_t * key_pos;
    const int32_t * probe_indptr;  // [batch + 1], or null: one request owning everything
    const int32_t * key_indptr;    // [batch + 1], or null
    const float * lse_in;  // [n_probes, n_q_heads]: src4, or the workspace filled by probe_lse_kernel
    float * lse_out;
    float * scores;  // [n_kv_heads, n_keys]
    int64_t n_keys, row_tokens;
    int n_probes, n_q_heads, n_kv_heads, group, hd, batch;
    float scale;
};

// The request owning element x of a ragged range: the last b with indptr[b] <= x (requests without
// elements share their indptr value with the next one, so they are never chosen).
__device__ __forceinline__ int owner(const int32_t * indptr, int batch, int64_t x) {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (indptr[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Keys [*k0, *k1) of probe p's request.
__device__ __forceinline__ void probe_keys(const probe_args & a, int p, int64_t * k0, int64_t * k1) {
    if (a.batch == 0) {
        *k0 = 0, *k1 = a.n_keys;
        return;
    }
    const int b = owner(a.probe_indptr, a.batch, p);
    *k0 = a.key_indptr[b], *k1 = a.key_indptr[b + 1];
}

// Probes [*p0, *p1) of key i's request.
__device__ __forceinline__ void key_probes(const probe_args & a, int64_t i, int * p0, int * p1) {
    if (a.batch == 0) {
        *p0 = 0, *p1 = a.n_probes;
        return;
    }
    const int b = owner(a.key_indptr, a.batch, i);
    *p0 = a.probe_indptr[b], *p1 = a.probe_indptr[b + 1];
}

// ---- the tensor-core kernels (probe_scores_mma.cu) -------------------------------------------
// Whether they handle a head_dim (64 and 128).
bool mma_handles(int64_t head_dim);
// Runs lse (unless a.lse_in is set) and the scores; `k` is f32 when !k_f16, else f16.
void mma_launch(context & ctx, const void * k, bool k_f16, probe_args a);

}  // namespace kvcomp::cuda::probe
