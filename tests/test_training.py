"""Training: label smoothing (parity, log(0), conventions), the warm-up schedule, the loop."""

from __future__ import annotations

import itertools
import math
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from utils.data import LMBatch, make_batch, synthetic_pairs
from utils.model import Transformer, TransformerConfig
from utils.training import (
    History,
    exact_match,
    kl_to_smoothed,
    label_smoothing_loss,
    lm_loss,
    noam_lr,
    paper_adam,
    seq2seq_loss,
    smoothed_targets,
    train,
    warmup_linear_decay,
    warmup_scheduler,
)

PAD = 0


def _logits_and_targets(vocab: int, batch: int = 4, seq: int = 6, dtype=torch.float32):
    logits = torch.randn(batch, seq, vocab, dtype=dtype) * 3
    target = torch.randint(0, vocab, (batch, seq))
    target[0, -2:] = PAD  # padding at the end of one row
    target[1, 0] = PAD
    return logits, target


# --------------------------------------------------------------------------------------------
# label smoothing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("vocab", [3, 7, 50])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3, 0.9])
def test_uniform_smoothing_equals_torch_cross_entropy(vocab, eps, dtype):
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    logits, target = _logits_and_targets(vocab, dtype=dtype)
    logits.requires_grad_(True)
    ours = label_smoothing_loss(logits, target, eps, pad_id=PAD)
    ref = F.cross_entropy(logits.transpose(1, 2), target, label_smoothing=eps, ignore_index=PAD)
    assert abs(ours.item() - ref.item()) < tol
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g_ours, g_ref, atol=tol / 10, rtol=tol * 10)
    # The other reductions, position by position (float32: losses up to ~15, relative 1e-6).
    per = label_smoothing_loss(logits, target, eps, pad_id=PAD, reduction="none")
    per_ref = F.cross_entropy(
        logits.transpose(1, 2), target, label_smoothing=eps, ignore_index=PAD, reduction="none"
    )
    torch.testing.assert_close(per, per_ref, atol=tol, rtol=tol)
    total = label_smoothing_loss(logits, target, eps, pad_id=PAD, reduction="sum")
    assert total.item() == pytest.approx(per_ref.sum().item(), rel=tol, abs=tol)


@pytest.mark.parametrize("convention", ["uniform", "t2t", "annotated"])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
def test_loss_is_the_cross_entropy_against_the_smoothed_target(convention, eps):
    """The loss computed without building q equals -sum q log p with q built explicitly."""
    logits, target = _logits_and_targets(11, dtype=torch.float64)
    q = smoothed_targets(target.reshape(-1), 11, eps, PAD, convention, dtype=torch.float64)
    logp = F.log_softmax(logits.reshape(-1, 11), -1)
    per = -(q * logp).sum(-1)
    expected = per.sum() / (target != PAD).sum()
    ours = label_smoothing_loss(logits, target, eps, PAD, convention)
    assert abs(ours.item() - expected.item()) < 1e-12


@pytest.mark.parametrize("convention", ["uniform", "t2t", "annotated"])
def test_loss_is_kl_plus_the_targets_entropy(convention):
    logits, target = _logits_and_targets(9, dtype=torch.float64)
    eps = 0.2
    q = smoothed_targets(target.reshape(-1), 9, eps, PAD, convention, dtype=torch.float64)
    rows = q.sum(-1) > 0
    entropy = -torch.xlogy(q[rows], q[rows]).sum(-1).mean()
    loss = label_smoothing_loss(logits, target, eps, PAD, convention)
    kl = kl_to_smoothed(logits, target, eps, PAD, convention)
    assert abs(loss.item() - (kl.item() + entropy.item())) < 1e-12
    assert kl.item() > 0
    # A model that predicts q exactly has KL 0, and its loss is the entropy: the floor.
    perfect = torch.log(q.clamp(min=1e-300)).reshape(logits.shape)
    assert abs(kl_to_smoothed(perfect, target, eps, PAD, convention).item()) < 1e-9


