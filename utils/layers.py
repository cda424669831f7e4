"""The building blocks of one Transformer layer (notebooks 06-08).

- `FeedForward`         the position-wise feed-forward network, FFN(x) = max(0, xW1 + b1)W2 + b2
- `LayerNorm`           layer normalisation with the *biased* variance, as `nn.LayerNorm`
- `SublayerConnection`  residual + dropout + LayerNorm around any sublayer, post- or pre-norm
- `EncoderLayer`        self-attention and FFN, each wrapped in a `SublayerConnection`
- `DecoderLayer`        masked self-attention, cross-attention and FFN, each wrapped likewise

Shapes are batch first: `x` is `(batch, seq, d_model)`. Masks are boolean with `True` = may
attend, broadcastable to `(batch, heads, queries, keys)` (build them with `utils.masks`).

Key/value cache (notebook 11): one design, `utils.cache.KVCache`. A layer's forward
takes the `AttentionCache` of each of its attention blocks (`cache` for `EncoderLayer`, which
the decoder-only model stacks under a causal mask; `self_cache` and `cross_cache` for
`DecoderLayer`) and hands it to `MultiHeadAttention`; the layer structure is unchanged.

Constructors check their arguments; `forward`s trust their callers (the stacks of
`utils.model` check inputs and masks once). `init_weights_` is the book's initialisation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from utils.attention import MultiHeadAttention
from utils.cache import AttentionCache
from utils.checks import check_bool, check_dropout, check_positive_float, check_positive_int

__all__ = [
    "FeedForward",
    "LayerNorm",
    "SublayerConnection",
    "EncoderLayer",
    "DecoderLayer",
    "init_weights_",
]


# --------------------------------------------------------------------------------------------
# position-wise feed-forward network (paper, section 3.3)
# --------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    """Position-wise feed-forward network: FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2).

    The same two linear maps act on every position independently (equivalently: two
    convolutions with kernel size 1). Dropout acts on the hidden activations, after the ReLU,
    where PyTorch's `nn.TransformerEncoderLayer` puts it (not in the paper; its provenance:
    `utils.model.TransformerConfig`).

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
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> `(..., d_model)`."""
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

    Shapes:
        x: `(..., d_model)` -> `(..., d_model)`.

    Attributes:
        weight: the gain, `(d_model,)`, initialised to ones.
        bias: `(d_model,)`, initialised to zeros.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_float("eps", eps)
        self.d_model = d_model
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Gain to ones, bias to zeros: at initialisation LayerNorm only standardises."""
        self.weight.fill_(1.0)
        self.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> `(..., d_model)`."""
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased: divide by d_model
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


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
        check_bool("norm_first", norm_first)
        self.d_model = d_model
        self.norm_first = norm_first
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """`x` `(..., d_model)` -> `(..., d_model)`."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"


# --------------------------------------------------------------------------------------------
# encoder and decoder layers (paper, section 3.1 and figure 1)
# --------------------------------------------------------------------------------------------


class _Layer(nn.Module):
    """What an encoder and a decoder layer hold: self-attention, cross-attention (decoder
    only), the FFN, and one `SublayerConnection` per sublayer, built in that order."""

    cross: bool  # True in a decoder layer: a cross-attention sublayer after self-attention

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
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, d_k=d_k, d_v=d_v, dropout=dropout)
        if self.cross:
            self.cross_attn = MultiHeadAttention(
                d_model, n_heads, d_k=d_k, d_v=d_v, dropout=dropout
            )
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(
            SublayerConnection(d_model, dropout, norm_first) for _ in range(3 if self.cross else 2)
        )


