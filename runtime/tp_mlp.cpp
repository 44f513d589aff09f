#include "runtime/tp_mlp.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/activations.hpp"
#include "base/error.hpp"
#include "format/tp_shards.hpp"

namespace qjit {

namespace {

using Clock = std::chrono::steady_clock;

double microseconds_since(Clock::time_point start) {
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

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

// The caller's collectives, timed, with failures turned into QJIT_ERROR_COMMUNICATION.
class Collectives {
public:
    explicit Collectives(const qjit_communicator& comm) : comm_(comm) {}

    void all_reduce_sum(float* buffer, int64_t count) {
        const auto start = Clock::now();
        const int code = comm_.all_reduce_sum_f32(comm_.user, buffer, count);
        microseconds_ += microseconds_since(start);
        if (code != 0) failed("all_reduce_sum_f32", code);
    }
    void all_gather(const float* send, float* receive, int64_t count) {
        const auto start = Clock::now();
        const int code = comm_.all_gather_f32(comm_.user, send, receive, count);
        microseconds_ += microseconds_since(start);
        if (code != 0) failed("all_gather_f32", code);
    }
    double microseconds() const { return microseconds_; }

private:
    [[noreturn]] void failed(const char* function, int code) const {
        const char* text = comm_.error_string ? comm_.error_string(comm_.user, code) : nullptr;
        fail(QJIT_ERROR_COMMUNICATION, "the communicator's ", function, " failed on rank ", comm_.rank, " of ",
             comm_.world_size, ": error ", code, text ? concat(" (", text, ")") : std::string());
    }
    const qjit_communicator& comm_;
    double microseconds_ = 0;
};

// The naive algorithm's middle: every rank's activations gathered, and this rank's chunk of them in
// W_down's storage order: column j is original column P2[rank * c + j], which rank P2[..] / c
// computed as its column P2[..] % c.
std::vector<float> gather_in_down_order(const qjit_tp_mlp& mlp, Collectives& collectives,
                                        const std::vector<float>& hidden, int64_t m, double* permute_us) {
    const int64_t c = mlp.shard_n1();
    std::vector<float> gathered;
    const float* all = hidden.data();
    if (mlp.world_size > 1) {
        gathered.resize(size_t(mlp.world_size * m * c));
        collectives.all_gather(hidden.data(), gathered.data(), m * c);
        all = gathered.data();
    }
    const auto start = Clock::now();
    // Where column j of this rank's chunk sits in a row of the gathered blocks: rank o / c's block, column o % c.
    std::vector<int64_t> source(static_cast<size_t>(c));
    const int32_t* rows = mlp.down_rows.data() + mlp.rank * c;
    for (int64_t j = 0; j < c; ++j) source[size_t(j)] = (rows[j] / c) * m * c + rows[j] % c;
    std::vector<float> chunk(size_t(m * c));
    for (int64_t i = 0; i < m; ++i) {
        const float* row = all + i * c;
        float* out = chunk.data() + i * c;
        for (int64_t j = 0; j < c; ++j) out[j] = row[source[size_t(j)]];
    }
    *permute_us = microseconds_since(start);
    return chunk;
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
    const auto start = Clock::now();
    const int64_t c = mlp.shard_n1();
    Collectives collectives(comm);
    double permute_us = 0;
    try {
        std::vector<float> hidden(size_t(m * c));
        linear_forward(*mlp.up, x, m, hidden.data());
        if (mlp.kind == QJIT_MLP_SWIGLU) {
            std::vector<float> gate(size_t(m * c));
            linear_forward(*mlp.gate, x, m, gate.data());
            for (size_t i = 0; i < hidden.size(); ++i) hidden[i] *= silu(gate[i]);
        } else {
            for (float& v : hidden) v = gelu(v);
        }
        if (needs_all_gather(mlp))
            hidden = gather_in_down_order(mlp, collectives, hidden, m, &permute_us);
        linear_forward(*mlp.down, hidden.data(), m, y);
        if (mlp.world_size > 1) collectives.all_reduce_sum(y, m * mlp.n2);
    } catch (const Error& e) {
        if (e.status() == QJIT_ERROR_COMMUNICATION)
            std::fill(y, y + m * mlp.n2, std::numeric_limits<float>::quiet_NaN());
        throw;
    }
    if (timing) {
        timing->total_us = microseconds_since(start);
        timing->communicate_us = collectives.microseconds();
        timing->permute_us = permute_us;
        timing->compute_us = timing->total_us - timing->communicate_us - permute_us;
    }
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
