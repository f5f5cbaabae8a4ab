// Orthonormal per-head bases by SVD (Eigen, double precision): the R of ZACK/FDC (digest
// research/zack_fdc.md §1.2, §1.4, §1.5, §10.8) for the K side (shared with Q) and the V side.
//
// Convention: rows of a matrix are samples (tokens, or weight rows), columns are the head_dim
// features. For a stacked X (n x d) = U Sigma R^T, the basis R is d x d with column j the j-th right
// singular vector, columns ordered by sigma descending; sigma has d values (zeros appended when
// n < d, with R still completed to a full orthonormal d x d basis). Compressing a row x to rank k is
// x R[:, :k].
//
// Signs: SVD leaves each column's sign free (§10.16), which would make calibration files differ run
// to run. Every column (and its U column) is flipped so that its entry of largest magnitude is
// positive; on exact ties in magnitude the lowest row index decides.
//
// Memory: the direct SVD holds the whole stacked matrix. For long calibration runs, accumulate
// X^T X with gram_accumulator and call basis_from_gram (same R, sigma = sqrt(eigenvalues)); the
// Gram route squares the condition number, so tiny sigma lose relative precision, which does not
// matter for choosing ranks or for the leading columns of R.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvcomp::host::lowrank {

// A non-owning row-major matrix of float or double. element(i, j) reads data[i * cols + j].
class mat_view {
  public:
    mat_view(const float * data, int64_t rows, int64_t cols) : f32_(data), rows_(rows), cols_(cols) {}
    mat_view(const double * data, int64_t rows, int64_t cols) : f64_(data), rows_(rows), cols_(cols) {}
    static mat_view of(const std::vector<float> & v, int64_t rows, int64_t cols) {
        return {v.data(), rows, cols};
    }
    static mat_view of(const std::vector<double> & v, int64_t rows, int64_t cols) {
        return {v.data(), rows, cols};
    }

    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    bool empty_data() const { return f32_ == nullptr && f64_ == nullptr; }
    double element(int64_t i, int64_t j) const {
        return f32_ ? double(f32_[i * cols_ + j]) : f64_[i * cols_ + j];
    }

  private:
    const float * f32_ = nullptr;
    const double * f64_ = nullptr;
    int64_t rows_ = 0, cols_ = 0;
};

struct svd_basis {
    int64_t dim = 0;            // d (head_dim)
    std::vector<double> basis;  // R: d x d row-major; basis[i * d + j] = component i of vector j
    std::vector<double> sigma;  // d values, non-increasing, >= 0
    // U (n x d row-major, n = stacked rows) only when asked for; columns j >= min(n, d) are zero.
    std::vector<double> u;

    double at(int64_t i, int64_t j) const { return basis[size_t(i * dim + j)]; }
};

// SVD of the blocks stacked vertically (rows appended in order). Every block must have the same
// number of columns (> 0) and at least one row in total; the message names `what`, the block index
// and the offending shape or non-finite element. want_u also returns U.
svd_basis stacked_svd(const std::vector<mat_view> & blocks, const std::string & what, bool want_u = false);

// K side of ZACK / FDC for one (layer, KV head): X = [Q_p^{h1}; ...; Q_p^{hg}; K_p^c], the post-RoPE
// queries of the g query heads that share KV head c and that head's post-RoPE keys, each
// tokens x head_dim (§10.8: one R per KV head, shared by its GQA group). Needs >= 1 query block.
svd_basis qk_basis(const std::vector<mat_view> & q_heads, const mat_view & k);

// V side of ZACK for one KV head: X = [V^c; s * (W_O^{h1})^T; ...; s * (W_O^{hg})^T] (Z§4.3, §10.8).
// v: tokens x head_dim. o_proj: the layer's o_proj.weight in Hugging Face layout, hidden x
// (num_q_heads * head_dim), so (W_O^h)^T (hidden x head_dim) is its column block h. q_heads lists the
// query heads of the group (indices into o_proj's column blocks). w_o_scale (default 1, the paper's
// unweighted stack) scales the weight rows relative to the activations (§10.5).
svd_basis zack_v_basis(const mat_view & v, const mat_view & o_proj, const std::vector<int64_t> & q_heads,
                       double w_o_scale = 1.0);

// V side of FDC (Palu-style, §10.9 "FDC-faithful"): the right singular vectors of W_V^c (hidden x
// head_dim). v_proj: the layer's v_proj.weight in Hugging Face layout, (num_kv_heads * head_dim) x
// hidden, so (W_V^c)^T is its row block kv_head.
svd_basis fdc_v_basis(const mat_view & v_proj, int64_t kv_head, int64_t head_dim);

// Streaming X^T X over row blocks, in double, for calibration sets too large to stack.
class gram_accumulator {
  public:
    explicit gram_accumulator(int64_t dim);
    // Adds block^T block * weight^2 (the Gram of the rows scaled by `weight`). block.cols() must be dim.
    void add(const mat_view & block, double weight = 1.0);
    int64_t dim() const { return dim_; }
    int64_t rows_added() const { return rows_; }
    const std::vector<double> & gram() const { return gram_; }  // dim x dim row-major, symmetric

  private:
    int64_t dim_;
    int64_t rows_ = 0;
    std::vector<double> gram_;
};

// R and sigma from a Gram matrix G = X^T X (symmetric positive semi-definite, d x d row-major):
// eigenvectors by eigenvalue descending, sigma = sqrt(max(eigenvalue, 0)), same sign convention.
// No U. Throws invalid_argument for a bad size, non-finite or non-symmetric input.
svd_basis basis_from_gram(const std::vector<double> & gram, int64_t dim, const std::string & what);

}  // namespace kvcomp::host::lowrank
