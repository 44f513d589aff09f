// The x86 emitter for quantized GEMV/GEMM panels (see cpu_kernel.hpp for what a kernel computes).
//
// Loop nest of one kernel call (rows activation rows x one panel of tu vectors of columns):
//
//   y tile = 0
//   for each group:                       full_groups of group_size rows, then a tail group
//     acc[rows][tu] = 0
//     for each 32-row block of the group:
//       for each code plane, for each word of the plane:
//         load the word for tu column vectors
//         for each quad (int8 path) or row (f32 path) the word holds:
//           broadcast the activations of each row
//           unpack the quad/row with one shift and one mask        (weight unpack)
//           acc[i][t] += codes . activations                       (dot core)
//     y[i][t] += scale * (acc[i][t] - zero * x_sum[i]) [* x_scale[i]]   (group epilogue; with float
//                offsets: scale * acc[i][t] [* x_scale[i]] + offset * x_sum[i] [* x_scale[i]])
//
// 3-, 5- and 6-bit codes on the int8 path walk the low plane's words and merge in the high plane's
// bits before the dot products (emit_merged_planes_body), so each quad costs one dot per row.
//
// Mixed widths (2 and 4 bits by group): the kernel holds a copy of the block loop per width and
// each group jumps to its width's, read from a byte per group (the codes of a block take the words
// of its width). Second-order scales: the epilogue rebuilds the group's scales from their 4-bit
// codes (packed with the zero point in one byte per column) and the fp16 scale and zero of each
// 16 columns, before applying them. Super-block scales: each group's scale is its code (a byte, or
// 6 bits spread from three bytes per four columns by one shuffle and one variable shift) times the
// column's fp16 super-scale, read through a pointer that moves on once per 256 rows (and the same
// for a float offset, the min code times the super-min, subtracted). A codebook (IQ4_NL): each
// unpacked 4-bit code is looked up in a 16-byte table (vpshufb) before its dot product or convert.
//
// Integer sub-block scales (super-block formats on the int8 path without VNNI): the pair sums of
// vpmaddubsw are multiplied by the group's scale codes in vpmaddwd (which otherwise multiplies by
// ones), from a table each group writes on the stack, so the accumulators sum a whole super-block
// in integers over activations with one int8 step per 256 rows. Where the codes are small enough
// (pair_sum_depth), the pair sums of several quads of a group are first added in int16 (vpaddw), so
// a quad costs one multiply instead of two. The float epilogue runs once per super-block:
// y += x_step * (d * acc - sum over groups of c * x_sum), c the group's min code times dmin (float
// offsets) or its scale code times d times the zero point.
//
// Symmetry, bits, group size, rows, tu and prefetch distance are compile-time constants of the
// generated code; the group counts are run-time arguments so one kernel serves any K range.
#include "jit/x86/gemm_emitter.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "format/code_planes.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit::jit {

namespace {

using Xbyak::Reg64;
using Xbyak::Xmm;
using Xbyak::Ymm;
using Xbyak::Zmm;
namespace regs = Xbyak::util;

uint32_t float_bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

uint32_t repeat_byte(uint32_t byte) { return byte * 0x01010101u; }

template <typename Vmm>
class GemmEmitter : public JitGenerator {
public:
    explicit GemmEmitter(const CpuKernelSpec& spec)
        : JitGenerator(kernel_name(spec)),
          spec_(spec),
          widths_(kernel_widths(spec)),
          planes_(code_planes(widths_.front())),
          tu_(spec.kernel_vectors()),
          first_vector_(spec.first_vector),
          rows_(spec.rows),
          lanes_(spec.lanes()),
          panel_(spec.panel_columns()),
          int8_(spec.path == ActivationPath::Int8),
          x_bytes_(int8_ ? 1 : 4),
          scale_bytes_(spec.format.scale_bytes()),
          merges_planes_(merges_code_planes(spec)),
          mixed_(!spec.format.uniform_bits()),
          second_order_(spec.format.second_order_scales()),
          super_block_(spec.format.super_block_scales()),
          float_offsets_(spec.format.float_offsets),
          mins_in_scale_bytes_(PanelMetadataLayout{spec.format}.mins_in_scale_bytes()),
          six_bit_codes_(PanelMetadataLayout{spec.format}.six_bit_codes()),
          codebook_(spec.format.has_codebook()),
          integer_scales_(spec.integer_sub_block_scales()),
          pair_depth_(pair_sum_depth(spec)),
          per_dot_(broadcasts_per_dot(spec)) {
        const int scratch = std::max(main_scratch_registers(spec), kEpilogueTemporaries);
        scratch_base_ = accumulator_registers(spec);
        const_base_ = scratch_base_ + scratch;
        generate();
    }

private:
    // ---- registers ----
    // Vector registers: [accumulators rows x tu][int16 pair sums rows x tu, pair_depth_ > 1][scratch]
    // [constants].
    Vmm acc(int i, int t) const { return Vmm(i * tu_ + t); }
    Vmm acc16(int i, int t) const { return Vmm(rows_ * tu_ + i * tu_ + t); }
    // Merged planes on the int8 path also hold the high plane's word and its unpacked bits.
    int merged_extra() const { return merges_planes_ ? tu_ + 1 : 0; }
    Vmm word(int t) const { return Vmm(scratch_base_ + t); }
    Vmm unpacked() const { return Vmm(scratch_base_ + tu_); }
    Vmm high_word(int t) const { return Vmm(scratch_base_ + tu_ + 1 + t); }
    Vmm high_bit() const { return Vmm(scratch_base_ + 2 * tu_ + 1); }
    // Row i's activations, broadcast (one register for all rows where each broadcast feeds one dot).
    Vmm x_broadcast(int i) const { return Vmm(scratch_base_ + tu_ + 1 + merged_extra() + (per_dot_ ? 0 : i)); }
    Vmm pair_sums() const {  // int8 without VNNI
        return Vmm(scratch_base_ + tu_ + 1 + merged_extra() + activation_broadcasts(spec_));
    }
    // The masks of the width being emitted: [masks of width 0's planes][width 1's]...
    Vmm plane_mask(int p) const { return Vmm(const_base_ + mask_base_ + p); }
    int total_masks() const {
        int masks = 0;
        for (int w : widths_) masks += int(code_planes(w).size());
        return masks;
    }
    Vmm int16_ones() const { return Vmm(const_base_ + total_masks()); }  // pairs_sum_by_ones
    // A codebook: its 16 values as bytes in every 128-bit lane (a vpshufb table), and on the f32
    // path the mask of a 32-bit lane's low byte.
    int codebook_base() const { return const_base_ + total_masks() + (pairs_sum_by_ones(spec_) ? 1 : 0); }
    // Integer sub-block scales: on the stack, per group of a 32-row block (two for groups of 16)
    // and column vector t, the group's scale codes as int16 pairs (vpmaddwd's second operand).
    int64_t vector_bytes() const { return int64_t(lanes_) * 4; }
    int64_t scale_table_bytes() const { return integer_scales_ ? 2 * tu_ * vector_bytes() : 0; }
    Xbyak::Address scale_table(int slot, int t) const { return ptr[regs::rsp + (slot * tu_ + t) * vector_bytes()]; }
    Vmm codebook_table() const { return Vmm(codebook_base()); }
    Vmm low_byte_mask() const { return Vmm(codebook_base() + 1); }
    // Epilogue temporaries reuse the scratch registers (the weights are dead by then).
    Vmm ep_scale() const { return Vmm(scratch_base_ + 0); }
    Vmm ep_zero() const { return Vmm(scratch_base_ + 1); }
    Vmm ep_broadcast() const { return Vmm(scratch_base_ + 2); }
    Vmm ep_output() const { return Vmm(scratch_base_ + 3); }

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

