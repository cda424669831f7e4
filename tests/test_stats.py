"""utils.stats against known values: Clopper-Pearson bounds (R's binom.test), the binomial CDF
against exact fractions, McNemar's exact p, sacrebleu's corpus BLEU from summed per-sentence
statistics, and seeded resamplers that draw what the chapters drew."""

import math
from fractions import Fraction

import numpy as np
import pytest
import sacrebleu
import torch
from sacrebleu.significance import PairedTest

from utils.stats import (
    BLEU_COLUMNS,
    binomial_cdf,
    binomial_se,
    binomial_upper_bound,
    bleu_bootstrap,
    bleu_drop_spread,
    bleu_from_statistics,
    bleu_statistics,
    bootstrap,
    clopper_pearson,
    discordant_pairs,
    mcnemar_p,
    paired_bootstrap_p,
    percentile_interval,
    standard_error,
)

# a few sentences with their references: partial matches, a short one without 4-grams, a
# perfect one, one with no match at all, and a hypothesis shorter than its reference
HYPS = [
    "the cat sat on the mat today",
    "a dog runs",
    "And God said, Let there be light: and there was light.",
    "completely unrelated words here",
    "In the beginning God created the heaven",
    "He went to the city of David and stayed",
]
REFS = [
    "the cat sat on a mat",
    "the dog runs fast",
    "And God said, Let there be light: and there was light.",
    "a fine morning",
    "In the beginning God created the heaven and the earth.",
    "He went up to the city of David, and stayed there.",
]
GROUPS = [("Gen", 1), ("Gen", 1), ("Gen", 1), ("Exod", 2), ("Exod", 2), ("Ruth", 4)]


# --------------------------------------------------------------------------------------------
# counts


def exact_cdf(k: int, n: int, p: Fraction) -> Fraction:
    """P(X <= k) for X ~ Binomial(n, p), in exact rational arithmetic."""
    return sum((math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1)), Fraction(0))


def test_binomial_cdf_equals_the_exact_sum_of_binomial_terms():
    for n in range(1, 13):
        for k in range(n + 1):
            for p in (Fraction(1, 10), Fraction(1, 3), Fraction(1, 2), Fraction(7, 8)):
                assert binomial_cdf(k, n, float(p)) == pytest.approx(
                    float(exact_cdf(k, n, p)), abs=1e-13
                ), (k, n, p)
    assert binomial_cdf(3, 5, 0.0) == 1.0 and binomial_cdf(3, 5, 1.0) == 0.0
    assert binomial_cdf(5, 5, 0.3) == 1.0


def test_binomial_cdf_has_no_overflow_for_large_n():
    # the sum of comb(n, i) p^i (1-p)^(n-i) overflows a float here; the median of a fair coin
    # at n = 3,001 (odd) is exactly in the middle: P(X <= 1500) = 1/2
    assert binomial_cdf(1500, 3001, 0.5) == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [  # R: binom.test(k, n)$conf.int (Clopper-Pearson, 95 %)
        (0, 10, (0.0, 0.3084971)),
        (5, 10, (0.1870860, 0.8129140)),
        (1, 10, (0.002528579, 0.4450161)),
        (10, 10, (0.6915029, 1.0)),
    ],
)
def test_clopper_pearson_known_values(k, n, expected):
    lower, upper = clopper_pearson(k, n)
    assert lower == pytest.approx(expected[0], abs=1e-7)
    assert upper == pytest.approx(expected[1], abs=1e-7)


@pytest.mark.parametrize(("k", "n"), [(1, 7), (3, 20), (17, 40), (2, 3000)])
def test_clopper_pearson_ends_are_where_each_tail_holds_half_the_rest(k, n):
    lower, upper = clopper_pearson(k, n, confidence=0.9)
    assert binomial_cdf(k, n, upper) == pytest.approx(0.05, abs=1e-12)  # k or fewer
    assert 1 - binomial_cdf(k - 1, n, lower) == pytest.approx(0.05, abs=1e-12)  # k or more
    mirrored = clopper_pearson(n - k, n, confidence=0.9)  # successes <-> failures
    assert lower == pytest.approx(1 - mirrored[1], abs=1e-14)
    assert upper == pytest.approx(1 - mirrored[0], abs=1e-14)


