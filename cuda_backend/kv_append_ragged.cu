// kv_append_ragged: write n_tokens new K'/V' tokens into ragged pages (each KV head its own width).
//
// Kernel: kv_append_ragged_kernel, one block of 128 threads per new token (block-stride loop when
// n_tokens > 65535). The threads stride over the token's k_total + v_total packed values; column j
// belongs to the head whose offset range holds it (binary search over the heads table, staged in
// shared memory; offsets are the prefix sums of the widths, so they are sorted). Consecutive
// columns of one head go to consecutive halves of its page run, so the stores of a head coalesce.
// Layout: core/op.h "Low-rank KV": k_new f32 [n_tokens, k_total], v_new f32 [n_tokens, v_total];
// token t goes to request batch_idx[t], position positions[t], page indices[indptr[b] + pos /
// page_size], slot pos % page_size; head c's value f to element
//   page * page_size * total + page_size * offset[c] + slot * width[c] + f.
// A token whose request, position or page falls outside the table is skipped, as in kv_append (the
// host validates tables). f32 -> f16 rounds to nearest even, bit-identical to the oracle.
// kv.bits == 4 (core/ragged_q4.h): kv_append_ragged_q4_kernel quantizes each (token, head) row.
#include <climits>

#include "common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 128;

struct append_args {
    const float * k_new;
    const float * v_new;
    const int32_t * batch_idx;
    const int32_t * positions;
    const int32_t * indptr;
    const int32_t * indices;
    const int32_t * heads;
    __half * k_pages;
    __half * v_pages;
    int64_t n_tokens, nnz, n_pages;
    int batch, n_kv_heads, page_size, k_total, v_total;
};

__global__ void __launch_bounds__(kThreads) kv_append_ragged_kernel(const append_args a) {
    extern __shared__ int32_t s_heads[];  // [n_kv_heads, 4]
    for (int i = threadIdx.x; i < 4 * a.n_kv_heads; i += blockDim.x) s_heads[i] = a.heads[i];
    __syncthreads();

    const int row = a.k_total + a.v_total;
    for (int64_t t = blockIdx.x; t < a.n_tokens; t += gridDim.x) {
        const int64_t b = a.batch_idx[t], pos = a.positions[t];
        if (b < 0 || b >= a.batch || pos < 0) continue;  // uniform across the block
        const int64_t entry = a.indptr[b] + pos / a.page_size;
        if (entry < 0 || entry >= a.indptr[b + 1] || entry >= a.nnz) continue;
        const int64_t page = a.indices[entry];
        if (page < 0 || page >= a.n_pages) continue;
        const int64_t slot = pos % a.page_size;
        for (int j = threadIdx.x; j < row; j += blockDim.x) {
            const bool is_v = j >= a.k_total;
            const int col = is_v ? j - a.k_total : j;
            const int wi = is_v ? 2 : 0;        // width column of the table; the offset is the next one
            int lo = 0, hi = a.n_kv_heads - 1;  // last head whose offset <= col
            while (lo < hi) {
                const int mid = (lo + hi + 1) / 2;
                if (s_heads[4 * mid + wi + 1] <= col)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            const int width = s_heads[4 * lo + wi], off = s_heads[4 * lo + wi + 1];
            const int f = col - off;
            if (f < 0 || f >= width) continue;  // a column no head names (inconsistent table)
            const int64_t total = is_v ? a.v_total : a.k_total;
            const int64_t dst = page * a.page_size * total + int64_t(a.page_size) * off + slot * width + f;
            if (is_v)
                a.v_pages[dst] = __float2half_rn(a.v_new[t * a.v_total + col]);
            else
                a.k_pages[dst] = __float2half_rn(a.k_new[t * a.k_total + col]);
        }
    }
}

// kv.bits == 4: thread r of block t quantizes row r of token t (r < n_kv_heads: K of head r, else
// V of head r - n_kv_heads) into its core/ragged_q4.h row: min/max, f16 min and step, codes one
// 32-bit word at a time (padding codes 0). Byte-identical to the oracle: IEEE division (nvcc's
// default -prec-div=true), rintf (half to even), no contraction possible in (x - min) / step,
// __float2half_rn after saturating at +-65504 (as ragged_q4_half).
struct append_q4_args {
    const float * k_new;
    const float * v_new;
    const int32_t * batch_idx;
    const int32_t * positions;
    const int32_t * indptr;
    const int32_t * indices;
    const int32_t * heads;
    uint8_t * k_pages;
    uint8_t * v_pages;
    int64_t n_tokens, nnz, n_pages;
    int batch, n_kv_heads, page_size, k_total, v_total, k_row_bytes, v_row_bytes;
};

__device__ __forceinline__ __half q4_half(float x) {
    if (x > 65504.0f) x = 65504.0f;
    if (x < -65504.0f) x = -65504.0f;
    return __float2half_rn(x);  // NaN passes
}

__global__ void kv_append_ragged_q4_kernel(const append_q4_args a) {
    const int r = threadIdx.x;
    for (int64_t t = blockIdx.x; t < a.n_tokens; t += gridDim.x) {
        if (r >= 2 * a.n_kv_heads) return;
        const int64_t b = a.batch_idx[t], pos = a.positions[t];
        if (b < 0 || b >= a.batch || pos < 0) continue;
        const int64_t entry = a.indptr[b] + pos / a.page_size;
        if (entry < 0 || entry >= a.indptr[b + 1] || entry >= a.nnz) continue;
        const int64_t page = a.indices[entry];
        if (page < 0 || page >= a.n_pages) continue;
        const int which = r >= a.n_kv_heads ? 1 : 0, c = r - which * a.n_kv_heads;
        int row_off = 0;
        for (int i = 0; i < c; ++i) row_off += 4 + 4 * ((a.heads[4 * i + 2 * which] + 7) / 8);
        const int w = a.heads[4 * c + 2 * which], eo = a.heads[4 * c + 2 * which + 1];
        const int rb = 4 + 4 * ((w + 7) / 8), total = which ? a.v_row_bytes : a.k_row_bytes;
        const float * x = which ? a.v_new + t * a.v_total + eo : a.k_new + t * a.k_total + eo;
        uint8_t * row = (which ? a.v_pages : a.k_pages) + page * a.page_size * total +
                        int64_t(a.page_size) * row_off + (pos % a.page_size) * rb;
        float mn = x[0], mx = x[0];
        for (int i = 1; i < w; ++i) {
            mn = fminf(mn, x[i]);
            mx = fmaxf(mx, x[i]);
        }
        const __half hmin = q4_half(mn), hstep = q4_half(__fdiv_rn(mx - mn, 15.0f));
        const float fmn = __half2float(hmin), fst = __half2float(hstep);
        reinterpret_cast<__half *>(row)[0] = hmin;
        reinterpret_cast<__half *>(row)[1] = hstep;
        uint32_t * words = reinterpret_cast<uint32_t *>(row + 4);
        for (int i0 = 0; i0 < w; i0 += 8) {
            uint32_t word = 0;
            for (int i = i0; i < min(i0 + 8, w); ++i) {
                const float q = fst == 0.0f
                                    ? 0.0f
                                    : fminf(fmaxf(rintf(__fdiv_rn(__fsub_rn(x[i], fmn), fst)), 0.0f), 15.0f);
                word |= uint32_t(q) << (4 * (i - i0));
            }
            words[i0 / 8] = word;
        }
    }
}

}  // namespace

