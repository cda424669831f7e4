"""Token embeddings and positional encodings (notebooks 01 and 02 derive them).

Shapes are batch first: tokens `(B, S)`, embeddings `(B, S, d_model)`.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.checks import check_dropout, check_positive_int, check_token_ids, check_token_range

__all__ = [
    "TokenEmbedding",
    "tie_weights",
    "sinusoidal_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "POSITIONAL_ENCODINGS",
    "check_positional",
    "InputEmbedding",
]


class TokenEmbedding(nn.Module):
    """Token lookup scaled by √d_model (section 3.4): `tokens (B, S)` int -> `(B, S, d_model)`.

    `weight` starts as N(0, 1/d_model), so the scaled lookup has unit variance, the scale of
    the positional encoding it is added to. A `padding_idx` row still gets gradient when tied.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        padding_idx: int | None = None,
        scale: bool = True,
    ) -> None:
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        if padding_idx is not None and not (
            isinstance(padding_idx, int) and 0 <= padding_idx < vocab_size
        ):
            raise ValueError(f"padding_idx must be in [0, {vocab_size}), got {padding_idx!r}")
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.padding_idx = padding_idx
        self.scale = scale
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=self.d_model**-0.5)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].zero_()

    def extra_repr(self) -> str:
        return (
            f"{self.vocab_size}, {self.d_model}, padding_idx={self.padding_idx}, scale={self.scale}"
        )

    def forward(self, tokens: Tensor) -> Tensor:
        """`tokens (B, S)` ids in `[0, vocab_size)` -> `(B, S, d_model)`.

        Ids are range-checked on the CPU only: on a GPU the check would synchronise every step.
        """
        check_token_ids(tokens)
        check_token_range(tokens, self.vocab_size)
        return self.lookup(tokens)

    def lookup(self, tokens: Tensor) -> Tensor:
        """`forward` without the checks, for models that checked the ids at their door."""
        x = F.embedding(tokens, self.weight, padding_idx=self.padding_idx)
        return x * math.sqrt(self.d_model) if self.scale else x


def tie_weights(target: nn.Module, source: nn.Module) -> None:
    """Make `target.weight` the *same* Parameter as `source.weight` (section 3.4)."""
    for name, m in (("target", target), ("source", source)):
        if not isinstance(getattr(m, "weight", None), nn.Parameter):
            raise ValueError(f"{name} must have a `weight` Parameter, got {type(m).__name__}")
    # checked above: both are Parameters (nn.Module types its attributes `Tensor | Module`)
    target_weight, source_weight = cast(Tensor, target.weight), cast(Tensor, source.weight)
    if target_weight.shape != source_weight.shape:
        raise ValueError(
            f"cannot tie weights of different shapes: target {tuple(target_weight.shape)}, "
            f"source {tuple(source_weight.shape)}"
        )
    target.weight = source.weight


def sinusoidal_encoding(max_len: int, d_model: int) -> Tensor:
    """The paper's positional encoding `(max_len, d_model)`, computed in float64.

    PE(p, 2i) = sin(p / 10000^(2i / d_model)),  PE(p, 2i+1) = cos(p / 10000^(2i / d_model)).
    """
    check_positive_int("max_len", max_len)
    check_positive_int("d_model", d_model)
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even (sin/cos pairs), got {d_model}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model / 2,)
    angle = position / 10000 ** (two_i / d_model)  # (max_len, d_model / 2)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(torch.get_default_dtype())


def _check_positions(x: Tensor, d_model: int, max_len: int, offset: int = 0) -> None:
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a 3-D tensor (batch, seq, d_model={d_model}), got {shape}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative int, got {offset!r}")
    if offset + x.shape[1] > max_len:
        where = (
            f"positions {offset}..{offset + x.shape[1] - 1}"
            if offset
            else (f"sequence length {x.shape[1]}")
        )
        raise ValueError(f"{where} exceeds max_len {max_len} of the positional encoding")


class SinusoidalPositionalEncoding(nn.Module):
    """`x (B, S, d_model)` -> `dropout(x + PE[:S])`; the embedding dropout of section 5.4."""

    pe: Tensor

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive_int("max_len", max_len)
        check_dropout(dropout)
        self.d_model = d_model
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """`x (B, S, d_model)` at positions `offset .. offset+S-1` (< max_len) -> same shape."""
        _check_positions(x, self.d_model, self.max_len, offset)
        return self._add(x, offset)

    def _add(self, x: Tensor, offset: int) -> Tensor:
        return self.dropout(x + self.pe[offset : offset + x.shape[1]].to(x.dtype))


class LearnedPositionalEncoding(nn.Module):
    """Like `SinusoidalPositionalEncoding`, with a learned `(max_len, d_model)` table (Table 3, E).

    Init N(0, 1/2), the sinusoids' mean square: GPT-2's std 0.02 next to unit-variance
    tokens would make positions vanish (notebook 01).
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        check_dropout(dropout)
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table from N(0, 1/2), the sinusoids' mean square (class docstring)."""
        nn.init.normal_(self.embedding.weight, mean=0.0, std=0.5**0.5)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """`x (B, S, d_model)` at positions `offset .. offset+S-1` -> `(B, S, d_model)`."""
        _check_positions(x, self.d_model, self.max_len, offset)
        return self._add(x, offset)

    def _add(self, x: Tensor, offset: int) -> Tensor:
        return self.dropout(x + self.embedding.weight[offset : offset + x.shape[1]])


POSITIONAL_ENCODINGS: dict[str, type[SinusoidalPositionalEncoding | LearnedPositionalEncoding]] = {
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
}


def check_positional(positional: object, d_model: int) -> None:
    """`ValueError` unless `positional` names a positional encoding that fits `d_model`."""
    if positional not in POSITIONAL_ENCODINGS:
        raise ValueError(
            f"positional must be one of {tuple(POSITIONAL_ENCODINGS)}, got {positional!r}"
        )
    if positional == "sinusoidal" and d_model % 2 != 0:
        raise ValueError(f"sinusoidal positional encoding needs an even d_model, got {d_model}")


class InputEmbedding(nn.Module):
    """The input block of a stack: `tokens (B, S)` -> `Dropout(Embed(tokens)·√d_model + PE)`.

    It trusts its caller to have checked the token ids.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        dropout: float = 0.0,
        positional: str = "sinusoidal",
        padding_idx: int | None = None,
    ) -> None:
        super().__init__()
        check_positional(positional, d_model)
        self.token = TokenEmbedding(vocab_size, d_model, padding_idx=padding_idx)
        self.position = POSITIONAL_ENCODINGS[positional](d_model, max_len, dropout=dropout)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """`tokens (B, S)` at positions `offset .. offset+S-1` -> `(B, S, d_model)`."""
        return self.position._add(self.token.lookup(tokens), offset)
