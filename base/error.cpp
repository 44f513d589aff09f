#include "base/error.hpp"

namespace qjit {

namespace {
thread_local std::string t_last_error;
}

void set_last_error(const std::string& message) { t_last_error = message; }

const char* last_error() { return t_last_error.c_str(); }

}  // namespace qjit
