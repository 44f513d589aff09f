#include "models/loaded_matrix.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace qjit_models::llama {

LoadedMatrix LoadedMatrix::dense(std::string name, int64_t n, int64_t k, std::vector<float> n_by_k) {
    if (n < 1 || k < 1 || n_by_k.size() != size_t(n) * size_t(k))
        throw std::runtime_error("matrix " + name + ": " + std::to_string(n_by_k.size()) + " values are not " +
                                 std::to_string(n) + " x " + std::to_string(k));
    LoadedMatrix source;
    source.name_ = std::move(name);
    source.n_ = n;
    source.k_ = k;
    source.dense_ = std::make_shared<const std::vector<float>>(std::move(n_by_k));
    return source;
}

LoadedMatrix LoadedMatrix::ggml(std::string name, int64_t n, int64_t k, GgmlMatrix ggml, RowDecoder decode_row,
                                std::shared_ptr<const void> owner, std::function<void()> release) {
    if (n < 1 || k < 1 || !ggml.data || !decode_row)
        throw std::runtime_error("matrix " + name + ": a ggml source needs n, k >= 1, data and a row decoder");
    LoadedMatrix source;
    source.name_ = std::move(name);
    source.n_ = n;
    source.k_ = k;
    source.ggml_ = std::make_shared<const GgmlMatrix>(ggml);
    source.decode_row_ = std::move(decode_row);
    source.owner_ = std::move(owner);
    source.release_ = std::move(release);
    return source;
}

void LoadedMatrix::read_row(int64_t row, float* out) const {
    if (row < 0 || row >= n_)
        throw std::runtime_error("matrix " + name_ + ": row " + std::to_string(row) + " is outside [0, " +
                                 std::to_string(n_) + ")");
    if (dense_) {
        const float* values = dense_->data() + size_t(row) * size_t(k_);
        std::copy(values, values + k_, out);
    } else {
        decode_row_(row, out);
    }
}

std::span<const float> LoadedMatrix::dense_values(std::vector<float>& scratch) const {
    if (dense_) return *dense_;
    scratch.resize(size_t(n_) * size_t(k_));
    for (int64_t row = 0; row < n_; ++row) decode_row_(row, scratch.data() + size_t(row) * size_t(k_));
    return scratch;
}

}  // namespace qjit_models::llama
