// Public API: the paged-attention self-check run by the README's main job. It exercises the
// whole paged path on one backend: host page tables -> kv_append into fp16 pages -> split-KV
// decode attention, and compares with the CPU reference fed the same bytes.
#include <algorithm>
#include <random>

#include "core/registry.h"
#include "host/paged/page_pool.h"
#include "kvcomp/kvcomp.h"

namespace kvcomp {

namespace {

struct paged_case {
    int64_t n_q_heads = 32, n_kv_heads = 8, head_dim = 128;
    int32_t page_size = 16;
    std::vector<int64_t> lengths{1000, 17, 257};
};

// Runs append + decode on one backend and returns the attention output.
std::vector<float> run_paged(backend & be, const paged_case & c, const host::paged_batch & pb,
                             const host::append_plan & plan, int32_t n_pages, const std::vector<float> & k_new,
                             const std::vector<float> & v_new, const std::vector<float> & q, double * ms) {
    const int64_t n_tok = int64_t(plan.positions.size());
    const int64_t batch = int64_t(c.lengths.size());
    const kv_layout kv{n_pages, c.n_kv_heads, c.page_size, c.head_dim};
    const size_t pool_bytes = size_t(n_pages * c.n_kv_heads * c.page_size * c.head_dim) * 2;
    auto kb = upload_vector(be, k_new), vb = upload_vector(be, v_new), qb = upload_vector(be, q);
    auto bidx = upload_vector(be, plan.batch_idx), pos = upload_vector(be, plan.positions);
    auto indptr = upload_vector(be, pb.indptr), indices = upload_vector(be, pb.indices);
    auto last = upload_vector(be, pb.last_page_len);
    auto kp = be.alloc(pool_bytes), vp = be.alloc(pool_bytes);
    auto out = be.alloc(q.size() * sizeof(float));
    const dtype f32 = dtype::f32, f16 = dtype::f16, i32 = dtype::i32;
    const tensor kpool = make_tensor(kp.get(), f16, {n_pages, c.n_kv_heads, c.page_size, c.head_dim});
    const tensor vpool = make_tensor(vp.get(), f16, {n_pages, c.n_kv_heads, c.page_size, c.head_dim});
    const int64_t nnz = int64_t(pb.indices.size());

    kv_append_params ap{kv, n_tok, batch, nnz};
    be.run(make_op(ap,
                   {make_tensor(kb.get(), f32, {n_tok, c.n_kv_heads, c.head_dim}),
                    make_tensor(vb.get(), f32, {n_tok, c.n_kv_heads, c.head_dim}), make_tensor(bidx.get(), i32, {n_tok}),
                    make_tensor(pos.get(), i32, {n_tok}), make_tensor(indptr.get(), i32, {batch + 1}),
                    make_tensor(indices.get(), i32, {nnz})},
                   {kpool, vpool}));

    attn_decode_params dp;
    dp.kv = kv, dp.batch = batch, dp.n_q_heads = c.n_q_heads, dp.nnz_pages = nnz, dp.max_seq_len = pb.max_seq_len;
    dp.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    const op_desc attn = make_op(dp,
                                 {make_tensor(qb.get(), f32, {batch, c.n_q_heads, c.head_dim}), kpool, vpool,
                                  make_tensor(indptr.get(), i32, {batch + 1}), make_tensor(indices.get(), i32, {nnz}),
                                  make_tensor(last.get(), i32, {batch})},
                                 {make_tensor(out.get(), f32, {batch, c.n_q_heads, c.head_dim})});
    std::vector<double> times;
    for (int rep = 0; rep < 5; ++rep) {
        be.timer_start();
        be.run(attn);
        times.push_back(be.timer_stop_ms());
    }
    std::sort(times.begin(), times.end());
    *ms = times[times.size() / 2];
    std::vector<float> result(q.size());
    be.download(*out, 0, result.data(), result.size() * sizeof(float));
    return result;
}

}  // namespace

kvcomp_status selfcheck(const std::string & backend_name, selfcheck_report & report) {
    KVCOMP_API_BEGIN
    auto be = create_backend(backend_name);
    auto ref = create_backend("cpu");
    const paged_case c;

    // Page tables on the host, exactly as the engine will build them.
    int64_t pages_needed = 0;
    for (int64_t len : c.lengths) pages_needed += (len + c.page_size - 1) / c.page_size;
    const int32_t n_pages = int32_t(pages_needed + 5);  // a few spare pages stay untouched
    host::page_pool pool(n_pages);
    host::page_table table(pool, c.page_size);
    std::vector<int32_t> seqs;
    for (int64_t len : c.lengths) {
        seqs.push_back(table.create_sequence());
        KVCOMP_ASSERT(table.extend(seqs.back(), len));
    }
    const host::paged_batch pb = table.batch(seqs);
    const host::append_plan plan = table.plan_append(seqs, c.lengths);

    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto randn = [&](size_t n) {
        std::vector<float> v(n);
        for (float & x : v) x = nd(rng);
        return v;
    };
    const size_t tok_elems = plan.positions.size() * size_t(c.n_kv_heads * c.head_dim);
    const auto k_new = randn(tok_elems), v_new = randn(tok_elems);
    const auto q = randn(c.lengths.size() * size_t(c.n_q_heads * c.head_dim));

    double ms = 0.0, ref_ms = 0.0;
    const auto out = run_paged(*be, c, pb, plan, n_pages, k_new, v_new, q, &ms);
    const auto expect = run_paged(*ref, c, pb, plan, n_pages, k_new, v_new, q, &ref_ms);

    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
        const double d = double(out[i]) - double(expect[i]);
        num += d * d;
        den += double(expect[i]) * double(expect[i]);
    }
    report.backend = be->name();
    report.device_name = be->info().device_name;
    report.shape = concat("attn_decode(batch=", c.lengths.size(), ",q_heads=", c.n_q_heads, ",kv_heads=", c.n_kv_heads,
                          ",hd=", c.head_dim, ",page=", c.page_size, ",lengths=1000/17/257)");
    report.nmse = den > 0 ? num / den : num;
    report.threshold = 1e-6;  // fp32 accumulation vs the fp64 oracle on fp16 inputs lands near 1e-12
    report.backend_ms = ms;
    report.passed = report.nmse <= report.threshold && std::isfinite(report.nmse);
    KVCOMP_API_END
}

}  // namespace kvcomp
