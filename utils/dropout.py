"""Dropout, with a faster mask on the CPU for the fast path.

Dropout (Srivastava et al., 2014; section 5.4 of the paper) keeps each element of `x` with
probability 1 - p, independently, and scales the kept ones by 1 / (1 - p) so that the
expectation is unchanged; at evaluation it is the identity.

`F.dropout` draws its mask with `bernoulli_`. On a CPU that is the slow part: forward plus
backward, drawing uniform numbers with `torch.rand_like` and keeping those >= p (the same
distribution: P(u >= p) = 1 - p for u uniform on [0, 1)) took about two thirds of the time
of `F.dropout` on one thread where this was written, and dropout runs 20+ times per training
step of the book's models. On a GPU `F.dropout` is already one fused kernel and is used.
The fast mask is part of the fast path: `Dropout.fused` is set by
`utils.layers.use_fast_path`, like the fused attention kernel and LayerNorm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.checks import check_dropout


def dropout(x: Tensor, p: float, training: bool = True, fused: bool = False) -> Tensor:
    """Dropout of `x` (any shape) with probability `p` in [0, 1); same shape and dtype.

    `fused=True` on a CPU draws the mask with `torch.rand_like` (see the module docstring);
    otherwise this is `F.dropout(x, p, training)`. Either way, in expectation the output
    equals `x`, and the gradient is the same mask times the incoming gradient.
    """
    p = check_dropout(p, "p")
    if not training or p == 0.0:
        return x
    if not fused or x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    # one float32 uniform per element, compared in place: 1.0 where kept, 0.0 where dropped
    keep = torch.rand(x.shape, dtype=torch.float32).ge_(p).mul_(1.0 / (1.0 - p))
    return x * keep.to(x.dtype)


class Dropout(nn.Dropout):
    """`nn.Dropout` (same `p`, same state dict: none) with the fast-path switch `fused`.

    `fused = True` (set by `utils.layers.use_fast_path`) draws the mask as `dropout` does with
    `fused=True`; False, the default, is exactly `nn.Dropout`.
    """

    fused: bool = False

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.fused)
