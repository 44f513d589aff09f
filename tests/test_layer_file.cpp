// Saved layers load back identical; corrupt, truncated or foreign files are reported, never
// trusted; a failed save leaves the file it would have replaced intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <set>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "runtime/layer_file.hpp"
#include "format/low_rank.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "child_process.hpp"
#include "layer_internals.hpp"
#include "test_support.hpp"
#include "quant/quantize_low_rank.hpp"

namespace qjit {
namespace {

using test::ContextPtr;
using test::LinearPtr;

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& contents) {
    std::ofstream(path, std::ios::binary) << contents;
}

class LayerFileTest : public ::testing::Test {
protected:
    void SetUp() override {
        directory_ = std::filesystem::temp_directory_path() /
                     ("qjit_layer_file_" + std::to_string(getpid()) + "_" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(directory_);
        context_ = test::make_test_context();
    }
    void TearDown() override { std::filesystem::remove_all(directory_); }

    // A small layer; with act_order its rows are stored in a shuffled order.
    std::unique_ptr<qjit_linear> make_layer(int bits, int64_t k, int64_t n, bool act_order) {
        const std::vector<float> weights = test::random_floats(size_t(k * n), uint32_t(bits * 7 + k));
        QuantizedMatrix matrix =
            quantize_rtn({.bits = bits, .group_size = 32, .scale_type = ScaleType::F16}, k, n, weights.data());
        if (act_order) {
            for (int64_t r = 0; r < k; ++r) matrix.params.row_order.push_back(int32_t((r * 7 + 3) % k));
            matrix.params.act_order = true;
        }
        return make_linear(context_.get(), std::move(matrix));
    }
    std::string path(const std::string& name) const { return (directory_ / name).string(); }

    std::filesystem::path directory_;
    ContextPtr context_;
};

TEST_F(LayerFileTest, RoundTripIsExactForEveryBitWidth) {
    for (const int bits : {2, 3, 4, 8}) {
        const auto layer = make_layer(bits, 100, 9, bits == 3);
        ASSERT_EQ(qjit_linear_save(layer.get(), path("layer.qjit").c_str()), QJIT_OK) << qjit_last_error();
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_load(context_.get(), path("layer.qjit").c_str(), &raw), QJIT_OK) << qjit_last_error();
        LinearPtr loaded(raw);
        EXPECT_EQ(loaded->cpu->codes().words, layer->cpu->codes().words);
        const QuantParams saved_params = layer_params(*layer), loaded_params = layer_params(*loaded);
        EXPECT_EQ(loaded_params.scales, saved_params.scales);
        EXPECT_EQ(loaded_params.zeros, saved_params.zeros);
        EXPECT_EQ(loaded->params.row_order, layer->params.row_order);
        EXPECT_EQ(loaded->params.scale_type, layer->params.scale_type);
        EXPECT_EQ(loaded->description, layer->description);
        const std::vector<float> x = test::random_floats(3 * 100, 5);
        std::vector<float> y_saved(3 * 9), y_loaded(3 * 9);
        ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), 3, y_saved.data()), QJIT_OK);
        ASSERT_EQ(qjit_linear_forward(loaded.get(), x.data(), 3, y_loaded.data()), QJIT_OK);
        EXPECT_EQ(y_saved, y_loaded);
    }
}

// A file saved by one kernel family loads into another: the codes are repacked for the panel width
// the loading context's kernel wants, and the layer computes the same matrix.
TEST_F(LayerFileTest, LoadsIntoAContextWithAnotherKernel) {
    const auto layer = make_layer(4, 300, 70, true);
    ASSERT_EQ(qjit_linear_save(layer.get(), path("layer.qjit").c_str()), QJIT_OK) << qjit_last_error();
    ContextPtr portable = test::make_test_context(2, QJIT_ISA_PORTABLE);
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_load(portable.get(), path("layer.qjit").c_str(), &raw), QJIT_OK) << qjit_last_error();
    LinearPtr loaded(raw);
    EXPECT_FALSE(test::jit_of(*loaded));
    const QuantizedMatrix saved = unpack_linear(*layer), restored = unpack_linear(*loaded);
    EXPECT_EQ(restored.codes, saved.codes);
    EXPECT_EQ(restored.params.row_order, saved.params.row_order);
    std::vector<float> w_saved(300 * 70), w_loaded(300 * 70);
    ASSERT_EQ(qjit_linear_dequantize(layer.get(), w_saved.data()), QJIT_OK);
    ASSERT_EQ(qjit_linear_dequantize(loaded.get(), w_loaded.data()), QJIT_OK);
    EXPECT_EQ(w_saved, w_loaded);
}

TEST_F(LayerFileTest, EveryTruncationIsReportedAsCorrupt) {
    const auto layer = make_layer(3, 40, 3, true);
    const std::string image = serialize_layer(*layer);
    for (size_t length = 0; length < image.size(); ++length) {
        try {
            deserialize_layer(image.substr(0, length));
            ADD_FAILURE() << "a file truncated to " << length << " of " << image.size() << " bytes was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << "length " << length << ": " << e.what();
        }
    }
}

TEST_F(LayerFileTest, EveryFlippedByteIsReported) {
    const auto layer = make_layer(4, 40, 3, false);
    const std::string image = serialize_layer(*layer);
    for (size_t at = 0; at < image.size(); ++at) {
        std::string damaged = image;
        damaged[at] = char(damaged[at] ^ 0x5a);
        try {
            deserialize_layer(damaged);
            ADD_FAILURE() << "a file with byte " << at << " flipped was accepted";
        } catch (const Error& e) {
            // The version field is checked before the checksum, so a flip there says "unsupported".
            EXPECT_TRUE(e.status() == QJIT_ERROR_CORRUPT_DATA || e.status() == QJIT_ERROR_UNSUPPORTED)
                << "byte " << at << ": " << e.what();
        }
    }
}

