// Per-head SVD bases with Eigen. See svd_basis.h for conventions.
#include "host/lowrank/svd_basis.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <Eigen/Dense>

#include "core/error.h"

namespace kvcomp::host::lowrank {

namespace {

using Eigen::Index;
using Eigen::MatrixXd;

// Flips each column of v (and of u when given) so that the column's largest-magnitude entry is
// positive; the first such entry wins on exact ties, so the result depends only on the numbers.
void canonicalize_signs(MatrixXd & v, MatrixXd * u) {
    for (Index j = 0; j < v.cols(); ++j) {
        Index best = 0;
        for (Index i = 1; i < v.rows(); ++i)
            if (std::abs(v(i, j)) > std::abs(v(best, j))) best = i;
        if (v(best, j) < 0.0) {
            v.col(j) *= -1.0;
            if (u && j < u->cols()) u->col(j) *= -1.0;
        }
    }
}

svd_basis to_result(const MatrixXd & v, const Eigen::VectorXd & sigma_in, const MatrixXd * u) {
    svd_basis out;
    const Index d = v.rows();
    out.dim = int64_t(d);
    out.basis.resize(size_t(d * d));
    for (Index i = 0; i < d; ++i)
        for (Index j = 0; j < d; ++j) out.basis[size_t(i * d + j)] = v(i, j);
    out.sigma.assign(size_t(d), 0.0);
    for (Index j = 0; j < sigma_in.size() && j < d; ++j) out.sigma[size_t(j)] = std::max(sigma_in(j), 0.0);
    if (u) {
        const Index n = u->rows();
        out.u.assign(size_t(n * d), 0.0);
        for (Index i = 0; i < n; ++i)
            for (Index j = 0; j < u->cols() && j < d; ++j) out.u[size_t(i * d + j)] = (*u)(i, j);
    }
    return out;
}

// SVD of an assembled X (rows = samples). Full V so that R is a complete d x d basis even when
// there are fewer rows than columns; JacobiSVD because it is the accurate one and d is small.
svd_basis svd_of(const MatrixXd & x, bool want_u) {
    const unsigned opts = Eigen::ComputeFullV | (want_u ? unsigned(Eigen::ComputeThinU) : 0u);
    Eigen::JacobiSVD<MatrixXd> svd(x, opts);
    MatrixXd v = svd.matrixV();
    MatrixXd u;
    if (want_u) u = svd.matrixU();
    canonicalize_signs(v, want_u ? &u : nullptr);
    return to_result(v, svd.singularValues(), want_u ? &u : nullptr);
}

double checked(const mat_view & m, int64_t i, int64_t j, const std::string & what, const char * block) {
    const double x = m.element(i, j);
    KVCOMP_CHECK_ARG(std::isfinite(x), what, ": ", block, " element (", i, ", ", j, ") is ", x,
                     " (not finite)");
    return x;
}

void check_view(const mat_view & m, const std::string & what, const char * block) {
    KVCOMP_CHECK_ARG(!m.empty_data() || m.rows() * m.cols() == 0, what, ": ", block, " has no data");
    KVCOMP_CHECK_ARG(m.rows() >= 0 && m.cols() > 0, what, ": ", block, " has shape [", m.rows(), ",",
                     m.cols(), "]; needs rows >= 0 and cols > 0");
}

}  // namespace

svd_basis stacked_svd(const std::vector<mat_view> & blocks, const std::string & what, bool want_u) {
    KVCOMP_CHECK_ARG(!blocks.empty(), what, ": no blocks to stack");
    int64_t rows = 0;
    const int64_t d = blocks[0].cols();
    for (size_t b = 0; b < blocks.size(); ++b) {
        const std::string name = concat("block ", b);
        check_view(blocks[b], what, name.c_str());
        KVCOMP_CHECK_ARG(blocks[b].cols() == d, what, ": block ", b, " has ", blocks[b].cols(),
                         " columns, block 0 has ", d, " (all blocks must share head_dim)");
        rows += blocks[b].rows();
    }
    KVCOMP_CHECK_ARG(rows > 0, what, ": the stacked matrix has no rows");
    MatrixXd x(rows, d);
    Index r = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
        const std::string name = concat("block ", b);
        for (int64_t i = 0; i < blocks[b].rows(); ++i, ++r)
            for (int64_t j = 0; j < d; ++j) x(r, j) = checked(blocks[b], i, j, what, name.c_str());
    }
    return svd_of(x, want_u);
}

svd_basis qk_basis(const std::vector<mat_view> & q_heads, const mat_view & k) {
    KVCOMP_CHECK_ARG(!q_heads.empty(),
                     "qk_basis: no query heads (the basis is shared by Q and K: pass the "
                     "GQA group's post-RoPE queries)");
    std::vector<mat_view> blocks = q_heads;
    blocks.push_back(k);
    return stacked_svd(blocks, "qk_basis [Q_p(g=" + std::to_string(q_heads.size()) + "); K_p]");
}