@pytest.mark.parametrize("n", [1, 10, 1000, 1177, 3000])
def test_upper_bound_after_no_errors_is_the_closed_form_near_three_over_n(n):
    # 0 errors: (1 - r)^n = 0.05, so r = 1 - 0.05^(1/n), about 3/n (the rule of three)
    assert binomial_upper_bound(0, n) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-10)
    assert binomial_upper_bound(0, 10, confidence=0.975) == pytest.approx(0.3084971, abs=1e-7)


def test_upper_bound_reproduces_notebook_10s_bounds():
    # 0 of 3,000 -> 0.0998 %, 1 of 3,000 -> 0.158 %, 0 of 1,000 -> 0.299 % (review's check)
    assert round(binomial_upper_bound(0, 3000), 6) == 0.000998
    assert round(binomial_upper_bound(1, 3000), 6) == 0.001580
    assert round(binomial_upper_bound(0, 1000), 6) == 0.002991
    assert binomial_cdf(1, 3000, binomial_upper_bound(1, 3000)) == pytest.approx(0.05, abs=1e-12)
    assert binomial_upper_bound(7, 7) == 1.0


def test_binomial_se():
    assert binomial_se(0.5, 100) == 0.05
    assert binomial_se(0.452, 500) == pytest.approx(0.022257, abs=1e-6)  # notebook 11's 0.022
    assert binomial_se(1.0, 500) == 0.0


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),
        (0, 5, 2 / 32),  # all five one way: 2 * (1/2)^5
        (9, 1, 2 * 11 / 1024),  # 2 * (1 + 10) / 2^10
        (17, 18, 1.0),  # notebook 11's seeds: 1.000, 0.043, 0.024, pooled 0.017
        (21, 9, 0.04277394525706768),
        (21, 8, 0.0241195447742939),
        (59, 35, 0.01720959558593046),
    ],
)
def test_mcnemar_exact_p_known_values(b, c, expected):
    assert mcnemar_p(b, c) == pytest.approx(expected, rel=1e-15)
    assert mcnemar_p(c, b) == mcnemar_p(b, c)


def test_discordant_pairs_counts_the_items_only_one_system_gets_right():
    refs = [[1, 2], [3], [4, 5], [6], [7]]
    a = [[1, 2], [3], [0], [0], [7]]  # right on 0, 1, 4
    b = [[1, 2], [0], [4, 5], [6], [0]]  # right on 0, 2, 3
    assert discordant_pairs(a, b, refs) == (2, 2)
    assert discordant_pairs(a, refs, refs) == (0, 2)


# --------------------------------------------------------------------------------------------
# means, bootstraps, intervals


def test_standard_error_of_the_mean():
    # SD (n - 1) of 1, 2, 3, 4 is sqrt(5/3); over sqrt(4)
    assert standard_error([1, 2, 3, 4]) == pytest.approx(math.sqrt(5 / 3) / 2, rel=1e-15)
    assert standard_error(torch.tensor([[1.0, 2.0], [3.0, 4.0]])) == standard_error([1, 2, 3, 4])


def test_bootstrap_draws_what_notebook_13_drew():
    # the chapter's loop, inline: per draw, one torch.randint per sample, in order
    values_a, values_b = torch.randn(40), torch.randn(25)

    def gap(ia, ib):
        return values_a[ia].mean().item() - values_b[ib].mean().item()

    g = torch.Generator().manual_seed(0)
    chapter = [
        gap(torch.randint(0, 40, (40,), generator=g), torch.randint(0, 25, (25,), generator=g))
        for _ in range(200)
    ]
    boot = bootstrap(gap, (40, 25), draws=200)
    assert boot.shape == (200,) and boot.tolist() == chapter
    assert np.array_equal(bootstrap(gap, (40, 25), draws=200), boot)  # seeded: reproducible
    assert not np.array_equal(bootstrap(gap, (40, 25), draws=200, seed=1), boot)


