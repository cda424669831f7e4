"""The key/value cache of incremental decoding (notebook 11 derives it).

Shapes: cached keys `(B, h, T_cached, d_k)`, values `(B, h, T_cached, d_v)`.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from utils.checks import check_positive_int, check_tokens

__all__ = ["AttentionCache", "KVCache", "check_lm_input"]


class AttentionCache:
    """Keys and values of one attention block, kept between decoding steps (`None` until filled).

    Self-attention (`static=False`) appends each step; cross-attention (`static=True`)
    projects the memory once and reuses it.
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __repr__(self) -> str:
        shape = None if self.k is None else tuple(self.k.shape)
        return f"AttentionCache(static={self.static}, k={shape})"

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's keys and values `(B, heads, t, d)` after the cached ones (on the
        sequence axis, dim 2); return all of them, `(B, heads, cached + t, d)`."""
        if self.k is not None and self.v is not None:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v


class KVCache:
    """The cache of a decoder stack: one `AttentionCache` per attention block.

    `cross=True` for the encoder-decoder, `False` for the decoder-only model. `length` is the
    position of the next token; `reorder(index)` follows beam search's re-ranking. `memory` is
    the encoder output `(B, S, d_model)` whose keys and values the cross-attention blocks hold
    (kept so that `check` can refuse another one; not counted by `memory_bytes`).
    """

    def __init__(self, n_layers: int, cross: bool) -> None:
        check_positive_int("n_layers", n_layers)
        self.self_attn = [AttentionCache(static=False) for _ in range(n_layers)]
        self.cross_attn = [AttentionCache(static=True) for _ in range(n_layers)] if cross else []
        self.length = 0
        self.memory: Tensor | None = None

    def blocks(self) -> list[AttentionCache]:
        """Every `AttentionCache` of the stack (self-attention first, then cross-attention)."""
        return [*self.self_attn, *self.cross_attn]

    @property
    def batch_size(self) -> int | None:
        for block in self.blocks():
            if block.k is not None:
                return block.k.shape[0]
        return None

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (int64 `(B_new,)`, values in `[0, batch_size)`), in place."""
        if not isinstance(index, Tensor) or index.dim() != 1 or index.is_floating_point():
            raise ValueError(f"index must be a 1-D integer tensor, got {index!r}")
        size = self.batch_size
        if size is None:
            return
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
            raise ValueError(f"index values must be in [0, {size}), got {index.tolist()}")
        for block in self.blocks():
            if block.k is not None:
                block.k = block.k.index_select(0, index)
                block.v = cast(Tensor, block.v).index_select(0, index)
        if self.memory is not None:  # the rows the memory's caller keeps, for `check`
            self.memory = self.memory.index_select(0, index)

    def check(
        self, batch_size: int, n_layers: int, cross: bool, memory: Tensor | None = None
    ) -> None:
        """`ValueError` unless this cache fits `n_layers` layers, `batch_size` and `memory`.

        Cross-attention keys and values are projected from the memory once: a filled cache
        accepts only the memory it holds (the same tensor, or one equal to it, such as the
        memory reordered with the cache), and an empty one records `memory` for later steps.
        """
        if len(self.self_attn) != n_layers or bool(self.cross_attn) != cross:
            kind = "an encoder-decoder (cross=True)" if cross else "a decoder-only model"
            raise ValueError(
                f"cache must be a KVCache with {n_layers} layers for {kind}, got {self!r}"
            )
        if self.batch_size is not None and self.batch_size != batch_size:
            raise ValueError(
                f"the cache holds a batch of {self.batch_size}, but the input has batch size "
                f"{batch_size}; start a new cache (or reorder it) for another batch"
            )
        held = self.cross_attn[0].k if self.cross_attn else None
        if memory is None or not self.cross_attn:
            return
        if held is None:  # nothing projected yet: this memory is the one the cache will hold
            self.memory = memory
            return
        if held.shape[2] != memory.shape[1]:
            raise ValueError(
                f"this cache holds cross-attention keys of a memory of {held.shape[2]} "
                f"positions, but the memory has {memory.shape[1]}; start a new cache for a new "
                "source"
            )
        if memory is self.memory:  # the usual case: no comparison of values
            return
        # another tensor (e.g. the caller reordered its memory): same values, or refused
        if self.memory is not None and not torch.equal(memory, self.memory):
            raise ValueError(
                "this cache holds the cross-attention keys of another memory (the encoder output "
                f"it was filled from differs from the memory {tuple(memory.shape)} passed now); "
                "start a new cache (init_cache()) for a new source"
            )
        self.memory = memory

    def memory_bytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(
            t.numel() * t.element_size()
            for block in self.blocks()
            for t in (block.k, block.v)
            if t is not None
        )

    def __repr__(self) -> str:
        return (
            f"KVCache(layers={len(self.self_attn)}, cross={bool(self.cross_attn)}, "
            f"length={self.length}, batch_size={self.batch_size})"
        )


def check_lm_input(
    tokens: object, cache: object, vocab_size: int, max_len: int, n_layers: int
) -> int:
    """The door of a decoder-only model's `forward(tokens, cache)` (`utils.gpt.GPT`,
    `utils.modern.ModernLM`): `cache` is `None` or a `KVCache` of this batch and depth,
    `tokens (B, T)` are ids in `[0, vocab_size)` with `T >= 1` that fit in `max_len` positions
    after the cached ones. Returns the position of the first new token (`cache.length`, or 0).
    """
    if cache is not None and not isinstance(cache, KVCache):
        raise ValueError(f"cache must be a KVCache from init_cache(), got {cache!r}")
    offset = 0 if cache is None else cache.length
    check_tokens(tokens, vocab_size, max_len, offset=offset)
    assert isinstance(tokens, Tensor)  # check_tokens said so
    if tokens.shape[1] == 0:
        raise ValueError(f"tokens must hold at least one position, got shape {tuple(tokens.shape)}")
    if cache is not None:
        cache.check(tokens.shape[0], n_layers, cross=False)
    return offset
