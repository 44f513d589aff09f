// The pre-tokenizers of byte-level BPE vocabularies: the text is cut into pieces (words, number
// runs, punctuation runs, white space) before merges, and no merge crosses a piece's boundary. Each
// is named by the GGUF key tokenizer.ggml.pre and defined by its regular expression in the model's
// tokenizer.json; each is matched here by a scanner of its own, the alternatives tried in the
// expression's order:
//   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm  every number character a piece of its own, then gpt2 within the rest (StarCoder's)
//   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2   llama3 with \p{N} in place of \p{N}{1,3}
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qjit_models {

enum class PreTokenizer { gpt2, smollm, llama3, qwen2 };

// The pre-tokenizer of a tokenizer.ggml.pre name ("default" and a missing key are gpt2); throws
// std::runtime_error naming `name` and the known ones when it is none of them.
PreTokenizer pre_tokenizer_named(std::string_view name);

// The pieces of well-formed UTF-8 `text`, in order; together they are the whole text.
std::vector<std::string_view> split_pieces(PreTokenizer pre, std::string_view text);

}  // namespace qjit_models