    static constexpr bool kZmm = std::is_same_v<Vmm, Zmm>;

    // The first column of the kernel's column vector t within the panel (a kernel of part of a
    // panel starts at its first_vector).
    int64_t column(int t) const { return int64_t(first_vector_ + t) * lanes_; }

    // ---- helpers that pick the encoding for the vector width ----
    void vand(const Vmm& d, const Vmm& a, const Vmm& b) { kZmm ? vpandd(d, a, b) : vpand(d, a, b); }
    void vzero(const Vmm& d) { kZmm ? vpxord(d, d, d) : vpxor(d, d, d); }
    void vor(const Vmm& d, const Vmm& a, const Vmm& b) { kZmm ? vpord(d, a, b) : vpor(d, a, b); }
    void vload(const Vmm& d, const Xbyak::Address& a) { kZmm ? vmovdqu32(d, a) : vmovdqu(d, a); }
    void vstore(const Xbyak::Address& a, const Vmm& s) { kZmm ? vmovdqu32(a, s) : vmovdqu(a, s); }

    // The block of the width being emitted.
    int64_t block_code_bytes() const { return int64_t(width_bits_) * panel_ * 4; }
    int64_t x_row_bytes() const { return spec_.padded_k() * x_bytes_; }
    int64_t group_meta_bytes() const { return spec_.num_groups() * 4; }  // one float per row and group

    // ---- the kernel ----
    void generate() {
        preamble();
        if (integer_scales_) sub(regs::rsp, scale_table_bytes());
        load_arguments();
        load_constants();
        zero_output_tile();
        for (int i = 0; i < rows_; ++i)
            for (int t = 0; t < tu_; ++t) vzero(acc(i, t));
        if (spec_.group_rows() == 16) {
            emit_blocks_of_two_groups();
        } else {
            emit_group_loop();
        }
        if (integer_scales_) add(regs::rsp, scale_table_bytes());
        postamble();
        if (codebook_) emit_codebook_data();
        if (six_bit_codes_) emit_six_bit_code_data();
        finish();
    }

    // The codebook's values (WeightFormat::value_of), read once by load_constants.
    void emit_codebook_data() {
        align(16);
        L(codebook_data_);
        for (int code = 0; code < 16; ++code) db(uint8_t(spec_.format.value_of(code)));
    }

    // The vpshufb control and the shifts that spread a column vector's 6-bit codes (four in three
    // bytes, the same 16 bytes in every 128-bit lane) to 32-bit lanes: lane j takes the three bytes
    // of its four columns (3 (j / 4) on, the 128-bit lane's index) and shifts by 6 (j % 4).
    void emit_six_bit_code_data() {
        align(64);
        L(six_bit_control_);
        for (int j = 0; j < lanes_; ++j)
            for (int b = 0; b < 4; ++b) db(b < 3 ? uint8_t(3 * (j / 4) + b) : uint8_t(0x80));
        L(six_bit_shifts_);
        for (int j = 0; j < lanes_; ++j) dd(uint32_t(6 * (j % 4)));
    }

    // Codes (one per byte on the int8 path, per 32-bit lane on the f32 path) to their codebook
    // values, in place.
    void look_up_codebook(const Vmm& codes) {
        vpshufb(codes, codebook_table(), codes);
        if (!int8_) vand(codes, codes, low_byte_mask());  // the lane's other bytes looked up code 0
    }

