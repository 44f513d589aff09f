// qjit-run's text modes: a prompt given as text (--prompt, --prompt-file) continued by sampling, its
// text printed as it comes, and a conversation (--chat) in the file's chat template, a turn per line
// of standard input. The options here are offered to qjit-run's parser like the runners' others.
#pragma once

#include <string>
#include <vector>

#include "io/gguf_file.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/llama_model.hpp"
#include "models/runner_options.hpp"
#include "models/sampler.hpp"
#include "models/text_generation.hpp"

namespace qjit_models {

struct TextOptions {
    std::string prompt;        // --prompt, or after check_text_options --prompt-file's contents
    std::string prompt_file;
    bool chat = false;
    std::string chat_template;  // --chat-template NAME: in place of the file's
    std::string system;         // --system: the conversation's system message
    SamplingOptions sampling;
    std::vector<std::string> stop_strings;
    bool sampling_given = false;  // any sampling option: they go with --prompt and --chat

    bool has_prompt() const { return !prompt.empty() || !prompt_file.empty(); }
};

OptionParse parse_text_option(ArgumentReader& args, TextOptions& options);
// After parsing: reads --prompt-file and checks that the options go together and the sampling
// options are in range; false after printing the problem on stderr.
bool check_text_options(TextOptions& options);
extern const char* const kTextOptionsUsage;

// The prompt's text as tokens (add_special: BOS as the file says; special tokens written in the
// text taken as text). Throws std::invalid_argument for an empty prompt or invalid UTF-8, naming it.
std::vector<int> tokenize_prompt(const GgufVocabulary& vocabulary, const std::string& prompt);

// The paragraphs of a UTF-8 text file (split at blank lines, each stripped of ASCII white space,
// empty ones skipped: as shared/smollm2's evaluation tokens were made), at most `limit` of them
// (0: all), each tokenized as tokenize_prompt does. Throws naming the file and the paragraph.
std::vector<std::vector<int>> tokenize_paragraphs(const GgufVocabulary& vocabulary, const std::string& path, int limit);

// The conversation of --chat over standard input and output; returns the exit status.
int run_chat(llama::Model& model, const qjit::GgufFile& file, const GgufVocabulary& vocabulary,
             const TextOptions& options, int max_tokens);

}  // namespace qjit_models
