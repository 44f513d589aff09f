// End-to-end tests on a real trained model: karpathy's stories260K llama2.c checkpoint, run through
// the shared Llama model (models/llama_model; dense fp32 and qjit layer makers) and checked against the
// golden outputs in shared/models/reference (see shared/models/README.md).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/binary_files.hpp"
#include "models/llama2_checkpoint.hpp"
#include "models/llama2_tokenizer.hpp"
#include "models/llama_eval.hpp"
#include "models/llama_model.hpp"
#include "qjit/qjit_ops.h"
#include "tuner/cpu_isa.hpp"

namespace {

namespace llama = qjit_models::llama;
namespace llama2 = qjit_models::llama2;

const std::string kModelsDir = QJIT_SHARED_MODELS_DIR;
const std::string kCheckpointPath = kModelsDir + "/stories260K/stories260K.bin";
const std::string kReferenceDir = kModelsDir + "/reference/";

std::shared_ptr<const llama::Weights> stories260k() {
    static const auto weights = llama2::load_checkpoint(kCheckpointPath);
    return weights;
}

std::vector<int> reference_greedy_tokens() {
    const std::vector<int32_t> tokens = qjit_models::read_array_file<int32_t>(kReferenceDir + "stories260K_greedy_tokens.i32");
    return {tokens.begin(), tokens.end()};
}

double reference_mean_nll() {
    std::ifstream in(kReferenceDir + "stories260K_tinystories_val_first200para_nll.json");
    const std::string json{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::string key = "\"mean_nll_nats\"";
    const size_t at = json.find(key);
    if (at == std::string::npos) throw std::runtime_error("the reference JSON has no " + key);
    return std::strtod(json.c_str() + json.find(':', at) + 1, nullptr);
}

// The first BOS-delimited sequence of the perplexity set.
std::vector<int> first_nll_sequence() {
    const std::vector<uint16_t> tokens =
        qjit_models::read_array_file<uint16_t>(kReferenceDir + "tinystories_val_first200para.tok512.u16");
    std::vector<int> sequence{tokens.at(0)};
    for (size_t i = 1; i < tokens.size() && tokens[i] != llama2::kBosToken; ++i) sequence.push_back(tokens[i]);
    return sequence;
}

size_t leading_matches(const std::vector<int>& a, const std::vector<int>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
    float worst = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
}

class RealModel : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::is_directory(kModelsDir)) {
            GTEST_SKIP() << "models folder " << kModelsDir << " is missing; skipping the real-model tests";
        }
    }
};

// (i) The runner itself: dense fp32 logits, batched and step by step, against the float64 reference.
TEST_F(RealModel, Fp32LogitsMatchReference) {
    const std::vector<float> reference = qjit_models::read_array_file<float>(kReferenceDir + "stories260K_greedy_logits_64x512.f32");
    const std::vector<int> greedy = reference_greedy_tokens();
    ASSERT_GE(greedy.size(), 65u);
    const int positions = 64;
    const int vocab = stories260k()->config.vocab_size;
    ASSERT_EQ(reference.size(), size_t(positions) * size_t(vocab));
    const std::vector<int> inputs(greedy.begin(), greedy.begin() + positions);

    llama::DenseMaker dense;
    llama::Model model(stories260k(), dense);
    const std::span<const float> logits = model.forward_sequence(inputs);
    ASSERT_EQ(logits.size(), reference.size());
    EXPECT_LE(max_abs_diff(logits, reference), 1e-4f);
    for (int t = 0; t < positions; ++t) {
        EXPECT_EQ(model.greedy_token(logits.subspan(size_t(t) * vocab, size_t(vocab))), greedy[size_t(t) + 1])
            << "position " << t;
    }

    model.reset();
    float worst_step = 0.0f;
    for (int t = 0; t < positions; ++t) {
        const std::span<const float> row = model.step(inputs[size_t(t)]);
        worst_step =
            std::max(worst_step, max_abs_diff(row, std::span(reference).subspan(size_t(t) * vocab, size_t(vocab))));
    }
    EXPECT_LE(worst_step, 1e-4f);
}

// (ii) 8-bit per-column symmetric weights through qjit with exact (fp32) activations, on the
// portable path and on the generated kernels of every ISA this CPU has: greedy decoding and
// perplexity. Greedy decoding has near-ties (fp32 top-2 logit margins of 0.071 at position 61 and
// 0.042 at 114), which int8 weights may flip: with every linear, classifier included, quantized
// the first 114 generated tokens match; with an fp32 classifier only the first 61 would.
class RealModelExact : public RealModel, public ::testing::WithParamInterface<qjit_isa> {
protected:
    qjit_context_options exact_options() const {
        qjit_context_options options;
        qjit_context_options_init(&options);
        options.max_isa = GetParam();
        options.activations = QJIT_ACTIVATIONS_F32;
        return options;
    }
};

