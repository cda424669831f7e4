"""Token embeddings and positional encodings (notebooks 01 and 02).

(The word-level vocabulary of notebook 01 is `utils.vocab.Vocab`.)

- `TokenEmbedding`: lookup scaled by √d_model (the paper, section 3.4), and `tie_weights`
  to share one matrix between the embedding and the output layer;
- `sinusoidal_encoding`, `SinusoidalPositionalEncoding`, `LearnedPositionalEncoding`
  (section 3.5);
- `InputEmbedding`: the input block of every stack, `Dropout(Embed(tokens)·√d_model + PE)`.

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
    """Token lookup scaled by √d_model: `tokens (B, S)` int -> `(B, S, d_model)`.

    The lookup `weight[tokens]` is the same as `one_hot(tokens) @ weight`, without building
    the one-hot matrix.

    `weight (vocab_size, d_model)` starts as N(0, 1/d_model): then `weight[t] * √d_model`
    has unit variance, the same scale as the positional encoding it is added to (whose
    entries are sines and cosines), and a tied output layer `x @ weightᵀ` gives logits of
    unit variance for unit-variance `x`.

    Args:
        vocab_size: number of token ids.
        d_model: embedding width.
        padding_idx: if given, that row starts at zero and gets no gradient through the lookup
            (a tied output layer still updates it: notebook 01).
        scale: multiply by √d_model (the paper, section 3.4).
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
        """`tokens (B, S)` integer ids in `[0, vocab_size)` -> `(B, S, d_model)`.

        Ids are range-checked on the CPU; on a GPU the check would cost a host-device
        synchronisation every step, so it is left to the lookup (`check_token_range`).
        """
        check_token_ids(tokens)
        check_token_range(tokens, self.vocab_size)
        return self._lookup(tokens)

    def _lookup(self, tokens: Tensor) -> Tensor:
        x = F.embedding(tokens, self.weight, padding_idx=self.padding_idx)
        return x * math.sqrt(self.d_model) if self.scale else x


def tie_weights(target: nn.Module, source: nn.Module) -> None:
    """Make `target.weight` the *same* Parameter as `source.weight` (shared, not copied).

    E.g. `tie_weights(generator, embedding)` with `generator = nn.Linear(d_model, vocab_size)`
    (weight `(vocab_size, d_model)`) and a `TokenEmbedding(vocab_size, d_model)`: one matrix,
    one gradient, one optimiser update (the paper, section 3.4).
    """
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
    r"""The paper's positional encoding, `(max_len, d_model)`:

    PE(p, 2i) = sin(p / 10000^(2i / d_model)),  PE(p, 2i+1) = cos(p / 10000^(2i / d_model)).

    Pair i is a point rotating at angular frequency ω_i = 10000^(-2i/d_model), so
    PE(p + k) is PE(p) rotated pair by pair by the angles k·ω_i (a fixed map R_k).
    Computed in float64, returned in the default dtype.
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
    """`x (B, S, d_model)` -> `dropout(x + PE[:S])`, PE from `sinusoidal_encoding`.

    The paper applies dropout to the sums of the embeddings and the positional encodings
    (section 5.4), so the dropout lives here. `pe` is a non-persistent buffer: it moves with
    `.to(device)` but is not saved in the state dict (it is recomputed, not learned).
    """

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
        """`x (B, S, d_model)` at positions `offset .. offset+S-1` (< max_len) -> `(B, S, d_model)`.

        `offset` > 0 is for incremental decoding: a new token at position t must get PE(t).
        """
        _check_positions(x, self.d_model, self.max_len, offset)
        return self._add(x, offset)

    def _add(self, x: Tensor, offset: int) -> Tensor:
        return self.dropout(x + self.pe[offset : offset + x.shape[1]].to(x.dtype))


class LearnedPositionalEncoding(nn.Module):
    """Like `SinusoidalPositionalEncoding`, with a learned table `nn.Embedding(max_len, d_model)`.

    The paper found learned positions "nearly identical" to sinusoids (Table 3, row E); they
    cannot go beyond `max_len`.

    The table `embedding.weight (max_len, d_model)` starts as N(0, 1/2): the mean square per
    entry of the sinusoidal table it replaces (each sin/cos pair has sin² + cos² = 1), so a
    position vector has E‖p‖² = d_model/2 = ‖PE(p)‖², and next to token embeddings of unit
    variance (`TokenEmbedding`, after √d_model) positions carry a third of the input's energy,
    as sinusoids do. GPT-2's std of 0.01 or nanoGPT's 0.02 were chosen next to token
    embeddings of std 0.02, not of std 1: here they would leave positions 0.01-0.04 % of the
    input's energy, the "positions vanish" failure of notebook 01.
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

    `token` is a `TokenEmbedding` (N(0, 1/d_model), scaled by √d_model), `position` the
    positional encoding named by `positional` ("sinusoidal" or "learned"), which applies the
    embedding dropout (the paper, section 5.4). The input block of the encoder-decoder
    (`utils.model`) and of the decoder-only model (`utils.gpt`), which check the token ids
    (`utils.checks.check_tokens`) before calling it: it trusts its caller.
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
        return self.position._add(self.token._lookup(tokens), offset)
