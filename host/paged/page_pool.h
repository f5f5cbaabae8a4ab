// Paged KV bookkeeping on the host: a pool of fixed-size pages and per-sequence page tables.
//
// The pool hands out page numbers 0..capacity-1 into the backend's KV pool tensors (see
// lib/core/op.h for the page layout). A sequence owns an ordered list of pages; token position p
// of a sequence lives in page pages[p / page_size], slot p % page_size. The page table turns a set
// of sequences into FlashInfer-style arrays (indptr / indices / last_page_len) that are uploaded
// for the paged kernels. Nothing here touches device memory.
//
// Thread safety: none; one scheduler thread owns a pool and its tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace kvcomp::host {

class page_pool {
public:
    explicit page_pool(int32_t capacity);

    int32_t capacity() const { return int32_t(in_use_.size()); }
    int32_t free_pages() const { return int32_t(free_.size()); }
    int32_t used_pages() const { return capacity() - free_pages(); }

    // Takes n pages (all or nothing). Returns false and leaves the pool unchanged when fewer
    // than n are free. The pages are appended to `out`.
    bool allocate(int32_t n, std::vector<int32_t> & out);

    // Returns pages to the pool. Throws invalid_argument (pool unchanged) on a page that is out
    // of range or not in use, including a page listed twice.
    void release(const std::vector<int32_t> & pages);

private:
    std::vector<int32_t> free_;   // stack: lowest page numbers are handed out first
    std::vector<uint8_t> in_use_;
};

// The arrays a paged attention op reads, for one batch of sequences (in the order given).
struct paged_batch {
    std::vector<int32_t> indptr;         // [batch + 1]
    std::vector<int32_t> indices;        // [indptr.back()]
    std::vector<int32_t> last_page_len;  // [batch], 0 for an empty sequence
    int64_t max_seq_len = 0;
};

// Where each new token goes: for kv_append (batch_idx indexes the batch's sequences).
struct append_plan {
    std::vector<int32_t> batch_idx;  // [n_tokens]
    std::vector<int32_t> positions;  // [n_tokens]
};

class page_table {
public:
    page_table(page_pool & pool, int32_t page_size);
    ~page_table();  // returns every page still held to the pool
    page_table(const page_table &) = delete;
    page_table & operator=(const page_table &) = delete;

    int32_t page_size() const { return page_size_; }

    // New empty sequence; ids are never reused within a table.
    int32_t create_sequence();

    // Makes room for n_new more tokens, allocating pages as needed. Returns false and changes
    // nothing when the pool cannot supply them. Throws invalid_argument for an unknown sequence.
    bool extend(int32_t seq, int64_t n_new);

    // Makes sure the sequence holds pages for `total_tokens` tokens without changing its length,
    // so later extend() calls up to that length cannot fail. Returns false and changes nothing
    // when the pool cannot supply them.
    bool reserve(int32_t seq, int64_t total_tokens);

    // Frees the sequence and its pages.
    void release(int32_t seq);

    int64_t length(int32_t seq) const;
    const std::vector<int32_t> & pages(int32_t seq) const;
    size_t sequence_count() const { return seqs_.size(); }

    paged_batch batch(const std::vector<int32_t> & seqs) const;

    // For each seqs[i], the last n_new[i] positions of the sequence (call after extend()).
    append_plan plan_append(const std::vector<int32_t> & seqs, const std::vector<int64_t> & n_new) const;

private:
    struct sequence {
        std::vector<int32_t> pages;
        int64_t length = 0;
    };
    const sequence & get(int32_t seq) const;

    page_pool & pool_;
    int32_t page_size_;
    int32_t next_id_ = 0;
    std::map<int32_t, sequence> seqs_;
};

}  // namespace kvcomp::host
