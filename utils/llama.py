"""Hugging Face's `LlamaForCausalLM` weights in the book's `ModernLM` (notebook 16).

`utils` does not import `transformers`: the functions read a config's attributes and a
state dict's tensors, so any object with Llama's names works. Checked against
`transformers.LlamaForCausalLM` in `tests/test_modern.py` and notebook 16.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from utils.modern import ModernConfig, ModernLM

__all__ = ["config_from_llama", "llama_key_map", "load_llama_state_dict", "from_llama"]


def config_from_llama(hf_config: Any, max_len: int | None = None) -> ModernConfig:
    """The `ModernConfig` of a `transformers.LlamaConfig` (read by attribute name).

    `max_len` defaults to `max_position_embeddings`. Refused, with a `ValueError`: options
    the book's block does not have (biases, a RoPE other than the default, a hidden
    activation other than SiLU).
    """
    for name, wanted in (("attention_bias", False), ("mlp_bias", False), ("hidden_act", "silu")):
        got = getattr(hf_config, name, wanted)
        if got != wanted:
            raise ValueError(f"the book's block needs {name}={wanted!r}, got {got!r}")
    rope = getattr(hf_config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"only the default rotary positions are supported, got {rope!r}")
    base = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    return ModernConfig(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        n_heads=hf_config.num_attention_heads,
        n_kv_heads=hf_config.num_key_value_heads,
        d_k=getattr(hf_config, "head_dim", None)
        or hf_config.hidden_size // hf_config.num_attention_heads,
        d_ff=hf_config.intermediate_size,
        n_layers=hf_config.num_hidden_layers,
        max_len=max_len if max_len is not None else hf_config.max_position_embeddings,
        rope_base=float(base),
        norm_eps=float(hf_config.rms_norm_eps),
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
    )


def llama_key_map(n_layers: int) -> dict[str, str]:
    """Hugging Face's parameter names -> the book's, for a model of `n_layers` layers."""
    names = {
        "model.embed_tokens.weight": "embed.weight",
        "model.norm.weight": "norm.weight",
        "lm_head.weight": "generator.proj.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn.w_q.weight",
        "self_attn.k_proj.weight": "attn.w_k.weight",
        "self_attn.v_proj.weight": "attn.w_v.weight",
        "self_attn.o_proj.weight": "attn.w_o.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn.gate.weight",
        "mlp.up_proj.weight": "ffn.up.weight",
        "mlp.down_proj.weight": "ffn.down.weight",
    }
    for i in range(n_layers):
        for theirs, ours in per_layer.items():
            names[f"model.layers.{i}.{theirs}"] = f"layers.{i}.{ours}"
    return names


@torch.no_grad()
def load_llama_state_dict(model: ModernLM, state_dict: Mapping[str, Tensor]) -> ModernLM:
    """Copy a `LlamaForCausalLM` state dict into `model`, in place; returns `model`.

    Every one of the model's parameters must be filled and every key used (a tied model may
    omit `lm_head.weight`); shapes must match. `ValueError` says which keys do not.
    """
    if not isinstance(model, ModernLM):
        raise ValueError(f"model must be a utils.modern.ModernLM, got {type(model).__name__}")
    key_map = llama_key_map(model.config.n_layers)
    ours = dict(model.named_parameters(remove_duplicate=False))
    tied = model.config.tie_embeddings
    unknown = sorted(set(state_dict) - set(key_map))
    if unknown:
        raise ValueError(f"state dict keys the book's model does not have: {unknown[:5]}")
    needed = set(key_map) - ({"lm_head.weight"} if tied else set())
    missing = sorted(needed - set(state_dict))
    if missing:
        raise ValueError(f"state dict lacks {len(missing)} keys, e.g. {missing[:5]}")
    for theirs, tensor in state_dict.items():
        target: nn.Parameter = ours[key_map[theirs]]
        if target.shape != tensor.shape:
            raise ValueError(
                f"{theirs}: expected shape {tuple(target.shape)} for {key_map[theirs]}, "
                f"got {tuple(tensor.shape)}"
            )
        target.copy_(tensor)
    return model


def from_llama(hf_model: nn.Module, max_len: int | None = None) -> ModernLM:
    """A `ModernLM` with the weights of a `transformers.LlamaForCausalLM` (float32)."""
    hf_config = getattr(hf_model, "config", None)
    if hf_config is None or not hasattr(hf_config, "num_attention_heads"):
        raise ValueError(f"hf_model must be a LlamaForCausalLM, got {type(hf_model).__name__}")
    config = config_from_llama(hf_config, max_len)
    model = ModernLM(config)
    state = {k: v.float() for k, v in hf_model.state_dict().items()}
    if config.tie_embeddings:
        state.pop("lm_head.weight", None)
    return load_llama_state_dict(model, state)