def test_zero_targets_with_minus_infinity_logits_give_finite_loss_and_gradients():
    """log(0): a class the target gives 0 and the model -inf must contribute 0, not NaN."""
    vocab = 6
    logits = torch.randn(3, 4, vocab)
    target = torch.tensor([[2, 3, 4, 0], [5, 2, 0, 0], [1, 1, 1, 1]])
    banned = torch.zeros(vocab, dtype=torch.bool)
    banned[PAD] = True  # the model never predicts <pad> ...
    logits = logits.masked_fill(banned, float("-inf"))
    logits[2, :, 3] = float("-inf")  # ... and a row that excludes a real class too
    logits.requires_grad_(True)
    for eps, convention in [(0.0, "uniform"), (0.0, "annotated")]:
        loss = label_smoothing_loss(logits, target, eps, PAD, convention)
        (grad,) = torch.autograd.grad(loss, logits)
        assert math.isfinite(loss.item()), (eps, convention)
        assert torch.isfinite(grad).all(), (eps, convention)
    # "annotated" puts 0 on <pad>, so -inf there is fine with eps > 0 as long as the real
    # classes are finite; rows 0 and 1 only have the pad column at -inf.
    rows = logits[:2]
    loss = label_smoothing_loss(rows, target[:2], 0.1, PAD, "annotated")
    (grad,) = torch.autograd.grad(loss, logits)
    assert math.isfinite(loss.item()) and torch.isfinite(grad).all()
    # The explicit KL also handles 0 log 0.
    kl = kl_to_smoothed(rows, target[:2], 0.0, PAD, "uniform")
    assert math.isfinite(kl.item())
    # Honest infinity: "uniform" with eps > 0 puts mass on <pad>; a -inf there costs inf,
    # exactly as in PyTorch.
    inf_loss = label_smoothing_loss(rows, target[:2], 0.1, PAD, "uniform")
    ref = F.cross_entropy(rows.transpose(1, 2), target[:2], label_smoothing=0.1, ignore_index=PAD)
    assert math.isinf(inf_loss.item()) and math.isinf(ref.item())


def test_annotated_target_sums_to_one_and_puts_zero_on_pad():
    vocab, eps = 8, 0.1
    target = torch.tensor([3, 0, 7, 1])
    q = smoothed_targets(target, vocab, eps, pad_id=PAD, convention="annotated")
    torch.testing.assert_close(q.sum(-1), torch.tensor([1.0, 0.0, 1.0, 1.0]))
    assert (q[:, PAD] == 0).all()
    assert q[0, 3].item() == pytest.approx(1 - eps)
    assert q[0, 5].item() == pytest.approx(eps / (vocab - 2))
    assert (q[1] == 0).all()  # a padding position has no target at all


def test_t2t_target_puts_eps_over_v_minus_1_on_every_other_class_pad_included():
    vocab, eps = 8, 0.1
    q = smoothed_targets(torch.tensor([3, 0, 7]), vocab, eps, pad_id=PAD, convention="t2t")
    torch.testing.assert_close(q.sum(-1), torch.tensor([1.0, 0.0, 1.0]))
    assert q[0, 3].item() == pytest.approx(1 - eps)
    assert q[0, PAD].item() == pytest.approx(eps / (vocab - 1))  # <pad> gets its share
    assert q[0, 5].item() == pytest.approx(eps / (vocab - 1))
    assert (q[1] == 0).all()  # a padding position has no target at all
    q = smoothed_targets(torch.tensor([3]), vocab, eps, pad_id=None, convention="t2t")
    assert q.sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_t2t_equals_fairseqs_label_smoothed_nll_formula(eps):
    """fairseq: (1 - eps - eps_i) * nll + eps_i * (-sum_v log p_v), eps_i = eps / (|V| - 1),
    summed over non-pad positions; ours with reduction="sum" must give the same number."""
    vocab = 12
    logits, target = _logits_and_targets(vocab, dtype=torch.float64)
    logp = F.log_softmax(logits, -1)
    keep = target != PAD
    nll = -logp.gather(-1, target[..., None]).squeeze(-1)[keep].sum()
    smooth = -logp.sum(-1)[keep].sum()
    eps_i = eps / (vocab - 1)
    reference = (1 - eps - eps_i) * nll + eps_i * smooth
    ours = label_smoothing_loss(logits, target, eps, PAD, "t2t", reduction="sum")
    assert abs(ours.item() - reference.item()) < 1e-10
    # The three conventions are three different losses (for eps > 0).
    others = [
        label_smoothing_loss(logits, target, eps, PAD, c, reduction="sum").item()
        for c in ("uniform", "annotated")
    ]
    assert all(abs(o - ours.item()) > 1e-6 for o in others)


