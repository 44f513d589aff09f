// The GGUF tokenizers (models/text_tokenizer.hpp) against llama.cpp's own tokenization: token lists
// that llama.cpp made for sample texts (tests/data/tokenizer/, tools/make_token_references.py) and
// for the TinyStories paragraphs (shared/smollm2/eval.seq.u32, tests/data/gemma3-270m/eval.seq.u32),
// on the real vocabularies of SmolLM2 (byte-level BPE, pre-tokenizer smollm; also run through the
// llama3 and qwen2 pre-tokenizers) and Gemma 3 (SentencePiece); and the pieces underneath on small
// hand-made cases: UTF-8, the pre-tokenizers' expressions, SentencePiece's merges by score and byte
// fallback, and streaming text that ends inside a character.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "io/gguf_file.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/pre_tokenizer.hpp"
#include "models/text_tokenizer.hpp"
#include "models/token_sequences.hpp"
#include "models/token_text_stream.hpp"
#include "models/unicode_text.hpp"
#include "sentencepiece_vocabulary.hpp"
#include "model_files.hpp"

namespace {

using qjit_models::GgufVocabulary;
using qjit_models::PreTokenizer;
using qjit_models::TextTokenizer;
using qjit::test::byte_piece_id;
using qjit::test::kFirstSentencePiece;
using qjit::test::sentencepiece_vocabulary;

const std::filesystem::path kData = std::filesystem::path(QJIT_SOURCE_DIR) / "tests" / "data";

std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string> pieces(PreTokenizer pre, std::string_view text) {
    std::vector<std::string> out;
    for (const std::string_view piece : qjit_models::split_pieces(pre, text)) out.emplace_back(piece);
    return out;
}

// The paragraphs of the TinyStories text as the reference token files split it: at blank lines,
// each stripped of ASCII white space, empty ones skipped.
std::vector<std::string> tinystories_paragraphs(size_t count) {
    const std::string text = read_text(std::filesystem::path(QJIT_SHARED_MODELS_DIR) / "text" / "tinystories_val.txt");
    std::vector<std::string> paragraphs;
    const char* space = " \t\n\v\f\r";
    for (size_t at = 0; at <= text.size() && paragraphs.size() < count;) {
        size_t end = text.find("\n\n", at);
        if (end == std::string::npos) end = text.size();
        const std::string part = text.substr(at, end - at);
        const size_t first = part.find_first_not_of(space);
        if (first != std::string::npos) paragraphs.push_back(part.substr(first, part.find_last_not_of(space) - first + 1));
        at = end + 2;
    }
    return paragraphs;
}

// Checks every case of a reference file made by tools/make_token_references.py.
void expect_reference_tokens(const TextTokenizer& tokenizer, const std::string& reference_name) {
    const nlohmann::json reference =
        nlohmann::json::parse(read_text(kData / "tokenizer" / (reference_name + ".json")));
    ASSERT_GE(reference["cases"].size(), 20u);
    for (const nlohmann::json& c : reference["cases"]) {
        const std::string text = c["text"];
        const std::vector<int> expected = c["tokens"];
        EXPECT_EQ(tokenizer.encode(text, true, c["parse_special"]), expected)
            << reference_name << ": '" << text << "' (parse_special " << c["parse_special"] << ")";
    }
}

void expect_tinystories_tokens(const TextTokenizer& tokenizer, const std::filesystem::path& sequences_path) {
    const qjit_models::TokenSequences reference = qjit_models::read_token_sequences(sequences_path.string());
    const std::vector<std::string> paragraphs = tinystories_paragraphs(reference.size());
    ASSERT_EQ(paragraphs.size(), reference.size());
    size_t tokens = 0;
    for (size_t i = 0; i < paragraphs.size(); ++i) {
        const std::vector<int> expected(reference[i].begin(), reference[i].end());
        EXPECT_EQ(tokenizer.encode(paragraphs[i]), expected) << "paragraph " << i << ": " << paragraphs[i];
        tokens += expected.size();
    }
    EXPECT_GT(tokens, 5000u);
}

// A GGUF file of `source`'s vocabulary alone, with tokenizer.ggml.pre set to `pre`.
std::string vocabulary_with_pre_tokenizer(const qjit::GgufFile& source, const std::string& pre) {
    qjit::test::GgufWriter writer;
    writer.value("general.architecture", "llama")
        .value("tokenizer.ggml.model", source.get_string("tokenizer.ggml.model"))
        .value("tokenizer.ggml.pre", pre)
        .array("tokenizer.ggml.tokens", source.get_string_array("tokenizer.ggml.tokens"))
        .array("tokenizer.ggml.merges", source.get_string_array("tokenizer.ggml.merges"))
        .value("tokenizer.ggml.add_bos_token", source.get_bool("tokenizer.ggml.add_bos_token"))
        .value("tokenizer.ggml.bos_token_id", uint32_t(source.get_uint("tokenizer.ggml.bos_token_id")))
        .value("tokenizer.ggml.eos_token_id", uint32_t(source.get_uint("tokenizer.ggml.eos_token_id")));
    std::vector<int32_t> types;
    for (const int64_t type : source.get_int_array("tokenizer.ggml.token_type")) types.push_back(int32_t(type));
    writer.array("tokenizer.ggml.token_type", types);
    return writer.bytes();
}

struct ParsedVocabulary {
    std::string bytes;
    std::shared_ptr<const qjit::GgufFile> file;
    std::unique_ptr<GgufVocabulary> vocabulary;

