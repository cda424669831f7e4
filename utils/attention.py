"""Scaled dot-product attention and multi-head attention (notebooks 03 and 05).

Shapes follow the book's conventions: batch first, `(batch, seq, d_model)`; heads as
`(batch, heads, seq, d_head)`; masks are boolean with `True` = may attend, broadcastable to
`(batch, heads, queries, keys)`.

`scaled_dot_product_attention` is a public entry point: it checks its inputs and masks
(`ValueError` saying what was expected and what came). `MultiHeadAttention` trusts its
caller: the stacks of `utils.model` check inputs and masks once, at the door.

One seam for every attention module of the book: `attend(q, k, v, mask, dropout_p, backend)`.
Both `MultiHeadAttention` and `utils.modern.GroupedQueryAttention` call it, with the backend
named by their `backend` attribute, which `use_attention_backend(model, name)` sets on every
such module of a model at once (nothing else changes: same parameters, same state dict).
The backends compute the same function within float rounding:

- `"readable"` (here): the book's `unchecked_attention`, which also returns the weights;
- `"sdpa"` (`utils.fast`, notebook 14): PyTorch's fused `F.scaled_dot_product_attention`;
- `"flash"` (`utils.flash`, notebook 14): the book's tiled attention with the online softmax.

A backend is registered by the module that defines it (`register_backend`), so the imports
still point backwards in the reading order: `"sdpa"` and `"flash"` exist once `utils.fast`
and `utils.flash` are imported (the models import `utils.fast` themselves).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.cache import AttentionCache
from utils.checks import check_dropout, check_head_dims, check_mask, check_qkv

__all__ = [
    "scaled_dot_product_attention",
    "unchecked_attention",
    "attend",
    "register_backend",
    "check_backend",
    "use_attention_backend",
    "split_heads",
    "merge_heads",
    "packed_projection",
    "MultiHeadAttention",
]


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    r"""Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V  (the paper's equation 1).

    Args:
        query: `(..., q, d_k)`.
        key:   `(..., k, d_k)`, the same leading dims as `query`.
        value: `(..., k, d_v)`.
        mask:  bool, `True` = may attend, broadcastable to `(..., q, k)` without growing it.
        dropout_p: probability of zeroing an attention weight before it multiplies `value`.
            Applied whenever `dropout_p > 0`; callers pass 0 in evaluation.

    Returns:
        `(output, weights)`: output `(..., q, d_v)` and the attention weights `(..., q, k)`.
        The returned weights are the softmax weights *before* dropout, so every row sums
        to 1 (the thing to plot); the output uses the dropped-out, rescaled weights.

    Masked positions get weight exactly 0 (their score is set to -inf before the softmax).
    A query row whose keys are *all* masked (e.g. a padding query under left padding) has
    no distribution to normalise; we define its weights as all 0 and so its output as 0.
    No NaN appears in the forward or the backward pass.
    """
    check_qkv(query, key, value)
    dropout_p = check_dropout(dropout_p, "dropout_p")
    if mask is not None:
        check_mask(mask, (*query.shape[:-1], key.shape[-2]))
    return unchecked_attention(query, key, value, mask, dropout_p)


def unchecked_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """`scaled_dot_product_attention` without the checks, for callers that made them at their
    door (the model stacks, `utils.modern.ModernLM`): shapes and returns as there."""
    d_k = query.shape[-1]
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        # A fully masked row would be softmax(-inf, ..., -inf) = 0/0 = NaN. Give such rows
        # finite scores, then zero their weights below.
        row_has_key = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~row_has_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # Exact zeros for masked keys; this also empties the fully masked rows.
        weights = weights.masked_fill(~mask, 0.0)
    attn = F.dropout(weights, p=dropout_p, training=True) if dropout_p > 0 else weights
    return attn @ value, weights


# a backend: (q, k, v, mask, dropout_p) -> (output, weights or None); k and v have as many
# heads as q unless the backend handles grouped heads itself (its attribute `grouped`)
Backend = Callable[[Tensor, Tensor, Tensor, Tensor | None, float], tuple[Tensor, Tensor | None]]
BACKENDS: dict[str, Backend] = {"readable": unchecked_attention}
_DEFINED_IN = {"sdpa": "utils.fast", "flash": "utils.flash"}


def _origin(fn: object) -> tuple[str, str]:
    """Where a function was defined: the same after `importlib.reload` of its module."""
    return getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))


def register_backend(name: str, backend: Backend) -> None:
    """Make `backend` available to `attend` (and the models) as `name`.

    A name already taken by another function is a `ValueError`: a model built with that
    name would silently compute with the new one (registering the same function again is
    fine, as a module reloaded by `importlib.reload` or `%autoreload` does).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a backend's name must be a non-empty str, got {name!r}")
    if not callable(backend):
        raise ValueError(f"backend {name!r} must be callable, got {type(backend).__name__}")
    taken = BACKENDS.get(name)
    if taken is not None and _origin(taken) != _origin(backend):
        raise ValueError(
            f"backend name {name!r} is taken by {getattr(taken, '__qualname__', taken)!r}; "
            "register the new one under another name"
        )
    BACKENDS[name] = backend


def check_backend(backend: object) -> str:
    """`backend` if it names a registered backend, else a `ValueError` listing them."""
    if isinstance(backend, str) and backend in BACKENDS:
        return backend
    hint = ""
    if isinstance(backend, str) and backend in _DEFINED_IN:
        hint = f" ({backend!r} is defined in {_DEFINED_IN[backend]}: import it first)"
    raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {backend!r}{hint}")


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    backend: str = "readable",
) -> tuple[Tensor, Tensor | None]:
    """Attention over heads, by the named backend; inputs are not checked (callers check at
    their door). q `(B, h, T, d_k)`, k `(B, h_kv, S, d_k)`, v `(B, h_kv, S, d_v)` with `h` a
    multiple of `h_kv` (grouped-query attention: each key/value head serves `h / h_kv` query
    heads), mask bool broadcastable to `(B, h, T, S)`. Returns the output `(B, h, T, d_v)` and
    the weights `(B, h, T, S)` before dropout (`"readable"`; `None` from the fused backends,
    which never build them). A fully masked query row gives output 0 on every backend.
    """
    fn = BACKENDS.get(backend)  # a dict lookup per call; the checks run on a miss only
    if fn is None:
        fn = BACKENDS[check_backend(backend)]  # raises, naming the registered backends
    group_size = q.shape[-3] // k.shape[-3]
    if group_size > 1 and not getattr(fn, "grouped", False):  # one copy per query head
        k, v = k.repeat_interleave(group_size, dim=-3), v.repeat_interleave(group_size, dim=-3)
    return fn(q, k, v, mask, dropout_p)


