// The x86 emitter of the flash FFN's gathered products (jit/x86/sparse_product_kernel.hpp).
//
// Loop nest of one call (the vectors and the geometry are compile-time constants; the slot list
// and the activations are arguments):
//
//   for each pass of `vectors` slots (then single slots for the rest):
//     total[v][r] = 0                                    8 fp32 lanes per slot and row
//     for each chunk of 8 groups:
//       s8, o8 = the chunk's scales and offsets (o = -s * zero, or the float offset)
//       factor[v][r][8] = s8 * x_scale[r]                kept on the stack
//       total[v][r] += o8 * x_sum[r]                     the offsets' whole share, 8 groups at once
//       for each group of the chunk:
//         for each 32-row block of the group:
//           codes = unpack(the block's words)            one load, one shift, one mask (3 bits: two)
//           acc[v][r] += codes . x[r]                    vpdpbusd, or vpmaddubsw + vpmaddwd
//         total[v][r] += float(acc[v][r]) * factor[v][r][group]; acc = 0
//     out[v][r] = the sum of total[v][r]'s lanes
//
// The code stays in 256-bit vectors and the first 16 registers on every ISA: a block is 32 rows,
// and the unpacking, not the vector width, bounds the kernel. AVX-512 VNNI machines take the EVEX
// form of vpdpbusd (they may lack AVX-VNNI's VEX form).
#include <algorithm>
#include <cstddef>
#include <vector>

#include "base/error.hpp"
#include "jit/knob_text.hpp"
#include "jit/x86/sparse_vector_emitter.hpp"

namespace qjit::jit {

namespace {

using Xbyak::Reg64;
using Xbyak::Xmm;
using Xbyak::Ymm;
namespace regs = Xbyak::util;

constexpr int kMaxRows = 4;
constexpr int kMaxDownRows = 2;
constexpr int kMaxVectors = 4;
constexpr int kMaxDownBlocks = 2;
constexpr int kChunkGroups = 8;
constexpr int kRegisterBudget = 16;  // the VEX-encodable registers, on every ISA
constexpr int kUnrolledBlocks = 4;   // groups of up to this many blocks are unrolled

// Scratch: the codes, and one temporary (the pair sums, the 1-bit plane, a factor broadcast).
constexpr int kScratch = 2;

class SparseProductEmitter : public SparseVectorEmitter {
public:
    explicit SparseProductEmitter(const SparseProductSpec& spec)
        : SparseVectorEmitter(spec),
          rows_(spec.rows),
          x_stride_(spec.x_stride()),
          score_stride_(spec.padded_groups() * 4),
          groups_(spec.groups()),
          group_blocks_(spec.group_blocks()) {
        // Registers: scratch and constants first, then accumulators and totals.
        int next = 0;
        codes_ = Ymm(next++);
        temp_ = Ymm(next++);
        next = allocate_constants(next);
        if (!spec.isa.vnni) ones_ = Ymm(next++);
        first_accumulator_ = next;
        generate();
    }

private:
    // General registers.
    const Reg64 args_ = regs::rdi, slot_index_ = regs::r11, out_ = regs::r15;
    const Reg64 vector_[kMaxVectors] = {regs::rbx, regs::rcx, regs::rdx, regs::rsi};
    const Reg64 block_offset_ = regs::r8;   // bytes into each vector's codes
    const Reg64 x_ = regs::r9;              // the current block's activations of row 0
    const Reg64 group_offset_ = regs::r10;  // 4 * the group within its chunk
    const Reg64 block_count_ = regs::r12;
    const Reg64 x_scale_ = regs::r13, x_sum_ = regs::r14;
    const Reg64 chunk_group_ = regs::rbp;   // the chunk's first group
    const Reg64 temp_gpr_ = regs::rax;