TEST_F(LayerFileTest, CorruptFileThroughTheCApi) {
    const auto layer = make_layer(4, 64, 5, false);
    ASSERT_EQ(qjit_linear_save(layer.get(), path("good.qjit").c_str()), QJIT_OK);
    std::string image = read_file(path("good.qjit"));
    image[image.size() / 2] ^= 1;
    write_file(path("bad.qjit"), image);
    write_file(path("short.qjit"), image.substr(0, 30));
    write_file(path("foreign.qjit"), "GGUF this is some other format entirely");
    qjit_linear* raw = nullptr;
    EXPECT_EQ(qjit_linear_load(context_.get(), path("bad.qjit").c_str(), &raw), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_NE(std::string(qjit_last_error()).find("checksum"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_linear_load(context_.get(), path("short.qjit").c_str(), &raw), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_EQ(qjit_linear_load(context_.get(), path("foreign.qjit").c_str(), &raw), QJIT_ERROR_CORRUPT_DATA);
    EXPECT_NE(std::string(qjit_last_error()).find("magic"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(raw, nullptr);
}

// The image with its JSON header edited by `edit`, the header length and the checksum fixed up,
// so that only the edit can make the loader refuse it.
std::string with_edited_header(const std::string& image, const std::function<void(std::string&)>& edit) {
    constexpr size_t kLengthAt = 12, kHeaderAt = 16;  // magic, version, header length, header
    uint32_t length = 0;
    std::memcpy(&length, image.data() + kLengthAt, 4);
    std::string header = image.substr(kHeaderAt, length);
    edit(header);
    const uint32_t new_length = uint32_t(header.size());
    std::string edited = image.substr(0, kLengthAt) + std::string(reinterpret_cast<const char*>(&new_length), 4) +
                         header + image.substr(kHeaderAt + length, image.size() - 4 - kHeaderAt - length);
    const uint32_t crc = crc32(edited.data(), edited.size());
    return edited + std::string(reinterpret_cast<const char*>(&crc), 4);
}

// A layer with a low-rank compensator: U and V^T are saved beside the codes (file version 2).
std::unique_ptr<qjit_linear> make_compensated_layer(qjit_context* context, int factor_bits, bool act_order) {
    const int64_t k = 96, n = 20;
    const int rank = 5;
    const std::vector<float> w = test::random_floats(size_t(k * n), 1);
    QuantizedMatrix matrix = quantize_rtn({.bits = 3, .group_size = 32, .scale_type = ScaleType::F16}, k, n, w.data());
    if (act_order) {
        for (int64_t r = 0; r < k; ++r) matrix.params.row_order.push_back(int32_t((r * 5 + 1) % k));
        matrix.params.act_order = true;
    }
    const std::vector<float> u = test::random_floats(size_t(k * rank), 2), v = test::random_floats(size_t(rank * n), 3);
    return make_linear(context, std::move(matrix), quantize_low_rank(factor_bits, k, n, rank, u.data(), v.data()));
}

uint32_t version_of(const std::string& image) {
    uint32_t version = 0;
    std::memcpy(&version, image.data() + 8, 4);
    return version;
}

TEST_F(LayerFileTest, CompensatedRoundTripIsExact) {
    EXPECT_EQ(version_of(serialize_layer(*make_layer(4, 64, 5, false))), kPlainLayerFileVersion);
    for (const int factor_bits : {8, 3, 16}) {
        SCOPED_TRACE(factor_bits);
        const auto layer = make_compensated_layer(context_.get(), factor_bits, factor_bits == 3);
        EXPECT_EQ(version_of(serialize_layer(*layer)), kCompensatedLayerFileVersion);
        ASSERT_EQ(qjit_linear_save(layer.get(), path("layer.qjit").c_str()), QJIT_OK) << qjit_last_error();
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_load(context_.get(), path("layer.qjit").c_str(), &raw), QJIT_OK) << qjit_last_error();
        LinearPtr loaded(raw);
        const LowRankFactors saved = unpack_low_rank(*layer), restored = unpack_low_rank(*loaded);
        ASSERT_EQ(restored.rank, 5);
        EXPECT_EQ(restored.bits, factor_bits);
        EXPECT_EQ(dense_u(restored), dense_u(saved));
        EXPECT_EQ(dense_v(restored), dense_v(saved));
        EXPECT_EQ(loaded->description, layer->description);
        const std::vector<float> x = test::random_floats(3 * 96, 5);
        std::vector<float> y_saved(3 * 20), y_loaded(3 * 20);
        ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), 3, y_saved.data()), QJIT_OK);
        ASSERT_EQ(qjit_linear_forward(loaded.get(), x.data(), 3, y_loaded.data()), QJIT_OK);
        EXPECT_EQ(y_saved, y_loaded);
    }
}

TEST_F(LayerFileTest, DamagedCompensatorsAreReportedAsCorrupt) {
    for (const int factor_bits : {8, 16}) {
        const std::string image = serialize_layer(*make_compensated_layer(context_.get(), factor_bits, false));
        for (size_t length = 0; length < image.size(); length += 7) {
            try {
                deserialize_layer(image.substr(0, length));
                ADD_FAILURE() << "a file truncated to " << length << " of " << image.size() << " bytes was accepted";
            } catch (const Error& e) {
                EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << "length " << length << ": " << e.what();
            }
        }
        // Headers that disagree with the sections, each written with a valid checksum.
        const auto expect_corrupt = [&](const std::function<void(std::string&)>& edit, const char* word) {
            try {
                deserialize_layer(with_edited_header(image, edit));
                ADD_FAILURE() << "an edited header naming '" << word << "' was accepted";
            } catch (const Error& e) {
                EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << e.what();
                EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
            }
        };
        auto replace = [](std::string from, std::string to) {
            return [from, to](std::string& header) {
                const size_t at = header.find(from);
                ASSERT_NE(at, std::string::npos) << header;
                header.replace(at, from.size(), to);
            };
        };
        expect_corrupt(replace("\"low_rank\"", "\"low_rang\""), "low_rank");
        expect_corrupt(replace("\"rank\":5", "\"rank\":6"), "rank");
        expect_corrupt(replace(concat("\"low_rank\":{\"bits\":", factor_bits, ","), "\"low_rank\":{\"bits\":4,"),
                       "bits");
    }
}

TEST_F(LayerFileTest, HeaderNumbersWrittenAsFloatsAreRefused) {
    const auto layer = make_layer(4, 64, 5, false);
    const std::string image = serialize_layer(*layer);
    EXPECT_NO_THROW(deserialize_layer(with_edited_header(image, [](std::string&) {})));  // the fix-up alone is fine
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"\"k\":64", "\"k\":4.9e54"}, {"\"group_size\":32", "\"group_size\":1e300"},
             {"\"n\":5", "\"n\":5.0"}, {"\"bits\":4", "\"bits\":-4"}, {"\"bits\":4", "\"bits\":1"}, {"\"codes_u32\":", "\"codes_u32\":1e30,\"x\":"}}) {
        SCOPED_TRACE(to);
        const std::string edited = with_edited_header(image, [&, &from = from, &to = to](std::string& header) {
            const size_t at = header.find(from);
            ASSERT_NE(at, std::string::npos) << header;
            header.replace(at, from.size(), to);
        });
        try {
            deserialize_layer(edited);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << e.what();
            EXPECT_NE(std::string(e.what()).find("header field"), std::string::npos) << e.what();
        }
    }
}

