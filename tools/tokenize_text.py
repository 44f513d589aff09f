#!/usr/bin/env python3
"""Token sequences (*.seq.u32) for qjit-run from a text, with a GGUF model's own vocabulary.

The text is split into paragraphs at blank lines ("\\n\\n"), each stripped of surrounding
whitespace, empty ones skipped (as shared/smollm2's evaluation tokens were made), and each
paragraph is tokenized by byte-level BPE (tokenizer.ggml.model "gpt2") with the vocabulary and
merges of the GGUF file (tokenizer.ggml.tokens, tokenizer.ggml.merges): split by the model's
pre-tokenizer (tokenizer.ggml.pre), each piece's UTF-8 bytes mapped to characters by GPT-2's
bytes_to_unicode, the adjacent pair of lowest merge rank merged until none is left. No BOS or EOS
is added and special tokens in the text are not parsed, as llama.cpp's llama_tokenize(...,
add_special=true, parse_special=false) does for models that add no BOS.

Output format: little-endian uint32 values: the number of sequences S, the S lengths, then all
tokens. With --compare REF.seq.u32 it also prints how many sequences and tokens agree with REF.

Needs the PyPI packages gguf (llama.cpp's reader) and regex (Unicode classes):
    pip install gguf regex

Example (the calibration set of docs/models.md: paragraphs 400.. of the TinyStories text):
    tools/tokenize_text.py --model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --text ../shared/models/text/tinystories_val.txt --first 400 --count 256 --out calibration.seq.u32
"""

import argparse
import struct
import sys

try:
    import gguf
    import regex
except ImportError as missing:
    sys.exit(f"tokenize_text.py: {missing}: pip install gguf regex")

# GPT-2's pattern; llama.cpp's pre-tokenizers are lists of patterns, each splitting the pieces of
# the one before (llama-vocab.cpp, unicode.cpp).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PRE_TOKENIZERS = {
    "gpt2": [GPT2_PATTERN],
    "default": [GPT2_PATTERN],
    # SmolLM2 (like StarCoder): digits one by one, then GPT-2's pattern
    "smollm": [r"\p{N}", GPT2_PATTERN],
    "starcoder": [r"\p{N}", GPT2_PATTERN],
}
ASCII_WHITESPACE = " \t\n\v\f\r"


