// Heads-table, page-table and decode-schedule checks of the CPU reference (see ragged_common.h).
#include "cpu/ragged_common.h"

#include "core/ragged_q4.h"

namespace kvcomp::cpu {

std::vector<ragged_head> read_ragged_heads(const tensor & heads, int64_t n_kv_heads, int64_t k_total,
                                           int64_t v_total, int64_t max_width, const std::string & what) {
    const int32_t * t = ptr<const int32_t>(heads);
    std::vector<ragged_head> out;
    out.reserve(size_t(n_kv_heads));
    int64_t k_off = 0, v_off = 0;
    for (int64_t c = 0; c < n_kv_heads; ++c) {
        const ragged_head h{t[c * 4], t[c * 4 + 1], t[c * 4 + 2], t[c * 4 + 3]};
        KVCOMP_CHECK_ARG(h.k_width >= 1 && h.k_width <= max_width && h.v_width >= 1 && h.v_width <= max_width,
                         what, ": KV head ", c, " has k_width ", h.k_width, ", v_width ", h.v_width,
                         " (must be in [1, max_width = ", max_width, "])");
        KVCOMP_CHECK_ARG(h.k_offset == k_off && h.v_offset == v_off, what, ": KV head ", c, " has offsets (",
                         h.k_offset, ", ", h.v_offset, "), expected the prefix sums (", k_off, ", ", v_off,
                         ")");
        k_off += h.k_width;
        v_off += h.v_width;
        out.push_back(h);
    }
    KVCOMP_CHECK_ARG(k_off == k_total && v_off == v_total, what, ": the widths sum to (", k_off, ", ", v_off,
                     "), expected k_total ", k_total, " and v_total ", v_total);
    return out;
}

std::vector<int64_t> ragged_q4_offsets(const std::vector<ragged_head> & heads, const ragged_layout & l,
                                       bool v, const std::string & what) {
    std::vector<int64_t> off;
    int64_t at = 0;
    for (const ragged_head & h : heads) {
        off.push_back(at);
        at += ragged_q4_row_bytes(v ? h.v_width : h.k_width);
    }
    const int64_t want = v ? l.v_row_bytes : l.k_row_bytes;
    KVCOMP_CHECK_ARG(at == want, what, ": the ", v ? "V" : "K", " widths take ", at,
                     " q4 bytes per token (core/ragged_q4.h), the layout says ", want);
    return off;
}

void check_decode_schedule(const int32_t * schedule, const int32_t * merge, int64_t n_tasks, int64_t batch,
                           int64_t n_kv_heads, const std::vector<int64_t> & seq_lens,
                           const std::string & what) {
    const int64_t n_lists = batch * n_kv_heads;
    const int32_t * tasks = merge + n_lists + 1;
    KVCOMP_CHECK_ARG(merge[0] == 0 && merge[n_lists] == n_tasks, what,
                     ": merge pointers must run from 0 to n_tasks (", n_tasks, "), got ", merge[0], "..",
                     merge[n_lists]);
    std::vector<char> listed(static_cast<size_t>(n_tasks), 0);
    for (int64_t b = 0; b < batch; ++b) {
        for (int64_t c = 0; c < n_kv_heads; ++c) {
            const int64_t i0 = merge[b * n_kv_heads + c], i1 = merge[b * n_kv_heads + c + 1];
            KVCOMP_CHECK_ARG(i0 <= i1, what, ": merge pointers decrease at (request ", b, ", KV head ", c,
                             ")");
            int64_t covered = 0;  // tokens [0, covered) of (b, c) seen so far
            for (int64_t i = i0; i < i1; ++i) {
                const int64_t t = tasks[i];
                KVCOMP_CHECK_ARG(t >= 0 && t < n_tasks, what, ": merge entry ", i, " names task ", t,
                                 " (n_tasks = ", n_tasks, ")");
                KVCOMP_CHECK_ARG(!listed[size_t(t)], what, ": task ", t,
                                 " is listed twice in the merge table");
                listed[size_t(t)] = 1;
                const int32_t * row = schedule + t * 4;
                KVCOMP_CHECK_ARG(row[0] == b && row[1] == c, what, ": task ", t, " is (request ", row[0],
                                 ", KV head ", row[1], ") but is merged into (", b, ", ", c, ")");
                KVCOMP_CHECK_ARG(row[2] == covered && row[3] > row[2], what, ": task ", t, " covers [",
                                 row[2], ", ", row[3], ") of (request ", b, ", KV head ", c,
                                 "), expected a non-empty range from ", covered);
                covered = row[3];
            }
            KVCOMP_CHECK_ARG(covered == seq_lens[size_t(b)], what, ": the tasks of (request ", b,
                             ", KV head ", c, ") cover [0, ", covered, "), the request has ",
                             seq_lens[size_t(b)], " tokens");
        }
    }
}

std::vector<int64_t> ragged_seq_lens(const int32_t * indptr, const int32_t * last_page_len, int64_t batch,
                                     int64_t page_size, int64_t nnz_pages, int64_t max_seq_len,
                                     const std::string & what) {
    std::vector<int64_t> lens(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
        KVCOMP_CHECK_ARG(indptr[b] >= 0 && indptr[b] <= indptr[b + 1] && indptr[b + 1] <= nnz_pages, what,
                         ": indptr of request ", b, " is [", indptr[b], ", ", indptr[b + 1],
                         ") (nnz_pages = ", nnz_pages, ")");
        KVCOMP_CHECK_ARG(
            indptr[b] == indptr[b + 1] || (last_page_len[b] >= 1 && last_page_len[b] <= page_size), what,
            ": last_page_len of request ", b, " is ", last_page_len[b], " (page_size ", page_size, ")");
        const int64_t n = paged_seq_len(indptr, last_page_len, b, page_size);
        KVCOMP_CHECK_ARG(n >= 0 && n <= max_seq_len, what, ": request ", b, " has ", n,
                         " tokens, outside [0, max_seq_len]");
        lens[size_t(b)] = n;
    }
    return lens;
}

int64_t ragged_page_of(const int32_t * indptr, const int32_t * indices, int64_t b, int64_t j,
                       int64_t page_size, int64_t n_pages, const std::string & what) {
    const int64_t page = indices[indptr[b] + j / page_size];
    KVCOMP_CHECK_ARG(page >= 0 && page < n_pages, what, ": page index ", page, " out of range");
    return page;
}

}  // namespace kvcomp::cpu
