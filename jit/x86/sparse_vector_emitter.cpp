#include "jit/x86/sparse_vector_emitter.hpp"

#include <cstring>

#include "base/error.hpp"

namespace qjit::jit {

using Xbyak::Ymm;

SparseVectorEmitter::SparseVectorEmitter(const SparseProductSpec& spec)
    : JitGenerator(kernel_name(spec)), spec_(spec), bits_(spec.format.bits) {}

int SparseVectorEmitter::unpack_constant_registers(const SparseProductSpec& spec) {
    const int bits = spec.format.bits;
    return (bits == 8 ? 0 : 2) + (bits == 3 ? 2 : 0);  // shift counts and mask; the 1-bit plane's
}

uint32_t SparseVectorEmitter::float_bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

void SparseVectorEmitter::emit_passes(int width, const Xbyak::Reg64& cursor, const Xbyak::Address& end,
                                      const std::function<void(int)>& pass) {
    Xbyak::Label wide_loop, single_loop, done;
    if (width > 1) {
        L(wide_loop);
        mov(Xbyak::util::rax, end);
        sub(Xbyak::util::rax, cursor);
        cmp(Xbyak::util::rax, width);
        jl(single_loop, T_NEAR);
        pass(width);
        jmp(wide_loop, T_NEAR);
    }
    L(single_loop);
    cmp(cursor, end);
    jge(done, T_NEAR);
    pass(1);
    jmp(single_loop, T_NEAR);
    L(done);
}

int SparseVectorEmitter::allocate_constants(int next) {
    if (bits_ != 8) {
        shifts_ = Ymm(next++);
        mask_ = Ymm(next++);
    }
    if (bits_ == 3) {
        plane_shifts_ = Ymm(next++);
        plane_mask_ = Ymm(next++);
    }
    return next;
}

void SparseVectorEmitter::load_constants() {
    if (bits_ == 8) return;
    vmovdqu(shifts_, yword[Xbyak::util::rip + shift_table_]);
    broadcast_constant(mask_, (bits_ == 4 ? 0x0fu : 0x03u) * 0x01010101u);
    if (bits_ == 3) {
        vmovdqu(plane_shifts_, yword[Xbyak::util::rip + plane_shift_table_]);
        broadcast_constant(plane_mask_, 0x01010101u);
    }
}

void SparseVectorEmitter::emit_unpack_tables() {
    align(32);
    L(shift_table_);
    if (bits_ == 4) {
        for (int i = 0; i < 8; ++i) dd(i < 4 ? 0 : 4);  // vpsrlvd: the upper half's dwords by 4
    } else {
        for (int p = 0; p < 4; ++p) dq(uint64_t(2 * p));  // vpsrlvq: qword p by 2p
    }
    L(plane_shift_table_);
    for (int d = 0; d < 8; ++d) dd(uint32_t(4 * (d % 2) + d / 2));  // byte k of the 1-bit plane: its row's bit
}

void SparseVectorEmitter::unpack_codes(const Ymm& codes, const Ymm& temp, const Xbyak::RegExp& at) {
    switch (bits_) {
    case 8: vmovdqu(codes, yword[at]); return;
    case 4:  // the 16 bytes in both halves, the upper half's high nibbles
        vbroadcasti128(codes, xword[at]);
        vpsrlvd(codes, codes, shifts_);
        vpand(codes, codes, mask_);
        return;
    default:  // 2 bits, and the 2-bit plane of 3: the 8 bytes in every qword, qword p's bits 2p, 2p + 1
        vpbroadcastq(codes, qword[at]);
        vpsrlvq(codes, codes, shifts_);
        vpand(codes, codes, mask_);
        if (bits_ == 3) {
            vpbroadcastd(temp, dword[at + 8]);
            vpsrlvd(temp, temp, plane_shifts_);
            vpand(temp, temp, plane_mask_);
            vpsllw(temp, temp, 2);  // bytes of 0 or 1: no bit crosses into the next byte
            vpor(codes, codes, temp);
        }
        return;
    }
}

}  // namespace qjit::jit
