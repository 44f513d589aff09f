// The x86 GEMM emitter's class, shared by its two source files: gemm_emitter.cpp (the loop nest,
// the unpacking of codes and the dot products; its opening comment describes the kernel) and
// gemm_epilogues.cpp (scales, zero points and offsets, the scale tables of integer sub-block scales,
// and the outputs). Internal to those files.
#pragma once

#include <cstdint>
#include <vector>

#include "format/code_planes.hpp"
#include "jit/x86/cpu_kernel.hpp"
#include "jit/x86/gemm_emitter.hpp"
#include "jit/x86/jit_generator.hpp"

namespace qjit::jit {

namespace regs = Xbyak::util;

// A vector register: ymm (AVX2) or zmm (AVX-512), as the kernel's ISA says (GemmEmitter::vec).
using Vmm = Xbyak::Xmm;

class GemmEmitter : public JitGenerator {
public:
    explicit GemmEmitter(const CpuKernelSpec& spec);

private:
    using Reg64 = Xbyak::Reg64;

    // ---- registers ----
    Vmm vec(int index) const { return zmm_ ? Vmm(Xbyak::Zmm(index)) : Vmm(Xbyak::Ymm(index)); }
    // Vector registers: [accumulators rows x tu][int16 pair sums rows x tu, pair_depth_ > 1][scratch]
    // [constants].
    Vmm acc(int i, int t) const { return vec(i * tu_ + t); }
    Vmm acc16(int i, int t) const { return vec(rows_ * tu_ + i * tu_ + t); }
    // Merged planes on the int8 path also hold the high plane's word and its unpacked bits.
    int merged_extra() const { return merges_planes_ ? tu_ + 1 : 0; }
    Vmm word(int t) const { return vec(scratch_base_ + t); }
    Vmm unpacked() const { return vec(scratch_base_ + tu_); }
    Vmm high_word(int t) const { return vec(scratch_base_ + tu_ + 1 + t); }
    Vmm high_bit() const { return vec(scratch_base_ + 2 * tu_ + 1); }
    // Row i's activations, broadcast (one register for all rows where each broadcast feeds one dot).
    Vmm x_broadcast(int i) const { return vec(scratch_base_ + tu_ + 1 + merged_extra() + (per_dot_ ? 0 : i)); }
    // vpmaddubsw's int16 pair sums (int8 without VNNI).
    Vmm pair_sums() const { return vec(scratch_base_ + tu_ + 1 + merged_extra() + activation_broadcasts(spec_)); }
    // The masks of the width being emitted: [masks of width 0's planes][width 1's]...
    Vmm plane_mask(int p) const { return vec(const_base_ + mask_base_ + p); }
    Vmm int16_ones() const { return vec(const_base_ + total_masks()); }  // pairs_sum_by_ones
    // A codebook: its 16 values as bytes in every 128-bit lane (a vpshufb table), and on the f32
    // path the mask of a 32-bit lane's low byte.
    int codebook_base() const { return const_base_ + total_masks() + (pairs_sum_by_ones(spec_) ? 1 : 0); }
    // Integer sub-block scales: on the stack, per group of a 32-row block (two for groups of 16)
    // and column vector t, the group's scale codes as int16 pairs (vpmaddwd's second operand).
    int64_t vector_bytes() const { return int64_t(lanes_) * 4; }
    int64_t scale_table_bytes() const { return integer_scales_ ? 2 * tu_ * vector_bytes() : 0; }
    Xbyak::Address scale_table(int slot, int t) const { return ptr[regs::rsp + (slot * tu_ + t) * vector_bytes()]; }
    Vmm codebook_table() const { return vec(codebook_base()); }
    Vmm low_byte_mask() const { return vec(codebook_base() + 1); }
    // The registers the tiling leaves free (spare_register_use), after the constants: the zero
    // point, then the output tile.
    int spare_base() const { return codebook_base() + codebook_constants(spec_); }
    Vmm zero_point() const { return vec(spare_base()); }
    Vmm output(int i, int t) const { return vec(spare_base() + (spare_.zero_point ? 1 : 0) + i * tu_ + t); }
    Xbyak::Address output_at(int i, int t) const { return ptr[y_ + (i * panel_ + column(t)) * 4]; }
    // Epilogue temporaries reuse the scratch registers (the weights are dead by then).
    Vmm ep_scale() const { return vec(scratch_base_ + 0); }
    Vmm ep_zero() const { return vec(scratch_base_ + 1); }
    Vmm ep_broadcast() const { return vec(scratch_base_ + 2); }
    Vmm ep_output() const { return vec(scratch_base_ + 3); }

