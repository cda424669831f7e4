"""A decoder-only language model from the book's own blocks (notebook 13 derives it).

A GPT block is the book's `EncoderLayer` under a causal mask. Shapes: token ids `(B, T)`,
logits `(B, T, vocab_size)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from utils.cache import KVCache, check_lm_input
from utils.checkpoint import Pretrained
from utils.checks import (
    check_bool,
    check_dropout,
    check_eval_mode,
    check_head_dims,
    check_positive_float,
    check_positive_int,
    check_token_ids,
)
from utils.decoding import evaluation, greedy_search, sample
from utils.embeddings import InputEmbedding, check_positional, tie_weights
from utils.fast import use_fast_path
from utils.layers import ACTIVATIONS, EncoderLayer, LayerNorm, init_weights_
from utils.masks import causal_mask
from utils.model import Generator

__all__ = ["GPTConfig", "GPT", "LMScorer", "generate"]


@dataclass(frozen=True)
class GPTConfig:
    """Hyper-parameters of the decoder-only model; shared fields as `utils.model.TransformerConfig`.

    `max_len` is the context. Defaults follow GPT-2: pre-norm, learned positions, tied embeddings.
    Three fields make it GPT-2 (notebook 15, `utils.gpt2`): `activation="gelu_tanh"` (the
    FFN's; `utils.layers.make_activation`), `scale_embeddings=False` (GPT-2 does not multiply
    the token lookup by √d_model) and `head_bias=False` (GPT-2's output layer has no bias);
    a fourth, `norm_eps` (every LayerNorm's eps, 1e-5 as GPT-2's), matters only for
    configurations that set another value. Their defaults are notebook 13's.
    """

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 512
    n_layers: int = 4
    dropout: float = 0.0
    max_len: int = 256
    norm_first: bool = True
    positional: str = "learned"
    tie_embeddings: bool = True
    fused: bool = False
    activation: str = "relu"
    norm_eps: float = 1e-5
    scale_embeddings: bool = True
    head_bias: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_head_dims(self.d_model, self.n_heads)
        check_dropout(self.dropout)
        check_positional(self.positional, self.d_model)
        for name in ("norm_first", "tie_embeddings", "fused", "scale_embeddings", "head_bias"):
            check_bool(name, getattr(self, name))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        check_positive_float("norm_eps", self.norm_eps)

    def replace(self, **changes: Any) -> GPTConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


class GPT(Pretrained, nn.Module):
    """Decoder-only Transformer: `forward(tokens (B, T), cache=None)` -> logits `(B, T, V)`.

    `layers` are `EncoderLayer`s under a causal mask; `norm` is the final pre-norm LayerNorm.
    Biases start at 0 (GPT-2's convention), unlike the encoder-decoder's.
    """

    kind = "gpt"  # in config.json (utils.checkpoint)
    config_class = GPTConfig
    runtime_fields = ("fused",)  # the attention kernel: chosen when loading, not saved

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.embed = InputEmbedding(
            config.vocab_size,
            config.d_model,
            config.max_len,
            dropout=config.dropout,
            positional=config.positional,
        )
        self.embed.token.scale = config.scale_embeddings
        self.layers = nn.ModuleList(
            EncoderLayer(
                config.d_model,
                config.n_heads,
                config.d_ff,
                config.dropout,
                norm_first=config.norm_first,
                activation=config.activation,
                eps=config.norm_eps,
            )
            for _ in range(config.n_layers)
        )
        self.norm = LayerNorm(config.d_model, eps=config.norm_eps) if config.norm_first else None
        self.generator = Generator(config.d_model, config.vocab_size, bias=config.head_bias)
        if config.tie_embeddings:
            tie_weights(self.generator.proj, self.embed.token)
        self.reset_parameters()
        if config.fused:
            use_fast_path(self)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Xavier-uniform matrices, zero biases; the embedding tables keep theirs."""
        init_weights_(self, zero_biases=True, skip=self.embed.parameters())

    def init_cache(self) -> KVCache:
        """An empty key/value cache (self-attention only) for `forward(..., cache=...)`."""
        return KVCache(self.config.n_layers, cross=False)

    def forward(self, tokens: Tensor, cache: KVCache | None = None) -> Tensor:
        """`tokens (B, T)` -> logits `(B, T, vocab_size)`; logits at t predict token t + 1.

        With `cache`, `tokens` are the new positions `cache.length ..`.
        """
        config = self.config
        offset = check_lm_input(tokens, cache, config.vocab_size, config.max_len, config.n_layers)
        x = self.embed(tokens, offset=offset)
        mask = causal_mask(tokens.shape[1], device=tokens.device, offset=offset)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None if cache is None else cache.self_attn[i])
        if cache is not None:
            cache.length = offset + tokens.shape[1]
        if self.norm is not None:
            x = self.norm(x)
        return self.generator(x)


class LMScorer:
    """Next-token logits of a `GPT`, for `utils.decoding` (greedy search, sampling).

    Past `max_len` tokens the window's start jumps forward by half the context (positions
    restart at 0); with `use_cache` the cache is rebuilt at each jump, so both paths agree.
    """

    slides = True  # longer than max_len is allowed (see above)

    def __init__(self, model: GPT, use_cache: bool = True) -> None:
        if not isinstance(model, GPT):
            raise ValueError(f"model must be a utils.gpt.GPT, got {type(model).__name__}")
        check_eval_mode(model)
        self.model = model
        self.use_cache = use_cache
        self.max_positions = model.config.max_len
        self.device = next(model.parameters()).device  # where a prompt is moved
        self.cache = model.init_cache() if use_cache else None
        self.start = 0

    def window_start(self, length: int) -> int:
        """Where the window starts for a sequence of `length` tokens."""
        context, hop = self.max_positions, max(1, self.max_positions // 2)
        if length <= context:
            return 0
        return ((length - context - 1) // hop + 1) * hop

    def next_logits(self, prefix: Tensor) -> Tensor:
        start = self.window_start(prefix.shape[1])
        if self.cache is None:
            return self.model(prefix[:, start:])[:, -1]
        if start != self.start:
            self.cache, self.start = self.model.init_cache(), start
        new = prefix[:, start + self.cache.length :]
        return self.model(new, cache=self.cache)[:, -1]

    def reorder(self, index: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(index)


def generate(
    model: GPT,
    prompt: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    rng: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Continue `prompt (B, t0)` by `max_new_tokens` tokens -> `(B, t0 + max_new_tokens)`.

    Sampling (temperature, top-k, top-p; a seeded `rng` reproduces it) or greedy.
    """
    if not isinstance(model, GPT):  # before reading model.config
        raise ValueError(f"model must be a utils.gpt.GPT, got {type(model).__name__}")
    check_token_ids(prompt, "prompt")
    check_positive_int("max_new_tokens", max_new_tokens)
    if prompt.shape[1] == 0:
        raise ValueError("prompt must hold at least one token")
    if prompt.shape[1] > model.config.max_len:
        raise ValueError(
            f"prompt of {prompt.shape[1]} tokens is longer than the context "
            f"max_len={model.config.max_len}"
        )
    if prompt.numel() and (int(prompt.min()) < 0 or int(prompt.max()) >= model.config.vocab_size):
        raise ValueError(
            f"prompt ids must be in [0, {model.config.vocab_size}), got "
            f"[{int(prompt.min())}, {int(prompt.max())}]"
        )
    max_len = prompt.shape[1] + max_new_tokens
    with evaluation(model):
        scorer = LMScorer(model, use_cache=use_cache)
        if greedy:
            return greedy_search(scorer, prompt, max_len, eos_id=None)
        return sample(
            scorer,
            prompt,
            max_len,
            eos_id=None,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            rng=rng,
        )
