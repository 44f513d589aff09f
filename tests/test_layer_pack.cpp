// Pack files (qjit.h's qjit_pack_*; runtime/layer_pack.hpp, io/pack_file.hpp): layers read back
// from a pack compute what the layers written to it computed, bit for bit, whether mapped (panels)
// or rebuilt (layer images); a pack from another source or for other kernels is stale; a damaged,
// truncated or foreign file is reported and never trusted; a pack being written leaves the old one
// whole until it commits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "layer_internals.hpp"
#include "quant/quantize_rtn.hpp"
#include "runtime/linear_layer.hpp"
#include "test_support.hpp"
#include "tools/random_gguf.hpp"
#include "tools/random_gptq.hpp"

namespace qjit {
namespace {

using test::ContextPtr;
using test::LinearPtr;
using test::PackPtr;
using WriterPtr = test::PackWriterPtr;

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// One layer of each kind a model meets: the formats of GGUF's Q4_0, Q4_1 and Q8_0 blocks, layers
// imported from Q4_K, Q6_K and Q5_0 blocks (super-block scales, 5- and 6-bit codes), other widths
// and groups, fp32 scales, odd shapes (K and N off every multiple), and one whose rows are stored
// in act-order, which the panels do not hold (a layer image).
struct Case {
    const char* name;
    WeightFormat format;  // quantized to by RTN, unless imported from `gguf` blocks
    int64_t k, n;
    bool act_order = false;
    qjit_ggml_type gguf = QJIT_GGML_TYPE_MAX_ENUM;
};

std::vector<Case> cases() {
    return {
        {"q4_0", {.bits = 4, .group_size = 32, .symmetric = true, .scale_type = ScaleType::F16}, 256, 80},
        {"q4_1", {.bits = 4, .group_size = 32, .float_offsets = true, .scale_type = ScaleType::F16}, 96, 37},
        {"q8_0", {.bits = 8, .group_size = 32, .symmetric = true, .scale_type = ScaleType::F16}, 100, 19},
        {"q3g64", {.bits = 3, .group_size = 64, .scale_type = ScaleType::F16}, 130, 45},
        {"q2g128_f32", {.bits = 2, .group_size = 128, .scale_type = ScaleType::F32}, 300, 33},
        {"q4_act", {.bits = 4, .group_size = 32, .scale_type = ScaleType::F16}, 64, 24, true},
        {"q4_k", {}, 512, 40, false, QJIT_GGML_Q4_K},
        {"q6_k", {}, 256, 21, false, QJIT_GGML_Q6_K},
        {"q5_0", {}, 96, 9, false, QJIT_GGML_Q5_0},
    };
}

class LayerPackTest : public ::testing::Test {
protected:
    void SetUp() override {
        directory_ = std::filesystem::temp_directory_path() /
                     ("qjit_layer_pack_" + std::to_string(getpid()) + "_" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(directory_);
        context_ = test::make_test_context();
        for (const Case& c : cases()) layers_.push_back(make_layer(context_.get(), c));
    }
    void TearDown() override { std::filesystem::remove_all(directory_); }

    static LinearPtr make_layer(qjit_context* context, const Case& c) {
        if (c.gguf != QJIT_GGML_TYPE_MAX_ENUM) {
            qjit_tools::Rng rng(uint64_t(c.k * 31 + c.n));
            const std::vector<uint8_t> bytes = qjit_tools::random_gguf_tensor(
                c.gguf, c.k, c.n, 5, [&] { return qjit_tools::benchmark_half(rng.next()); });
            qjit_linear* raw = nullptr;
            EXPECT_EQ(qjit_linear_create_from_gguf(context, c.gguf, bytes.data(), bytes.size(), c.k, c.n, &raw), QJIT_OK)
                << qjit_last_error();
            return LinearPtr(raw);
        }
        const std::vector<float> weights = test::random_floats(size_t(c.k * c.n), uint32_t(c.k * 31 + c.n));
        QuantizedMatrix matrix = quantize_rtn(c.format, c.k, c.n, weights.data());
        if (c.act_order) {
            for (int64_t r = 0; r < c.k; ++r) matrix.params.row_order.push_back(int32_t((r * 7 + 3) % c.k));
            matrix.params.act_order = true;
        }
        return LinearPtr(make_linear(context, std::move(matrix)).release());
    }

    std::string path(const std::string& name = "model.qjitpack") const { return (directory_ / name).string(); }

    void write_pack(const std::string& file, const char* source = "model A") {
        qjit_pack_writer* raw = nullptr;
        ASSERT_EQ(qjit_pack_writer_create(file.c_str(), source, &raw), QJIT_OK) << qjit_last_error();
        WriterPtr writer(raw);
        for (size_t i = 0; i < layers_.size(); ++i)
            ASSERT_EQ(qjit_pack_writer_add(writer.get(), cases()[i].name, layers_[i].get()), QJIT_OK) << qjit_last_error();
        ASSERT_EQ(qjit_pack_writer_commit(writer.get()), QJIT_OK) << qjit_last_error();
    }

    qjit_status open(qjit_context* context, const std::string& file, const char* source, PackPtr& pack) {
        qjit_pack* raw = nullptr;
        const qjit_status status = qjit_pack_open(context, file.c_str(), source, &raw);
        pack.reset(raw);
        return status;
    }

    std::filesystem::path directory_;
    ContextPtr context_;
    std::vector<LinearPtr> layers_;
};

std::vector<float> forward(qjit_linear* layer, const std::vector<float>& x, int64_t m, int64_t n) {
    std::vector<float> y(size_t(m * n));
    EXPECT_EQ(qjit_linear_forward(layer, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    return y;
}

TEST_F(LayerPackTest, LayersReadBackComputeTheSameOutputsBitForBit) {
    write_pack(path());
    PackPtr pack;
    ASSERT_EQ(open(context_.get(), path(), "model A", pack), QJIT_OK) << qjit_last_error();
    int64_t count = 0;
    ASSERT_EQ(qjit_pack_entries(pack.get(), &count), QJIT_OK);
    const std::vector<Case> all = cases();
    ASSERT_EQ(count, int64_t(all.size()));
    for (size_t i = 0; i < all.size(); ++i) {
        const Case& c = all[i];
        SCOPED_TRACE(c.name);
        const char* name = nullptr;
        ASSERT_EQ(qjit_pack_entry_name(pack.get(), int64_t(i), &name), QJIT_OK);
        EXPECT_STREQ(name, c.name);
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_create_from_pack(pack.get(), c.name, &raw), QJIT_OK) << qjit_last_error();
        LinearPtr loaded(raw);
        qjit_linear_tuning tuning;
        ASSERT_EQ(qjit_linear_get_tuning(loaded.get(), &tuning), QJIT_OK);
        const bool mapped = layers_[i]->metadata_in_kernels && !c.act_order;
        EXPECT_EQ(tuning.source == QJIT_TILING_PACK, mapped);
        if (mapped) {
            EXPECT_TRUE(loaded->cpu->codes().words.borrowed());
            EXPECT_EQ(std::string(tuning.tiling), layers_[i]->tuning.tiling);
            EXPECT_EQ(std::string(tuning.kernel_key), layers_[i]->tuning.kernel_key);
        }
        // The logical matrix is the same, and so is every output, at batch 1 and above the tiling's rows.
        const QuantizedMatrix written = unpack_linear(*layers_[i]), read = unpack_linear(*loaded);
        EXPECT_EQ(read.codes, written.codes);
        EXPECT_EQ(read.params.scales, written.params.scales);
        EXPECT_EQ(read.params.zeros, written.params.zeros);
        EXPECT_EQ(read.params.offsets, written.params.offsets);
        for (const int64_t m : {1, 3, 17}) {
            const std::vector<float> x = test::random_floats(size_t(m * c.k), uint32_t(m));
            EXPECT_EQ(forward(loaded.get(), x, m, c.n), forward(layers_[i].get(), x, m, c.n)) << "m=" << m;
        }
    }
}

TEST_F(LayerPackTest, MappedLayersOutliveThePackHandle) {
    write_pack(path());
    PackPtr pack;
    ASSERT_EQ(open(context_.get(), path(), "model A", pack), QJIT_OK) << qjit_last_error();
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_create_from_pack(pack.get(), "q4_0", &raw), QJIT_OK) << qjit_last_error();
    LinearPtr loaded(raw);
    pack.reset();
    std::filesystem::remove(path());  // the mapping keeps the file's pages
    const std::vector<float> x = test::random_floats(256 * 2, 4);
    EXPECT_EQ(forward(loaded.get(), x, 2, 80), forward(layers_[0].get(), x, 2, 80));
}

TEST_F(LayerPackTest, AnotherSourceOrOtherKernelsAreStale) {
    write_pack(path());
    PackPtr pack;
    EXPECT_EQ(open(context_.get(), path(), "model B", pack), QJIT_ERROR_STALE);
    EXPECT_NE(std::string(qjit_last_error()).find("model A"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(pack, nullptr);
    // The portable path makes no kernels; the f32 activation path makes another family.
    const ContextPtr portable = test::make_test_context(2, QJIT_ISA_PORTABLE);
    EXPECT_EQ(open(portable.get(), path(), "model A", pack), QJIT_ERROR_STALE) << qjit_last_error();
    const ContextPtr f32 = test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    EXPECT_EQ(open(f32.get(), path(), "model A", pack), QJIT_ERROR_STALE) << qjit_last_error();
    EXPECT_NE(std::string(qjit_last_error()).find("activation path"), std::string::npos);
}

TEST_F(LayerPackTest, DamagedTruncatedAndForeignFilesAreCorrupt) {
    write_pack(path());
    const std::string image = read_bytes(path());
    PackPtr pack;
    // A byte flipped anywhere: in the sections (their checksums), the table or the trailer. (The
    // zero padding that aligns the sections is not read; the middle one is the first data byte
    // from the middle of the file on.)
    const size_t middle = image.find_first_not_of('\0', image.size() / 2);
    ASSERT_NE(middle, std::string::npos);
    for (const size_t at : {size_t(4096 + 5), middle, image.size() - 100, image.size() - 3}) {
        std::string damaged = image;
        damaged[at] = char(damaged[at] ^ 0x10);
        write_bytes(path("damaged"), damaged);
        EXPECT_EQ(open(context_.get(), path("damaged"), "model A", pack), QJIT_ERROR_CORRUPT_DATA) << "byte " << at;
        EXPECT_NE(std::string(qjit_last_error()).find("damaged"), std::string::npos) << qjit_last_error();
    }
    for (const size_t length : {size_t(0), size_t(10), size_t(4096), image.size() - 1}) {
        write_bytes(path("short"), image.substr(0, length));
        EXPECT_EQ(open(context_.get(), path("short"), "model A", pack), QJIT_ERROR_CORRUPT_DATA) << length;
    }
    write_bytes(path("foreign"), std::string(image.size(), 'x'));
    EXPECT_EQ(open(context_.get(), path("foreign"), "model A", pack), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_EQ(open(context_.get(), path("missing"), "model A", pack), QJIT_ERROR_IO);
}

TEST_F(LayerPackTest, AnUncommittedWriterLeavesTheOldPackWhole) {
    write_pack(path(), "old");
    const std::string before = read_bytes(path());
    {
        qjit_pack_writer* raw = nullptr;
        ASSERT_EQ(qjit_pack_writer_create(path().c_str(), "new", &raw), QJIT_OK);
        WriterPtr writer(raw);
        ASSERT_EQ(qjit_pack_writer_add(writer.get(), "q4_0", layers_[0].get()), QJIT_OK);
    }
    EXPECT_EQ(read_bytes(path()), before);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(directory_), {}), 1) << "a temporary file was left";
}

TEST_F(LayerPackTest, BadCallsAreRefusedWithAMessage) {
    qjit_pack_writer* raw = nullptr;
    ASSERT_EQ(qjit_pack_writer_create(path().c_str(), "model A", &raw), QJIT_OK);
    WriterPtr writer(raw);
    ASSERT_EQ(qjit_pack_writer_add(writer.get(), "same", layers_[0].get()), QJIT_OK);
    EXPECT_EQ(qjit_pack_writer_add(writer.get(), "same", layers_[1].get()), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_pack_writer_add(writer.get(), nullptr, layers_[1].get()), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_pack_writer_add(writer.get(), "other", nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    ASSERT_EQ(qjit_pack_writer_commit(writer.get()), QJIT_OK);
    EXPECT_EQ(qjit_pack_writer_commit(writer.get()), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_pack_writer_add(writer.get(), "late", layers_[1].get()), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_pack_writer_create("/nonexistent-directory/x.qjitpack", "s", &raw), QJIT_ERROR_IO);

    PackPtr pack;
    ASSERT_EQ(open(context_.get(), path(), "model A", pack), QJIT_OK) << qjit_last_error();
    qjit_linear* layer = nullptr;
    EXPECT_EQ(qjit_linear_create_from_pack(pack.get(), "absent", &layer), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("absent"), std::string::npos);
    EXPECT_EQ(layer, nullptr);
    const char* name = nullptr;
    EXPECT_EQ(qjit_pack_entry_name(pack.get(), 1, &name), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(open(nullptr, path(), "model A", pack), QJIT_ERROR_INVALID_ARGUMENT);
}

// Writes the fuzz corpus's seeds (tests/fuzz/fuzz_pack_file.cpp) without the CRC its fuzzer appends:
// packs made on an AVX2-capped context, the fuzzer's, with a panels entry of each zero-point kind,
// an act-order layer's image, and the layers of GGUF blocks (super-block scales, 5- and 6-bit codes).
//   QJIT_FUZZ_SEED_DIR=tests/fuzz/seeds qjit_tests --gtest_also_run_disabled_tests --gtest_filter='*WritesPackFuzzSeeds'
TEST_F(LayerPackTest, DISABLED_WritesPackFuzzSeeds) {
    const char* dir = std::getenv("QJIT_FUZZ_SEED_DIR");
    if (!dir) GTEST_SKIP() << "set QJIT_FUZZ_SEED_DIR to the corpus folder";
    const ContextPtr avx2 = test::make_test_context(1, QJIT_ISA_AVX2);
    const std::vector<Case> all = cases();
    using Entries = std::pair<size_t, size_t>;  // [first, end) of cases()
    for (const auto& [seed, entries] : {std::pair<const char*, Entries>{"one-panels-entry", {0, 1}},
                                        {"panels-and-image", {0, 6}}, {"gguf-blocks", {6, 9}}}) {
        const std::string file = path(seed);
        qjit_pack_writer* raw = nullptr;
        ASSERT_EQ(qjit_pack_writer_create(file.c_str(), "seed", &raw), QJIT_OK) << qjit_last_error();
        WriterPtr writer(raw);
        for (size_t i = entries.first; i < entries.second; ++i) {
            const LinearPtr layer = make_layer(avx2.get(), all[i]);
            ASSERT_EQ(qjit_pack_writer_add(writer.get(), all[i].name, layer.get()), QJIT_OK) << qjit_last_error();
        }
        ASSERT_EQ(qjit_pack_writer_commit(writer.get()), QJIT_OK) << qjit_last_error();
        const std::string image = read_bytes(file);
        write_bytes(std::string(dir) + "/fuzz_pack_file/" + seed, image.substr(0, image.size() - 4));
    }
}

}  // namespace
}  // namespace qjit