// A directory or a device is not a layer file: an I/O error, and nothing is read (loading
// /dev/zero used to read until memory ran out).
TEST_F(LayerFileTest, DirectoriesAndDevicesAreIoErrors) {
    qjit_linear* raw = nullptr;
    EXPECT_STATUS(qjit_linear_load(context_.get(), directory_.c_str(), &raw), QJIT_ERROR_IO, "not a regular file");
    EXPECT_STATUS(qjit_linear_load(context_.get(), "/dev/zero", &raw), QJIT_ERROR_IO, "not a regular file");
    EXPECT_EQ(raw, nullptr);
}

TEST_F(LayerFileTest, FailedSaveKeepsTheExistingFile) {
    const auto original = make_layer(4, 64, 5, false);
    ASSERT_EQ(qjit_linear_save(original.get(), path("layer.qjit").c_str()), QJIT_OK);
    const std::string before = read_file(path("layer.qjit"));
    const auto bigger = make_layer(8, 4096, 64, false);

    // A child process whose file-size limit makes the write fail half way.
    const pid_t child = test::spawn([&] {
        signal(SIGXFSZ, SIG_IGN);
        const rlimit limit{4096, 4096};
        setrlimit(RLIMIT_FSIZE, &limit);
        return qjit_linear_save(bigger.get(), path("layer.qjit").c_str()) == QJIT_ERROR_IO ? 0 : 1;
    });
    ASSERT_GE(child, 0);
    EXPECT_EQ(test::wait_status(child), 0) << "the save should fail with QJIT_ERROR_IO";
    EXPECT_EQ(read_file(path("layer.qjit")), before);
    int files = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(directory_)) ++files;
    EXPECT_EQ(files, 1) << "the temporary file was left behind";
}

// Saving into a folder this process may not write: an I/O error naming the file, and the file
// already there is kept; loading from the folder still works.
TEST_F(LayerFileTest, ReadOnlyFolderKeepsTheExistingFile) {
    const auto original = make_layer(4, 64, 5, false);
    ASSERT_EQ(qjit_linear_save(original.get(), path("layer.qjit").c_str()), QJIT_OK);
    const std::string before = read_file(path("layer.qjit"));
    const auto other = make_layer(3, 96, 7, false);
    ::chmod(directory_.c_str(), 0555);
    const int status = test::run_unprivileged([&] {
        if (qjit_linear_save(other.get(), path("layer.qjit").c_str()) != QJIT_ERROR_IO) return 2;
        if (std::string(qjit_last_error()).find(path("layer.qjit")) == std::string::npos) return 3;
        qjit_linear* loaded = nullptr;
        if (qjit_linear_load(context_.get(), path("layer.qjit").c_str(), &loaded) != QJIT_OK) return 4;
        qjit_linear_destroy(loaded);
        return 0;
    });
    ::chmod(directory_.c_str(), 0755);
    if (status == test::kCannotDropRoot) GTEST_SKIP() << "cannot run a child without root's rights";
    EXPECT_EQ(status, 0) << "2: the save did not fail with QJIT_ERROR_IO, 3: the message does not name the file, "
                            "4: loading failed";
    EXPECT_EQ(read_file(path("layer.qjit")), before);
    EXPECT_EQ(test::files_starting(directory_, "").size(), 1u);
}

// ---- Version 3: mixed 2/4-bit groups, second-order scales, sparse outliers ----

// What a hand-built layer of version 3 carries (test::mixed_matrix may come to do the same for
// other suites; this one is the layer file's own).
struct Features {
    bool mixed = false;         // groups 1, 3, ... at 2 bits, the others at 4
    bool second_order = false;  // scales quantized again to 4-bit codes
    int64_t outliers = 0;       // sparse fp16 outliers
    bool act_order = false;
    int compensator_bits = 0;   // 0: none; else a rank-3 compensator at 8, 3 or 16 bits
};

constexpr int64_t kFeatureK = 128, kFeatureN = 40;  // 4 groups of 32 rows; 3 second-order column groups

