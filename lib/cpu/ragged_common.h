// Shared pieces of the CPU reference for the low-rank (ragged-head) ops of core/op.h: the heads
// table, ragged page addressing and the check of a decode schedule/merge table. The oracle checks
// what GPU kernels trust (tables built on the host), so a bad table fails the tests loudly here
// instead of reading out of bounds somewhere else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

struct ragged_head {
    int64_t k_width, k_offset, v_width, v_offset;
};

// Reads heads i32 [n_kv_heads, 4] and checks widths in [1, max_width] and offsets = prefix sums
// totalling k_total / v_total. `what` names the op in messages.
std::vector<ragged_head> read_ragged_heads(const tensor & heads, int64_t n_kv_heads, int64_t k_total,
                                           int64_t v_total, int64_t max_width, const std::string & what);

// Element offset of token slot `slot` of KV head h in page `page` of a ragged pool whose heads have
// the widths given by (width, offset) and total `total` (core/op.h: head c's part of page p starts
// at p * page_size * total + page_size * offset, slot s at + s * width).
inline int64_t ragged_slot(int64_t page, int64_t slot, int64_t page_size, int64_t total, int64_t width,
                           int64_t offset) {
    return page * page_size * total + page_size * offset + slot * width;
}

// bits == 4 pages (core/ragged_q4.h): byte offset of each head's rows within a token's bytes
// (k: K widths, else V), checked to total l.k_row_bytes / l.v_row_bytes.
std::vector<int64_t> ragged_q4_offsets(const std::vector<ragged_head> & heads, const ragged_layout & l,
                                       bool v, const std::string & what);

// Checks a decode task list against the requests' lengths (core/op.h, "Decode task list"):
// merge[0..batch*n_kv] non-decreasing from 0 to n_tasks; the tasks of (b, c) are rows of
// schedule naming (b, c), in token order, covering [0, seq_len(b)) exactly once; every task is
// listed once. Throws invalid_argument naming the first violation.
void check_decode_schedule(const int32_t * schedule, const int32_t * merge, int64_t n_tasks, int64_t batch,
                           int64_t n_kv_heads, const std::vector<int64_t> & seq_lens,
                           const std::string & what);

// Per-request lengths from a paged table (checked against max_seq_len) and the page behind token
// j of request b (checked against n_pages).
std::vector<int64_t> ragged_seq_lens(const int32_t * indptr, const int32_t * last_page_len, int64_t batch,
                                     int64_t page_size, int64_t nnz_pages, int64_t max_seq_len,
                                     const std::string & what);
int64_t ragged_page_of(const int32_t * indptr, const int32_t * indices, int64_t b, int64_t j,
                       int64_t page_size, int64_t n_pages, const std::string & what);

void run_head_project(const op_desc & op);
void run_kv_append_ragged(const op_desc & op);
void run_attn_decode_ragged(const op_desc & op);
void run_attn_prefill_ragged(const op_desc & op);
void run_attn_decode_palu(const op_desc & op);

}  // namespace kvcomp::cpu
