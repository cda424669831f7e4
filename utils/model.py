"""The whole Transformer: config, encoder, decoder, generator (notebook 09 derives it).

Shapes are batch first: token ids `(batch, seq)`, hidden states `(batch, seq, d_model)`,
logits `(batch, seq, vocab)`. Masks are boolean with `True` = may attend. Inputs are
checked at the door (the stacks' and `Transformer`'s forwards); the layers inside trust them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import Tensor, nn

from utils.cache import KVCache
from utils.checkpoint import Pretrained
from utils.checks import (
    check_bool,
    check_dropout,
    check_features,
    check_head_dims,
    check_mask,
    check_memory,
    check_positive_int,
    check_tokens,
)
from utils.embeddings import (
    InputEmbedding,
    LearnedPositionalEncoding,
    check_positional,
    tie_weights,
)
from utils.fast import use_fast_path
from utils.layers import DecoderLayer, EncoderLayer, LayerNorm, init_weights_
from utils.masks import causal_mask, padding_mask, target_mask
from utils.vocab import BOS_ID, EOS_ID, PAD_ID

__all__ = [
    "TransformerConfig",
    "Encoder",
    "Decoder",
    "Generator",
    "Transformer",
    "make_embedding",
    "count_parameters",
    "parameter_breakdown",
    "transformer_parameter_count",
]

# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder Transformer, with the paper's names.

    `dropout` is P_drop, one probability for every site. Embedding + position sums and
    sublayer outputs are the paper's (section 5.4); FFN hidden activations and attention
    weights come from Tensor2Tensor's later presets (`relu_dropout`, `attention_dropout`:
    0.1 in `transformer_base_v2`, 0 in `v1`) and PyTorch's `nn.TransformerEncoderLayer`,
    which uses one `dropout` everywhere. We follow PyTorch (notebook 07).

    `d_k`, `d_v` = `None` mean `d_model // n_heads` (resolved: `key_dim`, `value_dim`); kept
    `None` so `replace(d_model=...)` stays consistent. `tie_embeddings`: one matrix for both
    embeddings and the generator (section 3.4). `positional`: "sinusoidal" or "learned"
    (Table 3, row E). `fused`: build on the fast path (`utils.fast`).
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_layers: int = 6
    dropout: float = 0.1
    d_k: int | None = None
    d_v: int | None = None
    max_len: int = 5000
    norm_first: bool = False
    tie_embeddings: bool = False
    positional: str = "sinusoidal"
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    fused: bool = False

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("n_layers", self.n_layers)
        check_positive_int("max_len", self.max_len)
        check_head_dims(self.d_model, self.n_heads, self.d_k, self.d_v)
        check_dropout(self.dropout)
        for name in ("norm_first", "tie_embeddings", "fused"):
            check_bool(name, getattr(self, name))
        check_positional(self.positional, self.d_model)
        if self.tie_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"tie_embeddings=True needs one vocabulary, but src_vocab_size="
                f"{self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}"
            )
        if (
            not isinstance(self.pad_id, int)
            or isinstance(self.pad_id, bool)
            or not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size)
        ):
            raise ValueError(
                f"pad_id must be an int in [0, {min(self.src_vocab_size, self.tgt_vocab_size)}) "
                f"(a valid id in both vocabularies), got {self.pad_id!r}"
            )
        for name in ("bos_id", "eos_id"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not (0 <= value < self.tgt_vocab_size)
            ):
                raise ValueError(
                    f"{name} must be an int in [0, {self.tgt_vocab_size}) (a target id), "
                    f"got {value!r}"
                )
        if len({self.pad_id, self.bos_id, self.eos_id}) != 3:
            raise ValueError(
                f"pad_id, bos_id and eos_id must differ, got {self.pad_id}, {self.bos_id}, "
                f"{self.eos_id}"
            )

    @property
    def key_dim(self) -> int:
        """d_k, the per-head query/key width: `d_k` if given, else `d_model // n_heads`."""
        return self.d_model // self.n_heads if self.d_k is None else self.d_k

    @property
    def value_dim(self) -> int:
        """d_v, the per-head value width: `d_v` if given, else `d_model // n_heads`."""
        return self.d_model // self.n_heads if self.d_v is None else self.d_v

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with some fields changed (validated again), e.g. `cfg.replace(n_layers=2)`."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def base(
        cls, src_vocab_size: int = 37000, tgt_vocab_size: int | None = None, **overrides: Any
    ) -> TransformerConfig:
        """The paper's base model; one vocabulary means shared embeddings unless overridden."""
        return cls._preset(
            src_vocab_size,
            tgt_vocab_size,
            {"d_model": 512, "n_heads": 8, "d_ff": 2048, "n_layers": 6, "dropout": 0.1},
            overrides,
        )

    @classmethod
    def big(
        cls, src_vocab_size: int = 37000, tgt_vocab_size: int | None = None, **overrides: Any
    ) -> TransformerConfig:
        """The paper's big model, P_drop 0.3 (the paper used 0.1 for English-French)."""
        return cls._preset(
            src_vocab_size,
            tgt_vocab_size,
            {"d_model": 1024, "n_heads": 16, "d_ff": 4096, "n_layers": 6, "dropout": 0.3},
            overrides,
        )

    @classmethod
    def _preset(
        cls,
        src_vocab_size: int,
        tgt_vocab_size: int | None,
        sizes: dict[str, Any],
        overrides: dict[str, Any],
    ) -> TransformerConfig:
        tgt_vocab_size = src_vocab_size if tgt_vocab_size is None else tgt_vocab_size
        fields = {"tie_embeddings": src_vocab_size == tgt_vocab_size, **sizes, **overrides}
        return cls(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **fields)


