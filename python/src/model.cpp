// qjit._native's Model: a Llama-architecture GGUF model run by the models/ room, the code qjit-run
// runs (models/run_gguf.hpp): the file read by load_gguf_llama, its linear layers made by
// build_method_model (the file's own weights imported exactly, dense fp32, or requantized) or
// build_packed_model (the exact import mapped from a pack file, or written to it), scored
// by evaluate_nll and decoded by greedy_decode. The GIL is released while the model computes; one
// call runs at a time (the model holds one KV cache).
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "bindings.hpp"
#include "context.hpp"
#include "errors.hpp"
#include "io/gguf_file.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/llama_eval.hpp"
#include "models/method_model.hpp"

namespace qjit_python {

using namespace nb::literals;
namespace llama = qjit_models::llama;
namespace {

// Runs `body`, raising what the models room throws as the qjit.Error of its status: the library's
// own errors keep theirs, a failed allocation is OUT_OF_MEMORY, anything else (a file the model
// code refuses) INVALID_ARGUMENT.
template <typename Body>
auto translated(Body&& body) {
    try {
        return body();
    } catch (const qjit::Error& e) {
        throw Failure(e.status(), e.what());
    } catch (const std::bad_alloc&) {
        throw Failure(QJIT_ERROR_OUT_OF_MEMORY, "out of memory while loading or running the model");
    } catch (const Failure&) {
        throw;
    } catch (const std::exception& e) {
        throw Failure(QJIT_ERROR_INVALID_ARGUMENT, e.what());
    }
}

class Model {
public:
    // `method` as qjit-run's --method options give it; with_calibration and no_calibration follow
    // from whether calibration sequences are given.
    Model(const std::string& path, qjit_models::MethodOptions method, bool fp32_classifier, const std::string& pack,
          int threads, int activations, int max_isa, const std::vector<std::vector<int>>& calibration) {
        method.with_calibration = !calibration.empty();
        method.no_calibration = method.method == "mixed" && calibration.empty();
        nb::gil_scoped_release unlocked;
        translated([&] {
            const std::shared_ptr<const qjit::GgufFile> file = qjit::GgufFile::open(path);
            weights_ = llama::load_gguf_llama(file);
            vocabulary_ = std::make_unique<qjit_models::GgufVocabulary>(*file);
            for (const std::vector<int>& sequence : calibration) check_tokens(sequence, "calibration");
            qjit_models::ContextOptions context;
            context.threads = threads;
            context.activations = qjit_activations(activations);
            context.max_isa = qjit_isa(max_isa);
            built_ = pack.empty() ? llama::build_method_model(weights_, method, context.context_options(), &calibration,
                                                              fp32_classifier)
                                  : llama::build_packed_model(weights_, pack, path, context.context_options(),
                                                              fp32_classifier);
            return 0;
        });
    }

    // The mean NLL (nats per predicted token) of each sequence scored from an empty KV cache, the
    // predicted tokens and each sequence's NLL sum.
    nb::tuple score(const std::vector<std::vector<int>>& sequences) {
        for (const std::vector<int>& sequence : sequences) check_tokens(sequence, "tokens");
        llama::NllResult result;
        {
            nb::gil_scoped_release unlocked;
            const std::lock_guard<std::mutex> lock(mutex_);
            result = translated([&] { return llama::evaluate_nll(*built_.model, sequences); });
        }
        return nb::make_tuple(result.mean_nll, result.tokens, result.sequence_nll);
    }

