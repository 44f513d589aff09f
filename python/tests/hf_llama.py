"""A transformers LlamaForCausalLM holding stories260K's weights (the llama2.c model in
shared/models), computing what the llama2.c checkpoint computes: the tests' Hugging Face model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def llama2c_to_hf_rows(w, heads):
    """Reorders each head's rows of a query or key matrix from llama2.c's RoPE, which rotates the
    adjacent pairs (2i, 2i + 1), to Hugging Face's rotate_half, which rotates (i, i + head_size / 2):
    the even rows first, then the odd ones."""
    head_size = w.shape[0] // heads
    order = np.concatenate([np.arange(0, head_size, 2), np.arange(1, head_size, 2)])
    return w.reshape(heads, head_size, -1)[:, order].reshape(w.shape)


def hf_state_dict(config, weights):
    """stories260K's weights under LlamaForCausalLM's names, as float32 tensors."""
    names = {"self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv", "self_attn.o_proj": "wo",
             "mlp.gate_proj": "w1", "mlp.down_proj": "w2", "mlp.up_proj": "w3",
             "input_layernorm": "rms_att", "post_attention_layernorm": "rms_ffn"}
    state = {"model.embed_tokens.weight": weights["token_embedding"], "lm_head.weight": weights["token_embedding"],
             "model.norm.weight": weights["rms_final"]}
    for i in range(config.n_layers):
        for hf_name, name in names.items():
            w = weights[name][i]
            if name in ("wq", "wk"):
                w = llama2c_to_hf_rows(w, config.n_heads if name == "wq" else config.n_kv_heads)
            state[f"model.layers.{i}.{hf_name}.weight"] = w
    return {name: torch.from_numpy(np.array(w, dtype=np.float32)) for name, w in state.items()}


def hf_llama(config, weights):
    """A transformers LlamaForCausalLM computing what the llama2.c checkpoint does."""
    import transformers

    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.dim, intermediate_size=config.hidden_dim,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads, max_position_embeddings=config.seq_len, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=True,
        attention_bias=False, mlp_bias=False)
    model = transformers.LlamaForCausalLM(hf_config).eval()
    model.load_state_dict(hf_state_dict(config, weights))
    return model


@pytest.fixture(scope="module")
def hf_stories260k():
    pytest.importorskip("transformers")
    import shared_models

    return hf_llama(*shared_models.stories260k())


def logits_of(model, tokens):
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)[None]).logits[0]
