// Child processes for tests that kill writers or inject faults (file-size limits, permissions)
// without touching the test process itself.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace qjit::test {

// Runs `body` in a child process; its return value is the exit status (an exception: 1).
inline pid_t spawn(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        int status = 1;
        try {
            status = body();
        } catch (...) {
        }
        ::_exit(status);
    }
    return pid;
}

// The child's exit status, or 128 + the signal that ended it.
inline int wait_status(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The exit status of a child that cannot give up root (no CAP_SETUID).
constexpr int kCannotDropRoot = 77;

// Runs `body` in a child process without root's right to write anywhere: a root child first
// becomes the user "nobody" (65534), so that a directory's missing write permission binds.
// The folders the child must reach need to be open to others (mkdtemp makes them 0700).
inline int run_unprivileged(const std::function<int()>& body) {
    return wait_status(spawn([&] {
        if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return kCannotDropRoot;
        return body();
    }));
}

}  // namespace qjit::test
