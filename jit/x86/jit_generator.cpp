#include "jit/x86/jit_generator.hpp"

namespace qjit::jit {

namespace {
constexpr size_t kInitialCodeBytes = 16 * 1024;  // grows as needed (AutoGrow)
const Xbyak::Reg64 kCalleeSaved[] = {Xbyak::util::rbx, Xbyak::util::rbp, Xbyak::util::r12,
                                     Xbyak::util::r13, Xbyak::util::r14, Xbyak::util::r15};
}  // namespace

JitGenerator::JitGenerator(std::string name)
    : Xbyak::CodeGenerator(kInitialCodeBytes, Xbyak::AutoGrow), name_(std::move(name)) {}

void JitGenerator::preamble() {
    for (const Xbyak::Reg64& reg : kCalleeSaved) push(reg);
}

void JitGenerator::postamble() {
    for (auto it = std::rbegin(kCalleeSaved); it != std::rend(kCalleeSaved); ++it) pop(*it);
    vzeroupper();
    ret();
}

// W^X: the code was written into read-write pages (AutoGrow); they become read-execute, never
// writable and executable at once (Xbyak's default would leave them read-write-execute).
void JitGenerator::finish() { ready(Xbyak::CodeArray::PROTECT_RE); }

void JitGenerator::broadcast_constant(const Xbyak::Xmm& vector, uint32_t pattern) {
    mov(eax, pattern);
    vmovd(Xbyak::Xmm(vector.getIdx()), eax);
    vpbroadcastd(vector, Xbyak::Xmm(vector.getIdx()));
}

}  // namespace qjit::jit
