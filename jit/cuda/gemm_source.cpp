#include "jit/cuda/cuda_source_writer.hpp"

namespace qjit::jit::cuda {

namespace {

const char* const kGemmTileConstants = R"(constexpr int LDS = BK + 8;                        // halves per shared row (padding: conflict-free ldmatrix)
constexpr int WARPS_N = WARPS / WARPS_M;             // the block's warps form a WARPS_M x WARPS_N grid
constexpr int WARP_M = BM / WARPS_M, WARP_N = BN / WARPS_N;  // the rows and columns each warp multiplies
constexpr int M_TILES = WARP_M / 16, N_TILES = WARP_N / 8;
constexpr int A_BYTES = BM * LDS * 2;
constexpr int CODE_BYTES_PER_COLUMN = BK * BITS / 8;
constexpr int CODE_BYTES = BN * CODE_BYTES_PER_COLUMN;
// A stage's metadata: per group of the tile a row of BN scales (zero points, offsets); with
// super-block scales (BK divides 256: one super-block per tile) a row of BN fp16 d (dmin), then a
// row of BN byte codes per group.
constexpr int SUPER_BLOCK_BYTES = BN * 2 + GROUPS_PER_TILE * BN;
constexpr int SCALE_BYTES = SUPER_BLOCK ? SUPER_BLOCK_BYTES : GROUPS_PER_TILE * BN * (int)sizeof(scale_t);
constexpr int ZERO_BYTES = SYMMETRIC ? 0 : SUPER_BLOCK ? SUPER_BLOCK_BYTES : GROUPS_PER_TILE * BN * (int)sizeof(zero_t);
constexpr int STAGE_BYTES = (A_BYTES + CODE_BYTES + SCALE_BYTES + ZERO_BYTES + 15) / 16 * 16;
static_assert(A_BYTES % 16 == 0 && CODE_BYTES % 16 == 0 && SCALE_BYTES % 16 == 0 && ZERO_BYTES % 16 == 0, "alignment");
)";

const char* const kGemmLoadTile = R"(
struct Stage {
    u16* a; unsigned char* codes; unsigned char* scales; unsigned char* zeros;
    __device__ explicit Stage(unsigned char* base)
        : a(reinterpret_cast<u16*>(base)), codes(base + A_BYTES), scales(base + A_BYTES + CODE_BYTES),
          zeros(base + A_BYTES + CODE_BYTES + SCALE_BYTES) {}
};

// Starts the copies of BN columns (from n0) of `rows` rows of `element`-byte values: row i of dst
// from row row_of(i) of the [..][np] array src.
template <typename RowOf>
static __device__ __forceinline__ void copy_columns_async(unsigned char* dst, const unsigned char* src, int rows,
                                                          int element, int n0, int np, RowOf row_of) {
    const int chunks = BN * element / 16;
    for (int i = threadIdx.x; i < rows * chunks; i += THREADS) {
        const int row = i / chunks, chunk = i % chunks;
        copy_async_16(dst + row * BN * element + chunk * 16, src + ((long long)row_of(row) * np + n0) * element + chunk * 16,
                      true);
    }
}

// The metadata of the groups K tile k0 covers (scale_t or zero_t values of `element` bytes), or
// with super-block scales its super-block's d (dmin) and the groups' codes.
static __device__ __forceinline__ void copy_metadata_async(unsigned char* dst, const void* src_raw, int element, int k0,
                                                           int n0, int np, int num_groups) {
    const unsigned char* src = static_cast<const unsigned char*>(src_raw);
    auto group = [&](int i) { return group_of(k0 + i * (GROUP == 0 ? 0 : GROUP), num_groups); };
    if (SUPER_BLOCK) {
        copy_columns_async(dst, src, 1, 2, n0, np, [&](int) { return k0 / 256; });
        copy_columns_async(dst + BN * 2, src + (long long)(num_groups / GROUPS_PER_SUPER) * np * 2, GROUPS_PER_TILE, 1,
                           n0, np, group);
    } else {
        copy_columns_async(dst, src, GROUPS_PER_TILE, element, n0, np, group);
    }
}

// Starts the copies of K tile `tile` into `stage`: activations (rows past m and K past k_valid
// zero-filled), the tile's codes, and the scales and zero points (or offsets) of the groups it covers.
static __device__ __forceinline__ void load_tile(Stage stage, int tile, const u16* x, const unsigned char* codes,
                                                 const void* scales, const void* zeros, int m, int m0, int n0,
                                                 int np, int k_valid, int ldx, long long column_bytes, int num_groups) {
    const int k0 = tile * BK;
    for (int i = threadIdx.x; i < BM * BK / 8; i += THREADS) {
        const int row = i / (BK / 8), k = k0 + i % (BK / 8) * 8;
        const bool valid = m0 + row < m && k < k_valid;
        copy_async_16(stage.a + row * LDS + (k - k0), valid ? x + (long long)(m0 + row) * ldx + k : x, valid);
    }
    constexpr int CODE_CHUNKS = CODE_BYTES_PER_COLUMN / 16;
    for (int i = threadIdx.x; i < BN * CODE_CHUNKS; i += THREADS) {
        const int col = i / CODE_CHUNKS, chunk = i % CODE_CHUNKS;
        copy_async_16(stage.codes + col * CODE_BYTES_PER_COLUMN + chunk * 16,
                      codes + (n0 + col) * column_bytes + (long long)k0 * BITS / 8 + chunk * 16, true);
    }
    copy_metadata_async(stage.scales, scales, (int)sizeof(scale_t), k0, n0, np, num_groups);
    if (!SYMMETRIC) copy_metadata_async(stage.zeros, zeros, (int)sizeof(zero_t), k0, n0, np, num_groups);
}
)";

