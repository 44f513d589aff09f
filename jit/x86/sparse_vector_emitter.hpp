// What the emitters of the sparse passes share (jit/x86/sparse_product_kernel.hpp): the constants
// that unpack a 32-row block of codes, the unpacking itself, and the emitters' entry points.
// Internal to jit/x86.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "jit/x86/sparse_product_kernel.hpp"

namespace qjit::jit {

class SparseVectorEmitter : public JitGenerator {
public:
    // Vector registers the unpacking constants take.
    static int unpack_constant_registers(const SparseProductSpec& spec);
    static uint32_t float_bits(float value);

protected:
    explicit SparseVectorEmitter(const SparseProductSpec& spec);

    // Vector registers of the unpacking constants from `first` on; returns the next free one.
    int allocate_constants(int first);
    void load_constants();
    // The constant tables the unpacking reads; after the code, before finish().
    void emit_unpack_tables();

    // Passes over the items [cursor, end) (`end` a memory operand): `pass(width)` while at least
    // `width` remain, then `pass(1)` for the rest; each pass emits its items and advances cursor.
    // Uses rax.
    void emit_passes(int width, const Xbyak::Reg64& cursor, const Xbyak::Address& end,
                     const std::function<void(int)>& pass);

    // codes = the block's 32 codes at `at` (bytes), byte k holding row sparse_block_row(bits, k).
    // `temp` is overwritten for 3-bit codes.
    void unpack_codes(const Xbyak::Ymm& codes, const Xbyak::Ymm& temp, const Xbyak::RegExp& at);

    const SparseProductSpec spec_;
    const int bits_;

private:
    Xbyak::Ymm shifts_, mask_, plane_shifts_, plane_mask_;
    Xbyak::Label shift_table_, plane_shift_table_;
};

std::unique_ptr<JitGenerator> generate_sparse_products(const SparseProductSpec& spec);
std::unique_ptr<JitGenerator> generate_sparse_down(const SparseProductSpec& spec);

}  // namespace qjit::jit
