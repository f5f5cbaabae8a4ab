// Public API: device listing with per-op support, as `kvcomp info` shows it.
#include "core/registry.h"
#include "kvcomp/kvcomp.h"

namespace kvcomp {

namespace {

// One small representative op of each type, used to ask supports() (no buffers are touched: the
// views point at a scratch buffer of the backend large enough for all of them).
std::vector<op_desc> probe_ops(buffer * b) {
    auto t = [&](dtype d, std::initializer_list<int64_t> s) { return make_tensor(b, d, s); };
    const dtype f32 = dtype::f32, f16 = dtype::f16, i32 = dtype::i32;
    kv_layout kv{4, 2, 16, 128};
    std::vector<op_desc> ops;
    ops.push_back(make_op(copy_params{8}, {t(f32, {8})}, {t(f16, {8})}));
    ops.push_back(make_op(add_params{8}, {t(f32, {8}), t(f32, {8})}, {t(f32, {8})}));
    gemm_params g;
    g.m = 4, g.n = 8, g.k = 8;
    ops.push_back(make_op(g, {t(f32, {4, 8}), t(f16, {8, 8})}, {t(f32, {4, 8})}));
    ops.push_back(make_op(rms_norm_params{2, 8, 1e-5f}, {t(f32, {2, 8}), t(f32, {8})}, {t(f32, {2, 8})}));
    rope_params r;
    r.n_tokens = 2, r.n_heads = 2, r.head_dim = 128, r.rot_dim = 128;
    ops.push_back(make_op(r, {t(f32, {2, 2, 128}), t(i32, {2})}, {t(f32, {2, 2, 128})}));
    ops.push_back(make_op(silu_mul_params{2, 8}, {t(f32, {2, 8}), t(f32, {2, 8})}, {t(f32, {2, 8})}));
    ops.push_back(make_op(softmax_params{2, 8, 1.0f}, {t(f32, {2, 8})}, {t(f32, {2, 8})}));
    ops.push_back(make_op(get_rows_params{2, 8, 4}, {t(f16, {4, 8}), t(i32, {2})}, {t(f32, {2, 8})}));
    ops.push_back(make_op(argmax_params{2, 8}, {t(f32, {2, 8})}, {t(i32, {2})}));
    ops.push_back(make_op(kv_append_params{kv, 2, 1, 2},
                          {t(f32, {2, 2, 128}), t(f32, {2, 2, 128}), t(i32, {2}), t(i32, {2}), t(i32, {2}), t(i32, {2})},
                          {t(f16, {4, 2, 16, 128}), t(f16, {4, 2, 16, 128})}));
    attn_decode_params d;
    d.kv = kv, d.batch = 1, d.n_q_heads = 8, d.nnz_pages = 2, d.max_seq_len = 32, d.scale = 0.1f;
    ops.push_back(make_op(d,
                          {t(f32, {1, 8, 128}), t(f16, {4, 2, 16, 128}), t(f16, {4, 2, 16, 128}), t(i32, {2}),
                           t(i32, {2}), t(i32, {1})},
                          {t(f32, {1, 8, 128})}));
    attn_prefill_params pf;
    pf.batch = 1, pf.n_tokens = 4, pf.n_q_heads = 8, pf.n_kv_heads = 2, pf.head_dim = 128, pf.max_seq_len = 4;
    ops.push_back(make_op(pf, {t(f32, {4, 8, 128}), t(f16, {4, 2, 128}), t(f16, {4, 2, 128}), t(i32, {2})},
                          {t(f32, {4, 8, 128})}));
    // select_salient: OpenCL devices without cl_khr_fp64 lack it (zipcache then ranks on the host).
    select_salient_params ss;
    ss.n_kv_heads = 2, ss.n_tokens = 4, ss.n_prompts = 1, ss.n_blocks = 1, ss.hi_tokens = 2, ss.lo_tokens = 2;
    ops.push_back(make_op(ss, {t(f32, {2, 4}), t(i32, {4}), t(i32, {1, 4})}, {t(i32, {1, 2, 4})}));
    return ops;
}

device_summary summarize(const device_entry & e) {
    const device_info & i = e.info;
    device_summary s;
    s.name = i.name, s.api = i.api, s.device_name = i.device_name, s.vendor = i.vendor, s.platform = i.platform;
    s.driver_version = i.driver_version, s.api_version = i.api_version, s.is_gpu = i.is_gpu;
    s.compute_units = i.compute_units, s.global_mem_bytes = i.global_mem_bytes;
    s.fp16_arith = i.fp16_arith, s.int8_dot = i.int8_dot;
    try {
        auto be = e.create();
        auto scratch = be->alloc(1 << 20);
        for (const op_desc & op : probe_ops(scratch.get())) {
            check_op(op);
            const support sup = be->supports(op);
            if (sup.ok)
                s.ops_supported.push_back(op_name(op.type));
            else
                s.ops_missing.push_back(std::string(op_name(op.type)) + ": " + sup.reason);
        }
    } catch (const std::exception & ex) {
        s.ops_missing.push_back(std::string("(backend could not be created: ") + ex.what() + ")");
    }
    return s;
}

}  // namespace

kvcomp_status list_devices(std::vector<device_summary> & devices, std::vector<std::string> & notes,
                           std::string & default_name) {
    KVCOMP_API_BEGIN
    devices.clear();
    for (const auto & e : kvcomp::list_devices()) devices.push_back(summarize(e));
    notes = registry_notes();
    default_name = default_backend_name();
    KVCOMP_API_END
}

}  // namespace kvcomp