// A 4-bit RTN matrix (groups of 32) given the features by hand: codes of 2-bit groups masked to 2
// bits and their zeros clamped, second-order scales from quantize_second_order with the scales
// replaced by what they give (zeros kept below 16), outliers spread over rows and columns.
QuantizedMatrix feature_matrix(const Features& f, int64_t k = kFeatureK, int64_t n = kFeatureN) {
    const std::vector<float> w = test::random_floats(size_t(k * n), 11);
    QuantizedMatrix m = quantize_rtn({.bits = 4, .group_size = 32, .scale_type = ScaleType::F16}, k, n, w.data());
    QuantParams& p = m.params;
    const int64_t groups = p.num_groups();
    if (f.mixed) {
        p.group_bits.resize(size_t(groups));
        for (int64_t g = 0; g < groups; ++g) p.group_bits[size_t(g)] = g % 2 == 1 ? 2 : 4;
        for (int64_t r = 0; r < k; ++r) {
            const int width = p.group_width(r / p.group_size);
            for (int64_t c = 0; c < n; ++c) m.codes[size_t(r * n + c)] &= uint8_t((1 << width) - 1);
        }
        for (int64_t g = 0; g < groups; ++g)
            for (int64_t c = 0; c < n; ++c) {
                uint16_t& z = p.zeros[size_t(g * n + c)];
                z = std::min<uint16_t>(z, uint16_t((1 << p.group_width(g)) - 1));
            }
    }
    if (f.second_order) {
        p.scale_type = ScaleType::SecondOrder;
        p.second_order = quantize_second_order(groups, n, p.scales);
        p.scales = dequantize_second_order(p.second_order, groups, n);
        for (uint16_t& z : p.zeros) z = std::min<uint16_t>(z, 15);
    }
    if (f.outliers > 0) {
        std::vector<OutlierEntry> entries;
        for (int64_t i = 0; i < f.outliers; ++i)
            entries.push_back({int32_t((i * 37 + 5) % k), int32_t((i * 7 + i / 3) % n), float(i % 2 ? 3.5 : -2.25) + float(i)});
        p.outliers_data = make_sparse_outliers(k, n, std::move(entries));
        p.outliers = f.outliers;
    }
    if (f.act_order) {
        for (int64_t r = 0; r < k; ++r) p.row_order.push_back(int32_t((r * 5 + 3) % k));
        p.act_order = true;
    }
    validate(m);
    return m;
}

std::unique_ptr<qjit_linear> make_feature_layer(qjit_context* context, const Features& f) {
    QuantizedMatrix m = feature_matrix(f);
    if (f.compensator_bits == 0) return make_linear(context, std::move(m));
    const int rank = 3;
    const std::vector<float> u = test::random_floats(size_t(kFeatureK * rank), 12),
                             v = test::random_floats(size_t(rank * kFeatureN), 13);
    return make_linear(context, std::move(m),
                       quantize_low_rank(f.compensator_bits, kFeatureK, kFeatureN, rank, u.data(), v.data()));
}

std::string feature_text(const Features& f) {
    return concat(f.mixed ? "mixed " : "", f.second_order ? "second-order " : "", f.outliers, " outliers",
                  f.act_order ? " act-order" : "", f.compensator_bits ? concat(" compensator q", f.compensator_bits) : "");
}

// The layer files of version 3 are made and read on the portable path, which runs every format.
class FeatureLayerFileTest : public LayerFileTest {
protected:
    void SetUp() override {
        LayerFileTest::SetUp();
        portable_ = test::make_test_context(2, QJIT_ISA_PORTABLE);
    }
    ContextPtr portable_;
};

const std::vector<Features> kFeatureCases = {
    {true, true, 12, false, 0},  {true, true, 12, true, 0},  {true, false, 0, false, 0}, {false, true, 0, true, 0},
    {false, false, 9, false, 0}, {true, true, 12, true, 8},  {true, false, 5, false, 16}, {false, true, 0, false, 3},
};

TEST_F(FeatureLayerFileTest, RoundTripIsExact) {
    for (const Features& f : kFeatureCases) {
        SCOPED_TRACE(feature_text(f));
        const auto layer = make_feature_layer(portable_.get(), f);
        const std::string image = serialize_layer(*layer);
        EXPECT_EQ(version_of(image), kMixedLayerFileVersion);
        ASSERT_EQ(qjit_linear_save(layer.get(), path("layer.qjit").c_str()), QJIT_OK) << qjit_last_error();
        qjit_linear* raw = nullptr;
        ASSERT_EQ(qjit_linear_load(portable_.get(), path("layer.qjit").c_str(), &raw), QJIT_OK) << qjit_last_error();
        LinearPtr loaded(raw);
        const QuantParams &saved = layer->params, &restored = loaded->params;
        EXPECT_EQ(restored.format(), saved.format());
        EXPECT_EQ(restored.group_bits, saved.group_bits);
        EXPECT_EQ(restored.scale_type, saved.scale_type);
        EXPECT_EQ(restored.second_order, saved.second_order);
        EXPECT_EQ(restored.scales, saved.scales);
        EXPECT_EQ(restored.zeros, saved.zeros);
        EXPECT_EQ(restored.row_order, saved.row_order);
        EXPECT_EQ(restored.outliers, f.outliers);
        EXPECT_EQ(restored.outliers_data, saved.outliers_data);
        EXPECT_EQ(loaded->cpu->codes().block_bits, layer->cpu->codes().block_bits);
        EXPECT_EQ(loaded->cpu->codes().block_starts, layer->cpu->codes().block_starts);
        EXPECT_EQ(loaded->cpu->codes().words, layer->cpu->codes().words);
        EXPECT_EQ(unpack_linear(*loaded).codes, unpack_linear(*layer).codes);
        EXPECT_EQ(loaded->description, layer->description);
        const LowRankFactors saved_lr = unpack_low_rank(*layer), restored_lr = unpack_low_rank(*loaded);
        EXPECT_EQ(restored_lr.rank, f.compensator_bits ? 3 : 0);
        if (f.compensator_bits) {
            EXPECT_EQ(restored_lr.bits, f.compensator_bits);
            EXPECT_EQ(dense_u(restored_lr), dense_u(saved_lr));
            EXPECT_EQ(dense_v(restored_lr), dense_v(saved_lr));
        }
        EXPECT_EQ(serialize_layer(*loaded), image);  // the same bytes again

        std::vector<float> w_saved(size_t(kFeatureK * kFeatureN)), w_loaded(w_saved.size());
        ASSERT_EQ(qjit_linear_dequantize(layer.get(), w_saved.data()), QJIT_OK) << qjit_last_error();
        ASSERT_EQ(qjit_linear_dequantize(loaded.get(), w_loaded.data()), QJIT_OK) << qjit_last_error();
        EXPECT_EQ(w_saved, w_loaded);
        const std::vector<float> x = test::random_floats(size_t(3 * kFeatureK), 5);
        std::vector<float> y_saved(3 * kFeatureN), y_loaded(3 * kFeatureN);
        ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), 3, y_saved.data()), QJIT_OK) << qjit_last_error();
        ASSERT_EQ(qjit_linear_forward(loaded.get(), x.data(), 3, y_loaded.data()), QJIT_OK) << qjit_last_error();
        EXPECT_EQ(y_saved, y_loaded);
    }
}