    void load_arguments() {
        mov(codes_, ptr[args_ + offsetof(CpuKernelArgs, codes)]);
        mov(scales_, ptr[args_ + offsetof(CpuKernelArgs, scales)]);
        mov(zeros_, ptr[args_ + offsetof(CpuKernelArgs, zeros)]);
        mov(x_, ptr[args_ + offsetof(CpuKernelArgs, x)]);
        mov(x_scale_, ptr[args_ + offsetof(CpuKernelArgs, x_scale)]);
        mov(x_sum_, ptr[args_ + offsetof(CpuKernelArgs, x_sum)]);
        mov(y_, ptr[args_ + offsetof(CpuKernelArgs, y)]);
        if (mixed_) mov(group_bits_, ptr[args_ + offsetof(CpuKernelArgs, group_bits)]);
        if (super_block_) begin_super_block();
    }

    // Super-block scales: the metadata pointers are at a super-block's fp16 super-scales (and
    // super-mins); they are taken, and the pointers move to its first group's codes.
    void begin_super_block() {
        mov(super_scales_, scales_);
        add(scales_, panel_ * PanelMetadataLayout::kSuperBlockScaleBytes);
        if (!float_offsets_) return;
        mov(super_mins_, zeros_);
        add(zeros_, panel_ * PanelMetadataLayout::kSuperBlockScaleBytes);
    }

    // After a loop step's groups: when the steps left are a multiple of a super-block's, a
    // super-block has ended and the next one begins. steps_per_super_block: 1-step units of the
    // loop counter (groups, or pairs of groups of 16) in a super-block.
    void end_step_of_super_block(const Reg64& steps_left, int64_t steps_per_super_block) {
        if (!super_block_) return;
        Xbyak::Label inside;
        test(steps_left, steps_per_super_block - 1);
        jnz(inside, T_NEAR);
        if (integer_scales_) emit_super_block_epilogue();
        begin_super_block();
        L(inside);
    }

    void load_constants() {
        for (size_t w = 0; w < widths_.size(); ++w) {
            select_width(w);
            for (size_t p = 0; p < planes_.size(); ++p) {
                const uint32_t field = ((1u << planes_[p].width) - 1u) << planes_[p].value_shift;
                // int8 unpacks bytes (masks repeat per byte); f32 unpacks 32-bit lanes.
                if (int8_ && planes_[p].width == 8) continue;  // bytes are used as they are
                broadcast_constant(plane_mask(int(p)), int8_ ? repeat_byte(field) : field);
            }
        }
        select_width(0);
        if (pairs_sum_by_ones(spec_)) broadcast_constant(int16_ones(), 0x00010001u);
        if (codebook_) {
            kZmm ? vbroadcasti32x4(codebook_table(), ptr[regs::rip + codebook_data_])
                 : vbroadcasti128(Ymm(codebook_table().getIdx()), ptr[regs::rip + codebook_data_]);
            if (!int8_) broadcast_constant(low_byte_mask(), 0xffu);
        }
    }

    // Makes width w (an index into widths_) the one the block bodies emit: its planes, masks and
    // block size.
    void select_width(size_t w) {
        mask_base_ = 0;
        for (size_t i = 0; i < w; ++i) mask_base_ += int(code_planes(widths_[i]).size());
        width_bits_ = widths_[w];
        planes_ = code_planes(width_bits_);
    }

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

    void zero_output_tile() {
        const Vmm zero = ep_output();
        vzero(zero);
        for (int i = 0; i < rows_; ++i)
            for (int t = 0; t < tu_; ++t) vmovups(ptr[y_ + (i * panel_ + column(t)) * 4], zero);
    }

    // Groups of 16: each 32-row block holds two whole groups, so one loop iteration runs the
    // first four quads, closes a group, runs the next four and closes another.
    void emit_blocks_of_two_groups() {
        Xbyak::Label block_loop, done;
        mov(groups_left_, ptr[args_ + offsetof(CpuKernelArgs, full_groups)]);
        shr(groups_left_, 1);
        jz(done, T_NEAR);
        L(block_loop);
        if (integer_scales_) {
            write_scale_table(0, 0);
            write_scale_table(1, PanelMetadataLayout{spec_.format}.code_bytes(panel_));
        }
        emit_prefetch();
        emit_block_body(0, 4);
        emit_group_epilogue();
        emit_block_body(4, 8);
        emit_group_epilogue();
        advance_block();
        dec(groups_left_);
        end_step_of_super_block(groups_left_, groups_per_kernel_step(spec_) / 2);
        jnz_after_super_block_check(block_loop);
        L(done);
    }

    void emit_group_loop() {
        Xbyak::Label group_loop, tail, done;
        mov(groups_left_, ptr[args_ + offsetof(CpuKernelArgs, full_groups)]);
        test(groups_left_, groups_left_);
        jz(tail, T_NEAR);
        L(group_loop);
        if (integer_scales_) write_scale_table(0, 0);
        emit_per_width([&] {
            Xbyak::Label block_loop;
            mov(blocks_left_, spec_.group_rows() / 32 / spec_.tiling.ku);
            L(block_loop);
            for (int u = 0; u < spec_.tiling.ku; ++u) {  // k-unroll
                emit_prefetch();
                emit_block_body(0, 8);
                advance_block();
            }
            dec(blocks_left_);
            jnz(block_loop, T_NEAR);
        });
        emit_group_epilogue();
        dec(groups_left_);
        end_step_of_super_block(groups_left_, groups_per_kernel_step(spec_));
        jnz_after_super_block_check(group_loop);

        L(tail);  // a last, shorter group (K not a multiple of the group size)
        mov(blocks_left_, ptr[args_ + offsetof(CpuKernelArgs, tail_blocks)]);
        test(blocks_left_, blocks_left_);
        jz(done, T_NEAR);
        emit_per_width([&] {
            Xbyak::Label tail_loop;
            L(tail_loop);
            emit_prefetch();
            emit_block_body(0, 8);
            advance_block();
            dec(blocks_left_);
            jnz(tail_loop, T_NEAR);
        });
        emit_group_epilogue();
        L(done);
    }