def test_bootstrap_passes_index_sets_and_stacks_several_statistics():
    seen = []

    def stats(idx):
        seen.append(idx)
        return float(idx.min()), float(idx.max())

    boot = bootstrap(stats, [7], draws=5, seed=3)
    assert boot.shape == (5, 2)
    assert all(i.shape == (7,) and i.dtype == torch.long for i in seen)
    assert boot.min() >= 0 and boot.max() <= 6


def test_percentile_interval_is_numpys_percentile():
    samples = np.random.default_rng(0).normal(size=1000)
    assert np.array_equal(percentile_interval(samples), np.percentile(samples, [2.5, 97.5]))
    assert np.array_equal(percentile_interval(samples, 0.9), np.percentile(samples, [5, 95]))
    assert percentile_interval(np.arange(101.0)).tolist() == [2.5, 97.5]
    two = np.stack([samples, 2 * samples], axis=1)  # (draws, 2): one interval per column
    lo, hi = percentile_interval(two)
    assert np.allclose(lo, [np.percentile(samples, 2.5), 2 * np.percentile(samples, 2.5)])
    assert np.allclose(hi, [np.percentile(samples, 97.5), 2 * np.percentile(samples, 97.5)])


# --------------------------------------------------------------------------------------------
# BLEU from sufficient statistics


def test_summed_statistics_give_sacrebleus_corpus_bleu_exactly():
    stats = bleu_statistics(HYPS, REFS)
    assert stats.shape == (len(HYPS), len(BLEU_COLUMNS)) and stats.dtype == np.int64
    assert bleu_from_statistics(stats) == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    for rows in ([0, 1], [2, 4, 5], [3], [1, 3, 5]):  # any subset: the subset's corpus BLEU
        subset = sacrebleu.corpus_bleu([HYPS[i] for i in rows], [[REFS[i] for i in rows]])
        assert bleu_from_statistics(stats[rows]) == subset.score, rows
    assert bleu_from_statistics(stats[[2]]) == pytest.approx(100.0)  # the perfect sentence


def test_bleu_bootstrap_resamples_groups_with_a_seed():
    stats = bleu_statistics(HYPS, REFS)
    boot = bleu_bootstrap(stats, GROUPS, draws=300)
    assert boot.shape == (300,)
    assert np.array_equal(boot, bleu_bootstrap(stats, GROUPS, draws=300))  # reproducible
    # the chapter's own version (notebook 12, section 4.2), inline
    keys = sorted(set(GROUPS))
    per_group = np.zeros((len(keys), stats.shape[1]), dtype=np.int64)
    np.add.at(per_group, [keys.index(g) for g in GROUPS], stats)
    picks = np.random.default_rng(0).integers(0, len(keys), size=(300, len(keys)))
    assert boot.tolist() == [bleu_from_statistics(per_group[pick]) for pick in picks]
    # one group: every resample is the whole test set
    whole = bleu_bootstrap(stats, ["all"] * len(HYPS), draws=5)
    assert np.all(whole == bleu_from_statistics(stats))


def test_bleu_bootstrap_differences_are_paired():
    # a system better on one sentence only (of chapter Gen 1): with the same groups and seed,
    # every resample draws the same chapters for both, so no resample reverses the gap; it is
    # 0 exactly where Gen 1 is not drawn, (2/3)^3 of the time with three chapters
    base = bleu_statistics(HYPS, REFS)
    better = bleu_statistics([REFS[0], *HYPS[1:]], REFS)
    gap = bleu_bootstrap(better, GROUPS) - bleu_bootstrap(base, GROUPS)
    assert np.all(gap >= 0)
    assert np.mean(gap == 0) == pytest.approx(8 / 27, abs=0.05)


