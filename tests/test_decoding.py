"""Greedy search, beam search, sampling and the key/value cache (notebook 11)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from utils.cache import KVCache
from utils.decoding import (
    Seq2SeqScorer,
    beam_search,
    evaluation,
    filter_logits,
    greedy_search,
    length_penalty,
    sample,
    translate,
)
from utils.masks import causal_mask
from utils.model import Transformer, TransformerConfig

BOS, EOS, PAD = 1, 2, 0


def tiny_model(seed: int = 0, vocab: int = 12, fused: bool = False, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(
        vocab,
        vocab,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_layers=2,
        max_len=40,
        fused=fused,
        **overrides,
    )
    model = Transformer(config).eval()
    # sharpen the output distribution a little so searches differ from each other
    with torch.no_grad():
        model.generator.proj.weight.mul_(3.0)
    return model


def sources(batch: int = 4, length: int = 6, vocab: int = 12, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (batch, length), generator=g)
    if batch > 1:
        src[1, length - 2 :] = PAD  # one padded sentence
    return src


def bos(batch: int) -> torch.Tensor:
    return torch.full((batch, 1), BOS, dtype=torch.long)


def sequence_logprob(model: Transformer, src: torch.Tensor, tokens: list[int]) -> float:
    """log P(tokens | src) by one teacher-forced forward pass (no cache, no search)."""
    tgt = torch.tensor([[BOS, *tokens]])
    with torch.no_grad():
        logp = F.log_softmax(model(src[None], tgt[:, :-1]).float(), dim=-1)[0]
    return float(logp.gather(1, tgt[0, 1:, None]).sum())


# ------------------------------------------------------------------ cache


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_full_recomputation(fused: bool, norm_first: bool) -> None:
    model = tiny_model(fused=fused, norm_first=norm_first)
    src = sources()
    tgt = torch.randint(3, 12, (4, 9), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = BOS
    with torch.no_grad():
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        full = model.generator(model.decode(tgt, memory, memory_mask=src_mask))
        cache = model.init_cache()
        steps = [model.generator(model.decode(tgt[:, :3], memory, None, src_mask, cache))]
        for t in range(3, 9):
            hidden = model.decode(tgt[:, t : t + 1], memory, memory_mask=src_mask, cache=cache)
            steps.append(model.generator(hidden))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 9


def test_cross_attention_keys_are_projected_once_per_source() -> None:
    model = tiny_model()
    calls = []
    layer = model.decoder.layers[0]
    layer.cross_attn.w_k.register_forward_hook(lambda *args: calls.append(1))
    with evaluation(model):
        scorer = Seq2SeqScorer(model, sources())
        greedy_search(scorer, bos(4), max_len=8, eos_id=None)
    assert len(calls) == 1


def test_cached_greedy_and_beam_give_identical_tokens() -> None:
    model = tiny_model()
    src = sources()
    for beam in (1, 3):
        cached = translate(model, src, beam_size=beam, max_len=15, use_cache=True)
        full = translate(model, src, beam_size=beam, max_len=15, use_cache=False)
        assert cached == full


def test_cache_reorder_follows_the_batch() -> None:
    cache = KVCache(n_layers=1, cross=False)
    cache.self_attn[0].k = torch.arange(3.0).view(3, 1, 1, 1)
    cache.self_attn[0].v = torch.arange(3.0).view(3, 1, 1, 1)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.self_attn[0].k.flatten().tolist() == [2.0, 2.0, 0.0]
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        cache.reorder(torch.tensor([3]))


def test_a_cache_from_another_batch_size_is_refused() -> None:
    model = tiny_model()
    memory = model.encode(sources(batch=3))
    kv = model.init_cache()
    model.decode(bos(3), memory, cache=kv)
    with pytest.raises(ValueError, match="batch of 3"):
        model.decode(bos(2), memory[:2], cache=kv)


def test_new_tokens_get_their_own_position() -> None:
    """A cached step at position t must use PE(t): feeding it at position 0 changes the output."""
    model = tiny_model()
    tgt = torch.tensor([[BOS, 5, 6, 7]])
    memory = model.encode(sources(batch=1))
    with torch.no_grad():
        full = model.decode(tgt, memory)[:, -1]
        cache = model.init_cache()
        model.decode(tgt[:, :3], memory, cache=cache)
        step = model.decode(tgt[:, 3:], memory, cache=cache)[:, -1]
    torch.testing.assert_close(step, full, atol=1e-5, rtol=0)
    assert causal_mask(2, offset=3).tolist() == [[True] * 4 + [False], [True] * 5]


# ------------------------------------------------------------------ greedy and beam


def test_greedy_stops_each_sequence_at_its_own_eos() -> None:
    class Script:
        """A fake scorer: row r says EOS at step r + 1, token 5 otherwise."""

        max_positions = 100

        def __init__(self) -> None:
            self.rows = torch.arange(3)

        def next_logits(self, prefix: torch.Tensor) -> torch.Tensor:
            logits = torch.zeros(prefix.shape[0], 8)
            t = prefix.shape[1]
            for i, r in enumerate(self.rows.tolist()):
                logits[i, EOS if t == r + 1 else 5] = 1.0
            return logits

        def reorder(self, index: torch.Tensor) -> None:
            self.rows = self.rows[index]

    out = greedy_search(Script(), bos(3), max_len=10, eos_id=EOS)
    assert out.tolist() == [[BOS, EOS, PAD, PAD], [BOS, 5, EOS, PAD], [BOS, 5, 5, EOS]]


def test_beam_size_one_equals_greedy() -> None:
    model = tiny_model()
    src = sources()
    greedy = translate(model, src, beam_size=1, max_len=15)
    with evaluation(model):
        hyps = beam_search(Seq2SeqScorer(model, src), bos(4), 1, 15, EOS, alpha=0.0)
    assert [[t for t in best[0].tokens if t != EOS] for best in hyps] == greedy


def test_beam_score_is_the_recomputed_log_probability() -> None:
    model = tiny_model()
    src = sources()
    with evaluation(model):
        hyps = beam_search(Seq2SeqScorer(model, src), bos(4), 4, 12, EOS, alpha=0.6, n_best=2)
    for b, best in enumerate(hyps):
        for hyp in best:
            recomputed = sequence_logprob(model, src[b], hyp.tokens)
            assert abs(hyp.logprob - recomputed) < 1e-4
            assert abs(hyp.score - recomputed / length_penalty(len(hyp.tokens), 0.6)) < 1e-4
        assert best[0].score >= best[1].score


def test_length_penalty_is_gnmts_formula() -> None:
    # lp(Y) = ((5 + |Y|) / 6)^alpha, computed by hand: (9 / 6)^0.6 = 1.5^0.6 = 1.27542...
    # (a 5 in the denominator would give 1.8^0.6 = 1.42286; rankings would not change, but
    # every reported score would)
    assert length_penalty(4, 0.6) == pytest.approx(1.2754245, abs=1e-7)
    assert length_penalty(1, 0.6) == 1.0  # one token: no penalty, whatever alpha
    assert length_penalty(7, 0.0) == 1.0


TINY = 1e-12  # <pad>, <bos> and unwanted tokens: probability about 0


class StepScorer:
    """Next-token probabilities that depend only on the step: `steps[i]` for generated token
    i + 1 (the last one repeats), over the vocabulary <pad>, <bos>, <eos>, a = 3, b = 4."""

    max_positions = 100

    def __init__(self, steps: list[list[float]]) -> None:
        self.steps, self.calls = steps, 0

    def next_logits(self, prefix: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        probs = self.steps[min(prefix.shape[1] - 1, len(self.steps) - 1)]
        return torch.tensor(probs).log().expand(prefix.shape[0], -1)

    def reorder(self, index: torch.Tensor) -> None:
        pass


def test_beam_search_reports_gnmt_scores_and_stops_as_soon_as_the_bound_allows() -> None:
    # After step 3, "a a <eos>" is finished: logprob L = 2 log 0.9 + log 0.6 = -0.7215, score
    # L / ((5 + 3) / 6)^0.6 = -0.6071. The best live hypothesis "a a a" has logprob
    # 2 log 0.9 + log 0.3 = -1.4147; with 16 tokens allowed, the best it can reach is
    # -1.4147 / ((5 + 16) / 6)^0.6 = -0.6672 < -0.6071, so the search stops after 3 scorer
    # calls. A stopping test that compared the bound with the finished hypothesis's raw
    # log-probability (-0.7215) would go on, and return the same result later.
    a_twice = [TINY, TINY, TINY, 0.9, 0.1]
    scorer = StepScorer([a_twice, a_twice, [TINY, TINY, 0.6, 0.3, 0.1]])
    [[best]] = beam_search(scorer, bos(1), beam_size=2, max_len=1 + 16, eos_id=EOS, alpha=0.6)
    assert best.tokens == [3, 3, EOS]
    logprob = 2 * math.log(0.9) + math.log(0.6)
    assert best.logprob == pytest.approx(logprob, abs=1e-5)
    assert best.score == pytest.approx(logprob / 1.1884016, abs=1e-5)  # (8 / 6)^0.6 by hand
    assert scorer.calls == 3


def test_beam_search_stops_on_the_best_score_not_the_best_log_probability() -> None:
    # Two finished hypotheses rank differently by log-probability and by score:
    # "a <eos>" (step 2): L = log 0.95 + log 0.3873 = -1.000, score -1.000 / 1.0970 = -0.912;
    # "a a a <eos>" (step 4): L = -1.080, score -1.080 / 1.2754 = -0.847, the best score.
    # After step 4 the best live hypothesis "a a a a" (L = -1.817) can reach at best
    # -1.817 / 2.1205 = -0.857: below the best score, above the other. The search stops there
    # (4 scorer calls) only if its stopping test ranks the finished hypotheses by score.
    a_likely = [TINY, TINY, TINY, 0.95, 0.05]
    steps = [a_likely, [TINY, TINY, 0.3873, 0.6, 0.0127], a_likely, [TINY, TINY, 0.627, 0.3, 0.073]]
    scorer = StepScorer(steps)
    [[best]] = beam_search(scorer, bos(1), beam_size=2, max_len=1 + 16, eos_id=EOS)
    assert best.tokens == [3, 3, 3, EOS]
    short = math.log(0.95) + math.log(0.3873)  # "a <eos>"
    assert best.logprob < short and best.score > short / length_penalty(2, 0.6)
    assert scorer.calls == 4


def test_wide_beam_finds_the_exhaustive_optimum() -> None:
    vocab, max_len = 5, 5  # ids 3, 4 are words; sequences of up to 4 generated tokens
    model = tiny_model(seed=3, vocab=vocab)
    src = torch.tensor([[3, 4, 3]])
    best_score, best_tokens = float("-inf"), None
    for alpha in (0.0, 0.6, 1.0):
        best_score, best_tokens = float("-inf"), None
        for n in range(1, max_len):  # n generated tokens
            for body in itertools.product(range(vocab), repeat=n - 1):
                for last in range(vocab):
                    tokens = [*body, last]
                    if EOS in tokens[:-1]:
                        continue  # a hypothesis ends at its first EOS
                    if n < max_len - 1 and last != EOS:
                        continue  # shorter than the limit: only finished hypotheses
                    lp = sequence_logprob(model, src[0], tokens)
                    score = lp / length_penalty(n, alpha)
                    if score > best_score:
                        best_score, best_tokens = score, tokens
        with evaluation(model):
            hyps = beam_search(Seq2SeqScorer(model, src), bos(1), 200, max_len, EOS, alpha=alpha)
        assert hyps[0][0].tokens == best_tokens
        assert abs(hyps[0][0].score - best_score) < 1e-4


def test_a_batch_decodes_like_one_sentence_at_a_time() -> None:
    model = tiny_model()
    src = sources()
    for beam in (1, 4):
        batched = translate(model, src, beam_size=beam, max_len=15)
        single = [translate(model, src[i : i + 1], beam_size=beam, max_len=15)[0] for i in range(4)]
        assert batched == single


# ------------------------------------------------------------------ sampling


def test_top_k_and_top_p_filtering() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda f: torch.isfinite(f).squeeze(0).tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, True, False, False]
    # p away from the cumulative masses 0.5, 0.8, 0.95 (at a tie, float rounding decides)
    assert kept(filter_logits(logits, top_p=0.4)) == [True, False, False, False]
    assert kept(filter_logits(logits, top_p=0.75)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.85)) == [True, True, True, False]
    assert kept(filter_logits(logits, top_p=1.0)) == [True] * 4


def test_sampling_is_reproducible_with_a_seeded_rng_and_low_temperature_is_greedy() -> None:
    model = tiny_model()
    src = sources()
    with evaluation(model):
        runs = [
            sample(Seq2SeqScorer(model, src), bos(4), 12, EOS, rng=torch.Generator().manual_seed(7))
            for _ in range(2)
        ]
        cold = sample(
            Seq2SeqScorer(model, src),
            bos(4),
            12,
            EOS,
            temperature=1e-4,
            rng=torch.Generator().manual_seed(7),
        )
        greedy = greedy_search(Seq2SeqScorer(model, src), bos(4), 12, EOS)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(cold, greedy)


# ------------------------------------------------------------------ bad input


def test_bad_decoding_settings_raise_clear_errors() -> None:
    model = tiny_model()
    src = sources()
    with evaluation(model):
        scorer = Seq2SeqScorer(model, src)
        with pytest.raises(ValueError, match="beam_size must be a positive int"):
            beam_search(scorer, bos(4), 0, 10, EOS)
        with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
            sample(scorer, bos(4), 10, top_p=1.5)
        with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
            sample(scorer, bos(4), 10, top_p=0.0)
        with pytest.raises(ValueError, match="temperature must be a positive number"):
            sample(scorer, bos(4), 10, temperature=0)
        with pytest.raises(ValueError, match="leaves no room"):
            greedy_search(scorer, torch.ones(4, 5, dtype=torch.long), 5, EOS)
        with pytest.raises(ValueError, match="exceeds the 40 positions"):
            greedy_search(scorer, bos(4), 41, EOS)
        with pytest.raises(ValueError, match="source length 41 exceeds the model's max_len 40"):
            Seq2SeqScorer(model, torch.full((1, 41), 5))
        with pytest.raises(ValueError, match=r"ids must be in \[0, 12\)"):
            Seq2SeqScorer(model, torch.full((1, 3), 12))
        with pytest.raises(ValueError, match="at least one token"):
            Seq2SeqScorer(model, torch.zeros(1, 0, dtype=torch.long))


def test_a_scorer_refuses_a_model_in_training_mode() -> None:
    """Dropout on would make decoding random (and cached != recomputed)."""
    model = tiny_model(dropout=0.1).train()
    with pytest.raises(ValueError, match="model is in training mode"):
        Seq2SeqScorer(model, sources())
    with evaluation(model):
        Seq2SeqScorer(model, sources())  # fine in eval mode
    assert model.training  # and evaluation() restored the mode


def test_translate_refuses_a_bool_beam_size() -> None:
    """`True == 1` would otherwise run greedy search without a word."""
    model = tiny_model()
    for bad in (True, 0, 2.0):
        with pytest.raises(ValueError, match="beam_size must be a positive int"):
            translate(model, sources(), beam_size=bad, max_len=8)


def test_a_static_cache_refuses_another_source_length() -> None:
    """A cached decoder step fed a memory of another length must not reuse the old keys."""
    model = tiny_model()
    with torch.no_grad():
        memory = model.encode(sources(batch=2, length=6))
        cache = model.init_cache()
        model.decode(bos(2), memory, cache=cache)
        with pytest.raises(ValueError, match="memory of 6 positions, but the memory has 4"):
            model.decode(torch.full((2, 1), 5), memory[:, :4], cache=cache)


def test_greedy_and_sampling_share_one_loop() -> None:
    """A sampler whose distribution is one-hot on the argmax reproduces greedy search."""
    model = tiny_model()
    src = sources()
    with evaluation(model):
        greedy = greedy_search(Seq2SeqScorer(model, src), bos(4), 12, EOS)
        drawn = sample(
            Seq2SeqScorer(model, src),
            bos(4),
            12,
            EOS,
            top_k=1,
            rng=torch.Generator().manual_seed(0),
        )
    assert torch.equal(drawn, greedy)


def test_a_generated_pad_token_is_read_the_same_with_and_without_cache() -> None:
    """An untrained model may emit <pad>; both paths must treat it as a token, not padding."""
    model = tiny_model()
    src = sources()
    prefix = torch.tensor([[BOS, PAD, 5, PAD]] * 4)
    with evaluation(model):
        full = Seq2SeqScorer(model, src, use_cache=False).next_logits(prefix)
        cached_scorer = Seq2SeqScorer(model, src, use_cache=True)
        for t in range(1, 5):
            cached = cached_scorer.next_logits(prefix[:, :t])
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=0)


def test_a_cache_for_another_kind_of_model_is_refused() -> None:
    model = tiny_model()
    memory = model.encode(sources(batch=1))
    with pytest.raises(ValueError, match="with 2 layers for an encoder-decoder"):
        model.decode(bos(1), memory, cache=KVCache(n_layers=2, cross=False))
    with pytest.raises(ValueError, match="with 2 layers for an encoder-decoder"):
        model.decode(bos(1), memory, cache=KVCache(n_layers=3, cross=True))


# ------------------------------------------------------------------ #26 §3: found by using it


def test_a_broadcast_source_mask_survives_reorder() -> None:
    """A mask `(1, 1, 1, S)` (or `(S,)`) broadcasts over the batch; `reorder`, which greedy
    calls when a row finishes first and beam search at every step, must still find each row's."""
    model = tiny_model()
    src = torch.randint(3, 12, (4, 6), generator=torch.Generator().manual_seed(1))  # no padding
    keep, prefix = torch.tensor([1, 3]), torch.tensor([[BOS, 5], [BOS, 7]])
    with evaluation(model):
        scorer = Seq2SeqScorer(model, src)
        scorer.next_logits(bos(4))
        scorer.reorder(keep)  # rows 0 and 2 finished first
        expected = scorer.next_logits(prefix)
        for mask in (torch.ones(1, 1, 1, 6, dtype=torch.bool), torch.ones(6, dtype=torch.bool)):
            scorer = Seq2SeqScorer(model, src, src_mask=mask)
            scorer.next_logits(bos(4))
            scorer.reorder(keep)
            assert torch.equal(scorer.next_logits(prefix), expected)
    broadcast = torch.ones(1, 1, 1, 6, dtype=torch.bool)
    for beam in (1, 3):
        assert translate(model, src, beam, max_len=8, src_mask=broadcast) == translate(
            model, src, beam, max_len=8
        )


