// A kv_method that forwards every call to an inner method. The tests' wrappers (a probe that records
// what attend() receives, host-side reference caches built on method "none") derive from it and
// override only the calls they change, so none of them drops one of the interface's calls.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "engine/kv_method.h"

namespace kvcomp::test {

class forwarding_kv_method : public engine::kv_method {
  public:
    explicit forwarding_kv_method(std::unique_ptr<engine::kv_method> inner) : inner_(std::move(inner)) {}

    std::string name() const override { return inner_->name(); }
    void prepare(backend & be, const engine::model_context & m) override { inner_->prepare(be, m); }
    const engine::layer_projection * projection(int64_t layer) const override { return inner_->projection(layer); }
    uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
    void allocate(backend & be, const engine::kv_shape & shape) override { inner_->allocate(be, shape); }
    uint64_t bytes_allocated() const override { return inner_->bytes_allocated(); }
    uint64_t bytes_for_tokens(int64_t tokens) const override { return inner_->bytes_for_tokens(tokens); }
    void attend(backend & be, int64_t layer, const engine::kv_step & s, const tensor & q, const tensor & k,
                const tensor & v, const tensor & out, float scale) override {
        inner_->attend(be, layer, s, q, k, v, out, scale);
    }
    uint64_t bytes_held(int64_t seq, int64_t tokens) const override { return inner_->bytes_held(seq, tokens); }
    void maintain(backend & be, const engine::kv_step & s) override { inner_->maintain(be, s); }
    void release(int64_t seq) override { inner_->release(seq); }
    int64_t pages_in_use() const override { return inner_->pages_in_use(); }

  protected:
    engine::kv_method & inner() { return *inner_; }

  private:
    std::unique_ptr<engine::kv_method> inner_;
};

}  // namespace kvcomp::test
