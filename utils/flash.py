"""Attention in tiles with the online softmax (FlashAttention's algorithm) -- notebook 14.

`flash_attention(q, k, v)` equals `softmax(q kᵀ / √d_k) v` but never builds the `(q, k)`
matrix of scores: it walks over blocks of queries and, for each, over blocks of keys, keeping
per query row a running maximum `m`, a running sum `l` of exponentials and an unnormalised
output, rescaled by `exp(m_old - m_new)` whenever the maximum grows (Milakov & Gimelshein
2018; Dao et al. 2022). The backward pass recomputes each block of scores instead of saving
the weights, as FlashAttention's does (Dao et al. 2022), from the saved row log-sum-exp
`lse = m + log l` alone, as FlashAttention-2 saves it (Dao 2023), so training memory is linear
in the sequence length too: `p = exp(s - lse)`, `Δ = rowsum(grad_out ∘ out)` (`delta`),
`ds = p ∘ (dp - Δ)` (`s` and `p` are a tile of scores and weights: FlashAttention's S and P,
notebook 14's Z and A; `out` is the attention output, `grad_out` its gradient, FlashAttention's
O and dO).

Plain PyTorch, written to be read next to its derivation: the block loops run in Python, so
it is slower than a fused kernel (`F.scaled_dot_product_attention`); what it shows is the
algorithm and its memory. Supported: a boolean mask (`True` = may attend) broadcastable to
`(..., q, k)`, e.g. a key-padding mask `(B, 1, 1, S)`, and `causal=True` (query `i` sees keys
`j <= i`, aligned at the top left as in `F.scaled_dot_product_attention(is_causal=True)`).
Not supported: dropout on the weights, gradients of gradients. A query row whose keys are all
masked gets output 0 and zero gradients, as in `utils.attention`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from utils.attention import register_backend
from utils.checks import check_bool, check_mask, check_positive_int, check_qkv

__all__ = ["flash_attention", "flash_forward", "flash_backward", "FlashAttention", "flash_backend"]


def _block_mask(
    mask: Tensor | None, causal: bool, qs: slice, ks: slice, device: torch.device
) -> Tensor | None:
    """The bool mask of one block of scores, `(..., bq, bk)` or `(bq, bk)`; None: all allowed."""
    block = None if mask is None else mask[..., qs, ks]
    if causal:
        rows = torch.arange(qs.start, qs.stop, device=device)[:, None]
        cols = torch.arange(ks.start, ks.stop, device=device)[None, :]
        tri = rows >= cols
        block = tri if block is None else block & tri
    return block


def _key_blocks(n_k: int, block_k: int, causal: bool, q_stop: int) -> list[slice]:
    """Key blocks a query block needs: all of them, or under `causal` those that start at or
    before the block's last query (blocks entirely in the future are skipped, not computed)."""
    last = min(n_k, q_stop) if causal else n_k
    return [slice(j, min(j + block_k, n_k)) for j in range(0, last, block_k)]


