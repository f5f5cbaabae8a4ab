#include "host/paged/page_pool.h"

#include <algorithm>

#include "core/error.h"

namespace kvcomp::host {

page_pool::page_pool(int32_t capacity) {
    KVCOMP_CHECK_ARG(capacity >= 0, "page_pool: capacity must be >= 0, got ", capacity);
    in_use_.assign(size_t(capacity), 0);
    free_.reserve(size_t(capacity));
    for (int32_t p = capacity - 1; p >= 0; --p) free_.push_back(p);
}

bool page_pool::allocate(int32_t n, std::vector<int32_t> & out) {
    KVCOMP_CHECK_ARG(n >= 0, "page_pool::allocate: n must be >= 0, got ", n);
    if (n > free_pages()) return false;
    for (int32_t i = 0; i < n; ++i) {
        const int32_t p = free_.back();
        free_.pop_back();
        in_use_[size_t(p)] = 1;
        out.push_back(p);
    }
    return true;
}

void page_pool::release(const std::vector<int32_t> & pages) {
    // Validate everything first so a bad list leaves the pool untouched.
    std::vector<int32_t> sorted(pages);
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
        const int32_t p = sorted[i];
        KVCOMP_CHECK_ARG(p >= 0 && p < capacity(), "page_pool::release: page ", p, " out of range [0,", capacity(), ")");
        KVCOMP_CHECK_ARG(in_use_[size_t(p)], "page_pool::release: page ", p, " is not in use (double release?)");
        KVCOMP_CHECK_ARG(i == 0 || sorted[i - 1] != p, "page_pool::release: page ", p, " listed twice");
    }
    for (int32_t p : pages) {
        in_use_[size_t(p)] = 0;
        free_.push_back(p);
    }
}

page_table::page_table(page_pool & pool, int32_t page_size) : pool_(pool), page_size_(page_size) {
    KVCOMP_CHECK_ARG(page_size > 0, "page_table: page_size must be positive, got ", page_size);
}

page_table::~page_table() {
    for (auto & kv : seqs_) pool_.release(kv.second.pages);
}

int32_t page_table::create_sequence() {
    const int32_t id = next_id_++;
    seqs_.emplace(id, sequence{});
    return id;
}

const page_table::sequence & page_table::get(int32_t seq) const {
    auto it = seqs_.find(seq);
    KVCOMP_CHECK_ARG(it != seqs_.end(), "page_table: unknown sequence ", seq);
    return it->second;
}

bool page_table::extend(int32_t seq, int64_t n_new) {
    KVCOMP_CHECK_ARG(n_new >= 0, "page_table::extend: n_new must be >= 0, got ", n_new);
    auto & s = const_cast<sequence &>(get(seq));
    const int64_t need_pages = (s.length + n_new + page_size_ - 1) / page_size_;
    const int64_t more = need_pages - int64_t(s.pages.size());
    if (more > 0 && !pool_.allocate(int32_t(more), s.pages)) return false;
    s.length += n_new;
    return true;
}

bool page_table::reserve(int32_t seq, int64_t total_tokens) {
    KVCOMP_CHECK_ARG(total_tokens >= 0, "page_table::reserve: total_tokens must be >= 0, got ", total_tokens);
    auto & s = const_cast<sequence &>(get(seq));
    const int64_t more = (total_tokens + page_size_ - 1) / page_size_ - int64_t(s.pages.size());
    return more <= 0 || pool_.allocate(int32_t(more), s.pages);
}

void page_table::release(int32_t seq) {
    const auto & s = get(seq);
    pool_.release(s.pages);
    seqs_.erase(seq);
}

int64_t page_table::length(int32_t seq) const { return get(seq).length; }
const std::vector<int32_t> & page_table::pages(int32_t seq) const { return get(seq).pages; }

paged_batch page_table::batch(const std::vector<int32_t> & seqs) const {
    paged_batch b;
    b.indptr.push_back(0);
    for (int32_t id : seqs) {
        const auto & s = get(id);
        // Only the pages that hold tokens: extend() never over-allocates, so this is all of them.
        const int64_t used = (s.length + page_size_ - 1) / page_size_;
        b.indices.insert(b.indices.end(), s.pages.begin(), s.pages.begin() + used);
        b.indptr.push_back(int32_t(b.indices.size()));
        b.last_page_len.push_back(s.length == 0 ? 0 : int32_t(s.length - (used - 1) * page_size_));
        b.max_seq_len = std::max(b.max_seq_len, s.length);
    }
    return b;
}

append_plan page_table::plan_append(const std::vector<int32_t> & seqs, const std::vector<int64_t> & n_new) const {
    KVCOMP_CHECK_ARG(seqs.size() == n_new.size(), "page_table::plan_append: ", seqs.size(), " sequences but ",
                     n_new.size(), " counts");
    append_plan plan;
    for (size_t i = 0; i < seqs.size(); ++i) {
        const int64_t len = length(seqs[i]);
        KVCOMP_CHECK_ARG(n_new[i] >= 0 && n_new[i] <= len, "page_table::plan_append: sequence ", seqs[i], " has ",
                         len, " tokens, cannot place the last ", n_new[i]);
        for (int64_t p = len - n_new[i]; p < len; ++p) {
            plan.batch_idx.push_back(int32_t(i));
            plan.positions.push_back(int32_t(p));
        }
    }
    return plan;
}

}  // namespace kvcomp::host
