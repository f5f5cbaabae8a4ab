// The CPU reference backend: host memory, synchronous execution, every op supported.
#include <chrono>
#include <cstring>

#include "core/registry.h"
#include "cpu/cpu_common.h"
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

namespace {

class cpu_backend : public backend {
public:
    cpu_backend() : info_(device()) {}

    const device_info & info() const override { return info_; }
    support supports(const op_desc &) const override { return support::yes(); }

    buffer_ptr alloc(size_t nbytes) override { return std::make_unique<cpu_buffer>(*this, nbytes); }

    void upload(buffer & dst, size_t offset, const void * src, size_t nbytes) override {
        check_range(dst, offset, nbytes, "upload");
        std::memcpy(static_cast<cpu_buffer &>(dst).data() + offset, src, nbytes);
    }
    void download(const buffer & src, size_t offset, void * dst, size_t nbytes) override {
        check_range(src, offset, nbytes, "download");
        std::memcpy(dst, const_cast<cpu_buffer &>(static_cast<const cpu_buffer &>(src)).data() + offset, nbytes);
    }
    void synchronize() override {}

    void timer_start() override { t0_ = std::chrono::steady_clock::now(); }
    double timer_stop_ms() override {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    }

protected:
    void run_checked(const op_desc & op) override {
        switch (op.type) {
            case op_type::copy: return run_copy(op);
            case op_type::add: return run_add(op);
            case op_type::gemm: return run_gemm(op);
            case op_type::rms_norm: return run_rms_norm(op);
            case op_type::rope: return run_rope(op);
            case op_type::silu_mul: return run_silu_mul(op);
            case op_type::softmax: return run_softmax(op);
            case op_type::get_rows: return run_get_rows(op);
            case op_type::argmax: return run_argmax(op);
            case op_type::kv_append: return run_kv_append(op);
            case op_type::attn_decode: return run_attn_decode(op);
            case op_type::attn_prefill: return run_attn_prefill(op);
            case op_type::kv_quantize: return run_kv_quantize(op);
            case op_type::kv_dequantize: return run_kv_dequantize(op);
            case op_type::attn_decode_quant: return run_attn_decode_quant(op);
            case op_type::probe_scores: return run_probe_scores(op);
            case op_type::select_salient: return run_select_salient(op);
            case op_type::head_project: return run_head_project(op);
            case op_type::kv_append_ragged: return run_kv_append_ragged(op);
            case op_type::attn_decode_ragged: return run_attn_decode_ragged(op);
            case op_type::attn_prefill_ragged: return run_attn_prefill_ragged(op);
            case op_type::attn_decode_palu: return run_attn_decode_palu(op);
            default: break;
        }
        KVCOMP_THROW(status::internal, "cpu: unhandled op ", describe(op));
    }

private:
    void check_range(const buffer & b, size_t offset, size_t nbytes, const char * what) const {
        KVCOMP_CHECK_ARG(&b.owner() == this, "cpu: ", what, " with a buffer of backend ", b.owner().name());
        KVCOMP_CHECK_ARG(offset <= b.size() && nbytes <= b.size() - offset, "cpu: ", what, " of ", nbytes,
                         " bytes at offset ", offset, " overruns a buffer of ", b.size(), " bytes");
    }

    device_info info_;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace

device_info device() {
    device_info d;
    d.name = "cpu";
    d.api = "CPU";
    d.device_name = "reference (scalar C++, double accumulation)";
    d.vendor = "kvcomp";
    d.platform = "host";
    d.driver_version = "-";
    d.api_version = "C++17";
    d.compute_units = 1;
    return d;
}

std::unique_ptr<backend> create_backend() { return std::make_unique<cpu_backend>(); }

}  // namespace kvcomp::cpu
