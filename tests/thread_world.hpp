// Ranks of a tensor-parallel world as threads of one process: a qjit_communicator per rank whose
// collectives meet at a barrier and read each other's buffers. For tests, not for speed.
#pragma once

#include <barrier>
#include <functional>
#include <thread>
#include <vector>

#include "qjit/qjit_tp.h"

namespace qjit::test {

class ThreadWorld {
public:
    explicit ThreadWorld(int world_size)
        : world_size_(world_size), barrier_(world_size), sums_(size_t(world_size)), buffers_(size_t(world_size)),
          ranks_(size_t(world_size)) {
        for (int r = 0; r < world_size; ++r) ranks_[size_t(r)] = {this, r};
    }
    ThreadWorld(const ThreadWorld&) = delete;
    ThreadWorld& operator=(const ThreadWorld&) = delete;

    qjit_communicator communicator(int rank) {
        return {rank, world_size_, &ranks_[size_t(rank)], &all_reduce_sum, &all_gather, nullptr};
    }

    // body(rank) on world_size threads at once; returns when every one has.
    void run(const std::function<void(int rank)>& body) {
        std::vector<std::thread> threads;
        for (int r = 0; r < world_size_; ++r) threads.emplace_back(body, r);
        for (std::thread& t : threads) t.join();
    }

private:
    struct Rank {
        ThreadWorld* world;
        int rank;
    };

    static int all_reduce_sum(void* user, float* buffer, int64_t count) {
        auto& [world, rank] = *static_cast<Rank*>(user);
        world->buffers_[size_t(rank)] = buffer;
        world->barrier_.arrive_and_wait();  // every rank's buffer published
        std::vector<float>& sum = world->sums_[size_t(rank)];
        sum.assign(size_t(count), 0.0f);
        for (const float* other : world->buffers_)
            for (int64_t i = 0; i < count; ++i) sum[size_t(i)] += other[i];
        world->barrier_.arrive_and_wait();  // every rank done reading the others'
        std::copy(sum.begin(), sum.end(), buffer);
        return 0;
    }

    static int all_gather(void* user, const float* send, float* receive, int64_t count) {
        auto& [world, rank] = *static_cast<Rank*>(user);
        world->buffers_[size_t(rank)] = const_cast<float*>(send);
        world->barrier_.arrive_and_wait();
        for (int r = 0; r < world->world_size_; ++r)
            std::copy(world->buffers_[size_t(r)], world->buffers_[size_t(r)] + count, receive + r * count);
        world->barrier_.arrive_and_wait();
        return 0;
    }

    int world_size_;
    std::barrier<> barrier_;
    std::vector<std::vector<float>> sums_;
    std::vector<float*> buffers_;
    std::vector<Rank> ranks_;
};

}  // namespace qjit::test
