#include "models/text_runner.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "models/chat_template.hpp"
#include "models/text_tokenizer.hpp"

namespace qjit_models {

namespace {

std::string read_file_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("'" + path + "' cannot be read: " + std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

const char* const kTextOptionsUsage =
    "  --prompt TEXT      generate after TEXT (tokenized with the file's own tokenizer; BOS as the file\n"
    "                     says), printing the text as it comes; --generate N caps the tokens (default 128)\n"
    "  --prompt-file F    the prompt from a UTF-8 file\n"
    "  --chat             a conversation in the file's chat template: one user turn per line of standard\n"
    "                     input, each reply printed as it comes; an empty line or end of input ends it\n"
    "  --chat-template T  the template family in place of the file's own (chatml, llama3, llama2, gemma, ...)\n"
    "  --system TEXT      --chat: the conversation's system message\n"
    "  --temperature T    0 (default): greedy; > 0: sample at this temperature (docs/models.md)\n"
    "  --top-k K          sample among the K most likely tokens (0, default: all)\n"
    "  --top-p P          ... the smallest set of probability >= P, in (0, 1] (1, default: all)\n"
    "  --min-p P          ... the tokens of probability >= P x the largest's, in [0, 1) (default 0)\n"
    "  --repeat-penalty R divide the logits of the last --repeat-last-n tokens (64) by R (default 1: off)\n"
    "  --seed S           the sampler's seed (default 0): the same seed, prompt and options repeat\n"
    "  --stop TEXT        end generation before TEXT (repeatable); EOS and end-of-turn tokens end it too\n";

OptionParse parse_text_option(ArgumentReader& args, TextOptions& options) {
    const std::string& arg = args.option();
    if (arg == "--prompt" || arg == "--prompt-file" || arg == "--chat-template" || arg == "--system" ||
        arg == "--stop") {
        const char* text = args.value();
        if (!text) return OptionParse::failed;
        if (arg == "--stop") options.stop_strings.emplace_back(text);
        else (arg == "--prompt" ? options.prompt : arg == "--prompt-file" ? options.prompt_file
              : arg == "--system" ? options.system : options.chat_template) = text;
        if (arg == "--prompt" && options.prompt.empty()) {
            std::fprintf(stderr, "--prompt: the prompt is empty\n");
            return OptionParse::failed;
        }
        return OptionParse::taken;
    }
    if (arg == "--chat") {
        options.chat = true;
        return OptionParse::taken;
    }
    if (arg == "--temperature" || arg == "--top-p" || arg == "--min-p" || arg == "--repeat-penalty") {
        const std::optional<double> v = args.real_value();  // its range is sampling_problem's
        if (!v) return OptionParse::failed;
        (arg == "--temperature" ? options.sampling.temperature : arg == "--top-p" ? options.sampling.top_p
         : arg == "--min-p" ? options.sampling.min_p : options.sampling.repeat_penalty) = float(*v);
        options.sampling_given = true;
        return OptionParse::taken;
    }
    if (arg == "--top-k" || arg == "--repeat-last-n") {
        const std::optional<int> v = args.int_value(0, 1 << 30);
        if (!v) return OptionParse::failed;
        (arg == "--top-k" ? options.sampling.top_k : options.sampling.repeat_last_n) = *v;
        options.sampling_given = true;
        return OptionParse::taken;
    }
    if (arg == "--seed") {
        const char* text = args.value();
        if (!text) return OptionParse::failed;
        char* end = nullptr;
        errno = 0;
        const unsigned long long seed = std::strtoull(text, &end, 10);
        if (*text == '\0' || *text == '-' || *end != '\0' || errno == ERANGE) {
            std::fprintf(stderr, "--seed: '%s' is not an integer in [0, 2^64)\n", text);
            return OptionParse::failed;
        }
        options.sampling.seed = seed;
        options.sampling_given = true;
        return OptionParse::taken;
    }
    return OptionParse::not_mine;
}

bool check_text_options(TextOptions& options) {
    const auto refuse = [](const std::string& message) {
        std::fprintf(stderr, "%s\n", message.c_str());
        return false;
    };
    if (!options.prompt.empty() && !options.prompt_file.empty()) return refuse("give --prompt or --prompt-file, not both");
    if (options.chat && options.has_prompt()) return refuse("--chat reads its turns from standard input: no --prompt");
    if (!options.chat && (!options.chat_template.empty() || !options.system.empty()))
        return refuse("--chat-template and --system go with --chat");
    if (!options.chat && !options.has_prompt() && (options.sampling_given || !options.stop_strings.empty()))
        return refuse("the sampling options and --stop go with --prompt, --prompt-file or --chat");
    if (const std::optional<std::string> problem = sampling_problem(options.sampling)) return refuse(*problem);
    if (!options.prompt_file.empty()) {
        try {
            options.prompt = read_file_text(options.prompt_file);
        } catch (const std::exception& e) {
            return refuse(std::string("--prompt-file ") + e.what());
        }
        if (options.prompt.empty()) return refuse("--prompt-file '" + options.prompt_file + "' is empty");
    }
    return true;
}

std::vector<int> tokenize_prompt(const GgufVocabulary& vocabulary, const std::string& prompt) {
    if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
    std::vector<int> tokens;
    try {
        tokens = TextTokenizer(vocabulary).encode(prompt);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("the prompt: ") + e.what());
    }
    if (tokens.empty()) throw std::invalid_argument("the prompt has no tokens");
    return tokens;
}

std::vector<std::vector<int>> tokenize_paragraphs(const GgufVocabulary& vocabulary, const std::string& path,
                                                  int limit) {
    const std::string text = read_file_text(path);
    const TextTokenizer tokenizer(vocabulary);
    constexpr std::string_view kSpace = " \t\n\v\f\r";
    std::vector<std::vector<int>> sequences;
    for (size_t at = 0; at < text.size() && (limit == 0 || sequences.size() < size_t(limit));) {
        const size_t end = std::min(text.find("\n\n", at), text.size());
        std::string_view paragraph = std::string_view(text).substr(at, end - at);
        at = end + 2;
        const size_t first = paragraph.find_first_not_of(kSpace);
        if (first == std::string_view::npos) continue;
        paragraph = paragraph.substr(first, paragraph.find_last_not_of(kSpace) - first + 1);
        try {
            sequences.push_back(tokenizer.encode(paragraph));
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument("'" + path + "', paragraph " + std::to_string(sequences.size()) + ": " +
                                        e.what());
        }
    }
    return sequences;
}

int run_chat(llama::Model& model, const qjit::GgufFile& file, const GgufVocabulary& vocabulary,
             const TextOptions& options, int max_tokens) {
    ChatTemplate chat_template;
    if (!options.chat_template.empty()) {
        chat_template = chat_template_by_name(options.chat_template);
    } else if (file.has("tokenizer.chat_template")) {
        chat_template = detect_chat_template(file.get_string("tokenizer.chat_template"));
    } else {
        throw std::runtime_error("'" + file.file_name() + "' has no chat template (tokenizer.chat_template): name "
                                 "one with --chat-template");
    }
    const TextTokenizer tokenizer(vocabulary);
    TextSession session(model, vocabulary);
    Sampler sampler(options.sampling);
    GenerationLimits limits;
    limits.max_tokens = max_tokens;
    limits.stop_strings = chat_stop_strings(chat_template);
    limits.stop_strings.insert(limits.stop_strings.end(), options.stop_strings.begin(), options.stop_strings.end());

    std::vector<ChatMessage> messages;
    if (!options.system.empty()) messages.push_back({"system", options.system});
    const bool interactive = isatty(STDIN_FILENO);
    std::string line;
    while (true) {
        if (interactive) std::fprintf(stderr, "> ");
        if (!std::getline(std::cin, line) || line.empty()) break;
        messages.push_back({"user", line});
        const std::string text = format_chat(chat_template, messages, true);
        std::vector<int> context;
        try {
            context = tokenizer.encode(text, true, true);
        } catch (const std::invalid_argument& e) {
            std::fprintf(stderr, "qjit-run: that line is not text: %s\n", e.what());
            messages.pop_back();
            continue;
        }
        if (int64_t(context.size()) >= model.config().seq_len)
            throw std::runtime_error("the conversation's " + std::to_string(context.size()) +
                                     " tokens fill the model's context of " + std::to_string(model.config().seq_len));
        const GeneratedText reply = session.generate(context, limits, sampler, [](std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        });
        std::printf("\n");
        std::fflush(stdout);
        messages.push_back({"assistant", reply.text});
    }
    return 0;
}

}  // namespace qjit_models