    // Loops on while groups_left_ is not zero (the super-block check between the dec and here
    // changes the flags, so they are set again).
    void jnz_after_super_block_check(Xbyak::Label& loop) {
        if (super_block_) test(groups_left_, groups_left_);
        jnz(loop, T_NEAR);
    }

    void emit_prefetch() {
        if (spec_.tiling.prefetch <= 0) return;
        const int64_t ahead = spec_.tiling.prefetch * block_code_bytes();
        for (int64_t line = 0; line < block_code_bytes(); line += 64) prefetcht0(ptr[codes_ + ahead + line]);
    }

    void advance_block() {
        add(codes_, block_code_bytes());
        add(x_, 32 * x_bytes_);
    }

    // Quads [q_begin, q_end) of the current 32-row block (a quad is four consecutive rows).
    void emit_block_body(int q_begin, int q_end) {
        if (merges_planes_) return emit_merged_planes_body(q_begin, q_end);
        for (size_t p = 0; p < planes_.size(); ++p) {
            const CodePlane& plane = planes_[p];
            const int quads_per_word = plane.rows_per_word() / 4;
            for (int w = q_begin / quads_per_word; w * quads_per_word < q_end; ++w) {
                for (int t = 0; t < tu_; ++t)
                    vload(word(t), ptr[codes_ + ((plane.first_word + w) * panel_ + column(t)) * 4]);
                const int first = std::max(q_begin, w * quads_per_word);
                const int last = std::min(q_end, (w + 1) * quads_per_word);
                for (int quad = first; quad < last; ++quad) {
                    const int field = quad - w * quads_per_word;
                    if (int8_) {
                        emit_int8_quad(int(p), field, quad);
                    } else {
                        for (int byte = 0; byte < 4; ++byte) emit_f32_row(int(p), field, byte, quad * 4 + byte);
                    }
                }
            }
        }
    }

    // Codes of two planes on the int8 path (3, 5 and 6 bits): the high plane's bits are merged into
    // the low plane's before the dot products, one byte per code, so a quad costs each row one dot
    // product, as at 2 and 4 bits (a dot product per plane made 3-bit twice as slow once rows share
    // the unpacking). Each plane's word is loaded once for the quads it holds.
    void emit_merged_planes_body(int q_begin, int q_end) {
        const CodePlane &low = planes_[0], &high = planes_[1];
        const int low_quads = low.rows_per_word() / 4, high_quads = high.rows_per_word() / 4;
        for (int quad = q_begin; quad < q_end; ++quad) {
            if (quad == q_begin || quad % low_quads == 0)
                for (int t = 0; t < tu_; ++t)
                    vload(word(t), ptr[codes_ + ((low.first_word + quad / low_quads) * panel_ + column(t)) * 4]);
            if (quad == q_begin || quad % high_quads == 0)
                for (int t = 0; t < tu_; ++t)
                    vload(high_word(t), ptr[codes_ + ((high.first_word + quad / high_quads) * panel_ + column(t)) * 4]);
            broadcast_quad_activations(quad);
            const int low_shift = quad % low_quads * low.width - low.value_shift;
            const int high_shift = quad % high_quads * high.width - high.value_shift;
            for (int t = 0; t < tu_; ++t) {
                const Vmm codes = unpack(0, t, low_shift);
                if (kZmm) {  // codes |= shifted high word & mask, in one instruction
                    const Vmm high_bits = shifted(high_bit(), high_word(t), high_shift);
                    vpternlogd(codes, high_bits, plane_mask(1), 0xf8);  // truth table of a | (b & c)
                } else {
                    shift_and_mask(high_bit(), high_word(t), high_shift, plane_mask(1));
                    vpor(codes, codes, high_bit());
                }
                emit_quad_dots(t, codes, quad);
            }
        }
    }

    // src shifted right by `shift` (left by -shift) into dst, in 16-bit lanes on the int8 path and
    // 32-bit lanes on the f32 path; src itself when shift is 0. Returns the register holding it.
    Vmm shifted(const Vmm& dst, const Vmm& src, int shift) {
        if (shift == 0) return src;
        if (shift > 0) int8_ ? vpsrlw(dst, src, uint8_t(shift)) : vpsrld(dst, src, uint8_t(shift));
        else int8_ ? vpsllw(dst, src, uint8_t(-shift)) : vpslld(dst, src, uint8_t(-shift));
        return dst;
    }

    // dst = (src shifted right by `shift`, or left by -shift) & mask.
    void shift_and_mask(const Vmm& dst, const Vmm& src, int shift, const Vmm& mask) {
        vand(dst, shifted(dst, src, shift), mask);
    }

    // Shifts field `field` of plane p into its place in the code and masks it off; bytes for the
    // int8 path (16-bit shifts: bits crossing a byte boundary fall outside the mask), 32-bit
    // lanes for the f32 path. Returns the register holding the result.
    Vmm unpack(int p, int t, int shift) {
        const Vmm src = word(t), dst = unpacked();
        if (int8_ && planes_[size_t(p)].width == 8) return src;
        shift_and_mask(dst, src, shift, plane_mask(p));
        return dst;
    }

    // Activations of row i at byte offset `offset` of the current block, for every lane: an
    // embedded broadcast operand where EVEX allows one (no register, no extra instruction), else
    // a register filled once per quad or row.
    Xbyak::Address x_operand(int i, int offset) const { return ptr_b[x_ + i * x_row_bytes() + offset]; }

    void emit_int8_quad(int p, int field, int quad) {
        const CodePlane& plane = planes_[size_t(p)];
        broadcast_quad_activations(quad);
        for (int t = 0; t < tu_; ++t) {
            const Vmm codes = unpack(p, t, plane.width * field - plane.value_shift);
            if (codebook_) look_up_codebook(codes);
            emit_quad_dots(t, codes, quad);
        }
    }