    Ymm acc(int v, int r) const { return Ymm(first_accumulator_ + v * rows_ + r); }
    Ymm total(int v, int r) const { return Ymm(first_accumulator_ + spec_.tiling.vectors * rows_ + v * rows_ + r); }
    // The stack slot of factor[v][r][0]: 8 floats.
    int factor_offset(int v, int r) const { return (v * rows_ + r) * 32; }
    int stack_bytes() const { return spec_.tiling.vectors * rows_ * 32; }

    Xbyak::Address arg(size_t offset) const { return qword[args_ + int(offset)]; }

    void generate() {
        preamble();
        sub(regs::rsp, stack_bytes());
        load_constants();
        if (!spec_.isa.vnni) broadcast_constant(ones_, 0x00010001u);
        mov(x_scale_, arg(offsetof(SparseProductArgs, x_scale)));
        mov(x_sum_, arg(offsetof(SparseProductArgs, x_sum)));
        mov(out_, arg(offsetof(SparseProductArgs, out)));
        xor_(slot_index_, slot_index_);

        emit_passes(spec_.tiling.vectors, slot_index_, arg(offsetof(SparseProductArgs, count)),
                    [&](int vectors) { emit_pass(vectors); });
        add(regs::rsp, stack_bytes());
        postamble();
        emit_data();
        finish();
    }

    // The constant tables, after the code.
    void emit_data() {
        emit_unpack_tables();
        L(tail_mask_);
        const int tail = int(groups_ % kChunkGroups);
        for (int i = 0; i < 8; ++i) dd(i < tail ? 0xffffffffu : 0u);
        L(symmetric_zero_);
        for (int i = 0; i < 8; ++i) dd(float_bits(float(spec_.format.symmetric_zero())));
    }

    // One pass over `vectors` slots from slot_index_, which it advances with out_.
    void emit_pass(int vectors) {
        mov(temp_gpr_, arg(offsetof(SparseProductArgs, slots)));
        for (int v = 0; v < vectors; ++v) {
            movsxd(vector_[v], dword[temp_gpr_ + slot_index_ * 4 + v * 4]);
            imul(vector_[v], vector_[v], int(spec_.vector_bytes));
            add(vector_[v], arg(offsetof(SparseProductArgs, vectors)));
        }
        if (spec_.tiling.prefetch) emit_prefetch(vectors);
        for (int v = 0; v < vectors; ++v)
            for (int r = 0; r < rows_; ++r) {
                vpxor(acc(v, r), acc(v, r), acc(v, r));
                vpxor(total(v, r), total(v, r), total(v, r));
            }
        mov(x_, arg(offsetof(SparseProductArgs, x)));
        xor_(block_offset_, block_offset_);
        xor_(chunk_group_, chunk_group_);

        const int64_t full_chunks = groups_ / kChunkGroups;
        if (full_chunks > 0) {
            Xbyak::Label chunk_loop;
            L(chunk_loop);
            emit_chunk(vectors, kChunkGroups, false);
            cmp(chunk_group_, int(full_chunks * kChunkGroups));
            jl(chunk_loop, T_NEAR);
        }
        if (groups_ % kChunkGroups) emit_chunk(vectors, int(groups_ % kChunkGroups), true);
        emit_store(vectors);
        add(slot_index_, vectors);
    }

    // The vectors of the next pass's slots (those within the list), into the cache.
    void emit_prefetch(int vectors) {
        for (int v = 0; v < vectors; ++v) {
            Xbyak::Label skip;
            lea(temp_gpr_, ptr[slot_index_ + vectors + v]);
            cmp(temp_gpr_, arg(offsetof(SparseProductArgs, count)));
            jge(skip, T_NEAR);
            mov(block_count_, arg(offsetof(SparseProductArgs, slots)));
            movsxd(temp_gpr_, dword[block_count_ + temp_gpr_ * 4]);
            imul(temp_gpr_, temp_gpr_, int(spec_.vector_bytes));
            add(temp_gpr_, arg(offsetof(SparseProductArgs, vectors)));
            for (int64_t at = 0; at < spec_.vector_bytes; at += 64) prefetcht0(ptr[temp_gpr_ + int(at)]);
            L(skip);
        }
    }

