// Saved layers load back identical; corrupt, truncated or foreign files are reported, never
// trusted; a failed save leaves the file it would have replaced intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "runtime/layer_file.hpp"
#include "format/low_rank.hpp"
#include "format/quantize_rtn.hpp"
#include "child_process.hpp"
#include "test_support.hpp"

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
        QuantizedMatrix matrix = quantize_rtn({bits, 32, false, QJIT_DTYPE_F16}, k, n, weights.data());
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
        EXPECT_EQ(loaded->codes.words, layer->codes.words);
        EXPECT_EQ(loaded->params.scales, layer->params.scales);
        EXPECT_EQ(loaded->params.zeros, layer->params.zeros);
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
    EXPECT_FALSE(loaded->jit);
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
    QuantizedMatrix matrix = quantize_rtn({3, 32, false, QJIT_DTYPE_F16}, k, n, w.data());
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
        EXPECT_EQ(version_of(serialize_layer(*layer)), kLayerFileVersion);
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
        const std::string edited = with_edited_header(image, [&](std::string& header) {
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

}  // namespace
}  // namespace qjit
