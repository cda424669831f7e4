"""The modern decoder block: RMSNorm, rotary positions, SwiGLU, grouped-query attention
(notebook 16 derives them), and a Llama-style language model built from them.

Shapes follow the book: tokens `(B, T)`, activations `(B, T, d_model)`, heads
`(B, heads, T, d_head)`; masks are boolean, `True` = may attend. The attention core is the
book's (`utils.attention.scaled_dot_product_attention`, without its checks: `ModernLM` checks
its tokens once, at the door), the cache is notebook 11's (`utils.cache.KVCache`), the
initialisation is the book's (`utils.layers.init_weights_`).
`utils.llama` maps the weights of Hugging Face's `LlamaForCausalLM` into `ModernLM`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import utils.fast  # noqa: F401  (registers the "sdpa" backend that fused=True selects)
from utils.attention import attend, check_backend
from utils.cache import AttentionCache, KVCache, check_lm_input
from utils.checkpoint import Pretrained
from utils.checks import (
    check_bool,
    check_eval_mode,
    check_positive_float,
    check_positive_int,
    check_token_ids,
)
from utils.decoding import evaluation, greedy_search, sample
from utils.embeddings import TokenEmbedding, tie_weights
from utils.layers import init_weights_
from utils.masks import causal_mask
from utils.model import Generator

__all__ = [
    "RMSNorm",
    "rope_angles",
    "rotate_half",
    "apply_rotary",
    "RotaryEmbedding",
    "swiglu_hidden",
    "SwiGLU",
    "check_kv_heads",
    "repeat_kv",
    "GroupedQueryAttention",
    "ModernConfig",
    "ModernBlock",
    "ModernLM",
    "ModernScorer",
    "generate",
]


# --------------------------------------------------------------------------------------------
# RMSNorm (Zhang & Sennrich, 2019)
# --------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """weight ⊙ x / sqrt(mean(x²) + eps) over the last dim: `(..., d_model)` -> same.

    LayerNorm without the mean subtraction and without the bias: it rescales, it does not
    re-centre. eps sits inside the root, as in `torch.nn.RMSNorm` and Llama.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_float("eps", eps)
        self.d_model = d_model
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Gain to ones: at initialisation RMSNorm only rescales."""
        self.weight.fill_(1.0)

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> `(..., d_model)`."""
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(mean_square + self.eps))

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


# --------------------------------------------------------------------------------------------
# rotary position embedding (Su et al., 2021)
# --------------------------------------------------------------------------------------------


def _check_head_dim(d_head: object, name: str = "d_head") -> int:
    d_head = check_positive_int(name, d_head)
    if d_head % 2 != 0:
        raise ValueError(
            f"rotary positions rotate pairs of features: {name} must be even, got {d_head}"
        )
    return d_head


def rope_angles(positions: Tensor, d_head: int, base: float = 10000.0) -> Tensor:
    """Rotation angles `(..., d_head // 2)`: θ_{p,i} = p · base^(-2i / d_head), in float32.

    The frequencies of notebook 02's sinusoids, one per pair of features. Computed as
    Hugging Face's Llama does (float32 inverse frequencies times float32 positions), so the
    two agree bit for bit.
    """
    d_head = _check_head_dim(d_head)
    check_positive_float("base", base)
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float) / d_head))
    return positions.float()[..., None] * inv_freq.to(positions.device)