def bytes_to_unicode():
    """GPT-2's table: printable Latin-1 bytes stand for themselves, the others for 256, 257, ..."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in kept:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def split_paragraphs(text):
    paragraphs = (part.strip(ASCII_WHITESPACE) for part in text.split("\n\n"))
    return [p for p in paragraphs if p]


def split_pieces(text, patterns):
    """Each pattern splits every piece into its matches and the text between them."""
    pieces = [text]
    for pattern in patterns:
        compiled = regex.compile(pattern)
        split = []
        for piece in pieces:
            at = 0
            for match in compiled.finditer(piece):
                if match.start() > at:
                    split.append(piece[at:match.start()])
                if match.end() > match.start():
                    split.append(match.group())
                at = match.end()
            if at < len(piece):
                split.append(piece[at:])
        pieces = split
    return pieces


class BytePairEncoder:
    def __init__(self, path):
        reader = gguf.GGUFReader(path)

        def field(key):
            if key not in reader.fields:
                sys.exit(f"tokenize_text.py: '{path}' has no metadata key {key}")
            return reader.fields[key].contents()

        model = field("tokenizer.ggml.model")
        if model != "gpt2":
            sys.exit(f"tokenize_text.py: '{path}': tokenizer.ggml.model is '{model}'; only byte-level BPE "
                     "('gpt2') is implemented")
        pre = field("tokenizer.ggml.pre") if "tokenizer.ggml.pre" in reader.fields else "default"
        if pre not in PRE_TOKENIZERS:
            sys.exit(f"tokenize_text.py: '{path}': pre-tokenizer '{pre}' is not implemented "
                     f"({', '.join(sorted(PRE_TOKENIZERS))} are)")
        self.patterns = PRE_TOKENIZERS[pre]
        self.ids = {token: i for i, token in enumerate(field("tokenizer.ggml.tokens"))}
        self.ranks = {tuple(merge.split(" ", 1)): rank for rank, merge in enumerate(field("tokenizer.ggml.merges"))}
        self.byte_chars = bytes_to_unicode()
        self.cache = {}

    def encode_piece(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        symbols = [self.byte_chars[b] for b in piece.encode("utf-8")]
        while len(symbols) > 1:
            pairs = [(self.ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
            ranked = [(rank, i) for rank, i in pairs if rank is not None]
            if not ranked:
                break
            best = min(ranked)[0]
            merged, i = [], 0
            while i < len(symbols):  # every occurrence of the best pair, left to right
                if i + 1 < len(symbols) and self.ranks.get((symbols[i], symbols[i + 1])) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        tokens = []
        for symbol in symbols:
            if symbol not in self.ids:
                sys.exit(f"tokenize_text.py: the vocabulary has no token {symbol!r} (from {piece!r})")
            tokens.append(self.ids[symbol])
        self.cache[piece] = tokens
        return tokens

    def encode(self, text):
        return [t for piece in split_pieces(text, self.patterns) for t in self.encode_piece(piece)]


def write_sequences(path, sequences):
    with open(path, "wb") as out:
        out.write(struct.pack(f"<{1 + len(sequences)}I", len(sequences), *map(len, sequences)))
        for sequence in sequences:
            out.write(struct.pack(f"<{len(sequence)}I", *sequence))


def read_sequences(path):
    data = open(path, "rb").read()
    values = struct.unpack(f"<{len(data) // 4}I", data[: len(data) // 4 * 4])
    count = values[0]
    lengths, at, sequences = values[1 : 1 + count], 1 + count, []
    for length in lengths:
        sequences.append(list(values[at : at + length]))
        at += length
    if at != len(values) or len(data) % 4:
        sys.exit(f"tokenize_text.py: '{path}' is not a *.seq.u32 file (its lengths do not add up)")
    return sequences


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="GGUF file whose vocabulary and merges to use")
    parser.add_argument("--text", required=True, help="UTF-8 text, paragraphs separated by blank lines")
    parser.add_argument("--out", help="the *.seq.u32 file to write")
    parser.add_argument("--first", type=int, default=0, help="first paragraph (default 0)")
    parser.add_argument("--count", type=int, default=0, help="paragraphs to take (default 0: all after --first)")
    parser.add_argument("--compare", help="a *.seq.u32 file of the same paragraphs to compare with")
    args = parser.parse_args()

    with open(args.text, encoding="utf-8") as text_file:
        paragraphs = split_paragraphs(text_file.read())
    last = len(paragraphs) if args.count <= 0 else args.first + args.count
    if args.first < 0 or last > len(paragraphs) or args.first >= last:
        sys.exit(f"tokenize_text.py: paragraphs {args.first}..{last - 1} are not within the text's {len(paragraphs)}")
    encoder = BytePairEncoder(args.model)
    sequences = [encoder.encode(p) for p in paragraphs[args.first : last]]
    if args.out:
        write_sequences(args.out, sequences)
        print(f"{args.out}: {len(sequences)} sequences, {sum(map(len, sequences))} tokens "
              f"(paragraphs {args.first}..{last - 1})")
    if args.compare:
        reference = read_sequences(args.compare)
        pairs = list(zip(sequences, reference))
        same = sum(a == b for a, b in pairs)
        tokens = sum(len(b) for _, b in pairs)
        same_tokens = sum(x == y for a, b in pairs for x, y in zip(a, b) if len(a) == len(b))
        print(f"against {args.compare}: {same} of {len(pairs)} sequences identical, "
              f"{same_tokens} of {tokens} tokens agree in sequences of equal length")
        for i, (a, b) in enumerate(pairs):
            if a != b:
                print(f"  first difference: sequence {i}: {len(a)} tokens here, {len(b)} there")
                break
        if len(sequences) != len(reference):
            print(f"  {len(sequences)} sequences here, {len(reference)} there")


if __name__ == "__main__":
    main()