def test_a_source_mask_of_the_wrong_shape_is_refused_at_the_scorer() -> None:
    model = tiny_model()
    with pytest.raises(ValueError, match=r"src_mask of shape \(3, 1, 1, 6\) does not broadcast"):
        translate(model, sources(), src_mask=torch.ones(3, 1, 1, 6, dtype=torch.bool))


def test_decoding_refuses_a_model_where_a_scorer_is_expected() -> None:
    model = tiny_model()
    for search in (
        lambda s: greedy_search(s, bos(4), 8, EOS),
        lambda s: beam_search(s, bos(4), 2, 8, EOS),
        lambda s: sample(s, bos(4), 8, EOS),
    ):
        with pytest.raises(ValueError, match="scorer must have next_logits.*got Transformer"):
            search(model)


def test_a_filled_cross_attention_cache_refuses_another_memory() -> None:
    """The cross-attention keys of one source must not answer for another of the same shape."""
    model = tiny_model()
    with torch.no_grad():
        memory = model.encode(sources(batch=2, length=6))
        other = model.encode(sources(batch=2, length=6, seed=2))
        cache = model.init_cache()
        model.decode(bos(2), memory, cache=cache)
        model.decode(torch.full((2, 1), 5), memory.clone(), cache=cache)  # same values: fine
        with pytest.raises(ValueError, match="cross-attention keys of another memory"):
            model.decode(torch.full((2, 1), 5), other, cache=cache)
        # reordered together, the memory and the cache still agree
        cache.reorder(torch.tensor([1]))
        model.decode(torch.full((1, 1), 5), memory[1:], cache=cache)
        with pytest.raises(ValueError, match="cross-attention keys of another memory"):
            model.decode(torch.full((1, 1), 5), memory[:1], cache=cache)


def test_a_prompt_built_on_the_cpu_decodes_on_the_scorers_device() -> None:
    """Greedy search and beam search move the prefix to the scorer's `device` (a model on the
    GPU, a prompt from the CPU; checked on a GPU by tools/book/run_cells.py). Here the
    scorer lives on PyTorch's `meta` device, which has shapes but no values."""

    class MetaScorer:
        device = torch.device("meta")
        max_positions = 16

        def next_logits(self, prefix: torch.Tensor) -> torch.Tensor:
            assert prefix.device.type == "meta"  # the prefix was moved before any step
            return torch.zeros(prefix.shape[0], 5, device="meta")

        def reorder(self, index: torch.Tensor) -> None:
            pass

    out = greedy_search(MetaScorer(), bos(3), 6, eos_id=None)
    assert out.device.type == "meta" and out.shape == (3, 6)