// A file whose mixed-width codes are packed in panels of another width (8 columns here; a JIT
// kernel's) loads into the portable path: its blocks are repacked at their widths.
TEST_F(FeatureLayerFileTest, LoadsCodesPackedInOtherPanels) {
    const Features f{true, true, 12, true, 0};
    const QuantizedMatrix m = feature_matrix(f);
    const PackedCodes narrow = pack_codes(m.codes.data(), m.params.bits, kFeatureK, kFeatureN, 8, block_widths(m.params));
    write_file(path("narrow.qjit"), serialize_layer(m.params, narrow, {}));
    qjit_linear* raw = nullptr;
    ASSERT_EQ(qjit_linear_load(portable_.get(), path("narrow.qjit").c_str(), &raw), QJIT_OK) << qjit_last_error();
    LinearPtr loaded(raw);
    EXPECT_NE(loaded->cpu->codes().panel_columns, 8);
    EXPECT_EQ(loaded->cpu->codes().block_bits, block_widths(m.params));
    const QuantizedMatrix restored = unpack_linear(*loaded);
    EXPECT_EQ(restored.codes, m.codes);
    EXPECT_EQ(restored.params.second_order, m.params.second_order);
    EXPECT_EQ(restored.params.outliers_data, m.params.outliers_data);
    const auto direct = make_linear(portable_.get(), m);
    std::vector<float> w_direct(size_t(kFeatureK * kFeatureN)), w_loaded(w_direct.size());
    ASSERT_EQ(qjit_linear_dequantize(direct.get(), w_direct.data()), QJIT_OK) << qjit_last_error();
    ASSERT_EQ(qjit_linear_dequantize(loaded.get(), w_loaded.data()), QJIT_OK) << qjit_last_error();
    EXPECT_EQ(w_loaded, w_direct);
}

// Version 1 for a plain layer, 2 with a compensator only, 3 as soon as one of the new features is there.
TEST_F(FeatureLayerFileTest, VersionFollowsTheFeatures) {
    EXPECT_EQ(version_of(serialize_layer(*make_feature_layer(portable_.get(), {}))), kPlainLayerFileVersion);
    EXPECT_EQ(version_of(serialize_layer(*make_feature_layer(portable_.get(), {false, false, 0, true, 0}))),
              kPlainLayerFileVersion);
    EXPECT_EQ(version_of(serialize_layer(*make_feature_layer(portable_.get(), {false, false, 0, false, 8}))),
              kCompensatedLayerFileVersion);
    EXPECT_EQ(version_of(serialize_layer(*make_compensated_layer(portable_.get(), 16, true))),
              kCompensatedLayerFileVersion);
    for (const Features& f : kFeatureCases) {
        SCOPED_TRACE(feature_text(f));
        EXPECT_EQ(version_of(serialize_layer(*make_feature_layer(portable_.get(), f))), kMixedLayerFileVersion);
    }
}

// The image with its bytes [at, at + bytes.size()) replaced and the checksum fixed up: only the
// replaced bytes can make the loader refuse it.
std::string with_bytes(const std::string& image, size_t at, const std::string& bytes) {
    std::string edited = image.substr(0, image.size() - 4);
    edited.replace(at, bytes.size(), bytes);
    const uint32_t crc = crc32(edited.data(), edited.size());
    return edited + std::string(reinterpret_cast<const char*>(&crc), 4);
}

template <typename T>
std::string bytes_of(T value) {
    return std::string(reinterpret_cast<const char*>(&value), sizeof value);
}

// Where each section of a layer's image starts, in the order the file stores them.
std::map<std::string, size_t> section_offsets(const std::string& image, const qjit_linear& layer) {
    uint32_t header = 0;
    std::memcpy(&header, image.data() + 12, 4);
    const QuantParams& p = layer.params;
    const std::vector<std::pair<std::string, size_t>> sizes = {
        {"codes", layer.cpu->codes().words.size() * 4},
        {"scales", p.second_order_scales() ? 0 : p.scales.size() * 4},
        {"zeros", p.zeros.size() * 2},
        {"row_order", p.row_order.size() * 4},
        {"group_bits", p.group_bits.size()},
        {"scale2_codes", p.second_order.codes.size()},
        {"scale2_scales", p.second_order.scales.size() * 2},
        {"scale2_zeros", p.second_order.zeros.size() * 2},
        {"outlier_starts", p.outliers_data.column_start.size() * 8},
        {"outlier_rows", p.outliers_data.rows.size() * 4},
        {"outlier_values", p.outliers_data.values.size() * 2},
        {"compensator", 0}};
    std::map<std::string, size_t> offsets;
    size_t at = 16 + header;
    for (const auto& [name, bytes] : sizes) {
        offsets[name] = at;
        at += bytes;
    }
    return offsets;
}