svd_basis zack_v_basis(const mat_view & v, const mat_view & o_proj, const std::vector<int64_t> & q_heads,
                       double w_o_scale) {
    const std::string what = "zack_v_basis";
    check_view(v, what, "V");
    check_view(o_proj, what, "o_proj");
    const int64_t d = v.cols();
    KVCOMP_CHECK_ARG(o_proj.cols() % d == 0, what, ": o_proj has ", o_proj.cols(),
                     " columns, not a multiple of V's head_dim ", d,
                     " (expected hidden x num_q_heads*head_dim)");
    const int64_t nq = o_proj.cols() / d;
    KVCOMP_CHECK_ARG(!q_heads.empty(), what, ": no query heads given for the KV head's group");
    std::set<int64_t> seen;
    for (int64_t h : q_heads) {
        KVCOMP_CHECK_ARG(h >= 0 && h < nq, what, ": query head ", h, " outside [0, ", nq, ") (o_proj has ",
                         nq, " heads of ", d, ")");
        KVCOMP_CHECK_ARG(seen.insert(h).second, what, ": query head ", h, " listed twice");
    }
    KVCOMP_CHECK_ARG(std::isfinite(w_o_scale) && w_o_scale > 0.0, what, ": w_o_scale ", w_o_scale,
                     " must be finite and > 0");
    const int64_t hidden = o_proj.rows();
    MatrixXd x(v.rows() + int64_t(q_heads.size()) * hidden, d);
    Index r = 0;
    for (int64_t i = 0; i < v.rows(); ++i, ++r)
        for (int64_t j = 0; j < d; ++j) x(r, j) = checked(v, i, j, what, "V");
    // (W_O^h)^T, hidden x d, is column block h of the HF o_proj weight.
    for (int64_t h : q_heads)
        for (int64_t i = 0; i < hidden; ++i, ++r)
            for (int64_t j = 0; j < d; ++j)
                x(r, j) = w_o_scale * checked(o_proj, i, h * d + j, what, "o_proj");
    KVCOMP_CHECK_ARG(x.rows() > 0, what, ": the stacked matrix has no rows");
    return svd_of(x, false);
}

svd_basis fdc_v_basis(const mat_view & v_proj, int64_t kv_head, int64_t head_dim) {
    const std::string what = "fdc_v_basis";
    check_view(v_proj, what, "v_proj");
    KVCOMP_CHECK_ARG(head_dim > 0 && v_proj.rows() % head_dim == 0, what, ": v_proj has ", v_proj.rows(),
                     " rows, not a multiple of head_dim ", head_dim,
                     " (expected num_kv_heads*head_dim x hidden)");
    const int64_t nkv = v_proj.rows() / head_dim;
    KVCOMP_CHECK_ARG(kv_head >= 0 && kv_head < nkv, what, ": kv_head ", kv_head, " outside [0, ", nkv, ")");
    // W_V^c (hidden x head_dim) is the transpose of row block kv_head.
    const int64_t hidden = v_proj.cols();
    MatrixXd x(hidden, head_dim);
    for (int64_t j = 0; j < head_dim; ++j)
        for (int64_t i = 0; i < hidden; ++i)
            x(i, j) = checked(v_proj, kv_head * head_dim + j, i, what, "v_proj");
    return svd_of(x, false);
}

gram_accumulator::gram_accumulator(int64_t dim) : dim_(dim) {
    KVCOMP_CHECK_ARG(dim > 0, "gram_accumulator: dim ", dim, " must be > 0");
    gram_.assign(size_t(dim * dim), 0.0);
}

void gram_accumulator::add(const mat_view & block, double weight) {
    check_view(block, "gram_accumulator::add", "block");
    KVCOMP_CHECK_ARG(block.cols() == dim_, "gram_accumulator::add: block has ", block.cols(),
                     " columns, expected dim ", dim_);
    KVCOMP_CHECK_ARG(std::isfinite(weight), "gram_accumulator::add: weight ", weight, " is not finite");
    MatrixXd b(block.rows(), dim_);
    for (int64_t i = 0; i < block.rows(); ++i)
        for (int64_t j = 0; j < dim_; ++j)
            b(i, j) = weight * checked(block, i, j, "gram_accumulator::add", "block");
    Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> g(gram_.data(), dim_,
                                                                                         dim_);
    g.noalias() += b.transpose() * b;
    rows_ += block.rows();
}

svd_basis basis_from_gram(const std::vector<double> & gram, int64_t dim, const std::string & what) {
    KVCOMP_CHECK_ARG(dim > 0 && int64_t(gram.size()) == dim * dim, what, ": Gram matrix has ", gram.size(),
                     " values, expected dim*dim = ", dim, "*", dim);
    MatrixXd g(dim, dim);
    double scale = 0.0;
    for (int64_t i = 0; i < dim; ++i)
        for (int64_t j = 0; j < dim; ++j) {
            g(i, j) = gram[size_t(i * dim + j)];
            KVCOMP_CHECK_ARG(std::isfinite(g(i, j)), what, ": Gram element (", i, ", ", j, ") is not finite");
            scale = std::max(scale, std::abs(g(i, j)));
        }
    for (int64_t i = 0; i < dim; ++i)
        for (int64_t j = 0; j < i; ++j)
            KVCOMP_CHECK_ARG(std::abs(g(i, j) - g(j, i)) <= 1e-9 * scale, what,
                             ": Gram matrix not symmetric at (", i, ", ", j, "): ", g(i, j), " vs ", g(j, i));
    Eigen::SelfAdjointEigenSolver<MatrixXd> eig(g);
    KVCOMP_CHECK_ARG(eig.info() == Eigen::Success, what, ": eigendecomposition did not converge");
    // Eigen orders eigenvalues ascending; the basis wants sigma descending.
    MatrixXd v = eig.eigenvectors().rowwise().reverse();
    Eigen::VectorXd sigma = eig.eigenvalues().reverse().cwiseMax(0.0).cwiseSqrt();
    canonicalize_signs(v, nullptr);
    return to_result(v, sigma, nullptr);
}

}  // namespace kvcomp::host::lowrank
