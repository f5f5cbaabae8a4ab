// gemm: f32 x f32 -> f32 through CLBlast; fp16 and mixed operands through cl_kernels/gemm.cl
// (tiled kernel); and, for every dtype combination, a GEMV-style kernel when m <= 16 with
// trans_b (decode-time products with a weight matrix [n, k]: memory bound on the weights, where
// CLBlast's padded tiles waste most of their work). On NVIDIA's driver, products with f16 weights
// [n, k] run on the tensor cores (kvc_gemv_mma for 2..16 rows, kvc_gemm_mma for more).
#include <clblast.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

std::string clblast_status_name(clblast::StatusCode s) {
    using sc = clblast::StatusCode;
    const char * n = "CLBlast error";
    switch (s) {
#define KVCOMP_CLBLAST_NAME(e) \
    case sc::e: n = #e; break;
        // clang-format off
        KVCOMP_CLBLAST_NAME(kSuccess) KVCOMP_CLBLAST_NAME(kNotImplemented) KVCOMP_CLBLAST_NAME(kInvalidMatrixA)
        KVCOMP_CLBLAST_NAME(kInvalidMatrixB) KVCOMP_CLBLAST_NAME(kInvalidMatrixC) KVCOMP_CLBLAST_NAME(kInvalidDimension)
        KVCOMP_CLBLAST_NAME(kInvalidLeadDimA) KVCOMP_CLBLAST_NAME(kInvalidLeadDimB) KVCOMP_CLBLAST_NAME(kInvalidLeadDimC)
        KVCOMP_CLBLAST_NAME(kInsufficientMemoryA) KVCOMP_CLBLAST_NAME(kInsufficientMemoryB)
        KVCOMP_CLBLAST_NAME(kInsufficientMemoryC) KVCOMP_CLBLAST_NAME(kInsufficientMemoryTemp)
        KVCOMP_CLBLAST_NAME(kInvalidBatchCount) KVCOMP_CLBLAST_NAME(kInvalidLocalMemUsage)
        KVCOMP_CLBLAST_NAME(kDatabaseError) KVCOMP_CLBLAST_NAME(kUnknownError) KVCOMP_CLBLAST_NAME(kUnexpectedError)
        KVCOMP_CLBLAST_NAME(kOpenCLBuildProgramFailure) KVCOMP_CLBLAST_NAME(kOpenCLOutOfResources)
        KVCOMP_CLBLAST_NAME(kTempBufferAllocFailure) KVCOMP_CLBLAST_NAME(kNoHalfPrecision)
        // clang-format on
#undef KVCOMP_CLBLAST_NAME
        default: break;
    }
    return std::string("clblast::StatusCode::") + n + " (" + std::to_string(int(s)) + ")";
}

}  // namespace

}  // namespace kvcomp::cl

// Checks a CLBlast call; throws blas_error with the statement, location and status name.
#define KVCOMP_CLBLAST_CHECK(expr)                                                           \
    KVCOMP_CHECK_GEN(expr, clblast::StatusCode::kSuccess, ::kvcomp::cl::clblast_status_name, \
                     ::kvcomp::status::blas_error)

