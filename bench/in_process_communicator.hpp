// A qjit_communicator for ranks that are threads of one process. The collectives move real data
// through shared memory, as a reduce-scatter and an all-gather would between devices:
//   all-reduce:  each rank publishes its buffer; rank r sums chunk r of every rank's buffer (in rank
//                order, so every rank gets the same bits) into its own chunk r; then copies every
//                other rank's summed chunk into its buffer. Three barriers.
//   all-gather:  each rank publishes its send buffer and copies every rank's into its receive
//                buffer. Two barriers.
// The barrier spins briefly and then sleeps (atomic wait), so oversubscribed ranks (more ranks
// than cores) make progress too, only slowly.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "qjit/qjit_tp.h"

namespace qjit_bench {

class Barrier {
public:
    explicit Barrier(int count) : count_(count) {}

    void arrive_and_wait() {
        const uint32_t generation = generation_.load(std::memory_order_acquire);
        if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == count_) {
            arrived_.store(0, std::memory_order_relaxed);  // no one arrives again before the bump below
            generation_.store(generation + 1, std::memory_order_release);
            generation_.notify_all();
            return;
        }
        for (int spin = 0; spin < kSpins; ++spin) {
            if (generation_.load(std::memory_order_acquire) != generation) return;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        generation_.wait(generation, std::memory_order_acquire);
    }

private:
    static constexpr int kSpins = 4000;  // some tens of microseconds, then sleep
    const int count_;
    alignas(64) std::atomic<int> arrived_{0};
    alignas(64) std::atomic<uint32_t> generation_{0};
};

// What a rank's collectives have been called for so far.
struct CollectiveCounts {
    int64_t all_reduces = 0, all_reduce_elements = 0;
    int64_t all_gathers = 0, all_gather_elements = 0;  // elements sent: the receive buffer holds world x this
};

// The ranks of one process; communicator(r) is rank r's view, valid while the group lives.
class InProcessGroup {
public:
    explicit InProcessGroup(int world_size)
        : barrier_(world_size), published_(size_t(world_size)), ranks_(size_t(world_size)) {
        for (int r = 0; r < world_size; ++r) ranks_[size_t(r)].group = this, ranks_[size_t(r)].rank = r;
    }
    InProcessGroup(const InProcessGroup&) = delete;
    InProcessGroup& operator=(const InProcessGroup&) = delete;

    int world_size() const { return int(ranks_.size()); }
    void barrier() { barrier_.arrive_and_wait(); }
    // Read by rank `rank`'s own thread (or after the ranks have joined).
    const CollectiveCounts& counts(int rank) const { return ranks_[size_t(rank)].counts; }

    qjit_communicator communicator(int rank) {
        qjit_communicator comm{};
        comm.rank = rank;
        comm.world_size = world_size();
        comm.user = &ranks_[size_t(rank)];
        comm.all_reduce_sum_f32 = &all_reduce_sum_f32;
        comm.all_gather_f32 = &all_gather_f32;
        comm.error_string = nullptr;  // these collectives cannot fail
        return comm;
    }

private:
    struct Rank {
        InProcessGroup* group = nullptr;
        int rank = 0;
        std::vector<float> partial;  // this rank's chunk of a sum being formed
        CollectiveCounts counts;
    };
    struct alignas(64) Slot {  // one cache line per rank: publishing does not false-share
        const float* data = nullptr;
    };

    // Rank r's chunk of `count` elements: [begin, end).
    static int64_t chunk_begin(int64_t count, int world, int r) { return count * r / world; }

    static int all_reduce_sum_f32(void* user, float* buffer, int64_t count) {
        Rank& self = *static_cast<Rank*>(user);
        InProcessGroup& group = *self.group;
        const int world = group.world_size();
        ++self.counts.all_reduces;
        self.counts.all_reduce_elements += count;
        group.published_[size_t(self.rank)].data = buffer;
        group.barrier();
        const int64_t begin = chunk_begin(count, world, self.rank), end = chunk_begin(count, world, self.rank + 1);
        self.partial.assign(group.published_[0].data + begin, group.published_[0].data + end);
        for (int r = 1; r < world; ++r) {
            const float* other = group.published_[size_t(r)].data + begin;
            for (int64_t i = 0; i < end - begin; ++i) self.partial[size_t(i)] += other[i];
        }
        std::copy(self.partial.begin(), self.partial.end(), buffer + begin);  // no one else reads this chunk now
        group.barrier();
        for (int r = 0; r < world; ++r) {
            if (r == self.rank) continue;
            const int64_t b = chunk_begin(count, world, r), e = chunk_begin(count, world, r + 1);
            std::memcpy(buffer + b, group.published_[size_t(r)].data + b, size_t(e - b) * sizeof(float));
        }
        group.barrier();  // every rank has read this rank's chunk: its buffer is its own again
        return 0;
    }

    static int all_gather_f32(void* user, const float* send, float* receive, int64_t count) {
        Rank& self = *static_cast<Rank*>(user);
        InProcessGroup& group = *self.group;
        ++self.counts.all_gathers;
        self.counts.all_gather_elements += count;
        group.published_[size_t(self.rank)].data = send;
        group.barrier();
        for (int r = 0; r < group.world_size(); ++r)
            std::memcpy(receive + r * count, group.published_[size_t(r)].data, size_t(count) * sizeof(float));
        group.barrier();  // every rank has read this rank's send buffer
        return 0;
    }

    Barrier barrier_;
    std::vector<Slot> published_;
    std::vector<Rank> ranks_;
};

}  // namespace qjit_bench