    explicit ParsedVocabulary(std::string gguf) : bytes(std::move(gguf)) {
        file = qjit::GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "vocabulary.gguf");
        vocabulary = std::make_unique<GgufVocabulary>(*file);
    }
};

}  // namespace

TEST(Utf8, ProblemsNameTheByteAndWhatIsWrong) {
    EXPECT_FALSE(qjit_models::utf8_problem("plain ascii, caf\xC3\xA9, \xF0\x9F\x98\x80"));
    const auto problem = [](std::string_view text) { return qjit_models::utf8_problem(text).value_or("none"); };
    EXPECT_EQ(problem("ab\x80"), "invalid UTF-8 at byte 2: a continuation byte where a character starts");
    EXPECT_EQ(problem("a\xC3"), "invalid UTF-8 at byte 1: a character cut off by the end of the text");
    EXPECT_EQ(problem("\xC3(x"), "invalid UTF-8 at byte 0: a character whose continuation bytes are missing");
    EXPECT_EQ(problem("\xC0\xAF"), "invalid UTF-8 at byte 0: an overlong encoding");
    EXPECT_EQ(problem("\xED\xA0\x80"), "invalid UTF-8 at byte 0: an encoded surrogate");
    EXPECT_EQ(problem("\xF4\x90\x80\x80"), "invalid UTF-8 at byte 0: a value past U+10FFFF");
    EXPECT_EQ(problem("\xFF"), "invalid UTF-8 at byte 0: a byte that starts no character");
}

TEST(Utf8, CompletePrefixHoldsAnUnfinishedCharacter) {
    EXPECT_EQ(qjit_models::complete_utf8_prefix("abc"), 3u);
    EXPECT_EQ(qjit_models::complete_utf8_prefix("ab\xE2\x82"), 2u);        // the euro sign, two bytes of three
    EXPECT_EQ(qjit_models::complete_utf8_prefix("ab\xE2\x82\xAC"), 5u);
    EXPECT_EQ(qjit_models::complete_utf8_prefix("\xF0\x9F\x98"), 0u);
    EXPECT_EQ(qjit_models::complete_utf8_prefix(""), 0u);
}

