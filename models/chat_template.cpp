#include "models/chat_template.hpp"

#include <array>
#include <stdexcept>

namespace qjit_models {

namespace {

struct FamilyName {
    ChatTemplate family;
    std::string_view name;
};

constexpr std::array<FamilyName, 8> kFamilies = {{
    {ChatTemplate::chatml, "chatml"},
    {ChatTemplate::llama2, "llama2"},
    {ChatTemplate::llama3, "llama3"},
    {ChatTemplate::gemma, "gemma"},
    {ChatTemplate::phi3, "phi3"},
    {ChatTemplate::phi4, "phi4"},
    {ChatTemplate::mistral_v7, "mistral-v7"},
    {ChatTemplate::mistral_v7_tekken, "mistral-v7-tekken"},
}};

constexpr std::array<ChatTemplate, kFamilies.size()> kFamilyList = [] {
    std::array<ChatTemplate, kFamilies.size()> list{};
    for (size_t i = 0; i < kFamilies.size(); ++i) list[i] = kFamilies[i].family;
    return list;
}();

std::string known_families() {
    std::string names;
    for (const FamilyName& entry : kFamilies) {
        if (!names.empty()) names += ", ";
        names += entry.name;
    }
    return names;
}

// The template's first characters, newlines shown as \n, for a message naming it.
std::string opening(std::string_view text) {
    constexpr size_t kShown = 60;
    std::string shown;
    for (const char c : text.substr(0, kShown)) shown += c == '\n' ? std::string("\\n") : std::string(1, c);
    if (text.size() > kShown) shown += "...";
    return shown;
}

// Jinja's trim and Python's str.strip(), for ASCII whitespace.
std::string_view trimmed(std::string_view text) {
    constexpr std::string_view kWhitespace = " \t\n\r\v\f";
    const size_t first = text.find_first_not_of(kWhitespace);
    if (first == std::string_view::npos) return {};
    return text.substr(first, text.find_last_not_of(kWhitespace) - first + 1);
}

void check_roles(std::span<const ChatMessage> messages) {
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string& role = messages[i].role;
        if (role != "system" && role != "user" && role != "assistant")
            throw std::runtime_error("chat message " + std::to_string(i + 1) + " of " + std::to_string(messages.size()) +
                                     " has the role '" + role + "'; the roles are system, user and assistant");
    }
}

// Each message as OPEN role MIDDLE content CLOSE: chatml, phi3, phi4. Phi-3.5's template skips an
// empty system message.
std::string format_role_tagged(std::span<const ChatMessage> messages, bool add_assistant_prompt, std::string_view open,
                               std::string_view middle, std::string_view close, bool skip_empty_system) {
    std::string text;
    for (const ChatMessage& message : messages) {
        if (skip_empty_system && message.role == "system" && message.content.empty()) continue;
        text.append(open).append(message.role).append(middle).append(message.content).append(close);
    }
    if (add_assistant_prompt) text.append(open).append("assistant").append(middle);
    return text;
}

// Llama 3: each content trimmed.
std::string format_llama3(std::span<const ChatMessage> messages, bool add_assistant_prompt) {
    std::string text;
    for (const ChatMessage& message : messages)
        text.append("<|start_header_id|>").append(message.role).append("<|end_header_id|>\n\n")
            .append(trimmed(message.content)).append("<|eot_id|>");
    if (add_assistant_prompt) text.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
    return text;
}

// Llama-2-chat: the system prompt inside the next user turn between <<SYS>> markers, that turn then
// stripped whole; every user turn but the first opens with <s> (the tokenizer writes the first);
// an assistant turn is " content </s>". The format's assistant prompt is the [/INST] that closes a
// user turn, so add_assistant_prompt adds nothing.
std::string format_llama2(std::span<const ChatMessage> messages) {
    std::string text;
    std::string system;
    bool first_user_turn = true;
    for (const ChatMessage& message : messages) {
        if (message.role == "system") {
            if (!system.empty()) system += '\n';
            system += message.content;
        } else if (message.role == "user") {
            std::string content = message.content;
            if (!system.empty()) {
                content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
                system.clear();
            }
            text.append(first_user_turn ? "" : "<s>").append("[INST] ").append(trimmed(content)).append(" [/INST]");
            first_user_turn = false;
        } else {
            text.append(" ").append(trimmed(message.content)).append(" </s>");
        }
    }
    return text;
}

// Gemma 3: no system role; the system prompt and a blank line open the next user turn (untrimmed,
// as Gemma 3's template writes it); the assistant is "model"; contents trimmed.
std::string format_gemma(std::span<const ChatMessage> messages, bool add_assistant_prompt) {
    std::string text;
    std::string system_prefix;
    for (const ChatMessage& message : messages) {
        if (message.role == "system") {
            system_prefix.append(message.content).append("\n\n");
            continue;
        }
        const bool user = message.role == "user";
        text.append("<start_of_turn>").append(user ? "user" : "model").append("\n");
        if (user) {
            text.append(system_prefix);
            system_prefix.clear();
        }
        text.append(trimmed(message.content)).append("<end_of_turn>\n");
    }
    if (add_assistant_prompt) text.append("<start_of_turn>model\n");
    return text;
}

// Mistral's v7 formats; the assistant's turn opens with the [/INST] that closes the user's.
std::string format_mistral_v7(std::span<const ChatMessage> messages, std::string_view space) {
    std::string text;
    for (const ChatMessage& message : messages) {
        if (message.role == "system")
            text.append("[SYSTEM_PROMPT]").append(space).append(message.content).append("[/SYSTEM_PROMPT]");
        else if (message.role == "user")
            text.append("[INST]").append(space).append(message.content).append("[/INST]");
        else
            text.append(space).append(message.content).append("</s>");
    }
    return text;
}

}  // namespace

