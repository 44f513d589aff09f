#include "runtime/ffn/sharded_ffn.hpp"

#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "runtime/ffn/dense_ffn.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

namespace {

using Clock = std::chrono::steady_clock;

double microseconds_since(Clock::time_point start) {
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
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

// The naive algorithm's middle: every rank's hidden values gathered, and this rank's chunk of them
// in W_down's storage order: column j is original column P2[rank * c + j], which rank P2[..] / c
// computed as its column P2[..] % c.
std::vector<float> gather_in_down_order(const ShardedFfn& ffn, Collectives& collectives,
                                        const std::vector<float>& hidden, int64_t m, double* permute_us) {
    const int64_t c = ffn.shard.hidden();
    std::vector<float> gathered;
    const float* all = hidden.data();
    if (ffn.world_size > 1) {
        gathered.resize(size_t(ffn.world_size * m * c));
        collectives.all_gather(hidden.data(), gathered.data(), m * c);
        all = gathered.data();
    }
    const auto start = Clock::now();
    // Where column j of this rank's chunk sits in a row of the gathered blocks: rank o / c's block, column o % c.
    std::vector<int64_t> source(static_cast<size_t>(c));
    const int32_t* rows = ffn.down_rows.data() + ffn.rank * c;
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

void sharded_ffn_forward(const ShardedFfn& ffn, const qjit_communicator& comm, const float* x, int64_t m, float* y,
                         qjit_tp_timing* timing) {
    const auto start = Clock::now();
    const int64_t c = ffn.shard.hidden(), n = ffn.shard.outputs();
    Collectives collectives(comm);
    double permute_us = 0;
    try {
        std::vector<float> hidden(size_t(m * c));
        std::vector<float> gate(ffn.shard.gate ? size_t(m * c) : 0);
        ffn_hidden(ffn.shard, x, m, hidden.data(), gate.data());
        if (ffn.all_gather) hidden = gather_in_down_order(ffn, collectives, hidden, m, &permute_us);
        linear_forward(*ffn.shard.down, hidden.data(), m, y);
        if (ffn.world_size > 1) collectives.all_reduce_sum(y, m * n);
    } catch (const Error& e) {
        if (e.status() == QJIT_ERROR_COMMUNICATION) std::fill(y, y + m * n, std::numeric_limits<float>::quiet_NaN());
        throw;
    }
    if (timing) {
        timing->total_us = microseconds_since(start);
        timing->communicate_us = collectives.microseconds();
        timing->permute_us = permute_us;
        timing->compute_us = timing->total_us - timing->communicate_us - permute_us;
    }
}

}  // namespace qjit
