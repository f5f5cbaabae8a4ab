// ZipCache's re-quantize-everything recompression: see kv_method_requant.h.
#include "engine/kv_method_requant.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "engine/index_tables.h"
#include "host/quant/saliency.h"

namespace kvcomp::engine {

namespace {

namespace hq = host::quant;

// One flushing request's part of the workspace and its plan.
struct job {
    int64_t base = 0;                  // first workspace row
    int64_t old_blocks = 0, rows = 0;  // rows = old_blocks + 1 (the window)
    std::vector<int32_t> valid;        // its tokens: row-local token numbers (row * G + j)
    std::vector<int32_t> key_pos;      // [rows * G]: 0 old, position in window, INT32_MAX padding
    std::vector<std::pair<int32_t, int32_t>> counts;  // new blocks' (n_hi, n_lo)
    std::vector<int32_t> slots;                       // old slots, then new ones
    int64_t new_slots = 0;
    int64_t scores_off = 0;  // its [H, rows * G] scores in the score buffer (floats)
    bool scored = false;
};

}  // namespace

std::vector<std::pair<int32_t, int32_t>> block_counts(const qblock_layout & q, double ratio, int64_t n) {
    std::vector<std::pair<int32_t, int32_t>> out;
    if (n <= 0) return out;
    const int64_t n_lo = hq::regular_count(n, ratio), n_hi = n - n_lo;
    const auto cdiv = [](int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; };
    const int64_t blocks = std::max(cdiv(n_hi, q.hi_tokens), cdiv(n_lo, q.lo_tokens));
    for (int64_t bi = 0; bi < blocks; ++bi)
        out.emplace_back(int32_t(std::clamp<int64_t>(n_hi - bi * q.hi_tokens, 0, q.hi_tokens)),
                         int32_t(std::clamp<int64_t>(n_lo - bi * q.lo_tokens, 0, q.lo_tokens)));
    return out;
}

void requantizer::flush(backend & be, const requant_state & st, const std::vector<requant_request> & reqs) {
    const qblock_layout & q = st.q;
    const int64_t H = st.shape.n_kv_heads, hd = st.shape.head_dim, nq = st.shape.n_q_heads;
    const int64_t G = q.block_tokens(), W = st.window, row_elems = H * G * hd;
    KVCOMP_CHECK_ARG(W == G, "zipcache recompress=all: the decode window (", W, ") must equal the block (", G,
                     ")");
    if (reqs.empty()) return;

    // Plan every request: its workspace rows, its tokens, its blocks after the flush.
    std::vector<job> jobs(reqs.size());
    int64_t total_rows = 0, total_scores = 0;
    // Per job: old slots, probe positions, key positions, the window's rows in the page pool.
    std::vector<std::vector<int32_t>> tables;
    for (size_t f = 0; f < reqs.size(); ++f) {
        const requant_request & r = reqs[f];
        job & j = jobs[f];
        const auto old = block_counts(q, st.ratio, r.win_start);
        if (old.size() != r.slots->size())
            KVCOMP_THROW(status::internal, "zipcache recompress=all: request holds ", r.slots->size(),
                         " blocks, its ", r.win_start, " quantized tokens need ", old.size());
        j.base = total_rows, j.old_blocks = int64_t(old.size()), j.rows = j.old_blocks + 1;
        total_rows += j.rows;
        j.key_pos.assign(size_t(j.rows * G), INT32_MAX);
        for (int64_t bi = 0; bi < j.old_blocks; ++bi)
            for (int32_t t = 0; t < old[size_t(bi)].first + old[size_t(bi)].second; ++t) {
                j.valid.push_back(int32_t(bi * G + t));
                j.key_pos[size_t(bi * G + t)] = 0;  // before every probe: every probe sees it
            }
        for (int64_t s = 0; s < W; ++s) {
            j.valid.push_back(int32_t(j.old_blocks * G + s));
            j.key_pos[size_t(j.old_blocks * G + s)] = r.win_start + int32_t(s);
        }
        j.counts = block_counts(q, st.ratio, r.win_start + W);
        if (j.counts.size() < old.size())
            KVCOMP_THROW(status::internal, "zipcache recompress=all: fewer blocks after a flush");
        j.slots = *r.slots;
        j.new_slots = int64_t(j.counts.size() - old.size());
        j.scored = st.saliency && !r.probe_pos->empty();
        if (j.scored) j.scores_off = total_scores, total_scores += H * j.rows * G;
        tables.push_back(*r.slots);
        tables.push_back(*r.probe_pos);
        tables.push_back(j.key_pos);
        tables.emplace_back();
        append_window_rows(tables.back(), st.win, *r.win_pages, W);
    }
    // New slots last, so a full pool fails before anything was written.
    for (size_t f = 0; f < reqs.size(); ++f) {
        const auto fresh = st.take_slots(jobs[f].new_slots);
        jobs[f].slots.insert(jobs[f].slots.end(), fresh.begin(), fresh.end());
    }

    const size_t ws_bytes = size_t(total_rows * row_elems) * 4;
    if (!ws_k_ || ws_k_->size() < ws_bytes) ws_k_ = be.alloc(ws_bytes), ws_v_ = be.alloc(ws_bytes);
    if (total_scores > 0 && (!scores_ || scores_->size() < size_t(total_scores) * 4))
        scores_ = be.alloc(size_t(total_scores) * 4);
    const std::vector<tensor> t = upload_index_tables(be, tables_, tables);
    const tensor ws_k = make_tensor(ws_k_.get(), dtype::f32, {total_rows, H, G, hd});
    const tensor ws_v = make_tensor(ws_v_.get(), dtype::f32, {total_rows, H, G, hd});
    const int64_t q_row = nq * hd;
    std::vector<float> sums(static_cast<size_t>(total_scores));

    for (int64_t layer = 0; layer < st.shape.n_layers; ++layer) {
        const tensor pool =
            make_tensor(st.pool[size_t(layer)].get(), dtype::u8, {st.n_slots * q.slot_bytes()});
        for (size_t f = 0; f < jobs.size(); ++f) {
            const job & j = jobs[f];
            const requant_request & r = reqs[f];
            const size_t at = size_t(j.base * row_elems) * 4;
            // 1. Old tokens, then the window (f16 -> f32) as the next row.
            if (j.old_blocks > 0) {
                kv_dequantize_params dp;
                dp.q = q, dp.n_blocks = j.old_blocks, dp.row_tokens = G, dp.n_slots = st.n_slots;
                be.run(make_op(dp, {pool, t[4 * f]},
                               {make_tensor(ws_k_.get(), dtype::f32, {j.old_blocks * row_elems}, at),
                                make_tensor(ws_v_.get(), dtype::f32, {j.old_blocks * row_elems}, at)}));
            }
            const size_t ws_at = at + size_t(j.old_blocks * row_elems) * 4;
            gather_window(be, st.win, *st.win_k[size_t(layer)], t[4 * f + 3], H * W,
                          make_tensor(ws_k_.get(), dtype::f32, {H * W, hd}, ws_at));
            gather_window(be, st.win, *st.win_v[size_t(layer)], t[4 * f + 3], H * W,
                          make_tensor(ws_v_.get(), dtype::f32, {H * W, hd}, ws_at));
            // 2. The window's probes over all of the request's tokens.
            if (!j.scored) continue;
            const int64_t np = int64_t(r.probe_pos->size()), slot0 = int64_t(r.row) * st.probe_cap;
            probe_scores_params ps;
            ps.n_probes = np, ps.n_keys = j.rows * G, ps.n_q_heads = nq, ps.n_kv_heads = H, ps.head_dim = hd;
            ps.row_tokens = G, ps.scale = float(1.0 / std::sqrt(double(hd))), ps.use_lse = true;
            be.run(make_op(
                ps,
                {make_tensor(st.probe_q[size_t(layer)].get(), dtype::f32, {np, nq, hd},
                             size_t(slot0 * q_row) * 4),
                 t[4 * f + 1], make_tensor(ws_k_.get(), dtype::f32, {j.rows, H, G, hd}, at), t[4 * f + 2],
                 make_tensor(st.probe_lse[size_t(layer)].get(), dtype::f32, {np, nq},
                             size_t(slot0 * nq) * 4)},
                {make_tensor(scores_.get(), dtype::f32, {H, j.rows * G}, size_t(j.scores_off) * 4)}));
        }
        if (total_scores > 0) be.download(*scores_, 0, sums.data(), sums.size() * 4);

        // 3. Rank each request's tokens per KV head and lay them out as blocks_for(N) new blocks.
        std::vector<int32_t> plan, rows;
        for (size_t f = 0; f < jobs.size(); ++f) {
            const job & j = jobs[f];
            const requant_request & r = reqs[f];
            const int64_t N = int64_t(j.valid.size()), n_lo = hq::regular_count(N, st.ratio), n_hi = N - n_lo;
            for (size_t bi = 0; bi < j.counts.size(); ++bi)
                plan.insert(plan.end(), {j.slots[bi], j.counts[bi].first, j.counts[bi].second});
            std::vector<int32_t> block_rows(j.counts.size() * size_t(H * G), 0);
            for (int64_t h = 0; h < H; ++h) {
                std::vector<int32_t> order;
                if (j.scored) {
                    std::vector<float> s(static_cast<size_t>(N));
                    std::vector<int32_t> kp(static_cast<size_t>(N));
                    const float * col = sums.data() + j.scores_off + h * j.rows * G;
                    for (int64_t i = 0; i < N; ++i)
                        s[size_t(i)] = col[j.valid[size_t(i)]],
                        kp[size_t(i)] = j.key_pos[size_t(j.valid[size_t(i)])];
                    order = hq::split_by_saliency(
                        hq::normalized_scores(s.data(), kp, *r.probe_pos, hq::nnz_mode::probe,
                                              r.win_start + int32_t(W) - 1),
                        st.ratio);
                } else {
                    order.resize(size_t(N));
                    for (int64_t i = 0; i < N; ++i) order[size_t(i)] = int32_t(i);
                }
                const int32_t base = int32_t(j.base * G);
                for (size_t bi = 0; bi < j.counts.size(); ++bi) {
                    const auto [hi, lo] = j.counts[bi];
                    int32_t * dst = block_rows.data() + (int64_t(bi) * H + h) * G;
                    for (int32_t x = 0; x < hi; ++x)
                        dst[x] = base + j.valid[size_t(order[size_t(int64_t(bi) * q.hi_tokens + x)])];
                    for (int32_t x = 0; x < lo; ++x)
                        dst[hi + x] =
                            base + j.valid[size_t(order[size_t(n_hi + int64_t(bi) * q.lo_tokens + x)])];
                }
            }
            rows.insert(rows.end(), block_rows.begin(), block_rows.end());
        }
        const auto pt = upload_index_tables(be, plan_, {plan, rows});
        kv_quantize_params kp;
        kp.q = q, kp.n_blocks = int64_t(plan.size() / 3), kp.n_src_tokens = total_rows * G, kp.row_tokens = G;
        kp.n_slots = st.n_slots;
        be.run(make_op(kp, {ws_k, ws_v, pt[0], pt[1]}, {pool}));
    }
    for (size_t f = 0; f < reqs.size(); ++f) *reqs[f].slots = jobs[f].slots;
}

}  // namespace kvcomp::engine
