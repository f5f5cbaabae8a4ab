// kivi / zipcache storing the reduced cache of zack / fdc (option lowrank=zack|fdc of those methods):
// ZACK's combination of dimensionality compression with a quantizer, and ZipCache's with ZACK/FDC.
//
// At load the low-rank method's V basis is folded into W_V / W_O exactly as zack / fdc do
// (lowrank_device.h); every step q and k are projected online after RoPE (head_project with the K
// basis, on layers without RoPE too). The quantizing method then stores and attends on the reduced
// K/V as if the model had head_dim = rank: its blocks (core/qblock.h), fp16 window, saliency and
// decode kernels run unchanged at that width, on every backend whose kernels take it (CUDA's
// quantized decode: multiples of 16 from 32 to 128, on tensor cores at 64 and 128). The scale stays
// 1/sqrt(the model's head_dim): q'.k' approximates q.k.
//
// Every K and V head of every layer has the same rank (lowrank_choice::uniform_rank): a qblock layout
// has one head_dim, so ZACK's adaptive per-head ranks do not carry over here; the ranks-adaptive
// combination is zack / fdc with kv_bits=4 (core/ragged_q4.h).
#pragma once

#include <memory>

#include "engine/kv_method.h"
#include "engine/kv_method_quant.h"
#include "engine/lowrank_layout.h"

namespace kvcomp::engine {

// choice: zack or fdc with calib_path and uniform_rank set (a multiple of 16, at most head_dim).
std::unique_ptr<kv_method> make_lowrank_quant_method(const lowrank_choice & choice, const quant_method_config & quant);

}  // namespace kvcomp::engine
