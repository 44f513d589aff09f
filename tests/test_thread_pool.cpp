// The thread pool: every task runs exactly once, through the spinning path (jobs back to back),
// the sleeping path (gaps longer than the spin time) and concurrent callers (one runs inline).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cpu/thread_pool.hpp"

namespace qjit {
namespace {

// Runs one job of `tasks` tasks and checks each ran exactly once.
void expect_each_task_once(ThreadPool& pool, int64_t tasks) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
    auto task = [&](int64_t i) { runs[size_t(i)].fetch_add(1); };
    pool.parallel_for(tasks, task);
    for (int64_t i = 0; i < tasks; ++i) ASSERT_EQ(runs[size_t(i)].load(), 1) << "task " << i << " of " << tasks;
}

TEST(ThreadPool, BackToBackJobsRunEveryTaskOnce) {
    ThreadPool pool(4);
    for (int job = 0; job < 500; ++job) expect_each_task_once(pool, 1 + job % 37);
}

// A task that throws, on whichever thread runs it, reaches the caller once the job is over; the
// pool stays usable. Each task index throws in turn, so workers and the caller both throw.
TEST(ThreadPool, ExceptionsInTasksReachTheCaller) {
    ThreadPool pool(3);
    for (int64_t failing = 0; failing < 64; ++failing) {
        std::atomic<int> started{0};
        auto task = [&](int64_t i) {
            started.fetch_add(1);
            if (i == failing) throw std::runtime_error("task " + std::to_string(i));
        };
        try {
            pool.parallel_for(64, task);
            ADD_FAILURE() << "no exception for task " << failing;
        } catch (const std::runtime_error& e) {
            EXPECT_EQ(std::string(e.what()), "task " + std::to_string(failing));
        }
        EXPECT_GE(started.load(), 1);
        expect_each_task_once(pool, 40);
    }
}

TEST(ThreadPool, JobsAfterIdleGapsWakeSleepingWorkers) {
    ThreadPool pool(3);
    for (int job = 0; job < 5; ++job) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the 2 ms spin: workers sleep
        expect_each_task_once(pool, 64);
    }
}

TEST(ThreadPool, ConcurrentCallersBothFinish) {
    ThreadPool pool(2);
    std::atomic<int64_t> total{0};
    auto caller = [&] {
        for (int job = 0; job < 500; ++job) {
            auto task = [&](int64_t i) { total.fetch_add(i + 1); };
            pool.parallel_for(16, task);
        }
    };
    std::thread a(caller), b(caller);
    a.join();
    b.join();
    EXPECT_EQ(total.load(), 2 * 500 * (16 * 17 / 2));
}

TEST(ThreadPool, SmallJobsRunInlineOnTheCaller) {
    ThreadPool pool(4);
    const std::thread::id caller = std::this_thread::get_id();
    bool all_on_caller = true;
    auto task = [&](int64_t) { all_on_caller = all_on_caller && std::this_thread::get_id() == caller; };
    pool.parallel_for(100, task, /*worth_dispatching=*/false);
    EXPECT_TRUE(all_on_caller);
}

TEST(ThreadPool, DestroysCleanlyWhileWorkersSleepOrSpin) {
    for (int i = 0; i < 20; ++i) {
        ThreadPool pool(3);
        if (i % 2) expect_each_task_once(pool, 8);
    }
}

}  // namespace
}  // namespace qjit
