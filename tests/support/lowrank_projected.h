// Test support for the low-rank KV methods: an independent construction of what they compute, and
// calibration files with uneven ranks.
//
// Attention on q R_k and k R_k equals attention on q and k R_k R_k^T, and folding R_v into W_V / W_O
// equals replacing v by v R_v R_v^T: so zack / fdc at any ranks are the uncompressed cache fed with
// k and v projected on the host (post-RoPE on layers with RoPE), and palu is that with k projected
// before RoPE. projected_none does the projection on downloaded k / v in double and hands them to
// method "none"; nothing of the low-rank ops or of their tables is used, so a wrong offset for
// uneven head widths, or a wrong basis folded into a weight, shows against it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv_method.h"
#include "support/forwarding_kv_method.h"
#include "host/lowrank/calibration_file.h"

namespace kvcomp::test::lowrank {

class projected_none : public forwarding_kv_method {
  public:
    // proj_k / proj_v: [layer * n_kv_heads + c] the d x d projector R R^T of that head (row-major).
    // k_pre_rope: k reaches attend() unrotated (palu) and is rotated here after the projection, on
    // the layers rope_layers marks (empty: every layer; theta: rope_theta, no scaling).
    projected_none(std::vector<std::vector<double>> proj_k, std::vector<std::vector<double>> proj_v,
                   bool k_pre_rope, float theta, std::vector<bool> rope_layers = {});
    std::string name() const override { return "projected_none"; }
    const engine::layer_projection * projection(int64_t) const override { return &proj_; }
    void allocate(backend & be, const engine::kv_shape & shape) override;
    void attend(backend & be, int64_t layer, const engine::kv_step & s, const tensor & q, const tensor & k,
                const tensor & v, const tensor & out, float scale) override;

  private:
    void project(backend & be, const tensor & x, const tensor & y, const std::vector<std::vector<double>> & p,
                 int64_t layer);

    std::vector<std::vector<double>> pk_, pv_;
    engine::layer_projection proj_;
    float theta_;
    std::vector<bool> rope_layers_;
    engine::kv_shape shape_;
    buffer_ptr buf_;
};

// R[:, :rank] R[:, :rank]^T of one head.
std::vector<double> projector(const host::lowrank::head_basis & b, int64_t rank);

// The full calibration file of `method` for `dir` (calib_file) with ranks set by hand (the method
// serves a file's ranks as they are): uneven and odd widths per head and side, different in each
// layer. Returns its path; *out receives its contents.
std::string uneven_calib_file(const std::string & method, const std::string & dir,
                              host::lowrank::calibration * out = nullptr);

// The projected_none of a calibration's ranks (what `method` computes with that file).
std::unique_ptr<projected_none> projected_reference(const host::lowrank::calibration & c, bool palu,
                                                    float theta, std::vector<bool> rope_layers = {});

}  // namespace kvcomp::test::lowrank