void expect_corrupt(const std::string& image, const std::string& word, const std::string& what) {
    SCOPED_TRACE(what);
    try {
        deserialize_layer(image);
        ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << e.what();
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "message does not name '" << word
                                                                       << "': " << e.what();
    }
}

std::function<void(std::string&)> replace_text(std::string from, std::string to) {
    return [from, to](std::string& header) {
        const size_t at = header.find(from);
        ASSERT_NE(at, std::string::npos) << from << " in " << header;
        header.replace(at, from.size(), to);
    };
}

// Float offsets (version 5): saved and loaded exactly at either scale type, on any kernel; a
// damaged offsets section is refused. The offsets are the file's last section, before the checksum.
TEST_F(FeatureLayerFileTest, FloatOffsetsRoundTripAndDamageIsReported) {
    ContextPtr jit = test::make_test_context();
    const int64_t k = 160, n = 37;
    const std::vector<float> weights = test::random_floats(size_t(k * n), 21, 0.5f, 2.0f);  // away from 0
    for (const ScaleType scale_type : {ScaleType::F16, ScaleType::F32}) {
        SCOPED_TRACE(scale_type_name(scale_type));
        const WeightFormat format{.bits = 4, .group_size = 32, .float_offsets = true, .scale_type = scale_type};
        const QuantizedMatrix m = quantize_rtn(format, k, n, weights.data());
        for (qjit_context* context : {portable_.get(), jit.get()}) {
            const auto layer = make_linear(context, m);
            const std::string image = serialize_layer(*layer);
            EXPECT_EQ(version_of(image), kOffsetLayerFileVersion);
            const LayerImage loaded = deserialize_layer(image);
            EXPECT_TRUE(loaded.params.float_offsets);
            EXPECT_EQ(loaded.params.offsets, m.params.offsets);
            EXPECT_EQ(loaded.params.scales, m.params.scales);
            ASSERT_EQ(qjit_linear_save(layer.get(), path("offsets.qjit").c_str()), QJIT_OK) << qjit_last_error();
            qjit_linear* raw = nullptr;
            ASSERT_EQ(qjit_linear_load(context, path("offsets.qjit").c_str(), &raw), QJIT_OK) << qjit_last_error();
            LinearPtr restored(raw);
            std::vector<float> w(size_t(k * n));
            ASSERT_EQ(qjit_linear_dequantize(restored.get(), w.data()), QJIT_OK) << qjit_last_error();
            EXPECT_EQ(w, dequantize(m));
            const std::vector<float> x = test::random_floats(size_t(2 * k), 22);
            std::vector<float> y_saved(size_t(2 * n)), y_loaded(y_saved.size());
            ASSERT_EQ(qjit_linear_forward(layer.get(), x.data(), 2, y_saved.data()), QJIT_OK) << qjit_last_error();
            ASSERT_EQ(qjit_linear_forward(restored.get(), x.data(), 2, y_loaded.data()), QJIT_OK) << qjit_last_error();
            EXPECT_EQ(y_loaded, y_saved);

            const size_t offsets_at = image.size() - 4 - m.params.offsets.size() * 4;
            expect_corrupt(with_bytes(image, offsets_at, bytes_of(std::numeric_limits<float>::quiet_NaN())), "offset",
                           "a NaN offset");
            if (scale_type == ScaleType::F16)
                expect_corrupt(with_bytes(image, offsets_at, bytes_of(0.1f)), "fp16", "an offset fp16 cannot hold");
            expect_corrupt(with_edited_header(image, replace_text("\"float_offsets\":true", "\"float_offsets\":1")),
                           "float_offsets", "a float_offsets field that is not a bool");
        }
    }
}

TEST_F(FeatureLayerFileTest, TruncationsAndFlippedBytesAreReportedAsCorrupt) {
    for (const Features& f : {Features{true, true, 12, true, 8}, Features{true, false, 7, false, 0}}) {
        SCOPED_TRACE(feature_text(f));
        const auto layer = make_feature_layer(portable_.get(), f);
        const std::string image = serialize_layer(*layer);
        for (size_t length = 0; length < image.size(); length += 5) {
            try {
                deserialize_layer(image.substr(0, length));
                ADD_FAILURE() << "a file truncated to " << length << " of " << image.size() << " bytes was accepted";
            } catch (const Error& e) {
                EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << "length " << length << ": " << e.what();
            }
        }
        // Every byte of the new sections, flipped: the checksum says so.
        const auto offsets = section_offsets(image, *layer);
        for (size_t at = offsets.at("group_bits"); at < offsets.at("compensator"); ++at) {
            std::string damaged = image;
            damaged[at] = char(damaged[at] ^ 0x21);
            expect_corrupt(damaged, "checksum", concat("byte ", at, " flipped"));
        }
    }
}

