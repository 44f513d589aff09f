#include "runtime/cpu/thread_pool.hpp"

#include <chrono>
#include <utility>

namespace qjit {

namespace {

// How long an idle worker keeps spinning before it sleeps.
constexpr auto kSpinTime = std::chrono::milliseconds(2);
// Busy-wait rounds before an idle worker starts yielding its core: when more threads are runnable
// than there are cores, a caller may need this core.
constexpr int kPauseRounds = 4096;
// The caller waits only for tasks already running on other threads (microseconds), so it yields
// much sooner: a task's thread that was preempted may need this very core to finish.
constexpr int kJoinPauseRounds = 64;

constexpr uint64_t kIndexMask = 0xffffffffu;

inline void cpu_relax(int round, int pause_rounds) {
    if (round < pause_rounds) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        std::this_thread::yield();
    }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, std::function<void()> before_claiming)
    : before_claiming_(std::move(before_claiming)) {
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

bool ThreadPool::claim(uint64_t generation, int64_t* task) {
    const uint64_t job = job_.load(std::memory_order_acquire);
    if (job >> 32 != generation) return false;
    const uint64_t count = job & kIndexMask;
    uint64_t ticket = ticket_.load(std::memory_order_acquire);
    while (ticket >> 32 == generation && (ticket & kIndexMask) < count) {
        if (ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
            *task = int64_t(ticket & kIndexMask);
            return true;
        }
    }
    return false;
}

void ThreadPool::work_on_job(uint64_t generation) {
    for (int64_t i = 0; claim(generation, &i);) {
        if (!failed_.load(std::memory_order_relaxed)) {
            try {
                fn_(closure_, i);
            } catch (...) {
                // The first failure is rethrown to the caller once every started task is over; the
                // tasks claimed after it are skipped.
                std::lock_guard<std::mutex> lock(error_mutex_);
                if (!error_) error_ = std::current_exception();
                failed_.store(true, std::memory_order_relaxed);
            }
        }
        finished_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run(int64_t num_tasks, TaskFn fn, void* closure) {
    if (num_tasks <= 0) return;
    bool expected = false;
    if (workers_.empty() || num_tasks == 1 || num_tasks > int64_t(kIndexMask / 2) ||
        !busy_.compare_exchange_strong(expected, true)) {
        for (int64_t i = 0; i < num_tasks; ++i) fn(closure, i);
        return;
    }
    // No worker holds a claimed task between jobs, so these plain fields are the caller's alone.
    fn_ = fn;
    closure_ = closure;
    failed_.store(false, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    generation_ = (generation_ + 1) & kIndexMask;
    if (generation_ == 0) generation_ = 1;  // 0 is the workers' "none seen yet"
    ticket_.store(generation_ << 32, std::memory_order_release);
    // A worker announces itself in sleepers_ before its last look at job_ (both seq_cst), so
    // either it sees this job or this sees it and wakes it; spinning workers need no lock.
    job_.store(generation_ << 32 | uint64_t(num_tasks), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        job_posted_.notify_all();
    }
    work_on_job(generation_);
    // Every task is claimed: wait only for those still running elsewhere.
    for (int round = 0; finished_.load(std::memory_order_acquire) != num_tasks; ++round)
        cpu_relax(round, kJoinPauseRounds);
    std::exception_ptr error = std::exchange(error_, nullptr);  // every task is over: no lock needed
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
}

bool ThreadPool::wait_for_job(uint64_t seen) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0;; ++i) {
        if (job_.load(std::memory_order_acquire) >> 32 != seen) return true;
        if (stopping_.load(std::memory_order_relaxed)) return false;
        cpu_relax(i, kPauseRounds);
        if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    job_posted_.wait(lock, [&] { return stopping_.load() || job_.load() >> 32 != seen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return !stopping_.load();
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    while (wait_for_job(seen)) {
        seen = job_.load(std::memory_order_acquire) >> 32;
        if (before_claiming_) before_claiming_();
        work_on_job(seen);
    }
}

}  // namespace qjit
