// attn_decode_palu: Palu's decode. Every cached key is rebuilt from its pre-RoPE latent
// (latent . B_c), rotated at its position with the rope op's pairing (lib/cpu/rope.cpp), and
// attended at the full head_dim; values stay latents. Reconstruction and angles in double: the
// oracle should carry neither fp32 reconstruction nor phase error.
#include <cmath>

#include "cpu/attn_common.h"
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

void run_attn_decode_palu(const op_desc & op) {
    const auto & p = op.get<attn_decode_palu_params>();
    const ragged_layout & l = p.kv;
    const std::string what = describe(op);
    const auto heads = read_ragged_heads(op.src[6], l.n_kv_heads, l.k_total, l.v_total, l.max_width, what);
    const float * q = ptr<const float>(op.src[0]);
    const uint16_t * kp = ptr<const uint16_t>(op.src[1]);
    const uint16_t * vp = ptr<const uint16_t>(op.src[2]);
    const int32_t * indptr = ptr<const int32_t>(op.src[3]);
    const int32_t * indices = ptr<const int32_t>(op.src[4]);
    const int32_t * last = ptr<const int32_t>(op.src[5]);
    const float * aux = ptr<const float>(op.src[9]);
    const float * inv_freq = aux + p.head_dim * l.k_total;
    float * out = ptr<float>(op.dst[0]);
    const auto lens = ragged_seq_lens(indptr, last, p.batch, l.page_size, p.nnz_pages, p.max_seq_len, what);
    check_decode_schedule(ptr<const int32_t>(op.src[7]), ptr<const int32_t>(op.src[8]), p.n_tasks, p.batch,
                          l.n_kv_heads, lens, what);
    const int64_t g = p.n_q_heads / l.n_kv_heads, hd = p.head_dim, half = p.rot_dim / 2;
    std::vector<double> scores, lat(static_cast<size_t>(hd)), key_row(static_cast<size_t>(hd));
    for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t c = 0; c < l.n_kv_heads; ++c) {
            const ragged_head & h = heads[size_t(c)];
            const float * basis = aux + hd * h.k_offset;  // [k_width, head_dim], row-major
            auto key = [&](int64_t j) {
                const int64_t page = ragged_page_of(indptr, indices, b, j, l.page_size, l.n_pages, what);
                const uint16_t * z =
                    kp + ragged_slot(page, j % l.page_size, l.page_size, l.k_total, h.k_width, h.k_offset);
                for (int64_t d = 0; d < hd; ++d) lat[size_t(d)] = 0.0;
                for (int64_t r = 0; r < h.k_width; ++r) {
                    const double zr = half_to_float(z[r]);
                    for (int64_t d = 0; d < hd; ++d) lat[size_t(d)] += zr * double(basis[r * hd + d]);
                }
                for (int64_t d = 0; d < hd; ++d) key_row[size_t(d)] = lat[size_t(d)];
                for (int64_t i = 0; i < half; ++i) {
                    const double a = double(j) * double(inv_freq[i]);
                    const double cs = std::cos(a), sn = std::sin(a);
                    const int64_t i0 = p.style == rope_style::neox ? i : 2 * i;
                    const int64_t i1 = p.style == rope_style::neox ? i + half : 2 * i + 1;
                    const double x0 = lat[size_t(i0)], x1 = lat[size_t(i1)];
                    key_row[size_t(i0)] = x0 * cs - x1 * sn;
                    key_row[size_t(i1)] = x1 * cs + x0 * sn;
                }
                return static_cast<const double *>(key_row.data());
            };
            auto value = [&](int64_t j) {
                const int64_t page = ragged_page_of(indptr, indices, b, j, l.page_size, l.n_pages, what);
                return vp + ragged_slot(page, j % l.page_size, l.page_size, l.v_total, h.v_width, h.v_offset);
            };
            for (int64_t i = 0; i < g; ++i) {
                const float * qr = q + (b * p.n_q_heads + c * g + i) * hd;
                float * o = out + b * g * l.v_total + g * h.v_offset + i * h.v_width;
                attend_row_kv(qr, lens[size_t(b)], hd, h.v_width, p.scale, key, value, o, scores);
            }
        }
    }
}

}  // namespace kvcomp::cpu
