// select_salient.cl: ZipCache's per-head salient-token split written as kv_quantize's rows table
// (contract in lib/core/op.h; the CPU reference is lib/cpu/select_salient.cpp, and the integers must
// equal it exactly).
//
// Kernel kvc_select_salient: one work-group of WG_SIZE work-items per (prompt b, KV head h);
// NDRange local (WG_SIZE, 1, 1), global (WG_SIZE, n_kv_heads, n_prompts).
//   1. Threshold: the n_hi-th largest 64-bit key (radix select, 8 passes of 8 bits, a 256-bin
//      histogram in local memory per pass). After it, thr is that key and take_eq the number of
//      tokens with key == thr that are salient (the earliest ones: ties go to the lower index).
//   2. Stable partition: chunks of WG_SIZE tokens in index order; two work-group prefix sums give
//      each token its rank among the tied tokens (eq_before) and among the salient ones
//      (hi_before), hence its position in o (salient ascending, then regular ascending), which
//      names its block and slot in the rows table.
//   3. The slots past a block's hi_b + lo_b tokens are written as zeros.
// Keys are recomputed from sums and count in every pass instead of being stored: a prompt may have
// 128K tokens, more than local memory holds, and the quotient is cheap next to the global reads.
//
// Exactness: the score is the fp64 quotient (double)sum / (double)count, correctly rounded in
// OpenCL C (0 ulp for fp64 division), as on the host. The fp32 sum is widened through its bits when
// it is subnormal, so a device that flushes fp32 subnormals still sees the value the host sees.
// This needs cl_khr_fp64 (lib/opencl/select_salient.cpp refuses devices without it) and build
// options without -cl-fast-relaxed-math / -cl-unsafe-math-optimizations ($KVCOMP_CL_BUILD_OPTIONS
// with those would give up the guarantee).
// A prompt whose table entry breaks the contract's rules is skipped (the CPU reference throws).
// Preamble defines: WG_SIZE.

#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#define KVC_BINS 256

inline double kvc_f32_to_f64(float f) {
    const uint u = as_uint(f);
    if ((u & 0x7f800000u) != 0) return (double)f;
    const double m = (double)(int)(u & 0x007fffffu) * 0x1.0p-149;  // zero or subnormal: exact
    return (u >> 31) ? -m : m;
}

// The order-preserving key of core/op.h: larger key = larger score, -0 == +0, NaN -> 0.
inline ulong kvc_score_key(float sum, int count) {
    const double s = count > 0 ? kvc_f32_to_f64(sum) / (double)count : 0.0;
    if (isnan(s)) return 0;
    const ulong bits = s == 0.0 ? 0 : as_ulong(s);
    return (bits >> 63) ? ~bits : bits | ((ulong)1 << 63);
}

inline int kvc_cdiv(int a, int b) {
    return b > 0 ? (a + b - 1) / b : 0;
}