TEST_P(RealModelExact, Int8WeightsGreedyDecodeMatchesReference) {
    const std::vector<int> reference = reference_greedy_tokens();
    const qjit_context_options options = exact_options();
    llama::QuantizingMaker backend(llama::make_quant_config(8, QJIT_GROUP_PER_COLUMN, true), &options);
    llama::Model model(stories260k(), backend);
    const std::vector<int> tokens = llama::greedy_decode(model, {reference.data(), 1}, int(reference.size()) - 1).tokens;
    const size_t generated_matching = leading_matches(tokens, reference) - 1;  // BOS is not generated
    std::printf("int8 per-column (%s): %zu of %zu generated tokens match the reference\n",
                model.layer_linear(0, 0).describe().c_str(), generated_matching, reference.size() - 1);
    EXPECT_GE(generated_matching, 64u);
}

TEST_P(RealModelExact, Int8WeightsMeanNllMatchesReference) {
    const std::vector<uint16_t> tokens =
        qjit_models::read_array_file<uint16_t>(kReferenceDir + "tinystories_val_first200para.tok512.u16");
    const qjit_context_options options = exact_options();
    llama::QuantizingMaker backend(llama::make_quant_config(8, QJIT_GROUP_PER_COLUMN, true), &options);
    llama::Model model(stories260k(), backend);
    const llama::NllResult result = llama::evaluate_nll(model, llama2::split_at_bos(tokens));
    const double reference = reference_mean_nll();
    std::printf("int8 per-column mean NLL %.5f, reference fp32 %.5f\n", result.mean_nll, reference);
    EXPECT_EQ(result.tokens, 19380);
    EXPECT_EQ(result.sequence_nll.size(), 200u);
    EXPECT_NEAR(result.mean_nll, reference, 0.002);
}

std::vector<qjit_isa> isas_to_test() {
    std::vector<qjit_isa> isas = {QJIT_ISA_PORTABLE};
    for (const qjit_isa isa : {QJIT_ISA_AVX2, QJIT_ISA_AVX512})
        if (qjit::cpu_supports(isa)) isas.push_back(isa);  // the exact path is the same code with VNNI
    return isas;
}

INSTANTIATE_TEST_SUITE_P(Isa, RealModelExact, ::testing::ValuesIn(isas_to_test()),
                         [](const auto& info) { return std::string(qjit::isa_name(info.param)); });

// The instruction set a kernel name says it uses: its family tag (the ops' "attention_avx2", the
// layers' "q4g32_asym_gemm_i8_avx2vnni_tu4mb6pf4").
qjit_isa isa_in_kernel_name(const std::string& name) {
    const std::pair<const char*, qjit_isa> tags[] = {{"_avx512vnni", QJIT_ISA_AVX512_VNNI}, {"_avx512", QJIT_ISA_AVX512},
                                                     {"_avx2vnni", QJIT_ISA_AVX2_VNNI},     {"_avx2", QJIT_ISA_AVX2},
                                                     {"_portable", QJIT_ISA_PORTABLE}};
    for (const auto& [tag, isa] : tags)
        if (name.find(tag) != std::string::npos) return isa;
    ADD_FAILURE() << "no ISA tag in kernel name " << name;
    return QJIT_ISA_MAX_ENUM;
}