class EncoderLayer(_Layer):
    """One encoder layer: self-attention, then the FFN, each in a `SublayerConnection`.

    Dropout (one `dropout` for all sites, as PyTorch's `nn.TransformerEncoderLayer`; see
    `utils.model.TransformerConfig` for where each site comes from) acts on each sublayer's
    output, the FFN's hidden activations and the attention weights. `sublayers[i].norm` is
    PyTorch's `norm{i+1}`. `d_k`, `d_v` default to `d_model // n_heads`.

    Shapes: x `(batch, S, d_model)`, mask bool (`True` = may attend) broadcastable to
    `(batch, n_heads, S, S)`, usually `(batch, 1, 1, S)` -> `(batch, S, d_model)`.
    """

    cross = False

    def forward(
        self, x: Tensor, mask: Tensor | None = None, cache: AttentionCache | None = None
    ) -> Tensor:
        """`(batch, S, d_model)` -> `(batch, S, d_model)`.

        `cache` is for decoder-only use (`utils.gpt`, notebook 13): under a causal mask this
        layer is a GPT block, `x` holds only the new positions and the self-attention keys
        and values of the earlier ones are kept in `cache`.
        """
        # Y = LayerNorm(X + Dropout(MultiHead(X, X, X))); out = LayerNorm(Y + Dropout(FFN(Y)))
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, mask=mask, cache=cache))
        return self.sublayers[1](x, self.ffn)


class DecoderLayer(_Layer):
    """One decoder layer: masked self-attention, cross-attention, FFN, each in a sublayer.

    Self-attention sees earlier target positions (`tgt_mask` makes it causal); cross-attention
    takes its queries from the decoder and its keys and values from the encoder output
    `memory` (`memory_mask` hides source padding). Sizes and dropout as `EncoderLayer`;
    `sublayers` = [self-attention, cross-attention, FFN], `sublayers[i].norm` is PyTorch's
    `norm{i+1}`.

    Shapes: x `(batch, T, d_model)`, memory `(batch, S, d_model)`, tgt_mask broadcastable to
    `(batch, n_heads, T, T)`, memory_mask to `(batch, n_heads, T, S)` -> `(batch, T, d_model)`.
    """

    cross = True

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
        # post-norm: Y = LayerNorm(X + Dropout(MultiHead(X, X, X), causal)),
        # Z = LayerNorm(Y + Dropout(MultiHead(Y, M, M))), out = LayerNorm(Z + Dropout(FFN(Z)))
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask, self_cache))
        x = self.sublayers[1](
            x, lambda y: self.cross_attn(y, memory, memory, memory_mask, cross_cache)
        )
        return self.sublayers[2](x, self.ffn)


@torch.no_grad()
def init_weights_(
    module: nn.Module, *, zero_biases: bool, skip: Iterable[nn.Parameter] = ()
) -> nn.Module:
    """The book's initialisation, in place: Xavier-uniform every weight matrix of `module`
    (every parameter with dim > 1) except those in `skip`; returns `module`.

    Xavier keeps an activation's variance roughly constant through each linear map (notebook
    09 section 4). One argument tells the two models apart, and must stay as it is, because
    every trained number of the book depends on it:
    - `zero_biases=False`: biases keep what they have, PyTorch's default uniform draw (the
      encoder-decoder `utils.model.Transformer` and `nn.Transformer`, notebooks 06-09);
    - `zero_biases=True`: every `nn.Linear` bias becomes 0 (GPT-2's convention, `utils.gpt`).
    LayerNorm parameters (dim 1) keep gain 1 and bias 0. Embedding tables belong in `skip`:
    theirs is N(0, 1/d_model) (`TokenEmbedding.reset_parameters`). Draws happen in the order of
    `module.parameters()` (a shared matrix once), so a seed gives the same weights.
    """
    if not isinstance(module, nn.Module):
        raise ValueError(f"module must be an nn.Module, got {type(module).__name__}")
    skipped = {id(p) for p in skip}
    for p in module.parameters():
        if p.dim() > 1 and id(p) not in skipped:
            nn.init.xavier_uniform_(p)
    if zero_biases:
        for m in module.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
    return module