def test_uniform_target_matches_the_pytorch_convention():
    vocab, eps = 5, 0.2
    q = smoothed_targets(torch.tensor([2, 0]), vocab, eps, pad_id=None)
    assert q[0, 2].item() == pytest.approx(1 - eps + eps / vocab)
    assert q[0, 0].item() == pytest.approx(eps / vocab)  # <pad> gets its share too
    torch.testing.assert_close(q.sum(-1), torch.ones(2))
    q = smoothed_targets(torch.tensor([2, 0]), vocab, eps, pad_id=0)
    assert (q[1] == 0).all() and q[0].sum().item() == pytest.approx(1.0)


def test_all_padding_gives_zero_not_nan():
    logits = torch.randn(2, 3, 5)
    assert label_smoothing_loss(logits, torch.zeros(2, 3, dtype=torch.long)).item() == 0.0


def test_label_smoothing_rejects_bad_input():
    logits = torch.randn(2, 3, 5)
    target = torch.randint(1, 5, (2, 3))
    with pytest.raises(ValueError, match=r"smoothing must be a number in \[0, 1\), got 1.0"):
        label_smoothing_loss(logits, target, smoothing=1.0)
    with pytest.raises(ValueError, match=r"smoothing must be a number in \[0, 1\), got -0.1"):
        smoothed_targets(target[0], 5, -0.1)
    with pytest.raises(ValueError, match=r"logits' shape .* \(2, 3\), got \(2, 4\)"):
        label_smoothing_loss(logits, torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 5\) .* got ids in \[1, 5\]"):
        label_smoothing_loss(logits, torch.tensor([[1, 2, 5], [1, 1, 1]]))
    with pytest.raises(ValueError, match=r"target must hold integer class ids, got torch.float32"):
        label_smoothing_loss(logits, target.float())
    with pytest.raises(ValueError, match=r"logits must be a floating-point tensor"):
        label_smoothing_loss(target, target[..., 0])
    with pytest.raises(ValueError, match=r"convention must be one of .* got 'paper'"):
        label_smoothing_loss(logits, target, convention="paper")
    with pytest.raises(ValueError, match=r'"t2t" needs vocab_size >= 2 .* got 1'):
        smoothed_targets(torch.tensor([0]), 1, 0.1, pad_id=None, convention="t2t")
    with pytest.raises(ValueError, match=r'"annotated" needs a pad_id'):
        label_smoothing_loss(logits, target, pad_id=None, convention="annotated")
    with pytest.raises(ValueError, match=r"pad_id must be None or an int in \[0, 5\), got 7"):
        label_smoothing_loss(logits, target, pad_id=7)
    with pytest.raises(ValueError, match=r"reduction must be 'mean', 'sum' or 'none'"):
        label_smoothing_loss(logits, target, reduction="max")


# --------------------------------------------------------------------------------------------
# the schedule
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("d_model", "warmup"), [(512, 4000), (64, 100), (32, 7)])
def test_schedule_peaks_at_warmup(d_model, warmup):
    lrs = [noam_lr(s, d_model, warmup) for s in range(1, 3 * warmup + 1)]
    peak_step = max(range(len(lrs)), key=lrs.__getitem__) + 1
    assert peak_step == warmup
    assert lrs[warmup - 1] == pytest.approx(d_model**-0.5 * warmup**-0.5, rel=1e-12)
    assert lrs[0] == pytest.approx(d_model**-0.5 * warmup**-1.5)  # linear warm-up from step 1
    assert lrs[4 * warmup // 2 - 1] < lrs[warmup - 1]  # decays afterwards


def test_lambda_lr_gives_the_schedule_step_by_step():
    d_model, warmup, factor = 64, 10, 2.0
    param = nn.Parameter(torch.zeros(1))
    optimizer = paper_adam([param])
    scheduler = warmup_scheduler(optimizer, d_model, warmup, factor)
    seen = []
    for _ in range(3 * warmup):
        seen.append(optimizer.param_groups[0]["lr"])  # the lr the next step uses
        optimizer.step()
        scheduler.step()
    expected = [factor * noam_lr(s, d_model, warmup) for s in range(1, 3 * warmup + 1)]
    assert seen == pytest.approx(expected, rel=1e-12)
    assert seen[warmup - 1] == pytest.approx(factor * d_model**-0.5 * warmup**-0.5)
    assert max(seen) == seen[warmup - 1]


def test_paper_adam_has_the_papers_hyper_parameters():
    group = paper_adam([nn.Parameter(torch.zeros(1))]).param_groups[0]
    assert (group["betas"], group["eps"], group["lr"]) == ((0.9, 0.98), 1e-9, 1.0)


def test_schedule_rejects_step_zero_and_a_scaled_base_lr():
    with pytest.raises(ValueError, match=r"step must be an int >= 1 \(the schedule has 0\^-0.5"):
        noam_lr(0, 512, 4000)
    with pytest.raises(ValueError, match=r"warmup must be a positive int, got 0"):
        noam_lr(1, 512, 0)
    optimizer = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    with pytest.raises(ValueError, match=r"base lr must be 1.0 .* got lr=0.001 in param group 0"):
        warmup_scheduler(optimizer, 512, 4000)


def test_warmup_linear_decay_peaks_at_warmup_and_ends_near_zero():
    warmup, steps, peak = 4, 10, 3e-3
    optimizer = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=peak)
    scheduler = warmup_linear_decay(optimizer, warmup, steps)
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])  # the lr of the next optimizer step
        optimizer.step()
        scheduler.step()
    expected = [peak * k / warmup for k in range(1, warmup + 1)] + [
        peak * (steps - k + 1) / (steps - warmup) for k in range(warmup + 1, steps + 1)
    ]
    assert seen == pytest.approx(expected, rel=1e-12)
    assert max(seen) == pytest.approx(peak) and seen.index(max(seen)) == warmup - 1
    assert 0 < seen[-1] < seen[-2]  # the last step still moves, by the smallest amount