    // The four activations of the quad for every row, where they are not embedded broadcasts.
    void broadcast_quad_activations(int quad) {
        if (!embedded_broadcast(spec_) && !per_dot_)
            for (int i = 0; i < rows_; ++i) vpbroadcastd(x_broadcast(i), dword[x_ + i * x_row_bytes() + quad * 4]);
    }

    // acc[i][t] += the quad's codes (column vector t) . row i's activations, for every row.
    void emit_quad_dots(int t, const Vmm& codes, int quad) {
        for (int i = 0; i < rows_; ++i) {
            if (embedded_broadcast(spec_)) {
                vpdpbusd(acc(i, t), codes, x_operand(i, quad * 4));
            } else {
                if (per_dot_) vpbroadcastd(x_broadcast(i), dword[x_ + i * x_row_bytes() + quad * 4]);
                if (pair_depth_ > 1) {
                    emit_int16_dot(i, t, codes, x_broadcast(i), quad);
                } else {
                    emit_dot(acc(i, t), codes, x_broadcast(i), scale_table(table_slot(quad), t));
                }
            }
        }
    }

    // acc += sum over each lane's 4 bytes of u8 codes x s8 activations (register operands); with
    // integer sub-block scales, times the group's scale codes (`scales`, the quad's table).
    void emit_dot(const Vmm& accumulator, const Vmm& codes, const Vmm& activations, const Xbyak::Address& scales) {
        if (spec_.vnni()) {
            vpdpbusd(accumulator, codes, activations, kZmm ? Xbyak::EvexEncoding : Xbyak::VexEncoding);
        } else {
            vpmaddubsw(pair_sums(), codes, activations);
            if (integer_scales_) {
                vpmaddwd(pair_sums(), pair_sums(), scales);
            } else {
                vpmaddwd(pair_sums(), pair_sums(), int16_ones());
            }
            vpaddd(accumulator, accumulator, pair_sums());
        }
    }

    // The scale table of a quad of the current block: the block's second group's for groups of 16.
    int table_slot(int quad) const { return spec_.group_rows() == 16 ? quad / 4 : 0; }

    // The dot products of integer sub-block scales with int16 pair sums: over each run of
    // pair_depth_ quads of a group, acc16 = the sum of the runs' vpmaddubsw pairs (the first quad
    // writes it); at the run's end acc += acc16 times the group's scale codes (vpmaddwd).
    void emit_int16_dot(int i, int t, const Vmm& codes, const Vmm& activations, int quad) {
        const int quads_per_group = int(spec_.group_rows() / 4), position = quad % quads_per_group;
        if (position % pair_depth_ == 0) {
            vpmaddubsw(acc16(i, t), codes, activations);
        } else {
            vpmaddubsw(pair_sums(), codes, activations);
            vpaddw(acc16(i, t), acc16(i, t), pair_sums());
        }
        if (position % pair_depth_ == pair_depth_ - 1 || position == quads_per_group - 1) {
            vpmaddwd(acc16(i, t), acc16(i, t), scale_table(table_slot(quad), t));
            vpaddd(acc(i, t), acc(i, t), acc16(i, t));
        }
    }

    // The scale table of slot `slot` from the group's scale codes at scales_ + offset: each
    // column's code in both int16 halves of its 32-bit lane (scale codes only where the bytes
    // share them with min codes).
    void write_scale_table(int slot, int64_t offset) {
        const Vmm codes = ep_scale(), high = ep_zero(), low_half = ep_broadcast(), nibble = ep_output();
        broadcast_constant(low_half, 0xffffu);
        if (mins_in_scale_bytes_) broadcast_constant(nibble, 0xfu);
        for (int t = 0; t < tu_; ++t) {
            load_code_bytes(codes, scales_, t, spec_.format.symmetric, offset);
            if (mins_in_scale_bytes_) vand(codes, codes, nibble);
            vpslld(high, codes, 16);
            vand(codes, codes, low_half);
            vor(codes, codes, high);
            vstore(scale_table(slot, t), codes);
        }
    }

    // Integer sub-block scales, after a super-block's last group (its pointers past the
    // super-block's groups, the super-values not yet moved on): y[i][t] += x_step[i] * (d * acc -
    // sum over the groups g of c_g * x_sum[i][g]), c_g = dmin * min code (float offsets) or
    // d * zero * scale code; then the accumulators restart.
    void emit_super_block_epilogue() {
        const Vmm factor = ep_scale(), correction = ep_zero(), broadcast = ep_broadcast(), out = ep_output();
        const PanelMetadataLayout layout{spec_.format};
        const int64_t groups = kSuperBlockRows / spec_.group_rows(), first_codes = panel_ * PanelMetadataLayout::kSuperBlockScaleBytes;
        // Each row's value at group g of the super-block in the per-row, per-group metadata.
        auto row_meta = [&](const Reg64& base, int i, int64_t g) {
            return base + i * group_meta_bytes() + (g - groups) * 4;
        };
        for (int t = 0; t < tu_; ++t) {
            load_halves(factor, super_scales_, t);
            for (int i = 0; i < rows_; ++i) {
                vcvtdq2ps(acc(i, t), acc(i, t));
                vmulps(acc(i, t), acc(i, t), factor);
            }
            if (float_offsets_) {  // factor = dmin
                load_halves(factor, super_mins_, t);
            } else {  // factor = d * zero
                broadcast_constant(broadcast, float_bits(float(spec_.format.symmetric_zero())));
                vmulps(factor, factor, broadcast);
            }
            for (int64_t g = 0; g < groups; ++g) {
                const int64_t codes_at = first_codes + g * layout.code_bytes(panel_);
                if (!float_offsets_) {
                    load_code_bytes(correction, super_scales_, t, true, codes_at);
                } else if (mins_in_scale_bytes_) {
                    load_code_bytes(correction, super_scales_, t, false, codes_at);
                    vpsrld(correction, correction, 4);
                } else {
                    load_code_bytes(correction, super_mins_, t, false, codes_at);
                }
                vcvtdq2ps(correction, correction);
                vmulps(correction, correction, factor);
                for (int i = 0; i < rows_; ++i)
                    multiply_add_row_value(true, acc(i, t), correction, row_meta(x_sum_, i, g), broadcast);
            }
            for (int i = 0; i < rows_; ++i) {
                const Xbyak::Address y_at = ptr[y_ + (i * panel_ + column(t)) * 4];
                vmovups(out, y_at);
                multiply_add_row_value(false, out, acc(i, t), row_meta(x_scale_, i, groups - 1), broadcast);
                vmovups(y_at, out);
                vzero(acc(i, t));
            }
        }
    }

