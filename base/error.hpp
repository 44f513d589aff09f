// Errors inside qjit are exceptions carrying a qjit_status; the C API turns them into a status
// code plus the thread-local message that qjit_last_error() returns.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "qjit/qjit.h"

namespace qjit {

class Error : public std::runtime_error {
public:
    Error(qjit_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    qjit_status status() const { return status_; }

private:
    qjit_status status_;
};

// An ostringstream that rethrows what its buffer throws (a failed allocation). A plain one
// swallows it and leaves the text cut short: a wrong kernel name or database key, silently.
class TextStream : public std::ostringstream {
public:
    TextStream() { exceptions(std::ios::badbit); }
};

template <typename... Parts>
std::string concat(Parts&&... parts) {
    TextStream out;
    (out << ... << std::forward<Parts>(parts));
    return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(qjit_status status, Parts&&... parts) {
    throw Error(status, concat(std::forward<Parts>(parts)...));
}

// Throws QJIT_ERROR_INVALID_ARGUMENT with the message when `ok` is false.
template <typename... Parts>
void require(bool ok, Parts&&... parts) {
    if (!ok) fail(QJIT_ERROR_INVALID_ARGUMENT, std::forward<Parts>(parts)...);
}

void set_last_error(const std::string& message);
const char* last_error();

// Runs `body`, mapping what it throws to a status and the thread's last-error message.
template <typename Body>
qjit_status guarded(Body&& body) noexcept {
    try {
        body();
        return QJIT_OK;  // the thread's last failure stays readable (qjit_last_error)
    } catch (const Error& e) {
        set_last_error(e.what());
        return e.status();
    } catch (const std::bad_alloc&) {
        set_last_error("out of memory");
        return QJIT_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        set_last_error(concat("internal error: ", e.what()));
        return QJIT_ERROR_INTERNAL;
    } catch (...) {
        set_last_error("internal error: unknown exception");
        return QJIT_ERROR_INTERNAL;
    }
}

}  // namespace qjit
