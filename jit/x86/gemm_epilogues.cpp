// The GEMM emitter's epilogues (gemm_emitter_class.hpp): per group, the scales and zero points or
// offsets applied to the accumulators and added to the output tile; with integer sub-block scales,
// the group's scale table and the super-block's epilogue; and the loads of the metadata they read
// (fp16 or fp32 values, 8- or 6-bit codes, second-order and super-block scales).
#include <cstring>

#include "format/quantized_matrix.hpp"
#include "jit/x86/gemm_emitter_class.hpp"

namespace qjit::jit {

using Xbyak::Xmm;
using Xbyak::Ymm;
using Xbyak::Zmm;

namespace {

uint32_t float_bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

}  // namespace

// The scale table of slot `slot` from the group's scale codes at scales_ + offset: each
// column's code in both int16 halves of its 32-bit lane (scale codes only where the bytes
// share them with min codes).
void GemmEmitter::write_scale_table(int slot, int64_t offset) {
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
void GemmEmitter::emit_super_block_epilogue() {
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
            vmulps(factor, factor, symmetric_zero(broadcast));
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
            const Vmm y = load_output(i, t, out);
            multiply_add_row_value(false, y, acc(i, t), row_meta(x_scale_, i, groups - 1), broadcast);
            store_output(i, t, y);
            vzero(acc(i, t));
        }
    }
}

// y[i][t] += scale * (acc - zero * x_sum[i]) (* x_scale[i] on the int8 path), or with float
// offsets y[i][t] += scale * acc (* x_scale[i]) + offset * x_sum[i] (* x_scale[i]); then the
// accumulators restart and the group pointers move on.
void GemmEmitter::emit_group_epilogue() {
    if (inline_metadata_) {  // past the group's codes: its slot holds the scales, then the zero points
        mov(scales_, codes_);
        if (!spec_.format.symmetric) lea(zeros_, ptr[codes_ + panel_ * scale_bytes_]);
    }
    if (!integer_scales_) emit_group_outputs();
    advance_group_metadata();
}

void GemmEmitter::emit_group_outputs() {
    // A symmetric zero is the same for every column: once per group, or none where a spare
    // register holds it (nothing below writes it).
    const bool constant_zero = spec_.format.symmetric && !second_order_;
    const Vmm scale = ep_scale(), zero = constant_zero ? symmetric_zero(ep_zero()) : ep_zero(), factor = ep_broadcast(),
              out = ep_output();
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
            vpmovzxbd(zero, zmm_ ? Xbyak::Address(xword[zeros_ + column(t)])
                                 : Xbyak::Address(qword[zeros_ + column(t)]));
            vcvtdq2ps(zero, zero);
        }
        for (int i = 0; i < rows_; ++i) {
            const Vmm a = acc(i, t);
            if (group_int16_) vpmaddwd(a, a, int16_ones());
            if (int8_) vcvtdq2ps(a, a);
            if (float_offsets_) {
                emit_offset_row(i, t, a, scale, zero, factor);
            } else {
                multiply_add_row_value(true, a, zero, x_sum_ + i * group_meta_bytes(), factor);
                if (int8_) scale_by_row_step(factor, scale, i * group_meta_bytes());
                const Vmm y = load_output(i, t, out);
                vfmadd231ps(y, a, int8_ ? factor : scale);
                store_output(i, t, y);
            }
            if (!group_int16_) vzero(a);  // else the next group's first quad writes it
        }
    }
}

void GemmEmitter::broadcast_symmetric_zero(const Vmm& dst) {
    broadcast_constant(dst, float_bits(float(spec_.format.symmetric_zero())));
}

Vmm GemmEmitter::symmetric_zero(const Vmm& temp) {
    if (spare_.zero_point) return zero_point();
    broadcast_symmetric_zero(temp);
    return temp;
}

// The group's scales, zero points, activation sums and steps are behind; the next group's follow.
void GemmEmitter::advance_group_metadata() {
    if (super_block_) {
        const int64_t code_bytes = PanelMetadataLayout{spec_.format}.code_bytes(panel_);
        add(scales_, code_bytes);
        if (float_offsets_ && !mins_in_scale_bytes_) add(zeros_, code_bytes);
    } else if (inline_metadata_) {
        add(codes_, inline_slot_bytes(spec_));
    } else {
        add(scales_, second_order_ ? panel_ / SecondOrderScales::kColumns * kSecondOrderPairBytes : panel_ * scale_bytes_);
        if (!spec_.format.symmetric) add(zeros_, float_offsets_ ? panel_ * scale_bytes_ : panel_);
    }
    add(x_sum_, 4);
    if (int8_) add(x_scale_, 4);
    if (mixed_) inc(group_bits_);
}

// Column vector t of fp16 values at `base` (one per column), as fp32.
void GemmEmitter::load_halves(const Vmm& dst, const Reg64& base, int t) {
    vcvtph2ps(dst, zmm_ ? Xbyak::Address(yword[base + column(t) * 2]) : Xbyak::Address(xword[base + column(t) * 2]));
}