def _check_config(config: object) -> None:
    if not isinstance(config, TransformerConfig):
        raise ValueError(f"config must be a TransformerConfig, got {type(config).__name__}")


# --------------------------------------------------------------------------------------------
# stacks
# --------------------------------------------------------------------------------------------


class _LayerArgs(TypedDict):
    """The keyword arguments of `EncoderLayer` and `DecoderLayer` (see `_layer_args`)."""

    d_model: int
    n_heads: int
    d_ff: int
    dropout: float
    norm_first: bool
    d_k: int | None
    d_v: int | None


def _layer_args(config: TransformerConfig) -> _LayerArgs:
    """The keyword arguments an `EncoderLayer` or `DecoderLayer` takes from the config."""
    return {
        "d_model": config.d_model,
        "n_heads": config.n_heads,
        "d_ff": config.d_ff,
        "dropout": config.dropout,
        "norm_first": config.norm_first,
        "d_k": config.d_k,
        "d_v": config.d_v,
    }


class Encoder(nn.Module):
    """N `EncoderLayer`s, plus a final `LayerNorm` when pre-norm (its stream is un-normalised).

    x `(batch, S, d_model)`, mask broadcastable to `(batch, n_heads, S, S)` -> same shape.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        _check_config(config)
        self.d_model, self.n_heads = config.d_model, config.n_heads
        layer_args = _layer_args(config)
        self.layers = nn.ModuleList(EncoderLayer(**layer_args) for _ in range(config.n_layers))
        self.norm = LayerNorm(config.d_model) if config.norm_first else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """`(batch, S, d_model)` -> `(batch, S, d_model)`; checks `x` and `mask`."""
        check_features("x", x, self.d_model)
        batch, length = x.shape[:2]
        if mask is not None:
            check_mask(mask, (batch, self.n_heads, length, length))
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    """N `DecoderLayer`s, plus a final `LayerNorm` when pre-norm.

    x `(batch, T, d_model)`, memory `(batch, S, d_model)`, tgt_mask broadcastable to
    `(batch, n_heads, T, T)`, memory_mask to `(batch, n_heads, T, S)` -> `(batch, T, d_model)`.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        _check_config(config)
        self.d_model, self.n_heads = config.d_model, config.n_heads
        layer_args = _layer_args(config)
        self.layers = nn.ModuleList(DecoderLayer(**layer_args) for _ in range(config.n_layers))
        self.norm = LayerNorm(config.d_model) if config.norm_first else None

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """`x (batch, T, d_model)`, `memory (batch, S, d_model)` -> `(batch, T, d_model)`.

        With `cache`, `x` holds only the new positions and `tgt_mask` is `(T, cache.length + T)`.
        """
        check_features("x", x, self.d_model)
        check_memory(x, memory, self.d_model)
        (batch, length), cached = x.shape[:2], 0
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise ValueError(f"cache must be a KVCache, got {cache!r}")
            cache.check(batch, len(self.layers), cross=True, memory=memory)
            cached = cache.length
        if tgt_mask is not None:
            check_mask(tgt_mask, (batch, self.n_heads, length, cached + length))
        if memory_mask is not None:
            check_mask(memory_mask, (batch, self.n_heads, length, memory.shape[1]))
        for i, layer in enumerate(self.layers):
            if cache is None:
                x = layer(x, memory, tgt_mask, memory_mask)
            else:
                x = layer(x, memory, tgt_mask, memory_mask, cache.self_attn[i], cache.cross_attn[i])
        return x if self.norm is None else self.norm(x)


