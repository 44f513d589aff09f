#include "jit/cuda/cuda_source_writer.hpp"

namespace qjit::jit::cuda {

namespace {

const char* const kMmaLoads = R"(
// This lane's 32-code block: BITS consecutive words, in the widest loads they allow.
static __device__ __forceinline__ void load_block(const u32* p, u32 (&w)[BITS]) {
    if (BITS % 4 == 0) {
#pragma unroll
        for (int v = 0; v < BITS / 4; ++v) {
            const uint4 q = __ldg(reinterpret_cast<const uint4*>(p) + v);
            w[4 * v] = q.x, w[4 * v + 1] = q.y, w[4 * v + 2] = q.z, w[4 * v + 3] = q.w;
        }
    } else if (BITS % 2 == 0) {
#pragma unroll
        for (int v = 0; v < BITS / 2; ++v) {
            const uint2 q = __ldg(reinterpret_cast<const uint2*>(p) + v);
            w[2 * v] = q.x, w[2 * v + 1] = q.y;
        }
    } else {
#pragma unroll
        for (int v = 0; v < BITS; ++v) w[v] = __ldg(p + v);
    }
}

// Eight activations x[row][k .. k + 7] (k a multiple of 8), or zeros outside the matrix.
static __device__ __forceinline__ uint4 activations8(const u16* x, int row, int k, int m, int k_valid, int ldx) {
    return row < m && k < k_valid ? __ldg(reinterpret_cast<const uint4*>(x + (long long)row * ldx + k))
                                  : make_uint4(0, 0, 0, 0);
}
)";

const char* const kMmaKernel = R"(
extern "C" __global__ void __launch_bounds__(THREADS) qjit_mma(
    const u32* __restrict__ codes, const void* __restrict__ scales_raw, const void* __restrict__ zeros_raw,
    const u16* __restrict__ x, u16* __restrict__ y, int m, int n, int np, int k_valid, int ldx, int kp,
    int num_groups, float* __restrict__ partial, int steps_per_split) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = lane & 3, g = lane >> 2;
    const int tile0 = blockIdx.x * TILES;
    const int steps = kp / 128;
    const int step_end = min(steps, (blockIdx.y + 1) * steps_per_split);
    // Blocks along z take successive ROWS-row slices of x and y.
    const int row_base = blockIdx.z * ROW_TILES * 16;
    x += (long long)row_base * ldx, y += (long long)row_base * n, m -= row_base;
    if (partial) partial += (long long)row_base * n;
    float c[ROW_TILES][TILES][4];
#pragma unroll
    for (int i = 0; i < ROW_TILES; ++i)
#pragma unroll
        for (int j = 0; j < TILES; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.f;

    // The lane's block of each tile at step s (rows 128s + 32t .. + 31 of column 8 * tile + g) and
    // its group's scale and zero point or offset.
    u32 w[TILES][BITS];
    u32 bias[TILES];
    float scale[TILES], offset[TILES];
    auto load_step = [&](int s) {
        const int group = group_of(s * 128 + 32 * t, num_groups);
        const int supers = num_groups / GROUPS_PER_SUPER, super = group / GROUPS_PER_SUPER;
#pragma unroll
        for (int j = 0; j < TILES; ++j) {
            load_block(codes + (((long long)(tile0 + j) * steps + s) * 32 + lane) * BITS, w[j]);
            const int col = (tile0 + j) * 8 + g;
            scale[j] = group_scale(scales_raw, group, col, np, supers, super);
            bias[j] = zero_bias(zeros_raw, group * np + col);
            offset[j] = group_offset(zeros_raw, group, col, np, supers, super);
        }
    };
    const int first_step = blockIdx.y * steps_per_split + warp;
    if (PREFETCH && first_step < step_end) load_step(first_step);
    for (int s = first_step; s < step_end; s += WARPS) {
        if (!PREFETCH) load_step(s);
        u32 h[TILES][16];
        u32 step_bias[TILES];
        float step_scale[TILES], step_offset[TILES];
#pragma unroll
        for (int j = 0; j < TILES; ++j) {
            decode_block(w[j], h[j]);
            step_bias[j] = bias[j], step_scale[j] = scale[j], step_offset[j] = offset[j];
        }
        if (PREFETCH && s + WARPS < step_end) load_step(s + WARPS);  // in flight during this step's math
#pragma unroll
        for (int v = 0; v < 4; ++v) {  // activations 8v .. 8v + 7 of the lane's 32: k16 slices 2v, 2v + 1
            const int k = s * 128 + 32 * t + 8 * v;
            uint4 lo[ROW_TILES], hi[ROW_TILES];  // rows 16i + g and 16i + g + 8
#pragma unroll
            for (int i = 0; i < ROW_TILES; ++i) {
                lo[i] = activations8(x, 16 * i + g, k, m, k_valid, ldx);
                hi[i] = ROWS > 8 ? activations8(x, 16 * i + g + 8, k, m, k_valid, ldx) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int kk = 2 * v + half;
#pragma unroll
                for (int j = 0; j < TILES; ++j) {
                    const auto ws = weight_scale(step_scale[j]);
                    const auto wo = offset_pair(step_offset[j]);
                    const u32 b0 = dequantize_pair(h[j][2 * kk], step_bias[j], ws, wo);
                    const u32 b1 = dequantize_pair(h[j][2 * kk + 1], step_bias[j], ws, wo);
#pragma unroll
                    for (int i = 0; i < ROW_TILES; ++i) {
                        const u32 a[4] = {half ? lo[i].z : lo[i].x, half ? hi[i].z : hi[i].x,
                                          half ? lo[i].w : lo[i].y, half ? hi[i].w : hi[i].y};
                        mma(c[i][j], a, b0, b1);
                    }
                }
            }
        }
    }

    // Accumulator (i, j, e): row 16i + g (+8 for e >= 2), column 8 * (tile0 + j) + 2t (+1 for odd e).
    constexpr int VALUES = ROW_TILES * TILES * 4;
    auto store = [&](int v, float value) {
        const int e = v & 3, j = (v >> 2) % TILES, i = (v >> 2) / TILES;
        const int row = i * 16 + g + (e >> 1) * 8, col = (tile0 + j) * 8 + 2 * t + (e & 1);
        if (row >= m || col >= n) return;
        if (gridDim.y > 1) atomicAdd(partial + (long long)row * n + col, value);
        else y[(long long)row * n + col] = to_output(value);
    };
    if (WARPS == 1) {
#pragma unroll
        for (int v = 0; v < VALUES; ++v) store(v, c[v / 4 / TILES][(v / 4) % TILES][v & 3]);
        return;
    }
    QJIT_DYNAMIC_SHARED(float, partial_sums);  // [WARPS][VALUES][32]
#pragma unroll
    for (int v = 0; v < VALUES; ++v) partial_sums[(warp * VALUES + v) * 32 + lane] = c[v / 4 / TILES][(v / 4) % TILES][v & 3];
    __syncthreads();
    for (int v = warp; v < VALUES; v += WARPS) {
        float sum = 0.f;
#pragma unroll
        for (int other = 0; other < WARPS; ++other) sum += partial_sums[(other * VALUES + v) * 32 + lane];
        store(v, sum);
    }
}
)";

}  // namespace

std::string CudaSourceWriter::mma() {
    const CudaTiling& t = spec_.tiling;
    out_ << "// " << kernel_name(spec_) << ": y = x * W for up to " << spec_.rows
         << " rows per block on tensor cores; fragment-ordered\n"
         << "// weights decoded straight into B registers; warps split K and meet in shared memory.\n"
         << kPrelude;
    constants();
    out_ << "constexpr int ROWS = " << spec_.rows << ", ROW_TILES = (ROWS + 15) / 16;\n"
         << "constexpr int WARPS = " << t.warps << ", THREADS = WARPS * 32;\n"
         << "constexpr int TILES = " << t.n_tiles << ";      // 8-column tiles per block\n"
         << "constexpr bool PREFETCH = " << (t.chunks_in_flight > 1 ? "true" : "false")
         << ";  // the next step's loads in flight during this step's math\n";
    decode_block();
    dequantize_helpers();
    mma_instruction();
    out_ << (f16() ? "static __device__ __forceinline__ u32 weight_scale(float s) { return scale_pair(s); }\n"
                   : "static __device__ __forceinline__ float weight_scale(float s) { return s; }\n");
    out_ << kMmaLoads << kMmaKernel;
    return out_.str();
}

}  // namespace qjit::jit::cuda