// Column vector t of fp16 or fp32 values stored like the scales (scales, float offsets), as fp32.
void GemmEmitter::load_stored_floats(const Vmm& dst, const Reg64& base, int t) {
    if (spec_.format.f16_scales()) {
        load_halves(dst, base, t);
    } else {
        vmovups(dst, ptr[base + column(t) * 4]);
    }
}

// Row i of the float-offset epilogue: y += scale * acc + offset * x_sum, each term times the
// row's int8 step on the int8 path (x_sum then sums the int8 values). `a` is free afterwards.
void GemmEmitter::emit_offset_row(int i, int t, const Vmm& a, const Vmm& scale, const Vmm& offset, const Vmm& factor) {
    const int64_t meta = int64_t(i) * group_meta_bytes();
    const Vmm out = load_output(i, t, ep_output());
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
    store_output(i, t, out);
}

// dst += a * (or -= with `subtract`) the float at `at`, a per-row value of the group metadata:
// an embedded broadcast on AVX-512, else broadcast into `temp` first.
void GemmEmitter::multiply_add_row_value(bool subtract, const Vmm& dst, const Vmm& a, const Xbyak::RegExp& at, const Vmm& temp) {
    if (zmm_) {
        subtract ? vfnmadd231ps(dst, a, ptr_b[at]) : vfmadd231ps(dst, a, ptr_b[at]);
    } else {
        vbroadcastss(temp, dword[at]);
        subtract ? vfnmadd231ps(dst, a, temp) : vfmadd231ps(dst, a, temp);
    }
}

// dst = values * the row's int8 step (x_scale at byte `meta` of the row's group metadata).
void GemmEmitter::scale_by_row_step(const Vmm& dst, const Vmm& values, int64_t meta) {
    if (zmm_) {
        vmulps(dst, values, ptr_b[x_scale_ + meta]);
    } else {
        vbroadcastss(dst, dword[x_scale_ + meta]);
        vmulps(dst, dst, values);
    }
}

// Column vector t's scales and zero points from second-order storage: a byte per column holds
// the zero point (low nibble) and the scale's 4-bit code (high nibble); the vector's 16-column
// group has an fp16 scale and zero (s2, z2), and scale = s2 * (code - z2), in this order.
void GemmEmitter::load_second_order_scale_and_zero(int t, const Vmm& scale, const Vmm& zero, const Vmm& factor) {
    vpmovzxbd(zero, zmm_ ? Xbyak::Address(xword[zeros_ + column(t)]) : Xbyak::Address(qword[zeros_ + column(t)]));
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
void GemmEmitter::load_super_block_scale_and_offset(int t, const Vmm& scale, const Vmm& offset, const Vmm& temp) {
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
void GemmEmitter::load_code_bytes(const Vmm& dst, const Reg64& codes, int t, bool is_signed, int64_t offset) {
    if (six_bit_codes_) return load_six_bit_codes(dst, codes, t, is_signed, offset);
    const Xbyak::RegExp at = codes + offset + column(t);
    const Xbyak::Address bytes = zmm_ ? Xbyak::Address(xword[at]) : Xbyak::Address(qword[at]);
    is_signed ? vpmovsxbd(dst, bytes) : vpmovzxbd(dst, bytes);
}

// The same for 6-bit codes packed four to three bytes (panel_metadata.hpp): the vector's bytes
// in every 128-bit lane, each lane's three bytes spread and shifted, then the code's 6 bits
// moved to the top and back (sign-extending signed codes).
void GemmEmitter::load_six_bit_codes(const Vmm& dst, const Reg64& codes, int t, bool is_signed, int64_t offset) {
    const Xbyak::Address bytes = xword[codes + offset + column(t) / 4 * 3];
    zmm_ ? vbroadcasti32x4(Zmm(dst.getIdx()), bytes) : vbroadcasti128(Ymm(dst.getIdx()), bytes);
    vpshufb(dst, dst, ptr[regs::rip + six_bit_control_]);
    vpsrlvd(dst, dst, ptr[regs::rip + six_bit_shifts_]);
    vpslld(dst, dst, 26);
    is_signed ? vpsrad(dst, dst, 26) : vpsrld(dst, dst, 26);
}

// dst (integer codes) = float(dst) * the fp16 super-values of column vector t at `supers`.
void GemmEmitter::times_super_value(const Vmm& dst, const Reg64& supers, int t, const Vmm& temp) {
    vcvtdq2ps(dst, dst);
    load_halves(temp, supers, t);
    vmulps(dst, dst, temp);
}

// Every lane of dst = the fp16 value at base + offset, as fp32.
void GemmEmitter::broadcast_half(const Vmm& dst, const Reg64& base, int64_t offset) {
    if (zmm_) {
        const Ymm halves(dst.getIdx());
        vpbroadcastw(halves, Xbyak::CodeGenerator::word[base + offset]);  // (word() here is a code register)
        vcvtph2ps(dst, halves);
    } else {
        const Xmm halves(dst.getIdx());
        vpbroadcastw(halves, Xbyak::CodeGenerator::word[base + offset]);  // (word() here is a code register)
        vcvtph2ps(dst, halves);
    }
}

}  // namespace qjit::jit
