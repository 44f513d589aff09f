#include "runtime/flash/background_task.hpp"

#include <utility>

namespace qjit {

BackgroundTask::BackgroundTask() : thread_([this] { loop(); }) {}

BackgroundTask::~BackgroundTask() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
}

void BackgroundTask::start(std::function<void()> task) {
    {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return !running_; });  // a task its owner gave up waiting for
        task_ = std::move(task);
        running_ = true;
        error_ = nullptr;
    }
    changed_.notify_all();
}

void BackgroundTask::wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !running_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void BackgroundTask::wait_ignoring_errors() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !running_; });
    error_ = nullptr;
}

void BackgroundTask::loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        changed_.wait(lock, [&] { return stopping_ || (running_ && task_); });
        if (stopping_) return;
        std::function<void()> task = std::move(task_);
        task_ = nullptr;
        lock.unlock();
        std::exception_ptr error;
        try {
            task();
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        error_ = error;
        running_ = false;
        changed_.notify_all();
    }
}

}  // namespace qjit
