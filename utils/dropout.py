"""Dropout, with a faster mask on the CPU for the fast path.

Dropout (Srivastava et al., 2014; section 5.4 of the paper) keeps each element of `x` with
probability 1 - p, independently, and scales the kept ones by 1 / (1 - p) so that the
expectation is unchanged; at evaluation it is the identity.

`F.dropout` draws its mask with `bernoulli_`. On a CPU that is the slow part: one call of the
random generator per element, and a slow one. The fast mask instead fills one 64-bit random
integer per *four* elements (`random_` over the full int64 range), reads it as four 16-bit
integers u, uniform on [-32768, 32767], and keeps an element where u >= t with
t = round(65536 p) - 32768: with probability 1 - round(65536 p) / 65536, i.e. p rounded to a
multiple of 2^-16 (off by at most 7.6e-6). The kept elements are scaled by 1 / (1 - p), as
`F.dropout` scales them. Forward plus backward, that took 0.49-0.55x the time of `F.dropout`
(three shapes, one thread, an AMD EPYC; 0.54-0.64x on the machine where it was first
written), and dropout runs 20+ times per training step of the book's models. On a GPU
`F.dropout` is already one fused kernel and is used. The fast mask is part of the fast path:
`Dropout.fused` is set by `utils.layers.use_fast_path`, like the fused attention kernel and
LayerNorm.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.checks import check_dropout


def dropout(x: Tensor, p: float, training: bool = True, fused: bool = False) -> Tensor:
    """Dropout of `x` (any shape) with probability `p` in [0, 1); same shape and dtype.

    `fused=True` on a CPU draws the mask from 16-bit random integers (see the module docstring);
    otherwise this is `F.dropout(x, p, training)`. Either way, in expectation the output
    equals `x`, and the gradient is the same mask times the incoming gradient.
    """
    p = check_dropout(p, "p")
    if not training or p == 0.0:
        return x
    if not fused or x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return _MaskAndScale.apply(x, keep_mask(x.shape, p), 1.0 / (1.0 - p))


class _MaskAndScale(torch.autograd.Function):
    """`x` where `keep`, else 0, times `scale`; the backward does the same to the gradient.

    It keeps only the 1-byte bool mask for the backward pass, as `F.dropout` does: a float
    mask saved instead would hold 4 bytes per element until the backward pass (at the FFN's
    `(B, T, d_ff)`: 16 MB for 32 x 64 tokens and d_ff 2048). It selects with `torch.where`
    rather than multiplying by the mask: `x * keep` first converts the bool mask to a float
    temporary of x's size (a hidden copy, and at that size fresh memory the kernel must map,
    about 20,000 page faults per d_model-512 training step where this was measured).
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


def keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> Tensor:
    """A bool tensor of `shape` (on the CPU), True with probability 1 - p rounded to 2^-16.

    Four 16-bit uniform integers per 64-bit draw of the generator (module docstring); the draws
    come from torch's global generator, so `torch.manual_seed` makes them reproducible.
    """
    p = check_dropout(p, "p")
    n = 1
    for size in shape:
        n *= size
    threshold = round(65536 * p) - 32768
    if threshold > 32767:  # p within 2^-17 of 1 rounds to 1: keep nothing (and the int16
        return torch.zeros(shape, dtype=torch.bool)  # comparison below would wrap around)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    u = words.view(torch.int16)[:n].view(shape)  # uniform on [-32768, 32767]
    return u >= threshold


class Dropout(nn.Dropout):
    """`nn.Dropout` (same `p`, same state dict: none) with the fast-path switch `fused`.

    `fused = True` (set by `utils.layers.use_fast_path`) draws the mask as `dropout` does with
    `fused=True`; False, the default, is exactly `nn.Dropout`.
    """

    fused: bool = False

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.fused)