TEST(Utf8, UnicodeClasses) {
    EXPECT_TRUE(qjit_models::is_letter(U'é'));
    EXPECT_TRUE(qjit_models::is_letter(U'中'));
    EXPECT_TRUE(qjit_models::is_letter(U'Ж'));
    EXPECT_FALSE(qjit_models::is_letter(U'1'));
    EXPECT_TRUE(qjit_models::is_number(U'٣'));   // Arabic-Indic three (Nd)
    EXPECT_TRUE(qjit_models::is_number(U'Ⅻ'));   // Roman numeral twelve (Nl)
    EXPECT_TRUE(qjit_models::is_number(U'½'));   // No
    EXPECT_FALSE(qjit_models::is_number(U'x'));
    EXPECT_TRUE(qjit_models::is_white_space(0x3000));
    EXPECT_TRUE(qjit_models::is_white_space(0x85));
    EXPECT_FALSE(qjit_models::is_white_space(0x200B));  // zero-width space is not White_Space
}

TEST(PreTokenizer, Gpt2PiecesFollowItsExpression) {
    using V = std::vector<std::string>;
    EXPECT_EQ(pieces(PreTokenizer::gpt2, "Hello world"), (V{"Hello", " world"}));
    EXPECT_EQ(pieces(PreTokenizer::gpt2, "it's  two   spaces"), (V{"it", "'s", " ", " two", "  ", " spaces"}));
    EXPECT_EQ(pieces(PreTokenizer::gpt2, "x 123 !? end  "), (V{"x", " 123", " !?", " end", "  "}));
    EXPECT_EQ(pieces(PreTokenizer::gpt2, "a\n\nb"), (V{"a", "\n", "\n", "b"}));
    EXPECT_EQ(pieces(PreTokenizer::gpt2, "I'LL"), (V{"I", "'", "LL"}));  // contractions are lower case only
}

TEST(PreTokenizer, SmollmSplitsEveryDigit) {
    using V = std::vector<std::string>;
    EXPECT_EQ(pieces(PreTokenizer::smollm, "x 123ab"), (V{"x", " ", "1", "2", "3", "ab"}));
}

TEST(PreTokenizer, Llama3AndQwen2PiecesFollowTheirExpressions) {
    using V = std::vector<std::string>;
    EXPECT_EQ(pieces(PreTokenizer::llama3, "I'LL pay 12345!\n\n  next"),
              (V{"I", "'LL", " pay", " ", "123", "45", "!\n\n", " ", " next"}));
    EXPECT_EQ(pieces(PreTokenizer::qwen2, "12345"), (V{"1", "2", "3", "4", "5"}));
    EXPECT_EQ(pieces(PreTokenizer::llama3, "a \n\n b"), (V{"a", " \n\n", " b"}));
    EXPECT_EQ(pieces(PreTokenizer::llama3, "(x)"), (V{"(x", ")"}));  // one non-letter may lead a word
}

TEST(PreTokenizer, UnknownNameIsRefusedByName) {
    try {
        qjit_models::pre_tokenizer_named("tekken");
        FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("'tekken'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("llama-bpe"), std::string::npos) << e.what();
    }
}

TEST(SentencePiece, JoinsTheHighestScoringPairsAndFallsBackToBytes) {
    // "▁ab" joins through "ab" (score -1) rather than "▁a" (score -2); "c" is no token: bytes.
    const ParsedVocabulary v(sentencepiece_vocabulary({{"\xE2\x96\x81", -5}, {"a", -3}, {"b", -3}, {"ab", -1},
                                                       {"\xE2\x96\x81" "a", -2}, {"\xE2\x96\x81" "ab", -4}},
                                                      true));
    const TextTokenizer tokenizer(*v.vocabulary);
    const int space = kFirstSentencePiece, space_ab = kFirstSentencePiece + 5;
    EXPECT_EQ(tokenizer.encode("ab"), (std::vector<int>{1, space_ab}));
    EXPECT_EQ(tokenizer.encode("abc", false), (std::vector<int>{space_ab, byte_piece_id('c')}));
    EXPECT_EQ(tokenizer.encode("c ab", false), (std::vector<int>{space, byte_piece_id('c'), space_ab}));
    EXPECT_EQ(tokenizer.encode("\xC3\xA9", false), (std::vector<int>{space, byte_piece_id(0xC3), byte_piece_id(0xA9)}));
}

TEST(SentencePiece, WithoutSpacePrefixTextStartsAsWritten) {
    const ParsedVocabulary v(sentencepiece_vocabulary({{"a", -1}, {"\xE2\x96\x81", -1}}, false));
    const TextTokenizer tokenizer(*v.vocabulary);
    const int a = kFirstSentencePiece, space = kFirstSentencePiece + 1;
    EXPECT_EQ(tokenizer.encode("a a", false), (std::vector<int>{a, space, a}));
}

TEST(TextTokenizer, InvalidUtf8IsRefusedNamingTheByte) {
    const ParsedVocabulary v(sentencepiece_vocabulary({{"a", -1}}, true));
    const TextTokenizer tokenizer(*v.vocabulary);
    try {
        tokenizer.encode("ok \xFF");
        FAIL() << "no exception";
    } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(), "invalid UTF-8 at byte 3: a byte that starts no character");
    }
}