    // A chunk of `count` groups from chunk_group_, which it advances by 8.
    void emit_chunk(int vectors, int count, bool tail) {
        const WeightFormat& f = spec_.format;
        const int scale_bytes = f.scale_bytes();
        const Ymm& scales = codes_;
        const Ymm& offsets = temp_;
        for (int v = 0; v < vectors; ++v) {
            load_meta(scales, vector_[v], spec_.scales_offset(), scale_bytes);
            if (f.float_offsets) {
                load_meta(offsets, vector_[v], spec_.zeros_offset(), scale_bytes);
            } else if (f.symmetric) {
                vmulps(offsets, scales, yword[regs::rip + symmetric_zero_]);
            } else {
                vpmovzxbd(offsets, qword[vector_[v] + chunk_group_ + int(spec_.zeros_offset())]);
                vcvtdq2ps(offsets, offsets);
                vmulps(offsets, offsets, scales);
            }
            // (past the last group: whatever follows the metadata, masked off before it meets x_sum's zeros)
            if (tail) vandps(offsets, offsets, yword[regs::rip + tail_mask_]);
            for (int r = 0; r < rows_; ++r) {
                // scales * x_scale would be written over its input: the factor goes through acc(v, r),
                // zero here and reset to zero below.
                vmulps(acc(v, r), scales, yword[x_scale_ + chunk_group_ * 4 + r * score_stride_]);
                vmovups(yword[regs::rsp + factor_offset(v, r)], acc(v, r));
                vpxor(acc(v, r), acc(v, r), acc(v, r));
                const Xbyak::Address sums = yword[x_sum_ + chunk_group_ * 4 + r * score_stride_];
                if (f.float_offsets) vfmadd231ps(total(v, r), offsets, sums);
                else vfnmadd231ps(total(v, r), offsets, sums);  // offsets hold s * zero
            }
        }

        Xbyak::Label group_loop;
        xor_(group_offset_, group_offset_);
        L(group_loop);
        emit_group_blocks(vectors);
        for (int v = 0; v < vectors; ++v)
            for (int r = 0; r < rows_; ++r) {
                vcvtdq2ps(acc(v, r), acc(v, r));
                vbroadcastss(temp_, dword[regs::rsp + group_offset_ + factor_offset(v, r)]);
                vfmadd231ps(total(v, r), acc(v, r), temp_);
                vpxor(acc(v, r), acc(v, r), acc(v, r));
            }
        add(group_offset_, 4);
        cmp(group_offset_, 4 * count);
        jl(group_loop, T_NEAR);
        add(chunk_group_, kChunkGroups);
    }

    // The chunk's 8 scales (or float offsets) at `offset` into a vector, as fp32.
    void load_meta(const Ymm& dst, const Reg64& vector, int64_t offset, int bytes) {
        if (bytes == 2) vcvtph2ps(dst, xword[vector + chunk_group_ * 2 + int(offset)]);
        else vmovups(dst, yword[vector + chunk_group_ * 4 + int(offset)]);
    }

    void emit_group_blocks(int vectors) {
        if (group_blocks_ <= kUnrolledBlocks) {
            for (int64_t b = 0; b < group_blocks_; ++b) emit_block(vectors);
            return;
        }
        const int unroll = group_blocks_ % 4 == 0 ? 4 : group_blocks_ % 2 == 0 ? 2 : 1;
        Xbyak::Label block_loop;
        mov(block_count_, group_blocks_ / unroll);
        L(block_loop);
        for (int u = 0; u < unroll; ++u) emit_block(vectors);
        dec(block_count_);
        jnz(block_loop, T_NEAR);
    }

    // One 32-row block of every vector of the pass, against each row's activations.
    void emit_block(int vectors) {
        for (int v = 0; v < vectors; ++v) {
            unpack_codes(codes_, temp_, vector_[v] + block_offset_);
            for (int r = 0; r < rows_; ++r) dot(acc(v, r), yword[x_ + r * int(x_stride_)]);
        }
        add(block_offset_, bits_ * 4);
        add(x_, 32);
    }

