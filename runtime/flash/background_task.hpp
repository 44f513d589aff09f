// One thread that runs one task at a time for its owner, who goes on meanwhile and later waits
// for it: a flash FFN's reads proceed while the neurons already resident are computed.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace qjit {

class BackgroundTask {
public:
    BackgroundTask();
    ~BackgroundTask();
    BackgroundTask(const BackgroundTask&) = delete;
    BackgroundTask& operator=(const BackgroundTask&) = delete;

    // Starts `task` on the thread, once the previous one (if not waited for) has finished.
    void start(std::function<void()> task);
    // Waits for the task started last; rethrows what it threw. Returns at once when none is running.
    void wait();
    void wait_ignoring_errors();  // the same, dropping what it threw (cleaning up after a failure)

private:
    void loop();

    std::mutex mutex_;
    std::condition_variable changed_;
    std::function<void()> task_;
    bool running_ = false;   // a task is posted and not finished
    bool stopping_ = false;
    std::exception_ptr error_;
    std::thread thread_;     // last: starts once the members above exist
};

}  // namespace qjit