    void emit_f32_row(int p, int field, int byte, int row) {
        const CodePlane& plane = planes_[size_t(p)];
        if (!embedded_broadcast(spec_))
            for (int i = 0; i < rows_; ++i) vbroadcastss(x_broadcast(i), dword[x_ + i * x_row_bytes() + row * 4]);
        for (int t = 0; t < tu_; ++t) {
            const Vmm codes = unpack(p, t, 8 * byte + plane.width * field - plane.value_shift);
            if (codebook_) look_up_codebook(codes);
            vcvtdq2ps(unpacked(), codes);
            for (int i = 0; i < rows_; ++i) {
                if (embedded_broadcast(spec_)) {
                    vfmadd231ps(acc(i, t), unpacked(), x_operand(i, row * 4));
                } else {
                    vfmadd231ps(acc(i, t), unpacked(), x_broadcast(i));
                }
            }
        }
    }

    // y[i][t] += scale * (acc - zero * x_sum[i]) (* x_scale[i] on the int8 path), or with float
    // offsets y[i][t] += scale * acc (* x_scale[i]) + offset * x_sum[i] (* x_scale[i]); then the
    // accumulators restart and the group pointers move on.
    void emit_group_epilogue() {
        if (!integer_scales_) emit_group_outputs();
        advance_group_metadata();
    }

    void emit_group_outputs() {
        const Vmm scale = ep_scale(), zero = ep_zero(), factor = ep_broadcast(), out = ep_output();
        // A symmetric zero is the same for every column: broadcast once (nothing below writes it).
        const bool constant_zero = spec_.format.symmetric && !second_order_;
        if (constant_zero) broadcast_constant(zero, float_bits(float(spec_.format.symmetric_zero())));
        for (int t = 0; t < tu_; ++t) {
            if (second_order_) {
                load_second_order_scale_and_zero(t, scale, zero, factor);
            } else if (super_block_) {
                load_super_block_scale_and_offset(t, scale, zero, factor);
            } else {
                load_stored_floats(scale, scales_, t);
            }
            if (second_order_ || (super_block_ && float_offsets_)) {
                // loaded with the scale
            } else if (float_offsets_) {
                load_stored_floats(zero, zeros_, t);  // the offsets
            } else if (constant_zero) {
                // broadcast before the loop
            } else {
                vpmovzxbd(zero, kZmm ? Xbyak::Address(xword[zeros_ + column(t)])
                                     : Xbyak::Address(qword[zeros_ + column(t)]));
                vcvtdq2ps(zero, zero);
            }
            for (int i = 0; i < rows_; ++i) {
                const Vmm a = acc(i, t);
                if (int8_) vcvtdq2ps(a, a);
                const Xbyak::Address y_at = ptr[y_ + (i * panel_ + column(t)) * 4];
                if (float_offsets_) {
                    emit_offset_row(i, a, scale, zero, factor, out, y_at);
                    vzero(a);
                    continue;
                }
                multiply_add_row_value(true, a, zero, x_sum_ + i * group_meta_bytes(), factor);
                if (int8_) scale_by_row_step(factor, scale, i * group_meta_bytes());
                vmovups(out, y_at);
                vfmadd231ps(out, a, int8_ ? factor : scale);
                vmovups(y_at, out);
                vzero(a);
            }
        }
    }

    // The group's scales, zero points, activation sums and steps are behind; the next group's follow.
    void advance_group_metadata() {
        if (super_block_) {
            const int64_t code_bytes = PanelMetadataLayout{spec_.format}.code_bytes(panel_);
            add(scales_, code_bytes);
            if (float_offsets_ && !mins_in_scale_bytes_) add(zeros_, code_bytes);
        } else {
            add(scales_, second_order_ ? panel_ / SecondOrderScales::kColumns * kSecondOrderPairBytes : panel_ * scale_bytes_);
            if (!spec_.format.symmetric) add(zeros_, float_offsets_ ? panel_ * scale_bytes_ : panel_);
        }
        add(x_sum_, 4);
        if (int8_) add(x_scale_, 4);
        if (mixed_) inc(group_bits_);
    }

    // Column vector t of fp16 values at `base` (one per column), as fp32.
    void load_halves(const Vmm& dst, const Reg64& base, int t) {
        vcvtph2ps(dst, kZmm ? Xbyak::Address(yword[base + column(t) * 2]) : Xbyak::Address(xword[base + column(t) * 2]));
    }

    // Column vector t of fp16 or fp32 values stored like the scales (scales, float offsets), as fp32.
    void load_stored_floats(const Vmm& dst, const Reg64& base, int t) {
        if (spec_.format.f16_scales()) {
            load_halves(dst, base, t);
        } else {
            vmovups(dst, ptr[base + column(t) * 4]);
        }
    }