    // The logits of every position of `tokens` (T x vocab), from an empty KV cache.
    nb::ndarray<nb::numpy, float, nb::ndim<2>> logits(const std::vector<int>& tokens) {
        check_tokens(tokens, "tokens");
        if (tokens.empty()) invalid_argument("tokens: empty; logits need at least one token");
        const size_t vocab = size_t(config().vocab_size);
        auto* values = new std::vector<float>();
        nb::capsule owner(values, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
        {
            nb::gil_scoped_release unlocked;
            const std::lock_guard<std::mutex> lock(mutex_);
            translated([&] {
                const std::span<const float> logits = built_.model->forward_sequence(tokens);
                values->assign(logits.begin(), logits.end());
                built_.model->reset();
                return 0;
            });
        }
        const size_t shape[2] = {tokens.size(), vocab};
        return nb::ndarray<nb::numpy, float, nb::ndim<2>>(values->data(), 2, shape, owner);
    }

    // Greedy decoding: the `steps` tokens that follow `prompt`.
    std::vector<int> generate(const std::vector<int>& prompt, int steps) {
        check_tokens(prompt, "prompt");
        if (prompt.empty()) invalid_argument("prompt: empty; generation starts from at least one token");
        if (steps < 0) invalid_argument("steps is " + std::to_string(steps) + "; expected a count >= 0");
        if (prompt.size() - 1 + size_t(steps) > size_t(config().seq_len))
            invalid_argument("a prompt of " + std::to_string(prompt.size()) + " tokens and " + std::to_string(steps) +
                             " steps exceed the model's context of " + std::to_string(config().seq_len));
        llama::Generation generation;
        {
            nb::gil_scoped_release unlocked;
            const std::lock_guard<std::mutex> lock(mutex_);
            generation = translated([&] { return llama::greedy_decode(*built_.model, prompt, steps); });
        }
        return {generation.tokens.begin() + std::ptrdiff_t(prompt.size()), generation.tokens.end()};
    }

    nb::bytes decode(const std::vector<int>& tokens) const {
        const std::string text = translated([&] { return vocabulary_->decode(tokens); });
        return nb::bytes(text.data(), text.size());
    }

    nb::dict info() const {
        const llama::Config& c = config();
        const llama::QjitStorage storage = llama::qjit_storage(*built_.model);
        nb::dict d;
        d["dim"] = c.dim;
        d["hidden_dim"] = c.hidden_dim;
        d["n_layers"] = c.n_layers;
        d["n_heads"] = c.n_heads;
        d["n_kv_heads"] = c.n_kv_heads;
        d["vocab_size"] = c.vocab_size;
        d["context_length"] = c.seq_len;
        d["bos"] = vocabulary_->bos() ? nb::cast(*vocabulary_->bos()) : nb::none();
        d["linears"] = built_.maker_name;
        d["linear_weights"] = built_.model->linear_weight_count();
        d["stored_bytes"] = built_.model->linear_stored_bytes();
        d["qjit_bits_per_weight"] = storage.weights > 0 ? nb::cast(storage.bits_per_weight()) : nb::none();
        d["quantization_seconds"] = built_.quantization_seconds;
        d["calibration_seconds"] = built_.calibration_seconds;
        d["pack"] = built_.pack.empty() ? nb::none() : nb::cast(built_.pack);
        return d;
    }

private:
    const llama::Config& config() const { return weights_->config; }

    void check_tokens(const std::vector<int>& tokens, const char* what) const {
        const int vocab = config().vocab_size;
        for (size_t i = 0; i < tokens.size(); ++i)
            if (tokens[i] < 0 || tokens[i] >= vocab)
                invalid_argument(std::string(what) + ": token " + std::to_string(tokens[i]) + " at position " +
                                 std::to_string(i) + " is outside the vocabulary of " + std::to_string(vocab));
        if (tokens.size() > size_t(config().seq_len))
            invalid_argument(std::string(what) + ": " + std::to_string(tokens.size()) +
                             " tokens exceed the model's context of " + std::to_string(config().seq_len));
    }

    std::shared_ptr<const llama::Weights> weights_;
    std::unique_ptr<qjit_models::GgufVocabulary> vocabulary_;
    llama::MethodModel built_;
    std::mutex mutex_;
};

}  // namespace

void register_model(nb::module_& m) {
    // The runners' method options (models/runner_options.hpp), those qjit.Model.from_gguf takes.
    using MethodOptions = qjit_models::MethodOptions;
    nb::class_<MethodOptions>(m, "MethodOptions")
        .def(nb::init<>())
        .def_rw("method", &MethodOptions::method)
        .def_rw("bits", &MethodOptions::bits)
        .def_rw("group_size", &MethodOptions::group_size)
        .def_rw("rank", &MethodOptions::rank)
        .def_rw("milo_base", &MethodOptions::milo_base)
        .def_rw("float_offsets", &MethodOptions::float_offsets)
        .def_rw("act_order", &MethodOptions::act_order)
        .def_rw("bits_per_weight", &MethodOptions::bits_per_weight);

    nb::class_<Model>(m, "Model")
        .def(nb::init<const std::string&, MethodOptions, bool, const std::string&, int, int, int,
                      const std::vector<std::vector<int>>&>(),
             "path"_a, "method"_a, "fp32_classifier"_a, "pack"_a, "threads"_a, "activations"_a, "max_isa"_a,
             "calibration"_a)
        .def("score", &Model::score, "sequences"_a)
        .def("logits", &Model::logits, "tokens"_a)
        .def("generate", &Model::generate, "prompt"_a, "steps"_a)
        .def("decode", &Model::decode, "tokens"_a)
        .def("info", &Model::info);
}

}  // namespace qjit_python
