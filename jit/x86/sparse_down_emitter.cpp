// The x86 emitter of the flash FFN's down pass (jit/x86/sparse_product_kernel.hpp).
//
// Loop nest of one call (the vectors' geometry is compile-time; the slots, the activations and the
// block range are arguments):
//
//   for each pass of `blocks` 32-row blocks of the output (then single blocks for the rest):
//     sum[j][r][4] = out's 32 values of block j, row r         4 vectors of 8 lanes
//     offset[j][r] = 0
//     for each slot i:
//       for each block j of the pass:
//         s, o = the block's group's scale and offset (o = -s * zero, or the float offset)
//         offset[j][r] += a[r][i] * o                          a scalar per block and row
//         codes = unpack(the block's words)                    one load, one shift, one mask
//         for each octet c of the codes:
//           q = float(the octet's 8 codes, widened)
//           sum[j][r][c] += (a[r][i] * s) * q
//     out's values of block j, row r = sum[j][r] + offset[j][r]
//
// The sums stay in registers while every slot streams past, so a weight costs its share of one
// unpacking, one widening and one FMA per row; the caller takes few enough slots a call that
// their lines of the block range stay in the cache between passes.
#include <cstddef>

#include "base/error.hpp"
#include "jit/x86/sparse_vector_emitter.hpp"

namespace qjit::jit {

namespace {

using Xbyak::Reg64;
using Xbyak::Xmm;
using Xbyak::Ymm;
namespace regs = Xbyak::util;

constexpr int kPrefetchSlots = 4;  // slots ahead whose lines a pass asks for

class SparseDownEmitter : public SparseVectorEmitter {
public:
    explicit SparseDownEmitter(const SparseProductSpec& spec)
        : SparseVectorEmitter(spec), rows_(spec.rows), group_blocks_(spec.group_blocks()) {
        int next = 0;
        codes_ = Ymm(next++);
        octet_ = Ymm(next++);
        scale_ = Ymm(next++);
        factor_ = Ymm(next++);
        first_sum_ = allocate_constants(next);
        generate();
    }

private:
    const Reg64 args_ = regs::rdi, vectors_ = regs::r8, slots_ = regs::r9, out_ = regs::r10, slot_index_ = regs::r11;
    const Reg64 vector_ = regs::rbx, block_ = regs::rsi, code_offset_ = regs::rbp;
    const Reg64 activation_[2] = {regs::rcx, regs::rdx};
    // Per block of a pass: where its group's scale and zero point lie in a vector.
    const Reg64 scale_offset_[2] = {regs::r12, regs::r14}, zero_offset_[2] = {regs::r13, regs::r15};

    Ymm sum(int j, int r, int c) const { return Ymm(first_sum_ + (j * rows_ + r) * 4 + c); }
    Ymm offset(int j, int r) const { return Ymm(first_sum_ + spec_.tiling.blocks * rows_ * 4 + j * rows_ + r); }
    Xbyak::Address arg(size_t at) const { return qword[args_ + int(at)]; }
    static Xmm low(const Ymm& y) { return Xmm(y.getIdx()); }

    void generate() {
        preamble();
        sub(regs::rsp, 16);  // each block's offset o of the current slot
        load_constants();
        mov(vectors_, arg(offsetof(SparseDownArgs, vectors)));
        mov(slots_, arg(offsetof(SparseDownArgs, slots)));
        mov(block_, arg(offsetof(SparseDownArgs, first_block)));
        emit_passes(spec_.tiling.blocks, block_, arg(offsetof(SparseDownArgs, end_block)),
                    [&](int blocks) { emit_pass(blocks); });
        add(regs::rsp, 16);
        postamble();
        emit_unpack_tables();
        finish();
    }

    // Bytes between rows of out, into rax.
    void out_stride_bytes() {
        mov(regs::rax, arg(offsetof(SparseDownArgs, out_stride)));
        shl(regs::rax, 2);
    }
    Xbyak::Address out_at(int j, int r, int c) const {
        const int at = j * 128 + c * 32;
        return r == 0 ? yword[out_ + at] : yword[out_ + regs::rax + at];
    }

