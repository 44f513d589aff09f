// The portable CPU path: plain C++, multithreaded over column panels. It serves every format and
// stays as the fallback for what the generated kernels do not cover.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/cpu/cpu_layer.hpp"

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
// in plan order (the first writes y, the others add to it), the outliers, the compensator. It
// reads the scales and zero points as quantized (QuantParams' layout).
class PortableLayer final : public CpuLayer {
public:
    // Throws an invalid-argument Error for a product outside `params`' groups or at another width.
    PortableLayer(std::vector<Pass> passes, const QuantParams& params, PackedCodes codes,
                  std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool);

    // The portable path's answer to "do you run this format" ("" when it does).
    static std::string unsupported_reason(const WeightFormat& format);

    void forward(const float* x, int64_t m, float* y) const override;
    std::string kernel_name() const override;
    std::string kernel_fields() const override;

private:
    int64_t metadata_bytes() const override;
    void evict_metadata() const override;
};

}  // namespace qjit