    void dot(const Ymm& accumulator, const Xbyak::Address& activations) {
        if (spec_.isa.vnni) {
            vpdpbusd(accumulator, codes_, activations, spec_.isa.avx512 ? Xbyak::EvexEncoding : Xbyak::VexEncoding);
            return;
        }
        vpmaddubsw(temp_, codes_, activations);
        vpmaddwd(temp_, temp_, ones_);
        vpaddd(accumulator, accumulator, temp_);
    }

    // out[(slot_index_ + v) * out_stride + r] = the sum of total(v, r)'s lanes.
    void emit_store(int vectors) {
        mov(temp_gpr_, arg(offsetof(SparseProductArgs, out_stride)));
        shl(temp_gpr_, 2);  // bytes
        const Xmm sum(temp_.getIdx());
        for (int v = 0; v < vectors; ++v) {
            for (int r = 0; r < rows_; ++r) {
                vextractf128(sum, total(v, r), 1);
                vaddps(sum, sum, Xmm(total(v, r).getIdx()));
                vhaddps(sum, sum, sum);
                vhaddps(sum, sum, sum);
                vmovss(dword[out_ + r * 4], sum);
            }
            add(out_, temp_gpr_);
        }
    }

    const int rows_;
    const int64_t x_stride_, score_stride_, groups_, group_blocks_;
    Ymm codes_, temp_, ones_;
    int first_accumulator_ = 0;
    Xbyak::Label tail_mask_, symmetric_zero_;
};

}  // namespace

std::unique_ptr<JitGenerator> generate_sparse_products(const SparseProductSpec& spec) {
    return std::make_unique<SparseProductEmitter>(spec);
}

int sparse_block_row(int bits, int k) {
    switch (bits) {
    case 8: return k;
    case 4: {
        const int i = k % 16, high = k / 16;  // byte i of the block, its low or high nibble
        return 8 * (i / 4) + i % 4 + 4 * high;
    }
    default: {  // 2 bits, and 3 (its 2-bit plane sets the order; the 1-bit plane follows it)
        const int p = k / 8, i = k % 8;  // qword p shifted by 2p; byte i of the block's two words
        return 16 * (i / 4) + i % 4 + 4 * p;
    }
    }
}

std::string kernel_name(const SparseProductSpec& spec) {
    TextStream name;
    if (spec.pass == SparsePass::Products)
        name << spec.format.kernel_name() << "_sparse_i8_" << spec.isa.tag() << "_v" << spec.tiling.vectors;
    else
        name << spec.format.kernel_name() << "_sparse_down_" << spec.isa.tag() << "_b" << spec.tiling.blocks;
    name << "pf" << spec.tiling.prefetch;
    if (spec.rows > 1) name << "_m" << spec.rows;
    return name.str();
}

std::string tiling_text(const SparseProductTiling& t) {
    return concat("vectors=", t.vectors, ",blocks=", t.blocks, ",prefetch=", t.prefetch);
}

SparseProductTiling parse_sparse_tiling(const std::string& text) {
    require(!text.empty(), "sparse tiling '': no knobs");
    const KnobTable<SparseProductTiling> knobs = {{"vectors", &SparseProductTiling::vectors},
                                                  {"blocks", &SparseProductTiling::blocks},
                                                  {"prefetch", &SparseProductTiling::prefetch}};
    const SparseProductTiling t = read_knobs(text, "sparse tiling", knobs, SparseProductTiling{});
    for (const int knob : {t.vectors, t.blocks, t.prefetch})
        require(knob >= 0 && knob <= 9, "sparse tiling '", text, "': every knob is one digit");
    return t;
}

std::string sparse_product_unsupported_reason(const WeightFormat& f) {
    if (!f.uniform_bits() || f.has_codebook() || f.low_rank.present() || f.outliers > 0)
        return "mixed widths, codebooks, low-rank terms and outliers are not neuron vector formats";
    if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 8)
        return concat(f.bits, "-bit codes (the kernel unpacks 2, 3, 4 and 8)");
    if (f.scale_type != ScaleType::F16 && f.scale_type != ScaleType::F32) return "scales that are not fp16 or fp32";
    if (!f.per_column() && f.group_size % 32 != 0)
        return concat("groups of ", f.group_size, " rows (a 32-row block must lie in one group)");
    return "";
}

