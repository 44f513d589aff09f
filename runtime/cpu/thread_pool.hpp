// A persistent pool of worker threads. The calling thread works too, so a pool of size T runs
// T - 1 workers. Between jobs a worker spins on the job counter for a short while (a forward pass
// calls layer after layer, microseconds apart) and then sleeps on a condition variable, so
// dispatch and join cost well under a microsecond when the pool is busy and nothing when idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace qjit {

class ThreadPool {
public:
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return int(workers_.size()) + 1; }

    // Calls task(i) for every i in [0, num_tasks), spread over the pool. When another thread is
    // already running a job on this pool, or the caller says the job is too small to be worth a
    // dispatch, the caller runs the tasks alone. A task that throws (on any thread) stops the
    // job: no further task starts, and the first exception is rethrown here once every thread
    // has left the job.
    template <typename Task>
    void parallel_for(int64_t num_tasks, Task& task, bool worth_dispatching = true) {
        if (!worth_dispatching) {
            for (int64_t i = 0; i < num_tasks; ++i) task(i);
            return;
        }
        run(num_tasks, [](void* closure, int64_t i) { (*static_cast<Task*>(closure))(i); }, &task);
    }

private:
    using TaskFn = void (*)(void*, int64_t);
    void run(int64_t num_tasks, TaskFn fn, void* closure);
    void work_on_current_job();
    void worker_loop();
    bool wait_for_job(uint64_t seen);  // false when the pool is stopping

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable job_posted_;
    std::atomic<uint64_t> generation_{0};  // bumped for each job; workers wait for a new value
    std::atomic<int> workers_running_{0};  // workers still inside the current job
    std::atomic<int> sleepers_{0};         // workers blocked (or about to block) on job_posted_
    std::atomic<bool> stopping_{false};
    std::atomic<bool> busy_{false};

    TaskFn fn_ = nullptr;
    void* closure_ = nullptr;
    int64_t num_tasks_ = 0;
    std::atomic<int64_t> next_task_{0};
    std::mutex error_mutex_;
    std::exception_ptr error_;  // the current job's first failure
};

}  // namespace qjit