// Under each cap this CPU runs, a forward (prompt and decode steps, int8 and f32 activations) uses
// no kernel above the cap: every linear's kernel and every op's. Uncapped, the best is used.
TEST_F(RealModel, EveryKernelTheModelUsesIsWithinTheIsaCap) {
    std::vector<qjit_isa> caps = {QJIT_ISA_PORTABLE};
    for (qjit_isa isa : {QJIT_ISA_AVX2, QJIT_ISA_AVX2_VNNI, QJIT_ISA_AVX512, QJIT_ISA_AVX512_VNNI})
        if (qjit::cpu_supports(isa)) caps.push_back(isa);
    const std::vector<int> sequence = first_nll_sequence();
    for (qjit_isa cap : caps)
        for (qjit_activations activations : {QJIT_ACTIVATIONS_INT8, QJIT_ACTIVATIONS_F32}) {
            SCOPED_TRACE(std::string("cap ") + qjit::isa_name(cap) + (activations == QJIT_ACTIVATIONS_INT8 ? ", int8" : ", f32"));
            qjit_context_options options;
            qjit_context_options_init(&options);
            options.max_isa = cap;
            options.activations = activations;
            options.tuning_db_path = "";
            options.tuning_budget_ms = 0;
            llama::QuantizingMaker maker(llama::make_quant_config(4, 32, false), &options);
            llama::Model model(stories260k(), maker);
            model.forward_sequence(std::span(sequence).first(20));
            for (int t = 20; t < 24; ++t) model.step(sequence[size_t(t)]);
            std::vector<std::string> names;
            for (int layer = 0; layer < model.config().n_layers; ++layer)
                for (int which = 0; which < llama::kLayerMatrices; ++which) {
                    const std::string text = model.layer_linear(layer, which).describe();
                    names.push_back(text.substr(0, text.find(' ')));
                }
            for (qjit_op op : {QJIT_OP_ATTENTION, QJIT_OP_RMS_NORM, QJIT_OP_ROPE, QJIT_OP_SWIGLU, QJIT_OP_ARGMAX}) {
                const char* name = nullptr;
                ASSERT_EQ(qjit_op_kernel_name(maker.context().get(), op, &name), QJIT_OK);
                names.push_back(name);
            }
            const qjit_attention_shape shape = model.config().attention_shape();
            const char* attention = nullptr;  // the plan the forward ran
            ASSERT_EQ(qjit_attention_tune(maker.context().get(), &shape, model.kv_type(), &attention), QJIT_OK);
            names.push_back(attention);
            qjit_isa most = QJIT_ISA_PORTABLE;
            for (const std::string& name : names) {
                const qjit_isa used = isa_in_kernel_name(name);
                EXPECT_LE(int(used), int(cap)) << name;
                most = std::max(most, used);
            }
            // The cap is reached where a kernel of that level exists: the f32 path has no VNNI
            // kernels, and the ops' families stop at AVX-512.
            if (cap >= QJIT_ISA_AVX2) EXPECT_GE(int(most), int(QJIT_ISA_AVX2));
        }
}

// (iii) One m = T call per layer and T calls with m = 1 (KV cache) compute the same logits.
TEST_F(RealModel, QjitBatchedForwardMatchesKvCacheSteps) {
    const std::vector<int> sequence = first_nll_sequence();
    const size_t vocab = size_t(stories260k()->config.vocab_size);
    const qjit_quant_config configs[] = {llama::make_quant_config(8, QJIT_GROUP_PER_COLUMN, true),
                                         llama::make_quant_config(4, 32, false)};
    for (const qjit_quant_config& config : configs) {
        SCOPED_TRACE(llama::describe_quant_config(config));
        llama::QuantizingMaker backend(config);
        llama::Model model(stories260k(), backend);
        const std::span<const float> batched_view = model.forward_sequence(sequence);
        const std::vector<float> batched(batched_view.begin(), batched_view.end());
        ASSERT_EQ(batched.size(), sequence.size() * vocab);

        model.reset();
        float worst = 0.0f;
        for (size_t t = 0; t < sequence.size(); ++t) {
            const std::span<const float> row = model.step(sequence[t]);
            worst = std::max(worst, max_abs_diff(row, std::span(batched).subspan(t * vocab, vocab)));
        }
        std::printf("%s: batched vs KV-cache steps, max |logit diff| %.2g\n",
                    llama::describe_quant_config(config).c_str(), double(worst));
        EXPECT_LE(worst, 1e-3f);
    }
}

TEST_F(RealModel, TokenizerDecodesReferenceText) {
    std::ifstream in(kReferenceDir + "stories260K_greedy_text.txt", std::ios::binary);
    const std::string reference{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const llama2::Tokenizer tokenizer(kModelsDir + "/stories260K/tok512.bin", stories260k()->config.vocab_size);
    EXPECT_EQ(tokenizer.decode(reference_greedy_tokens()) + "\n", reference);  // run.c ends with a newline
}

TEST_F(RealModel, DamagedCheckpointIsRejected) {
    std::ifstream in(kCheckpointPath, std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ASSERT_GT(bytes.size(), 1000u);
    const std::string path = ::testing::TempDir() + "qjit_truncated_stories260K.bin";

    auto expect_rejected = [&](const std::vector<char>& content, const std::string& needle) {
        {
            std::ofstream out(path, std::ios::binary | std::ios::trunc);
            out.write(content.data(), std::streamsize(content.size()));
        }
        try {
            llama2::load_checkpoint(path);
            ADD_FAILURE() << "a damaged checkpoint was accepted (expected an error mentioning '" << needle << "')";
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_rejected(std::vector<char>(bytes.begin(), bytes.end() - 4), "bytes");  // truncated
    expect_rejected(std::vector<char>(bytes.begin(), bytes.begin() + 10), "header");
    std::vector<char> bad_heads = bytes;
    bad_heads[12] = 7;  // n_heads = 7 does not divide dim 64
    expect_rejected(bad_heads, "heads");
    std::remove(path.c_str());
    EXPECT_THROW(llama2::load_checkpoint(kModelsDir + "/no/such/file.bin"), std::runtime_error);
}

}  // namespace
