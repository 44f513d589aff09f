// The thread pool: every task runs exactly once, through the spinning path (jobs back to back),
// the sleeping path (gaps longer than the spin time) and concurrent callers (one runs inline); a
// caller never waits for a worker that has not started (one that shares its core cannot); ranges
// cover every item once in few contiguous runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
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

// parallel_ranges covers [0, count) exactly once in contiguous ranges of at least `grain` items
// (the last may be shorter), no more than ranges_per_thread per thread; a count of one grain or
// less is one range on the caller.
TEST(ThreadPool, RangesCoverEveryItemOnceInFewContiguousRuns) {
    ThreadPool pool(3);
    for (const int64_t count : {int64_t(1), int64_t(7), int64_t(100), int64_t(1000), int64_t(12345)})
        for (const int64_t grain : {int64_t(1), int64_t(5), int64_t(64), int64_t(5000)})
            for (const int64_t per_thread : {int64_t(1), int64_t(4), int64_t(8)}) {
                std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
                std::mutex mutex;
                std::vector<std::pair<int64_t, int64_t>> ranges;
                pool.parallel_ranges(count, grain, per_thread, [&](int64_t begin, int64_t end) {
                    for (int64_t i = begin; i < end; ++i) runs[size_t(i)].fetch_add(1);
                    std::lock_guard<std::mutex> lock(mutex);
                    ranges.push_back({begin, end});
                });
                const std::string what = std::to_string(count) + " items, grain " + std::to_string(grain) + ", " +
                                         std::to_string(per_thread) + " a thread";
                for (int64_t i = 0; i < count; ++i) ASSERT_EQ(runs[size_t(i)].load(), 1) << what << ": item " << i;
                EXPECT_LE(int64_t(ranges.size()), 3 * per_thread) << what;
                std::sort(ranges.begin(), ranges.end());
                for (size_t r = 0; r + 1 < ranges.size(); ++r)
                    EXPECT_GE(ranges[r].second - ranges[r].first, std::min(grain, count)) << what;
                if (count <= grain) EXPECT_EQ(ranges.size(), 1u) << what;
            }
}

// Workers held back before they claim anything (as a worker is that shares the caller's core):
// the caller runs every task itself and returns; once released, the workers take part again.
TEST(ThreadPool, CallerNeverWaitsForAWorkerThatHasNotStarted) {
    std::mutex mutex;
    std::condition_variable released_signal;
    bool released = false;
    ThreadPool pool(3, [&] {
        std::unique_lock<std::mutex> lock(mutex);
        released_signal.wait(lock, [&] { return released; });
    });
    auto release = [&] {
        std::lock_guard<std::mutex> lock(mutex);
        released = true;
        released_signal.notify_all();
    };
    auto held_job = std::async(std::launch::async, [&] {
        const std::thread::id caller = std::this_thread::get_id();
        for (int job = 0; job < 50; ++job) {
            std::vector<std::atomic<int>> runs(64);
            std::atomic<bool> all_on_caller{true};
            auto task = [&](int64_t i) {
                runs[size_t(i)].fetch_add(1);
                if (std::this_thread::get_id() != caller) all_on_caller = false;
            };
            pool.parallel_for(64, task);
            for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(runs[size_t(i)].load(), 1) << "task " << i;
            EXPECT_TRUE(all_on_caller.load());
        }
    });
    // Not a timing: a caller that waits for the held workers never returns. The generous limit
    // only turns that hang into a failure with a name.
    const bool returned = held_job.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
    EXPECT_TRUE(returned) << "the caller waited for workers that had not started";
    release();
    held_job.get();
    std::atomic<bool> worker_ran{false};
    const std::thread::id caller = std::this_thread::get_id();
    for (int job = 0; job < 2000 && !worker_ran; ++job) {
        auto task = [&](int64_t) {
            if (std::this_thread::get_id() != caller) worker_ran = true;
            std::this_thread::yield();
        };
        pool.parallel_for(32, task);
    }
    EXPECT_TRUE(worker_ran.load()) << "released workers never took a task";
}

// Tasks of a job are never run under an index of another: jobs of different sizes back to back,
// from two callers, with workers that wake late (the hook yields before each claim).
TEST(ThreadPool, LateWorkersNeverRunATaskOfAnotherJob) {
    ThreadPool pool(3, [] { std::this_thread::yield(); });
    auto caller = [&](int offset) {
        for (int job = 0; job < 400; ++job) expect_each_task_once(pool, 2 + (job + offset) % 29);
    };
    std::thread a(caller, 0), b(caller, 7);
    a.join();
    b.join();
}

TEST(ThreadPool, DestroysCleanlyWhileWorkersSleepOrSpin) {
    for (int i = 0; i < 20; ++i) {
        ThreadPool pool(3);
        if (i % 2) expect_each_task_once(pool, 8);
    }
}

}  // namespace
}  // namespace qjit
