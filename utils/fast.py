"""The fast path: the same functions as the teaching modules, in fewer and bigger kernels.

The teaching modules (`utils.attention.MultiHeadAttention`, `utils.layers.LayerNorm`,
`nn.Dropout` inside them) are written to be read. Training runs the same functions faster:
`use_fast_path(model)` gives every attention module inside `model` the `"sdpa"` backend and
switches every `LayerNorm` and `nn.Dropout`, in place, to a subclass here that overrides
`forward` only, so parameters, state-dict keys and the random draws at construction are
those of the teaching model; `use_fast_path(model, False)` switches back.
`TransformerConfig(fused=True)`, `GPTConfig(fused=True)` and `ModernConfig(fused=True)` build
the model on it.

- `fused_attention`, registered as `utils.attention.attend`'s backend `"sdpa"`: PyTorch's
  fused kernel `F.scaled_dot_product_attention`, which never materialises the weights
  (`attn_weights` stays `None`); on this backend `MultiHeadAttention` also projects Q, K and
  V of self-attention with *one* matrix product (cross-attention packs K and V).
- `FastLayerNorm`: `F.layer_norm`, one kernel instead of the six elementwise passes.
- `FastDropout`: on a CPU the mask is drawn from 16-bit random integers (below); elsewhere
  it is `F.dropout`.

The same function within float rounding (the tests check 1e-5); dropout has the same
distribution with p rounded to a multiple of 2^-16, and other random draws.

Dropout (Srivastava et al., 2014; section 5.4 of the paper) keeps each element with
probability 1 - p and scales the kept ones by 1 / (1 - p). `F.dropout` draws its mask with
`bernoulli_`, on a CPU one call of the random generator per element. The fast mask fills one
64-bit random integer per *four* elements (`random_` over the full int64 range), reads it as
four 16-bit integers u, uniform on [-32768, 32767], and keeps an element where u >= t with
t = round(65536 p) - 32768: with probability 1 - round(65536 p) / 65536, i.e. p rounded to a
multiple of 2^-16 (off by at most 7.6e-6).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.attention import register_backend, use_attention_backend
from utils.checks import check_bool, check_dropout
from utils.layers import LayerNorm

__all__ = [
    "keep_mask",
    "fast_dropout",
    "FastDropout",
    "FastLayerNorm",
    "fused_attention",
    "use_fast_path",
]


# --------------------------------------------------------------------------------------------
# dropout with a 16-bit mask
# --------------------------------------------------------------------------------------------


def keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> Tensor:
    """A bool tensor of `shape` (on the CPU), True with probability 1 - p rounded to 2^-16.

    Four 16-bit uniform integers per 64-bit draw of the generator (module docstring); the draws
    come from torch's global generator, so `torch.manual_seed` makes them reproducible.
    """
    return _keep_mask(shape, check_dropout(p, "p"))


def _keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> Tensor:
    n = 1
    for size in shape:
        n *= size
    threshold = round(65536 * p) - 32768
    if threshold > 32767:  # p within 2^-17 of 1 rounds to 1: keep nothing (and the int16
        return torch.zeros(shape, dtype=torch.bool)  # comparison below would wrap around)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    u = words.view(torch.int16)[:n].view(shape)  # uniform on [-32768, 32767]
    return u >= threshold


class _MaskAndScale(torch.autograd.Function):
    """`x` where `keep`, else 0, times `scale`; the backward does the same to the gradient.

    It keeps only the 1-byte bool mask for the backward pass, as `F.dropout` does: a float
    mask saved instead would hold 4 bytes per element until the backward pass (at the FFN's
    `(B, T, d_ff)`: 16 MB for 32 x 64 tokens and d_ff 2048). It selects with `torch.where`
    rather than multiplying by the mask: `x * keep` first converts the bool mask to a float
    temporary of x's size (a hidden copy, and at that size fresh memory the kernel must map
    page by page).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.where(keep, x, 0.0).mul_(scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None, None


def fast_dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Dropout of `x` (any shape) with probability `p` in [0, 1); same shape and dtype.

    On a CPU the mask comes from 16-bit random integers (module docstring); elsewhere this is
    `F.dropout(x, p, training)`. Either way the output equals `x` in expectation, and the
    gradient is the same mask times the incoming gradient.
    """
    return _fast_dropout(x, check_dropout(p, "p"), training)


def _fast_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return _MaskAndScale.apply(x, _keep_mask(x.shape, p), 1.0 / (1.0 - p))


class FastDropout(nn.Dropout):
    """`nn.Dropout` (same `p`, no state) whose mask is drawn as in `fast_dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        return _fast_dropout(x, self.p, self.training)


# --------------------------------------------------------------------------------------------
# LayerNorm in one kernel
# --------------------------------------------------------------------------------------------


class FastLayerNorm(LayerNorm):
    """`LayerNorm` computed by `F.layer_norm`: the same formula, one kernel."""

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)


# --------------------------------------------------------------------------------------------
# multi-head attention: packed projections and PyTorch's fused kernel
# --------------------------------------------------------------------------------------------


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    """`F.scaled_dot_product_attention`, except with dropout on a CPU; grouped heads allowed.

    There PyTorch has no fused kernel and falls back to its reference formula, which also
    scales both q and k and scans the scores for fully masked rows; the caller has already
    handled those rows, so the same formula is written out here, with the fast dropout mask.
    """
    grouped = q.shape[-3] != k.shape[-3]
    if dropout_p == 0.0 or q.device.type != "cpu":
        if grouped:  # the kernel reads each key/value head for its group of query heads
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=True
            )
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    if grouped:
        group_size = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group_size, dim=-3), v.repeat_interleave(group_size, dim=-3)
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = _fast_dropout(torch.softmax(scores, dim=-1), dropout_p, training=True)
    return torch.matmul(weights, v)


def fused_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0
) -> tuple[Tensor, None]:
    """The `"sdpa"` backend of `utils.attention.attend`: PyTorch's fused kernel, with the
    book's convention for fully masked rows (output 0). Returns `(output, None)`: the kernel
    never builds the weights. Key/value heads may be fewer than query heads (grouped)."""
    if mask is None:
        return _sdpa(q, k, v, None, dropout_p), None
    # F.sdpa's bool attn_mask also means True = take part. Depending on version and
    # backend it returns NaN or 0 for fully masked rows: let those rows attend to every
    # key (finite everywhere, also in backward), then zero their output.
    row_has_key = mask.any(dim=-1, keepdim=True)
    if mask.device.type == "cpu" and bool(row_has_key.all()):
        # The usual case (no empty row). Asking is free on the CPU; on a GPU it would
        # stall the pipeline, so there the guard below always runs.
        return _sdpa(q, k, v, mask, dropout_p), None
    out = _sdpa(q, k, v, mask | ~row_has_key, dropout_p)
    return out.masked_fill(~row_has_key, 0.0), None


fused_attention.grouped = True  # type: ignore[attr-defined]  # attend passes k, v as they are
register_backend("sdpa", fused_attention)


# --------------------------------------------------------------------------------------------
# the switch
# --------------------------------------------------------------------------------------------

_FAST: dict[type, type] = {LayerNorm: FastLayerNorm, nn.Dropout: FastDropout}
_READABLE = {fast: readable for readable, fast in _FAST.items()}


def use_fast_path(module: nn.Module, enabled: bool = True) -> nn.Module:
    """The fast path for every module inside `module` (or, with `enabled=False`, the readable
    one), in place; returns `module`.

    Attention modules get the `"sdpa"` backend (`utils.attention.use_attention_backend`);
    each `LayerNorm` and `nn.Dropout` becomes its fast subclass here: only the class of the
    instance changes (`m.__class__`), so parameters, buffers, state-dict keys and hooks stay.
    Subclasses of those modules (yours) are left alone.
    """
    check_bool("enabled", enabled)
    use_attention_backend(module, "sdpa" if enabled else "readable")
    swap = _FAST if enabled else _READABLE
    for m in module.modules():
        m.__class__ = swap.get(type(m), type(m))
    return module