    // Blocks [block_, block_ + blocks) against every slot; advances block_.
    void emit_pass(int blocks) {
        const WeightFormat& f = spec_.format;
        for (int j = 0; j < blocks; ++j) {  // the block's group
            if (f.per_column()) {
                xor_(regs::rax, regs::rax);
            } else {
                lea(regs::rax, ptr[block_ + j]);
                mov(regs::rcx, group_blocks_);
                xor_(regs::edx, regs::edx);
                div(regs::rcx);
            }
            imul(scale_offset_[j], regs::rax, f.scale_bytes());
            add(scale_offset_[j], int(spec_.scales_offset()));
            imul(zero_offset_[j], regs::rax, std::max(1, f.zero_point_bytes()));
            add(zero_offset_[j], int(spec_.zeros_offset()));
        }
        imul(code_offset_, block_, bits_ * 4);
        mov(out_, block_);
        sub(out_, arg(offsetof(SparseDownArgs, first_block)));
        shl(out_, 7);  // 32 floats a block
        add(out_, arg(offsetof(SparseDownArgs, out)));
        out_stride_bytes();
        for (int j = 0; j < blocks; ++j)
            for (int r = 0; r < rows_; ++r) {
                for (int c = 0; c < 4; ++c) vmovups(sum(j, r, c), out_at(j, r, c));
                vxorps(offset(j, r), offset(j, r), offset(j, r));
            }
        mov(activation_[0], arg(offsetof(SparseDownArgs, a)));
        if (rows_ > 1) {
            mov(activation_[1], arg(offsetof(SparseDownArgs, a_stride)));
            lea(activation_[1], ptr[activation_[0] + activation_[1] * 4]);
        }

        Xbyak::Label slot_loop, end;
        xor_(slot_index_, slot_index_);
        cmp(slot_index_, arg(offsetof(SparseDownArgs, count)));
        jge(end, T_NEAR);
        L(slot_loop);
        movsxd(vector_, dword[slots_ + slot_index_ * 4]);
        imul(vector_, vector_, int(spec_.vector_bytes));
        add(vector_, vectors_);
        if (spec_.tiling.prefetch) emit_prefetch();
        for (int j = 0; j < blocks; ++j) emit_block(j);
        for (int r = 0; r < rows_; ++r) add(activation_[r], 4);
        inc(slot_index_);
        cmp(slot_index_, arg(offsetof(SparseDownArgs, count)));
        jl(slot_loop, T_NEAR);
        L(end);

        out_stride_bytes();
        for (int j = 0; j < blocks; ++j)
            for (int r = 0; r < rows_; ++r) {
                vbroadcastss(codes_, low(offset(j, r)));
                for (int c = 0; c < 4; ++c) {
                    vaddps(sum(j, r, c), sum(j, r, c), codes_);
                    vmovups(out_at(j, r, c), sum(j, r, c));
                }
            }
        add(block_, blocks);
    }

    // The pass's code and metadata lines of the slot kPrefetchSlots ahead, when there is one.
    void emit_prefetch() {
        Xbyak::Label skip;
        lea(regs::rax, ptr[slot_index_ + kPrefetchSlots]);
        cmp(regs::rax, arg(offsetof(SparseDownArgs, count)));
        jge(skip, T_NEAR);
        movsxd(regs::rax, dword[slots_ + regs::rax * 4]);
        imul(regs::rax, regs::rax, int(spec_.vector_bytes));
        add(regs::rax, vectors_);
        prefetcht0(ptr[regs::rax + code_offset_]);
        prefetcht0(ptr[regs::rax + scale_offset_[0]]);
        if (!spec_.format.symmetric) prefetcht0(ptr[regs::rax + zero_offset_[0]]);
        L(skip);
    }

    // Lane 0 of `dst` = the fp16 or fp32 value at `at`.
    void load_meta(const Xmm& dst, const Xbyak::RegExp& at) {
        if (spec_.format.scale_bytes() == 4) {
            vmovss(dst, dword[at]);
            return;
        }
        movzx(regs::eax, word[at]);
        vmovd(dst, regs::eax);
        vcvtph2ps(dst, dst);
    }

    // Block j of the pass from the current slot's vector.
    void emit_block(int j) {
        const WeightFormat& f = spec_.format;
        const Xmm scale = low(scale_), o = low(factor_), a = low(octet_);
        load_meta(scale, vector_ + scale_offset_[j]);
        if (f.float_offsets) {
            load_meta(o, vector_ + zero_offset_[j]);
        } else if (f.symmetric) {
            mov(regs::eax, float_bits(-float(f.symmetric_zero())));
            vmovd(o, regs::eax);
            vmulss(o, o, scale);
        } else {
            movzx(regs::eax, byte[vector_ + zero_offset_[j]]);
            neg(regs::eax);
            vcvtsi2ss(o, o, regs::eax);
            vmulss(o, o, scale);
        }
        vmovss(dword[regs::rsp + 4 * j], o);
        // Each row's factor a * s (row 1's in scale_, whose scale it reads last) and offset sum.
        for (int r = 0; r < rows_; ++r) {
            vmovss(a, dword[activation_[r]]);
            vfmadd231ss(low(offset(j, r)), a, dword[regs::rsp + 4 * j]);
            const Ymm& factor = r == 0 ? factor_ : scale_;
            vmulss(low(factor), a, scale);
            vbroadcastss(factor, low(factor));
        }
        unpack_codes(codes_, octet_, vector_ + code_offset_ + j * bits_ * 4);
        for (int c = 0; c < 4; ++c) {
            const Xmm octet = low(octet_);
            if (c < 2) {
                if (c == 1) vpshufd(octet, low(codes_), 0xee);
                vpmovzxbd(octet_, c == 0 ? low(codes_) : octet);
            } else {
                vextracti128(octet, codes_, 1);
                if (c == 3) vpshufd(octet, octet, 0xee);
                vpmovzxbd(octet_, octet);
            }
            vcvtdq2ps(octet_, octet_);
            for (int r = 0; r < rows_; ++r) vfmadd231ps(sum(j, r, c), octet_, r == 0 ? factor_ : scale_);
        }
    }

    const int rows_;
    const int64_t group_blocks_;
    Ymm codes_, octet_, scale_, factor_;
    int first_sum_ = 0;
};

}  // namespace

std::unique_ptr<JitGenerator> generate_sparse_down(const SparseProductSpec& spec) {
    return std::make_unique<SparseDownEmitter>(spec);
}

}  // namespace qjit::jit