TEST(TokenTextStream, HoldsTheBytesOfAnUnfinishedCharacter) {
    const ParsedVocabulary v(sentencepiece_vocabulary({{"a", -1}}, true));
    qjit_models::TokenTextStream stream(*v.vocabulary);
    EXPECT_EQ(stream.push(kFirstSentencePiece), "a");
    EXPECT_EQ(stream.push(byte_piece_id(0xE2)), "");
    EXPECT_EQ(stream.push(byte_piece_id(0x82)), "");
    EXPECT_EQ(stream.push(byte_piece_id(0xAC)), "\xE2\x82\xAC");
    EXPECT_EQ(stream.push(byte_piece_id(0xF0)), "");
    EXPECT_EQ(stream.finish(), "\xF0");
    EXPECT_EQ(stream.push(1), "");  // a control token prints as nothing
}

TEST(TextTokenizer, SmolLM2EqualsLlamaCpp) {
    const std::filesystem::path path = qjit::test::smollm2_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch_model.sh)";
    const auto file = qjit::GgufFile::open(path.string());
    const GgufVocabulary vocabulary(*file);
    const TextTokenizer tokenizer(vocabulary);
    expect_reference_tokens(tokenizer, "smollm2");
    expect_tinystories_tokens(tokenizer,
                              std::filesystem::path(QJIT_SHARED_MODELS_DIR).parent_path() / "smollm2" / "eval.seq.u32");
    // Decoding gives the text back.
    const std::string text = "Café naïve, 12345 \xF0\x9F\x98\x80!";
    EXPECT_EQ(vocabulary.decode(tokenizer.encode(text)), text);
}

TEST(TextTokenizer, Llama3AndQwen2PreTokenizersEqualLlamaCpp) {
    const std::filesystem::path path = qjit::test::smollm2_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch_model.sh)";
    const auto file = qjit::GgufFile::open(path.string());
    for (const auto& [pre, reference] : {std::pair{"llama-bpe", "smollm2-as-llama3"}, {"qwen2", "smollm2-as-qwen2"}}) {
        const ParsedVocabulary v(vocabulary_with_pre_tokenizer(*file, pre));
        expect_reference_tokens(TextTokenizer(*v.vocabulary), reference);
    }
}

TEST(TextTokenizer, Gemma3EqualsLlamaCpp) {
    const std::filesystem::path path = qjit::test::gemma3_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch_model.sh --gemma3)";
    const auto file = qjit::GgufFile::open(path.string());
    const GgufVocabulary vocabulary(*file);
    const TextTokenizer tokenizer(vocabulary);
    expect_reference_tokens(tokenizer, "gemma3");
    const std::filesystem::path eval = kData / "gemma3-270m" / "eval.seq.u32";
    if (std::filesystem::exists(eval)) expect_tinystories_tokens(tokenizer, eval);
    const std::string text = "Café naïve,  12345 \xF0\x9F\x98\x80!\n\nend";
    EXPECT_EQ(vocabulary.decode(tokenizer.encode(text, false)), text);
}