    // General registers.
    const Reg64 args_ = regs::rdi;
    const Reg64 codes_ = regs::r8;
    const Reg64 scales_ = regs::r9;
    const Reg64 zeros_ = regs::r10;
    const Reg64 x_ = regs::r11;
    const Reg64 x_scale_ = regs::r12;
    const Reg64 x_sum_ = regs::r13;
    const Reg64 y_ = regs::r14;
    const Reg64 groups_left_ = regs::rcx;
    const Reg64 blocks_left_ = regs::rdx;  // (rax is taken by broadcast_constant)
    const Reg64 group_bits_ = regs::r15;   // mixed widths: the current group's width byte
    const Reg64 width_ = regs::rsi;
    const Reg64 super_scales_ = regs::rbx;  // super-block scales: the super-block's fp16 d per column
    const Reg64 super_mins_ = regs::rbp;    // and its fp16 dmin (float offsets)

    // The first column of the kernel's column vector t within the panel (a kernel of part of a
    // panel starts at its first_vector).
    int64_t column(int t) const { return int64_t(first_vector_ + t) * lanes_; }

    // ---- helpers that pick the encoding for the vector width ----
    void vand(const Vmm& d, const Vmm& a, const Vmm& b) { zmm_ ? vpandd(d, a, b) : vpand(d, a, b); }
    void vzero(const Vmm& d) { zmm_ ? vpxord(d, d, d) : vpxor(d, d, d); }
    void vor(const Vmm& d, const Vmm& a, const Vmm& b) { zmm_ ? vpord(d, a, b) : vpor(d, a, b); }
    void vload(const Vmm& d, const Xbyak::Address& a) { zmm_ ? vmovdqu32(d, a) : vmovdqu(d, a); }
    void vstore(const Xbyak::Address& a, const Vmm& s) { zmm_ ? vmovdqu32(a, s) : vmovdqu(a, s); }

    // The block of the width being emitted.
    int64_t block_code_bytes() const { return int64_t(width_bits_) * panel_ * 4; }
    int64_t x_row_bytes() const { return spec_.padded_k() * x_bytes_; }
    int64_t group_meta_bytes() const { return spec_.num_groups() * 4; }  // one float per row and group

    // ---- the loop nest, the unpacking and the dot products (gemm_emitter.cpp) ----
    int total_masks() const;
    void generate();
    void emit_codebook_data();
    void emit_six_bit_code_data();
    void look_up_codebook(const Vmm& codes);
    void load_arguments();
    void begin_super_block();
    void end_step_of_super_block(const Reg64& steps_left, int64_t steps_per_super_block);
    void load_constants();
    void select_width(size_t w);
    void zero_output_tile();
    void store_output_tile();
    // Row i, column vector t of the output tile, to add to: its register, or `temp` loaded from
    // the tile in memory; store_output writes a loaded one back.
    Vmm load_output(int i, int t, const Vmm& temp);
    void store_output(int i, int t, const Vmm& value);
    void emit_blocks_of_two_groups();
    void emit_group_loop();
    void jnz_after_super_block_check(Xbyak::Label& loop);
    void emit_prefetch();
    void advance_block();
    void emit_block_body(int q_begin, int q_end);
    void emit_merged_planes_body(int q_begin, int q_end);
    Vmm shifted(const Vmm& dst, const Vmm& src, int shift);
    void shift_and_mask(const Vmm& dst, const Vmm& src, int shift, const Vmm& mask);
    Vmm unpack(int p, int t, int shift);
    void emit_int8_quad(int p, int field, int quad);
    void broadcast_quad_activations(int quad);
    void emit_quad_dots(int t, const Vmm& codes, int quad);
    void emit_dot(const Vmm& accumulator, const Vmm& codes, const Vmm& activations, const Xbyak::Address& scales);
    void emit_int16_dot(int i, int t, const Vmm& codes, const Vmm& activations, int quad);
    void emit_group_int16_dot(int i, int t, const Vmm& codes, const Vmm& activations, int quad);
    void emit_f32_row(int p, int field, int byte, int row);