// Damage a checksum cannot see (the checksum fixed up after it): each new section's contents and
// each new header field, reported as corrupt with a message that names what is wrong.
TEST_F(FeatureLayerFileTest, DamagedFeatureSectionsAreReportedAsCorrupt) {
    const Features all{true, true, 12, true, 8};
    const auto layer = make_feature_layer(portable_.get(), all);
    const QuantParams& p = layer->params;
    const std::string image = serialize_layer(*layer);
    EXPECT_NO_THROW(deserialize_layer(with_bytes(image, 0, image.substr(0, 8))));  // the fix-up alone is fine
    const auto at = section_offsets(image, *layer);

    // Group widths: not 2 or 4; none 4 wide (bits says 4); a 2-bit group made 4-bit (the codes
    // section is then too short for the widths).
    expect_corrupt(with_bytes(image, at.at("group_bits"), "\x03"), "width", "a 3-bit group");
    expect_corrupt(with_bytes(image, at.at("group_bits"), std::string(p.group_bits.size(), '\x02')), "bits",
                   "no 4-bit group");
    expect_corrupt(with_bytes(image, at.at("group_bits") + 1, "\x04"), "codes section", "a 2-bit group made 4-bit");
    // Second-order scales: a code of 16, an infinite scale, a NaN zero.
    expect_corrupt(with_bytes(image, at.at("scale2_codes") + 5, "\x10"), "second-order scale code", "code 16");
    expect_corrupt(with_bytes(image, at.at("scale2_scales") + 2, bytes_of(uint16_t(0x7c00))), "not finite",
                   "an infinite second-order scale");
    expect_corrupt(with_bytes(image, at.at("scale2_zeros"), bytes_of(uint16_t(0x7e00))), "not finite",
                   "a NaN second-order zero");
    // Outliers: column starts that do not start at 0, decrease, or end elsewhere; a row outside K;
    // rows out of order; a value that is not finite.
    const SparseOutliers& o = p.outliers_data;
    expect_corrupt(with_bytes(image, at.at("outlier_starts"), bytes_of(int64_t(1))), "column starts",
                   "starts from 1");
    size_t column = 0;  // the first column with two outliers or more
    while (o.column_start[column + 1] - o.column_start[column] < 2) ++column;
    expect_corrupt(with_bytes(image, at.at("outlier_starts") + 8 * (column + 1), bytes_of(int64_t(o.count() + 1))),
                   "column starts", "a start past the count");
    expect_corrupt(with_bytes(image, at.at("outlier_starts") + 8 * (column + 1), bytes_of(int64_t(-1))),
                   "column starts", "a negative start");
    expect_corrupt(with_bytes(image, at.at("outlier_starts") + 8 * size_t(p.n), bytes_of(int64_t(o.count() - 1))),
                   "column starts", "a last start short of the count");
    const size_t first = size_t(o.column_start[column]);
    expect_corrupt(with_bytes(image, at.at("outlier_rows") + 4 * first, bytes_of(int32_t(p.k))), "row",
                   "a row outside K");
    expect_corrupt(with_bytes(image, at.at("outlier_rows") + 4 * first, bytes_of(int32_t(-3))), "row",
                   "a negative row");
    expect_corrupt(with_bytes(image, at.at("outlier_rows") + 4 * first, bytes_of(o.rows[first + 1])), "ascending",
                   "rows given twice");
    expect_corrupt(with_bytes(image, at.at("outlier_values") + 2 * first, bytes_of(uint16_t(0xfc00))), "not finite",
                   "an infinite outlier");

    // Header fields of version 3, edited.
    const auto header_corrupt = [&](const std::function<void(std::string&)>& edit, const std::string& word,
                                    const std::string& what) { expect_corrupt(with_edited_header(image, edit), word, what); };
    header_corrupt(replace_text("\"mixed_bits\":true", "\"mixed_bits\":false"), "group_bits_u8",
                   "group widths of a uniform layer");
    header_corrupt(replace_text("\"mixed_bits\":true", "\"mixed_bits\":1"), "mixed_bits", "mixed_bits a number");
    header_corrupt(replace_text("\"mixed_bits\"", "\"mixed_bitz\""), "mixed_bits", "mixed_bits missing");
    header_corrupt(replace_text("\"outliers\":12", "\"outliers\":13"), "outlier", "one outlier more");
    header_corrupt(replace_text("\"outliers\":12", "\"outliers\":0"), "outlier", "no outliers");
    header_corrupt(replace_text("\"outliers\":12", "\"outliers\":1e3"), "header field", "outliers a float");
    header_corrupt(replace_text("\"outliers\"", "\"outlierz\""), "outliers", "outliers missing");
    header_corrupt(replace_text("\"scale_dtype\":\"second_order\"", "\"scale_dtype\":\"f16\""), "scales_f32",
                   "second-order sections under fp16 scales");
    header_corrupt(replace_text("\"scale_dtype\":\"second_order\"", "\"scale_dtype\":\"sq4\""), "scale_dtype",
                   "an unknown scale type");
    header_corrupt(replace_text("\"group_bits_u8\":4", "\"group_bits_u8\":5"), "group_bits_u8",
                   "five group widths for four groups");
    header_corrupt(replace_text("\"scale2_codes_u8\":160", "\"scale2_codes_u8\":159"), "scale2_codes_u8",
                   "too few second-order codes");
    header_corrupt(replace_text("\"scale2_scales_f16\"", "\"scale2_scales_f15\""), "scale2_scales_f16",
                   "second-order scales missing");
    header_corrupt(replace_text("\"outlier_starts_i64\":41", "\"outlier_starts_i64\":40"), "outlier_starts_i64",
                   "N column starts");
    header_corrupt(replace_text("\"outlier_values_f16\":12", "\"outlier_values_f16\":11"), "outlier_values_f16",
                   "a value short");
    header_corrupt(replace_text("\"sections\":{", "\"sections\":{\"extra_u8\":0,"), "extra_u8", "an extra section");
    header_corrupt(replace_text("\"layout\"", "\"extra\":1,\"layout\""), "extra", "an extra header field");
    header_corrupt(replace_text("\"low_rank\"", "\"low_rang\""), "low_rang", "the compensator misnamed");

    // The version field: an older version with these features, and a newer one.
    for (const uint32_t older : {kPlainLayerFileVersion, kCompensatedLayerFileVersion})
        expect_corrupt(with_bytes(image, 8, bytes_of(older)), concat("version ", older), concat("version ", older));
    try {
        deserialize_layer(with_bytes(image, 8, bytes_of(uint32_t(kLayerFileVersion + 1))));
        ADD_FAILURE() << "a newer version was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_UNSUPPORTED) << e.what();
    }
}

