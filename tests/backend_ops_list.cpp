// The case lists: `full` for test mode, `smoke` for quick CI, `perf` / `perf_cpu` for perf mode and
// bench_ops. Sizes are odd on purpose; sequence lengths avoid multiples of the page size (1, 15,
// 17, 257, 4099), page sizes 16, 32 and 1, GQA ratios 1/4/8, batches 1/3/8, head_dim 64/128.
// The CPU oracle is scalar fp64: the 4099-token cases are few.
#include "backend_ops_cases_impl.h"
#include "backend_ops_lowrank_cases.h"
#include "backend_ops_quant_cases.h"

namespace kvcomp::test {

case_ptr make_copy_case(dtype src, dtype dst, int64_t n) {
    return std::make_unique<copy_case>(src, dst, n);
}
case_ptr make_attn_decode_case(const decode_spec & spec) {
    return std::make_unique<attn_decode_case>(spec);
}
case_ptr make_attn_prefill_case(const std::vector<int64_t> & seqs, int64_t n_q_heads, int64_t n_kv_heads,
                                int64_t head_dim) {
    return std::make_unique<attn_prefill_case>(seqs, n_q_heads, n_kv_heads, head_dim);
}

namespace {

constexpr dtype f32 = dtype::f32, f16 = dtype::f16, bf16 = dtype::bf16;

struct list {
    std::vector<case_ptr> cases;
    template <typename C, typename... A>
    void add(A &&... args) {
        cases.push_back(std::make_unique<C>(std::forward<A>(args)...));
    }
};

gemm_params gemm(int64_t m, int64_t n, int64_t k, bool trans_b, int64_t batch = 1) {
    gemm_params p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.trans_b = trans_b;
    p.batch = batch;
    p.stride_a = batch > 1 ? m * k : 0;
    p.stride_b = batch > 1 ? k * n : 0;
    p.stride_c = batch > 1 ? m * n : 0;
    return p;
}

rope_params rope(int64_t tokens, int64_t heads, int64_t hd, int64_t rot, rope_style style, float theta) {
    rope_params p;
    p.n_tokens = tokens;
    p.n_heads = heads;
    p.head_dim = hd;
    p.rot_dim = rot;
    p.style = style;
    p.theta = theta;
    return p;
}

decode_spec decode(int64_t qh, int64_t kvh, int64_t hd, int64_t page, std::vector<int64_t> lens,
                   int32_t splits) {
    decode_spec s;
    s.n_q_heads = qh;
    s.n_kv_heads = kvh;
    s.head_dim = hd;
    s.page_size = page;
    s.lens = std::move(lens);
    s.n_splits = splits;
    return s;
}

append_spec append(int64_t kvh, int64_t hd, int64_t page, std::vector<int64_t> prev, std::vector<int64_t> add,
                   dtype type, bool shuffle) {
    append_spec s;
    s.n_kv_heads = kvh;
    s.head_dim = hd;
    s.page_size = page;
    s.prev = std::move(prev);
    s.add = std::move(add);
    s.new_type = type;
    s.shuffle = shuffle;
    return s;
}

constexpr rope_style neox = rope_style::neox, inter = rope_style::interleaved;

void full_list(list & l) {
    // copy: every dtype pair, odd sizes, one view at a 4-byte offset.
    for (dtype s : {f32, f16, bf16})
        for (dtype d : {f32, f16, bf16}) l.add<copy_case>(s, d, int64_t(4099));
    l.add<copy_case>(f32, f16, int64_t(1));
    l.add<copy_case>(f32, f32, int64_t(100003));
    l.add<copy_case>(f16, f32, int64_t(1001), size_t(4));
    for (int64_t n : {1, 33, 100003}) l.add<add_case>(n, false);
    l.add<add_case>(int64_t(1001), true);

    // gemm: every dtype combination x trans_b x a GEMV-like and a small odd shape.
    const dtype combos[4][3] = {{f32, f32, f32}, {f16, f16, f32}, {f16, f16, f16}, {f32, f16, f32}};
    for (const auto & c : combos)
        for (bool tb : {false, true}) {
            l.add<gemm_case>(c[0], c[1], c[2], gemm(1, 67, 129, tb));
            l.add<gemm_case>(c[0], c[1], c[2], gemm(17, 33, 65, tb));
        }
    l.add<gemm_case>(f32, f16, f32, gemm(3, 257, 4096, true));  // long accumulation
    // Decode batches of 4..16 rows (OpenCL's kvc_gemv_small_m): a K with a tail past the last
    // 4-element chunk, one past a multiple of 128.
    l.add<gemm_case>(f32, f16, f32, gemm(16, 37, 130, true));
    l.add<gemm_case>(f16, f16, f16, gemm(16, 37, 130, true));
    l.add<gemm_case>(f32, f32, f32, gemm(4, 70, 256, true));
    l.add<gemm_case>(f32, f16, f32, gemm(9, 33, 4099, true));
    // f16 weights with K a multiple of 256 (the models' shapes; NVIDIA's OpenCL driver runs them on
    // the tensor cores, kvc_gemv_mma): 2 and 16 rows, batched with gaps, alpha and beta; and K % 16 == 0.
    l.add<gemm_case>(f32, f16, f32, gemm(16, 37, 144, true));
    l.add<gemm_case>(f32, f16, f32, gemm(16, 37, 512, true));
    l.add<gemm_case>(f16, f16, f16, gemm(16, 37, 256, true));
    l.add<gemm_case>(f16, f16, f32, gemm(2, 67, 768, true));
    l.add<gemm_case>(f32, f16, f32, gemm(3, 4300, 256, true));  // 4 tiles per work-group on 132 SMs
    {
        gemm_params p = gemm(5, 19, 256, true, 3);
        p.stride_a += 4, p.stride_b += 8, p.stride_c += 7;
        l.add<gemm_case>(f32, f16, f32, p);
        p = gemm(13, 300, 1024, true);
        p.alpha = 0.5f, p.beta = 0.75f;
        l.add<gemm_case>(f32, f16, f32, p);
    }
    l.add<gemm_case>(f16, f16, f32, gemm(64, 100, 300, true));
    // More than 16 rows of f16 weights with K % 32 == 0 (NVIDIA's OpenCL driver: kvc_gemm_mma, tiles of
    // 64 x 64 below 128 rows and 128 x 128 from there; stages of 64 channels where K allows, else 32, as
    // at K = 32 and 96): partial tiles in both dims, f16 A and C, a long accumulation, batched with gaps,
    // alpha / beta, and one weight matrix for every batch item.
    l.add<gemm_case>(f32, f16, f32, gemm(17, 70, 32, true));
    l.add<gemm_case>(f32, f16, f32, gemm(200, 130, 256, true));
    l.add<gemm_case>(f16, f16, f16, gemm(65, 64, 96, true));
    l.add<gemm_case>(f32, f16, f32, gemm(130, 72, 4096, true));
    {
        gemm_params p = gemm(33, 19, 64, true, 3);
        p.stride_a += 4, p.stride_b += 8, p.stride_c += 7;
        p.alpha = 0.5f, p.beta = 0.75f;
        l.add<gemm_case>(f32, f16, f32, p);
        p = gemm(140, 35, 64, true, 2);
        p.stride_b = 0;
        l.add<gemm_case>(f32, f16, f32, p);
        // f16 A: rows 16-byte aligned (the tensor cores) and 8-byte aligned (the tiled kernel).
        for (int64_t gap : {8, 4}) {
            p = gemm(33, 19, 64, true, 3);
            p.stride_a += gap, p.stride_b += 8, p.beta = 0.5f;
            l.add<gemm_case>(f16, f16, f32, p);
        }
    }
    // Batched: gaps between items (untouched C gaps must stay untouched), packed, broadcasts.
    for (int i = 0; i < 4; ++i) {
        gemm_params p = gemm(5, 19, 23, i % 2 == 1, 3);
        p.stride_a += 5;
        p.stride_b += 3;
        p.stride_c += 7;
        l.add<gemm_case>(combos[i][0], combos[i][1], combos[i][2], p);
    }
    l.add<gemm_case>(f32, f32, f32, gemm(7, 9, 11, false, 4));
    {
        gemm_params p = gemm(6, 35, 40, true, 4);
        p.stride_b = 0;  // one weight matrix for every batch item
        l.add<gemm_case>(f32, f16, f32, p);
        l.add<gemm_case>(f16, f16, f16, p);
        p = gemm(6, 35, 40, false, 3);
        p.stride_a = 0;
        l.add<gemm_case>(f32, f32, f32, p);
    }
    {
        gemm_params p = gemm(13, 21, 31, true);
        p.alpha = 0.5f;
        p.beta = 0.75f;
        l.add<gemm_case>(f32, f32, f32, p);
        l.add<gemm_case>(f16, f16, f16, p);
        p = gemm(4, 10, 12, false, 2);
        p.stride_c += 3;
        p.alpha = -1.5f;
        p.beta = 1.0f;
        l.add<gemm_case>(f16, f16, f32, p);
    }

    for (dtype w : {f32, f16}) l.add<rms_norm_case>(int64_t(5), int64_t(4099), w, false);
    l.add<rms_norm_case>(int64_t(1), int64_t(129), f32, false);
    l.add<rms_norm_case>(int64_t(3), int64_t(1000), f32, true);

    l.add<rope_case>(rope(17, 3, 128, 128, neox, 10000.0f), false, false, 4099);
    l.add<rope_case>(rope(17, 3, 128, 128, neox, 500000.0f), true, false, 4099);
    l.add<rope_case>(rope(15, 4, 64, 64, inter, 10000.0f), false, false, 4099);
    l.add<rope_case>(rope(15, 4, 64, 64, inter, 500000.0f), true, false, 257);
    l.add<rope_case>(rope(5, 8, 64, 32, neox, 10000.0f), false, false, 4099);  // partial rotary
    l.add<rope_case>(rope(7, 2, 128, 64, inter, 10000.0f), true, true, 4099);
    l.add<rope_case>(rope(1, 32, 128, 128, neox, 10000.0f), false, true, 17);

    l.add<silu_mul_case>(int64_t(3), int64_t(1001));
    l.add<silu_mul_case>(int64_t(1), int64_t(4099));
    l.add<softmax_case>(int64_t(5), int64_t(4099), 0.125f, false);
    l.add<softmax_case>(int64_t(1), int64_t(1), 1.0f, false);
    l.add<softmax_case>(int64_t(17), int64_t(257), 1.0f, true);
    for (dtype t : {f32, f16, bf16}) l.add<get_rows_case>(t, int64_t(100), int64_t(129), int64_t(15));
    l.add<get_rows_case>(f16, int64_t(3), int64_t(4096), int64_t(1));
    l.add<argmax_case>(int64_t(3), int64_t(32003));
    l.add<argmax_case>(int64_t(7), int64_t(17));
    l.add<argmax_case>(int64_t(1), int64_t(1));

    // kv_append: a prefill chunk, ragged continued chunks, decode tokens at page boundaries, page size 1.
    l.add<kv_append_case>(append(8, 128, 16, {0}, {17}, f32, false));
    l.add<kv_append_case>(append(2, 64, 16, {0, 16, 5}, {15, 1, 40}, f16, false));
    l.add<kv_append_case>(
        append(4, 64, 32, {0, 15, 16, 31, 1, 100, 63, 64}, {1, 1, 1, 1, 1, 1, 1, 1}, f32, true));
    l.add<kv_append_case>(append(1, 128, 1, {3, 0, 5}, {2, 1, 4}, f32, true));
    l.add<kv_append_case>(append(8, 128, 16, {4098, 16, 0}, {1, 1, 1}, f16, false));

    // attn_decode: GQA 1/4/8, explicit splits 1/3/7 and auto, ragged batches incl. length 1 (and 0).
    l.add<attn_decode_case>(decode(4, 4, 128, 16, {1}, 0));
    for (int32_t s : {0, 1, 3, 7}) l.add<attn_decode_case>(decode(32, 8, 128, 16, {4099}, s));
    for (int32_t s : {0, 3}) l.add<attn_decode_case>(decode(8, 1, 64, 16, {17, 1, 257}, s));
    for (int32_t s : {0, 7})
        l.add<attn_decode_case>(decode(16, 4, 64, 32, {15, 16, 17, 1, 33, 0, 64, 100}, s));
    l.add<attn_decode_case>(decode(4, 1, 64, 1, {15, 1, 17}, 0));
    l.add<attn_decode_case>(decode(8, 8, 128, 16, {257, 15, 1}, 7));
    l.add<attn_decode_case>(decode(16, 2, 128, 32, {1, 15, 17}, 3));
    // Pages of 64 and 128 tokens (the engine's --page-size; bench_ops --page-sizes).
    for (int64_t page : {64, 128}) l.add<attn_decode_case>(decode(32, 8, 128, page, {1000, 63, 129}, 0));
    // Scores climbing by 0.26 log2 units per key (decode_spec::key_ramp), ~250 over the 1000-token
    // row that one split takes whole: the running max must keep moving (a lazily moved one, too).
    {
        decode_spec s = decode(32, 8, 128, 16, {1000, 300}, 1);
        s.key_ramp = 1.0f;
        l.add<attn_decode_case>(s);
        s.n_splits = 0;
        l.add<attn_decode_case>(s);
    }

    l.add<attn_prefill_case>(std::vector<int64_t>{17}, int64_t(4), int64_t(4), int64_t(64));
    l.add<attn_prefill_case>(std::vector<int64_t>{15, 1, 33}, int64_t(8), int64_t(2), int64_t(128));
    l.add<attn_prefill_case>(std::vector<int64_t>{257, 16}, int64_t(8), int64_t(1), int64_t(64));
    l.add<attn_prefill_case>(std::vector<int64_t>{3, 40, 1, 17, 9, 16, 33, 2}, int64_t(4), int64_t(4),
                             int64_t(128));
    // Tile edges of the CUDA tensor-core kernel (128 query rows x 64 keys per step): lengths
    // around 64 and 128 in one ragged batch with a 1-token request, hd 64 and 128, GQA 4:1 and
    // 1:1; several 128-row tiles; views at a 4-byte offset (the CUDA-core fallback).
    for (int64_t hd : {int64_t(64), int64_t(128)}) {
        l.add<attn_prefill_case>(std::vector<int64_t>{1, 17, 63, 64, 65, 200}, int64_t(8), int64_t(2), hd);
        l.add<attn_prefill_case>(std::vector<int64_t>{1, 17, 63, 64, 65, 200}, int64_t(4), int64_t(4), hd);
    }
    l.add<attn_prefill_case>(std::vector<int64_t>{127, 128, 129, 383}, int64_t(8), int64_t(2), int64_t(128));
    l.add<attn_prefill_case>(std::vector<int64_t>{65, 1, 130}, int64_t(8), int64_t(2), int64_t(128), size_t(4));
    // The optional lse output (ZipCache's probe rows read it): tensor-core kernel at hd 64 and 128
    // with tile edges and GQA, and the CUDA-core fallback (4-byte offset).
    l.add<attn_prefill_case>(std::vector<int64_t>{1, 63, 200}, int64_t(8), int64_t(2), int64_t(128), size_t(256), true);
    l.add<attn_prefill_case>(std::vector<int64_t>{17, 129}, int64_t(4), int64_t(4), int64_t(64), size_t(256), true);
    l.add<attn_prefill_case>(std::vector<int64_t>{65, 1, 130}, int64_t(8), int64_t(2), int64_t(128), size_t(4), true);
    // The reduced widths of kivi / zipcache with lowrank=, rank=R: the tensor-core kernel at 32, 48, 80,
    // 96 and 112 (48 and 80: K/V tile copies with a partial last round), with lse; the CUDA-core
    // fallback at 96 (4-byte offset; at 48 CUDA reports the offset unsupported).
    for (int64_t hd : {int64_t(32), int64_t(48), int64_t(80), int64_t(96), int64_t(112)})
        l.add<attn_prefill_case>(std::vector<int64_t>{1, 63, 65, 200}, int64_t(8), int64_t(2), hd, size_t(256), true);
    l.add<attn_prefill_case>(std::vector<int64_t>{65, 1, 130}, int64_t(8), int64_t(2), int64_t(96), size_t(4), true);
    l.add<attn_prefill_case>(std::vector<int64_t>{17, 3}, int64_t(4), int64_t(4), int64_t(48), size_t(4));
    // Scores that climb along the keys (key_ramp): at hd 128, 0.47 per position adds about 24 log2
    // units over 200 keys, so the CUDA kernel's lazy running max (which moves only when a score
    // exceeds it by more than 8) rescales o and l several times per row after its first key tile.
    for (int64_t hd : {int64_t(64), int64_t(128)})
        l.add<attn_prefill_case>(std::vector<int64_t>{200, 65}, int64_t(8), int64_t(2), hd, size_t(256), true,
                                 hd == 64 ? 0.33f : 0.47f);
}

void smoke_list(list & l) {
    l.add<copy_case>(f32, f16, int64_t(4099));
    l.add<copy_case>(f16, f32, int64_t(1001), size_t(4));
    l.add<copy_case>(bf16, f32, int64_t(33));
    l.add<add_case>(int64_t(33), true);
    l.add<gemm_case>(f16, f16, f32, gemm(17, 33, 65, true));
    l.add<gemm_case>(f32, f32, f32, gemm(1, 67, 129, false));
    {
        gemm_params p = gemm(5, 19, 23, false, 3);
        p.stride_a += 5;
        p.stride_c += 7;
        l.add<gemm_case>(f16, f16, f16, p);
        p = gemm(6, 35, 40, true, 4);
        p.stride_b = 0;
        p.beta = 0.5f;
        l.add<gemm_case>(f32, f16, f32, p);
    }
    l.add<rms_norm_case>(int64_t(5), int64_t(129), f16, false);
    l.add<rope_case>(rope(17, 3, 128, 128, neox, 500000.0f), true, false, 4099);
    l.add<rope_case>(rope(5, 8, 64, 32, inter, 10000.0f), false, true, 257);
    l.add<silu_mul_case>(int64_t(3), int64_t(1001));
    l.add<softmax_case>(int64_t(17), int64_t(257), 1.0f, true);
    l.add<get_rows_case>(f16, int64_t(100), int64_t(129), int64_t(15));
    l.add<argmax_case>(int64_t(3), int64_t(1001));
    l.add<kv_append_case>(append(2, 64, 16, {0, 16, 5}, {15, 1, 40}, f16, false));
    l.add<kv_append_case>(
        append(4, 64, 32, {0, 15, 16, 31, 1, 100, 63, 64}, {1, 1, 1, 1, 1, 1, 1, 1}, f32, true));
    l.add<attn_decode_case>(decode(8, 1, 64, 16, {17, 1, 257}, 3));
    l.add<attn_decode_case>(decode(16, 4, 128, 32, {15, 16, 1}, 0));
    l.add<attn_prefill_case>(std::vector<int64_t>{15, 1, 33}, int64_t(8), int64_t(2), int64_t(128));
}

// Perf shapes of an 8B-class model (hidden 4096, 32/8 heads of 128, FFN 14336, vocab 128256).
// `cpu` divides them for CPU devices (PoCL, the reference), which are 10-100x slower.
void perf_list(list & l, bool cpu) {
    const int64_t s = cpu ? 8 : 1;  // shrink factor
    l.add<copy_case>(f32, f32, int64_t(1) << (cpu ? 22 : 26));
    l.add<copy_case>(f32, f16, int64_t(1) << (cpu ? 22 : 26));
    l.add<add_case>(int64_t(1) << (cpu ? 20 : 24), false);
    for (int64_t m : {int64_t(1), int64_t(16), 512 / s})
        l.add<gemm_case>(f16, f16, f32, gemm(m, 4096 / s, 4096 / s, true));
    l.add<gemm_case>(f32, f16, f32, gemm(16, 4096 / s, 4096 / s, true));
    l.add<gemm_case>(f16, f16, f16, gemm(512 / s, 4096 / s, 4096 / s, true));
    // The weight products of a 4K prompt's prefill and of a batch-16 decode step at the FFN's widths,
    // with the engine's f16 matmul inputs (and the prefill's with f32 ones).
    for (dtype a : {f32, f16}) {
        l.add<gemm_case>(a, f16, f32, gemm(4096 / s, 4096 / s, 4096 / s, true));
        l.add<gemm_case>(a, f16, f32, gemm(4096 / s, 14336 / s, 4096 / s, true));
    }
    l.add<gemm_case>(f16, f16, f32, gemm(16, 14336 / s, 4096 / s, true));
    l.add<gemm_case>(f16, f16, f32, gemm(16, 4096 / s, 14336 / s, true));
    l.add<gemm_case>(f32, f32, f32, gemm(1024 / s, 1024 / s, 1024 / s, false));
    l.add<rms_norm_case>(int64_t(16), int64_t(4096), f32, false);
    l.add<rope_case>(rope(512 / s, 32, 128, 128, neox, 500000.0f), true, true, 8192);
    l.add<silu_mul_case>(int64_t(16), int64_t(14336));
    l.add<softmax_case>(int64_t(32), 32768 / s, 1.0f, false);
    l.add<get_rows_case>(f16, 32000 / s, int64_t(4096), 512 / s);
    l.add<argmax_case>(int64_t(16), 128256 / s);
    l.add<kv_append_case>(
        append(8, 128, 16, std::vector<int64_t>(16, 1000 / s), std::vector<int64_t>(16, 1), f32, false));
    l.add<kv_append_case>(append(8, 128, 16, {0}, {2048 / s}, f16, false));
    l.add<attn_decode_case>(decode(32, 8, 128, 16, std::vector<int64_t>(16 / (cpu ? 4 : 1), 4096 / s), 0));
    l.add<attn_decode_case>(decode(32, 8, 128, 16, {32768 / s}, 0));
    l.add<attn_prefill_case>(std::vector<int64_t>{1024 / s}, int64_t(32), int64_t(8), int64_t(128));
}

}  // namespace

std::vector<case_ptr> make_test_cases(case_set set) {
    list l;
    switch (set) {
        case case_set::full:
            full_list(l);
            break;
        case case_set::smoke:
            smoke_list(l);
            break;
        case case_set::perf:
            perf_list(l, false);
            break;
        case case_set::perf_cpu:
            perf_list(l, true);
            break;
    }
    add_quant_cases(l.cases, set);
    add_lowrank_cases(l.cases, set);
    return std::move(l.cases);
}

}  // namespace kvcomp::test
