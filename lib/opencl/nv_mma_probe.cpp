// Whether NVIDIA's OpenCL driver runs tensor-core instructions written as inline PTX in OpenCL C
// (cl_kernels/nv_mma_probe.cl).
//
// Why: NVIDIA's OpenCL C has no fp16 arithmetic and no matrix instruction, so the OpenCL decodes run
// every product as an fp32 FMA and stay near 0.15 of the copy bandwidth on the quantized caches,
// where the CUDA kernels reach 0.3-0.55 with mma.sync (docs/kernel_notes.md, "The OpenCL kernels").
// Kernels with an NVIDIA-only tensor-core path (today attn_decode_quant.cl's KVC_NV_MMA scores) need to
// know first that the driver's compiler takes the PTX and that the fragments mean what the PTX ISA
// says. The probe answers both: it compiles the kernel (with `__asm__`, then `asm`), runs one warp on a
// 16 x 16 by 16 x 8 product of small integers, exact in f16 and in f32, and compares every output with
// the host's. inline_ptx_mma() runs it on each call (tests); cl_backend::tensor_core_asm() once per
// backend, for the launchers. It is never compiled for other vendors.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "opencl/backend_opencl.h"
#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

// f16 bits of a small integer |v| <= 2048 (exact).
uint16_t half_bits(int v) {
    if (v == 0) return 0;
    const uint16_t sign = v < 0 ? 0x8000 : 0;
    uint32_t m = uint32_t(v < 0 ? -v : v);
    int e = 0;
    while ((m >> e) > 1) ++e;  // m = 2^e * 1.f
    const uint32_t frac = (m << (10 - e)) & 0x3ff;
    return uint16_t(sign | uint16_t((e + 15) << 10) | frac);
}

int a_value(int row, int k) {
    return (row * 3 + k * 5) % 7 - 3;
}
int b_value(int k, int col) {
    return (k * 2 + col * 3) % 5 - 2;
}

support run_probe(cl_backend & be, const char * asm_keyword) {
    cl_kernel k = nullptr;
    try {
        k = be.kernel("nv_mma_probe.cl", defines().add("KVC_ASM", asm_keyword), "kvc_nv_mma_probe");
    } catch (const error & e) {
        return support::no(std::string("does not compile with ") + asm_keyword + ": " + e.what());
    }
    std::vector<uint16_t> a(16 * 16), b_t(8 * 16);
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) a[r * 16 + c] = half_bits(a_value(r, c));
    for (int n = 0; n < 8; ++n)
        for (int c = 0; c < 16; ++c) b_t[n * 16 + c] = half_bits(b_value(c, n));
    buffer_ptr da = be.alloc(a.size() * 2), db = be.alloc(b_t.size() * 2), dout = be.alloc(160 * 4);
    be.upload(*da, 0, a.data(), a.size() * 2);
    be.upload(*db, 0, b_t.data(), b_t.size() * 2);
    set_args(k, static_cast<cl_buffer &>(*da).mem(), static_cast<cl_buffer &>(*db).mem(),
             static_cast<cl_buffer &>(*dout).mem());
    const size_t n = 32;
    be.launch(k, 1, &n, &n);
    std::vector<float> out(160);
    be.download(*dout, 0, out.data(), out.size() * 4);
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 8; ++c) {
            int want = 0;
            for (int i = 0; i < 16; ++i) want += a_value(r, i) * b_value(i, c);
            if (out[r * 8 + c] != float(want))
                return support::no("mma.sync gave " + std::to_string(out[r * 8 + c]) + " at row " + std::to_string(r) +
                                   ", column " + std::to_string(c) + ", expected " + std::to_string(want));
        }
    for (int i = 0; i < 32; ++i)
        if (out[128 + i] != float(i))
            return support::no("work-item " + std::to_string(i) + " read %laneid " + std::to_string(out[128 + i]));
    return support::yes();
}

bool is_nvidia(const device_info & i) {
    const auto has = [](const std::string & s) { return s.find("NVIDIA") != std::string::npos; };
    return has(i.vendor) || has(i.platform);
}

// The probe on NVIDIA's driver with `__asm__`, then `asm`: the first keyword that passes goes to
// *keyword (nullptr when none does), else the reasons of both.
support probe_keywords(cl_backend & be, const char ** keyword) {
    *keyword = nullptr;
    if (!is_nvidia(be.info())) return support::no("not NVIDIA's driver (vendor " + be.info().vendor + ")");
    std::string why;
    for (const char * k : {"__asm__", "asm"}) {
        const support s = run_probe(be, k);
        if (s.ok) {
            *keyword = k;
            return s;
        }
        why += (why.empty() ? "" : "; ") + s.reason;
    }
    return support::no(why);
}

}  // namespace

const char * cl_backend::tensor_core_asm() {
    if (!tensor_cores_probed_) {
        tensor_cores_probed_ = true;
        const char * env = std::getenv("KVCOMP_CL_TENSOR_CORES");
        if (!(env && std::strcmp(env, "0") == 0)) {
            const bool timing = timing_;
            timing_ = false;  // the probe's kernel is no part of a timed op
            probe_keywords(*this, &tensor_core_asm_);
            timing_ = timing;
        }
    }
    return tensor_core_asm_;
}

support inline_ptx_mma(backend & be) {
    auto * cl = dynamic_cast<cl_backend *>(&be);
    KVCOMP_CHECK_ARG(cl, "backend ", be.name(), " is not an OpenCL backend");
    const char * keyword = nullptr;
    return probe_keywords(*cl, &keyword);
}

}  // namespace kvcomp::cl