    // Row i of the float-offset epilogue: y += scale * acc + offset * x_sum, each term times the
    // row's int8 step on the int8 path (x_sum then sums the int8 values). `a` is free afterwards.
    void emit_offset_row(int i, const Vmm& a, const Vmm& scale, const Vmm& offset, const Vmm& factor, const Vmm& out,
                         const Xbyak::Address& y_at) {
        const int64_t meta = int64_t(i) * group_meta_bytes();
        vmovups(out, y_at);
        if (int8_) {
            scale_by_row_step(factor, scale, meta);
            vfmadd231ps(out, a, factor);
            scale_by_row_step(factor, offset, meta);
        } else {
            vfmadd231ps(out, a, scale);
        }
        const Vmm& sum_factor = int8_ ? factor : offset;
        // Super-block offsets are -(dmin * m): `offset` holds dmin * m, subtracted.
        const bool subtract = super_block_;
        multiply_add_row_value(subtract, out, sum_factor, x_sum_ + meta, a);
        vmovups(y_at, out);
    }

    // dst += a * (or -= with `subtract`) the float at `at`, a per-row value of the group metadata:
    // an embedded broadcast on AVX-512, else broadcast into `temp` first.
    void multiply_add_row_value(bool subtract, const Vmm& dst, const Vmm& a, const Xbyak::RegExp& at, const Vmm& temp) {
        if (kZmm) {
            subtract ? vfnmadd231ps(dst, a, ptr_b[at]) : vfmadd231ps(dst, a, ptr_b[at]);
        } else {
            vbroadcastss(temp, dword[at]);
            subtract ? vfnmadd231ps(dst, a, temp) : vfmadd231ps(dst, a, temp);
        }
    }

    // dst = values * the row's int8 step (x_scale at byte `meta` of the row's group metadata).
    void scale_by_row_step(const Vmm& dst, const Vmm& values, int64_t meta) {
        if (kZmm) {
            vmulps(dst, values, ptr_b[x_scale_ + meta]);
        } else {
            vbroadcastss(dst, dword[x_scale_ + meta]);
            vmulps(dst, dst, values);
        }
    }

    // Column vector t's scales and zero points from second-order storage: a byte per column holds
    // the zero point (low nibble) and the scale's 4-bit code (high nibble); the vector's 16-column
    // group has an fp16 scale and zero (s2, z2), and scale = s2 * (code - z2), in this order.
    void load_second_order_scale_and_zero(int t, const Vmm& scale, const Vmm& zero, const Vmm& factor) {
        vpmovzxbd(zero, kZmm ? Xbyak::Address(xword[zeros_ + column(t)]) : Xbyak::Address(qword[zeros_ + column(t)]));
        vpsrld(scale, zero, 4);
        broadcast_constant(factor, 0xfu);
        vand(zero, zero, factor);
        vcvtdq2ps(zero, zero);
        vcvtdq2ps(scale, scale);
        const int64_t pair = column(t) / SecondOrderScales::kColumns * kSecondOrderPairBytes;
        broadcast_half(factor, scales_, pair + 2);  // z2
        vsubps(scale, scale, factor);
        broadcast_half(factor, scales_, pair);  // s2
        vmulps(scale, scale, factor);
    }

    // Column vector t's scales (code times super-scale) and, with float offsets, the mins (min code
    // times super-min, which the offset rows subtract) from super-block storage; the min codes are the high nibbles of
    // the scale bytes where the two share them. Exact: an fp16 value times a code of at most 8 bits.
    void load_super_block_scale_and_offset(int t, const Vmm& scale, const Vmm& offset, const Vmm& temp) {
        load_code_bytes(scale, scales_, t, spec_.format.symmetric);
        if (float_offsets_) {
            if (mins_in_scale_bytes_) {
                vpsrld(offset, scale, 4);
                broadcast_constant(temp, 0xfu);
                vand(scale, scale, temp);
            } else {
                load_code_bytes(offset, zeros_, t, false);
            }
            times_super_value(offset, super_mins_, t, temp);  // dmin * m: emit_offset_row subtracts it
        }
        times_super_value(scale, super_scales_, t, temp);
    }

    // dst = column vector t's scale or min codes at `codes` + offset, signed or unsigned, in 32-bit lanes.
    void load_code_bytes(const Vmm& dst, const Reg64& codes, int t, bool is_signed, int64_t offset = 0) {
        if (six_bit_codes_) return load_six_bit_codes(dst, codes, t, is_signed, offset);
        const Xbyak::RegExp at = codes + offset + column(t);
        const Xbyak::Address bytes = kZmm ? Xbyak::Address(xword[at]) : Xbyak::Address(qword[at]);
        is_signed ? vpmovsxbd(dst, bytes) : vpmovzxbd(dst, bytes);
    }

    // The same for 6-bit codes packed four to three bytes (panel_metadata.hpp): the vector's bytes
    // in every 128-bit lane, each lane's three bytes spread and shifted, then the code's 6 bits
    // moved to the top and back (sign-extending signed codes).
    void load_six_bit_codes(const Vmm& dst, const Reg64& codes, int t, bool is_signed, int64_t offset) {
        const Xbyak::Address bytes = xword[codes + offset + column(t) / 4 * 3];
        kZmm ? vbroadcasti32x4(Zmm(dst.getIdx()), bytes) : vbroadcasti128(Ymm(dst.getIdx()), bytes);
        vpshufb(dst, dst, ptr[regs::rip + six_bit_control_]);
        vpsrlvd(dst, dst, ptr[regs::rip + six_bit_shifts_]);
        vpslld(dst, dst, 26);
        is_signed ? vpsrad(dst, dst, 26) : vpsrld(dst, dst, 26);
    }

    // dst (integer codes) = float(dst) * the fp16 super-values of column vector t at `supers`.
    void times_super_value(const Vmm& dst, const Reg64& supers, int t, const Vmm& temp) {
        vcvtdq2ps(dst, dst);
        load_halves(temp, supers, t);
        vmulps(dst, dst, temp);
    }

