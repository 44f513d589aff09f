#include "tuner/cpu_tiling.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "runtime/error.hpp"

namespace qjit {

namespace {

// Overrides the fields named in "tu=4,mb=4,prefetch=8".
void apply_tiling_string(const std::string& text, jit::CpuTiling& tiling) {
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        const size_t eq = item.find('=');
        require(eq != std::string::npos, "tiling '", text, "': item '", item, "' is not key=value");
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        int number = 0;
        try {
            size_t used = 0;
            number = std::stoi(value, &used);
            require(used == value.size(), "tiling '", text, "': '", value, "' is not a number");
        } catch (const std::logic_error&) {
            fail(QJIT_ERROR_INVALID_ARGUMENT, "tiling '", text, "': '", value, "' is not a number");
        }
        if (key == "tu") tiling.column_vectors = number;
        else if (key == "mb") tiling.rows = number;
        else if (key == "prefetch") tiling.prefetch_blocks = number;
        else if (key == "ksplit") tiling.k_splits = number;
        else if (key == "ku") tiling.unroll_blocks = number;
        else fail(QJIT_ERROR_INVALID_ARGUMENT, "tiling '", text, "': unknown key '", key,
                  "' (tu, mb, prefetch, ku, ksplit)");
    }
}

}  // namespace

// Int8 activations change the real model's NLL by -0.0007 to +0.006 nats (README): at most 3 % of
// the error of 2- to 4-bit weights (0.11 and up), but as large as the whole error of 8-bit weights.
jit::ActivationPath default_activation_path(int bits) {
    return bits <= 4 ? jit::ActivationPath::Int8 : jit::ActivationPath::F32;
}

std::optional<jit::CpuKernelSpec> plan_cpu_kernel(const CpuPlanRequest& request, const QuantParams& p) {
    if (request.isa < QJIT_ISA_AVX2) return std::nullopt;
    if (!p.symmetric && std::any_of(p.zeros.begin(), p.zeros.end(), [](uint16_t z) { return z > 255; }))
        return std::nullopt;  // GPTQ v1 can encode a zero of 256; the kernels keep zeros in bytes

    jit::CpuKernelSpec spec;
    spec.isa = request.isa;
    spec.path = request.activations == QJIT_ACTIVATIONS_F32    ? jit::ActivationPath::F32
                : request.activations == QJIT_ACTIVATIONS_INT8 ? jit::ActivationPath::Int8
                                                               : default_activation_path(p.bits);
    spec.bits = p.bits;
    spec.k = p.k;
    spec.group_size = p.num_groups() == 1 ? spec.padded_k() : p.group_size;
    spec.symmetric = p.symmetric;
    spec.f16_scales = p.scale_dtype == QJIT_DTYPE_F16;

    // Register blocks: AVX-512 with VNNI (or on the f32 path) reads activations as embedded
    // broadcasts, so 3 column vectors x 8 rows of accumulators fit its 32 registers with the
    // unpack temporaries; 8 rows amortize each unpacked quad over many dot products. Fewer rows
    // where broadcasts need registers; AVX2's 16 registers hold 2 x 3. Codes are prefetched about
    // 3 KiB ahead, whatever the block size. (Chosen from bench_linear's tiling rows on a Zen 5;
    // the tuner will measure.)
    constexpr int64_t kPrefetchAheadBytes = 3072;
    const bool zmm = request.isa >= QJIT_ISA_AVX512;
    spec.tiling.column_vectors = zmm ? 3 : 2;
    spec.tiling.rows = zmm ? 8 : 3;
    const int64_t vectors_needed = (p.n + spec.lanes() - 1) / spec.lanes();
    spec.tiling.column_vectors = int(std::min<int64_t>(spec.tiling.column_vectors, vectors_needed));
    const int64_t block_bytes = int64_t(p.bits) * spec.panel_columns() * 4;
    spec.tiling.prefetch_blocks = int((kPrefetchAheadBytes + block_bytes - 1) / block_bytes);
    spec.rows = spec.tiling.rows;
    while (jit::vector_registers_needed(spec) > jit::vector_registers_available(spec.isa) && spec.rows > 1)
        spec.rows = --spec.tiling.rows;
    // Too few panels to keep every thread busy: split K as well, at whole groups.
    const int64_t panels = (p.n + spec.panel_columns() - 1) / spec.panel_columns();
    if (panels < request.threads) {
        const int64_t splittable = spec.group_size == 16 ? spec.num_groups() / 2 : spec.num_groups();
        spec.tiling.k_splits = int(std::clamp<int64_t>(request.threads / panels, 1, splittable));
    }
    if (!request.tiling.empty()) apply_tiling_string(request.tiling, spec.tiling);
    require(spec.tiling.k_splits >= 1, "tiling '", request.tiling, "': ksplit must be at least 1");
    spec.rows = spec.tiling.rows;
    try {
        jit::check_spec(spec);
    } catch (const std::invalid_argument& e) {
        fail(QJIT_ERROR_INVALID_ARGUMENT, "tiling '", request.tiling, "' cannot be used: ", e.what());
    }
    return spec;
}

}  // namespace qjit
