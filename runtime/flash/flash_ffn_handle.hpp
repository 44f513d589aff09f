// The C API's flash FFN handle (include/qjit/qjit_flash.h), for the C API files that take one:
// runtime/c_api_flash.cpp and runtime/c_api_ffn.cpp (a layer of it as an FFN handle).
#pragma once

#include <memory>
#include <string>

#include "runtime/flash/flash_ffn.hpp"

struct qjit_flash_ffn {
    std::unique_ptr<qjit::FlashFfn> ffn;
    std::string format_name;
};