    // Every lane of dst = the fp16 value at base + offset, as fp32.
    void broadcast_half(const Vmm& dst, const Reg64& base, int64_t offset) {
        if (kZmm) {
            const Ymm halves(dst.getIdx());
            vpbroadcastw(halves, Xbyak::CodeGenerator::word[base + offset]);  // (word() here is a code register)
            vcvtph2ps(dst, halves);
        } else {
            const Xmm halves(dst.getIdx());
            vpbroadcastw(halves, Xbyak::CodeGenerator::word[base + offset]);  // (word() here is a code register)
            vcvtph2ps(dst, halves);
        }
    }

    const CpuKernelSpec spec_;
    const std::vector<int> widths_;  // the code widths the kernel handles (one unless mixed)
    std::vector<CodePlane> planes_;  // of the width being emitted (select_width)
    int width_bits_ = 0, mask_base_ = 0;
    const int tu_, first_vector_, rows_, lanes_, panel_;  // tu_: the kernel's column vectors; panel_: columns
    const bool int8_;
    const int x_bytes_, scale_bytes_;
    const bool merges_planes_, mixed_, second_order_, super_block_, float_offsets_, mins_in_scale_bytes_, six_bit_codes_,
        codebook_, integer_scales_;
    const int pair_depth_;  // quads whose pair sums add in int16 before vpmaddwd (1: none)
    const bool per_dot_;    // broadcasts_per_dot
    Xbyak::Label codebook_data_, six_bit_control_, six_bit_shifts_;
    int scratch_base_ = 0, const_base_ = 0;
};

}  // namespace

std::vector<int> kernel_widths(const CpuKernelSpec& spec) {
    if (spec.format.uniform_bits()) return {spec.format.bits};
    std::vector<int> widths(spec.format.group_bits.begin(), spec.format.group_bits.end());
    std::sort(widths.begin(), widths.end());
    widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
    return widths;
}

bool embedded_broadcast(const CpuKernelSpec& spec) {
    return spec.isa.avx512 && (spec.path == ActivationPath::F32 || spec.vnni());
}

bool merges_code_planes(const CpuKernelSpec& spec) {
    return spec.path == ActivationPath::Int8 && code_planes(spec.format.bits).size() > 1;
}

int codebook_constants(const CpuKernelSpec& spec) {
    if (!spec.format.has_codebook()) return 0;
    return spec.path == ActivationPath::F32 ? 2 : 1;
}

int pair_sum_depth(const CpuKernelSpec& spec) {
    if (!spec.integer_sub_block_scales()) return 1;
    int largest = (1 << spec.format.bits) - 1;  // the largest byte a dot product multiplies
    if (spec.format.has_codebook()) {
        largest = 0;
        for (int code = 0; code < 16; ++code) largest = std::max(largest, int(uint8_t(spec.format.value_of(code))));
    }
    const int largest_pair = 2 * largest * spec.int8_activation_max();
    return int(std::clamp<int64_t>(INT16_MAX / largest_pair, 1, spec.group_rows() / 4));
}

int accumulator_registers(const CpuKernelSpec& spec) {
    return spec.kernel_vectors() * spec.rows * (pair_sum_depth(spec) > 1 ? 2 : 1);
}

bool pairs_sum_by_ones(const CpuKernelSpec& spec) {
    return spec.path == ActivationPath::Int8 && !spec.vnni() && !spec.integer_sub_block_scales();
}

bool broadcasts_per_dot(const CpuKernelSpec& spec) {
    return spec.integer_sub_block_scales() && !embedded_broadcast(spec) && spec.kernel_vectors() == 1;
}

int activation_broadcasts(const CpuKernelSpec& spec) {
    if (embedded_broadcast(spec)) return 0;
    return broadcasts_per_dot(spec) ? 1 : spec.rows;
}

int main_scratch_registers(const CpuKernelSpec& spec) {
    const bool pair_sums = spec.path == ActivationPath::Int8 && !spec.vnni();
    const int broadcasts = activation_broadcasts(spec);
    const int high_plane = merges_code_planes(spec) ? spec.kernel_vectors() + 1 : 0;
    return spec.kernel_vectors() + 1 + high_plane + broadcasts + (pair_sums ? 1 : 0);
}

std::optional<CpuKernelSpec> prompt_tile(const CpuKernelSpec& spec) {
    // With embedded broadcasts every dot product loads its own activations, so taller tiles save
    // no broadcasts, and narrower parts decode more weights per dot: measured slower (AVX-512 VNNI).
    if (embedded_broadcast(spec)) return std::nullopt;
    constexpr int kMostRows = 16;
    std::optional<CpuKernelSpec> best;
    for (int vectors = 1; vectors <= spec.tiling.tu; ++vectors) {
        if (spec.tiling.tu % vectors != 0) continue;
        CpuKernelSpec part = spec;
        part.first_vector = 0;
        part.vectors = vectors;
        int rows = 0;
        for (int r = 1; r <= kMostRows; ++r) {
            part.rows = r;
            if (vector_registers_needed(part) > vector_registers_available(part.isa)) break;
            rows = r;
        }
        if (rows <= spec.tiling.mb) continue;
        part.rows = rows;
        const auto accumulators = [](const CpuKernelSpec& s) { return s.vectors * s.rows; };
        if (!best || accumulators(part) > accumulators(*best) ||
            (accumulators(part) == accumulators(*best) && part.rows > best->rows))
            best = part;
    }
    return best;
}

std::unique_ptr<JitGenerator> generate_cpu_kernel(const CpuKernelSpec& spec) {
    check_spec(spec);
    if (spec.isa.avx512) return std::make_unique<GemmEmitter<Zmm>>(spec);
    return std::make_unique<GemmEmitter<Ymm>>(spec);
}

}  // namespace qjit::jit
