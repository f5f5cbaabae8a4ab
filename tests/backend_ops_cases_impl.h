// The test_case classes behind make_test_cases() (internal to tests/ and bench/: use the factories
// of backend_ops_cases.h). One class per op; constructor arguments are the case's parameters, tensors
// are declared in the constructor in the order build() receives their views.
#pragma once

#include "backend_ops_cases.h"

namespace kvcomp::test {

class copy_case : public test_case {
  public:
    copy_case(dtype src, dtype dst, int64_t n, size_t pad = 256);  // pad: the views' byte offset
    op_type op() const override { return op_type::copy; }
    std::string vars() const override;
    double max_nmse() const override { return 0.0; }  // compared bit for bit
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    dtype src_, dst_;
    int64_t n_;
};

class add_case : public test_case {
  public:
    add_case(int64_t n, bool inplace);
    op_type op() const override { return op_type::add; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-12; }
    uint64_t flops() const override { return uint64_t(n_); }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    int64_t n_;
    bool inplace_;
};

class gemm_case : public test_case {
  public:
    gemm_case(dtype ta, dtype tb, dtype tc, const gemm_params & p);
    op_type op() const override { return op_type::gemm; }
    std::string vars() const override;
    double max_nmse() const override;
    uint64_t flops() const override;
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    dtype ta_, tb_, tc_;
    gemm_params p_;
};

class rms_norm_case : public test_case {
  public:
    rms_norm_case(int64_t rows, int64_t n, dtype wtype, bool inplace);
    op_type op() const override { return op_type::rms_norm; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-9; }
    uint64_t flops() const override { return uint64_t(4 * rows_ * n_); }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    int64_t rows_, n_;
    dtype wtype_;
    bool inplace_;
};

class rope_case : public test_case {
  public:
    rope_case(const rope_params & p, bool freq_factors, bool inplace, int32_t max_pos);
    op_type op() const override { return op_type::rope; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-6; }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    rope_params p_;
    bool ff_, inplace_;
    int32_t max_pos_;
};

class silu_mul_case : public test_case {
  public:
    silu_mul_case(int64_t rows, int64_t n);
    op_type op() const override { return op_type::silu_mul; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-9; }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    int64_t rows_, n_;
};

class softmax_case : public test_case {
  public:
    softmax_case(int64_t rows, int64_t n, float scale, bool mask);
    op_type op() const override { return op_type::softmax; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-9; }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    int64_t rows_, n_;
    float scale_;
    bool mask_;
};

class get_rows_case : public test_case {
  public:
    get_rows_case(dtype table, int64_t table_rows, int64_t row_len, int64_t n_ids);
    op_type op() const override { return op_type::get_rows; }
    std::string vars() const override;
    double max_nmse() const override { return 0.0; }
    uint64_t bytes() const override {
        return uint64_t(ids_ * len_) * (dtype_size(table_) + 4) + uint64_t(ids_) * 4;
    }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    dtype table_;
    int64_t rows_, len_, ids_;
};

class argmax_case : public test_case {
  public:
    argmax_case(int64_t rows, int64_t n);
    op_type op() const override { return op_type::argmax; }
    std::string vars() const override;
    double max_nmse() const override { return 0.0; }
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    int64_t rows_, n_;
};

// kv_append: requests that already hold prev[b] tokens receive add[b] new ones.
struct append_spec {
    int64_t n_kv_heads = 8, head_dim = 128, page_size = 16;
    std::vector<int64_t> prev, add;
    dtype new_type = dtype::f32;
    bool shuffle = false;  // tokens of different requests interleaved
    int64_t extra_pages = 3;
};

class kv_append_case : public test_case {
  public:
    explicit kv_append_case(const append_spec & s);
    op_type op() const override { return op_type::kv_append; }
    std::string vars() const override;
    double max_nmse() const override { return 0.0; }
    uint64_t bytes() const override;
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    append_spec s_;
    int64_t n_tokens_ = 0, nnz_ = 0, n_pages_ = 0;
};

class attn_decode_case : public test_case {
  public:
    explicit attn_decode_case(const decode_spec & s);
    op_type op() const override { return op_type::attn_decode; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-6; }
    uint64_t bytes() const override;  // KV of every cached token + q + out (not the unused pool)
    uint64_t flops() const override;
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    decode_spec s_;
    int64_t batch_ = 0, nnz_ = 0, n_pages_ = 0;
};

class attn_prefill_case : public test_case {
  public:
    // pad: the views' byte offset (4: not 16-byte aligned, the CUDA backend's fallback kernel).
    // with_lse: also the optional lse output (dst1).
    // key_ramp > 0: channel 0 of every query is 2 and channel 0 of the key at request position p
    // gets key_ramp * p added, so each row's scores climb along its keys (2 key_ramp scale log2(e)
    // per key, in log2 units): the running maximum keeps moving long after the first key tile,
    // which a kernel that rescales its accumulators lazily must then do with a finite old maximum.
    attn_prefill_case(std::vector<int64_t> seqs, int64_t q_heads, int64_t kv_heads, int64_t hd, size_t pad = 256,
                      bool with_lse = false, float key_ramp = 0.0f);
    op_type op() const override { return op_type::attn_prefill; }
    std::string vars() const override;
    double max_nmse() const override { return 1e-6; }
    uint64_t flops() const override;
    op_desc build(const std::vector<tensor> & v) const override;

  protected:
    void init(test_rng & rng) override;

  private:
    std::vector<int64_t> seqs_;
    int64_t qh_, kvh_, hd_, n_tokens_ = 0;
    bool with_lse_ = false;
    float key_ramp_ = 0.0f;
};

}  // namespace kvcomp::test
