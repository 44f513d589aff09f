// Which x86 instruction sets this CPU and OS support, and the names qjit uses for them.
#pragma once

#include <optional>
#include <string_view>

#include "qjit/qjit.h"

namespace qjit {

// The best qjit_isa the CPU offers with OS support for its registers (XGETBV), never QJIT_ISA_AUTO.
qjit_isa detect_cpu_isa();

// "portable", "avx2", "avx512", "avx512_vnni".
const char* isa_name(qjit_isa isa);
std::optional<qjit_isa> parse_isa_name(std::string_view name);

}  // namespace qjit
