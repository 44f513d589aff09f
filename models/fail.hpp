// The model tools' one way to report bad input: a std::runtime_error whose message is the parts
// streamed one after another (the runners print it and exit 1).
#pragma once

#include <sstream>
#include <stdexcept>

namespace qjit_models {

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    std::ostringstream message;
    (message << ... << parts);
    throw std::runtime_error(message.str());
}

}  // namespace qjit_models
