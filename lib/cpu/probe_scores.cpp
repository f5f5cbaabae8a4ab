// probe_scores: column sums of the probe queries' causal attention rows (ZipCache saliency), in
// double. Rows are normalized over the keys the probe sees, or by the supplied log-denominators.
// In the ragged form a probe walks only its own request's keys.
#include <cmath>

#include "cpu/cpu_common.h"
#include "cpu/kv_source.h"

namespace kvcomp::cpu {

void run_probe_scores(const op_desc & op) {
    const auto & p = op.get<probe_scores_params>();
    const int64_t hd = p.head_dim, group = p.n_q_heads / p.n_kv_heads;
    const float * q = ptr<const float>(op.src[0]);
    const int32_t * probe_pos = ptr<const int32_t>(op.src[1]);
    const int32_t * key_pos = ptr<const int32_t>(op.src[3]);
    const float * lse = p.use_lse ? ptr<const float>(op.src[4]) : nullptr;
    // The single-request form is one request owning every probe and key.
    const int64_t batch = p.batch > 0 ? p.batch : 1;
    const int32_t whole_p[2] = {0, int32_t(p.n_probes)}, whole_k[2] = {0, int32_t(p.n_keys)};
    const int32_t * probe_indptr = p.batch > 0 ? ptr<const int32_t>(op.src[5]) : whole_p;
    const int32_t * key_indptr = p.batch > 0 ? ptr<const int32_t>(op.src[6]) : whole_k;
    float * scores = ptr<float>(op.dst[0]);
    std::vector<double> acc(size_t(p.n_kv_heads * p.n_keys), 0.0), logit(size_t(p.n_keys));
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t k0 = key_indptr[b], k1 = key_indptr[b + 1];
        for (int64_t pr = probe_indptr[b]; pr < probe_indptr[b + 1]; ++pr) {
            for (int64_t h = 0; h < p.n_q_heads; ++h) {
                const int64_t kvh = h / group;
                const float * qr = q + (pr * p.n_q_heads + h) * hd;
                double mx = -INFINITY;
                for (int64_t i = k0; i < k1; ++i) {
                    if (key_pos[i] > probe_pos[pr]) continue;
                    double dot = 0.0;
                    for (int64_t c = 0; c < hd; ++c)
                        dot += double(qr[c]) *
                               double(load_float(op.src[2], source_index(i, kvh, c, p.row_tokens, p.n_kv_heads, hd)));
                    logit[size_t(i)] = dot * double(p.scale);
                    mx = std::fmax(mx, logit[size_t(i)]);
                }
                if (mx == -INFINITY) continue;  // the probe sees none of these keys
                double log_den;
                if (lse) {
                    log_den = double(lse[pr * p.n_q_heads + h]);
                } else {
                    double sum = 0.0;
                    for (int64_t i = k0; i < k1; ++i)
                        if (key_pos[i] <= probe_pos[pr]) sum += std::exp(logit[size_t(i)] - mx);
                    log_den = mx + std::log(sum);
                }
                for (int64_t i = k0; i < k1; ++i)
                    if (key_pos[i] <= probe_pos[pr])
                        acc[size_t(kvh * p.n_keys + i)] += std::exp(logit[size_t(i)] - log_den);
            }
        }
    }
    for (size_t i = 0; i < acc.size(); ++i) scores[i] = float(acc[i]);
}

}  // namespace kvcomp::cpu
