// What a generated CUDA kernel computes (CudaKernelSpec) and the knobs that shape it (CudaTiling).
//
// The CUDA generator family, in the five parts of the x86 one (jit/x86/cpu_kernel.hpp): the spec
// and tiling (CudaKernelSpec, CudaTiling); the tiling's text and parse (tiling_text,
// parse_tiling); kernel_name; unsupported_reason (check_spec applies it): all here; generate
// (generate_kernel: jit/cuda/cuda_source.hpp).
//
// Three kernel kinds serve a layer:
//   gemv: up to 8 activation rows, codes in column blocks; wide code loads, dequantization in
//         registers, warp-shuffle reduction.
//   mma:  up to 64 rows, codes in fragment order (format/cuda_code_layout.hpp); each lane decodes
//         its own B fragments of mma.m16n8k16 in registers, activations are A fragments read
//         straight from memory, warps split K and reduce through shared memory. No shared-memory
//         staging of weights: the decoding-bound kernel for small batches.
//   gemm: more than 8 rows; mma.sync fed by a cp.async pipeline that dequantizes column blocks
//         into shared memory once per block of up to 256 rows, which a grid of warps shares.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/cuda_code_layout.hpp"
#include "format/weight_format.hpp"

namespace qjit::jit::cuda {

enum class ActivationType { F16, BF16 };
enum class KernelKind { Gemv, Gemm, Mma };

// The tuner's knobs. GEMV uses warps, columns_per_warp and chunks_in_flight; MMA warps, n_tiles,
// chunks_in_flight and split_k; GEMM the rest.
struct CudaTiling {
    KernelKind kind = KernelKind::Gemv;
    int warps = 4;             // warps per block (mma: warps share the block's columns and split K)
    int columns_per_warp = 1;  // gemv: output columns one warp reduces (1, 2, 4)
    int chunks_in_flight = 2;  // gemv: 16-byte code vectors per lane and column loaded before use (1, 2, 4);
                               // mma: 1 loads each 128-row step when its turn comes, 2 issues the next
                               // step's loads before this step's math (a register double buffer)
    int n_tiles = 2;           // mma: 8-column tiles per block (1, 2, 4)
    int block_m = 64;          // gemm: activation rows per block (16, 32, 64, 128, 256)
    int block_n = 128;         // gemm: output columns per block (64, 128, 256)
    int block_k = 128;         // gemm: K per pipeline stage (64, 128, 256)
    int stages = 3;            // gemm: cp.async pipeline depth (2 .. 5)
    int split_k = 1;           // gemm, mma: blocks sharing one output tile along K (fp32 atomics, then a cast)
    int warps_m = 1;           // gemm: warps along the rows (1, 2, 4); the block's warps form a warps_m x
                               // (warps / warps_m) grid, each multiplying its own sub-tile

    bool operator==(const CudaTiling&) const = default;
};

struct CudaKernelSpec {
    WeightFormat format = f16_scaled_format();  // the weights it reads: bits 2/3/4/5/6/8, groups of a multiple of 32 rows
                                  // or one per column; scale_type F16 when the device stores fp16 scales
                                  // (and offsets), SuperBlock when it stores ggml's super-block codes
    ActivationType activations = ActivationType::F16;
    int arch = 80;                // sm_<arch>
    int rows = 1;                 // gemv, mma: activation rows it is compiled for (gemv 1, 2, 4, 8; mma up to 64;
                                  // fewer at run time are masked)
    CudaTiling tiling;