def test_bleu_drop_spread():
    stats = bleu_statistics(HYPS, REFS)
    assert bleu_drop_spread(stats, 0, draws=10) == 0.0  # nothing dropped: the same BLEU
    kept = [np.random.default_rng(i).permutation(6)[2:] for i in range(50)]  # the chapter's
    expected = np.std([bleu_from_statistics(stats[k]) for k in kept])
    assert bleu_drop_spread(stats, 2, draws=50) == expected > 0


def test_paired_bootstrap_p_is_sacrebleus():
    better, base = HYPS[:2] + REFS[2:], HYPS
    _, tested = PairedTest(
        [("base", base), ("system", better)],
        {"BLEU": sacrebleu.metrics.BLEU()},
        [REFS],
        test_type="bs",
        n_samples=200,
    )()
    assert paired_bootstrap_p(base, better, REFS, n_samples=200) == tested["BLEU"][1].p_value
    # the references themselves against a weak system: no resample reverses it, p = 1/(n + 1)
    assert paired_bootstrap_p(HYPS, REFS, REFS, n_samples=200) == 1 / 201


# --------------------------------------------------------------------------------------------
# bad input


STATS = bleu_statistics(HYPS[:2], REFS[:2])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: clopper_pearson(11, 10), "k must be at most n = 10"),
        (lambda: clopper_pearson(-1, 10), "k must be a non-negative int"),
        (lambda: clopper_pearson(1.0, 10), "k must be a non-negative int"),
        (lambda: clopper_pearson(0, 0), "n must be a positive int"),
        (lambda: clopper_pearson(True, 10), "k must be a non-negative int"),
        (lambda: clopper_pearson(1, 10, confidence=95), r"confidence must be a number in \(0, 1\)"),
        (lambda: binomial_upper_bound(0, 10, confidence=1.0), "confidence must be a number"),
        (lambda: binomial_cdf(1, 10, 1.5), r"p must be a probability in \[0, 1\]"),
        (lambda: binomial_se(-0.1, 10), "p must be a probability"),
        (lambda: mcnemar_p(-2, 3), "b must be a non-negative int"),
        (lambda: discordant_pairs([1], [1, 2], [1, 2]), "one entry per item"),
        (lambda: standard_error([3.0]), "at least 2 numbers"),
        (lambda: bootstrap(len, []), "sizes must be a non-empty sequence"),
        (lambda: bootstrap(len, [0]), "each of sizes must be a positive int"),
        (lambda: bootstrap(len, [5], draws=0), "draws must be a positive int"),
        (lambda: bootstrap(3, [5]), "statistic must be callable"),
        (lambda: percentile_interval([1.0]), "at least 2 draws"),
        (lambda: percentile_interval([1.0, 2.0], confidence=0), "confidence must be"),
        (lambda: bleu_statistics(HYPS, REFS[:2]), "one entry per sentence each, got 6 and 2"),
        (lambda: bleu_statistics("a hyp", "a ref"), "sequences of sentences"),
        (lambda: bleu_from_statistics(STATS[:, :8]), r"\(n_sentences, 10\) array"),
        (lambda: bleu_from_statistics(STATS.sum(0)), r"\(n_sentences, 10\) array"),
        (lambda: bleu_from_statistics(STATS.astype(float)), "non-negative integer counts"),
        (lambda: bleu_bootstrap(STATS, ["a"]), "groups must label each of the 2 sentences"),
        (lambda: bleu_drop_spread(STATS, 2), "n_drop must be less than the 2 sentences"),
        (lambda: paired_bootstrap_p(HYPS, HYPS[:2], REFS), "one entry per sentence each"),
        (lambda: paired_bootstrap_p("a hyp", "a hyp", ["r"]), "lists of sentences, not one str"),
        (lambda: standard_error([1.0, float("nan")]), "finite numbers, got nan at index 1"),
        (lambda: percentile_interval([1.0, float("inf")]), "finite numbers, got inf at index 1"),
    ],
)
def test_bad_input_raises_value_error_saying_what_came(call, message):
    with pytest.raises(ValueError, match=message):
        call()
