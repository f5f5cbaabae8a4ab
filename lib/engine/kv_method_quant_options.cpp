// Options of the quantizing KV methods ("--method-opt key=value"): parsed and validated here,
// then handed to the shared implementation in kv_method_quant.cpp.
//
//   kivi (KIVI, Liu et al. 2024): keys per channel over groups of `group` tokens, values per token
//     in groups of `group` channels, `bits` 2|4|8 (default 2), group 32, residual 32 (the fp16
//     recent tokens; a multiple of group).
//   zipcache (ZipCache, He et al. 2024): keys per channel, values channel-separable per token
//     (CST), salient tokens (normalized probe attention) at hi_bits, the rest at lo_bits:
//     ratio 0.4 (salient fraction), hi_bits 4, lo_bits 2, block 100 (the streaming gap: also the
//     decode window), probe_recent 0.05, probe_random 0.05, nnz probe|causal (digest §9 A6),
//     decode_probe_recent 5, decode_probe_p 0.05, seed 0, recompress append|all (default append:
//     a full window becomes new blocks and old blocks are never touched; all: the authors' code's
//     mode, every flush re-ranks and re-quantizes all of the request's tokens, which re-rounds old
//     tokens and drifts; see kv_method_requant.h and docs/data/requant_drift.csv), select
//     device|host (default device: the prefill ranks tokens with the select_salient op where the
//     backend has it; host: downloads the scores and ranks on the host; the same ranking), tail
//     quantize|window (default quantize: the whole prompt is quantized at prefill, the paper's
//     behaviour; window: the prompt's last len % block tokens wait in the fp16 decode window).
//   Either, on the reduced cache of zack / fdc (kv_method_lowrank_quant.h): lowrank=zack|fdc (default
//     none), calib=FILE (a calibration file of that method for this model, kvcomp calibrate), rank=R
//     (every K and V head at R dims: a multiple of 16 up to head_dim; the blocks' head_dim).
#include "engine/kv_method_lowrank_quant.h"
#include "engine/kv_method_quant.h"
#include "engine/method_option_reader.h"

namespace kvcomp::engine {

namespace {

int32_t bits_option(option_reader & r, const std::string & key, int32_t def, const std::string & method) {
    const int32_t b = int32_t(r.integer(key, def, 2, 8));
    KVCOMP_CHECK_ARG(b == 2 || b == 4 || b == 8, "method ", method, ": ", key, " must be 2, 4 or 8, got ", b);
    return b;
}

// The lowrank / calib / rank options (on = false when lowrank=none, the default).
struct lowrank_options {
    bool on = false;
    lowrank_choice choice;
};

lowrank_options lowrank_option(option_reader & r, const std::string & method) {
    lowrank_options o;
    const std::string m = r.word("lowrank", "none", {"none", "zack", "fdc"});
    const std::string calib = r.text("calib", "");
    const int64_t rank = r.integer("rank", 0, 0, 1 << 20);
    if (m == "none") {
        KVCOMP_CHECK_ARG(calib.empty() && rank == 0, "method ", method,
                         ": calib and rank only apply with lowrank=zack or lowrank=fdc");
        return o;
    }
    KVCOMP_CHECK_ARG(!calib.empty(), "method ", method, ": lowrank=", m,
                     " needs calib=FILE (a calibration file from kvcomp calibrate --method ", m, ")");
    KVCOMP_CHECK_ARG(rank > 0, "method ", method, ": lowrank=", m, " needs rank=R (the dims every K and V head keeps)");
    o.on = true;
    o.choice.method = m == "zack" ? host::lowrank::lowrank_method::zack : host::lowrank::lowrank_method::fdc;
    o.choice.calib_path = calib;
    o.choice.uniform_rank = rank;
    return o;
}

std::unique_ptr<kv_method> finish_method(const quant_method_config & c, const lowrank_options & lr) {
    return lr.on ? make_lowrank_quant_method(lr.choice, c) : make_quant_method(c);
}

}  // namespace

std::unique_ptr<kv_method> make_kv_method_kivi(const method_options & o) {
    option_reader r("kivi", o);
    quant_method_config c;
    c.name = "kivi";
    c.hi_bits = c.lo_bits = bits_option(r, "bits", 2, c.name);
    c.block = int32_t(r.integer("group", 32, 16, 4096));
    c.window = int32_t(r.integer("residual", 32, 1, 1 << 20));
    const lowrank_options lr = lowrank_option(r, c.name);
    r.finish();
    KVCOMP_CHECK_ARG(c.window % c.block == 0, "method kivi: residual (", c.window, ") must be a multiple of group (",
                     c.block, ")");
    c.ratio = 1.0;  // one segment
    c.v_group = c.block;
    return finish_method(c, lr);
}

std::unique_ptr<kv_method> make_kv_method_zipcache(const method_options & o) {
    option_reader r("zipcache", o);
    quant_method_config c;
    c.name = "zipcache";
    c.ratio = r.real("ratio", 0.4, 0.0, 1.0);
    c.hi_bits = bits_option(r, "hi_bits", 4, c.name);
    c.lo_bits = bits_option(r, "lo_bits", 2, c.name);
    c.block = c.window = int32_t(r.integer("block", 100, 1, 1 << 16));
    c.probe_recent = r.real("probe_recent", 0.05, 0.0, 1.0);
    c.probe_random = r.real("probe_random", 0.05, 0.0, 1.0);
    c.nnz = r.word("nnz", "probe", {"probe", "causal"}) == "probe" ? host::quant::nnz_mode::probe
                                                                  : host::quant::nnz_mode::causal;
    c.decode_probe_recent = int32_t(r.integer("decode_probe_recent", 5, 1, 1 << 16));
    c.decode_probe_p = r.real("decode_probe_p", 0.05, 0.0, 1.0);
    c.seed = uint64_t(r.integer("seed", 0, 0, int64_t(1) << 62));
    c.recompress_all = r.word("recompress", "append", {"append", "all"}) == "all";
    c.select_on_device = r.word("select", "device", {"device", "host"}) == "device";
    // tail: what happens to the prompt's last len % block tokens. quantize (the paper's prefill):
    // they become a partial block. window: they stay fp16 in the decode window (in its pages, taken
    // as it fills) until it fills, as KIVI keeps its residual.
    const bool tail_window = r.word("tail", "quantize", {"quantize", "window"}) == "window";
    const lowrank_options lr = lowrank_option(r, c.name);
    r.finish();
    c.v_group = 0;  // head_dim: one group per token
    c.channel_scale = true;
    c.quantize_whole_prompt = !tail_window;
    // At ratio 0 (every token at lo_bits) or 1 (every token at hi_bits) the ranking cannot change
    // which segment a token lands in, so no probe attention is run: ratio=0 is ZipCache's
    // quantizer without its saliency estimation (the baseline its cost is measured against).
    c.saliency = c.ratio > 0.0 && c.ratio < 1.0;
    return finish_method(c, lr);
}

}  // namespace kvcomp::engine