support supports_kv_append_ragged(const op_desc & op) {
    const auto & p = op.get<kv_append_ragged_params>();
    if (p.kv.bits == 4 && (op.dst[0].offset % 4 != 0 || op.dst[1].offset % 4 != 0))
        return support::no("q4 ragged pages must start on a 4-byte boundary");
    if (p.kv.bits == 4 && 2 * p.kv.n_kv_heads > 1024)
        return support::no("q4 ragged pages: more than 512 KV heads (one thread per row of a token)");
    if (p.kv.n_kv_heads * 4 * int64_t(sizeof(int32_t)) > 48 * 1024)
        return support::no("heads table larger than 48 KiB of shared memory");
    if (p.kv.k_total + p.kv.v_total > INT_MAX || p.batch > INT_MAX || p.kv.page_size > INT_MAX)
        return support::no("k_total + v_total, batch and page_size must fit in 32 bits");
    return support::yes();
}

void run_kv_append_ragged(context & ctx, const op_desc & op) {
    const auto & p = op.get<kv_append_ragged_params>();
    if (p.n_tokens == 0) return;
    if (p.kv.bits == 4) {
        append_q4_args a{};
        a.k_new = dev_ptr<const float>(op.src[0]);
        a.v_new = dev_ptr<const float>(op.src[1]);
        a.batch_idx = dev_ptr<const int32_t>(op.src[2]);
        a.positions = dev_ptr<const int32_t>(op.src[3]);
        a.indptr = dev_ptr<const int32_t>(op.src[4]);
        a.indices = dev_ptr<const int32_t>(op.src[5]);
        a.heads = dev_ptr<const int32_t>(op.src[6]);
        a.k_pages = dev_ptr<uint8_t>(op.dst[0]);
        a.v_pages = dev_ptr<uint8_t>(op.dst[1]);
        a.n_tokens = p.n_tokens, a.nnz = p.nnz_pages, a.n_pages = p.kv.n_pages;
        a.batch = int(p.batch), a.n_kv_heads = int(p.kv.n_kv_heads), a.page_size = int(p.kv.page_size);
        a.k_total = int(p.kv.k_total), a.v_total = int(p.kv.v_total);
        a.k_row_bytes = int(p.kv.k_row_bytes), a.v_row_bytes = int(p.kv.v_row_bytes);
        // One thread per (K or V) row of a head, rounded up to whole warps.
        const unsigned threads = unsigned((2 * p.kv.n_kv_heads + 31) / 32 * 32);
        const unsigned grid = unsigned(std::min<int64_t>(p.n_tokens, 65535));
        kv_append_ragged_q4_kernel<<<grid, threads, 0, ctx.stream>>>(a);
        KVCOMP_CUDA_CHECK_LAUNCH();
        return;
    }
    append_args a{};
    a.k_new = dev_ptr<const float>(op.src[0]);
    a.v_new = dev_ptr<const float>(op.src[1]);
    a.batch_idx = dev_ptr<const int32_t>(op.src[2]);
    a.positions = dev_ptr<const int32_t>(op.src[3]);
    a.indptr = dev_ptr<const int32_t>(op.src[4]);
    a.indices = dev_ptr<const int32_t>(op.src[5]);
    a.heads = dev_ptr<const int32_t>(op.src[6]);
    a.k_pages = dev_ptr<__half>(op.dst[0]);
    a.v_pages = dev_ptr<__half>(op.dst[1]);
    a.n_tokens = p.n_tokens;
    a.nnz = p.nnz_pages;
    a.n_pages = p.kv.n_pages;
    a.batch = int(p.batch);
    a.n_kv_heads = int(p.kv.n_kv_heads);
    a.page_size = int(p.kv.page_size);
    a.k_total = int(p.kv.k_total);
    a.v_total = int(p.kv.v_total);
    const unsigned grid = unsigned(std::min<int64_t>(p.n_tokens, 65535));
    const size_t smem = size_t(p.kv.n_kv_heads) * 4 * sizeof(int32_t);
    kv_append_ragged_kernel<<<grid, kThreads, smem, ctx.stream>>>(a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
