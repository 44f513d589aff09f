// A persistent pool of worker threads. The calling thread works too, so a pool of size T runs
// T - 1 workers. Between jobs a worker spins on the job counter for a short while (a forward pass
// calls layer after layer, microseconds apart) and then sleeps on a condition variable, so
// dispatch and join cost well under a microsecond when the pool is busy and nothing when idle.
//
// Workers claim tasks; they do not sign up for jobs. The caller claims too, and returns once every
// task is claimed and every claimed task has finished: it never waits for a worker that has not
// started. That matters when a worker cannot run, above all when it shares the caller's core (the
// other core busy, or the process confined to one): a caller that waited for each worker to enter
// the job spun until the scheduler took its core away, about 200 us and two involuntary context
// switches per job, where doing the tasks alone takes a few microseconds.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qjit {

class ThreadPool {
public:
    // before_claiming: called by a worker each time it sees a new job, before it claims any of its
    // tasks; tests hold workers back with it (empty: nothing).
    explicit ThreadPool(int num_threads, std::function<void()> before_claiming = {});
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return int(workers_.size()) + 1; }

    // Calls task(i) for every i in [0, num_tasks), spread over the pool. When another thread is
    // already running a job on this pool, or the caller says the job is too small to be worth a
    // dispatch, the caller runs the tasks alone. A task that throws (on any thread) stops the
    // job: no further task starts, and the first exception is rethrown here once every started
    // task has finished.
    template <typename Task>
    void parallel_for(int64_t num_tasks, Task& task, bool worth_dispatching = true) {
        if (!worth_dispatching) {
            for (int64_t i = 0; i < num_tasks; ++i) task(i);
            return;
        }
        run(num_tasks, [](void* closure, int64_t i) { (*static_cast<Task*>(closure))(i); }, &task);
    }

    // body(begin, end) over [0, count) in contiguous ranges of at least `grain` items, at most
    // `ranges_per_thread` per thread: a claim costs a cache line passed between cores (a
    // microsecond across a VM's cores), and a thread's items in one run keep its prefetchers on
    // one stream. Several ranges per thread let a thread the OS delays leave its share to the
    // others. A loop of one range runs on the calling thread.
    template <typename Body>
    void parallel_ranges(int64_t count, int64_t grain, int64_t ranges_per_thread, const Body& body) {
        if (count <= 0) return;
        const int64_t most = std::max<int64_t>(1, int64_t(size()) * ranges_per_thread);
        const int64_t ranges = std::clamp<int64_t>(count / std::max<int64_t>(1, grain), 1, most);
        const int64_t range_size = (count + ranges - 1) / ranges;
        auto range = [&](int64_t i) { body(i * range_size, std::min(count, (i + 1) * range_size)); };
        parallel_for((count + range_size - 1) / range_size, range, ranges > 1);
    }

private:
    using TaskFn = void (*)(void*, int64_t);
    void run(int64_t num_tasks, TaskFn fn, void* closure);
    // Claims and runs tasks of job `generation` until none is left (or the job is another's).
    void work_on_job(uint64_t generation);
    // The next unclaimed task of job `generation`; false when there is none.
    bool claim(uint64_t generation, int64_t* task);
    void worker_loop();
    bool wait_for_job(uint64_t seen);  // false when the pool is stopping

    std::vector<std::thread> workers_;
    std::function<void()> before_claiming_;
    std::mutex mutex_;
    std::condition_variable job_posted_;
    // Both tagged with the job's generation in the high 32 bits, so a worker that wakes late can
    // neither claim a task of a later job by an index of an earlier one nor read its task count.
    std::atomic<uint64_t> job_{0};     // generation << 32 | the job's task count
    std::atomic<uint64_t> ticket_{0};  // generation << 32 | the next task index
    std::atomic<int64_t> finished_{0};  // tasks of the current job finished (or skipped after a failure)
    std::atomic<int> sleepers_{0};      // workers blocked (or about to block) on job_posted_
    std::atomic<bool> stopping_{false};
    std::atomic<bool> busy_{false};
    std::atomic<bool> failed_{false};   // a task of the current job threw: start no more
    uint64_t generation_ = 0;           // of the last job posted (the posting caller's only)

    // Written by the caller before the job is published; read by a worker only while it holds a
    // claimed task, when the caller cannot have moved on.
    TaskFn fn_ = nullptr;
    void* closure_ = nullptr;
    std::mutex error_mutex_;
    std::exception_ptr error_;  // the current job's first failure
};

}  // namespace qjit