std::string_view chat_template_name(ChatTemplate family) {
    for (const FamilyName& entry : kFamilies)
        if (entry.family == family) return entry.name;
    throw std::invalid_argument("chat_template_name: not a ChatTemplate value: " + std::to_string(int(family)));
}

std::span<const ChatTemplate> chat_template_families() { return kFamilyList; }

ChatTemplate chat_template_by_name(std::string_view name) {
    for (const FamilyName& entry : kFamilies)
        if (entry.name == name) return entry.family;
    throw std::runtime_error("unknown chat template '" + std::string(name) + "': known families are " + known_families());
}

// The markers llama.cpp's llm_chat_detect_template looks for, in its order where families share
// markers (Phi-4 and SmolVLM before ChatML). Templates llama.cpp formats in other ways than these
// families (Mistral v1/v3 without <<SYS>> or [SYSTEM_PROMPT], SmolVLM) are refused, not guessed.
ChatTemplate detect_chat_template(std::string_view template_text) {
    const auto contains = [template_text](std::string_view marker) {
        return template_text.find(marker) != std::string_view::npos;
    };
    if (contains("<|im_start|>")) {
        if (contains("<|im_sep|>")) return ChatTemplate::phi4;
        if (!contains("<end_of_utterance>")) return ChatTemplate::chatml;
    } else if (contains("[INST]")) {
        if (contains("[SYSTEM_PROMPT] ")) return ChatTemplate::mistral_v7;
        if (contains("[SYSTEM_PROMPT]")) return ChatTemplate::mistral_v7_tekken;
        if (contains("<<SYS>>")) return ChatTemplate::llama2;
    } else if (contains("<|assistant|>") && contains("<|end|>")) {
        return ChatTemplate::phi3;
    } else if (contains("<start_of_turn>")) {
        return ChatTemplate::gemma;
    } else if (contains("<|start_header_id|>") && contains("<|end_header_id|>")) {
        return ChatTemplate::llama3;
    }
    if (template_text.empty()) throw std::runtime_error("the model's chat template is empty: known families are " + known_families());
    throw std::runtime_error("the model's chat template is not one qjit knows (it starts with '" + opening(template_text) +
                             "'): known families are " + known_families());
}

std::string format_chat(ChatTemplate family, std::span<const ChatMessage> messages, bool add_assistant_prompt) {
    check_roles(messages);
    switch (family) {
        case ChatTemplate::chatml: return format_role_tagged(messages, add_assistant_prompt, "<|im_start|>", "\n", "<|im_end|>\n", false);
        case ChatTemplate::llama2: return format_llama2(messages);
        case ChatTemplate::llama3: return format_llama3(messages, add_assistant_prompt);
        case ChatTemplate::gemma: return format_gemma(messages, add_assistant_prompt);
        case ChatTemplate::phi3: return format_role_tagged(messages, add_assistant_prompt, "<|", "|>\n", "<|end|>\n", true);
        case ChatTemplate::phi4: return format_role_tagged(messages, add_assistant_prompt, "<|im_start|>", "<|im_sep|>", "<|im_end|>", false);
        case ChatTemplate::mistral_v7: return format_mistral_v7(messages, " ");
        case ChatTemplate::mistral_v7_tekken: return format_mistral_v7(messages, "");
    }
    throw std::invalid_argument("format_chat: not a ChatTemplate value: " + std::to_string(int(family)));
}

std::vector<std::string> chat_stop_strings(ChatTemplate family) {
    switch (family) {
        case ChatTemplate::chatml: return {"<|im_end|>", "<|endoftext|>"};
        case ChatTemplate::llama2: return {"</s>"};
        case ChatTemplate::llama3: return {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
        case ChatTemplate::gemma: return {"<end_of_turn>"};
        case ChatTemplate::phi3: return {"<|end|>", "<|endoftext|>"};
        case ChatTemplate::phi4: return {"<|im_end|>", "<|endoftext|>"};
        case ChatTemplate::mistral_v7:
        case ChatTemplate::mistral_v7_tekken: return {"</s>"};
    }
    throw std::invalid_argument("chat_stop_strings: not a ChatTemplate value: " + std::to_string(int(family)));
}

}  // namespace qjit_models