    // ---- scales, zero points, offsets and outputs (gemm_epilogues.cpp) ----
    void write_scale_table(int slot, int64_t offset);
    void emit_super_block_epilogue();
    void emit_group_epilogue();
    void emit_group_outputs();
    // The format's symmetric zero point in every lane, as a float: broadcast into dst; or the
    // spare register that holds it (spare_register_use), else broadcast into `temp`.
    void broadcast_symmetric_zero(const Vmm& dst);
    Vmm symmetric_zero(const Vmm& temp);
    void advance_group_metadata();
    void load_halves(const Vmm& dst, const Reg64& base, int t);
    void load_stored_floats(const Vmm& dst, const Reg64& base, int t);
    void emit_offset_row(int i, int t, const Vmm& a, const Vmm& scale, const Vmm& offset, const Vmm& factor);
    void multiply_add_row_value(bool subtract, const Vmm& dst, const Vmm& a, const Xbyak::RegExp& at, const Vmm& temp);
    void scale_by_row_step(const Vmm& dst, const Vmm& values, int64_t meta);
    void load_second_order_scale_and_zero(int t, const Vmm& scale, const Vmm& zero, const Vmm& factor);
    void load_super_block_scale_and_offset(int t, const Vmm& scale, const Vmm& offset, const Vmm& temp);
    void load_code_bytes(const Vmm& dst, const Reg64& codes, int t, bool is_signed, int64_t offset = 0);
    void load_six_bit_codes(const Vmm& dst, const Reg64& codes, int t, bool is_signed, int64_t offset);
    void times_super_value(const Vmm& dst, const Reg64& supers, int t, const Vmm& temp);
    void broadcast_half(const Vmm& dst, const Reg64& base, int64_t offset);

    // Emits body() once per width the kernel handles; with mixed widths, the copy for the current
    // group's width (the byte at group_bits_) runs.
    template <typename Body>
    void emit_per_width(Body body) {
        if (!mixed_) return body();
        Xbyak::Label done;
        movzx(width_.cvt32(), byte[group_bits_]);
        for (size_t w = 0; w < widths_.size(); ++w) {
            Xbyak::Label other_width;
            const bool last = w + 1 == widths_.size();
            if (!last) {
                cmp(width_.cvt32(), widths_[w]);
                jne(other_width, T_NEAR);
            }
            select_width(w);
            body();
            if (!last) {
                jmp(done, T_NEAR);
                L(other_width);
            }
        }
        L(done);
        select_width(0);
    }

    // Activations of row i at byte offset `offset` of the current block, for every lane: an
    // embedded broadcast operand where EVEX allows one (no register, no extra instruction), else
    // a register filled once per quad or row.
    Xbyak::Address x_operand(int i, int offset) const { return ptr_b[x_ + i * x_row_bytes() + offset]; }

    // The scale table of a quad of the current block: the block's second group's for groups of 16.
    int table_slot(int quad) const { return spec_.group_rows() == 16 ? quad / 4 : 0; }

    const CpuKernelSpec spec_;
    const bool zmm_;  // zmm registers (AVX-512), else ymm
    const std::vector<int> widths_;  // the code widths the kernel handles (one unless mixed)
    std::vector<CodePlane> planes_;  // of the width being emitted (select_width)
    int width_bits_ = 0, mask_base_ = 0;
    const int tu_, first_vector_, rows_, lanes_, panel_;  // tu_: the kernel's column vectors; panel_: columns
    const bool int8_;
    const int x_bytes_, scale_bytes_;
    const bool merges_planes_, mixed_, second_order_, super_block_, float_offsets_, mins_in_scale_bytes_, six_bit_codes_,
        codebook_, integer_scales_;
    const int pair_depth_;  // quads whose pair sums add in int16 before vpmaddwd (1: none)
    const bool group_int16_;  // group_sums_in_int16: acc holds the group's int16 pair sums
    const bool inline_metadata_;  // the group's metadata in a slot after its codes (codes_ is at it in the epilogue)
    const bool per_dot_;    // broadcasts_per_dot
    const SpareRegisterUse spare_;
    Xbyak::Label codebook_data_, six_bit_control_, six_bit_shifts_;
    int scratch_base_ = 0, const_base_ = 0;
};

}  // namespace qjit::jit