def rotate_half(x: Tensor) -> Tensor:
    """`(..., d)` -> `(..., d)`: `[x1, x2]` -> `[-x2, x1]`, halves of the last dim.

    Pairs feature i with feature i + d/2 (Hugging Face's / GPT-NeoX's layout), not 2i with
    2i + 1 (RoFormer's interleaved layout, Su et al.); the two differ by a fixed permutation of the
    features of W_q and W_k (notebook 16, section 2.3).
    """
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (x_i, x_{i+d/2}) of `x (..., T, d)` by its angle: x·cos + rot(x)·sin.

    `cos` and `sin` are `(T, d)` (the angles repeated for both halves), broadcast over the
    leading dims.
    """
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """The cos and sin tables `(max_len, d_head)` of rotary positions, and their application.

    `forward(q, k, offset)` rotates queries and keys `(B, h, T, d_head)` at positions
    `offset .. offset+T-1`; values are not rotated.
    """

    cos: Tensor
    sin: Tensor

    def __init__(self, d_head: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_head = _check_head_dim(d_head)
        self.max_len = check_positive_int("max_len", max_len)
        self.base = check_positive_float("base", base)
        angles = rope_angles(torch.arange(max_len), d_head, base)  # (max_len, d_head / 2)
        angles = torch.cat((angles, angles), dim=-1)  # both halves of a pair share an angle
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, max_len={self.max_len}, base={self.base:g}"

    def forward(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """`q (B, h, T, d_head)`, `k (B, h_kv, T, d_head)` -> both rotated, same shapes."""
        length = q.shape[-2]
        if offset + length > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + length - 1} exceed the rotary table's "
                f"max_len {self.max_len}"
            )
        cos = self.cos[offset : offset + length].to(q.dtype)
        sin = self.sin[offset : offset + length].to(q.dtype)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)


# --------------------------------------------------------------------------------------------
# SwiGLU feed-forward (Shazeer, 2020)
# --------------------------------------------------------------------------------------------


def swiglu_hidden(d_ff: int, multiple_of: int = 1) -> int:
    """The SwiGLU width with about the parameters of a ReLU FFN of width `d_ff`.

    A ReLU FFN has two matrices d_model × d_ff; SwiGLU has three d_model × d_ff', so
    d_ff' = 2/3 · d_ff, truncated to an integer and then rounded *up* to a multiple of
    `multiple_of` -- Llama's rule (`multiple_of=256`: 4 · 4096 -> 11008, 4 · 5120 -> 13824).
    """
    check_positive_int("d_ff", d_ff)
    check_positive_int("multiple_of", multiple_of)
    hidden = int(2 * d_ff / 3)
    return max(multiple_of, multiple_of * -(-hidden // multiple_of))


class SwiGLU(nn.Module):
    """FFN_SwiGLU(x) = (SiLU(x W_gate) ⊙ x W_up) W_down: `(..., d_model)` -> same.

    Hidden activations `(..., d_ff)`. No biases (Llama's choice, `bias=False`).
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_bool("bias", bias)
        self.d_model, self.d_ff = d_model, d_ff
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> `(..., d_model)`."""
        return self.down(F.silu(self.gate(x)) * self.up(x))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}"


# --------------------------------------------------------------------------------------------
# grouped-query attention (Ainslie et al., 2023)
# --------------------------------------------------------------------------------------------


def check_kv_heads(n_heads: object, n_kv_heads: object) -> int:
    """`n_kv_heads` if it is a positive int dividing `n_heads`, else `ValueError`."""
    n_heads = check_positive_int("n_heads", n_heads)
    n_kv_heads = check_positive_int("n_kv_heads", n_kv_heads)
    if n_heads % n_kv_heads != 0:
        raise ValueError(
            f"n_kv_heads must divide n_heads (each key/value head serves a group of "
            f"n_heads // n_kv_heads query heads), got n_heads={n_heads}, n_kv_heads={n_kv_heads}"
        )
    return n_kv_heads


def repeat_kv(x: Tensor, group_size: int) -> Tensor:
    """`(B, h_kv, S, d)` -> `(B, h_kv·group_size, S, d)`: query head i reads key/value head
    i // group_size (each head repeated `group_size` times in a row, like `repeat_interleave`).
    """
    if group_size == 1:
        return x
    batch, kv_heads, length, d_head = x.shape
    x = x[:, :, None].expand(batch, kv_heads, group_size, length, d_head)
    return x.reshape(batch, kv_heads * group_size, length, d_head)


class GroupedQueryAttention(nn.Module):
    """Self-attention with `n_heads` query heads sharing `n_kv_heads` key/value heads.

    `n_kv_heads == n_heads` is multi-head attention, `n_kv_heads == 1` multi-query attention
    (Shazeer, 2019). Rotary positions act on queries and keys after the projections. The
    cache keeps the `n_kv_heads` rotated keys and values, not the repeated ones: that is
    the memory GQA saves. x `(B, T, d_model)` -> `(B, T, d_model)`. `backend` names how
    `utils.attention.attend` computes the attention, as in `MultiHeadAttention` ("readable":
    the book's formula on repeated key/value heads; "sdpa": PyTorch's kernel, given the
    key/value heads as they are (`enable_gqa=True`); "flash": notebook 14's tiles).
    Inputs are not checked here, as in `utils.attention.MultiHeadAttention`: `ModernLM`
    checks at its door.
    """

    calls_attend = True  # its backend is set by `utils.attention.use_attention_backend`

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        d_k: int,
        max_len: int,
        rope_base: float = 10000.0,
        bias: bool = False,
        backend: str = "readable",
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        self.backend = check_backend(backend)  # a runtime choice: not in the state dict
        self.n_kv_heads = check_kv_heads(n_heads, n_kv_heads)
        self.n_heads, self.d_k = n_heads, _check_head_dim(d_k, "d_k")  # d_v = d_k, as in Llama
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_heads * d_k, bias=bias)
        self.w_o = nn.Linear(n_heads * d_k, d_model, bias=bias)
        self.rotary = RotaryEmbedding(d_k, max_len, rope_base)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, d_k={self.d_k}"

    def heads(self, x: Tensor, proj: nn.Linear, n: int) -> Tensor:
        """`(B, T, d_model)` -> `(B, n, T, d_k)` through `proj`."""
        batch, length, _ = x.shape
        return proj(x).view(batch, length, n, self.d_k).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        cache: AttentionCache | None = None,
        offset: int = 0,
    ) -> Tensor:
        """`x (B, T, d_model)` at positions `offset ..`; `mask` broadcastable to
        `(B, n_heads, T, offset + T)`; with `cache`, its keys/values are prepended and it grows.
        """
        q = self.heads(x, self.w_q, self.n_heads)
        k = self.heads(x, self.w_k, self.n_kv_heads)
        v = self.heads(x, self.w_v, self.n_kv_heads)
        q, k = self.rotary(q, k, offset)
        if cache is not None:
            k, v = cache.append(k, v)
        # each key/value head serves `group_size` query heads (repeat_kv, or the kernel's own
        # grouping); ModernLM checked the tokens and built the mask at its door
        out, _ = attend(q, k, v, mask, backend=self.backend)  # (B, n_heads, T, d_k)
        batch, _, length, _ = out.shape
        return self.w_o(out.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_k))


# --------------------------------------------------------------------------------------------
# the Llama-style model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModernConfig:
    """Hyper-parameters of `ModernLM`, in the names of the book's other configs.

    `n_kv_heads` defaults to `n_heads` (multi-head attention); `d_k`, the width of each head's
    queries, keys and values (Llama has d_v = d_k), to `d_model // n_heads`; `d_ff` to
    `swiglu_hidden(4 * d_model)`, the SwiGLU width with the parameters of the paper's
    4·d_model ReLU FFN. The defaults stay `None` in the config (so `replace(d_model=...)`
    moves them too) and are resolved by `kv_heads`, `key_dim` and `ff_dim`. The rest are
    Llama 1's: no biases, RMSNorm with `norm_eps` 1e-6 (Llama 2 and 3: 1e-5), rotary base
    10,000 (Llama 3: 500,000), untied output layer. `fused` switches attention to PyTorch's
    kernel (speed only, same outputs to float precision); it is chosen when loading, not
    saved (`utils.checkpoint`). The table of every config's names: docs/CONVENTIONS.md.
    """

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_k: int | None = None
    d_ff: int | None = None
    n_layers: int = 4
    max_len: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    tie_embeddings: bool = False
    fused: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_kv_heads(self.n_heads, self.kv_heads)
        if self.d_k is None and self.d_model % self.n_heads != 0:
            raise ValueError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model} when d_k "
                f"is not given (it defaults to d_model // n_heads)"
            )
        _check_head_dim(self.key_dim, "d_k")
        check_positive_int("d_ff", self.ff_dim)
        check_positive_float("rope_base", self.rope_base)
        check_positive_float("norm_eps", self.norm_eps)
        check_bool("tie_embeddings", self.tie_embeddings)
        check_bool("fused", self.fused)

    def replace(self, **changes: Any) -> ModernConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def kv_heads(self) -> int:
        """`n_kv_heads`, or `n_heads` when it is `None`."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def key_dim(self) -> int:
        """`d_k`, or `d_model // n_heads` when it is `None` (as `TransformerConfig.key_dim`)."""
        return self.d_model // self.n_heads if self.d_k is None else self.d_k

    @property
    def ff_dim(self) -> int:
        """`d_ff`, or `swiglu_hidden(4 * d_model)` when it is `None`."""
        return swiglu_hidden(4 * self.d_model) if self.d_ff is None else self.d_ff


class ModernBlock(nn.Module):
    """x + GQA(RMSNorm(x)), then + SwiGLU(RMSNorm(·)): a pre-norm layer, Llama's layout.

    x `(B, T, d_model)` -> same.
    """

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = GroupedQueryAttention(
            config.d_model,
            config.n_heads,
            config.kv_heads,
            config.key_dim,
            config.max_len,
            config.rope_base,
            backend="sdpa" if config.fused else "readable",
        )
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.ffn = SwiGLU(config.d_model, config.ff_dim)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        cache: AttentionCache | None = None,
        offset: int = 0,
    ) -> Tensor:
        """`(B, T, d_model)` -> `(B, T, d_model)`."""
        x = x + self.attn(self.attn_norm(x), mask, cache, offset)
        return x + self.ffn(self.ffn_norm(x))


class ModernLM(Pretrained, nn.Module):
    """A Llama-style decoder-only model: `forward(tokens (B, T), cache=None)` -> `(B, T, V)`.

    Token embedding (not scaled, no position table: rotary positions act inside attention),
    `n_layers` `ModernBlock`s, a final RMSNorm, and an output layer without bias.
    """

    kind = "modern"  # in config.json (utils.checkpoint)
    config_class = ModernConfig
    runtime_fields = ("fused",)  # the attention kernel: chosen when loading, not saved
    former_names = {  # format version 1's names
        "eps": "norm_eps",
        "d_head": "d_k",
        "lm_head.weight": "generator.proj.weight",
    }

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        if not isinstance(config, ModernConfig):
            raise ValueError(f"config must be a ModernConfig, got {type(config).__name__}")
        self.config = config
        self.embed = TokenEmbedding(config.vocab_size, config.d_model, scale=False)
        self.layers = nn.ModuleList(ModernBlock(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.generator = Generator(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            tie_weights(self.generator.proj, self.embed)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Xavier-uniform matrices (the book's policy); the embedding keeps N(0, 1/d_model)."""
        init_weights_(self, zero_biases=True, skip=self.embed.parameters())

    def init_cache(self) -> KVCache:
        """An empty key/value cache for `forward(..., cache=...)`: `n_kv_heads` per layer."""
        return KVCache(self.config.n_layers, cross=False)

    def forward(self, tokens: Tensor, cache: KVCache | None = None) -> Tensor:
        """`tokens (B, T)` -> logits `(B, T, vocab_size)`; logits at t predict token t + 1.

        With `cache`, `tokens` are the new positions `cache.length ..`.
        """
        config = self.config
        offset = check_lm_input(tokens, cache, config.vocab_size, config.max_len, config.n_layers)
        x = self.embed.lookup(tokens)  # the ids were checked above
        mask = causal_mask(tokens.shape[1], device=tokens.device, offset=offset)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None if cache is None else cache.self_attn[i], offset)
        if cache is not None:
            cache.length = offset + tokens.shape[1]
        return self.generator(self.norm(x))


class ModernScorer:
    """Next-token logits of a `ModernLM` for `utils.decoding` (greedy search, sampling).

    No sliding window: a sequence may grow to `max_len` tokens, the rotary table's length.
    """

    def __init__(self, model: ModernLM, use_cache: bool = True) -> None:
        if not isinstance(model, ModernLM):
            raise ValueError(f"model must be a utils.modern.ModernLM, got {type(model).__name__}")
        check_eval_mode(model)
        self.model = model
        self.device = next(model.parameters()).device  # where a prompt is moved
        self.max_positions = model.config.max_len
        self.cache = model.init_cache() if use_cache else None

    def next_logits(self, prefix: Tensor) -> Tensor:
        if self.cache is None:
            return self.model(prefix)[:, -1]
        return self.model(prefix[:, self.cache.length :], cache=self.cache)[:, -1]

    def reorder(self, index: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(index)


def generate(
    model: ModernLM,
    prompt: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    rng: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Continue `prompt (B, t0)` by `max_new_tokens` -> `(B, t0 + max_new_tokens)`.

    As `utils.gpt.generate`; the whole sequence must fit in `max_len` positions.
    """
    if not isinstance(model, ModernLM):  # before reading model.config
        raise ValueError(f"model must be a utils.modern.ModernLM, got {type(model).__name__}")
    check_token_ids(prompt, "prompt")
    check_positive_int("max_new_tokens", max_new_tokens)
    if prompt.shape[1] == 0:
        raise ValueError("prompt must hold at least one token")
    total = prompt.shape[1] + max_new_tokens
    if total > model.config.max_len:
        raise ValueError(
            f"prompt of {prompt.shape[1]} tokens + {max_new_tokens} new ones = {total} "
            f"positions, more than the model's max_len={model.config.max_len}"
        )
    with evaluation(model):
        scorer = ModernScorer(model, use_cache=use_cache)
        if greedy:
            return greedy_search(scorer, prompt, total, eos_id=None)
        return sample(
            scorer,
            prompt,
            total,
            eos_id=None,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            rng=rng,
        )
