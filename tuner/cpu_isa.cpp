#include "tuner/cpu_isa.hpp"

#include <xbyak/xbyak_util.h>

namespace qjit {

qjit_isa detect_cpu_isa() {
    // Xbyak reports AVX and AVX-512 features only when XGETBV says the OS saves their registers.
    const Xbyak::util::Cpu cpu;
    using Xbyak::util::Cpu;
    if (!cpu.has(Cpu::tAVX2) || !cpu.has(Cpu::tFMA)) return QJIT_ISA_PORTABLE;
    if (!cpu.has(Cpu::tAVX512F) || !cpu.has(Cpu::tAVX512BW) || !cpu.has(Cpu::tAVX512VL)) return QJIT_ISA_AVX2;
    if (!cpu.has(Cpu::tAVX512_VNNI)) return QJIT_ISA_AVX512;
    return QJIT_ISA_AVX512_VNNI;
}

namespace {
struct IsaName {
    qjit_isa isa;
    const char* name;
};
constexpr IsaName kIsaNames[] = {
    {QJIT_ISA_AUTO, "auto"},
    {QJIT_ISA_PORTABLE, "portable"},
    {QJIT_ISA_AVX2, "avx2"},
    {QJIT_ISA_AVX512, "avx512"},
    {QJIT_ISA_AVX512_VNNI, "avx512_vnni"},
};
}  // namespace

const char* isa_name(qjit_isa isa) {
    for (const IsaName& entry : kIsaNames)
        if (entry.isa == isa) return entry.name;
    return "unknown";
}

std::optional<qjit_isa> parse_isa_name(std::string_view name) {
    for (const IsaName& entry : kIsaNames)
        if (name == entry.name) return entry.isa;
    return std::nullopt;
}

}  // namespace qjit
