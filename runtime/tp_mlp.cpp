#include "runtime/tp_mlp.hpp"

#include <numeric>

#include "base/error.hpp"
#include "format/tp_shards.hpp"
#include "runtime/ffn/sharded_ffn.hpp"

namespace qjit {

namespace {

void check_sharding(qjit_mlp_kind kind, qjit_tp_algorithm algorithm, int rank, int world_size) {
    require(kind == QJIT_MLP_SWIGLU || kind == QJIT_MLP_GELU, "kind is ", int(kind),
            "; expected QJIT_MLP_SWIGLU (0) or QJIT_MLP_GELU (1)");
    require(algorithm == QJIT_TP_NAIVE || algorithm == QJIT_TP_AWARE, "algorithm is ", int(algorithm),
            "; expected QJIT_TP_NAIVE (0) or QJIT_TP_AWARE (1)");
    require(world_size >= 1, "world_size is ", world_size, "; expected at least 1");
    require(rank >= 0 && rank < world_size, "rank is ", rank, "; expected 0 .. ", world_size - 1,
            " (world_size ", world_size, ")");
}

// N1 splits into whole shards, and each rank's rows of W_down are whole groups.
void check_split(int64_t n1, int world_size, const QuantParams& down) {
    require(n1 % world_size == 0, "N1 = ", n1, " does not split into ", world_size,
            " equal shards: N1 must be a multiple of world_size");
    const int64_t rows = n1 / world_size;
    require(down.per_column() || rows % down.group_size == 0, "each rank's ", rows,
            " rows of W_down are not whole groups of ", down.group_size,
            ": N1 / world_size must be a multiple of W_down's group size");
}

// The intermediate columns rank `rank` computes: TP-aware, the original columns its W_down rows
// are (P2's chunk); naive, the original columns in order.
std::vector<int32_t> shard_columns(const std::vector<int32_t>& down_rows, int64_t rows, int rank,
                                   qjit_tp_algorithm algorithm) {
    std::vector<int32_t> columns(static_cast<size_t>(rows));
    if (algorithm == QJIT_TP_AWARE)
        std::copy_n(down_rows.begin() + rank * rows, rows, columns.begin());
    else
        std::iota(columns.begin(), columns.end(), int32_t(rank * rows));
    return columns;
}

// The rank's shards as the Sharded FFN strategy runs them.
ShardedFfn sharded_parts(const qjit_tp_mlp& mlp) {
    const qjit_ffn_activation activation = mlp.kind == QJIT_MLP_SWIGLU ? QJIT_FFN_SWIGLU : QJIT_FFN_GELU;
    return {{activation, mlp.gate.get(), mlp.up.get(), mlp.down.get()}, mlp.rank, mlp.world_size,
            needs_all_gather(mlp), mlp.down_rows};
}

}  // namespace

std::unique_ptr<qjit_tp_mlp> make_tp_mlp(qjit_context* context, const MlpMatrices& mlp, int rank, int world_size,
                                         qjit_tp_algorithm algorithm) {
    require(context != nullptr, "context is NULL");
    check_sharding(mlp.kind, algorithm, rank, world_size);
    const QuantParams &up = mlp.up.params, &down = mlp.down.params;
    require(down.k == up.n, "W_down has ", down.k, " inputs; W_up has ", up.n, " outputs (N1): they must be equal");
    if (mlp.kind == QJIT_MLP_SWIGLU)
        require(mlp.gate.params.k == up.k && mlp.gate.params.n == up.n, "W_gate is ", mlp.gate.params.k, " x ",
                mlp.gate.params.n, "; W_up is ", up.k, " x ", up.n, ": they must be the same shape");
    check_split(up.n, world_size, down);

    auto result = std::make_unique<qjit_tp_mlp>();
    qjit_tp_mlp& r = *result;
    r.context = context;
    r.kind = mlp.kind;
    r.algorithm = algorithm;
    r.rank = rank;
    r.world_size = world_size;
    r.k1 = up.k;
    r.n1 = up.n;
    r.n2 = down.n;
    r.down_rows = storage_row_order(down);
    const int64_t c = r.shard_n1();
    const std::vector<int32_t> columns = shard_columns(r.down_rows, c, rank, algorithm);
    r.up = make_linear(context, select_columns(mlp.up, columns));
    if (mlp.kind == QJIT_MLP_SWIGLU) r.gate = make_linear(context, select_columns(mlp.gate, columns));
    r.down = make_linear(context, select_storage_rows(mlp.down, rank * c, c));
    return result;
}

void check_tp_mlp(const qjit_tp_mlp& mlp) {
    check_sharding(mlp.kind, mlp.algorithm, mlp.rank, mlp.world_size);
    require(mlp.up && mlp.down && (mlp.kind == QJIT_MLP_GELU) == !mlp.gate, "the MLP's shard layers are missing");
    check_split(mlp.n1, mlp.world_size, mlp.down->params);
    const int64_t c = mlp.shard_n1();
    require(int64_t(mlp.down_rows.size()) == mlp.n1, "W_down's row order holds ", mlp.down_rows.size(),
            " rows; expected N1 = ", mlp.n1);
    std::vector<bool> seen(size_t(mlp.n1), false);
    for (int32_t row : mlp.down_rows) {
        require(row >= 0 && row < mlp.n1 && !seen[size_t(row)], "W_down's row order is not a permutation of 0..N1-1");
        seen[size_t(row)] = true;
    }
    const std::vector<int32_t> columns = shard_columns(mlp.down_rows, c, mlp.rank, mlp.algorithm);
    for (const qjit_linear* shard : {mlp.up.get(), mlp.gate.get()}) {
        if (!shard) continue;
        require(shard->params.k == mlp.k1 && shard->params.n == c, "a W_up or W_gate shard is ", shard->params.k,
                " x ", shard->params.n, "; expected K1 x N1 / world_size = ", mlp.k1, " x ", c);
        const bool recorded = shard->params.permuted_columns ? shard->params.column_order == columns
                                                             : c == mlp.n1 && is_identity(columns);
        require(recorded, "a W_up or W_gate shard's columns are not the ones its rank and algorithm take");
    }
    require(mlp.down->params.k == c && mlp.down->params.n == mlp.n2 && !mlp.down->params.act_order,
            "the W_down shard is ", mlp.down->params.k, " x ", mlp.down->params.n, "; expected N1 / world_size x N2 = ",
            c, " x ", mlp.n2, " in storage order");
}

void tp_mlp_forward(const qjit_tp_mlp& mlp, const qjit_communicator& comm, const float* x, int64_t m, float* y,
                    qjit_tp_timing* timing) {
    require(comm.rank == mlp.rank && comm.world_size == mlp.world_size, "the communicator is rank ", comm.rank, " of ",
            comm.world_size, "; this MLP's shards are rank ", mlp.rank, " of ", mlp.world_size);
    require(mlp.world_size == 1 || (comm.all_reduce_sum_f32 && (mlp.algorithm == QJIT_TP_AWARE || comm.all_gather_f32)),
            "the communicator lacks the collectives the forward needs (all_reduce_sum_f32",
            mlp.algorithm == QJIT_TP_NAIVE ? ", all_gather_f32)" : ")");
    sharded_ffn_forward(sharded_parts(mlp), comm, x, m, y, timing);
}

bool needs_all_gather(const qjit_tp_mlp& mlp) {
    return mlp.algorithm == QJIT_TP_NAIVE && (mlp.world_size > 1 || !is_identity(mlp.down_rows));
}

qjit_tp_traffic tp_mlp_traffic(const qjit_tp_mlp& mlp, int64_t m) {
    const bool several = mlp.world_size > 1;
    qjit_tp_traffic t{};
    t.all_gathers = several && mlp.algorithm == QJIT_TP_NAIVE ? 1 : 0;
    t.all_reduces = several ? 1 : 0;
    t.all_gather_bytes = t.all_gathers * m * mlp.n1 * int64_t(sizeof(float));
    t.all_reduce_bytes = t.all_reduces * m * mlp.n2 * int64_t(sizeof(float));
    const int64_t w = mlp.world_size;
    t.bytes_sent = (w - 1) * t.all_gather_bytes / w + 2 * (w - 1) * t.all_reduce_bytes / w;
    return t;
}

}  // namespace qjit