class Generator(nn.Module):
    """Hidden `(batch, T, d_model)` -> logits `(batch, T, vocab)`: logits, not probabilities.

    The loss applies `log_softmax` itself; a softmax here trains the wrong objective (notebook 09).
    `bias=False` is GPT-2's and Llama's output layer (notebooks 15, 16).
    """

    def __init__(self, d_model: int, vocab_size: int, bias: bool = True) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("vocab_size", vocab_size)
        check_bool("bias", bias)
        self.d_model = d_model
        self.proj = nn.Linear(d_model, vocab_size, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> logits `(..., vocab_size)`."""
        return self.proj(x)


# --------------------------------------------------------------------------------------------
# the Transformer
# --------------------------------------------------------------------------------------------


def _embedding(config: TransformerConfig, vocab_size: int) -> InputEmbedding:
    return InputEmbedding(
        vocab_size,
        config.d_model,
        config.max_len,
        dropout=config.dropout,
        positional=config.positional,
        padding_idx=config.pad_id,
    )


def make_embedding(config: TransformerConfig, vocab_size: int) -> InputEmbedding:
    """The `InputEmbedding` `Transformer` builds: tokens `(batch, S)` -> `(batch, S, d_model)`."""
    _check_config(config)
    check_positive_int("vocab_size", vocab_size)
    return _embedding(config, vocab_size)


class Transformer(Pretrained, nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need" (figure 1).

    `forward(src, tgt)` = `generator(decode(tgt, encode(src)))`; masks default to padding
    (source) and padding & causal (target) from `config.pad_id`.

    Init (notebook 09 derives it): weight matrices Xavier-uniform; token embeddings
    N(0, 1/d_model), so after the √d_model scale they match the sinusoids' scale; learned
    positions N(0, 1/2); biases and LayerNorms PyTorch's defaults.

    src `(batch, S)`, tgt `(batch, T)` ids; src_mask usually `(batch, 1, 1, S)`, tgt_mask
    `(batch, 1, T, T)` or `(T, T)` -> logits `(batch, T, tgt_vocab_size)`.
    """

    kind = "transformer"  # in config.json (utils.checkpoint)
    config_class = TransformerConfig
    runtime_fields = ("fused",)  # the attention kernel: chosen when loading, not saved
    former_names = {"share_embeddings": "tie_embeddings"}  # format version 1's names

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        _check_config(config)
        self.config = config
        self.src_embed = _embedding(config, config.src_vocab_size)
        self.tgt_embed = _embedding(config, config.tgt_vocab_size)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.generator = Generator(config.d_model, config.tgt_vocab_size)
        if config.tie_embeddings:
            tie_weights(self.tgt_embed.token, self.src_embed.token)
            tie_weights(self.generator.proj, self.src_embed.token)
        self.reset_parameters()
        if config.fused:
            use_fast_path(self)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """(Re-)initialise every parameter as described in the class docstring."""
        embedding_tables = [  # token tables and learned positional tables
            p for embed in (self.src_embed, self.tgt_embed) for p in embed.parameters()
        ]
        for module in self.modules():
            if isinstance(module, nn.Linear | LayerNorm):
                module.reset_parameters()  # biases: PyTorch's defaults; LayerNorm: 1 and 0
        init_weights_(self, zero_biases=False, skip=embedding_tables)
        self.src_embed.token.reset_parameters()  # the shared matrix, when tied: once
        if not self.config.tie_embeddings:
            self.tgt_embed.token.reset_parameters()
        for embed in (self.src_embed, self.tgt_embed):
            if isinstance(embed.position, LearnedPositionalEncoding):
                embed.position.reset_parameters()  # N(0, 1/2), the sinusoids' scale

    def make_src_mask(self, src: Tensor) -> Tensor:
        """The default source mask: `src (batch, S)` -> padding mask `(batch, 1, 1, S)`."""
        return padding_mask(src, self.config.pad_id)

    def make_tgt_mask(self, tgt: Tensor) -> Tensor:
        """The default target mask: `tgt (batch, T)` -> padding & causal `(batch, 1, T, T)`."""
        return target_mask(tgt, self.config.pad_id)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Source ids `(batch, S)` -> memory `(batch, S, d_model)`; `src_mask` defaults: padding."""
        check_tokens(src, self.config.src_vocab_size, self.config.max_len, "src")
        if src_mask is None:
            src_mask = self.make_src_mask(src)
        return self.encoder(self.src_embed(src), src_mask)

    def init_cache(self) -> KVCache:
        """An empty key/value cache for incremental decoding with `decode(..., cache=...)`."""
        return KVCache(self.config.n_layers, cross=True)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Target ids `(batch, T)` and memory `(batch, S, d_model)` -> hidden `(batch, T, d_model)`.

        `memory_mask` cannot be rebuilt from `memory`: pass `encode`'s `src_mask`. With `cache`,
        `tgt` holds only the new positions, embedded at `cache.length ..`; `tgt_mask` defaults to
        causal `(T, cache.length + T)` and `cache.length` grows by T.
        """
        if cache is not None and not isinstance(cache, KVCache):
            raise ValueError(f"cache must be a KVCache (from init_cache()), got {cache!r}")
        offset = 0 if cache is None else cache.length
        check_tokens(tgt, self.config.tgt_vocab_size, self.config.max_len, "tgt", offset)
        if cache is None:
            if tgt_mask is None:
                tgt_mask = self.make_tgt_mask(tgt)
            return self.decoder(self.tgt_embed(tgt), memory, tgt_mask, memory_mask)
        x = self.tgt_embed(tgt, offset=offset)
        if tgt_mask is None:
            tgt_mask = causal_mask(tgt.shape[1], device=tgt.device, offset=offset)
        out = self.decoder(x, memory, tgt_mask, memory_mask, cache=cache)
        cache.length = offset + tgt.shape[1]
        return out

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
    ) -> Tensor:
        """Source ids `(batch, S)`, target ids `(batch, T)` -> logits `(batch, T, tgt_vocab)`.

        `tgt` is the target shifted right (starting with BOS): logits at t predict token t + 1.
        """
        memory = self.encode(src, src_mask)  # checks src first, so errors name it
        if src_mask is None:
            src_mask = self.make_src_mask(src)  # the mask encode used, for cross-attention
        return self.generator(self.decode(tgt, memory, tgt_mask, src_mask))


