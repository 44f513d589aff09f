// Which x86 instruction sets this CPU and OS support, and the names qjit uses for them.
#pragma once

#include <optional>
#include <string_view>

#include "qjit/qjit.h"

namespace qjit {

// Whether the CPU offers `isa` with OS support for its registers (XGETBV).
bool cpu_supports(qjit_isa isa);

// The best instruction set at or below `cap` that the CPU supports (QJIT_ISA_PORTABLE at worst);
// QJIT_ISA_AUTO is no cap, as in the C API.
qjit_isa best_isa_up_to(qjit_isa cap);

// "auto", "portable", "avx2", "avx2_vnni", "avx512", "avx512_vnni".
const char* isa_name(qjit_isa isa);
std::optional<qjit_isa> parse_isa_name(std::string_view name);

}  // namespace qjit