    bool per_column() const { return format.per_column(); }
};

// The GEMV's 16-byte-aligned chunk, in packed blocks (the fewest whose words fill whole 16-byte
// loads): 2 blocks of 2-bit (16 B), 4 of 3-bit (48 B), 1 of 4-bit (16 B), 4 of 5-bit (80 B), 2 of
// 6-bit (48 B), 1 of 8-bit (32 B).
int chunk_blocks(int bits);
// The device layout's block and padding (format/cuda_code_layout.hpp).
using cuda_layout::kCodesPerBlock;
using cuda_layout::padded_k;
using cuda_layout::padded_n;

// "q4g128_asym_cuda_f16_sm90", "q3col_sym_s32_cuda_bf16_sm80": the format, the activation type and
// the architecture, whichever kernel kind runs it; the tuning database's key starts with it.
std::string kernel_family_name(const CudaKernelSpec& spec);
// The family plus the kind and tiling: "q4g128_asym_cuda_f16_sm90_gemm_m64n128k128w8s3z1" (with
// "y2" after the warps where two or more of them are stacked along the rows), a C identifier.
std::string kernel_name(const CudaKernelSpec& spec);

// "kernel=gemv,warps=4,cols=1,inflight=2" / "kernel=mma,warps=4,ntiles=2,inflight=1,splitk=1" /
// "kernel=gemm,bm=64,bn=128,bk=128,warps=8,wm=1,stages=3,splitk=1".
std::string tiling_text(const CudaTiling& tiling);
// Parses tiling_text's form; knobs left out keep `base`'s values. Throws an invalid-argument
// Error naming the bad knob.
CudaTiling parse_tiling(const std::string& text, CudaTiling base = {});

// Whether `format` has a part only the mixed-format GEMV reads (K-groups of mixed widths,
// second-order scales, sparse outliers): it then runs on that kernel (kind Gemv, one column per
// warp, up to 8 rows per launch), whose device layout is format/cuda_mixed_weights.hpp.
bool needs_mixed_kernel(const WeightFormat& format);

// A GEMM warp's sub-tile (block_m / warps_m rows by block_n / (warps / warps_m) columns) and the
// fp32 accumulators each of its threads holds for it: what check_spec bounds and the tuner's
// model weighs. The tiling's warps_m must divide its warps.
struct GemmWarpTile {
    int rows, columns;
    int accumulators() const { return rows / 16 * (columns / 8) * 4; }
};
GemmWarpTile gemm_warp_tile(const CudaTiling& tiling);

// Whether a kernel kind serves `rows` activation rows (gemv up to 8, mma up to 64, gemm above 8).
bool kind_serves(KernelKind kind, int64_t rows);
// The most rows the mma kernel takes.
inline constexpr int kMaxMmaRows = 64;

// How a kernel of `spec` is launched for m rows of a layer of n columns, padded to np x kp.
// Tensor-core kinds share each output tile between `splits` blocks along K (mma: along y, row
// slices along z; gemm: row blocks along y, splits along z), each taking `units_per_split`
// 128-row steps (mma) or block_k tiles (gemm); with splits > 1 they add into a zeroed fp32 buffer
// that a cast turns into y.
struct LaunchShape {
    unsigned grid_x = 1, grid_y = 1, grid_z = 1;
    unsigned threads = 0, shared_bytes = 0;
    int splits = 1, units_per_split = 0;
};
LaunchShape launch_shape(const CudaKernelSpec& spec, int64_t m, int64_t n, int64_t np, int64_t kp);

// Dynamic shared memory a block asks for (GEMM stages, MMA's cross-warp reduction; 0 for a GEMV).
int shared_memory_bytes(const CudaKernelSpec& spec);
// Why no generated CUDA kernel computes `format` ("" when one does): its bits or group size (groups
// of 16 rows, GGUF's Q2_K, Q3_K and Q6_K), a codebook, which no kernel reads, or float offsets or
// super-block scales beside a part only the mixed GEMV reads. A low-rank compensator runs as a
// pass after the product (runtime/cuda/cuda_low_rank.hpp). The CUDA backend's one answer to "do you run this format";
// check_spec refuses the same.
std::string unsupported_reason(const WeightFormat& format);
// Throws an Error naming what the generator cannot emit: QJIT_ERROR_UNSUPPORTED for its format
// (unsupported_reason) or an architecture below sm_80; QJIT_ERROR_INVALID_ARGUMENT for a tiling knob
// out of range or a GEMM tile whose warps, registers or K step do not fit. Does not check the
// device's shared memory (fits_device does).
void check_spec(const CudaKernelSpec& spec);
bool is_valid(const CudaKernelSpec& spec);
// Whether the spec's shared memory fits a block of a device with `optin_bytes` to offer.
bool fits_device(const CudaKernelSpec& spec, int64_t optin_bytes);
// The most dynamic shared memory a block may opt in to on sm_<arch> (the published limits), for
// planning without a device (the compile tests).
int64_t published_shared_memory_optin(int arch);


}  // namespace qjit::jit::cuda