// dequantize_tile up to its scale, which is fp16 pairs or fp32 as the activation type.
const char* const kGemmDequantizeTileHead = R"(
// The stage's codes as BN x BK weights of the activation type in b[column][k].
static __device__ __forceinline__ void dequantize_tile(Stage stage, u16* b) {
    constexpr int BLOCKS = BK / 32;
    for (int i = threadIdx.x; i < BN * BLOCKS; i += THREADS) {
        const int col = i / BLOCKS, block = i % BLOCKS;
        const u32* w = reinterpret_cast<const u32*>(stage.codes + col * CODE_BYTES_PER_COLUMN) + block * BITS;
        u32 wl[BITS];
#pragma unroll
        for (int j = 0; j < BITS; ++j) wl[j] = w[j];
        u32 h[16];
        decode_block(wl, h);
        const int group = GROUPS_PER_TILE == 1 ? 0 : block * 32 / (GROUP == 0 ? 1 : GROUP);
        const u32 bias = zero_bias(stage.zeros, group * BN + col);
        const float s = group_scale(stage.scales, group, col, BN, 1, 0), o = group_offset(stage.zeros, group, col, BN, 1, 0);
)";

const char* const kGemmDequantizeTileTail = R"(        uint4* dst = reinterpret_cast<uint4*>(b + col * LDS + block * 32);
#pragma unroll
        for (int v = 0; v < 4; ++v)
            dst[v] = make_uint4(dequantize_pair(h[4 * v], bias, scale, offset),
                                dequantize_pair(h[4 * v + 1], bias, scale, offset),
                                dequantize_pair(h[4 * v + 2], bias, scale, offset),
                                dequantize_pair(h[4 * v + 3], bias, scale, offset));
    }
}
)";

