// The portable CPU path: plain C++, multithreaded over column panels. It serves every format and
// stays as the fallback for what the generated kernels do not cover.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/layer_backend.hpp"

namespace qjit {

struct PortableTiling {
    static constexpr int kChunkColumns = 64;  // columns one task accumulates (inside one packed panel)
    static constexpr int kBatchRows = 4;      // activation rows sharing one decode of a weight row
};

// One product pass: y[m][n] (+)= sum over the rows r of K-groups [first_group, end_group) of
// x[m][r] * W[r][n], x already in storage row order (act-order gathered). `accumulate`: add to y
// rather than overwrite it.
void portable_product(const QuantParams& params, const PackedCodes& codes, const Pass& product, bool accumulate,
                      const float* x, int64_t m, float* y, ThreadPool& pool);

// Runs a layer's plan one pass after another: the gather into a per-thread buffer, the products
// in plan order (the first writes y, the others add to it), the outliers, the compensator.
class PortableBackend final : public LayerBackend {
public:
    // Throws an invalid-argument Error for a product outside `format`'s groups or at another width.
    PortableBackend(std::vector<Pass> passes, const WeightFormat& format);

    // The portable path's answer to "do you run this format" ("" when it does).
    static std::string unsupported_reason(const WeightFormat& format);

    BackendKind kind() const override { return BackendKind::Portable; }
    void run(const qjit_linear& layer, const float* x, int64_t m, float* y) const override;
    std::string kernel_name(const qjit_linear& layer) const override;
    std::string kernel_fields(const qjit_linear& layer) const override;
    int64_t metadata_bytes(const qjit_linear& layer) const override;
    void evict_metadata(const qjit_linear& layer) const override;
};

}  // namespace qjit
