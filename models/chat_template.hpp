// A conversation as the text a chat model was trained on. A GGUF file stores its chat template as
// Jinja (tokenizer.chat_template); qjit runs no Jinja: it recognises the common template families
// by markers in that text, as llama.cpp's llm_chat_detect_template does, and writes each family's
// format itself. docs/models.md#sampling-and-chat.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qjit_models {

struct ChatMessage {
    std::string role;     // system, user or assistant
    std::string content;
};

enum class ChatTemplate {
    chatml,             // <|im_start|>role\n...<|im_end|>\n: SmolLM2, Qwen2, Qwen2.5, Qwen3
    llama2,             // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]: Llama-2-chat
    llama3,             // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>: Llama 3, 3.1, 3.2, 3.3
    gemma,              // <start_of_turn>user|model\n...<end_of_turn>\n: Gemma, Gemma 2, Gemma 3
    phi3,               // <|role|>\n...<|end|>\n: Phi-3, Phi-3.5
    phi4,               // <|im_start|>role<|im_sep|>...<|im_end|>: Phi-4
    mistral_v7,         // [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] ...</s>: Mistral Large 2411
    mistral_v7_tekken,  // the same without the spaces: Mistral Small 3.1, 3.2
};

// The family's name, as --chat-template takes it: chatml, llama2, llama3, gemma, phi3, phi4,
// mistral-v7, mistral-v7-tekken (llama.cpp's names for the same formats).
std::string_view chat_template_name(ChatTemplate family);

// Every family, in the order of the names above.
std::span<const ChatTemplate> chat_template_families();

// The family of a Jinja template text. Throws std::runtime_error when it matches none: "the model's
// chat template is not one qjit knows (it starts with '...'): known families are chatml, ...".
ChatTemplate detect_chat_template(std::string_view template_text);

// The family a user names (--chat-template NAME). Throws std::runtime_error naming an unknown name
// and the known ones.
ChatTemplate chat_template_by_name(std::string_view name);

// The conversation in the family's format, with the assistant's opening after it when
// add_assistant_prompt (where the format has one). The leading BOS token is not written: the
// tokenizer adds it as the file's add_bos_token says. Special tokens inside the text (markers, and
// Llama 2's "</s><s>" between turns) are written as their text, for a tokenizer that parses special
// tokens. Throws std::runtime_error naming a message whose role is not system, user or assistant.
std::string format_chat(ChatTemplate family, std::span<const ChatMessage> messages, bool add_assistant_prompt);

// The texts that end the assistant's turn in this format: generation stops when one appears.
std::vector<std::string> chat_stop_strings(ChatTemplate family);

}  // namespace qjit_models
