"""stories260K (the llama2.c model in shared/models) written as a Llama GGUF file with the gguf
package's writer: fp32 tensors, named and shaped as llama.cpp's converter names them. llama2.c's
RoPE rotates adjacent pairs, as a "llama" GGUF model's does, so the q and k rows stay as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install gguf)")

MATRICES = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output",
            "w1": "ffn_gate", "w2": "ffn_down", "w3": "ffn_up"}


def write_llama_gguf(path: Path, config, weights: dict) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(config.n_layers)
    writer.add_embedding_length(config.dim)
    writer.add_feed_forward_length(config.hidden_dim)
    writer.add_head_count(config.n_heads)
    writer.add_head_count_kv(config.n_kv_heads)
    writer.add_context_length(config.seq_len)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>" for i in range(config.vocab_size)])
    writer.add_bos_token_id(1)
    f32 = lambda w: np.ascontiguousarray(w, dtype=np.float32)  # noqa: E731
    writer.add_tensor("token_embd.weight", f32(weights["token_embedding"]))
    for i in range(config.n_layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", f32(weights["rms_att"][i]))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", f32(weights["rms_ffn"][i]))
        for name, gguf_name in MATRICES.items():
            writer.add_tensor(f"blk.{i}.{gguf_name}.weight", f32(weights[name][i]))  # (N, K): dims {K, N}
    writer.add_tensor("output_norm.weight", f32(weights["rms_final"]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
