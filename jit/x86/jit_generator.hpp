// The base of every x86 code generator: the System V ABI prologue and epilogue (callee-saved
// registers), vector constants, and access to the finished code. Emitters derive from it and
// emit only their loop nests.
#pragma once

#include <xbyak/xbyak.h>

#include <cstdint>
#include <span>
#include <string>

namespace qjit::jit {

class JitGenerator : public Xbyak::CodeGenerator {
public:
    explicit JitGenerator(std::string name);
    const std::string& name() const { return name_; }
    std::span<const uint8_t> code_bytes() const { return {getCode(), getSize()}; }

    template <typename Function>
    Function function() const { return reinterpret_cast<Function>(const_cast<uint8_t*>(getCode())); }

protected:
    // Saves the callee-saved general registers this family of kernels uses.
    void preamble();
    // Restores them, clears the upper vector state and returns.
    void postamble();
    // Makes the emitted code executable and no longer writable; call once, after postamble().
    void finish();

    // Fills every 32-bit lane of `vector` with `pattern` (goes through eax).
    void broadcast_constant(const Xbyak::Xmm& vector, uint32_t pattern);

private:
    std::string name_;
};

}  // namespace qjit::jit