int vector_registers_needed(const SparseProductSpec& spec) {
    const int unpacking = kScratch + SparseVectorEmitter::unpack_constant_registers(spec);
    if (spec.pass == SparsePass::Down)  // 4 sums and an offset per block and row; a widened octet, scale, factor
        return unpacking + 5 * spec.tiling.blocks * spec.rows + 2;
    return unpacking + (spec.isa.vnni ? 0 : 1) + 2 * spec.tiling.vectors * spec.rows;  // int16 ones
}

void check_spec(const SparseProductSpec& spec) {
    auto refuse = [&](const std::string& why) { fail(QJIT_ERROR_UNSUPPORTED, kernel_name(spec), ": ", why); };
    auto reject = [&](const std::string& why) { fail(QJIT_ERROR_INVALID_ARGUMENT, kernel_name(spec), ": ", why); };
    if (const std::string why = sparse_product_unsupported_reason(spec.format); !why.empty()) refuse(why);
    if (!spec.isa.avx2) refuse("the generated kernels need AVX2");
    if (spec.format.k < 1) reject(concat("d_model ", spec.format.k));
    const bool down = spec.pass == SparsePass::Down;
    const int max_rows = down ? kMaxDownRows : kMaxRows;
    if (spec.rows < 1 || spec.rows > max_rows) reject(concat("rows ", spec.rows, " outside 1 .. ", max_rows));
    const SparseProductTiling& t = spec.tiling;
    if (t.vectors < 1 || t.vectors > (down ? 1 : kMaxVectors))
        reject(concat("vectors ", t.vectors, " outside 1 .. ", down ? 1 : kMaxVectors));
    if (t.blocks < 1 || t.blocks > (down ? kMaxDownBlocks : 1))
        reject(concat("blocks ", t.blocks, " outside 1 .. ", down ? kMaxDownBlocks : 1));
    if (t.prefetch != 0 && t.prefetch != 1) reject(concat("prefetch ", t.prefetch, " is neither 0 nor 1"));
    if (vector_registers_needed(spec) > kRegisterBudget)
        reject(concat("needs ", vector_registers_needed(spec), " vector registers; 16 are used"));
    const int64_t metadata_end = spec.zeros_offset() + spec.groups() * spec.format.zero_point_bytes();
    if (spec.vector_bytes != metadata_end)
        reject(concat("a vector of ", spec.vector_bytes, " bytes; the format takes ", metadata_end));
    // What the kernel reads past a vector: the last group's padding blocks, a chunk's metadata.
    const int64_t codes_end = spec.groups() * spec.group_blocks() * spec.format.bits * 4;
    const int64_t scales_end = spec.scales_offset() + spec.padded_groups() * spec.format.scale_bytes();
    const int64_t zeros_end = spec.zeros_offset() + spec.padded_groups() * std::max(1, spec.format.zero_point_bytes());
    const int64_t overread = std::max({codes_end, scales_end, zeros_end}) - spec.vector_bytes;
    if (overread > kSparseVectorPadding)
        refuse(concat("reads ", overread, " bytes past a vector (padding blocks of its last group); ",
                      kSparseVectorPadding, " are allowed"));
    if (spec.x_stride() > (int64_t(1) << 28)) refuse("vectors longer than 2^28 rows");
}

std::unique_ptr<JitGenerator> generate_sparse_kernel(const SparseProductSpec& spec) {
    check_spec(spec);
    return spec.pass == SparsePass::Products ? generate_sparse_products(spec) : generate_sparse_down(spec);
}

}  // namespace qjit::jit
