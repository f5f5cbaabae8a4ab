// Options of the low-rank KV methods ("--method-opt key=value"), the same for zack, fdc and palu:
//   calib=FILE           (required) a calibration file of this method for this model (kvcomp calibrate)
//   removal_rate=r       re-choose the ranks from the file's singular values at r in [0, 1)
//   compression=p        ... or at the smallest r whose overall KV compression is >= p, p in (0, 1)
//                        (neither: the file's ranks)
//   rank_multiple=16     rounding of re-chosen ranks (only with removal_rate or compression)
//   schedule=balanced|plain   decode task schedule (balanced: over the compute units; plain: one
//                        task per (request, KV head) in order); results agree up to rounding
//   workers=auto|N       balanced schedule: the workers tasks are cut and ordered for. auto
//                        (default): as many as the backend runs at once (on CUDA SMs x resident
//                        blocks of the decode kernel; OpenCL GPUs 8 x the compute units, 4 x
//                        for few (request, KV head) rows; CPU devices the compute units; palu: the
//                        compute units); N in 1..16:
//                        compute_units x N. Results agree up to rounding.
//   token_cost=auto|N    balanced schedule: a task costs s_kv * (k_width + v_width + N); auto
//                        (default): 1 for f16 pages (ZACK / FDC's cost), 64 for kv_bits=4 pages
//                        (host/lowrank/decode_schedule.h, default_token_cost); N in [0, 4096].
//                        Results agree up to rounding.
//   task_cost=auto|N     balanced schedule: each task also costs N in the search's makespans (its
//                        start and partial, whatever its length); auto (default): the backend's
//                        (backend::decode_task_cost: 16384 for CUDA's ragged decodes and for
//                        OpenCL GPUs' at batch 1, else 0);
//                        N in [0, 2^30]. Results agree up to rounding.
//   tail=auto|N          balanced schedule: N % of each (request, KV head)'s tokens cut into pieces
//                        of about a quarter chunk after every full chunk (decode_schedule_options::
//                        tail_percent); auto (default): the backend's (backend::decode_tail_percent:
//                        10 for CUDA's ragged decodes of f16 pages, else 0); N in [0, 50]. Results
//                        agree up to rounding.
//   prefill=padded|ragged  prompt attention: padded runs the standard attn_prefill (tensor cores on
//                        CUDA) on heads zero-padded to head_dim; ragged runs attn_prefill_ragged in
//                        the reduced dims; results agree up to rounding
//   prefill_balance=1|0  ragged prefill only: per-head row blocks scaled by d_sum (ZACK/FDC §5.3)
//   kv_bits=16|4         zack/fdc page format: 16 = f16 (default); 4 = 4-bit codes with an f16
//                        min/step per token and head (core/ragged_q4.h; bases folded with a
//                        per-channel equalization), ~4x smaller pages. Not for palu.
//   equalize=1|0         kv_bits=4 only: the channel equalization (1, default) or none (0: the
//                        rotated basis quantized as it is; an ablation)
//   fold_qk=1|0          layers without RoPE (SmolLM3): 1 (default) folds R_k into W_Q and W_K at
//                        load (ZACK Lemma 1; no online projection of q and k there); 0 keeps the
//                        online projection (zack/fdc; same attention up to rounding; palu refuses
//                        0 on a model with such layers). No effect on a model whose layers all use RoPE.
#include <cstdlib>
#include <string>

#include "engine/kv_method_lowrank.h"
#include "engine/method_option_reader.h"

