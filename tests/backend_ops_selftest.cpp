// Self-test of the test_backend_ops harness: a CPU backend with injected faults must fail the
// comparison for the right reason, and the faultless one must pass. Without this, a harness that
// compares nothing would pass every backend.
#include <gtest/gtest.h>

#include <cstring>

#include "backend_ops_cases.h"
#include "core/registry.h"
#include "cpu/cpu_common.h"

using namespace kvcomp;
using namespace kvcomp::test;

namespace {

enum class fault { none, skip_last, scale_output, write_guard, touch_input, touch_untouched, refuse_hd96 };

// The CPU reference ops on host buffers owned by this backend, with one fault injected after the op.
class faulty_backend : public backend {
  public:
    explicit faulty_backend(fault f) : f_(f) {
        info_ = cpu::device();
        info_.name = "faulty";
    }
    const device_info & info() const override { return info_; }
    support supports(const op_desc & op) const override {
        if (f_ == fault::refuse_hd96 && op.type == op_type::attn_decode &&
            op.get<attn_decode_params>().kv.head_dim == 96)
            return support::no("head_dim 96 has no kernel");
        return support::yes();
    }
    buffer_ptr alloc(size_t n) override { return std::make_unique<cpu::cpu_buffer>(*this, n); }
    void upload(buffer & dst, size_t off, const void * src, size_t n) override {
        std::memcpy(static_cast<cpu::cpu_buffer &>(dst).data() + off, src, n);
    }
    void download(const buffer & src, size_t off, void * dst, size_t n) override {
        std::memcpy(dst,
                    const_cast<cpu::cpu_buffer &>(static_cast<const cpu::cpu_buffer &>(src)).data() + off, n);
    }
    void synchronize() override {}
    void timer_start() override {}
    double timer_stop_ms() override { return 1.0; }

  protected:
    void run_checked(const op_desc & op) override {
        std::unique_ptr<backend> ref = cpu::create_backend();
        // Run the reference op on copies in the reference backend's buffers, then copy back.
        op_desc o = op;
        std::vector<buffer_ptr> keep;
        auto mirror = [&](tensor & t) {
            if (!t.valid()) return;
            auto * src = static_cast<cpu::cpu_buffer *>(t.buf);
            buffer_ptr b = ref->alloc(src->size());
            ref->upload(*b, 0, src->data(), src->size());
            t.buf = b.get();
            keep.push_back(std::move(b));
        };
        for (auto & t : o.src) mirror(t);
        for (auto & t : o.dst) mirror(t);
        ref->run(o);
        for (int i = 0; i < max_op_dst; ++i) {
            if (!op.dst[size_t(i)].valid()) continue;
            auto * mine = static_cast<cpu::cpu_buffer *>(op.dst[size_t(i)].buf);
            ref->download(*o.dst[size_t(i)].buf, 0, mine->data(), mine->size());
        }
        const tensor & d = op.dst[0];
        uint8_t * base = static_cast<cpu::cpu_buffer *>(d.buf)->data();
        const size_t es = dtype_size(d.type);
        switch (f_) {
            case fault::skip_last: {  // leave the last element as the harness poisoned it
                const uint32_t poison = 0x7fa5a5a5u;
                KVCOMP_ASSERT(d.type == dtype::f32);
                std::memcpy(base + d.offset + d.nbytes() - es, &poison, es);
                break;
            }
            case fault::scale_output:
                for (int64_t i = 0; i < d.numel(); ++i)
                    if (d.type == dtype::f32) cpu::ptr<float>(d)[i] *= 1.01f;
                break;
            case fault::write_guard:
                base[d.offset + d.nbytes()] = 0;
                break;
            case fault::touch_input:
                static_cast<cpu::cpu_buffer *>(op.src[0].buf)->data()[op.src[0].offset] ^= 1;
                break;
            case fault::touch_untouched: {
                // Overwrite the first element that is still poisoned (an untouched KV slot / gap).
                uint16_t * p = cpu::ptr<uint16_t>(d);
                for (int64_t i = 0; i < d.numel(); ++i)
                    if (p[i] == 0x7ea5u) {
                        p[i] = 0;
                        break;
                    }
                break;
            }
            default:
                break;
        }
    }

  private:
    fault f_;
    device_info info_;
};

compare_result run_with(fault f, test_case & tc) {
    faulty_backend target(f);
    std::unique_ptr<backend> ref = cpu::create_backend();
    return compare_backends(tc, target, *ref, 7);
}

decode_spec small_decode(int64_t hd) {
    decode_spec s;
    s.n_q_heads = 8;
    s.n_kv_heads = 2;
    s.head_dim = hd;
    s.page_size = 16;
    s.lens = {17, 1, 40};
    return s;
}

using outcome = compare_result::outcome;

}  // namespace

