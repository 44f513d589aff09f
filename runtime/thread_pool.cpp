#include "runtime/thread_pool.hpp"

namespace qjit {

ThreadPool::ThreadPool(int num_threads) {
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    job_posted_.notify_all();
    for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::work_on_current_job() {
    for (int64_t i = next_task_.fetch_add(1); i < num_tasks_; i = next_task_.fetch_add(1)) fn_(closure_, i);
}

void ThreadPool::run(int64_t num_tasks, TaskFn fn, void* closure) {
    if (num_tasks <= 0) return;
    bool expected = false;
    if (workers_.empty() || num_tasks == 1 || !busy_.compare_exchange_strong(expected, true)) {
        for (int64_t i = 0; i < num_tasks; ++i) fn(closure, i);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = fn;
        closure_ = closure;
        num_tasks_ = num_tasks;
        next_task_.store(0);
        workers_running_ = int(workers_.size());
        ++generation_;
    }
    job_posted_.notify_all();
    work_on_current_job();
    {
        std::unique_lock<std::mutex> lock(mutex_);
        job_finished_.wait(lock, [this] { return workers_running_ == 0; });
    }
    busy_.store(false);
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            job_posted_.wait(lock, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
        }
        work_on_current_job();
        bool last;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            last = --workers_running_ == 0;
        }
        if (last) job_finished_.notify_one();
    }
}

}  // namespace qjit