// Exclusive prefix sum of v over the work-group (Hillis-Steele in scan[WG_SIZE]); *total = the
// sum over all work-items. Every work-item must call it.
inline int kvc_scan_exclusive(local int * scan, int v, int * total) {
    const int tid = get_local_id(0);
    scan[tid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < WG_SIZE; off <<= 1) {
        const int add = tid >= off ? scan[tid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        scan[tid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int inclusive = scan[tid];
    *total = scan[WG_SIZE - 1];
    barrier(CLK_LOCAL_MEM_FENCE);  // the next call overwrites scan
    return inclusive - v;
}

kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void kvc_select_salient(
    global const float * sums, ulong sums_off, global const int * count, ulong count_off,
    global const int * prompts, ulong prompts_off, global int * rows, ulong rows_off, int n_tokens, int n_kv_heads,
    int n_blocks, int hi_tokens, int lo_tokens) {
    local int hist[KVC_BINS];
    local int scan[WG_SIZE];
    const int tid = get_local_id(0), h = get_group_id(1);
    global const int * pr = prompts + prompts_off + 4 * (ulong)get_group_id(2);
    const int first_row = pr[0], n = pr[1], n_hi = pr[2], first_block = pr[3];
    const int n_lo = n - n_hi;
    const int nb = max(kvc_cdiv(n_hi, hi_tokens), kvc_cdiv(n_lo, lo_tokens));
    // Uniform over the work-group, so the early return cannot split a barrier.
    if (n <= 0 || first_row < 0 || first_row > n_tokens - n || n_hi < 0 || n_hi > n || (n_hi > 0 && hi_tokens <= 0) ||
        (n_lo > 0 && lo_tokens <= 0) || first_block < 0 || first_block > n_blocks - nb)
        return;
    global const float * s = sums + sums_off + (ulong)h * (ulong)n_tokens + first_row;
    global const int * cnt = count + count_off + first_row;
    global int * out = rows + rows_off;
    const int G = hi_tokens + lo_tokens;

    // 1. Threshold. n_hi == 0: no key exceeds or (with take_eq 0) joins thr, nothing is salient.
    ulong thr = ~(ulong)0;
    int take_eq = 0;
    if (n_hi > 0) {
        ulong prefix = 0, mask = 0;
        int k = n_hi;  // rank of the wanted key among the keys that match prefix on mask
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int d = tid; d < KVC_BINS; d += WG_SIZE) hist[d] = 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = tid; i < n; i += WG_SIZE) {
                const ulong key = kvc_score_key(s[i], cnt[i]);
                if ((key & mask) == prefix) atomic_inc(&hist[(int)(key >> shift) & (KVC_BINS - 1)]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            // Every work-item walks the bins from the top itself: the same answer everywhere, no
            // broadcast. The matching keys number at least k, so the walk stops at a bin.
            int d = KVC_BINS - 1;
            while (d > 0 && k > hist[d]) k -= hist[d--];
            prefix |= (ulong)d << shift;
            mask |= (ulong)(KVC_BINS - 1) << shift;
            barrier(CLK_LOCAL_MEM_FENCE);  // everyone has read hist before the next pass clears it
        }
        thr = prefix;
        take_eq = k;
    }

    // 2. Stable partition into o, scattered straight into the rows table.
    int eq_seen = 0, hi_seen = 0;
    for (int base = 0; base < n; base += WG_SIZE) {
        const int i = base + tid;
        const ulong key = i < n ? kvc_score_key(s[i], cnt[i]) : 0;
        const int gt = i < n && key > thr, eq = i < n && key == thr;
        int eq_total = 0, hi_total = 0;
        const int eq_before = eq_seen + kvc_scan_exclusive(scan, eq, &eq_total);
        const int sal = gt || (eq && eq_before < take_eq);
        const int hi_before = hi_seen + kvc_scan_exclusive(scan, sal, &hi_total);
        if (i < n) {
            int bi, x;
            if (sal) {
                bi = hi_before / hi_tokens;
                x = hi_before % hi_tokens;
            } else {
                const int r = i - hi_before;  // rank among the regular tokens
                bi = r / lo_tokens;
                x = clamp(n_hi - bi * hi_tokens, 0, hi_tokens) + r % lo_tokens;
            }
            out[((ulong)(first_block + bi) * n_kv_heads + h) * G + x] = first_row + i;
        }
        eq_seen += eq_total;
        hi_seen += hi_total;
    }

    // 3. Unused slots of the prompt's blocks.
    for (int e = tid; e < nb * G; e += WG_SIZE) {
        const int bi = e / G, x = e % G;
        const int used = clamp(n_hi - bi * hi_tokens, 0, hi_tokens) + clamp(n_lo - bi * lo_tokens, 0, lo_tokens);
        if (x >= used) out[((ulong)(first_block + bi) * n_kv_heads + h) * G + x] = 0;
    }
}
