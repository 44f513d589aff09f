// Tests of GPTQ checkpoint directories: checkpoints written by the project's writer (v1 and v2,
// config.json or quantize_config.json, one file or shards) load through the C API to exactly the
// layers the same tensors make in memory; every malformed case is refused with a named error; a
// checkpoint tuned into a database is created from it later.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qjit/qjit.h"
#include "base/error.hpp"
#include "base/half.hpp"
#include "test_support.hpp"
#include "tools/checkpoint_writer.hpp"
#include "tools/random_gptq.hpp"

namespace {

namespace fs = std::filesystem;
using qjit::test::ContextPtr;
using qjit::test::LinearPtr;

struct CheckpointDeleter {
    void operator()(qjit_checkpoint* c) const { qjit_checkpoint_close(c); }
};
using CheckpointPtr = std::unique_ptr<qjit_checkpoint, CheckpointDeleter>;

// What a layer is made of, kept alive for the writer and for the in-memory comparison.
struct LayerSource {
    std::string name;
    int64_t k = 0, n = 0;
    qjit_tools::GptqTensors gptq;
    std::vector<uint16_t> bf16_scales;
    std::vector<float> f32_scales;
    std::vector<int32_t> g_idx;
    qjit_gptq_tensors v2() const {
        qjit_gptq_tensors t = gptq.view;
        if (!bf16_scales.empty()) t.scales = bf16_scales.data(), t.scale_dtype = QJIT_DTYPE_BF16;
        if (!f32_scales.empty()) t.scales = f32_scales.data(), t.scale_dtype = QJIT_DTYPE_F32;
        t.g_idx = g_idx.empty() ? nullptr : g_idx.data();
        return t;
    }
};

struct LayerSpec {
    std::string name;
    int64_t k, n;
    bool act_order;
};

class CheckpointTest : public ::testing::Test {
protected:
    void SetUp() override {
        char pattern[] = "/tmp/qjit_checkpoint_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        dir_ = pattern;
        context_ = qjit::test::make_test_context();
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Random layers of one width and group size; scales in `scale_dtype`; act-order layers get a
    // shuffled g_idx, the others none.
    void make_layers(const std::vector<LayerSpec>& specs, int bits, int group, qjit_dtype scale_dtype, bool sym = false) {
        std::mt19937 rng(uint32_t(bits * 131 + group));
        for (const LayerSpec& spec : specs) {
            LayerSource& layer = sources_.emplace_back();
            layer.name = spec.name;
            layer.k = spec.k;
            layer.n = spec.n;
            qjit_tools::random_gptq(spec.k, spec.n, bits, group, rng(), &layer.gptq, sym);
            const uint16_t* f16 = layer.gptq.scales.data();
            for (size_t i = 0; i < layer.gptq.scales.size(); ++i) {
                const float scale = qjit::half_to_float(f16[i]);
                if (scale_dtype == QJIT_DTYPE_BF16) layer.bf16_scales.push_back(qjit::float_to_bf16(scale));
                if (scale_dtype == QJIT_DTYPE_F32) layer.f32_scales.push_back(scale);
            }
            if (spec.act_order) {
                const int64_t rows_per_group = group == QJIT_GROUP_PER_COLUMN ? spec.k : group;
                for (int64_t row = 0; row < spec.k; ++row) layer.g_idx.push_back(int32_t(row / rows_per_group));
                std::shuffle(layer.g_idx.begin(), layer.g_idx.end(), rng);
            }
        }
    }

    void write(const qjit_tools::CheckpointOptions& options) {
        std::vector<qjit_tools::CheckpointLayerTensors> layers;
        for (const LayerSource& source : sources_) layers.push_back({source.name, source.k, source.n, source.v2()});
        qjit_tools::write_gptq_checkpoint(dir_.string(), layers, options);
    }

    CheckpointPtr open(qjit_status expected = QJIT_OK) {
        qjit_checkpoint* checkpoint = nullptr;
        EXPECT_EQ(qjit_checkpoint_open(context_.get(), dir_.c_str(), &checkpoint), expected) << qjit_last_error();
        return CheckpointPtr(checkpoint);
    }

    fs::path dir_;
    ContextPtr context_;
    std::deque<LayerSource> sources_;  // a deque: the writer's views point into its elements
};

std::vector<float> dequantized(qjit_linear* layer, int64_t k, int64_t n) {
    std::vector<float> w(size_t(k * n));
    EXPECT_EQ(qjit_linear_dequantize(layer, w.data()), QJIT_OK) << qjit_last_error();
    return w;
}

std::vector<float> forward(qjit_linear* layer, const std::vector<float>& x, int64_t m, int64_t n) {
    std::vector<float> y(size_t(m * n));
    EXPECT_EQ(qjit_linear_forward(layer, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    return y;
}

std::string expected_format(int bits, int group, qjit_dtype scale_dtype, bool act_order, bool sym) {
    return qjit::concat("q", bits, group == QJIT_GROUP_PER_COLUMN ? std::string("col") : qjit::concat("g", group),
                        sym ? "_sym" : "_asym", scale_dtype == QJIT_DTYPE_F16 ? "" : "_s32", act_order ? "_act" : "");
}

// Names in a deliberately unsorted order; the checkpoint lists them naturally sorted. K is a
// multiple of 32 where there is no g_idx (as GPTQ tools require); with one, K is any size.
const std::vector<LayerSpec> kSpecs = {{"model.layers.10.mlp.down_proj", 160, 37, false},
                                       {"model.layers.2.self_attn.q_proj", 200, 64, true},
                                       {"model.layers.2.mlp.up_proj", 96, 1, false}};
const std::vector<std::string> kNaturalOrder = {"model.layers.2.mlp.up_proj", "model.layers.2.self_attn.q_proj",
                                                "model.layers.10.mlp.down_proj"};

TEST_F(CheckpointTest, LayersMatchTheSameTensorsImportedInMemory) {
    int variant = 0;
    for (int bits : {2, 3, 4, 8})
        for (int group : {32, QJIT_GROUP_PER_COLUMN})
            for (qjit_gptq_format format : {QJIT_GPTQ_V1, QJIT_GPTQ_V2}) {
                const qjit_dtype scale_dtype = std::array{QJIT_DTYPE_F16, QJIT_DTYPE_BF16, QJIT_DTYPE_F32}[variant % 3];
                qjit_tools::CheckpointOptions options;
                options.format = format;
                options.quantize_config_json = variant % 2 == 1;
                options.shards = variant % 4 < 2 ? 1 : 2;
                ++variant;
                SCOPED_TRACE(qjit::concat("bits ", bits, " group ", group, format == QJIT_GPTQ_V1 ? " v1" : " v2",
                                          " scales ", int(scale_dtype), " shards ", options.shards,
                                          options.quantize_config_json ? " quantize_config.json" : " config.json"));
                fs::remove_all(dir_);
                fs::create_directories(dir_);
                sources_.clear();
                make_layers(kSpecs, bits, group, scale_dtype);
                write(options);

                CheckpointPtr checkpoint = open();
                ASSERT_TRUE(checkpoint);
                int64_t count = 0;
                ASSERT_EQ(qjit_checkpoint_num_layers(checkpoint.get(), &count), QJIT_OK);
                ASSERT_EQ(count, 3);
                for (int64_t i = 0; i < count; ++i) {
                    qjit_checkpoint_layer info{};
                    ASSERT_EQ(qjit_checkpoint_get_layer(checkpoint.get(), i, &info), QJIT_OK) << qjit_last_error();
                    EXPECT_EQ(info.name, kNaturalOrder[size_t(i)]);
                    const LayerSource& source = *std::find_if(sources_.begin(), sources_.end(),
                                                              [&](const LayerSource& s) { return s.name == info.name; });
                    const bool act_order = !source.g_idx.empty() && group != QJIT_GROUP_PER_COLUMN;  // one group: trivial
                    EXPECT_EQ(info.k, source.k);
                    EXPECT_EQ(info.n, source.n);
                    EXPECT_EQ(info.bits, bits);
                    EXPECT_EQ(info.group_size, group);
                    EXPECT_EQ(info.act_order, act_order);
                    EXPECT_EQ(info.checkpoint_format, format);
                    EXPECT_EQ(info.scale_dtype, scale_dtype);
                    EXPECT_EQ(std::string(info.format), expected_format(bits, group, scale_dtype, act_order, false));

                    qjit_linear* from_checkpoint = nullptr;
                    ASSERT_EQ(qjit_checkpoint_create_layer(checkpoint.get(), info.name, &from_checkpoint), QJIT_OK)
                        << qjit_last_error();
                    LinearPtr loaded(from_checkpoint);
                    qjit_linear* from_memory = nullptr;
                    const qjit_gptq_tensors tensors = source.v2();
                    ASSERT_EQ(qjit_linear_create_from_gptq(context_.get(), source.k, source.n, &tensors, &from_memory),
                              QJIT_OK) << qjit_last_error();
                    LinearPtr reference(from_memory);
                    EXPECT_EQ(dequantized(loaded.get(), source.k, source.n),
                              dequantized(reference.get(), source.k, source.n));
                    const std::vector<float> x = qjit::test::random_floats(size_t(3 * source.k), 17);
                    EXPECT_EQ(forward(loaded.get(), x, 3, source.n), forward(reference.get(), x, 3, source.n));
                }
            }
}

TEST_F(CheckpointTest, LayersStayValidAfterTheCheckpointCloses) {
    make_layers(kSpecs, 4, 32, QJIT_DTYPE_F16);
    write({});
    CheckpointPtr checkpoint = open();
    qjit_linear* layer = nullptr;
    ASSERT_EQ(qjit_checkpoint_create_layer(checkpoint.get(), "model.layers.2.mlp.up_proj", &layer), QJIT_OK);
    LinearPtr owned(layer);
    checkpoint.reset();
    fs::remove_all(dir_);  // the layer owns its packed weights: nothing points into the files
    const std::vector<float> x = qjit::test::random_floats(96, 3);
    EXPECT_EQ(forward(layer, x, 1, 1).size(), 1u);
}

TEST_F(CheckpointTest, SymmetricConfigsAreHeldToTheirZeroPoints) {
    make_layers({kSpecs[0]}, 4, 32, QJIT_DTYPE_F16, /*sym=*/true);
    qjit_tools::CheckpointOptions options;
    options.sym = true;
    options.format = QJIT_GPTQ_V1;
    write(options);
    {
        CheckpointPtr checkpoint = open();
        qjit_checkpoint_layer info{};
        ASSERT_EQ(qjit_checkpoint_get_layer(checkpoint.get(), 0, &info), QJIT_OK);
        EXPECT_EQ(std::string(info.format), "q4g32_sym");
        qjit_linear* layer = nullptr;
        ASSERT_EQ(qjit_checkpoint_create_layer(checkpoint.get(), info.name, &layer), QJIT_OK) << qjit_last_error();
        qjit_linear_info layer_info{};
        ASSERT_EQ(qjit_linear_get_info(layer, &layer_info), QJIT_OK);
        EXPECT_TRUE(layer_info.symmetric);
        qjit_linear_destroy(layer);
    }
    sources_.clear();
    make_layers({kSpecs[0]}, 4, 32, QJIT_DTYPE_F16, /*sym=*/false);
    write(options);
    CheckpointPtr checkpoint = open();
    qjit_linear* layer = nullptr;
    EXPECT_STATUS(qjit_checkpoint_create_layer(checkpoint.get(), kSpecs[0].name.c_str(), &layer),
                  QJIT_ERROR_CORRUPT_DATA, "sym");
    EXPECT_EQ(layer, nullptr);
}

// One context and one checkpoint, layers created from several threads at once (the header
// promises it): each thread's layers equal the ones made one at a time.
TEST_F(CheckpointTest, LayersCanBeCreatedFromSeveralThreadsAtOnce) {
    make_layers(kSpecs, 4, 32, QJIT_DTYPE_F16);
    write({});
    CheckpointPtr checkpoint = open();
    std::vector<std::vector<float>> expected;
    for (const std::string& name : kNaturalOrder) {
        qjit_linear* layer = nullptr;
        ASSERT_EQ(qjit_checkpoint_create_layer(checkpoint.get(), name.c_str(), &layer), QJIT_OK);
        qjit_linear_info info{};
        ASSERT_EQ(qjit_linear_get_info(layer, &info), QJIT_OK);
        expected.push_back(dequantized(layer, info.k, info.n));
        qjit_linear_destroy(layer);
    }
    constexpr int kThreads = 4;
    std::vector<std::vector<std::vector<float>>> got(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (size_t i = 0; i < kNaturalOrder.size(); ++i) {
                const std::string& name = kNaturalOrder[(i + size_t(t)) % kNaturalOrder.size()];
                qjit_linear* layer = nullptr;
                if (qjit_checkpoint_create_layer(checkpoint.get(), name.c_str(), &layer) != QJIT_OK) return;
                qjit_linear_info info{};
                qjit_linear_get_info(layer, &info);
                got[size_t(t)].push_back(dequantized(layer, info.k, info.n));
                qjit_linear_destroy(layer);
            }
        });
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < kThreads; ++t) {
        ASSERT_EQ(got[size_t(t)].size(), kNaturalOrder.size()) << "thread " << t;
        for (size_t i = 0; i < kNaturalOrder.size(); ++i)
            EXPECT_EQ(got[size_t(t)][i], expected[(i + size_t(t)) % kNaturalOrder.size()]) << "thread " << t;
    }
}

// ---- malformed checkpoints ----

// Rewrites `path` with `edit` applied to its bytes.
void edit_file(const fs::path& path, const std::function<void(std::string&)>& edit) {
    std::string bytes = qjit::test::read_file(path);
    edit(bytes);
    qjit::test::write_file(path, bytes);
}

// The JSON header of a safetensors file, and a way to put an edited one back (padding kept).
std::string header_of(const std::string& bytes) {
    uint64_t length = 0;
    std::memcpy(&length, bytes.data(), 8);
    return bytes.substr(8, length);
}
void replace_header(std::string& bytes, std::string header) {
    const std::string data = bytes.substr(8 + header_of(bytes).size());
    header.resize((header.size() + 7) / 8 * 8, ' ');
    const uint64_t length = header.size();
    bytes = std::string(reinterpret_cast<const char*>(&length), 8) + header + data;
}
void replace_in_header(std::string& bytes, const std::string& from, const std::string& to) {
    std::string header = header_of(bytes);
    const size_t at = header.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in " << header;
    header.replace(at, from.size(), to);
    replace_header(bytes, header);
}

struct Malformed {
    const char* what;
    std::function<void(const fs::path& dir)> damage;
    qjit_status status;
    const char* message_word;
    bool fails_at_create = false;  // the layer lists, but its import fails
};

TEST_F(CheckpointTest, MalformedCheckpointsGetNamedErrors) {
    const std::string layer = "model.layers.0.mlp.down_proj";  // K 160 x N 37, 4-bit g32: 5 groups
    auto model = [](const fs::path& dir) { return dir / "model.safetensors"; };
    const std::vector<Malformed> cases = {
        {"a missing qzeros tensor",
         [&](const fs::path& dir) {
             edit_file(model(dir), [&](std::string& b) { replace_in_header(b, layer + ".qzeros", layer + ".qzeroz"); });
         },
         QJIT_ERROR_CORRUPT_DATA, ".qzeros"},
        {"scales with a shape the config's group size does not give",
         [&](const fs::path& dir) {
             edit_file(dir / "config.json", [](std::string& b) { b.replace(b.find("\"group_size\": 32"), 16, "\"group_size\": 64"); });
         },
         QJIT_ERROR_CORRUPT_DATA, "shape"},
        {"qweight with a shape the config's width does not give",
         [&](const fs::path& dir) {
             edit_file(dir / "config.json", [](std::string& b) { b.replace(b.find("\"bits\": 4"), 9, "\"bits\": 8"); });
         },
         QJIT_ERROR_CORRUPT_DATA, ".qweight"},
        {"a dtype that does not match",
         [&](const fs::path& dir) {
             edit_file(model(dir), [&](std::string& b) {
                 std::string header = header_of(b);
                 const size_t at = header.find("\"dtype\":\"I32\"", header.find(layer + ".qweight"));
                 header.replace(at, 13, "\"dtype\":\"F32\"");
                 replace_header(b, header);
             });
         },
         QJIT_ERROR_CORRUPT_DATA, "dtype"},
        {"a header larger than the file",
         [&](const fs::path& dir) { edit_file(model(dir), [](std::string& b) { b[5] = 1; }); },
         QJIT_ERROR_CORRUPT_DATA, "header"},
        {"a file shorter than the header length",
         [&](const fs::path& dir) { edit_file(model(dir), [](std::string& b) { b.resize(5); }); },
         QJIT_ERROR_CORRUPT_DATA, "shorter"},
        {"a header that is not JSON",
         [&](const fs::path& dir) { edit_file(model(dir), [](std::string& b) { b[8] = '['; b[9] = '}'; }); },
         QJIT_ERROR_CORRUPT_DATA, "JSON"},
        {"overlapping data offsets",
         [&](const fs::path& dir) {
             edit_file(model(dir), [&](std::string& b) {
                 // qzeros (5 x 5 words = 100 bytes) directly follows qweight (20 x 37 words = 2960 bytes)
                 replace_in_header(b, "[2960,3060]", "[2950,3050]");
             });
         },
         QJIT_ERROR_CORRUPT_DATA, "overlap"},
        {"out-of-range data offsets",
         [&](const fs::path& dir) {
             edit_file(model(dir), [&](std::string& b) { replace_in_header(b, "[2960,3060]", "[2960000,2960100]"); });
         },
         QJIT_ERROR_CORRUPT_DATA, "past the end"},
        {"a truncated file",
         [&](const fs::path& dir) { edit_file(model(dir), [](std::string& b) { b.resize(b.size() - 7); }); },
         QJIT_ERROR_CORRUPT_DATA, "truncated"},
        {"a float where a count belongs",
         [&](const fs::path& dir) {
             edit_file(model(dir), [&](std::string& b) { replace_in_header(b, "[2960,3060]", "[2960,3.06e3]"); });
         },
         QJIT_ERROR_CORRUPT_DATA, "data_offsets"},
        {"a config asking for an unsupported width",
         [&](const fs::path& dir) {
             edit_file(dir / "config.json", [](std::string& b) { b.replace(b.find("\"bits\": 4"), 9, "\"bits\": 5"); });
         },
         QJIT_ERROR_UNSUPPORTED, "bits is 5"},
        {"a config asking for an unsupported group size",
         [&](const fs::path& dir) {
             edit_file(dir / "config.json", [](std::string& b) { b.replace(b.find("\"group_size\": 32"), 16, "\"group_size\": 48"); });
         },
         QJIT_ERROR_UNSUPPORTED, "group_size is 48"},
        {"bits written as a float",
         [&](const fs::path& dir) {
             edit_file(dir / "config.json", [](std::string& b) { b.replace(b.find("\"bits\": 4"), 9, "\"bits\": 4.5"); });
         },
         QJIT_ERROR_CORRUPT_DATA, "integer"},
        {"another quantization method",
         [&](const fs::path& dir) {
             edit_file(dir / "config.json", [](std::string& b) { b.replace(b.find("\"gptq\""), 6, "\"awq\""); });
         },
         QJIT_ERROR_UNSUPPORTED, "awq"},
        {"an unknown checkpoint format",
         [&](const fs::path& dir) {
             edit_file(dir / "config.json", [](std::string& b) { b.replace(b.find("\"gptq_v2\""), 9, "\"marlin\""); });
         },
         QJIT_ERROR_UNSUPPORTED, "marlin"},
        {"no config",
         [&](const fs::path& dir) { fs::remove(dir / "config.json"); },
         QJIT_ERROR_IO, "quantize_config.json"},
        {"no tensor file",
         [&](const fs::path& dir) { fs::remove(model(dir)); },
         QJIT_ERROR_IO, ".safetensors"},
        {"a tensor file that is a directory",
         [&](const fs::path& dir) { fs::remove(model(dir)); fs::create_directory(model(dir)); },
         QJIT_ERROR_IO, "not a regular file"},
        {"a g_idx with a group out of range",
         [&](const fs::path& dir) {
             edit_file(model(dir), [&](std::string& b) {
                 // the last tensor is layer 0's g_idx: set its first entry to group 99
                 const int32_t bad = 99;
                 std::memcpy(&b[b.size() - 160 * 4], &bad, 4);
             });
         },
         QJIT_ERROR_INVALID_ARGUMENT, "g_idx", /*fails_at_create=*/true},
    };
    for (const Malformed& c : cases) {
        SCOPED_TRACE(c.what);
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        sources_.clear();
        make_layers({{layer, 160, 37, true}}, 4, 32, QJIT_DTYPE_F16);
        write({});
        c.damage(dir_);
        qjit_checkpoint* checkpoint = nullptr;
        if (!c.fails_at_create) {
            EXPECT_STATUS(qjit_checkpoint_open(context_.get(), dir_.c_str(), &checkpoint), c.status, c.message_word);
            EXPECT_EQ(checkpoint, nullptr);
            continue;
        }
        ASSERT_EQ(qjit_checkpoint_open(context_.get(), dir_.c_str(), &checkpoint), QJIT_OK) << qjit_last_error();
        CheckpointPtr owned(checkpoint);
        qjit_linear* created = nullptr;
        EXPECT_STATUS(qjit_checkpoint_create_layer(checkpoint, layer.c_str(), &created), c.status, c.message_word);
        EXPECT_EQ(created, nullptr);
    }
}

TEST_F(CheckpointTest, MalformedShardsAndIndexesGetNamedErrors) {
    make_layers(kSpecs, 4, 32, QJIT_DTYPE_F16);
    qjit_tools::CheckpointOptions options;
    options.shards = 3;
    const fs::path index = dir_ / "model.safetensors.index.json";
    const fs::path second = dir_ / "model-00002-of-00003.safetensors";
    struct Case {
        const char* what;
        std::function<void()> damage;
        qjit_status status;
        const char* word;
    };
    const std::vector<Case> cases = {
        {"a missing shard", [&] { fs::remove(second); }, QJIT_ERROR_IO, "model-00002-of-00003.safetensors"},
        {"a truncated shard", [&] { edit_file(second, [](std::string& b) { b.resize(b.size() / 2); }); },
         QJIT_ERROR_CORRUPT_DATA, "truncated"},
        {"an index naming a path outside the directory",
         [&] { edit_file(index, [](std::string& b) { b.replace(b.find("model-00002"), 11, "../../etc/x"); }); },
         QJIT_ERROR_CORRUPT_DATA, "../../etc/x"},
        {"an index placing a tensor in a shard without it",
         [&] {
             edit_file(index, [](std::string& b) {
                 const size_t at = b.find("model-00001-of-00003");
                 b.replace(at, 20, "model-00003-of-00003");
             });
         },
         QJIT_ERROR_CORRUPT_DATA, "does not hold it"},
        {"an index that is not JSON", [&] { edit_file(index, [](std::string& b) { b.resize(b.size() / 2); }); },
         QJIT_ERROR_CORRUPT_DATA, "not valid JSON"},
        {"a tensor stored in two shards",
         [&] {
             // shard 3 gets a copy of shard 1 under its name: every tensor of shard 1 is then twice
             fs::copy_file(dir_ / "model-00001-of-00003.safetensors", dir_ / "model-00003-of-00003.safetensors",
                           fs::copy_options::overwrite_existing);
         },
         QJIT_ERROR_CORRUPT_DATA, "stored twice"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        write(options);
        c.damage();
        qjit_checkpoint* checkpoint = nullptr;
        EXPECT_STATUS(qjit_checkpoint_open(context_.get(), dir_.c_str(), &checkpoint), c.status, c.word);
        EXPECT_EQ(checkpoint, nullptr);
    }
}

TEST_F(CheckpointTest, BadArgumentsGetNamedErrors) {
    qjit_checkpoint* checkpoint = nullptr;
    EXPECT_STATUS(qjit_checkpoint_open(context_.get(), nullptr, &checkpoint), QJIT_ERROR_INVALID_ARGUMENT, "path");
    EXPECT_STATUS(qjit_checkpoint_open(nullptr, dir_.c_str(), &checkpoint), QJIT_ERROR_INVALID_ARGUMENT, "context");
    EXPECT_STATUS(qjit_checkpoint_open(context_.get(), (dir_ / "absent").c_str(), &checkpoint), QJIT_ERROR_IO,
                  "not a directory");
    make_layers(kSpecs, 4, 32, QJIT_DTYPE_F16);
    write({});
    CheckpointPtr opened = open();
    qjit_checkpoint_layer info{};
    EXPECT_STATUS(qjit_checkpoint_get_layer(opened.get(), 3, &info), QJIT_ERROR_INVALID_ARGUMENT, "index");
    EXPECT_STATUS(qjit_checkpoint_get_layer(opened.get(), -1, &info), QJIT_ERROR_INVALID_ARGUMENT, "index");
    qjit_linear* layer = nullptr;
    EXPECT_STATUS(qjit_checkpoint_create_layer(opened.get(), "model.layers.2.mlp", &layer), QJIT_ERROR_INVALID_ARGUMENT,
                  "model.layers.2.mlp");
    EXPECT_STATUS(qjit_checkpoint_create_layer(opened.get(), nullptr, &layer), QJIT_ERROR_INVALID_ARGUMENT, "name");
    EXPECT_EQ(qjit_checkpoint_close(nullptr), QJIT_OK);
}

}  // namespace
