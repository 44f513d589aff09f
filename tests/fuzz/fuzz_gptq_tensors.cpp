// libFuzzer target: GPTQ tensor validation and import (format/gptq_import.cpp) and the direct
// packer (format/gptq_packing.cpp). The input picks a width, group size, shape, checkpoint format,
// scale type and g_idx, and fills buffers of exactly the sizes that shape needs. Whatever imports
// must also pack directly to the same words as import-then-pack (a differential check: a mismatch
// aborts).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "base/error.hpp"
#include "format/gptq_import.hpp"
#include "format/gptq_packing.hpp"
#include "format/packed_codes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider input(data, size);
    qjit_gptq_tensors t{};
    t.bits = input.PickValueInArray({2, 3, 4, 8, 5});
    t.group_size = input.PickValueInArray({16, 32, 64, 128, 256, -1, 0, 48});
    const int64_t k = input.ConsumeIntegralInRange<int64_t>(0, 300), n = input.ConsumeIntegralInRange<int64_t>(0, 70);
    t.checkpoint_format = input.PickValueInArray({QJIT_GPTQ_V1, QJIT_GPTQ_V2, qjit_gptq_format(7)});
    t.scale_dtype = input.PickValueInArray({QJIT_DTYPE_F16, QJIT_DTYPE_BF16, QJIT_DTYPE_F32, qjit_dtype(9)});
    const bool with_g_idx = input.ConsumeBool();
    // Buffers sized as the claimed shape needs (the C API's contract); contents from the input.
    const int bits = t.bits == 5 ? 8 : t.bits;
    const int64_t rows_per_group = t.group_size > 0 ? t.group_size : std::max<int64_t>(k, 1);
    const int64_t groups = (std::max<int64_t>(k, 1) + rows_per_group - 1) / rows_per_group;
    auto words = [&](int64_t count) {
        std::vector<int32_t> v(size_t(std::max<int64_t>(count, 1)));
        for (int32_t& w : v) w = input.ConsumeIntegral<int32_t>();
        return v;
    };
    const std::vector<int32_t> qweight = words((k * bits + 31) / 32 * n);
    const std::vector<int32_t> qzeros = words(groups * ((n * bits + 31) / 32));
    const std::vector<int32_t> scales = words(groups * n);  // 4 bytes each: room for any scale dtype
    std::vector<int32_t> g_idx;
    for (int64_t row = 0; with_g_idx && row < k; ++row)
        g_idx.push_back(input.ConsumeBool() ? int32_t(row / rows_per_group) : input.ConsumeIntegralInRange<int32_t>(-1, 20));
    t.qweight = qweight.data();
    t.qzeros = qzeros.data();
    t.scales = scales.data();
    t.g_idx = with_g_idx ? g_idx.data() : nullptr;
    try {
        const qjit::QuantizedMatrix matrix = qjit::import_gptq(k, n, t);
        const int panel_columns = 8 * input.ConsumeIntegralInRange(1, 8);
        const qjit::PackedCodes expected = qjit::pack_codes(matrix.codes.data(), bits, k, n, panel_columns);
        qjit::PackedCodes direct = qjit::zeroed_packed_codes(bits, k, n, panel_columns);
        qjit::pack_gptq_panels(t.qweight, matrix.params.row_order, 0, direct.num_panels(), direct);
        if (direct.words != expected.words) std::abort();
    } catch (const qjit::Error&) {
    }
    return 0;
}