namespace kvcomp::cl {

namespace {

// Up to this many rows of A the GEMV-style kernel (one pass over B, all rows at once) beats the
// tiled kernel, whose 64-row tiles would be mostly padding (decode batches are 1..16 tokens).
constexpr int64_t kMaxGemvRows = 16;

void run_clblast(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    const tensor & a = op.src[0];
    const tensor & b = op.src[1];
    const tensor & c = op.dst[0];
    const auto layout = clblast::Layout::kRowMajor;
    const auto ta = clblast::Transpose::kNo;
    const auto tb = p.trans_b ? clblast::Transpose::kYes : clblast::Transpose::kNo;
    const size_t m = size_t(p.m), n = size_t(p.n), k = size_t(p.k);
    const size_t lda = k, ldb = p.trans_b ? k : n, ldc = n;
    cl_command_queue queue = be.queue();
    // Checked on PoCL with CLBlast 1.5.3 (direct and indirect GEMM paths): beta = 0 never reads C
    // (NaN in C does not leak) and zero strides broadcast correctly in GemmStridedBatched.
    if (p.batch > 1) {
        cl_event * ev = be.event_slot();
        const auto st = clblast::GemmStridedBatched<float>(
            layout, ta, tb, m, n, k, p.alpha, mem_of(a), size_t(elem_off(a)), lda, size_t(p.stride_a),
            mem_of(b), size_t(elem_off(b)), ldb, size_t(p.stride_b), p.beta, mem_of(c), size_t(elem_off(c)),
            ldc, size_t(p.stride_c), size_t(p.batch), &queue, ev);
        if (st != clblast::StatusCode::kSuccess) be.cancel_event_slot(ev);
        KVCOMP_CLBLAST_CHECK(st);
        return;
    }
    cl_event * ev = be.event_slot();
    const auto st = clblast::Gemm<float>(layout, ta, tb, m, n, k, p.alpha, mem_of(a), size_t(elem_off(a)),
                                         lda, mem_of(b), size_t(elem_off(b)), ldb, p.beta, mem_of(c),
                                         size_t(elem_off(c)), ldc, &queue, ev);
    if (st != clblast::StatusCode::kSuccess) be.cancel_event_slot(ev);
    KVCOMP_CLBLAST_CHECK(st);
}

void add_dtypes(defines & defs, const op_desc & op) {
    defs.add("A_DT", dtype_code(op.src[0].type))
        .add("B_DT", dtype_code(op.src[1].type))
        .add("C_DT", dtype_code(op.dst[0].type))
        .add("TRANS_B", op.get<gemm_params>().trans_b ? 1 : 0);
}

void set_gemm_args(cl_kernel k, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    set_args(k, arg(op.src[0]), cl_ulong(p.stride_a), arg(op.src[1]), cl_ulong(p.stride_b), arg(op.dst[0]),
             cl_ulong(p.stride_c), to_int(p.m), to_int(p.n), to_int(p.k), cl_float(p.alpha),
             cl_float(p.beta));
}

void run_gemv(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    // Aligned vector loads need every row of the operand to start on a 4-element boundary.
    auto rows_aligned = [&](const tensor & t, int64_t stride) {
        return elem_off(t) % 4 == 0 && p.k % 4 == 0 && stride % 4 == 0;
    };
    const size_t lanes = 32;
    const size_t cols = std::max<size_t>(1, std::min<size_t>(8, be.dev().max_work_group_size / lanes));
    defines defs;
    add_dtypes(defs, op);
    defs.add("M_ROWS", p.m)
        .add("LANES", lanes)
        .add("COLS", cols)
        .add("VEC_A", rows_aligned(op.src[0], p.stride_a) ? 1 : 0)
        .add("VEC_B", rows_aligned(op.src[1], p.stride_b) ? 1 : 0);
    cl_kernel k = be.kernel("gemm.cl", defs, "kvc_gemv_small_m");
    set_gemm_args(k, op);
    const size_t local[3] = {lanes, cols, 1};
    const size_t global[3] = {lanes, size_t(p.n), size_t(p.batch)};
    be.launch(k, 3, global, local);
}

// Every row of A and B starts on a 16-byte boundary (with K a multiple of 8): the tensor-core kernels
// read 16 bytes of a row at a time (an f32 A: 4 elements, an f16 A and B: 8).
bool rows_16_byte_aligned(const op_desc & op, const gemm_params & p) {
    const int64_t a_elems = op.src[0].type == dtype::f16 ? 8 : 4;
    return p.k % 8 == 0 && elem_off(op.src[1]) % 8 == 0 && p.stride_b % 8 == 0 &&
           elem_off(op.src[0]) % a_elems == 0 && p.stride_a % a_elems == 0;
}

// kvc_gemv_mma (gemm.cl) where it applies: NVIDIA's driver with working inline PTX mma.sync, 2..16
// rows (one row stays on kvc_gemv_small_m, which reads the weights at 1.8-1.9 TB/s on an H100; the mma
// kernel was not timed at one row), f16 weights [N, K] with K % 256 == 0 (a quarter of K per warp in
// 32-channel chunks) and 16-byte aligned rows of A and B.
bool run_gemv_mma(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    if (!p.trans_b || p.m < 2 || p.m > kMaxGemvRows || op.src[1].type != dtype::f16 || p.k % 256 != 0 ||
        !rows_16_byte_aligned(op, p))
        return false;
    const char * kw = be.tensor_core_asm();
    if (!kw) return false;
    // NT tiles of 8 columns per work-group: A's fragments serve NT tiles, but there must be a
    // work-group for every compute unit (N = 4096 at NT = 4 has 128).
    const int64_t cus = std::max(1, be.info().compute_units);
    int64_t nt = 4;
    while (nt > 1 && (p.n + 8 * nt - 1) / (8 * nt) < cus) nt /= 2;
    defines defs;
    add_dtypes(defs, op);
    const int64_t u = p.k % 512 == 0 ? 4 : 2;  // chunks in flight per warp: its quarter of K in steps of 32 u
    defs.add("GEMV_MMA", 1).add("NT", nt).add("U", u).add("KVC_ASM", kw);
    cl_kernel k = be.kernel("gemm.cl", defs, "kvc_gemv_mma");
    set_gemm_args(k, op);
    const size_t per_group = size_t(8 * nt);
    const size_t local[3] = {32, 4, 1};
    const size_t global[3] = {32, (size_t(p.n) + per_group - 1) / per_group * 4, size_t(p.batch)};
    be.launch(k, 3, global, local);
    return true;
}

// kvc_gemm_mma's shape: warps_m x warps_n warps of mt x nt mma tiles, stages of 32 ks channels.
struct gemm_mma_tile {
    int64_t warps_m, warps_n, mt, nt, ks;
    int64_t bm() const { return 16 * mt * warps_m; }
    int64_t bn() const { return 8 * nt * warps_n; }
    int64_t threads() const { return 32 * warps_m * warps_n; }
};

// The default tile, or KVCOMP_CL_GEMM_TILE=warps_m,warps_n,mt,nt,ks (for timing other shapes; each
// thread must stage whole 16-byte chunks of A and B: threads divide 4 ks bm (an f16 A; an f32 A needs
// twice as many loads) and 4 ks bn).
gemm_mma_tile pick_gemm_mma_tile(const gemm_params & p) {
    // Visit 101 (H200, f32 A, docs/kernel_notes.md): 128 x 128 tiles of 32 x 64 per warp were fastest at
    // 4096 rows (1.04 ms for 4096 x 4096 x 4096, 1.09 with stages of 64 channels), and stages of 64 at
    // 512 rows (0.185 ms against 0.234).
    gemm_mma_tile t = p.m >= 128 ? gemm_mma_tile{4, 2, 2, 8, 2} : gemm_mma_tile{2, 2, 2, 4, 2};
    if (const char * env = std::getenv("KVCOMP_CL_GEMM_TILE"); env && *env) {
        int64_t v[5];
        char tail = 0;
        const int got = std::sscanf(env, "%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%" SCNd64 "%c", &v[0],
                                    &v[1], &v[2], &v[3], &v[4], &tail);
        t = {v[0], v[1], v[2], v[3], v[4]};
        KVCOMP_CHECK_ARG(got == 5 && t.warps_m > 0 && t.warps_n > 0 && t.mt > 0 && t.nt > 0 &&
                             (t.ks == 1 || t.ks == 2 || t.ks == 4) && t.threads() <= 1024 &&
                             (4 * t.ks * t.bm()) % t.threads() == 0 && (4 * t.ks * t.bn()) % t.threads() == 0,
                         "KVCOMP_CL_GEMM_TILE='", env,
                         "': expected warps_m,warps_n,mt,nt,ks with ks in {1, 2, 4}, at most 32 warps, and the "
                         "threads dividing 4 ks bm and 4 ks bn (bm = 16 mt warps_m, bn = 8 nt warps_n)");
    }
    if (p.k % (32 * t.ks) != 0) t.ks = 1;
    return t;
}

// kvc_gemm_mma (gemm.cl) where it applies: NVIDIA's driver with working inline PTX mma.sync, more
// than 16 rows (the prefill's weight products; fewer go to the GEMVs above), f16 weights [N, K] with
// K % 32 == 0 and 16-byte aligned rows of A and B. Elsewhere the tiled kernel runs on the CUDA cores
// (6.3x slower with an f32 A, 11x with an f16 A at 4096 x 4096 x 4096 on an H200: docs/RESULTS.md).
bool run_gemm_mma(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    if (!p.trans_b || p.m <= kMaxGemvRows || op.src[1].type != dtype::f16 || p.k % 32 != 0 ||
        !rows_16_byte_aligned(op, p))
        return false;
    const char * kw = be.tensor_core_asm();
    if (!kw) return false;
    const gemm_mma_tile t = pick_gemm_mma_tile(p);
    defines defs;
    add_dtypes(defs, op);
    defs.add("GEMM_MMA", 1)
        .add("GM_WARPS_M", t.warps_m)
        .add("GM_WARPS_N", t.warps_n)
        .add("GM_MT", t.mt)
        .add("GM_NT", t.nt)
        .add("GM_KS", t.ks)
        .add("KVC_ASM", kw);
    cl_kernel k = be.kernel("gemm.cl", defs, "kvc_gemm_mma");
    set_gemm_args(k, op);
    const size_t warps = size_t(t.warps_m * t.warps_n);
    const size_t local[3] = {32, warps, 1};
    const size_t global[3] = {size_t((p.n + t.bn() - 1) / t.bn()) * 32, size_t((p.m + t.bm() - 1) / t.bm()) * warps,
                              size_t(p.batch)};
    be.launch(k, 3, global, local);
    return true;
}

void run_tiled(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    // 64x64 tiles with 4x4 per work-item (256 work-items); 32x32 where the device caps work-groups.
    const size_t tile = be.dev().max_work_group_size >= 256 ? 64 : 32;
    const size_t tk = 16, wm = 4, wn = 4;
    defines defs;
    add_dtypes(defs, op);
    defs.add("TM", tile).add("TN", tile).add("TK", tk).add("WM", wm).add("WN", wn);
    cl_kernel k = be.kernel("gemm.cl", defs, "kvc_gemm_tiled");
    set_gemm_args(k, op);
    const size_t local[3] = {tile / wn, tile / wm, 1};
    const size_t global[3] = {round_up(size_t(p.n), tile) / wn, round_up(size_t(p.m), tile) / wm,
                              size_t(p.batch)};
    be.launch(k, 3, global, local);
}

}  // namespace

void run_gemm(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    const bool all_f32 =
        op.src[0].type == dtype::f32 && op.src[1].type == dtype::f32 && op.dst[0].type == dtype::f32;
    if (run_gemv_mma(be, op) || run_gemm_mma(be, op)) return;
    if (p.trans_b && p.m <= kMaxGemvRows) return run_gemv(be, op);
    if (all_f32) return run_clblast(be, op);
    run_tiled(be, op);
}

}  // namespace kvcomp::cl
