// Test cases of the quantized-KV ops (kv_quantize, kv_dequantize, attn_decode_quant, probe_scores,
// select_salient; contracts in
// lib/core/op.h and lib/core/qblock.h). Internal to tests/ and bench/, like backend_ops_cases_impl.h.
#pragma once

#include <utility>

#include "backend_ops_cases.h"

namespace kvcomp::test {

// Shape of a quantized-block case: the layout plus how many blocks/tokens to exercise.
struct quant_spec {
    qblock_layout q;
    int64_t n_q_heads = 8;
    dtype src_type = dtype::f32;  // kv_quantize / probe_scores sources
    int64_t row_tokens = 0;       // 0: token-major sources, else head-major rows of this many tokens
    std::vector<int64_t> blocks;  // attn_decode_quant: blocks per request (kv_quantize: total = size)
    std::vector<int64_t> window;  // attn_decode_quant: window tokens per request
    int64_t win_tokens = 16;      // window capacity
    int64_t win_page_tokens = 5;  // attn_decode_quant: window page size (5: a row's last page is partial)
    bool partial_last = true;     // attn_decode_quant: each request's last block holds 1..G tokens
    // attn_decode_quant, > 0: key channel 5 of a request's block i is 0.75 + key_ramp * i and every
    // query's channel 5 is 2, so scores climb from block to block and a lazily rescaling kernel's
    // running maximum moves after its first items, with a finite old maximum.
    float key_ramp = 0.0f;
};

class kv_quantize_case : public test_case {
  public:
    explicit kv_quantize_case(const quant_spec & s);
    op_type op() const override { return op_type::kv_quantize; }
    std::string vars() const override;
    double max_nmse() const override { return 0.0; }  // slots compared bit for bit
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    quant_spec s_;
    int64_t n_blocks_ = 0, n_src_ = 0, n_slots_ = 0;
};

// kv_dequantize of blocks holding s.blocks[i] tokens each (split into hi/lo like kv_quantize_case),
// listed in shuffled slots of a pool whose other bytes are random; rows of dtype s.src_type
// addressed by s.row_tokens. Compared bit for bit.
class kv_dequantize_case : public test_case {
  public:
    explicit kv_dequantize_case(const quant_spec & s);
    op_type op() const override { return op_type::kv_dequantize; }
    std::string vars() const override;
    double max_nmse() const override { return 0.0; }  // rows compared bit for bit
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    quant_spec s_;
    int64_t n_blocks_ = 0, n_slots_ = 0;
};

class attn_decode_quant_case : public test_case {
  public:
    explicit attn_decode_quant_case(const quant_spec & s);
    op_type op() const override { return op_type::attn_decode_quant; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-6; }
    uint64_t bytes() const override;  // the requests' slots and window tokens + q + out
    uint64_t flops() const override;
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    quant_spec s_;
    int64_t batch_ = 0, nnz_ = 0, n_slots_ = 0, n_win_rows_ = 0, n_win_pages_ = 0, max_tokens_ = 0;
    int64_t pages_per_row() const { return (s_.win_tokens + s_.win_page_tokens - 1) / s_.win_page_tokens; }
};

// probe_scores over one request (single-request form), or over a ragged batch (the form with
// probe_indptr / key_indptr): request b has keys[b] keys and probes[b] probes (either may be 0).
class probe_scores_case : public test_case {
  public:
    probe_scores_case(const quant_spec & s, int64_t n_keys, int64_t n_probes, bool use_lse);
    probe_scores_case(const quant_spec & s, std::vector<int64_t> keys, std::vector<int64_t> probes, bool use_lse);
    op_type op() const override { return op_type::probe_scores; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-6; }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    quant_spec s_;
    std::vector<int64_t> keys_, probes_;  // per request
    bool ragged_;
    int64_t n_keys_ = 0, n_probes_ = 0;
    bool use_lse_;
    void add_tensors();
};

// select_salient over a step of prompts: prompts[b] = (n ranked tokens, n_hi), each after `gap`
// unranked step rows; one unowned block after the first prompt's (not written by contract).
// values: "ties" (sums = level * count: many exactly equal quotients, zero counts), "spread"
// (positive sums over four decades), "special" (ties plus NaN, -0, negative, infinite and
// subnormal sums). Rows compared exactly.
struct select_spec {
    int64_t kv_heads = 2;
    int32_t hi_tokens = 40, lo_tokens = 60;
    std::vector<std::pair<int64_t, int64_t>> prompts;
    std::string values = "ties";
    int64_t gap = 3;
};

class select_salient_case : public test_case {
  public:
    explicit select_salient_case(const select_spec & s);
    op_type op() const override { return op_type::select_salient; }
    std::string vars() const override;
    double max_nmse() const override { return 0.0; }  // integers compared exactly
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    select_spec s_;
    int64_t n_tokens_ = 0, n_blocks_ = 0;
    std::vector<int32_t> table_;  // (first_row, n, n_hi, first_block) per prompt
};

// Decode attention over quantized blocks at Llama-3-8B head shapes (32/8 heads of 128, or of
// head_dim: the reduced caches of kivi / zipcache with lowrank=, rank=R), batch x context tokens per
// request: layout "zipcache" (blocks of 100: 40 tokens at 4 bits, 60 at 2, CST values) or "kivi2" /
// "kivi4" (groups of 32 tokens at 2 / 4 bits; 16 where 32 does not divide head_dim); full blocks
// plus the remainder in the fp16 window. For bench_ops.
case_ptr make_attn_decode_quant_case(const std::string & layout, int64_t batch, int64_t context,
                                     int64_t head_dim = 128);

// The case lists' entries for these ops (called from backend_ops_list.cpp).
void add_quant_cases(std::vector<case_ptr> & out, case_set set);

}  // namespace kvcomp::test
