// A matrix of the formats only the mixed-format CUDA GEMV reads (jit/cuda/cuda_tiling.hpp,
// needs_mixed_kernel: K-groups of mixed widths, second-order scales, sparse outliers) in that
// kernel's layout, on the host:
//   codes        [np][column words]: column by column, each K-group's 32-code blocks at the group's
//                width (format/cuda_code_layout.hpp), the groups one after another
//   group_words  [num_groups + 1]: the word where each group starts within a column (the same for
//                every column); the last entry is a column's length
//   scales       fp16 or fp32 [num_groups][np]; or, second-order, codes [num_groups][np] (one byte
//                each) with an fp16 scale and zero per 16 columns [num_groups][np / 16]
//   zeros        [num_groups][np], one byte each (asymmetric; symmetric zeros are 2^(width - 1))
//   outliers     column_start [n + 1], storage rows and fp16 values, as SparseOutliers holds them
// K is padded to whole groups (kp = num_groups * group_size), N to padded_n; padding holds zero
// codes and scales.
#pragma once

#include <cstdint>
#include <vector>

#include "format/quantized_matrix.hpp"

namespace qjit {

struct CudaMixedWeights {
    int64_t k = 0, n = 0, kp = 0, np = 0, num_groups = 0, group_size = 0;
    std::vector<uint32_t> codes;
    std::vector<int32_t> group_words;
    bool f16_scales = true;             // without second-order scales: which of the next two holds them
    std::vector<uint16_t> scales_f16;
    std::vector<float> scales_f32;
    std::vector<uint8_t> scale_codes;   // second-order
    std::vector<uint16_t> scale2, zero2;
    std::vector<uint8_t> zeros;         // asymmetric
    std::vector<int32_t> outlier_start, outlier_rows;
    std::vector<uint16_t> outlier_values;

    // Bytes a forward streams: everything above.
    int64_t bytes() const;
};

CudaMixedWeights pack_cuda_mixed(const QuantizedMatrix& matrix);

}  // namespace qjit