def flash_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[Tensor, Tensor]:
    r"""Tiled attention with the online softmax; no checks (`flash_attention` makes them).

    Shapes: q `(..., n_q, d_k)`, k `(..., n_k, d_k)`, v `(..., n_k, d_v)`, mask bool
    `(..., n_q, n_k)` already expanded (a view: no memory). Returns `(out, lse)`: out
    `(..., n_q, d_v)` and the row log-sum-exp of the scaled scores `(..., n_q)` (`+inf` for a
    row with no allowed key, so that the backward's `exp(s - lse)` is 0 there).

    Per query block, over key blocks, with `s` the tile of scaled scores:
    `m_new = max(m, rowmax(s))`, `l = e^{m - m_new} l + rowsum(e^{s - m_new})`,
    `acc = e^{m - m_new} acc + e^{s - m_new} v`; at the end `out = acc / l`. Memory beyond the
    inputs: `out` and `lse`, `n_q (d_v + 1)` numbers; the query block's `m`, `l`, `acc`; and
    about four `(block_q, block_k)` tiles at once: the scores `s`, `s - m_new` and the weights
    `p` of the current tile, and the previous tile's `p`, alive until `p` is reassigned.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty(q.shape[:-1])
    for i in range(0, n_q, block_q):
        qs = slice(i, min(i + block_q, n_q))
        q_blk = q[..., qs, :]  # (..., bq, d_k)
        m = q.new_full(q_blk.shape[:-1], float("-inf"))  # running row maximum (..., bq)
        ell = q.new_zeros(q_blk.shape[:-1])  # l, running sum of exp(s - m)  (..., bq)
        acc = q.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # running sum of exp(s - m) v
        for ks in _key_blocks(n_k, block_k, causal, qs.stop):
            s = q_blk @ k[..., ks, :].transpose(-2, -1) * scale  # (..., bq, bk)
            allowed = _block_mask(mask, causal, qs, ks, q.device)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            # a row with no allowed key so far has m_new = -inf: subtract 0 there, not -inf
            shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
            p = torch.exp(s - shift[..., None])  # (..., bq, bk); masked entries are 0
            alpha = torch.exp(m - shift)  # rescales what was summed under the old maximum
            ell = alpha * ell + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[..., ks, :]
            m = m_new
        empty = ell == 0  # every key masked: output 0, lse +inf
        out[..., qs, :] = acc / ell.masked_fill(empty, 1.0)[..., None]
        lse[..., qs] = (m + torch.log(ell)).masked_fill(empty, float("inf"))
    return out, lse


def flash_backward(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    mask: Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Gradients `(dq, dk, dv)` of tiled attention, recomputing each block of scores.

    With `p = exp(s - lse)` (the softmax weights of the tile, exact because `lse` is the
    whole row's log-sum-exp), `dv += pᵀ grad_out`, `dp = grad_out vᵀ`, `ds = p ∘ (dp - Δ)`
    with `Δ = rowsum(grad_out ∘ out)` (`delta`; = `rowsum(p ∘ dp)` over the whole row),
    `dq += ds k / √d_k`, `dk += dsᵀ q / √d_k`. Shapes as `flash_forward`; `grad_out` like `out`.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    n_q, n_k = q.shape[-2], k.shape[-2]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (grad_out * out).sum(dim=-1)  # Δ, (..., n_q)
    for i in range(0, n_q, block_q):
        qs = slice(i, min(i + block_q, n_q))
        q_blk, do_blk = q[..., qs, :], grad_out[..., qs, :]
        for ks in _key_blocks(n_k, block_k, causal, qs.stop):
            s = q_blk @ k[..., ks, :].transpose(-2, -1) * scale
            allowed = _block_mask(mask, causal, qs, ks, q.device)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            p = torch.exp(s - lse[..., qs, None])  # (..., bq, bk)
            dv[..., ks, :] += p.transpose(-2, -1) @ do_blk
            dp = do_blk @ v[..., ks, :].transpose(-2, -1)
            ds = p * (dp - delta[..., qs, None])
            dq[..., qs, :] += ds @ k[..., ks, :] * scale
            dk[..., ks, :] += ds.transpose(-2, -1) @ q_blk * scale
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """`flash_forward` with `flash_backward` as its gradient: saves q, k, v, out and the row
    log-sum-exp (all `O(n d)`), never the `(n_q, n_k)` weights."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        causal: bool,
        block_q: int,
        block_k: int,
    ) -> Tensor:
        out, lse = flash_forward(q, k, v, mask, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.options = (causal, block_q, block_k)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse, mask = ctx.saved_tensors
        causal, block_q, block_k = ctx.options
        dq, dk, dv = flash_backward(grad_out, q, k, v, out, lse, mask, causal, block_q, block_k)
        return dq, dk, dv, None, None, None, None


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> Tensor:
    r"""softmax(Q Kᵀ / √d_k) V in tiles of `block_q` queries by `block_k` keys.

    Args:
        query: `(..., n_q, d_k)`.
        key:   `(..., n_k, d_k)`, the same leading dims as `query`.
        value: `(..., n_k, d_v)`.
        mask:  bool, `True` = may attend, broadcastable to `(..., n_q, n_k)`; a key-padding
            mask `(B, 1, 1, n_k)` keeps memory linear (a full `(n_q, n_k)` mask is itself
            quadratic).
        causal: query `i` may attend key `j` only if `j <= i` (combined with `mask` by "and").
        block_q, block_k: tile sizes, positive ints; the last tile may be shorter.

    Returns:
        `(..., n_q, d_v)`, differentiable in query, key and value (backward by
        `flash_backward`). The weights are not returned: they never exist as one tensor.
    """
    check_qkv(query, key, value)  # the words of utils.attention's checks
    check_bool("causal", causal)
    check_positive_int("block_q", block_q)
    check_positive_int("block_k", block_k)
    scores_shape = (*query.shape[:-1], key.shape[-2])
    if mask is not None:
        check_mask(mask, scores_shape)
        mask = mask.expand(scores_shape)  # a view: slicing it per block costs nothing
    out: Tensor = FlashAttention.apply(query, key, value, mask, causal, block_q, block_k)
    return out


def flash_backend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0
) -> tuple[Tensor, None]:
    """The `"flash"` backend of `utils.attention.attend` (registered when this module is
    imported): `flash_attention` inside a model, `(output, None)`. It has no dropout on the
    weights, so a model in training mode with attention dropout is refused."""
    if dropout_p > 0:
        raise ValueError(
            f"the flash backend has no dropout on the attention weights, got dropout_p="
            f"{dropout_p}; train with dropout=0.0, or use the 'sdpa' or 'readable' backend"
        )
    return flash_attention(q, k, v, mask), None


register_backend("flash", flash_backend)