def test_warmup_linear_decay_rejects_impossible_budgets():
    optimizer = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    with pytest.raises(ValueError, match=r"steps must be larger than warmup \(10\), got 10"):
        warmup_linear_decay(optimizer, 10, 10)
    with pytest.raises(ValueError, match=r"warmup must be a positive int, got 0"):
        warmup_linear_decay(optimizer, 0, 10)
    with pytest.raises(ValueError, match=r"optimizer must be a torch.optim.Optimizer"):
        warmup_linear_decay("adam", 1, 10)


# --------------------------------------------------------------------------------------------
# the training loop
# --------------------------------------------------------------------------------------------


def tiny_transformer(vocab: int = 12) -> Transformer:
    config = TransformerConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=32,
        n_heads=2,
        d_ff=64,
        n_layers=1,
        dropout=0.0,
        max_len=32,
    )
    return Transformer(config)


def test_tiny_transformer_overfits_one_batch():
    torch.manual_seed(0)
    model = tiny_transformer()
    batch = make_batch(synthetic_pairs("reverse", 8, 12, 3, 6, seed=0))
    # 3e-3, not 1e-2: at 1e-2 the loss can spike back up late (0.23 at step 100 on one CPU,
    # below 0.05 on another: rounding differs between CPUs); 3e-3 ends at 0.004-0.007, seeds 0-5
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    history = train(
        model,
        itertools.repeat(batch),
        seq2seq_loss(smoothing=0.0),
        optimizer,
        steps=100,
        log_every=10,
        progress=False,
    )
    assert history.final_loss < 0.05, history.loss
    assert history.loss[0] > 1.0  # it did learn: from about ln|V| = 2.5
    assert history.step == list(range(10, 101, 10)) and history.stop_reason == "steps"
    assert all(t > 0 for t in history.tokens_per_s)
    assert history.elapsed_s == sorted(history.elapsed_s)