# --------------------------------------------------------------------------------------------
# parameter counts
# --------------------------------------------------------------------------------------------


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Scalar parameters of `module`, a shared Parameter once; buffers are not counted."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def parameter_breakdown(config: TransformerConfig) -> dict[str, int]:
    """The symbolic parameter count of `Transformer(config)` by part (notebook 09, Table 3).

    Attention 2·d·h·d_k + 2·d·h·d_v + 2·h·d_k + h·d_v + d; FFN 2·d·d_ff + d_ff + d; LayerNorm 2d.
    """
    _check_config(config)
    d, h, dk, dv, dff = (
        config.d_model,
        config.n_heads,
        config.key_dim,
        config.value_dim,
        config.d_ff,
    )
    attention = 2 * d * h * dk + 2 * d * h * dv + 2 * h * dk + h * dv + d
    ffn = 2 * d * dff + dff + d
    norm = 2 * d
    final_norm = norm if config.norm_first else 0
    shared = config.tie_embeddings
    positions = config.max_len * d if config.positional == "learned" else 0
    return {
        "src_embedding": config.src_vocab_size * d + positions,
        "tgt_embedding": (0 if shared else config.tgt_vocab_size * d) + positions,
        "encoder": config.n_layers * (attention + ffn + 2 * norm) + final_norm,
        "decoder": config.n_layers * (2 * attention + ffn + 3 * norm) + final_norm,
        "generator": (0 if shared else config.tgt_vocab_size * d) + config.tgt_vocab_size,
    }


def transformer_parameter_count(config: TransformerConfig) -> int:
    """The symbolic total of `parameter_breakdown(config)`; equals `count_parameters`."""
    return sum(parameter_breakdown(config).values())
