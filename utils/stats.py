"""How sure a number is: exact binomial bounds and tests, bootstraps, BLEU by sufficient statistics.

Notebooks 10-13 put a spread beside every headline number. The computations behind those
spreads live here once, each a line in the chapter:

- counts of right and wrong (notebooks 10, 11): `binomial_cdf`, the exact Clopper-Pearson
  interval `clopper_pearson` and its one-sided `binomial_upper_bound` (0 errors in n gives
  about 3 / n, the rule of three), `binomial_se`, and McNemar's exact test of two systems on
  the same items, `mcnemar_p`, with the counts it needs from `discordant_pairs`;
- means of noisy values (notebook 13): `standard_error`, and `bootstrap`, which resamples
  index sets with replacement and evaluates any statistic on them;
- intervals from resamples: `percentile_interval`, the middle `confidence` of the draws;
- BLEU (notebook 12): corpus BLEU is a function of sums over sentences (clipped n-gram
  matches and n-gram totals for n = 1..4, hypothesis length c, reference length r), so
  `bleu_statistics` takes those *sufficient statistics* per sentence from sacrebleu once, and
  `bleu_from_statistics` gives back sacrebleu's corpus BLEU of any subset of them. On top:
  `bleu_bootstrap` resamples whole groups (chapters) of sentences, `bleu_drop_spread` measures
  what dropping random sentences does, and `paired_bootstrap_p` runs sacrebleu's own paired
  bootstrap test (Koehn, 2004) between two systems.

Random draws are seeded, so every call returns the same numbers on every machine: `bootstrap`
draws with a `torch.Generator` and the BLEU resamplers with `numpy.random.default_rng`, each as
the chapter that uses it first drew them. Two calls with the same groups and seed draw the same
resamples, so the difference of two systems' `bleu_bootstrap` arrays is a *paired* bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest, Result

from utils.checks import check_positive_int

__all__ = [
    "binomial_cdf",
    "clopper_pearson",
    "binomial_upper_bound",
    "binomial_se",
    "mcnemar_p",
    "discordant_pairs",
    "standard_error",
    "bootstrap",
    "percentile_interval",
    "BLEU_COLUMNS",
    "bleu_statistics",
    "bleu_from_statistics",
    "bleu_bootstrap",
    "bleu_drop_spread",
    "paired_bootstrap_p",
]

# The columns of `bleu_statistics`: matches for n = 1..4, totals for n = 1..4, then c and r.
BLEU_COLUMNS = (
    "match_1",
    "match_2",
    "match_3",
    "match_4",
    "total_1",
    "total_2",
    "total_3",
    "total_4",
    "hyp_len",
    "ref_len",
)


# ---------------------------------------------------------------------------------------------
# argument checks (this module's own; the shared ones come from utils.checks)


def _check_count(name: str, value: object, n: int | None = None) -> int:
    """`value` if it is an int in [0, n] (or >= 0 when `n` is None), else `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if n is not None and value > n:
        raise ValueError(f"{name} must be at most n = {n}, got {value!r}")
    return int(value)


def _check_confidence(confidence: object) -> float:
    """`confidence` as a float if it is a probability strictly between 0 and 1."""
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not 0 < confidence < 1
    ):
        raise ValueError(f"confidence must be a number in (0, 1), e.g. 0.95, got {confidence!r}")
    return float(confidence)


def _check_probability(name: str, p: object) -> float:
    """`p` as a float if it is a number in [0, 1]."""
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


# ---------------------------------------------------------------------------------------------
# counts: exact binomial bounds and tests


def _betainc_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz's method).

    Converges fast for x < (a + 1) / (a + b + 2), in about sqrt(max(a, b)) terms at worst.
    """
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        for aa in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even step
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),  # the odd step
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            return h
    raise RuntimeError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b): the CDF at x of a Beta(a, b) variable."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betainc_fraction(a, b, x) / a
    return 1.0 - front * _betainc_fraction(b, a, 1.0 - x) / b  # I_x(a, b) = 1 - I_{1-x}(b, a)


def _beta_quantile(q: float, a: float, b: float) -> float:
    """The x with I_x(a, b) = q, by bisection to the last bit (I_x is increasing in x)."""
    lo, hi = 0.0, 1.0
    for _ in range(2000):
        mid = (lo + hi) / 2
        if mid in (lo, hi):  # no float left between them
            break
        lo, hi = (mid, hi) if _betainc(a, b, mid) < q else (lo, mid)
    return (lo + hi) / 2


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p): the chance of `k` or fewer successes in `n` trials.

    Computed as the regularized incomplete beta I_{1-p}(n - k, k + 1), which equals the sum
    of C(n, i) p^i (1 - p)^(n - i) over i = 0..k without its overflow for large `n`.
    """
    n = check_positive_int("n", n)
    k = _check_count("k", k, n)
    p = _check_probability("p", p)
    if k == n:
        return 1.0
    return _betainc(n - k, k + 1, 1.0 - p)


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval (lower, upper) for a rate after `k` successes in `n` trials.

    Clopper & Pearson (1934): `lower` is the rate at which `k` or more would happen with
    probability (1 - confidence) / 2, `upper` the rate at which `k` or fewer would; both are
    quantiles of a beta distribution, Beta(k, n - k + 1) and Beta(k + 1, n - k). At k = 0 the
    lower end is 0, at k = n the upper end is 1. For 5 of 10 at 95 %: (0.1871, 0.8129).
    """
    n = check_positive_int("n", n)
    k = _check_count("k", k, n)
    tail = (1.0 - _check_confidence(confidence)) / 2
    lower = 0.0 if k == 0 else _beta_quantile(tail, k, n - k + 1)
    upper = 1.0 if k == n else _beta_quantile(1.0 - tail, k + 1, n - k)
    return lower, upper


def binomial_upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided upper bound on a rate (e.g. of errors) after `k` events in `n` trials.

    The rate at which `k` or fewer would happen with probability 1 - confidence (the
    Clopper-Pearson upper end of a one-sided interval). At k = 0 it is 1 - (1 - confidence)^(1/n),
    about 3 / n at 95 %: the rule of three.
    """
    n = check_positive_int("n", n)
    k = _check_count("k", k, n)
    confidence = _check_confidence(confidence)
    return 1.0 if k == n else _beta_quantile(confidence, k + 1, n - k)


def binomial_se(p: float, n: int) -> float:
    """Standard error sqrt(p (1 - p) / n) of a rate `p` measured on `n` independent trials.

    It says 0 at p = 0 or 1, which overstates the certainty: use `binomial_upper_bound` there.
    """
    p = _check_probability("p", p)
    n = check_positive_int("n", n)
    return math.sqrt(p * (1 - p) / n)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar test (a sign test) of two systems scored on the same items.

    `b` items are right with the first system only, `c` with the second only; the items both
    get right, or both wrong, say nothing about which is better. If neither were better, each
    of the b + c would go either way with probability 1/2; the p-value is twice the binomial
    tail of the smaller count, at most 1 (and 1 when b + c = 0). Exact: integer arithmetic.
    """
    b, c = _check_count("b", b), _check_count("c", c)
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n)


def discordant_pairs(
    outputs_a: Sequence[Any], outputs_b: Sequence[Any], references: Sequence[Any]
) -> tuple[int, int]:
    """(right with `a` and wrong with `b`, right with `b` and wrong with `a`): `mcnemar_p`'s input.

    An output is right when it equals its reference (`==`: token lists, strings, ...).
    """
    if not len(outputs_a) == len(outputs_b) == len(references):
        raise ValueError(
            "outputs_a, outputs_b and references must have one entry per item each, got "
            f"lengths {len(outputs_a)}, {len(outputs_b)} and {len(references)}"
        )
    rows = list(zip(outputs_a, outputs_b, references, strict=True))
    return sum(a == r != b for a, b, r in rows), sum(b == r != a for a, b, r in rows)


# ---------------------------------------------------------------------------------------------
# means and bootstraps


def _check_finite(name: str, array: npt.NDArray[np.float64]) -> None:
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array.ravel()))[0])
        raise ValueError(f"{name} must be finite numbers, got {array.ravel()[bad]} at index {bad}")


def standard_error(values: npt.ArrayLike | torch.Tensor) -> float:
    """Standard error of the mean of `values` (any shape, flattened): sample SD (ddof=1) / √n."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size < 2:
        raise ValueError(f"values must hold at least 2 numbers for a spread, got {array.size}")
    _check_finite("values", array)
    return float(array.std(ddof=1) / math.sqrt(array.size))


def bootstrap(
    statistic: Callable[..., float | Sequence[float]],
    sizes: Sequence[int],
    draws: int = 1000,
    seed: int = 0,
) -> npt.NDArray[np.float64]:
    """`statistic` on `draws` resamples of one or more samples: `(draws,)` or `(draws, k)`.

    For each draw, one index tensor per entry of `sizes` (size m: m indices in [0, m), drawn
    with replacement, `torch.long`) goes to `statistic`, which returns a number or `k` numbers.
    Independent samples (e.g. validation and training windows) are resampled independently,
    each within itself. Seeded: a `torch.Generator` with `seed`, drawn draw by draw, sample by
    sample in the order of `sizes`.
    """
    if not callable(statistic):
        raise ValueError(f"statistic must be callable, got {type(statistic).__name__}")
    if isinstance(sizes, int) or not sizes:
        raise ValueError(f"sizes must be a non-empty sequence of sample sizes, got {sizes!r}")
    sizes = [check_positive_int("each of sizes", m) for m in sizes]
    draws = check_positive_int("draws", draws)
    g = torch.Generator().manual_seed(seed)
    results = [
        statistic(*(torch.randint(0, m, (m,), generator=g) for m in sizes)) for _ in range(draws)
    ]
    return np.asarray(results, dtype=np.float64)


def percentile_interval(
    samples: npt.ArrayLike | torch.Tensor, confidence: float = 0.95
) -> npt.NDArray[np.float64]:
    """The middle `confidence` of `samples` along the first axis: `[lower, upper]`.

    `samples` of shape `(draws,)` give shape `(2,)`; `(draws, k)` give `(2, k)`, one interval
    per column. Linear interpolation between order statistics (numpy's default), the same as
    `np.percentile(samples, [2.5, 97.5], axis=0)` at 95 %.
    """
    confidence = _check_confidence(confidence)
    if isinstance(samples, torch.Tensor):
        samples = samples.detach().cpu().double().numpy()
    array = np.asarray(samples, dtype=np.float64)
    if array.ndim not in (1, 2) or array.shape[0] < 2:
        raise ValueError(
            f"samples must be (draws,) or (draws, k) with at least 2 draws, got shape {array.shape}"
        )
    _check_finite("samples", array)
    tail = round(50 * (1 - confidence), 10)  # percent in each tail: 2.5 at 95 %, exactly
    return np.percentile(array, [tail, 100 - tail], axis=0)


# ---------------------------------------------------------------------------------------------
# BLEU from sufficient statistics

_SENTENCE_BLEU = BLEU(effective_order=True)  # only its counts are used: sacrebleu's defaults


def bleu_statistics(hyps: Sequence[str], refs: Sequence[str]) -> npt.NDArray[np.int64]:
    """BLEU's sufficient statistics of each sentence: `(n_sentences, 10)` ints (`BLEU_COLUMNS`).

    Clipped n-gram matches and n-gram totals for n = 1..4, then the hypothesis length c and
    the reference length r, from sacrebleu with its default tokenizer (13a), one reference per
    sentence. Summed over any rows, `bleu_from_statistics` turns them into corpus BLEU.
    """
    if isinstance(hyps, str) or isinstance(refs, str):
        raise ValueError("hyps and refs must be sequences of sentences, got a single string")
    if len(hyps) != len(refs):
        raise ValueError(
            f"hyps and refs must have one entry per sentence each, got {len(hyps)} and {len(refs)}"
        )
    rows = []
    for hyp, ref in zip(hyps, refs, strict=True):
        s = _SENTENCE_BLEU.sentence_score(hyp, [ref])
        rows.append([*s.counts, *s.totals, s.sys_len, s.ref_len])
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(BLEU_COLUMNS))


def _check_bleu_statistics(stats: object) -> npt.NDArray[np.int64]:
    """`stats` if it is a `(n_sentences, 10)` array of non-negative ints, else `ValueError`."""
    if not isinstance(stats, np.ndarray) or stats.ndim != 2 or stats.shape[1] != len(BLEU_COLUMNS):
        shape = stats.shape if isinstance(stats, np.ndarray) else type(stats).__name__
        raise ValueError(
            f"stats must be a (n_sentences, {len(BLEU_COLUMNS)}) array from bleu_statistics, "
            f"got {shape}"
        )
    if not np.issubdtype(stats.dtype, np.integer) or (stats.size and stats.min() < 0):
        raise ValueError(f"stats must hold non-negative integer counts, got dtype {stats.dtype}")
    return stats


def _bleu_of_sums(c: npt.NDArray[np.int64]) -> float:
    """sacrebleu's corpus BLEU (exponential smoothing, its default) from summed statistics."""
    return float(
        BLEU.compute_bleu(
            c[0:4].tolist(), c[4:8].tolist(), int(c[8]), int(c[9]), smooth_method="exp"
        ).score
    )


def bleu_from_statistics(stats: npt.NDArray[np.int64]) -> float:
    """Corpus BLEU of the sentences whose rows are in `stats` `(n_sentences, 10)`.

    The rows are summed and scored with sacrebleu's own formula, so on all the rows of
    `bleu_statistics(hyps, refs)` this is `sacrebleu.corpus_bleu(hyps, [refs]).score`; on a
    subset of rows it is the corpus BLEU of that subset.
    """
    return _bleu_of_sums(_check_bleu_statistics(stats).sum(0))


def bleu_bootstrap(
    stats: npt.NDArray[np.int64],
    groups: Sequence[Hashable],
    draws: int = 1000,
    seed: int = 0,
) -> npt.NDArray[np.float64]:
    """Corpus BLEU of `draws` resamples of whole groups of sentences: `(draws,)`.

    `groups[i]` labels sentence i (e.g. its `(book, chapter)`); sentences of one group are
    alike, so the groups, not the sentences, are drawn: with G groups, each resample is G
    groups drawn with replacement, their sentences pooled and scored. Distinct labels for
    every sentence give the sentence bootstrap. The labels must sort (they are numbered in
    sorted order). The same groups and seed give the same resamples for every system: the
    difference of two systems' arrays is a paired bootstrap of their gap.
    """
    stats = _check_bleu_statistics(stats)
    if isinstance(groups, str) or len(groups) != len(stats):
        raise ValueError(
            f"groups must label each of the {len(stats)} sentences, got "
            f"{len(groups) if not isinstance(groups, str) else 'a string'}"
        )
    if len(stats) == 0:
        raise ValueError("stats must hold at least one sentence, got 0")
    draws = check_positive_int("draws", draws)
    keys = sorted(set(groups))  # type: ignore[type-var]
    number = {key: i for i, key in enumerate(keys)}
    per_group = np.zeros((len(keys), stats.shape[1]), dtype=np.int64)
    np.add.at(per_group, [number[g] for g in groups], stats)  # each group's summed statistics
    picks = np.random.default_rng(seed).integers(0, len(keys), size=(draws, len(keys)))
    return np.array([_bleu_of_sums(per_group[pick].sum(0)) for pick in picks])


def bleu_drop_spread(stats: npt.NDArray[np.int64], n_drop: int, draws: int = 200) -> float:
    """SD of corpus BLEU when `n_drop` sentences chosen at random are left out, over `draws`.

    The yardstick for leaving out a chosen set of `n_drop` sentences (e.g. near duplicates of
    training data): a change several times this SD is more than dropping any sentences does.
    Draw i keeps `np.random.default_rng(i).permutation(n)[n_drop:]`; the SD is numpy's (ddof 0).
    """
    stats = _check_bleu_statistics(stats)
    n_drop = _check_count("n_drop", n_drop)
    if not n_drop < len(stats):
        raise ValueError(
            f"n_drop must be less than the {len(stats)} sentences, so that some remain, "
            f"got {n_drop}"
        )
    draws = check_positive_int("draws", draws)
    kept = [np.random.default_rng(i).permutation(len(stats))[n_drop:] for i in range(draws)]
    return float(np.std([_bleu_of_sums(stats[keep].sum(0)) for keep in kept]))


def paired_bootstrap_p(
    base_hyps: Sequence[str],
    system_hyps: Sequence[str],
    refs: Sequence[str],
    n_samples: int = 1000,
) -> float:
    """p-value of sacrebleu's paired bootstrap test of BLEU (`--paired-bs`): system vs base.

    Sentences are resampled `n_samples` times, the same draws for both systems (Koehn, 2004,
    as in Moses' script); p = (c + 1) / (n_samples + 1), where c counts the resamples whose
    centred |difference| exceeds the observed one. So the smallest p it can give is
    1 / (n_samples + 1). sacrebleu seeds it (12345, or the environment's `SACREBLEU_SEED`).
    """
    if any(isinstance(x, str) for x in (base_hyps, system_hyps, refs)):
        raise ValueError("base_hyps, system_hyps and refs must be lists of sentences, not one str")
    if not len(base_hyps) == len(system_hyps) == len(refs):
        raise ValueError(
            "base_hyps, system_hyps and refs must have one entry per sentence each, got "
            f"lengths {len(base_hyps)}, {len(system_hyps)} and {len(refs)}"
        )
    n_samples = check_positive_int("n_samples", n_samples)
    _, tested = PairedTest(
        [("base", list(base_hyps)), ("system", list(system_hyps))],
        {"BLEU": BLEU()},
        [list(refs)],
        test_type="bs",
        n_samples=n_samples,
    )()
    result = tested["BLEU"][1]  # [0] is the base system's
    if not isinstance(result, Result) or result.p_value is None:
        raise RuntimeError(f"sacrebleu's PairedTest returned no p-value: {result!r}")
    return float(result.p_value)
