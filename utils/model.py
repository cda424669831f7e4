"""The whole Transformer: config, encoder, decoder, generator (notebook 09).

- `TransformerConfig`  frozen hyper-parameters with the paper's names; presets `base`, `big`
- `Encoder`, `Decoder` stacks of N layers (plus a final LayerNorm when pre-norm)
- `Generator`          the pre-softmax linear map to vocabulary logits
- `Transformer`        embeddings + encoder + decoder + generator; `encode` / `decode` / `forward`
- `count_parameters`, `parameter_breakdown`, `transformer_parameter_count`: measured vs
  symbolic parameter counts (the paper's Table 3)

Shapes are batch first: token ids `(batch, seq)`, hidden states `(batch, seq, d_model)`,
logits `(batch, seq, vocab)`. Masks are boolean with `True` = may attend.

Decoding (notebook 11) calls `encode` once and `decode` once per step. With a key/value
cache (`init_cache()`, a `utils.cache.KVCache`), each `decode` call takes only the new
target positions: they are embedded at their true positions (`cache.length` onwards), attend
to the cached keys/values, and the cross-attention projects the memory once per source.

Inputs are checked here, at the door (`Encoder.forward`, `Decoder.forward`, `Transformer`'s
`encode`, `decode` and `forward`, with the embeddings checking token ids); the layers inside
trust them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import Tensor, nn

from utils.cache import KVCache
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

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes of source and target.
        d_model: model width (512 base, 1024 big).
        n_heads: number of attention heads h (8 base, 16 big).
        d_ff: inner width of the feed-forward network (2048 base, 4096 big).
        n_layers: N, the number of layers of the encoder and, separately, of the decoder.
        dropout: P_drop, one probability for every dropout site. Where each site comes
            from: embedding + position sums and sublayer outputs (before the residual sum)
            are the paper's (section 5.4, "Residual Dropout"); FFN hidden activations and
            attention weights are not in the paper but in Tensor2Tensor's later presets
            (`relu_dropout` and `attention_dropout`, 0.1 in `transformer_base_v2`, 0 in
            `transformer_base_v1`) and in PyTorch's `nn.TransformerEncoderLayer` /
            `nn.TransformerDecoderLayer`, which use their one `dropout` at every site inside
            a layer (PyTorch has no embeddings). We follow PyTorch (notebook 07).
        d_k, d_v: per-head query/key and value widths; `None` means `d_model // n_heads`
            (use the properties `key_dim`, `value_dim` for the resolved numbers). Kept as
            `None` rather than filled in, so `dataclasses.replace(cfg, d_model=...)` stays
            consistent.
        max_len: longest sequence the positional encoding accepts.
        norm_first: pre-norm layers (+ final LayerNorms) instead of the paper's post-norm.
        share_embeddings: three-way weight tying (section 3.4): one matrix for the source
            embedding, the target embedding and the generator. Needs one shared vocabulary.
        positional: "sinusoidal" (the paper) or "learned" (Table 3, row E).
        pad_id: the padding token id, used to build masks when none are given.
        bos_id, eos_id: the begin- and end-of-sequence ids decoding starts and stops with
            (defaults: the book's `utils.vocab` ids).
        fused: build the model on the fast path (`utils.fast`): the same function in fewer
            kernels, no attention weights kept; what training uses.
            `utils.fast.use_fast_path(model, enabled)` switches it later.

    Raises:
        ValueError: for any inconsistent or out-of-range value, naming it.
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
    share_embeddings: bool = False
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
        for name in ("norm_first", "share_embeddings", "fused"):
            check_bool(name, getattr(self, name))
        check_positional(self.positional, self.d_model)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings=True needs one vocabulary, but src_vocab_size="
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
        """The paper's base model: d_model 512, h 8, d_ff 2048, N 6, P_drop 0.1.

        `tgt_vocab_size` defaults to `src_vocab_size`; with one vocabulary the embeddings are
        shared (as in the paper's 37000-token English-German BPE vocabulary) unless
        `share_embeddings=False` is passed.
        """
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
        """The paper's big model: d_model 1024, h 16, d_ff 4096, N 6, P_drop 0.3.

        (The paper used P_drop 0.1 for big English-French.) Vocabulary handling as `base`.
        """
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
        fields = {"share_embeddings": src_vocab_size == tgt_vocab_size, **sizes, **overrides}
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
    """N `EncoderLayer`s; with pre-norm (`config.norm_first`) a final `LayerNorm` follows.

    Pre-norm layers leave their residual stream un-normalised, so the stack ends with a
    LayerNorm (as `nn.TransformerEncoder(..., norm=LayerNorm)`); post-norm layers already
    end in one, and the paper has no extra norm, so then `norm` is `None`.

    Shapes:
        x: `(batch, S, d_model)`; mask: bool, `True` = may attend, broadcastable to
        `(batch, n_heads, S, S)`, usually `(batch, 1, 1, S)` -> `(batch, S, d_model)`.
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
    """N `DecoderLayer`s; with pre-norm a final `LayerNorm` follows (see `Encoder`).

    Shapes:
        x: `(batch, T, d_model)`; memory: `(batch, S, d_model)`;
        tgt_mask: broadcastable to `(batch, n_heads, T, T)`, usually `(batch, 1, T, T)`;
        memory_mask: broadcastable to `(batch, n_heads, T, S)`, usually `(batch, 1, 1, S)`
        -> `(batch, T, d_model)`.
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

        With `cache` (a `KVCache` with cross-attention caches, one per layer), `x` holds only
        the new positions and each layer reads and extends its caches; `tgt_mask` then covers
        the cached keys too, `(T, cache.length + T)`. Checks `x`, `memory`, the masks and
        the cache.
        """
        check_features("x", x, self.d_model)
        check_memory(x, memory, self.d_model)
        (batch, length), cached = x.shape[:2], 0
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise ValueError(f"cache must be a KVCache, got {cache!r}")
            cache.check(batch, len(self.layers), cross=True, memory_len=memory.shape[1])
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
    """The pre-softmax linear map: hidden `(batch, T, d_model)` -> logits `(batch, T, vocab)`.

    It returns *logits*, not probabilities: the loss (`nn.CrossEntropyLoss`, or label
    smoothing in notebook 10) applies `log_softmax` itself, fused and numerically stable.
    A softmax here would feed probabilities to a loss that expects logits and silently train
    on the wrong objective (notebook 09, pitfalls); greedy and beam search need only
    `log_softmax(logits)` or `argmax`, and sampling divides logits by a temperature first.

    Attributes:
        proj: `nn.Linear(d_model, vocab_size)`; its weight `(vocab_size, d_model)` has the
            shape of an embedding matrix, so it can be tied to one.
    """

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("vocab_size", vocab_size)
        self.d_model = d_model
        self.proj = nn.Linear(d_model, vocab_size)

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
    """The input block of either stack, built exactly as `Transformer` builds its own.

    An `InputEmbedding` (`token`: lookup scaled by √d_model, pad row `config.pad_id`;
    `position`: the encoding named by `config.positional`, with `config.dropout`): tokens
    `(batch, S)` -> `Dropout(Embed(tokens)·√d_model + PE)` `(batch, S, d_model)`. Notebooks 07
    and 08 use it to feed a bare `Encoder` or `Decoder`.
    """
    _check_config(config)
    check_positive_int("vocab_size", vocab_size)
    return _embedding(config, vocab_size)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need" (figure 1).

    `forward(src, tgt)` = `generator(decode(tgt, encode(src)))`, with masks built from
    `config.pad_id` when not given: a padding mask for the source (used by the encoder's
    self-attention and the decoder's cross-attention) and padding & causal for the target.

    Embeddings: `src_embed` and `tgt_embed` are `InputEmbedding`s (`token`: a TokenEmbedding
    scaled by √d_model; `position`: the positional encoding, with dropout). With
    `config.share_embeddings`, `tgt_embed.token.weight` and `generator.proj.weight` *are*
    `src_embed.token.weight` (one Parameter, counted and initialised once). The pad row
    starts at zero; the lookup gives it no gradient, but a tied generator does (the pad
    logit is part of every softmax), which is harmless: padded positions are masked.

    Initialisation (`reset_parameters`, run once at construction):
    - every other weight matrix (dim > 1: attention projections, FFN, an untied
      generator) is Xavier-uniform, as in the Annotated Transformer and `nn.Transformer`;
      it keeps activation variance roughly constant through each linear map;
    - token embeddings are N(0, 1/d_model) (with the pad row zero): after the √d_model
      scaling they have unit variance, the scale of the sinusoids they are added to, and a
      tied generator gives logits of about unit variance for LayerNorm-ed inputs.
      Xavier-uniform on a (37000 × 512) table would give std ≈ 0.007, so the scaled
      embeddings (std ≈ 0.16) would be drowned by the positional signal;
    - learned positional tables keep their module's N(0, 1/2) init (the sinusoids' mean
      square, so positions are not drowned by unit-variance tokens); biases and
      LayerNorms get PyTorch's defaults (`init_weights_(..., zero_biases=False)`; LayerNorm
      gain 1, bias 0).

    Shapes:
        src: `(batch, S)` token ids; tgt: `(batch, T)` token ids;
        src_mask: bool, broadcastable to `(batch, n_heads, S, S)` and `(batch, n_heads, T, S)`,
            usually `(batch, 1, 1, S)`; tgt_mask: bool, `(batch, 1, T, T)` or `(T, T)`.
        forward -> logits `(batch, T, tgt_vocab_size)`.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        _check_config(config)
        self.config = config
        self.src_embed = _embedding(config, config.src_vocab_size)
        self.tgt_embed = _embedding(config, config.tgt_vocab_size)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.generator = Generator(config.d_model, config.tgt_vocab_size)
        if config.share_embeddings:
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
        if not self.config.share_embeddings:
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
        """Source ids `(batch, S)` -> memory `(batch, S, d_model)`.

        `src_mask` defaults to `self.make_src_mask(src)` (padding).
        """
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

        The arguments of `Decoder.forward`, with token ids for `tgt`. `tgt_mask` defaults to
        `self.make_tgt_mask(tgt)` (padding & causal). `memory_mask` hides source padding from
        cross-attention; `decode` cannot rebuild it from `memory`, so pass the `src_mask`
        used in `encode` (`forward` does). `None` lets every query attend every memory
        position. Apply `generator` to get logits.

        With `cache` (from `init_cache()`), `tgt` holds only the *new* target positions:
        they are embedded at positions `cache.length ..`, `tgt_mask` defaults to the causal
        mask `(T, cache.length + T)` (no target padding: in decoding, positions after a
        sequence's `<eos>` are never read), and `cache.length` grows by T. The hidden states
        equal those of the full recomputation at the same positions (tests: 1e-5).
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

        `tgt` is the decoder input (the target shifted right, starting with BOS); logits at
        position t predict target token t + 1. Masks default to those built from `pad_id`.
        `encode` and `decode` check the inputs (a `tgt` of another batch size than `src`
        meets a memory of another batch size).
        """
        memory = self.encode(src, src_mask)  # checks src first, so errors name it
        if src_mask is None:
            src_mask = self.make_src_mask(src)  # the mask encode used, for cross-attention
        return self.generator(self.decode(tgt, memory, tgt_mask, src_mask))


# --------------------------------------------------------------------------------------------
# parameter counts
# --------------------------------------------------------------------------------------------


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """The number of scalar parameters of `module`, each shared Parameter counted once.

    `module.parameters()` already deduplicates by identity, so a matrix tied between the
    embeddings and the generator is counted once (a copy would be counted twice). Buffers
    such as the sinusoidal table are not parameters and are not counted.
    """
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def parameter_breakdown(config: TransformerConfig) -> dict[str, int]:
    """The symbolic parameter count of `Transformer(config)`, by part.

    With d = d_model, h = n_heads, N = n_layers, V_s / V_t the vocabulary sizes:
    - multi-head attention: W^Q, W^K (d × h·d_k), W^V (d × h·d_v), W^O (h·d_v × d) and
      biases: 2·d·h·d_k + 2·d·h·d_v + 2·h·d_k + h·d_v + d (= 4d² + 4d when h·d_k = h·d_v = d);
    - FFN: 2·d·d_ff + d_ff + d;   LayerNorm: 2d;
    - encoder layer: attention + FFN + 2 LayerNorms; decoder layer: 2 attentions + FFN +
      3 LayerNorms; pre-norm adds one final LayerNorm per stack;
    - embeddings: V_s·d + V_t·d, or V·d once with sharing; learned positions add
      max_len·d per side; the generator adds V_t·d (unless tied) + V_t (its bias).
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
    shared = config.share_embeddings
    positions = config.max_len * d if config.positional == "learned" else 0
    return {
        "src_embedding": config.src_vocab_size * d + positions,
        "tgt_embedding": (0 if shared else config.tgt_vocab_size * d) + positions,
        "encoder": config.n_layers * (attention + ffn + 2 * norm) + final_norm,
        "decoder": config.n_layers * (2 * attention + ffn + 3 * norm) + final_norm,
        "generator": (0 if shared else config.tgt_vocab_size * d) + config.tgt_vocab_size,
    }


def transformer_parameter_count(config: TransformerConfig) -> int:
    """The symbolic total of `parameter_breakdown(config)`.

    Equals `count_parameters(Transformer(config))` (the tests check it for several configs).
    """
    return sum(parameter_breakdown(config).values())