namespace kvcomp::engine {

namespace {

namespace hl = host::lowrank;

}  // namespace

lowrank_method_config lowrank_config_from(hl::lowrank_method m, const method_options & o) {
    const std::string name = hl::lowrank_method_name(m);
    option_reader r(name, o);
    lowrank_method_config c;
    c.choice.method = m;
    c.choice.calib_path = r.text("calib", "");
    if (r.has("removal_rate")) c.choice.removal_rate = r.real("removal_rate", 0.0, 0.0, 1.0);
    if (r.has("compression")) c.choice.compression = r.real("compression", 0.0, 0.0, 1.0);
    const bool multiple_given = r.has("rank_multiple");
    c.choice.rank_multiple = r.integer("rank_multiple", 16, 1, max_ragged_width);
    c.balanced_schedule = r.word("schedule", "balanced", {"balanced", "plain"}) == "balanced";
    const bool workers_given = r.has("workers");
    c.worker_scale = int(r.auto_or_integer("workers", 1, 16).value_or(0));
    const bool token_cost_given = r.has("token_cost");
    c.token_cost = r.auto_or_integer("token_cost", 0, 4096).value_or(-1);
    const bool task_cost_given = r.has("task_cost");
    c.task_cost = r.auto_or_integer("task_cost", 0, int64_t(1) << 30).value_or(-1);
    const bool tail_given = r.has("tail");
    c.tail_percent = r.auto_or_integer("tail", 0, 50).value_or(-1);
    c.prefill_balance = r.integer("prefill_balance", 1, 0, 1) == 1;
    c.padded_prefill = r.word("prefill", "padded", {"padded", "ragged"}) == "padded";
    c.kv_bits = std::stoi(r.word("kv_bits", "16", {"16", "4"}));
    const bool equalize_given = r.has("equalize");
    c.equalize = r.integer("equalize", 1, 0, 1) == 1;
    c.fold_qk = r.integer("fold_qk", 1, 0, 1) == 1;
    r.finish();
    KVCOMP_CHECK_ARG(!equalize_given || c.kv_bits == 4, "method ", name,
                     ": option equalize only applies with kv_bits=4");
    KVCOMP_CHECK_ARG(!workers_given || c.balanced_schedule, "method ", name,
                     ": option workers only applies with schedule=balanced");
    KVCOMP_CHECK_ARG(!token_cost_given || c.balanced_schedule, "method ", name,
                     ": option token_cost only applies with schedule=balanced");
    KVCOMP_CHECK_ARG(!task_cost_given || c.balanced_schedule, "method ", name,
                     ": option task_cost only applies with schedule=balanced");
    KVCOMP_CHECK_ARG(!tail_given || c.balanced_schedule, "method ", name,
                     ": option tail only applies with schedule=balanced");
    KVCOMP_CHECK_ARG(c.kv_bits == 16 || m != hl::lowrank_method::palu, "method ", name,
                     ": option kv_bits=", c.kv_bits,
                     " is not supported for palu (its latent K is reconstructed at full width "
                     "every step; kv_bits=4 is for zack and fdc)");
    KVCOMP_CHECK_ARG(!c.choice.calib_path.empty(), "method ", name,
                     ": option calib=FILE is required (a calibration file from kvcomp calibrate --method ",
                     name, ")");
    KVCOMP_CHECK_ARG(!(c.choice.removal_rate && c.choice.compression), "method ", name,
                     ": give at most one of removal_rate and compression");
    // The open ends of the ranges (r = 1 keeps one dim everywhere, p = 0 removes nothing) are
    // rejected: neither is an operating point, and p = 0 is what the file's r = 0 ranks already give.
    if (c.choice.removal_rate)
        KVCOMP_CHECK_ARG(*c.choice.removal_rate < 1.0, "method ", name,
                         ": option removal_rate=", *c.choice.removal_rate, " must be in [0, 1)");
    if (c.choice.compression)
        KVCOMP_CHECK_ARG(*c.choice.compression > 0.0 && *c.choice.compression < 1.0, "method ", name,
                         ": option compression=", *c.choice.compression, " must be in (0, 1)");
    KVCOMP_CHECK_ARG(
        !multiple_given || c.choice.removal_rate || c.choice.compression, "method ", name,
        ": rank_multiple only applies when ranks are re-chosen (with removal_rate or compression)");
    return c;
}

namespace {

std::unique_ptr<kv_method> make(hl::lowrank_method m, const method_options & o) {
    return make_lowrank_method(lowrank_config_from(m, o));
}

}  // namespace

std::unique_ptr<kv_method> make_kv_method_zack(const method_options & o) {
    return make(hl::lowrank_method::zack, o);
}
std::unique_ptr<kv_method> make_kv_method_fdc(const method_options & o) {
    return make(hl::lowrank_method::fdc, o);
}
std::unique_ptr<kv_method> make_kv_method_palu(const method_options & o) {
    return make(hl::lowrank_method::palu, o);
}

}  // namespace kvcomp::engine
