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
// The y tile lives in registers where the tiling leaves enough free (spare_register_use), stored
// once at the end; else in memory, loaded and stored by each group's epilogue.
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
// A group's pair sums in int16 (4-bit groups of 32 on the int8 path without VNNI or integer
// scales): vpmaddubsw's pairs add up in the accumulators by vpaddw and widen to int32 once, in the
// group's epilogue (group_sums_in_int16): two instructions per quad and row instead of three.
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
#include "jit/x86/gemm_emitter_class.hpp"

#include <algorithm>
#include <cstddef>

#include "format/quantized_matrix.hpp"

namespace qjit::jit {

using Xbyak::Xmm;
using Xbyak::Ymm;
using Xbyak::Zmm;

namespace {

uint32_t repeat_byte(uint32_t byte) { return byte * 0x01010101u; }

}  // namespace

GemmEmitter::GemmEmitter(const CpuKernelSpec& spec)
    : JitGenerator(kernel_name(spec)),
      spec_(spec),
      zmm_(spec.isa.avx512),
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
      group_int16_(group_sums_in_int16(spec)),
      inline_metadata_(spec.inline_metadata),
      per_dot_(broadcasts_per_dot(spec)),
      spare_(spare_register_use(spec)) {
    const int scratch = std::max(main_scratch_registers(spec), kEpilogueTemporaries);
    scratch_base_ = accumulator_registers(spec);
    const_base_ = scratch_base_ + scratch;
    generate();
}

int GemmEmitter::total_masks() const {
    int masks = 0;
    for (int w : widths_) masks += int(code_planes(w).size());
    return masks;
}

void GemmEmitter::generate() {
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
    store_output_tile();
    if (integer_scales_) add(regs::rsp, scale_table_bytes());
    postamble();
    if (codebook_) emit_codebook_data();
    if (six_bit_codes_) emit_six_bit_code_data();
    finish();
}

// The codebook's values (WeightFormat::value_of), read once by load_constants.
void GemmEmitter::emit_codebook_data() {
    align(16);
    L(codebook_data_);
    for (int code = 0; code < 16; ++code) db(uint8_t(spec_.format.value_of(code)));
}

// The vpshufb control and the shifts that spread a column vector's 6-bit codes (four in three
// bytes, the same 16 bytes in every 128-bit lane) to 32-bit lanes: lane j takes the three bytes
// of its four columns (3 (j / 4) on, the 128-bit lane's index) and shifts by 6 (j % 4).
void GemmEmitter::emit_six_bit_code_data() {
    align(64);
    L(six_bit_control_);
    for (int j = 0; j < lanes_; ++j)
        for (int b = 0; b < 4; ++b) db(b < 3 ? uint8_t(3 * (j / 4) + b) : uint8_t(0x80));
    L(six_bit_shifts_);
    for (int j = 0; j < lanes_; ++j) dd(uint32_t(6 * (j % 4)));
}

// Codes (one per byte on the int8 path, per 32-bit lane on the f32 path) to their codebook
// values, in place.
void GemmEmitter::look_up_codebook(const Vmm& codes) {
    vpshufb(codes, codebook_table(), codes);
    if (!int8_) vand(codes, codes, low_byte_mask());  // the lane's other bytes looked up code 0
}

void GemmEmitter::load_arguments() {
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
void GemmEmitter::begin_super_block() {
    mov(super_scales_, scales_);
    add(scales_, panel_ * PanelMetadataLayout::kSuperBlockScaleBytes);
    if (!float_offsets_) return;
    mov(super_mins_, zeros_);
    add(zeros_, panel_ * PanelMetadataLayout::kSuperBlockScaleBytes);
}

// After a loop step's groups: when the steps left are a multiple of a super-block's, a
// super-block has ended and the next one begins. steps_per_super_block: 1-step units of the
// loop counter (groups, or pairs of groups of 16) in a super-block.
void GemmEmitter::end_step_of_super_block(const Reg64& steps_left, int64_t steps_per_super_block) {
    if (!super_block_) return;
    Xbyak::Label inside;
    test(steps_left, steps_per_super_block - 1);
    jnz(inside, T_NEAR);
    if (integer_scales_) emit_super_block_epilogue();
    begin_super_block();
    L(inside);
}

void GemmEmitter::load_constants() {
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
    if (spare_.zero_point) broadcast_symmetric_zero(zero_point());
    if (codebook_) {
        zmm_ ? vbroadcasti32x4(Zmm(codebook_table().getIdx()), ptr[regs::rip + codebook_data_])
             : vbroadcasti128(Ymm(codebook_table().getIdx()), ptr[regs::rip + codebook_data_]);
        if (!int8_) broadcast_constant(low_byte_mask(), 0xffu);
    }
}

// Makes width w (an index into widths_) the one the block bodies emit: its planes, masks and
// block size.
void GemmEmitter::select_width(size_t w) {
    mask_base_ = 0;
    for (size_t i = 0; i < w; ++i) mask_base_ += int(code_planes(widths_[i]).size());
    width_bits_ = widths_[w];
    planes_ = code_planes(width_bits_);
}

void GemmEmitter::zero_output_tile() {
    if (spare_.output_tile) {
        for (int i = 0; i < rows_; ++i)
            for (int t = 0; t < tu_; ++t) vzero(output(i, t));
        return;
    }
    const Vmm zero = ep_output();
    vzero(zero);
    for (int i = 0; i < rows_; ++i)
        for (int t = 0; t < tu_; ++t) vmovups(output_at(i, t), zero);
}

void GemmEmitter::store_output_tile() {
    if (!spare_.output_tile) return;
    for (int i = 0; i < rows_; ++i)
        for (int t = 0; t < tu_; ++t) vmovups(output_at(i, t), output(i, t));
}

Vmm GemmEmitter::load_output(int i, int t, const Vmm& temp) {
    if (spare_.output_tile) return output(i, t);
    vmovups(temp, output_at(i, t));
    return temp;
}

void GemmEmitter::store_output(int i, int t, const Vmm& value) {
    if (!spare_.output_tile) vmovups(output_at(i, t), value);
}

// Groups of 16: each 32-row block holds two whole groups, so one loop iteration runs the
// first four quads, closes a group, runs the next four and closes another.
void GemmEmitter::emit_blocks_of_two_groups() {
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

void GemmEmitter::emit_group_loop() {
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
void GemmEmitter::jnz_after_super_block_check(Xbyak::Label& loop) {
    if (super_block_) test(groups_left_, groups_left_);
    jnz(loop, T_NEAR);
}

void GemmEmitter::emit_prefetch() {
    if (spec_.tiling.prefetch <= 0) return;
    const int64_t ahead = spec_.tiling.prefetch * block_code_bytes();
    for (int64_t line = 0; line < block_code_bytes(); line += 64) prefetcht0(ptr[codes_ + ahead + line]);
}

void GemmEmitter::advance_block() {
    add(codes_, block_code_bytes());
    add(x_, 32 * x_bytes_);
}

// Quads [q_begin, q_end) of the current 32-row block (a quad is four consecutive rows).
void GemmEmitter::emit_block_body(int q_begin, int q_end) {
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
void GemmEmitter::emit_merged_planes_body(int q_begin, int q_end) {
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
            if (zmm_) {  // codes |= shifted high word & mask, in one instruction
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
Vmm GemmEmitter::shifted(const Vmm& dst, const Vmm& src, int shift) {
    if (shift == 0) return src;
    if (shift > 0) int8_ ? vpsrlw(dst, src, uint8_t(shift)) : vpsrld(dst, src, uint8_t(shift));
    else int8_ ? vpsllw(dst, src, uint8_t(-shift)) : vpslld(dst, src, uint8_t(-shift));
    return dst;
}

// dst = (src shifted right by `shift`, or left by -shift) & mask.
void GemmEmitter::shift_and_mask(const Vmm& dst, const Vmm& src, int shift, const Vmm& mask) {
    vand(dst, shifted(dst, src, shift), mask);
}

// Shifts field `field` of plane p into its place in the code and masks it off; bytes for the
// int8 path (16-bit shifts: bits crossing a byte boundary fall outside the mask), 32-bit
// lanes for the f32 path. Returns the register holding the result.
Vmm GemmEmitter::unpack(int p, int t, int shift) {
    const Vmm src = word(t), dst = unpacked();
    if (int8_ && planes_[size_t(p)].width == 8) return src;
    shift_and_mask(dst, src, shift, plane_mask(p));
    return dst;
}

void GemmEmitter::emit_int8_quad(int p, int field, int quad) {
    const CodePlane& plane = planes_[size_t(p)];
    broadcast_quad_activations(quad);
    for (int t = 0; t < tu_; ++t) {
        const Vmm codes = unpack(p, t, plane.width * field - plane.value_shift);
        if (codebook_) look_up_codebook(codes);
        emit_quad_dots(t, codes, quad);
    }
}

// The four activations of the quad for every row, where they are not embedded broadcasts.
void GemmEmitter::broadcast_quad_activations(int quad) {
    if (!embedded_broadcast(spec_) && !per_dot_)
        for (int i = 0; i < rows_; ++i) vpbroadcastd(x_broadcast(i), dword[x_ + i * x_row_bytes() + quad * 4]);
}

// acc[i][t] += the quad's codes (column vector t) . row i's activations, for every row.
void GemmEmitter::emit_quad_dots(int t, const Vmm& codes, int quad) {
    for (int i = 0; i < rows_; ++i) {
        if (embedded_broadcast(spec_)) {
            vpdpbusd(acc(i, t), codes, x_operand(i, quad * 4));
        } else {
            if (per_dot_) vpbroadcastd(x_broadcast(i), dword[x_ + i * x_row_bytes() + quad * 4]);
            if (pair_depth_ > 1) {
                emit_int16_dot(i, t, codes, x_broadcast(i), quad);
            } else if (group_int16_) {
                emit_group_int16_dot(i, t, codes, x_broadcast(i), quad);
            } else {
                emit_dot(acc(i, t), codes, x_broadcast(i), scale_table(table_slot(quad), t));
            }
        }
    }
}

// acc += sum over each lane's 4 bytes of u8 codes x s8 activations (register operands); with
// integer sub-block scales, times the group's scale codes (`scales`, the quad's table).
void GemmEmitter::emit_dot(const Vmm& accumulator, const Vmm& codes, const Vmm& activations, const Xbyak::Address& scales) {
    if (spec_.vnni()) {
        vpdpbusd(accumulator, codes, activations, zmm_ ? Xbyak::EvexEncoding : Xbyak::VexEncoding);
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

// The dot products of integer sub-block scales with int16 pair sums: over each run of
// pair_depth_ quads of a group, acc16 = the sum of the runs' vpmaddubsw pairs (the first quad
// writes it); at the run's end acc += acc16 times the group's scale codes (vpmaddwd).
void GemmEmitter::emit_int16_dot(int i, int t, const Vmm& codes, const Vmm& activations, int quad) {
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

// The pair sums of a group in int16 (group_int16_): its first quad writes acc(i, t), the others
// add to it; the group's epilogue widens the sums.
void GemmEmitter::emit_group_int16_dot(int i, int t, const Vmm& codes, const Vmm& activations, int quad) {
    if (quad % (spec_.group_rows() / 4) == 0) {
        vpmaddubsw(acc(i, t), codes, activations);
        return;
    }
    vpmaddubsw(pair_sums(), codes, activations);
    vpaddw(acc(i, t), acc(i, t), pair_sums());
}

void GemmEmitter::emit_f32_row(int p, int field, int byte, int row) {
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

std::unique_ptr<JitGenerator> generate_cpu_kernel(const CpuKernelSpec& spec) {
    check_spec(spec);
    return std::make_unique<GemmEmitter>(spec);
}

}  // namespace qjit::jit
