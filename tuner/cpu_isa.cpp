#include "tuner/cpu_isa.hpp"

#include <xbyak/xbyak_util.h>

namespace qjit {

bool cpu_supports(qjit_isa isa) {
    // Xbyak reports AVX and AVX-512 features only when XGETBV says the OS saves their registers.
    static const Xbyak::util::Cpu cpu;
    using Xbyak::util::Cpu;
    const bool avx2 = cpu.has(Cpu::tAVX2) && cpu.has(Cpu::tFMA) && cpu.has(Cpu::tF16C);
    const bool avx512 = avx2 && cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512BW) && cpu.has(Cpu::tAVX512VL);
    switch (isa) {
        case QJIT_ISA_PORTABLE: return true;
        case QJIT_ISA_AVX2: return avx2;
        case QJIT_ISA_AVX2_VNNI: return avx2 && cpu.has(Cpu::tAVX_VNNI);
        case QJIT_ISA_AVX512: return avx512;
        case QJIT_ISA_AVX512_VNNI: return avx512 && cpu.has(Cpu::tAVX512_VNNI);
        default: return false;
    }
}

qjit_isa best_isa_up_to(qjit_isa cap) {
    if (cap == QJIT_ISA_AUTO) cap = QJIT_ISA_AVX512_VNNI;
    for (int isa = int(cap); isa > int(QJIT_ISA_PORTABLE); --isa)
        if (cpu_supports(qjit_isa(isa))) return qjit_isa(isa);
    return QJIT_ISA_PORTABLE;
}

namespace {
struct IsaName {
    qjit_isa isa;
    const char* name;
};
constexpr IsaName kIsaNames[] = {
    {QJIT_ISA_AUTO, "auto"},     {QJIT_ISA_PORTABLE, "portable"}, {QJIT_ISA_AVX2, "avx2"},
    {QJIT_ISA_AVX2_VNNI, "avx2_vnni"}, {QJIT_ISA_AVX512, "avx512"}, {QJIT_ISA_AVX512_VNNI, "avx512_vnni"},
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
