// qjit._native's Model: a Llama-architecture GGUF model run by the models/ room, the code qjit-run
// runs (models/run_gguf.hpp): the file read by load_gguf_llama, its linear layers made by
// build_method_model (the file's own weights imported exactly, dense fp32, or requantized) or
// build_packed_model (the exact import mapped from a pack file, or written to it), scored
// by evaluate_nll; text in and out through the file's own tokenizer
// (models/text_tokenizer.hpp), a TextSession and the chat templates. The GIL is released while the
// model computes; one call runs at a time (the model holds one KV cache).
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
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
#include "models/chat_template.hpp"
#include "models/sampler.hpp"
#include "models/text_generation.hpp"
#include "models/text_tokenizer.hpp"

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
    } catch (const nb::python_error&) {  // raised by a Python callback: raised as it is
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
            if (file->has("tokenizer.chat_template")) chat_template_text_ = file->get_string("tokenizer.chat_template");
            for (const std::vector<int>& sequence : calibration) check_tokens(sequence, "calibration");
            qjit_models::ContextOptions context;
            context.threads = threads;
            context.activations = qjit_activations(activations);
            context.max_isa = qjit_isa(max_isa);
            built_ = pack.empty() ? llama::build_method_model(weights_, method, context.context_options(), &calibration,
                                                              fp32_classifier)
                                  : llama::build_packed_model(weights_, pack, path, context.context_options(),
                                                              fp32_classifier);
            session_ = std::make_unique<qjit_models::TextSession>(*built_.model, *vocabulary_);
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
            session_->reset();
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
                session_->reset();
                return 0;
            });
        }
        const size_t shape[2] = {tokens.size(), vocab};
        return nb::ndarray<nb::numpy, float, nb::ndim<2>>(values->data(), 2, shape, owner);
    }

    // The text's tokens by the file's own tokenizer (llama_tokenize(add_special=bos,
    // parse_special=special)).
    std::vector<int> tokenize(const std::string& text, bool bos, bool special) const {
        return translated([&] { return tokenizer().encode(text, bos, special); });
    }

    // Generation after `context` by the sampler, text streamed to `on_text` (called with the GIL
    // held; what it raises ends generation and is raised here). Returns the tokens picked, their
    // text and what stopped it.
    nb::tuple generate_text(const std::vector<int>& context, int max_tokens, const qjit_models::SamplingOptions& sampling,
                            const std::vector<std::string>& stop_strings, bool stop_at_end_token,
                            std::optional<nb::callable> on_text) {
        check_tokens(context, "prompt");
        if (const std::optional<std::string> problem = qjit_models::sampling_problem(sampling)) invalid_argument(*problem);
        qjit_models::GenerationLimits limits;
        limits.max_tokens = max_tokens;
        limits.stop_strings = stop_strings;
        limits.stop_at_end_token = stop_at_end_token;
        qjit_models::TextCallback callback;
        if (on_text) callback = [&](std::string_view piece) {
            nb::gil_scoped_acquire locked;
            (*on_text)(nb::str(piece.data(), piece.size()));
        };
        qjit_models::GeneratedText generated;
        {
            nb::gil_scoped_release unlocked;
            const std::lock_guard<std::mutex> lock(mutex_);
            generated = translated([&] {
                qjit_models::Sampler sampler(sampling);
                return session_->generate(context, limits, sampler, callback);
            });
        }
        return nb::make_tuple(generated.tokens, nb::str(generated.text.data(), generated.text.size()),
                              qjit_models::stop_reason_name(generated.reason));
    }

    // A conversation as text in a chat template's format (the file's own, or `family` by name), and
    // the texts that end the assistant's turn in it.
    std::pair<std::string, std::vector<std::string>> format_chat(
        const std::vector<std::pair<std::string, std::string>>& messages, const std::string& family) const {
        return translated([&] {
            const qjit_models::ChatTemplate chat_template = chat_template_of(family);
            std::vector<qjit_models::ChatMessage> conversation;
            for (const auto& [role, content] : messages) conversation.push_back({role, content});
            return std::pair{qjit_models::format_chat(chat_template, conversation, true),
                             qjit_models::chat_stop_strings(chat_template)};
        });
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
        d["eos"] = vocabulary_->eos() ? nb::cast(*vocabulary_->eos()) : nb::none();
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

    const qjit_models::TextTokenizer& tokenizer() const {
        const std::lock_guard<std::mutex> lock(tokenizer_mutex_);
        if (!tokenizer_) tokenizer_ = std::make_unique<qjit_models::TextTokenizer>(*vocabulary_);
        return *tokenizer_;
    }

    qjit_models::ChatTemplate chat_template_of(const std::string& family) const {
        if (!family.empty()) return qjit_models::chat_template_by_name(family);
        if (!chat_template_text_)
            throw std::runtime_error("the model file has no chat template (tokenizer.chat_template): name one with "
                                     "template=");
        return qjit_models::detect_chat_template(*chat_template_text_);
    }

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
    std::optional<std::string> chat_template_text_;
    llama::MethodModel built_;
    std::unique_ptr<qjit_models::TextSession> session_;  // the KV cache's tokens, for generate_text
    mutable std::unique_ptr<qjit_models::TextTokenizer> tokenizer_;  // made at the first use
    mutable std::mutex tokenizer_mutex_;
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

    using SamplingOptions = qjit_models::SamplingOptions;
    nb::class_<SamplingOptions>(m, "SamplingOptions")
        .def(nb::init<>())
        .def_rw("temperature", &SamplingOptions::temperature)
        .def_rw("top_k", &SamplingOptions::top_k)
        .def_rw("top_p", &SamplingOptions::top_p)
        .def_rw("min_p", &SamplingOptions::min_p)
        .def_rw("repeat_penalty", &SamplingOptions::repeat_penalty)
        .def_rw("repeat_last_n", &SamplingOptions::repeat_last_n)
        .def_rw("seed", &SamplingOptions::seed);
    // Raises InvalidArgumentError naming the first sampling option out of its range.
    m.def("check_sampling", [](const SamplingOptions& options) {
        if (const std::optional<std::string> problem = qjit_models::sampling_problem(options)) invalid_argument(*problem);
    });

    nb::class_<Model>(m, "Model")
        .def(nb::init<const std::string&, MethodOptions, bool, const std::string&, int, int, int,
                      const std::vector<std::vector<int>>&>(),
             "path"_a, "method"_a, "fp32_classifier"_a, "pack"_a, "threads"_a, "activations"_a, "max_isa"_a,
             "calibration"_a)
        .def("score", &Model::score, "sequences"_a)
        .def("logits", &Model::logits, "tokens"_a)
        .def("decode", &Model::decode, "tokens"_a)
        .def("tokenize", &Model::tokenize, "text"_a, "bos"_a, "special"_a)
        .def("generate_text", &Model::generate_text, "context"_a, "max_tokens"_a, "sampling"_a, "stop"_a,
             "stop_at_end_token"_a, "on_text"_a.none())
        .def("format_chat", &Model::format_chat, "messages"_a, "template"_a)
        .def("info", &Model::info);
}

}  // namespace qjit_python
