#include "jit/cuda/cuda_tiling.hpp"
#include "base/error.hpp"
#include "jit/knob_text.hpp"

#include <map>
#include <numeric>
#include <sstream>
#include <utility>

namespace qjit::jit::cuda {

namespace {

constexpr int kPadHalves = 8;         // row padding of shared tiles: keeps ldmatrix conflict-free
constexpr int kMaxAccumulators = 128; // fp32 accumulators per GEMM thread

int64_t round_up(int64_t value, int64_t step) { return (value + step - 1) / step * step; }

bool one_of(int value, std::initializer_list<int> allowed) {
    for (int a : allowed)
        if (a == value) return true;
    return false;
}

// A tiling, or its text, the generator cannot use: the caller's argument is wrong.
template <typename... Parts>
[[noreturn]] void reject(Parts&&... parts) {
    fail(QJIT_ERROR_INVALID_ARGUMENT, std::forward<Parts>(parts)...);
}

int mma_row_tiles(int rows) { return (rows + 15) / 16; }

int groups_per_tile(const CudaKernelSpec& spec) {
    return spec.per_column() || spec.format.group_size >= spec.tiling.block_k ? 1
                                                                       : int(spec.tiling.block_k / spec.format.group_size);
}

// Bytes of a GEMM stage's scales and zero points (u16), float offsets (at the scales' type) or
// super-block d and dmin (fp16 per column) with their byte codes (per group and column).
int64_t stage_metadata_bytes(const CudaKernelSpec& spec) {
    const WeightFormat& f = spec.format;
    const int64_t columns = spec.tiling.block_n, groups = groups_per_tile(spec);
    if (f.super_block_scales()) return (columns * 2 + groups * columns) * (f.float_offsets ? 2 : 1);
    const int64_t zero_point_bytes = f.symmetric ? 0 : f.float_offsets ? f.scale_bytes() : 2;
    return groups * columns * (f.scale_bytes() + zero_point_bytes);
}

}  // namespace

int chunk_blocks(int bits) { return 4 / std::gcd(bits, 4); }


std::string kernel_family_name(const CudaKernelSpec& spec) {
    TextStream out;
    out << spec.format.kernel_name() << "_cuda" << (spec.activations == ActivationType::F16 ? "_f16" : "_bf16") << "_sm"
        << spec.arch;
    return out.str();
}

std::string kernel_name(const CudaKernelSpec& spec) {
    const CudaTiling& t = spec.tiling;
    TextStream out;
    out << kernel_family_name(spec);
    if (t.kind == KernelKind::Gemv)
        out << "_gemv_r" << spec.rows << "w" << t.warps << "c" << t.columns_per_warp << "f" << t.chunks_in_flight;
    else if (t.kind == KernelKind::Mma)
        out << "_mma_r" << spec.rows << "w" << t.warps << "t" << t.n_tiles << "f" << t.chunks_in_flight << "z"
            << t.split_k;
    else {
        out << "_gemm_m" << t.block_m << "n" << t.block_n << "k" << t.block_k << "w" << t.warps;
        if (t.warps_m > 1) out << "y" << t.warps_m;
        out << "s" << t.stages << "z" << t.split_k;
    }
    return out.str();
}

std::string tiling_text(const CudaTiling& t) {
    TextStream out;
    if (t.kind == KernelKind::Gemv)
        out << "kernel=gemv,warps=" << t.warps << ",cols=" << t.columns_per_warp << ",inflight=" << t.chunks_in_flight;
    else if (t.kind == KernelKind::Mma)
        out << "kernel=mma,warps=" << t.warps << ",ntiles=" << t.n_tiles << ",inflight=" << t.chunks_in_flight
            << ",splitk=" << t.split_k;
    else
        out << "kernel=gemm,bm=" << t.block_m << ",bn=" << t.block_n << ",bk=" << t.block_k << ",warps=" << t.warps
            << ",wm=" << t.warps_m << ",stages=" << t.stages << ",splitk=" << t.split_k;
    return out.str();
}

CudaTiling parse_tiling(const std::string& text, CudaTiling base) {
    const KnobTable<CudaTiling> knobs = {
        {"warps", &CudaTiling::warps},   {"cols", &CudaTiling::columns_per_warp},
        {"inflight", &CudaTiling::chunks_in_flight}, {"ntiles", &CudaTiling::n_tiles},
        {"bm", &CudaTiling::block_m},    {"bn", &CudaTiling::block_n},
        {"bk", &CudaTiling::block_k},    {"stages", &CudaTiling::stages},
        {"splitk", &CudaTiling::split_k}, {"wm", &CudaTiling::warps_m}};
    for (const KnobItem& item : knob_items(text, "CUDA tiling")) {
        if (item.name != "kernel") {
            set_knob(base, item, text, "CUDA tiling", knobs, {"kernel"});
        } else if (item.value == "gemv") {
            base.kind = KernelKind::Gemv;
        } else if (item.value == "gemm") {
            base.kind = KernelKind::Gemm;
        } else if (item.value == "mma") {
            base.kind = KernelKind::Mma;
        } else {
            reject("CUDA tiling kernel '", item.value, "'; expected gemv, mma or gemm");
        }
    }
    return base;
}

GemmWarpTile gemm_warp_tile(const CudaTiling& t) { return {t.block_m / t.warps_m, t.block_n / (t.warps / t.warps_m)}; }

bool kind_serves(KernelKind kind, int64_t rows) {
    switch (kind) {
        case KernelKind::Gemv: return rows >= 1 && rows <= 8;
        case KernelKind::Mma: return rows >= 1 && rows <= kMaxMmaRows;
        case KernelKind::Gemm: return rows > 8;
    }
    return false;
}

int shared_memory_bytes(const CudaKernelSpec& spec) {
    const CudaTiling& t = spec.tiling;
    if (t.kind == KernelKind::Gemv) return 0;
    if (t.kind == KernelKind::Mma)  // every warp's fp32 accumulators, summed across warps at the end
        return t.warps == 1 ? 0 : t.warps * mma_row_tiles(spec.rows) * t.n_tiles * 4 * 32 * 4;
    const int64_t per_stage = int64_t(t.block_m) * (t.block_k + kPadHalves) * 2  // activations
                              + int64_t(t.block_n) * t.block_k * spec.format.bits / 8   // codes
                              + stage_metadata_bytes(spec);
    const int64_t dequantized = int64_t(t.block_n) * (t.block_k + kPadHalves) * 2;
    return int(t.stages * round_up(per_stage, 16) + dequantized);
}

LaunchShape launch_shape(const CudaKernelSpec& spec, int64_t m, int64_t n, int64_t np, int64_t kp) {
    const CudaTiling& t = spec.tiling;
    auto blocks_for = [](int64_t count, int64_t per_block) { return unsigned((count + per_block - 1) / per_block); };
    LaunchShape shape;
    shape.threads = unsigned(t.warps * 32);
    shape.shared_bytes = unsigned(shared_memory_bytes(spec));
    if (t.kind == KernelKind::Gemv) {
        shape.grid_x = blocks_for(n, int64_t(t.warps) * t.columns_per_warp);
        return shape;
    }
    const bool mma = t.kind == KernelKind::Mma;
    const int k_units = int(kp / (mma ? cuda_layout::kFragmentStepK : t.block_k));
    shape.units_per_split = (k_units + t.split_k - 1) / t.split_k;
    shape.splits = (k_units + shape.units_per_split - 1) / shape.units_per_split;
    shape.grid_x = unsigned(np / (mma ? cuda_layout::kFragmentTileN * t.n_tiles : t.block_n));
    const unsigned row_blocks = blocks_for(m, mma ? (spec.rows + 15) / 16 * 16 : t.block_m);
    shape.grid_y = mma ? unsigned(shape.splits) : row_blocks;
    shape.grid_z = mma ? row_blocks : unsigned(shape.splits);
    return shape;
}

std::string unsupported_reason(const WeightFormat& format) {
    if (!cuda_layout::is_device_width(format.bits))
        return concat("CUDA kernels take 2, 3, 4, 5, 6 or 8 bits, not ", format.bits);
    if (format.k < 1) return concat("K is ", format.k);
    if (!format.per_column() && (format.group_size < 32 || format.group_size % 32 != 0))
        return concat("CUDA kernels need groups of a multiple of 32 rows (or one per column), not ", format.group_size);
    if (format.has_codebook()) return "CUDA kernels do not read codebooks (IQ4_NL levels)";
    if (needs_mixed_kernel(format) && format.float_offsets)
        return "the CUDA kernel of mixed widths, second-order scales and outliers reads integer zero points, not "
               "float offsets";
    if (needs_mixed_kernel(format) && format.super_block_scales())
        return "the CUDA kernel of mixed widths, second-order scales and outliers does not read super-block scales";
    if (needs_mixed_kernel(format) && format.group_size % kCodesPerBlock != 0)
        return concat("the CUDA kernel of mixed widths, second-order scales and outliers needs K-groups of a multiple "
                      "of 32 rows, not ", format.group_size);
    return "";
}

bool needs_mixed_kernel(const WeightFormat& format) {
    return !format.uniform_bits() || format.second_order_scales() || format.outliers > 0;
}

void check_spec(const CudaKernelSpec& spec) {
    if (const std::string why = unsupported_reason(spec.format); !why.empty()) fail(QJIT_ERROR_UNSUPPORTED, why);
    if (spec.arch < 80)
        fail(QJIT_ERROR_UNSUPPORTED, "CUDA kernels need sm_80 or newer (mma.sync bf16, cp.async), not sm_", spec.arch);
    const CudaTiling& t = spec.tiling;
    if (needs_mixed_kernel(spec.format)) {
        if (t.kind != KernelKind::Gemv) reject("mixed widths, second-order scales and outliers run on the GEMV only");
        if (t.columns_per_warp != 1) reject("the mixed-format GEMV takes one column per warp, not ", t.columns_per_warp);
    }
    if (t.kind == KernelKind::Gemv) {
        if (!one_of(spec.rows, {1, 2, 4, 8})) reject("GEMV rows ", spec.rows, "; expected 1, 2, 4 or 8");
        if (!one_of(t.warps, {2, 4, 8})) reject("GEMV warps ", t.warps, "; expected 2, 4 or 8");
        if (!one_of(t.columns_per_warp, {1, 2, 4})) reject("GEMV cols ", t.columns_per_warp, "; expected 1, 2 or 4");
        if (!one_of(t.chunks_in_flight, {1, 2, 4})) reject("GEMV inflight ", t.chunks_in_flight, "; expected 1, 2 or 4");
        return;
    }
    if (t.kind == KernelKind::Mma) {
        if (spec.rows < 1 || spec.rows > kMaxMmaRows) reject("MMA rows ", spec.rows, "; expected 1 .. ", kMaxMmaRows);
        if (!one_of(t.warps, {1, 2, 4, 8})) reject("MMA warps ", t.warps, "; expected 1, 2, 4 or 8");
        if (!one_of(t.n_tiles, {1, 2, 4})) reject("MMA ntiles ", t.n_tiles, "; expected 1, 2 or 4");
        if (!one_of(t.chunks_in_flight, {1, 2})) reject("MMA inflight ", t.chunks_in_flight, "; expected 1 or 2");
        if (!one_of(t.split_k, {1, 2, 4, 8})) reject("MMA splitk ", t.split_k, "; expected 1, 2, 4 or 8");
        if (mma_row_tiles(spec.rows) * t.n_tiles * 4 > kMaxAccumulators / 2)
            reject("MMA rows ", spec.rows, " x ntiles ", t.n_tiles, " needs too many accumulators per thread");
        return;
    }
    if (!one_of(t.block_m, {16, 32, 64, 128, 256})) reject("GEMM bm ", t.block_m, "; expected 16, 32, 64, 128 or 256");
    if (!one_of(t.block_n, {64, 128, 256})) reject("GEMM bn ", t.block_n, "; expected 64, 128 or 256");
    if (!one_of(t.block_k, {64, 128, 256})) reject("GEMM bk ", t.block_k, "; expected 64, 128 or 256");
    if (!one_of(t.warps, {4, 8})) reject("GEMM warps ", t.warps, "; expected 4 or 8");
    if (t.stages < 2 || t.stages > 5) reject("GEMM stages ", t.stages, "; expected 2 .. 5");
    if (!one_of(t.split_k, {1, 2, 4, 8})) reject("GEMM splitk ", t.split_k, "; expected 1, 2, 4 or 8");
    // Each stage's codes per column must be whole 16-byte cp.async chunks.
    if (t.block_k * spec.format.bits % 128 != 0)
        reject("GEMM bk ", t.block_k, " gives ", t.block_k * spec.format.bits / 8, " code bytes per column (", spec.format.bits,
               "-bit), not a multiple of 16");
    if (!one_of(t.warps_m, {1, 2, 4}) || t.warps_m > t.warps) reject("GEMM wm ", t.warps_m, "; expected 1, 2 or 4, at most the warps");
    const GemmWarpTile warp = gemm_warp_tile(t);
    if (warp.rows % 16 != 0) reject("GEMM bm ", t.block_m, " over ", t.warps_m, " warps leaves ", warp.rows,
                                    " rows per warp, not a multiple of 16");
    if (warp.columns % 16 != 0) reject("GEMM bn ", t.block_n, " over ", t.warps / t.warps_m, " warps leaves ", warp.columns,
                                       " columns per warp, not a multiple of 16");
    if (warp.accumulators() > kMaxAccumulators)
        reject("GEMM warp tile of ", warp.rows, " rows x ", warp.columns, " columns needs ", warp.accumulators(),
               " fp32 accumulators per thread (at most ", kMaxAccumulators, ")");
}

bool is_valid(const CudaKernelSpec& spec) {
    try {
        check_spec(spec);
        return true;
    } catch (const Error&) {
        return false;
    }
}

bool fits_device(const CudaKernelSpec& spec, int64_t optin_bytes) {
    return shared_memory_bytes(spec) <= optin_bytes;
}

int64_t published_shared_memory_optin(int arch) {
    switch (arch) {
        case 80: return 163 * 1024;
        case 90: return 227 * 1024;
        case 86:
        case 89: return 99 * 1024;
        default: return arch >= 100 ? 227 * 1024 : 99 * 1024;
    }
}

}  // namespace qjit::jit::cuda
