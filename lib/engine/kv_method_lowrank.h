// The low-rank KV methods "zack", "fdc" and "palu" (digest research/zack_fdc.md §1.4-1.6, §5):
// every KV head c of every layer keeps k_c K dims and v_c V dims, from a calibration file made by
// `kvcomp calibrate --method M` (the full bases; ranks as in the file or re-chosen at load).
//
// Load (prepare): the V basis is folded into W_V, b_V and W_O on the device (lowrank_device.h), so
// v arrives compressed and the attention output (g * sum_c v_c values per token) goes straight
// into the smaller o_proj; the model's v_proj / o_proj are freed.
// Per layer and step (attend):
//   zack, fdc: q and k arrive post-RoPE; q' = q R_k^c(h) and k' = k R_k^c (head_project), k' and v'
//     appended to ragged pages (kv_append_ragged); prefill on the prompt's k'/v' (fp16, as cached);
//     decode: attn_decode_ragged with a task schedule built on the host for every layer once per
//     step (at layer 0) and uploaded in one transfer.
//   palu: k arrives pre-RoPE; the cached latent is k R_k^c; prefill reconstructs latent R_k^cT,
//     applies RoPE and attends at the full head_dim; decode is attn_decode_palu (reconstruction and
//     RoPE of every cached key inside the kernel; aux = R_k^T per head + the rope frequencies).
//   Layers without RoPE (SmolLM3's NoPE layers; option fold_qk=1, the default): the fully folded
//     mode of ZACK's Lemma 1 for all three methods. R_k goes into W_Q and W_K at load
//     (lowrank_device.h), so q' and k' come out of the projection GEMMs and no head_project runs on
//     them; attention as zack/fdc above (palu too: its cached latent is the same k R_k, and the
//     reconstruction R_k^T folds into W_Q, as Palu does without RoPE). Exact for the same reason
//     the online projection is (lowrank_layout.h, lowrank_layer::fold_qk). fold_qk=0 keeps the online
//     projection of zack/fdc there (palu refuses it on such a model).
// Prefill (option prefill=padded|ragged):
//   padded (default): every head zero-padded to head_dim with head_project (q' with the padding
//     folded into its basis; k', v' with [I_w | 0]) and the standard attn_prefill (CUDA's tensor-core
//     kernel); zero columns change no q'.k' and give zero output columns, which the unpad (I_w on
//     each head's first w columns) drops.
//     palu pads only v' (its q and reconstructed keys are full width).
//   ragged: attn_prefill_ragged in the reduced dims (SIMT; row blocks per prefill_balance).
//   Both give the same attention up to rounding.
// Logits use 1/sqrt(original head_dim) (the engine's scale).
//
// Storage per layer: k_pages f16 [n_pages, page_size * k_total], v_pages [n_pages, page_size *
// v_total], on the engine's page table. bytes_for_tokens(t) = pages(t) * page_size * sum over
// layers and KV heads of (k_c + v_c) * 2 bytes, exactly what those pages take.
// kv_bits=4 (zack, fdc; option kv_bits): the pages hold core/ragged_q4.h rows, u8 [n_pages,
// page_size * k_row_bytes] with k_row_bytes = sum over heads of 4 + 4 * ceil(k_c / 8) (v alike), and
// bytes_for_tokens uses those row bytes. The decoded K''/V'' are K' D_k^-1 / V' D_v^-1 with the
// equalization D folded into the bases at load (lowrank_layout.h), so q''.k'' = q'.k' and the
// W_O'' = W_O R_v D_v rows undo D_v; only the quantization error remains. Prefill attends to the
// exact (unquantized) K''/V'' of the prompt, like the f16 path, and then stores them quantized.
// So at full rank a decode step equals the uncompressed cache fed with dequant(quant(k R D^-1)) D R^T
// (and v alike): quantization in the equalized rotated basis, not in the original one (digest
// zack_fdc.md invariant 15).
#pragma once

#include <memory>

#include "engine/kv_method.h"
#include "engine/lowrank_layout.h"
#include "host/lowrank/decode_schedule.h"

namespace kvcomp::engine {

struct lowrank_method_config {
    lowrank_choice choice;
    bool balanced_schedule =
        true;  // decode tasks balanced over the compute units (else one per (request, head))
    // The balanced schedule's workers per compute unit; 0 (workers=auto) asks the backend how many
    // decode tasks run at once (backend::concurrent_workgroups, for palu's layers of attn_decode_palu).
    // 1 treats a compute unit as one worker, which undercounts where several blocks share an SM: the
    // CUDA tensor-core decodes keep 3-4 per SM (docs/RESULTS.md, "workers=auto").
    int worker_scale = 0;
    // The balanced schedule's per-token cost (decode_schedule_options::token_cost); -1 (token_cost=auto):
    // host::lowrank::default_token_cost of the page format.
    int64_t token_cost = -1;
    // ... and its per-task cost (decode_schedule_options::task_cost); -1 (task_cost=auto): the
    // backend's (backend::decode_task_cost), asked per layer.
    int64_t task_cost = -1;
    // ... and the share of each row's tokens cut into small pieces at the end of the task list
    // (decode_schedule_options::tail_percent), in [0, 50]; -1 (tail=auto): the backend's
    // (backend::decode_tail_percent), asked per layer.
    int64_t tail_percent = -1;
    bool prefill_balance =
        true;  // attn_prefill_ragged's per-head row blocks (attn_prefill_ragged_params::balanced)
    // Prompt attention: true runs attn_prefill (tensor cores on CUDA) on heads zero-padded to
    // head_dim; false runs attn_prefill_ragged in the reduced dims (prefill_balance applies there).
    bool padded_prefill = true;
    // Page format of zack/fdc: 16 = f16 elements; 4 = 4-bit rows with f16 min/step per token and
    // head (core/ragged_q4.h), the bases folded with the channel equalization D (see the top).
    int kv_bits = 16;
    bool equalize = true;  // kv_bits=4: fold the channel equalization D (off: D = 1, an ablation)
    // Layers without RoPE: fold R_k into W_Q / W_K (lowrank_choice::fold_qk, copied into it).
    bool fold_qk = true;
};

std::unique_ptr<kv_method> make_lowrank_method(const lowrank_method_config & cfg);
// The options of zack / fdc / palu ("--method-opt key=value", kv_method_lowrank_options.cpp), checked;
// throws invalid_argument naming the option.
lowrank_method_config lowrank_config_from(host::lowrank::lowrank_method m, const method_options & o);
// The decode schedule a method of this config builds each step (policy, per-token and per-task cost;
// the workers are the backend's), token_cost=auto resolved for its page format; task_cost=auto is
// the backend's and left 0 here (the method asks the backend per layer: decode_schedule_inputs_for).
host::lowrank::decode_schedule_options decode_schedule_options_for(const lowrank_method_config & c);
// What a layer's schedule search takes from the backend for the decode op the layer runs (`decode`:
// attn_decode_ragged_params, or attn_decode_palu_params on palu's layers): the workers it is cut for
// (workers=N: the compute units x N; auto: backend::concurrent_workgroups) and its per-task cost
// (task_cost=N; auto: backend::decode_task_cost) and tail (tail=N; auto: backend::decode_tail_percent).
// The method asks again when the batch changes.
struct decode_schedule_inputs {
    int64_t workers = 0, task_cost = 0, tail_percent = 0;
};
decode_schedule_inputs decode_schedule_inputs_for(const lowrank_method_config & c, backend & be,
                                                  const op_params & decode);

}  // namespace kvcomp::engine
