"""The building blocks of one Transformer layer (notebooks 06-08).

- `FeedForward`         the position-wise feed-forward network, FFN(x) = max(0, xW1 + b1)W2 + b2
- `LayerNorm`           layer normalisation with the *biased* variance, as `nn.LayerNorm`
- `SublayerConnection`  residual + dropout + LayerNorm around any sublayer, post- or pre-norm
- `EncoderLayer`        self-attention and FFN, each wrapped in a `SublayerConnection`
- `DecoderLayer`        masked self-attention, cross-attention and FFN, each wrapped likewise

Shapes are batch first: `x` is `(batch, seq, d_model)`. Masks are boolean with `True` = may
attend, broadcastable to `(batch, heads, queries, keys)` (build them with `utils.masks`).

Key/value cache (notebook 11): one design, `utils.attention.KVCache`. A layer's forward
takes the `AttentionCache` of each of its attention blocks (`cache` for `EncoderLayer`, which
the decoder-only model stacks under a causal mask; `self_cache` and `cross_cache` for
`DecoderLayer`) and hands it to `MultiHeadAttention`; the layer structure is unchanged.
`use_fast_path(module)` switches every attention block and LayerNorm to the fast path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.attention import AttentionCache, MultiHeadAttention
from utils.checks import (
    check_dropout,
    check_features,
    check_memory,
    check_optional_positive_int,
    check_positive_float,
    check_positive_int,
)
from utils.dropout import Dropout

__all__ = [
    "FeedForward",
    "LayerNorm",
    "SublayerConnection",
    "EncoderLayer",
    "DecoderLayer",
    "use_fast_path",
    "xavier_init_",
]


# --------------------------------------------------------------------------------------------
# position-wise feed-forward network (paper, section 3.3)
# --------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    """Position-wise feed-forward network: FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2).

    The same two linear maps act on every position independently (equivalently: two
    convolutions with kernel size 1). Dropout is applied to the hidden activations, after the
    ReLU. This dropout is *not* in the paper (section 5.4 drops only sublayer outputs and the
    embedding + position sums). It comes from Tensor2Tensor's later presets (`relu_dropout`,
    0.1 in `transformer_base_v2`; 0 in `transformer_base_v1`), and PyTorch's
    `nn.TransformerEncoderLayer` applies its one `dropout` at the same place, so we match it.

    Args:
        d_model: width of the input and output (512 in the base model).
        d_ff: width of the hidden layer (2048 in the base model).
        dropout: dropout probability on the hidden activations.

    Shapes:
        x: `(..., d_model)`, usually `(batch, seq, d_model)` -> `(..., d_model)`;
        hidden activations are `(..., d_ff)`.

    Attributes:
        linear1: `nn.Linear(d_model, d_ff)`, weight `(d_ff, d_model)` = W1ᵀ.
        linear2: `nn.Linear(d_ff, d_model)`, weight `(d_model, d_ff)` = W2ᵀ.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_dropout(dropout)
        self.d_model = d_model
        self.d_ff = d_ff
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = nn.ReLU()
        self.dropout = Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> `(..., d_model)`."""
        check_features("x", x, self.d_model, ndim=None)
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


# --------------------------------------------------------------------------------------------
# layer normalisation (Ba et al., 2016)
# --------------------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension, with a learned gain and bias.

    For each position, with μ and σ² the mean and the *biased* variance (divide by d_model,
    not d_model - 1) of its d_model features:

        LayerNorm(x) = weight ⊙ (x - μ) / sqrt(σ² + eps) + bias

    `eps` sits *inside* the square root. Both details match `nn.LayerNorm` (values and
    gradients); the unbiased `std` and `std + eps` used by some tutorials do not.

    Args:
        d_model: number of features normalised together.
        eps: added to the variance for numerical stability.
        fused: compute it with `torch.nn.functional.layer_norm`, one kernel instead of the
            six elementwise passes written out below (same numbers within float rounding).

    Shapes:
        x: `(..., d_model)` -> `(..., d_model)`.

    Attributes:
        weight: the gain, `(d_model,)`, initialised to ones.
        bias: `(d_model,)`, initialised to zeros.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, fused: bool = False) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_float("eps", eps)
        self.d_model = d_model
        self.eps = float(eps)
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Gain to ones, bias to zeros: at initialisation LayerNorm only standardises."""
        self.weight.fill_(1.0)
        self.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> `(..., d_model)`."""
        check_features("x", x, self.d_model, ndim=None)
        if self.fused:  # the same formula in one kernel (the fast path used for training)
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased: divide by d_model
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, fused={self.fused}"


# --------------------------------------------------------------------------------------------
# residual connection around a sublayer (paper, section 5.4 "Residual Dropout")
# --------------------------------------------------------------------------------------------


class SublayerConnection(nn.Module):
    """Residual connection, dropout and LayerNorm around a sublayer.

    - post-norm (the paper, `norm_first=False`): `norm(x + dropout(sublayer(x)))`;
    - pre-norm (`norm_first=True`, Xiong et al. 2020): `x + dropout(sublayer(norm(x)))`.

    The sublayer is passed to `forward` as a callable, so one wrapper serves
    self-attention (`lambda y: attn(y, y, y, mask)`), cross-attention and the FFN.

    Args:
        d_model: feature width.
        dropout: dropout probability applied to the sublayer's output before the residual sum.
        norm_first: pre-norm when True, post-norm (the paper) when False.

    Shapes:
        x: `(batch, seq, d_model)`; `sublayer` must map it to the same shape.

    Attributes:
        norm: the `LayerNorm(d_model)`.
    """

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_dropout(dropout)
        if not isinstance(norm_first, bool):
            raise ValueError(f"norm_first must be a bool, got {norm_first!r}")
        self.d_model = d_model
        self.norm_first = norm_first
        self.norm = LayerNorm(d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """`x` `(..., d_model)` -> `(..., d_model)`."""
        check_features("x", x, self.d_model, ndim=None)
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"


# --------------------------------------------------------------------------------------------
# encoder and decoder layers (paper, section 3.1 and figure 1)
# --------------------------------------------------------------------------------------------


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then the FFN, each in a `SublayerConnection`.

    Dropout sites, and where each comes from:
    - each sublayer's output, before the residual sum: the paper (section 5.4);
    - the FFN's hidden activations and the attention weights: not the paper, but
      Tensor2Tensor's `transformer_base_v2` (`relu_dropout`, `attention_dropout` = 0.1; both
      0 in `transformer_base_v1`) and PyTorch's `nn.TransformerEncoderLayer`, which uses its
      one `dropout` at all three places. We follow PyTorch so the parity tests hold; set
      `dropout` on the submodules separately to train exactly as the paper describes.

    Args:
        d_model, n_heads, d_ff: the paper's sizes.
        dropout: the one dropout probability used at all three places above.
        norm_first: pre-norm when True, post-norm (the paper) when False.
        d_k, d_v: per-head query/key and value widths; default `d_model // n_heads`.

    Shapes:
        x: `(batch, S, d_model)`; mask: boolean, `True` = may attend, broadcastable to
        `(batch, n_heads, S, S)`, usually a padding mask `(batch, 1, 1, S)`
        -> `(batch, S, d_model)`.

    Attributes:
        self_attn: `MultiHeadAttention`.
        ffn: `FeedForward`.
        sublayers: `nn.ModuleList` of two `SublayerConnection`s, [self-attention, FFN];
            `sublayers[i].norm` is PyTorch's `norm{i+1}`.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        d_k: int | None = None,
        d_v: int | None = None,
    ) -> None:
        super().__init__()
        _check_layer_config(d_model, n_heads, d_ff, dropout, d_k, d_v)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, d_k=d_k, d_v=d_v, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(
            SublayerConnection(d_model, dropout, norm_first) for _ in range(2)
        )

    def forward(
        self, x: Tensor, mask: Tensor | None = None, cache: AttentionCache | None = None
    ) -> Tensor:
        """`(batch, S, d_model)` -> `(batch, S, d_model)`.

        `cache` is for the decoder-only model (notebook 13), which stacks these same layers
        under a causal mask: the self-attention keys/values of earlier positions are kept
        there and `x` holds only the new positions.
        """
        check_features("x", x, self.d_model)
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, mask=mask, cache=cache))
        return self.sublayers[1](x, self.ffn)


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention, FFN, each in a sublayer.

    Self-attention lets each target position look at earlier target positions (`tgt_mask`
    makes it causal); cross-attention takes its queries from the decoder and its keys and
    values from the encoder output `memory` (`memory_mask` hides source padding).
    Incremental decoding (notebook 11) passes one `AttentionCache` to each attention.

    Args:
        d_model, n_heads, d_ff: the paper's sizes.
        dropout: dropout on sublayer outputs (the paper), FFN hidden activations and
            attention weights (Tensor2Tensor v2 and PyTorch; see `EncoderLayer`).
        norm_first: pre-norm when True, post-norm (the paper) when False.
        d_k, d_v: per-head query/key and value widths; default `d_model // n_heads`.

    Shapes:
        x: `(batch, T, d_model)`; memory: `(batch, S, d_model)`;
        tgt_mask: broadcastable to `(batch, n_heads, T, T)`, usually `(batch, 1, T, T)`;
        memory_mask: broadcastable to `(batch, n_heads, T, S)`, usually `(batch, 1, 1, S)`
        -> `(batch, T, d_model)`.

    Attributes:
        self_attn, cross_attn: `MultiHeadAttention`.
        ffn: `FeedForward`.
        sublayers: `nn.ModuleList` of three `SublayerConnection`s, [self-attention,
            cross-attention, FFN]; `sublayers[i].norm` is PyTorch's `norm{i+1}`.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        d_k: int | None = None,
        d_v: int | None = None,
    ) -> None:
        super().__init__()
        _check_layer_config(d_model, n_heads, d_ff, dropout, d_k, d_v)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, d_k=d_k, d_v=d_v, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, d_k=d_k, d_v=d_v, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(
            SublayerConnection(d_model, dropout, norm_first) for _ in range(3)
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        self_cache: AttentionCache | None = None,
        cross_cache: AttentionCache | None = None,
    ) -> Tensor:
        """`x` `(batch, T, d_model)`, `memory` `(batch, S, d_model)` -> `(batch, T, d_model)`.

        Incremental decoding (notebook 11) passes `self_cache` (keys/values of the earlier
        target positions; `x` is then only the new positions, and `tgt_mask` is
        `(T, T_cached + T)`) and `cross_cache` (the memory's keys/values, projected once).
        """
        check_features("x", x, self.d_model)
        check_memory(x, memory, self.d_model)
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask, self_cache))
        x = self.sublayers[1](
            x, lambda y: self.cross_attn(y, memory, memory, memory_mask, cross_cache)
        )
        return self.sublayers[2](x, self.ffn)


def _check_layer_config(
    d_model: object,
    n_heads: object,
    d_ff: object,
    dropout: object,
    d_k: object,
    d_v: object,
) -> None:
    check_positive_int("d_model", d_model)
    check_positive_int("n_heads", n_heads)
    check_positive_int("d_ff", d_ff)
    check_dropout(dropout)
    check_optional_positive_int("d_k", d_k)
    check_optional_positive_int("d_v", d_v)
    if (d_k is None or d_v is None) and d_model % n_heads != 0:  # type: ignore[operator]
        raise ValueError(
            f"n_heads={n_heads} must divide d_model={d_model} when d_k or d_v is not given"
        )


def use_fast_path(module: nn.Module, enabled: bool = True) -> nn.Module:
    """Switch every attention block, LayerNorm and Dropout inside `module` to the fast path
    (or back).

    The fast path (packed Q/K/V projections, PyTorch's fused attention kernel, one-kernel
    LayerNorm, dropout masks drawn from 16-bit random integers on a CPU, `utils.dropout`)
    computes the same function as the readable one within float rounding (dropout: the same
    distribution, p rounded to 2^-16, other random draws), keeps no attention weights, and
    is what training uses. Returns `module`.
    """
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be a bool, got {enabled!r}")
    for m in module.modules():
        if isinstance(m, MultiHeadAttention | LayerNorm | Dropout):
            m.fused = enabled
    return module


@torch.no_grad()
def xavier_init_(module: nn.Module) -> nn.Module:
    """Xavier-uniform every weight matrix (every parameter with dim > 1) of `module`, in place.

    The book's initialisation of attention and FFN matrices (the one
    `utils.model.Transformer.reset_parameters` gives them, notebook 09 section 4): it keeps
    an activation's variance roughly constant through each linear map. Biases and LayerNorm
    parameters (dim 1) keep their defaults. Do not call it on embedding tables: their
    initialisation is N(0, 1/d_model) (`TokenEmbedding.reset_parameters`). Returns `module`.
    """
    if not isinstance(module, nn.Module):
        raise ValueError(f"module must be an nn.Module, got {type(module).__name__}")
    for p in module.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return module