class Counter(nn.Module):
    """A one-parameter model whose loss is its weight squared; records its mode per call."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(3.0))
        self.modes: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
        return (self.w * x).sum()


def square_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch) ** 2


def test_train_logs_the_scheduled_lr_and_evaluates_in_eval_mode():
    model = Counter()
    optimizer = paper_adam(model.parameters())
    scheduler = warmup_scheduler(optimizer, d_model=16, warmup=5)
    calls = []

    def eval_fn(m: nn.Module, step: int) -> dict:
        calls.append((step, m.training, torch.is_grad_enabled()))
        return {"w": m.w.item()}

    history = train(
        model,
        itertools.repeat(torch.ones(1)),
        square_loss,
        optimizer,
        scheduler,
        steps=12,
        log_every=1,
        eval_fn=eval_fn,
        eval_every=5,
        progress=False,
        device="cpu",
    )
    assert history.lr == pytest.approx([noam_lr(s, 16, 5) for s in range(1, 13)])
    assert [c[0] for c in calls] == [5, 10, 12]  # every 5 steps and after the last
    assert all(not training and not grad for _, training, grad in calls)
    assert [e["step"] for e in history.evals] == [5, 10, 12]
    assert model.modes[:12] == [True] * 12  # training mode while training
    assert set(history.to_dict()) >= {"step", "loss", "lr", "tokens_per_s", "elapsed_s", "evals"}


def test_train_restores_the_models_mode_and_stops_on_data_time_and_nan():
    model = Counter().eval()
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    history = train(
        model,
        iter([torch.ones(1)] * 3),
        square_loss,
        sgd,
        steps=10,
        log_every=2,
        progress=False,
        device="cpu",
    )
    assert (history.stop_reason, history.step) == ("data", [2, 3])
    assert not model.training

    def slow_loss(m: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        time.sleep(0.02)
        return square_loss(m, batch)

    history = train(
        model,
        itertools.repeat(torch.ones(1)),
        slow_loss,
        sgd,
        steps=10_000,
        max_seconds=0.1,
        progress=False,
        device="cpu",
    )
    assert history.stop_reason == "time" and history.steps_done < 100

    huge = torch.optim.SGD(model.parameters(), lr=1e30)
    history = train(
        model,
        itertools.repeat(torch.ones(1)),
        square_loss,
        huge,
        steps=100,
        log_every=5,
        progress=False,
        device="cpu",
    )
    assert history.stop_reason == "nonfinite" and history.steps_done < 100


def test_train_clips_the_gradient_norm():
    model = Counter()
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    before = model.w.item()
    train(
        model,
        iter([torch.ones(1)]),
        square_loss,
        sgd,
        steps=1,
        clip_norm=0.5,
        progress=False,
        device="cpu",
    )
    assert abs(model.w.item() - before) == pytest.approx(0.5)  # the gradient was 18


@pytest.mark.parametrize("accumulate", [1, 2, 3])
def test_train_syncs_with_the_device_only_at_log_steps(monkeypatch, accumulate: int):
    """One `.item()` per log entry, also when batches with token counts are accumulated
    (their weights are computed on the CPU in one process)."""
    calls = []
    item = torch.Tensor.item

    def counting_item(self):
        calls.append(1)
        return item(self)

    monkeypatch.setattr(torch.Tensor, "item", counting_item)
    model = Counter()
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3)
    history = train(
        model,
        itertools.repeat((torch.ones(1), torch.ones(2))),  # (x, y): 2 target tokens each
        lambda m, batch: square_loss(m, batch[0]),
        sgd,
        steps=30,
        log_every=10,
        progress=False,
        device="cpu",
        accumulate=accumulate,
    )
    assert history.steps_done == 30 and len(model.modes) == 30 * accumulate
    assert len(calls) == 3


def test_seq2seq_and_lm_losses_call_the_model_as_documented():
    model = tiny_transformer()
    batch = make_batch(synthetic_pairs("copy", 4, 12, 2, 5, seed=1))
    expected = label_smoothing_loss(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1, PAD)
    assert seq2seq_loss(0.1)(model, batch).item() == pytest.approx(expected.item())

    lm = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 10))
    x, y = torch.randint(0, 10, (2, 5)), torch.randint(0, 10, (2, 5))
    ref = F.cross_entropy(lm(x).transpose(1, 2), y)
    assert lm_loss()(lm, LMBatch(x, y)).item() == pytest.approx(ref.item())
    assert lm_loss()(lm, (x, y)).item() == pytest.approx(ref.item())


def test_history_and_train_reject_bad_input():
    model, sgd = Counter(), torch.optim.SGD(Counter().parameters(), lr=0.1)
    batches = itertools.repeat(torch.ones(1))
    with pytest.raises(ValueError, match=r"steps must be a positive int, got 0"):
        train(model, batches, square_loss, sgd, steps=0)
    with pytest.raises(ValueError, match=r"eval_every is set but eval_fn is None"):
        train(model, batches, square_loss, sgd, steps=1, eval_every=5)
    with pytest.raises(ValueError, match=r"clip_norm must be a positive number, got -1"):
        train(model, batches, square_loss, sgd, steps=1, clip_norm=-1)
    with pytest.raises(ValueError, match=r"loss_fn must return a scalar tensor"):
        train(
            model, batches, lambda m, b: m(b).reshape(1), sgd, steps=1, progress=False, device="cpu"
        )
    assert math.isnan(History().final_loss) and History().steps_done == 0


def test_exact_match():
    assert exact_match([[1, 2], [3], []], [[1, 2], [3, 4], []]) == pytest.approx(2 / 3)
    assert exact_match(torch.tensor([[1, 2], [3, 4]]), [[1, 2], [3, 5]]) == 0.5
    with pytest.raises(ValueError, match=r"one length, got 2 and 1"):
        exact_match([[1], [2]], [[1]])
    with pytest.raises(ValueError, match=r"at least one prediction"):
        exact_match([], [])