def use_attention_backend(module: nn.Module, backend: str) -> nn.Module:
    """Set the backend of every attention module inside `module` (the classes that call
    `attend` say so with `calls_attend = True`: `MultiHeadAttention`, `GroupedQueryAttention`),
    in place; returns `module`. Parameters, buffers and state-dict keys do not change."""
    check_backend(backend)
    for m in module.modules():
        if getattr(type(m), "calls_attend", False):
            setattr(m, "backend", backend)  # noqa: B010  (a class of a later module, too)
    return module


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """`(B, S, h*d) -> (B, h, S, d)`: cut the feature dim into `n_heads` consecutive slices.

    Head `i` gets features `[i*d, (i+1)*d)`, the same layout `nn.MultiheadAttention` uses.
    """
    batch, seq, features = x.shape
    return x.view(batch, seq, n_heads, features // n_heads).transpose(1, 2)


def packed_projection(
    x: Tensor, linears: tuple[nn.Linear, ...], n_heads: int
) -> tuple[Tensor, ...]:
    """The projections `linears` of the same `x (B, S, d_model)` as one matrix product, as
    heads `(B, h, S, d)`: `[W_1; W_2; ...]` stacked is one linear map."""
    weight = torch.cat([linear.weight for linear in linears])
    bias = None
    if linears[0].bias is not None:
        bias = torch.cat([linear.bias for linear in linears])
    outs = F.linear(x, weight, bias).split([linear.out_features for linear in linears], dim=-1)
    return tuple(split_heads(out, n_heads) for out in outs)


def merge_heads(x: Tensor) -> Tensor:
    """`(B, h, S, d) -> (B, S, h*d)`: the inverse of `split_heads` (concatenate the heads)."""
    batch, heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


class MultiHeadAttention(nn.Module):
    r"""MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)  (the paper, section 3.2.2).

    Notebook 05's batched version: the h projections `W_i^Q` (d_model × d_k) side by side
    in one `Linear(d_model, h*d_k)` (`w_q`; likewise `w_k`, `w_v`), cut into heads by
    `split_heads`; `w_o` is `Linear(h*d_v, d_model)`. Added here: dropout on the attention
    weights (training only), the last weights kept for plotting, and a key/value cache.

    Shapes: query `(B, T, d_model)`, key and value `(B, S, d_model)`, mask bool broadcastable
    to `(B, h, T, S)` -> `(B, T, d_model)`. `backend` names how `attend` computes the
    attention ("readable", "sdpa", "flash"; set it with `use_attention_backend`); on any
    backend but the readable one, self-attention projects Q, K and V with one matrix product
    (the three weights stacked, as `nn.MultiheadAttention` stores them). Inputs are not
    checked here: the stacks of `utils.model` check them once. Used alone, a mask of the
    wrong shape may broadcast and a cross-attention cache is reused for any memory; check by
    hand (`utils.checks.check_mask`) when experimenting. `attn_weights` holds the last
    weights `(B, h, T, S)`, detached, before dropout, if `need_weights` and the backend
    builds them (else `None`).
    """

    calls_attend = True  # its backend is set by `use_attention_backend`

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_k: int | None = None,
        d_v: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        need_weights: bool = True,
    ) -> None:
        super().__init__()
        self.d_k, self.d_v = check_head_dims(d_model, n_heads, d_k, d_v)
        self.d_model, self.n_heads = d_model, n_heads
        self.dropout = check_dropout(dropout)
        self.need_weights = need_weights
        self.w_q = nn.Linear(d_model, n_heads * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_heads * self.d_v, bias=bias)
        self.w_o = nn.Linear(n_heads * self.d_v, d_model, bias=bias)
        self.attn_weights: Tensor | None = None
        self.backend = "readable"  # a runtime choice, not a parameter: not in the state dict

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_k={self.d_k}, d_v={self.d_v}"

    def project(self, x: Tensor, which: str) -> Tensor:
        """`x (B, S, d_model)` -> heads `(B, h, S, d_k)` for `which` "q" or "k", `d_v` for "v"."""
        return split_heads({"q": self.w_q, "k": self.w_k, "v": self.w_v}[which](x), self.n_heads)

    def project_qkv(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        """Heads q `(B, h, T, d_k)`, k `(B, h, S, d_k)`, v `(B, h, S, d_v)` of the inputs."""
        if self.backend != "readable" and key is value:  # speed: one product, same function
            if query is key:  # self-attention: Q, K and V at once
                return packed_projection(query, (self.w_q, self.w_k, self.w_v), self.n_heads)
            return (
                self.project(query, "q"),
                *packed_projection(key, (self.w_k, self.w_v), self.n_heads),
            )
        return self.project(query, "q"), self.project(key, "k"), self.project(value, "v")

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """Attention over the heads `q, k, v`, then merge and `w_o` -> `(B, T, d_model)`."""
        dropout = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, dropout, self.backend)
        kept = weights if self.need_weights else None  # the fused backends return None
        self.attn_weights = None if kept is None else kept.detach()
        return self.w_o(merge_heads(out))

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        cache: AttentionCache | None = None,
    ) -> Tensor:
        """`(B, T, d_model)`; with `cache`, see `forward_cached`."""
        if cache is not None:
            return self.forward_cached(query, key, value, mask, cache)
        q, k, v = self.project_qkv(query, key, value)
        return self.attend(q, k, v, mask)

    def forward_cached(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, cache: AttentionCache
    ) -> Tensor:
        """One decoding step (notebook 11): `query` holds only the new positions.

        Cross-attention (`cache.static`) projects the memory's keys and values at the first
        step and reuses them; self-attention appends the new positions' keys and values to
        the cached ones (the mask is then `(T, T_cached + T)`).
        """
        if cache.static:
            if cache.k is None or cache.v is None:
                q, cache.k, cache.v = self.project_qkv(query, key, value)
            else:
                q = self.project(query, "q")
            return self.attend(q, cache.k, cache.v, mask)
        q, k, v = self.project_qkv(query, key, value)
        k, v = cache.append(k, v)
        return self.attend(q, k, v, mask)
