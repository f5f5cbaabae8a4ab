// Shared helpers of the CPU reference backend: host buffers, typed access to tensor views,
// and the per-op entry points (one .cpp per op family, same basenames as cl_kernels/ and
// cuda_backend/). The reference is plain scalar C++ that accumulates in double: it is the oracle
// the other backends are tested against, so clarity beats speed here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace kvcomp::cpu {

class cpu_buffer : public buffer {
public:
    cpu_buffer(backend & owner, size_t size) : buffer(owner, size), data_(size ? size : 1) {}
    uint8_t * data() { return data_.data(); }

private:
    std::vector<uint8_t> data_;
};

template <typename T>
T * ptr(const tensor & t) {
    return reinterpret_cast<T *>(static_cast<cpu_buffer *>(t.buf)->data() + t.offset);
}

// Reads element i of a float tensor (f32, f16 or bf16) as float.
inline float load_float(const tensor & t, int64_t i) {
    switch (t.type) {
        case dtype::f32: return ptr<const float>(t)[i];
        case dtype::f16: return half_to_float(ptr<const uint16_t>(t)[i]);
        case dtype::bf16: return bf16_to_float(ptr<const uint16_t>(t)[i]);
        default: KVCOMP_THROW(status::internal, "load_float on a non-float tensor");
    }
}

// Writes element i of a float tensor, rounding to nearest even for f16/bf16.
inline void store_float(const tensor & t, int64_t i, float v) {
    switch (t.type) {
        case dtype::f32: ptr<float>(t)[i] = v; return;
        case dtype::f16: ptr<uint16_t>(t)[i] = float_to_half(v); return;
        case dtype::bf16: ptr<uint16_t>(t)[i] = float_to_bf16(v); return;
        default: KVCOMP_THROW(status::internal, "store_float on a non-float tensor");
    }
}

// Sequence length of request b in a paged KV table (see core/op.h).
inline int64_t paged_seq_len(const int32_t * indptr, const int32_t * last_page_len, int64_t b, int64_t page_size) {
    const int64_t pages = indptr[b + 1] - indptr[b];
    return pages <= 0 ? 0 : (pages - 1) * page_size + last_page_len[b];
}

void run_copy(const op_desc & op);
void run_add(const op_desc & op);
void run_gemm(const op_desc & op);
void run_rms_norm(const op_desc & op);
void run_rope(const op_desc & op);
void run_silu_mul(const op_desc & op);
void run_softmax(const op_desc & op);
void run_get_rows(const op_desc & op);
void run_argmax(const op_desc & op);
void run_kv_append(const op_desc & op);
void run_attn_decode(const op_desc & op);
void run_attn_prefill(const op_desc & op);
void run_kv_quantize(const op_desc & op);
void run_kv_dequantize(const op_desc & op);
void run_attn_decode_quant(const op_desc & op);
void run_probe_scores(const op_desc & op);
void run_select_salient(const op_desc & op);

}  // namespace kvcomp::cpu