const char* const kGemmKernel = R"(
extern "C" __global__ void __launch_bounds__(THREADS) qjit_gemm(
    const u32* __restrict__ codes_raw, const void* __restrict__ scales_raw, const void* __restrict__ zeros_raw,
    const u16* __restrict__ x, u16* __restrict__ y, int m, int n, int np, int k_valid, int ldx, int kp,
    int num_groups, float* __restrict__ partial, int k_tiles_per_split) {
    QJIT_DYNAMIC_SHARED(unsigned char, shared);
    const unsigned char* codes = reinterpret_cast<const unsigned char*>(codes_raw);
    const long long column_bytes = (long long)kp * BITS / 8;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int tile_begin = blockIdx.z * k_tiles_per_split;
    const int tile_end = min(kp / BK, tile_begin + k_tiles_per_split);
    const int tiles = tile_end - tile_begin;
    u16* b = reinterpret_cast<u16*>(shared + STAGES * STAGE_BYTES);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = warp / WARPS_N * WARP_M, warp_column = warp % WARPS_N * WARP_N;

    float c[M_TILES][N_TILES][4];
#pragma unroll
    for (int i = 0; i < M_TILES; ++i)
#pragma unroll
        for (int j = 0; j < N_TILES; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.f;

    // One commit per stage and per iteration, empty or not, keeps wait_async's count exact.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles)
            load_tile(Stage(shared + s * STAGE_BYTES), tile_begin + s, x, codes, scales_raw, zeros_raw, m, m0, n0, np,
                      k_valid, ldx, column_bytes, num_groups);
        commit_async();
    }
    for (int i = 0; i < tiles; ++i) {
        wait_async<STAGES - 2>();
        __syncthreads();  // tile i has landed for every thread; every thread is done with tile i - 1
        const int ahead = i + STAGES - 1;
        if (ahead < tiles)
            load_tile(Stage(shared + ahead % STAGES * STAGE_BYTES), tile_begin + ahead, x, codes, scales_raw, zeros_raw, m,
                      m0, n0, np, k_valid, ldx, column_bytes, num_groups);
        commit_async();
        const Stage stage(shared + i % STAGES * STAGE_BYTES);
        dequantize_tile(stage, b);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            u32 a[M_TILES][4];
#pragma unroll
            for (int mi = 0; mi < M_TILES; ++mi)
                load_matrix_x4(a[mi], stage.a + (warp_row + mi * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int nj = 0; nj < N_TILES / 2; ++nj) {
                u32 bf[4];  // k 0-7 and 8-15 of columns 0-7, then of columns 8-15
                load_matrix_x4(bf, b + (warp_column + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk +
                                       ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int mi = 0; mi < M_TILES; ++mi) {
                    mma(c[mi][2 * nj], a[mi], bf[0], bf[1]);
                    mma(c[mi][2 * nj + 1], a[mi], bf[2], bf[3]);
                }
            }
        }
    }
    wait_async<0>();

    // Accumulator (mi, nj): the warp's rows mi*16 + lane/4 (+8), its columns nj*8 + 2*(lane%4) (+1).
    const bool split = gridDim.z > 1;
    // Two adjacent outputs in one 4-byte store where every row starts 4-byte aligned.
    const bool paired = n % 2 == 0 && (reinterpret_cast<unsigned long long>(y) & 3) == 0;
#pragma unroll
    for (int mi = 0; mi < M_TILES; ++mi)
#pragma unroll
        for (int nj = 0; nj < N_TILES; ++nj)
#pragma unroll
            for (int half = 0; half < 2; ++half) {  // e = 2 * half + (0, 1): one row, two adjacent columns
                const int row = m0 + warp_row + mi * 16 + (lane >> 2) + half * 8;
                const int col = n0 + warp_column + nj * 8 + (lane & 3) * 2;
                if (row >= m || col >= n) continue;
                const float c0 = c[mi][nj][2 * half], c1 = c[mi][nj][2 * half + 1];
                const long long at = (long long)row * n + col;
                if (split) {
                    atomicAdd(partial + at, c0);
                    if (col + 1 < n) atomicAdd(partial + at + 1, c1);
                } else if (paired && col + 1 < n) {
                    *reinterpret_cast<u32*>(y + at) = (u32)to_output(c0) | (u32)to_output(c1) << 16;
                } else {
                    y[at] = to_output(c0);
                    if (col + 1 < n) y[at + 1] = to_output(c1);
                }
            }
}
)";

}  // namespace

std::string CudaSourceWriter::gemm() {
    const CudaTiling& t = spec_.tiling;
    const bool group_spans_tile = spec_.per_column() || spec_.format.group_size >= t.block_k;
    out_ << "// " << kernel_name(spec_) << ": y = x * W on tensor cores (mma.sync m16n8k16, fp32 accumulators)\n"
         << "// behind a " << t.stages << "-stage cp.async pipeline; codes are dequantized into shared memory per K step.\n"
         << kPrelude << kAsyncCopy;
    constants();
    out_ << "constexpr int BM = " << t.block_m << ", BN = " << t.block_n << ", BK = " << t.block_k << ";\n"
         << "constexpr int WARPS = " << t.warps << ", WARPS_M = " << t.warps_m << ", THREADS = WARPS * 32, STAGES = "
         << t.stages << ";\n"
         << "constexpr int GROUPS_PER_TILE = " << (group_spans_tile ? 1 : t.block_k / spec_.format.group_size) << ";\n";
    out_ << kGemmTileConstants;
    decode_block();
    dequantize_helpers();
    out_ << kGemmLoadTile << kGemmDequantizeTileHead;
    out_ << (f16() ? "        const u32 scale = scale_pair(s), offset = offset_pair(o);\n"
                   : "        const float scale = s, offset = o;\n");
    out_ << kGemmDequantizeTileTail;
    mma_instruction();
    out_ << kGemmKernel;
    return out_.str();
}

}  // namespace qjit::jit::cuda