// A version 3 or 4 header must name at least one of its version's features, and an older one none.
TEST_F(FeatureLayerFileTest, VersionAndFeaturesMustAgree) {
    const auto plain = make_feature_layer(portable_.get(), {});
    const std::string image = serialize_layer(*plain);
    const std::string as_v3 = with_bytes(with_edited_header(image, replace_text("\"layout\"", "\"mixed_bits\":false,\"outliers\":0,\"layout\"")),
                                         8, bytes_of(kMixedLayerFileVersion));
    expect_corrupt(as_v3, "without mixed_bits", "a version 3 file without its features");
    const std::string as_v4 = with_bytes(
        with_edited_header(image, replace_text("\"layout\"", "\"mixed_bits\":false,\"outliers\":0,\"permuted_columns\":false,\"layout\"")),
        8, bytes_of(kPermutedLayerFileVersion));
    expect_corrupt(as_v4, "without permuted_columns", "a version 4 file without its feature");
    const std::string as_v5 = with_bytes(
        with_edited_header(image, replace_text("\"layout\"", "\"mixed_bits\":false,\"outliers\":0,\"permuted_columns\":false,"
                                                             "\"layout\"")),
        8, bytes_of(kLayerFileVersion));
    expect_corrupt(as_v5, "float_offsets", "a version 5 file without its feature");
    expect_corrupt(with_edited_header(image, replace_text("\"layout\"", "\"float_offsets\":true,\"layout\"")),
                   "float_offsets", "a version 1 file naming float offsets");
    expect_corrupt(with_edited_header(image, replace_text("\"layout\"", "\"permuted_columns\":true,\"layout\"")),
                   "permuted_columns", "a version 1 file naming permuted columns");
    expect_corrupt(with_edited_header(image, replace_text("\"layout\"", "\"outliers\":0,\"layout\"")), "outliers",
                   "a version 1 file naming outliers");
    expect_corrupt(with_edited_header(image, replace_text("\"scale_dtype\":\"f16\"", "\"scale_dtype\":\"second_order\"")),
                   "second_order", "a version 1 file with second-order scales");
    expect_corrupt(with_edited_header(image, replace_text("\"scale_dtype\":\"f16\"", "\"scale_dtype\":\"bf16\"")),
                   "scale_dtype", "a version 1 file with an unknown scale type");
    expect_corrupt(with_edited_header(image, replace_text("\"sections\":{", "\"sections\":{\"group_bits_u8\":0,")),
                   "group_bits_u8", "a version 1 file with a section of version 3");
}

// The fuzz corpus's layer files (versions 1 to 3, as earlier qjit wrote them) load, and the
// layers they hold are written back byte for byte, in the panels they were saved in.
TEST_F(FeatureLayerFileTest, CorpusFilesAreWrittenBackByteForByte) {
    const std::filesystem::path corpus = std::filesystem::path(QJIT_SOURCE_DIR) / "tests/fuzz/seeds/fuzz_layer_file";
    std::set<uint32_t> versions;
    for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
        SCOPED_TRACE(entry.path().filename().string());
        const std::string image = read_file(entry.path().string());
        const LayerImage loaded = deserialize_layer(image);
        // The header names the qjit that wrote it: the file's own, for the comparison.
        const std::string key = "\"qjit_version\":\"";
        const size_t at = image.find(key) + key.size();
        const std::string written = with_edited_header(
            serialize_layer(loaded.params, loaded.codes, loaded.compensator),
            replace_text(concat(key, qjit_version(), "\""),
                                                 concat(key, image.substr(at, image.find('"', at) - at), "\"")));
        EXPECT_EQ(written, image);
        versions.insert(version_of(image));
    }
    EXPECT_EQ(versions, (std::set<uint32_t>{kPlainLayerFileVersion, kCompensatedLayerFileVersion, kMixedLayerFileVersion,
                                             kLayerFileVersion}));
}

// Writes the fuzz corpus's version 3 seeds: layer6 (mixed widths, second-order scales, outliers,
// act-order) and layer7 (the same without act-order, with an 8-bit compensator), small layers in
// panels of 8 columns; the checksummed target's copies lack the CRC its fuzzer appends.
//   QJIT_FUZZ_SEED_DIR=tests/fuzz/seeds qjit_tests --gtest_also_run_disabled_tests --gtest_filter='*WritesFuzzSeeds'
TEST_F(FeatureLayerFileTest, DISABLED_WritesFuzzSeeds) {
    const char* dir = std::getenv("QJIT_FUZZ_SEED_DIR");
    if (!dir) GTEST_SKIP() << "set QJIT_FUZZ_SEED_DIR to the corpus folder";
    const int64_t k = 64, n = 10;
    for (const auto& [name, f] : {std::pair<const char*, Features>{"layer6", {true, true, 3, true, 0}},
                                  {"layer7", {true, true, 3, false, 8}}}) {
        const QuantizedMatrix m = feature_matrix(f, k, n);
        const PackedCodes codes = pack_codes(m.codes.data(), m.params.bits, k, n, 8, block_widths(m.params));
        LowRankFactors compensator;
        if (f.compensator_bits) {
            const std::vector<float> u = test::random_floats(size_t(k * 2), 12), v = test::random_floats(size_t(2 * n), 13);
            compensator = quantize_low_rank(8, k, n, 2, u.data(), v.data());
        }
        const std::string image = serialize_layer(m.params, codes, compensator);
        ASSERT_EQ(version_of(image), kMixedLayerFileVersion);
        EXPECT_EQ(deserialize_layer(image).params.format(), m.params.format());
        write_file(concat(dir, "/fuzz_layer_file/", name), image);
        write_file(concat(dir, "/fuzz_layer_file_checksummed/", name), image.substr(0, image.size() - 4));
    }
}

}  // namespace
}  // namespace qjit
