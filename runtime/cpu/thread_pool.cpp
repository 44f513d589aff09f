#include "runtime/cpu/thread_pool.hpp"

#include <chrono>
#include <utility>

namespace qjit {

namespace {

// How long an idle worker keeps spinning before it sleeps.
constexpr auto kSpinTime = std::chrono::milliseconds(2);
// Busy-wait rounds before a waiting thread starts yielding its core: when more threads are
// runnable than there are cores, the thread being waited for may need this core to finish.
constexpr int kPauseRounds = 4096;

inline void cpu_relax(int round) {
    if (round < kPauseRounds) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        std::this_thread::yield();
    }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_.store(true);
    }
    job_posted_.notify_all();
    for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::work_on_current_job() {
    for (int64_t i = next_task_.fetch_add(1); i < num_tasks_; i = next_task_.fetch_add(1)) {
        try {
            fn_(closure_, i);
        } catch (...) {
            // The first failure is rethrown to the caller once every thread is out of the job; no
            // task is started after it.
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
            next_task_.store(num_tasks_);
        }
    }
}

void ThreadPool::run(int64_t num_tasks, TaskFn fn, void* closure) {
    if (num_tasks <= 0) return;
    bool expected = false;
    if (workers_.empty() || num_tasks == 1 || !busy_.compare_exchange_strong(expected, true)) {
        for (int64_t i = 0; i < num_tasks; ++i) fn(closure, i);
        return;
    }
    fn_ = fn;
    closure_ = closure;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    workers_running_.store(int(workers_.size()), std::memory_order_relaxed);
    // A worker announces itself in sleepers_ before its last look at generation_ (both seq_cst),
    // so either it sees this job or this sees it and wakes it; spinning workers need no lock.
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        job_posted_.notify_all();
    }
    work_on_current_job();
    for (int round = 0; workers_running_.load(std::memory_order_acquire) != 0; ++round) cpu_relax(round);
    std::exception_ptr error = std::exchange(error_, nullptr);  // every worker is out: no lock needed
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
}

bool ThreadPool::wait_for_job(uint64_t seen) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0;; ++i) {
        if (generation_.load(std::memory_order_acquire) != seen) return true;
        if (stopping_.load(std::memory_order_relaxed)) return false;
        cpu_relax(i);
        if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    job_posted_.wait(lock, [&] { return stopping_.load() || generation_.load() != seen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return !stopping_.load();
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    while (wait_for_job(seen)) {
        seen = generation_.load(std::memory_order_acquire);
        work_on_current_job();
        workers_running_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace qjit
