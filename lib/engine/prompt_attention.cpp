#include "engine/prompt_attention.h"

namespace kvcomp::engine {

bool attend_prompt(backend & be, buffer_ptr & scratch, const kv_shape & shape, const kv_step & s, const tensor & q,
                   const tensor & k, const tensor & v, const tensor & out, float scale, const tensor & lse) {
    const int64_t n = s.n_tokens * shape.n_kv_heads * shape.head_dim;
    if (!scratch || scratch->size() < size_t(n) * 4) scratch = be.alloc(size_t(n) * 4);
    const tensor k16 = make_tensor(scratch.get(), dtype::f16, {s.n_tokens, shape.n_kv_heads, shape.head_dim});
    const tensor v16 =
        make_tensor(scratch.get(), dtype::f16, {s.n_tokens, shape.n_kv_heads, shape.head_dim}, size_t(n) * 2);
    be.run(make_op(copy_params{n}, {k}, {k16}));
    be.run(make_op(copy_params{n}, {v}, {v16}));
    attn_prefill_params p;
    p.batch = s.batch, p.n_tokens = s.n_tokens, p.n_q_heads = shape.n_q_heads;
    p.n_kv_heads = shape.n_kv_heads, p.head_dim = shape.head_dim, p.max_seq_len = s.max_seq_len;
    p.scale = scale;
    if (lse.buf) {
        const op_desc with_lse = make_op(p, {q, k16, v16, s.seq_indptr}, {out, lse});
        if (be.supports(with_lse).ok) {
            be.run(with_lse);
            return true;
        }
    }
    be.run(make_op(p, {q, k16, v16, s.seq_indptr}, {out}));
    return false;
}

}  // namespace kvcomp::engine
