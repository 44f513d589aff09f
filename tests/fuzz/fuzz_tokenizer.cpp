// libFuzzer target: the GGUF tokenizers (models/text_tokenizer.hpp). The first byte picks what the
// rest is. Even: a text, encoded with a small byte-level BPE vocabulary under each pre-tokenizer and
// with a small SentencePiece one; text that is not UTF-8 may only be refused with
// std::invalid_argument, and byte-level BPE must give the text back when decoded. Odd: a GGUF file,
// whose vocabulary (tokens, types, scores, merges, special ids) is loaded and made a tokenizer, then
// run on a fixed text; a bad vocabulary may only be refused (qjit::Error CORRUPT_DATA from the
// reader, std::runtime_error naming the problem from the vocabulary or tokenizer).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "io/gguf_file.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/text_tokenizer.hpp"
#include "models/unicode_text.hpp"
#include "tests/gguf_writer.hpp"
#include "tests/sentencepiece_vocabulary.hpp"

namespace {

struct Vocabulary {
    std::string bytes;
    std::shared_ptr<const qjit::GgufFile> file;
    std::unique_ptr<qjit_models::GgufVocabulary> vocabulary;
    std::unique_ptr<qjit_models::TextTokenizer> tokenizer;

    explicit Vocabulary(std::string gguf) : bytes(std::move(gguf)) {
        file = qjit::GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "vocabulary");
        vocabulary = std::make_unique<qjit_models::GgufVocabulary>(*file);
        tokenizer = std::make_unique<qjit_models::TextTokenizer>(*vocabulary);
    }
};

// Every byte's character, some merges of ASCII pairs, and two special tokens.
std::string byte_level_vocabulary(const char* pre) {
    std::vector<std::string> tokens, merges;
    for (int b = 0; b < 256; ++b) {
        tokens.emplace_back();
        qjit_models::append_utf8(tokens.back(), qjit_models::byte_to_unicode(uint8_t(b)));
    }
    for (const char* pair : {"t h", "th e", "i n", "a n", "an d", "o n", "e r", "\xC4\xA0 t", "\xC4\xA0t he"}) {
        merges.emplace_back(pair);
        std::string joined = pair;
        joined.erase(joined.find(' '), 1);
        tokens.push_back(joined);
    }
    tokens.insert(tokens.end(), {"<|im_start|>", "<|im_end|>"});
    std::vector<int32_t> types(tokens.size(), 1);
    types[types.size() - 1] = types[types.size() - 2] = 3;
    qjit::test::GgufWriter writer;
    writer.value("tokenizer.ggml.model", "gpt2").value("tokenizer.ggml.pre", pre).array("tokenizer.ggml.tokens", tokens)
        .array("tokenizer.ggml.token_type", types).array("tokenizer.ggml.merges", merges)
        .value("tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 1));
    return writer.bytes();
}

// A few pieces with scores, and a user-defined token, after the byte tokens.
std::string sentencepiece_vocabulary() {
    std::vector<qjit::test::SentencePiece> pieces;
    float score = 0;
    for (const char* piece : {"\xE2\x96\x81", "\xE2\x96\x81the", "th", "e", "t", "h", "a", "\xE2\x96\x81" "a"})
        pieces.push_back({piece, score -= 1});
    pieces.push_back({"\n\n", 0, 4});
    return qjit::test::sentencepiece_vocabulary(pieces, true);
}

void encode_text(const std::string& text) {
    static const Vocabulary vocabularies[] = {
        Vocabulary(byte_level_vocabulary("default")), Vocabulary(byte_level_vocabulary("smollm")),
        Vocabulary(byte_level_vocabulary("llama-bpe")), Vocabulary(byte_level_vocabulary("qwen2")),
        Vocabulary(sentencepiece_vocabulary())};
    const bool valid = !qjit_models::utf8_problem(text);
    for (const Vocabulary& v : vocabularies) {
        for (const bool special : {false, true}) {
            std::vector<int> tokens;
            try {
                tokens = v.tokenizer->encode(text, true, special);
            } catch (const std::invalid_argument&) {
                if (valid) std::abort();  // only text that is not UTF-8 is refused
                continue;
            }
            if (!valid) std::abort();
            const std::string decoded = v.vocabulary->decode(tokens);
            // Byte-level BPE writes every byte: its tokens give the text back (control tokens cut
            // out with `special` print as nothing).
            if (v.vocabulary->model() == qjit_models::GgufVocabulary::Model::byte_level && !special && decoded != text)
                std::abort();
        }
    }
}

void load_vocabulary(const uint8_t* data, size_t size) {
    std::shared_ptr<const qjit::GgufFile> file;
    try {
        file = qjit::GgufFile::parse(data, size, "fuzz");
        const qjit_models::GgufVocabulary vocabulary(*file);
        const qjit_models::TextTokenizer tokenizer(vocabulary);
        for (const bool special : {false, true}) {
            const std::vector<int> tokens = tokenizer.encode("The cat\n\n<|im_start|> caf\xC3\xA9 42!", true, special);
            for (const int token : tokens)
                if (token < 0 || token >= vocabulary.size()) std::abort();
            vocabulary.decode(tokens);
        }
    } catch (const qjit::Error& e) {
        if (e.status() != QJIT_ERROR_CORRUPT_DATA) std::abort();
    } catch (const std::invalid_argument&) {
        std::abort();  // the fixed text is UTF-8
    } catch (const std::runtime_error&) {
        // a vocabulary refused with its reason
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    if (data[0] % 2 == 0) encode_text(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
    else load_vocabulary(data + 1, size - 1);
    return 0;
}
