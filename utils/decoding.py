"""Decoding: greedy search, beam search and sampling, all batched (notebook 11).

The algorithms do not care which model produces the next-token logits. They talk to a
*scorer*, an object with three members:

- `next_logits(prefix)`: `prefix (B, t)` token ids -> logits `(B, V)` for token t + 1;
- `reorder(index)`: keep batch rows `index` (int64 `(B_new,)`), in that order: finished
  sequences leave the batch, beams are re-ranked and copied;
- `max_positions`: the longest sequence the model's positional table accepts.

`Seq2SeqScorer` wraps the encoder-decoder `Transformer` (the source is encoded once; with
`use_cache=True` each step feeds only the new token and reuses a `KVCache`); notebook 13's
decoder-only model brings its own scorer. Every sequence starts from a `prefix` (`<bos>` for
translation, a prompt for a language model) and the returned sequences contain it.

Lengths: `max_len` is the longest *whole* sequence, prefix included. Beam search ranks
finished hypotheses by log P(Y) / lp(Y) with GNMT's length penalty
lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al., 2016; the paper uses beam 4, alpha 0.6), where |Y|
counts the generated tokens including `<eos>`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.checks import (
    check_eval_mode,
    check_mask,
    check_positive_float,
    check_positive_int,
    check_token_ids,
    check_token_range,
)
from utils.masks import causal_mask
from utils.model import Transformer
from utils.vocab import PAD_ID

__all__ = [
    "Scorer",
    "Seq2SeqScorer",
    "Hypothesis",
    "length_penalty",
    "greedy_search",
    "beam_search",
    "filter_logits",
    "sample",
    "translate",
    "strip_special",
    "evaluation",
]


class Scorer(Protocol):
    """What the decoding algorithms need from a model (see the module docstring).

    Optional: `device`, where the model lives; the search moves the prefix there, so a
    scorer that wraps another (notebook 11's `Recorder`) should pass its `device` on.
    """

    max_positions: int

    def next_logits(self, prefix: Tensor) -> Tensor: ...

    def reorder(self, index: Tensor) -> None: ...


@contextmanager
def evaluation(model: nn.Module) -> Iterator[None]:
    """Dropout off and no gradients while decoding; the model's mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _batch_mask(src_mask: Tensor, src: Tensor, n_heads: int) -> Tensor:
    """`src_mask`, broadcastable to the decoder's scores `(B, h, 1, S)`, as `(B, ·, 1, S)`.

    `reorder` picks batch rows of the mask with the memory's: a mask that broadcasts over the
    batch (`(1, 1, 1, S)`, `(S,)`) has no row 1, so its batch dim is expanded (a view, no copy).
    """
    batch, length = src.shape
    check_mask(src_mask, (batch, n_heads, 1, length), "src_mask")  # one mask for every step
    mask = src_mask.reshape((1,) * (4 - src_mask.dim()) + tuple(src_mask.shape))
    return mask.expand(batch, *mask.shape[1:])


class Seq2SeqScorer:
    """Next-token logits of an encoder-decoder `Transformer` for a batch of sources.

    The source `(B, S)` is encoded once. With `use_cache=True` the decoder keeps a
    `KVCache` and each call feeds only the positions it has not seen; without it every call
    recomputes the decoder over the whole prefix (O(t²) attention work per step; notebook
    11 measures the difference). The model must be in eval mode (a model in training mode is
    refused: dropout would make decoding random); build it inside `evaluation(model)`, as the
    public decoding functions do.
    """

    def __init__(
        self,
        model: Transformer,
        src: Tensor,
        src_mask: Tensor | None = None,
        use_cache: bool = True,
    ) -> None:
        if not isinstance(model, Transformer):
            raise ValueError(f"model must be a utils.model.Transformer, got {type(model).__name__}")
        check_eval_mode(model)
        check_token_ids(src, "src")
        if src.shape[1] == 0:
            raise ValueError(f"src must hold at least one token per row, got {tuple(src.shape)}")
        check_token_range(src, model.config.src_vocab_size, "src")
        if src.shape[1] > model.config.max_len:
            raise ValueError(
                f"source length {src.shape[1]} exceeds the model's max_len "
                f"{model.config.max_len} (its positional table)"
            )
        self.model = model
        self.device = next(model.parameters()).device  # inputs built on the CPU move here
        src = src.to(self.device)
        src_mask = None if src_mask is None else src_mask.to(self.device)
        self.src_mask = (
            model.make_src_mask(src)
            if src_mask is None
            else _batch_mask(src_mask, src, model.config.n_heads)
        )
        self.memory = model.encode(src, self.src_mask)
        self.cache = model.init_cache() if use_cache else None
        self.max_positions = model.config.max_len

    def next_logits(self, prefix: Tensor) -> Tensor:
        """`prefix (B, t)` -> logits `(B, V)` of the token after it."""
        if self.cache is None:
            # only the causal mask, as on the cached path: a generated <pad> is a token here
            mask = causal_mask(prefix.shape[1], device=prefix.device)
            hidden = self.model.decode(prefix, self.memory, mask, self.src_mask)
        else:
            new = prefix[:, self.cache.length :]
            hidden = self.model.decode(new, self.memory, None, self.src_mask, self.cache)
        return self.model.generator(hidden[:, -1])

    def reorder(self, index: Tensor) -> None:
        self.memory = self.memory.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


def _check_prefix(prefix: Tensor, max_len: int, scorer: Scorer) -> Tensor:
    """Validate the settings; return `prefix` on the scorer's model's device (a prompt built
    on the CPU decodes with a model on the GPU, and the result comes back on that device)."""
    if not all(callable(getattr(scorer, name, None)) for name in ("next_logits", "reorder")):
        raise ValueError(
            "scorer must have next_logits(prefix) and reorder(index) (a Scorer: wrap a model in "
            "Seq2SeqScorer, utils.gpt.LMScorer or utils.modern.ModernScorer), got "
            f"{type(scorer).__name__}"
        )
    check_token_ids(prefix, "prefix")
    if prefix.shape[1] == 0:
        raise ValueError("prefix must hold at least one token (e.g. <bos>)")
    check_positive_int("max_len", max_len)
    if max_len <= prefix.shape[1]:
        raise ValueError(
            f"max_len={max_len} leaves no room to generate after a prefix of "
            f"{prefix.shape[1]} tokens; max_len counts the prefix too"
        )
    limit = getattr(scorer, "max_positions", None)
    if limit is not None and max_len > limit and not getattr(scorer, "slides", False):
        raise ValueError(
            f"max_len={max_len} exceeds the {limit} positions of the model's positional table"
        )
    return prefix.to(getattr(scorer, "device", prefix.device))


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al., 2016); 1 for alpha = 0.

    Not Hugging Face's `length_penalty` nor fairseq's `--lenpen`: those divide log P(Y) by
    |Y|^alpha (notebook 11, section 4.2, compares the conventions).
    """
    return ((5 + length) / 6) ** alpha


def _generate(
    scorer: Scorer,
    prefix: Tensor,
    max_len: int,
    eos_id: int | None,
    pad_id: int,
    pick: Callable[[Tensor], Tensor],
) -> Tensor:
    """The loop greedy search and sampling share; only `pick`, logits `(B, V)` -> ids `(B,)`,
    differs. Each sequence stops at its own `<eos>` and leaves the batch through
    `scorer.reorder`. Returns `(B, L)`: prefix, generated tokens, then `pad_id`."""
    batch, start = prefix.shape
    out = torch.full((batch, max_len), pad_id, dtype=torch.long, device=prefix.device)
    out[:, :start] = prefix
    active = torch.arange(batch, device=prefix.device)  # rows of `out` still generating
    seqs = prefix
    length = start
    for t in range(start, max_len):
        next_token = pick(scorer.next_logits(seqs))  # (B_active,)
        out[active, t] = next_token
        seqs = torch.cat([seqs, next_token[:, None]], dim=1)
        length = t + 1
        if eos_id is None:
            continue
        going = next_token != eos_id
        if not bool(going.all()):
            keep = going.nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            scorer.reorder(keep)
            active, seqs = active[keep], seqs[keep]
    return out[:, :length]


def greedy_search(
    scorer: Scorer, prefix: Tensor, max_len: int, eos_id: int | None, pad_id: int = PAD_ID
) -> Tensor:
    """Pick the most probable next token until `<eos>` or `max_len`, for a whole batch.

    Each sequence stops at its own `<eos>` and leaves the batch (so the model stops
    spending work on it); the rest go on. Returns `(B, L)`: the prefix, the generated
    tokens (with `<eos>`), then `pad_id` up to the longest sequence, L <= max_len.
    """
    prefix = _check_prefix(prefix, max_len, scorer)
    return _generate(scorer, prefix, max_len, eos_id, pad_id, lambda logits: logits.argmax(-1))


@dataclass(frozen=True)
class Hypothesis:
    """One beam-search result: `tokens` (generated ids, `<eos>` included if it ended),
    `logprob` = log P(tokens | prefix), `score` = logprob / length_penalty(len(tokens))."""

    tokens: list[int]
    logprob: float
    score: float


def beam_search(
    scorer: Scorer,
    prefix: Tensor,
    beam_size: int,
    max_len: int,
    eos_id: int,
    pad_id: int = PAD_ID,
    alpha: float = 0.6,
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Beam search with GNMT's length penalty, batched over sentences.

    Per sentence, `beam_size` live hypotheses are extended by every token; the best
    `2 * beam_size` candidates are scored by their summed log-probabilities. A candidate
    that ends in `<eos>` and ranks among the best `beam_size` is *finished*: it is set
    aside (never extended again, never dropped). The other candidates refill the beam.
    A sentence is done when it has `n_best` finished hypotheses and none of its live ones
    can beat them: a live hypothesis's score can at best become logprob / lp(max generated
    length), since log-probabilities only fall and lp only grows with length (alpha >= 0).
    At `max_len`, live hypotheses are finished as they are (without `<eos>`).

    Returns, per sentence, the `n_best` best `Hypothesis`es, best first.
    """
    prefix = _check_prefix(prefix, max_len, scorer)
    check_positive_int("beam_size", beam_size)
    check_positive_int("n_best", n_best)
    if n_best > beam_size:
        raise ValueError(f"n_best must be an int in [1, beam_size={beam_size}], got {n_best!r}")
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or alpha < 0:
        raise ValueError(f"alpha must be a non-negative number, got {alpha!r}")
    batch, start = prefix.shape
    k = beam_size
    device = prefix.device
    # every sentence starts with k copies of its prefix; only the first is alive
    scorer.reorder(torch.arange(batch, device=device).repeat_interleave(k))
    seqs = prefix.repeat_interleave(k, dim=0)  # (B*k, t)
    beam_logprob = torch.full((batch, k), float("-inf"), device=device)
    beam_logprob[:, 0] = 0.0
    active = list(range(batch))  # sentence ids still searching; row block a*k..a*k+k-1
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    best_bound = length_penalty(max_len - start, alpha)
    for t in range(start, max_len):
        logp = F.log_softmax(scorer.next_logits(seqs).float(), dim=-1)  # (A*k, V)
        vocab = logp.shape[-1]
        cand = (beam_logprob[:, :, None] + logp.view(len(active), k, vocab)).view(len(active), -1)
        n_cand = min(2 * k, cand.shape[1])
        top_values, top_indices = cand.topk(n_cand, dim=1)  # (A, 2k), best first
        top_logprob, top_idx = top_values.tolist(), top_indices.tolist()
        rows, tokens, logprobs, still_active = [], [], [], []
        for a, sentence in enumerate(active):
            alive: list[tuple[int, int, float]] = []
            for rank in range(n_cand):
                logprob = top_logprob[a][rank]
                if logprob == float("-inf"):
                    break
                row = a * k + top_idx[a][rank] // vocab
                token = top_idx[a][rank] % vocab
                if token == eos_id:
                    if rank < k:
                        generated = seqs[row, start:].tolist() + [token]
                        score = logprob / length_penalty(len(generated), alpha)
                        finished[sentence].append(Hypothesis(generated, logprob, score))
                elif len(alive) < k:
                    alive.append((row, token, logprob))
            done_list = sorted(finished[sentence], key=lambda hyp: -hyp.score)
            finished[sentence] = done_list
            # the best score a live hypothesis could still reach (see the docstring)
            best_reachable = max((logprob for _, _, logprob in alive), default=0.0) / best_bound
            can_improve = bool(alive) and (
                len(done_list) < n_best or best_reachable > done_list[n_best - 1].score
            )
            if not can_improve or t + 1 == max_len:
                if t + 1 == max_len:  # out of room: live hypotheses end here
                    for row, token, logprob in alive:
                        generated = seqs[row, start:].tolist() + [token]
                        score = logprob / length_penalty(len(generated), alpha)
                        finished[sentence].append(Hypothesis(generated, logprob, score))
                continue
            still_active.append(sentence)
            while len(alive) < k:  # pad the beam with dead entries
                alive.append((alive[0][0], pad_id, float("-inf")))
            for row, token, logprob in alive:
                rows.append(row)
                tokens.append(token)
                logprobs.append(logprob)
        if not still_active:
            break
        index = torch.tensor(rows, device=device)
        scorer.reorder(index)
        seqs = torch.cat([seqs[index], torch.tensor(tokens, device=device)[:, None]], dim=1)
        beam_logprob = torch.tensor(logprobs, device=device).view(len(still_active), k)
        active = still_active
    return [sorted(hyps, key=lambda hyp: -hyp.score)[:n_best] for hyps in finished]


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set the logits of tokens outside the top-k and outside the top-p nucleus to -inf.

    top-k keeps the k largest logits of each row; top-p keeps the smallest set of most
    probable tokens whose probabilities add up to at least p (Holtzman et al., 2020), so
    the most probable token always survives. `logits (..., V)` -> `(..., V)`.
    """
    if top_k is not None:
        check_positive_int("top_k", top_k)
        if top_k < logits.shape[-1]:
            kth = logits.topk(top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # probability of the better tokens
        drop_sorted = mass_before >= top_p  # the set already reached p without this token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample(
    scorer: Scorer,
    prefix: Tensor,
    max_len: int,
    eos_id: int | None = None,
    pad_id: int = PAD_ID,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    rng: torch.Generator | None = None,
) -> Tensor:
    """Draw each next token from softmax(logits / temperature), optionally top-k / top-p
    filtered; a seeded random-number generator `rng` (a `torch.Generator`) makes the draws
    reproducible. Batched; each sequence stops at its own `<eos>` (if `eos_id` is given).
    Returns `(B, L)` like `greedy_search`, whose loop it shares: only the choice of the next
    token differs.
    """
    check_positive_float("temperature", temperature)
    filter_logits(torch.zeros(1, 2), top_k, top_p)  # validate the settings before any work
    prefix = _check_prefix(prefix, max_len, scorer)

    def draw(logits: Tensor) -> Tensor:
        probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(dim=-1)
        if rng is not None and rng.device != probs.device:  # a CPU generator, a GPU model
            return torch.multinomial(probs.cpu(), 1, generator=rng).squeeze(1).to(probs.device)
        return torch.multinomial(probs, 1, generator=rng).squeeze(1)

    return _generate(scorer, prefix, max_len, eos_id, pad_id, draw)


def strip_special(seq: list[int] | Tensor, bos_id: int, eos_id: int, pad_id: int) -> list[int]:
    """Token ids between `<bos>` and the first `<eos>`, padding removed."""
    ids = seq.tolist() if isinstance(seq, Tensor) else list(seq)
    if ids and ids[0] == bos_id:
        ids = ids[1:]
    if eos_id in ids:
        ids = ids[: ids.index(eos_id)]
    return [i for i in ids if i != pad_id]


def translate(
    model: Transformer,
    src: Tensor,
    beam_size: int = 1,
    alpha: float = 0.6,
    max_len: int | None = None,
    use_cache: bool = True,
    src_mask: Tensor | None = None,
) -> list[list[int]]:
    """Decode a batch of sources `(B, S)` with greedy search (`beam_size=1`) or beam search.

    `max_len` (whole target including `<bos>`) defaults to S + 50, the paper's "input length +
    50" (section 6.1), capped by the model's positional table. Returns per sentence the target
    ids without `<bos>`, `<eos>`, padding.
    """
    check_positive_int("beam_size", beam_size)  # True would otherwise pass as 1 (greedy)
    config = model.config
    if max_len is None:
        max_len = min(src.shape[-1] + 50, config.max_len) if isinstance(src, Tensor) else 0
    with evaluation(model):
        scorer = Seq2SeqScorer(model, src, src_mask, use_cache=use_cache)
        prefix = torch.full((src.shape[0], 1), config.bos_id, dtype=torch.long)
        if beam_size == 1:
            out = greedy_search(scorer, prefix, max_len, config.eos_id, config.pad_id)
            return [strip_special(row, config.bos_id, config.eos_id, config.pad_id) for row in out]
        results = beam_search(
            scorer, prefix, beam_size, max_len, config.eos_id, config.pad_id, alpha
        )
    return [
        strip_special(hyps[0].tokens, config.bos_id, config.eos_id, config.pad_id)
        for hyps in results
    ]
