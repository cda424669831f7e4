"""The building blocks of one Transformer layer (notebooks 06-08 derive them).

Shapes are batch first: `x` is `(batch, seq, d_model)`. Masks are boolean with `True` = may
attend, broadcastable to `(batch, heads, queries, keys)` (`utils.masks`). Constructors check
their arguments; `forward`s trust their callers (the stacks of `utils.model`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from utils.attention import MultiHeadAttention
from utils.cache import AttentionCache
from utils.checks import check_bool, check_dropout, check_positive_float, check_positive_int

__all__ = [
    "ACTIVATIONS",
    "make_activation",
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


ACTIVATIONS = ("relu", "gelu", "gelu_tanh")


def make_activation(name: str) -> nn.Module:
    """The FFN's nonlinearity by name: "relu" (the paper), "gelu" (exact, Hendrycks & Gimpel
    2016) or "gelu_tanh" (GELU's tanh approximation, which GPT-2 uses; notebook 15)."""
    if name == "relu":
        return nn.ReLU()
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


class FeedForward(nn.Module):
    """Position-wise FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2): `(..., d_model)` -> same.

    Hidden activations `(..., d_ff)`; dropout on them, after the ReLU, as PyTorch does.
    `activation` swaps the ReLU for GELU, exact or tanh-approximated (`make_activation`).
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_dropout(dropout)
        self.d_model = d_model
        self.d_ff = d_ff
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = make_activation(activation)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """`(..., d_model)` -> `(..., d_model)`."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


# --------------------------------------------------------------------------------------------
# layer normalisation (Ba et al., 2016)
# --------------------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """weight ⊙ (x - μ) / sqrt(σ² + eps) + bias over the last dim: `(..., d_model)` -> same.

    σ² is the *biased* variance and eps sits inside the root, as `nn.LayerNorm` (notebook 06).
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
    """Residual, dropout and LayerNorm around a sublayer passed to `forward` as a callable.

    Post-norm (the paper): `norm(x + dropout(sublayer(x)))`; pre-norm (`norm_first`, Xiong et
    al. 2020): `x + dropout(sublayer(norm(x)))`. `eps` is the LayerNorm's.
    """

    def __init__(
        self, d_model: int, dropout: float = 0.0, norm_first: bool = False, eps: float = 1e-5
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_dropout(dropout)
        check_bool("norm_first", norm_first)
        self.d_model = d_model
        self.norm_first = norm_first
        self.norm = LayerNorm(d_model, eps=eps)
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
    only), the FFN, and one `SublayerConnection` per sublayer, built in that order.

    `activation` (the FFN's, `make_activation`) and `eps` (every LayerNorm's) let a layer be
    GPT-2's (notebook 15); the defaults are the paper's ReLU and PyTorch's 1e-5."""

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
        activation: str = "relu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, d_k=d_k, d_v=d_v, dropout=dropout)
        if self.cross:
            self.cross_attn = MultiHeadAttention(
                d_model, n_heads, d_k=d_k, d_v=d_v, dropout=dropout
            )
        self.ffn = FeedForward(d_model, d_ff, dropout, activation=activation)
        self.sublayers = nn.ModuleList(
            SublayerConnection(d_model, dropout, norm_first, eps=eps)
            for _ in range(3 if self.cross else 2)
        )


class EncoderLayer(_Layer):
    """Self-attention, then the FFN, each in a `SublayerConnection`.

    x `(batch, S, d_model)`, mask broadcastable to `(batch, n_heads, S, S)` -> same shape.
    """

    cross = False

    def forward(
        self, x: Tensor, mask: Tensor | None = None, cache: AttentionCache | None = None
    ) -> Tensor:
        """`(batch, S, d_model)` -> `(batch, S, d_model)`.

        `cache` is for decoder-only use (`utils.gpt`): under a causal mask this is a GPT block.
        """
        # Y = LayerNorm(X + Dropout(MultiHead(X, X, X))); out = LayerNorm(Y + Dropout(FFN(Y)))
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, mask=mask, cache=cache))
        return self.sublayers[1](x, self.ffn)


class DecoderLayer(_Layer):
    """Masked self-attention, cross-attention (keys/values from `memory`), FFN, each in a sublayer.

    x `(batch, T, d_model)`, memory `(batch, S, d_model)`, tgt_mask broadcastable to
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

        With `self_cache`, `x` holds only the new positions and `tgt_mask` is `(T, T_cached + T)`.
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
    """Xavier-uniform every weight matrix (dim > 1) of `module` not in `skip`, in place.

    `zero_biases=True` zeroes every `nn.Linear` bias (GPT-2, `utils.gpt`); `False` keeps
    PyTorch's default draw (`utils.model`). Every trained number of the book depends on it.
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