TEST(backend_ops_harness, every_case_of_the_smoke_list_passes_without_faults) {
    for (auto & tc : make_test_cases(case_set::smoke)) {
        const compare_result r = run_with(fault::none, *tc);
        EXPECT_EQ(r.result, outcome::ok) << tc->name() << ": " << r.detail;
    }
}

TEST(backend_ops_harness, detects_an_unwritten_element) {
    case_ptr tc = make_attn_decode_case(small_decode(64));
    const compare_result r = run_with(fault::skip_last, *tc);
    EXPECT_EQ(r.result, outcome::fail);
    EXPECT_NE(r.detail.find("did not write"), std::string::npos) << r.detail;
}

TEST(backend_ops_harness, detects_a_numeric_error_above_the_threshold) {
    case_ptr tc = make_attn_decode_case(small_decode(64));
    const compare_result r = run_with(fault::scale_output, *tc);  // 1% error: nmse 1e-4 > 1e-6
    EXPECT_EQ(r.result, outcome::fail);
    EXPECT_NE(r.detail.find("nmse="), std::string::npos) << r.detail;
}

TEST(backend_ops_harness, detects_a_write_outside_the_view) {
    case_ptr tc = make_copy_case(dtype::f32, dtype::f16, 33);
    const compare_result r = run_with(fault::write_guard, *tc);
    EXPECT_EQ(r.result, outcome::fail);
    EXPECT_NE(r.detail.find("outside"), std::string::npos) << r.detail;
}

TEST(backend_ops_harness, detects_a_modified_input) {
    case_ptr tc = make_copy_case(dtype::f32, dtype::f32, 33);
    const compare_result r = run_with(fault::touch_input, *tc);
    EXPECT_EQ(r.result, outcome::fail);
    EXPECT_NE(r.detail.find("modified input"), std::string::npos) << r.detail;
}

TEST(backend_ops_harness, detects_a_write_to_an_untouched_kv_slot) {
    for (auto & tc : make_test_cases(case_set::smoke)) {
        if (tc->op() != op_type::kv_append) continue;
        const compare_result r = run_with(fault::touch_untouched, *tc);
        EXPECT_EQ(r.result, outcome::fail) << tc->name();
        EXPECT_NE(r.detail.find("untouched"), std::string::npos) << r.detail;
    }
}

TEST(backend_ops_harness, exact_outputs_fail_on_any_difference) {
    case_ptr tc = make_copy_case(dtype::f32, dtype::f32, 1000);
    const compare_result r = run_with(fault::scale_output, *tc);
    EXPECT_EQ(r.result, outcome::fail);
    EXPECT_NE(r.detail.find("elements differ"), std::string::npos) << r.detail;
}

TEST(backend_ops_harness, unsupported_is_reported_not_failed) {
    case_ptr tc = make_attn_decode_case(small_decode(96));
    const compare_result r = run_with(fault::refuse_hd96, *tc);
    EXPECT_EQ(r.result, outcome::unsupported) << r.detail;
    EXPECT_NE(r.detail.find("head_dim 96"), std::string::npos);
    faulty_backend be(fault::refuse_hd96);
    EXPECT_FALSE(case_support(*tc, be).ok);
    try {
        run_case(*tc, be, 1);
        FAIL() << "run() accepted an unsupported op";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), status::unsupported);
        EXPECT_NE(std::string(e.what()).find("attn_decode("), std::string::npos) << e.what();
    }
}

TEST(backend_ops_harness, page_tables_cover_each_token_once) {
    test_rng rng(3);
    const std::vector<int64_t> lens{0, 1, 15, 16, 17, 33};
    const page_table_arrays pt = build_page_table(lens, 16, 20, rng);
    ASSERT_EQ(pt.indptr.size(), lens.size() + 1);
    EXPECT_EQ(pt.indptr.back(), pages_needed(lens, 16));
    EXPECT_EQ(pt.max_seq_len, 33);
    std::vector<int> seen(20, 0);
    for (int32_t p : pt.indices) seen[size_t(p)]++;
    for (int s : seen) EXPECT_LE(s, 1);
    for (size_t b = 0; b < lens.size(); ++b) {
        const int64_t pages = pt.indptr[b + 1] - pt.indptr[b];
        const int64_t len = pages == 0 ? 0 : (pages - 1) * 16 + pt.last_page_len[b];
        EXPECT_EQ(len, lens[b]);
    }
}
