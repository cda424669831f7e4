"""Training: the label-smoothed loss, the warm-up schedule, Adam as in the paper, one loop.

Notebook 10 derives these; every later notebook that trains calls `train`.

Label smoothing (section 5.4) has three conventions for the target q (`smoothed_targets`):
- `"uniform"` (Szegedy et al. 2016; PyTorch's `label_smoothing`): (1 - eps) one-hot + eps/|V|;
- `"t2t"` (tensor2tensor, fairseq): 1 - eps on the true class, eps/(|V| - 1) on the others;
- `"annotated"` (the Annotated Transformer): as t2t over |V| - 2 classes, 0 on `<pad>`.
Positions whose target is `pad_id` are left out of the loss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.std import tqdm

from utils.checks import (
    check_optional_positive_int,
    check_positive_float,
    check_positive_int,
    check_token_range,
)
from utils.data import LMBatch, Seq2SeqBatch
from utils.env import get_device
from utils.vocab import PAD_ID

__all__ = [
    "CONVENTIONS",
    "smoothed_targets",
    "label_smoothing_loss",
    "kl_to_smoothed",
    "noam_lr",
    "warmup_scheduler",
    "warmup_linear_decay",
    "paper_adam",
    "History",
    "ResumableStream",
    "is_distributed",
    "world_size",
    "rank",
    "global_token_count",
    "train",
    "seq2seq_loss",
    "lm_loss",
    "exact_match",
]

CONVENTIONS = ("uniform", "t2t", "annotated")


# --------------------------------------------------------------------------------------------
# label smoothing
# --------------------------------------------------------------------------------------------


def _check_smoothing(smoothing: object) -> float:
    if (
        isinstance(smoothing, bool)
        or not isinstance(smoothing, int | float)
        or not (0.0 <= smoothing < 1.0)
    ):
        raise ValueError(f"smoothing must be a number in [0, 1), got {smoothing!r}")
    return float(smoothing)


def _check_convention(convention: object, vocab_size: int, pad_id: int | None) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    if convention == "t2t" and vocab_size < 2:
        raise ValueError(
            f'convention "t2t" needs vocab_size >= 2 (eps is spread over |V| - 1 classes), '
            f"got {vocab_size}"
        )
    if convention == "annotated":
        if pad_id is None:
            raise ValueError('convention "annotated" needs a pad_id (it puts 0 on <pad>)')
        if vocab_size < 3:
            raise ValueError(
                f'convention "annotated" needs vocab_size >= 3 (eps is spread over |V| - 2 '
                f"classes), got {vocab_size}"
            )


def _check_pad_id(pad_id: object, vocab_size: int) -> None:
    if pad_id is None:
        return
    if isinstance(pad_id, bool) or not isinstance(pad_id, int) or not 0 <= pad_id < vocab_size:
        raise ValueError(f"pad_id must be None or an int in [0, {vocab_size}), got {pad_id!r}")


def _check_target(target: object, name: str = "target") -> Tensor:
    if not isinstance(target, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of class ids, got {type(target).__name__}")
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer class ids, got {target.dtype}")
    return target


class _DtypeDevice(TypedDict):
    """The `dtype=`, `device=` keyword arguments of the tensors `smoothed_targets` builds."""

    dtype: torch.dtype
    device: torch.device


def smoothed_targets(
    target: Tensor,
    vocab_size: int,
    smoothing: float,
    pad_id: int | None = None,
    convention: str = "uniform",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The smoothed target q: `target (N,)` -> `(N, vocab_size)`, each non-pad row summing to 1.

    Pad rows are all zero; with `"annotated"` the `<pad>` column is 0 too.
    """
    target = _check_target(target)
    if target.dim() != 1:
        raise ValueError(f"target must be 1-D (N,), got shape {tuple(target.shape)}")
    check_positive_int("vocab_size", vocab_size)
    eps = _check_smoothing(smoothing)
    _check_pad_id(pad_id, vocab_size)
    _check_convention(convention, vocab_size, pad_id)
    check_token_range(target, vocab_size, "target")
    n, true = target.shape[0], target.long()[:, None]
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    like: _DtypeDevice = {"dtype": dtype, "device": target.device}
    if convention == "uniform":
        q = torch.full((n, vocab_size), eps / vocab_size, **like)
        q.scatter_add_(1, true, torch.full((n, 1), 1.0 - eps, **like))
    elif convention == "t2t":
        q = torch.full((n, vocab_size), eps / (vocab_size - 1), **like)
        q.scatter_(1, true, 1.0 - eps)
    else:
        q = torch.full((n, vocab_size), eps / (vocab_size - 2), **like)
        q[:, pad_id] = 0.0
        q.scatter_(1, true, 1.0 - eps)
    if pad_id is not None:
        q[target == pad_id] = 0.0
    return q


def _per_token_loss(
    logits: Tensor, target: Tensor, eps: float, pad_id: int | None, convention: str
) -> tuple[Tensor, Tensor]:
    """(loss `(N,)`, 1.0 where counted `(N,)`) for `logits (N, V)`, `target (N,)`; q never built.

    A zero weight is never multiplied by log p, so no 0 * -inf = NaN.
    """
    vocab_size = logits.shape[-1]
    logp = F.log_softmax(logits, dim=-1)
    true = target.long()[:, None]
    logp_true = logp.gather(1, true).squeeze(1)
    loss = -(1.0 - eps) * logp_true
    if eps > 0.0:
        if convention == "uniform":
            loss = loss - (eps / vocab_size) * logp.sum(-1)
        elif convention == "t2t":
            others = logp.scatter(1, true, 0.0)
            loss = loss - (eps / (vocab_size - 1)) * others.sum(-1)
        else:
            others = logp.scatter(1, true, 0.0)
            others[:, pad_id] = 0.0
            loss = loss - (eps / (vocab_size - 2)) * others.sum(-1)
    keep = torch.ones_like(loss) if pad_id is None else (target != pad_id).to(loss.dtype)
    return torch.where(keep > 0, loss, torch.zeros_like(loss)), keep


def _check_logits_target(logits: object, target: object) -> tuple[Tensor, Tensor]:
    if not isinstance(logits, Tensor) or not logits.is_floating_point() or logits.dim() < 1:
        got = (
            f"{logits.dtype} {tuple(logits.shape)}"
            if isinstance(logits, Tensor)
            else type(logits).__name__
        )
        raise ValueError(f"logits must be a floating-point tensor (..., V), got {got}")
    target = _check_target(target)
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"target must have logits' shape without the last (class) dim "
            f"{tuple(logits.shape[:-1])}, got {tuple(target.shape)}"
        )
    return logits, target


def label_smoothing_loss(
    logits: Tensor,
    target: Tensor,
    smoothing: float = 0.1,
    pad_id: int | None = PAD_ID,
    convention: str = "uniform",
    reduction: str = "mean",
) -> Tensor:
    """Label-smoothed cross-entropy ignoring padding: `logits (..., V)`, `target (...)`.

    `"uniform"` equals `F.cross_entropy(..., label_smoothing=eps, ignore_index=pad_id)`.
    `reduction`: `"mean"` over non-pad positions (0 if none), `"sum"`, or `"none"` (`(...)`).
    """
    logits, target = _check_logits_target(logits, target)
    vocab_size = logits.shape[-1]
    eps = _check_smoothing(smoothing)
    _check_pad_id(pad_id, vocab_size)
    _check_convention(convention, vocab_size, pad_id)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    check_token_range(target, vocab_size, "target")
    per, keep = _per_token_loss(
        logits.reshape(-1, vocab_size), target.reshape(-1), eps, pad_id, convention
    )
    if reduction == "none":
        return per.reshape(target.shape)
    if reduction == "sum":
        return per.sum()
    return per.sum() / keep.sum().clamp(min=1.0)  # no .item(): no host-device sync


def kl_to_smoothed(
    logits: Tensor,
    target: Tensor,
    smoothing: float = 0.1,
    pad_id: int | None = PAD_ID,
    convention: str = "uniform",
) -> Tensor:
    """KL(q || p) averaged over non-pad positions: the loss minus the constant H(q).

    Builds q explicitly (`(N, V)`), as the derivation does; use it to check, not to train.
    """
    logits, target = _check_logits_target(logits, target)
    vocab_size = logits.shape[-1]
    flat = target.reshape(-1)
    q = smoothed_targets(flat, vocab_size, smoothing, pad_id, convention, dtype=logits.dtype)
    logp = F.log_softmax(logits.reshape(-1, vocab_size), dim=-1)
    cross = torch.where(q > 0, q * logp, torch.zeros_like(logp))  # 0 * log p := 0
    per = (torch.xlogy(q, q) - cross).sum(-1)
    count = (q.sum(-1) > 0).sum().clamp(min=1)
    return per.sum() / count


# --------------------------------------------------------------------------------------------
# the learning-rate schedule and the optimizer
# --------------------------------------------------------------------------------------------


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (eq. 3); `step` counts from 1."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(
            f"step must be an int >= 1 (the schedule has 0^-0.5 at step 0; count steps from "
            f"1), got {step!r}"
        )
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def warmup_scheduler(
    optimizer: torch.optim.Optimizer, d_model: int, warmup: int, factor: float = 1.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """The paper's schedule as a `LambdaLR`: optimizer step s uses factor * noam_lr(s).

    `LambdaLR` multiplies the *base* lr, so create the optimizer with lr = 1.0 (`paper_adam`).
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    factor = check_positive_float("factor", factor)
    for i, group in enumerate(optimizer.param_groups):
        base = group.get("initial_lr", group["lr"])
        if base != 1.0:
            raise ValueError(
                f"the optimizer's base lr must be 1.0 (the schedule gives the lr itself; scale "
                f"it with factor), got lr={base} in param group {i}"
            )
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: factor * noam_lr(s + 1, d_model, warmup)
    )


def warmup_linear_decay(
    optimizer: torch.optim.Optimizer, warmup: int, steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the optimizer's lr (the peak), then linear decay to 0 at the last step.

    Step k (1-based) uses `lr * min(k / warmup, (steps - k + 1) / (steps - warmup))`.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    check_positive_int("warmup", warmup)
    check_positive_int("steps", steps)
    if steps <= warmup:
        raise ValueError(f"steps must be larger than warmup ({warmup}), got {steps}")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: max(0.0, min((s + 1) / warmup, (steps - s) / (steps - warmup)))
    )


def paper_adam(
    params: Iterable[nn.Parameter] | Iterable[dict], lr: float = 1.0
) -> torch.optim.Adam:
    """Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (section 5.3); lr 1.0 for the schedule."""
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9)


# --------------------------------------------------------------------------------------------
# the training loop
# --------------------------------------------------------------------------------------------


@dataclass
class History:
    """What `train` logged, one entry per log step (every `log_every` steps and the last).

    `tokens_per_s` excludes evaluation time; `stop_reason` is `"steps"`, `"time"`, `"data"`
    or `"nonfinite"`.
    """

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    tokens_per_s: list[float] = field(default_factory=list)
    elapsed_s: list[float] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    stop_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of lists (JSON-serialisable)."""
        return asdict(self)

    @property
    def steps_done(self) -> int:
        return self.step[-1] if self.step else 0

    @property
    def final_loss(self) -> float:
        """The last logged loss (NaN when nothing was logged)."""
        return self.loss[-1] if self.loss else math.nan


class ResumableStream:
    """Batches from `make()`, counted, so a run can stop and go on from the same batch.

    `make` returns a fresh iterator that yields the same batches in the same order every time
    it is called (a seeded stream: `lambda: task_batches(..., seed=0)`). The state is how many
    batches were handed out; `load_state_dict` rebuilds the stream and skips that many (cheap:
    batches of token ids, no model). `source` is the iterator `make()` returned (to read a
    count it keeps, as `utils.translation.TokenCounter` does).
    """

    def __init__(self, make: Callable[[], Iterable[Any]]) -> None:
        if not callable(make):
            raise ValueError(f"make must be a function returning an iterator, got {make!r}")
        self.make = make
        self.consumed = 0
        self.source = iter(make())

    def __iter__(self) -> ResumableStream:
        return self

    def __next__(self) -> Any:
        batch = next(self.source)
        self.consumed += 1
        return batch

    def state_dict(self) -> dict[str, int]:
        return {"consumed": self.consumed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        consumed = state.get("consumed") if isinstance(state, Mapping) else None
        if isinstance(consumed, bool) or not isinstance(consumed, int) or consumed < 0:
            raise ValueError(f"a stream state must be {{'consumed': int >= 0}}, got {state!r}")
        self.source, self.consumed = iter(self.make()), 0
        for _ in range(consumed):
            try:
                next(self)
            except StopIteration:
                raise ValueError(
                    f"the stream ends after {self.consumed} batches; the checkpoint had "
                    f"consumed {consumed}: not the stream the run was trained on"
                ) from None


TRAIN_STATE_FORMAT = "attention-book-train-state"
TRAIN_STATE_VERSION = 1


def _state_path(path: Path, worker: int, world: int) -> Path:
    """One file per worker under torch.distributed (each has its own RNG and stream)."""
    return path if world == 1 else path.with_name(f"{path.stem}.rank{worker}{path.suffix}")


def _rng_state() -> dict[str, Any]:
    """Every random number generator a training step can draw from: dropout, shuffles."""
    # the global state utils.setup seeds (legacy API, as readers call np.random.* directly)
    numpy_state: Any = np.random.get_state()  # noqa: NPY002
    _, keys, pos, has_gauss, cached = numpy_state
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), cached],
        "python": random.getstate(),
    }


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    keys, pos, has_gauss, cached = state["numpy"]
    keys = keys.numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, pos, has_gauss, cached))  # noqa: NPY002
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def _model_signature(model: nn.Module) -> dict[str, Any]:
    """What a resumed model must match: its config (when it has one) and its tensors' shapes."""
    config = getattr(model, "config", None)
    return {
        "config": dataclasses.asdict(config)
        if dataclasses.is_dataclass(config) and not isinstance(config, type)
        else None,
        "shapes": {k: list(v.shape) for k, v in model.state_dict().items()},
    }


def _check_resumable(batches: object) -> None:
    if not (hasattr(batches, "state_dict") and hasattr(batches, "load_state_dict")):
        raise ValueError(
            "checkpoints need batches that can be resumed (state_dict/load_state_dict, e.g. "
            f"utils.training.ResumableStream(lambda: ...)), got {type(batches).__name__}"
        )


def _save_train_state(path: Path, state: dict[str, Any]) -> None:
    """`torch.save` to a temporary file, then rename: a run killed mid-write keeps the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": TRAIN_STATE_FORMAT, "version": TRAIN_STATE_VERSION, **state}, tmp)
    os.replace(tmp, path)


def _load_train_state(path: Path, model: nn.Module, world: int, accumulate: int) -> dict:
    """The state saved at `path`, checked against this run (`ValueError` naming what differs)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # runs no code
    except Exception as err:
        raise ValueError(f"{path} is not a training checkpoint: {err}") from None
    if not isinstance(state, dict) or state.get("format") != TRAIN_STATE_FORMAT:
        raise ValueError(f"{path} is not a training checkpoint ({TRAIN_STATE_FORMAT!r})")
    if state.get("version", 0) > TRAIN_STATE_VERSION:
        raise ValueError(f"{path} was written by a newer version ({state['version']})")
    saved, here = state["signature"], _model_signature(model)
    if saved["config"] != here["config"]:
        differ = sorted(
            k
            for k in set(saved["config"] or {}) | set(here["config"] or {})
            if (saved["config"] or {}).get(k) != (here["config"] or {}).get(k)
        )
        raise ValueError(f"{path} was saved from a model with another config (fields {differ})")
    if saved["shapes"] != here["shapes"]:
        raise ValueError(f"{path} holds tensors of other names or shapes than this model's")
    for name, want, got in (("world size", world, state["world"]),
                            ("accumulate", accumulate, state["accumulate"])):  # fmt: skip
        if want != got:
            raise ValueError(f"{path} was saved with {name} {got}, this run has {want}")
    return state


def _batch_tokens(batch: object) -> int:
    n = getattr(batch, "n_tokens", None)
    if n is not None:
        return int(n)
    if isinstance(batch, tuple | list) and batch and isinstance(batch[-1], Tensor):
        return batch[-1].numel()  # (x, y): every target counts
    return 0


def is_distributed() -> bool:
    """Whether this process is in an initialised `torch.distributed` process group."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """The number of processes in the group, 1 outside a process group."""
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    """This process's rank, 0 outside a process group."""
    return dist.get_rank() if is_distributed() else 0


def _token_weights(counts: list[int], device: torch.device) -> list[float]:
    """The weight of each micro-batch's mean loss so the step's gradient, after DDP averages it
    over the P workers, is that of the mean over every token of every worker's micro-batches:
    `n_i * P / N` with N all-reduced. In one process, equal weights `1 / len(counts)` when a
    batch has no token count; across processes that would be the mean of per-worker means.
    """
    world = world_size()
    if not all(counts):
        if world > 1:
            raise ValueError(
                f"data-parallel training needs each batch's token count (got counts {counts}): "
                "equal weights would average per-worker means, not tokens"
            )
        return [1.0 / len(counts)] * len(counts)
    if world == 1:  # counted on the CPU: no device tensor, no sync (train's docstring)
        return [c / float(sum(counts)) for c in counts]
    n = global_token_count(float(sum(counts)), device).item()
    return [c * world / n for c in counts]


def global_token_count(n_tokens: Tensor | float, device: torch.device | str = "cpu") -> Tensor:
    """This worker's token count summed over every worker of the process group (itself outside
    one), as a float64 scalar: the `n_tok` of data-parallel training's token mean (notebook 14,
    section 6). `train` weighs each micro-batch's mean loss by `n_i * P / n_tok` with it, and
    `utils.distributed.global_token_mean` backpropagates `P * loss_sum / n_tok`."""
    count = torch.as_tensor(n_tokens, dtype=torch.float64, device=device).detach()
    if count.dim() != 0 or count < 0:
        raise ValueError(f"n_tokens must be a count >= 0, got {n_tokens!r}")
    if is_distributed():
        count = count.clone()
        dist.all_reduce(count)  # every worker's tokens: a sum over the group
    return count


def _any_worker(flag: bool, device: torch.device) -> bool:
    """`flag` or-ed over the workers, so they all stop at the same step (else a hang)."""
    if world_size() == 1:
        return flag
    t = torch.tensor(float(flag), device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if hasattr(batch, "to"):
        return batch.to(device)
    if isinstance(batch, tuple | list):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


class _LogWindow:
    """What `train` accumulates between two log entries.

    The summed loss stays on the device; `close` reads it once, the loop's one sync per entry.
    """

    def __init__(self, device: torch.device, opened: float) -> None:
        self.device = device
        self.reopen(opened)

    def reopen(self, now: float) -> None:
        self.loss_sum = torch.zeros((), device=self.device)
        self.steps = self.tokens = 0
        self.opened, self.eval_s = now, 0.0

    def add(self, loss: Tensor, tokens: int) -> None:
        self.loss_sum = self.loss_sum + loss.detach().float()
        self.steps += 1
        self.tokens += tokens

    def close(self, history: History, step: int, lr: float, started: float) -> float:
        """Append the window's mean loss, lr, tokens/s and time to `history`; reopen it.

        Under a process group the losses are averaged and the tokens summed over the workers
        (a collective: every worker closes its window at the same step).
        """
        world = world_size()
        if world > 1:
            both = torch.stack(  # float64: token counts stay exact past 2^24
                [
                    self.loss_sum.double(),
                    torch.tensor(float(self.tokens), dtype=torch.float64, device=self.device),
                ]
            )
            dist.all_reduce(both)
            self.loss_sum, self.tokens = both[0] / world, int(both[1].item())
        mean = self.loss_sum.item() / self.steps
        now = time.perf_counter()
        train_s = max(now - self.opened - self.eval_s, 1e-9)
        history.step.append(step)
        history.loss.append(mean)
        history.lr.append(lr)
        history.tokens_per_s.append(self.tokens / train_s)
        history.elapsed_s.append(now - started)
        self.reopen(now)
        return mean


def _evaluate(
    model: nn.Module, eval_fn: Callable[[nn.Module, int], dict], step: int, history: History
) -> float:
    """`eval_fn(model, step)` in eval mode, no gradients, into `history.evals`; returns seconds."""
    start = time.perf_counter()
    model.eval()
    with torch.no_grad():
        result = eval_fn(model, step)
    model.train()
    if not isinstance(result, Mapping):
        raise ValueError(f"eval_fn must return a dict, got {type(result).__name__}")
    history.evals.append({"step": step, **result})
    return time.perf_counter() - start


def _check_train_args(
    model: object,
    loss_fn: object,
    optimizer: object,
    steps: object,
    clip_norm: object,
    max_seconds: object,
    log_every: object,
    eval_fn: object,
    eval_every: object,
    accumulate: object = 1,
) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be callable (model, batch) -> loss, got {loss_fn!r}")
    check_positive_int("steps", steps)
    check_positive_int("log_every", log_every)
    check_positive_int("accumulate", accumulate)
    if clip_norm is not None:
        check_positive_float("clip_norm", clip_norm)
    if max_seconds is not None:
        check_positive_float("max_seconds", max_seconds)
    check_optional_positive_int("eval_every", eval_every)
    if eval_every is not None and eval_fn is None:
        raise ValueError("eval_every is set but eval_fn is None; give both or neither")
    if eval_fn is not None and not callable(eval_fn):
        raise ValueError(f"eval_fn must be callable (model, step) -> dict, got {eval_fn!r}")


def _check_checkpoint_args(
    checkpoint: object, checkpoint_every: object, resume: object, batches: object
) -> Path | None:
    check_optional_positive_int("checkpoint_every", checkpoint_every)
    if not isinstance(resume, bool):
        raise ValueError(f"resume must be a bool, got {resume!r}")
    if checkpoint is None:
        if checkpoint_every is not None or resume:
            raise ValueError("checkpoint_every and resume need a checkpoint path")
        return None
    if not isinstance(checkpoint, str | Path):
        raise ValueError(f"checkpoint must be a file path, got {type(checkpoint).__name__}")
    _check_resumable(batches)
    return Path(checkpoint)


def _snapshot(
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batches: Any,
    history: History,
    window: _LogWindow,
    accumulate: int,
) -> dict[str, Any]:
    """Everything the next step depends on, to resume from the end of `step`."""
    return {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "rng": _rng_state(),
        "stream": batches.state_dict(),
        "history": history.to_dict(),
        "window": {
            "loss_sum": window.loss_sum.cpu(),
            "steps": window.steps,
            "tokens": window.tokens,
        },  # fmt: skip
        "signature": _model_signature(model),
        "world": world_size(),
        "accumulate": accumulate,
    }


def _resume(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batches: Any,
    window: _LogWindow,
    accumulate: int,
) -> tuple[int, History]:
    """Load the state saved at `path` into this run's objects; return its step and history."""
    state = _load_train_state(path, model, world_size(), accumulate)
    if (state["scheduler"] is None) != (scheduler is None):
        raise ValueError(f"{path} was saved {'without' if scheduler else 'with'} a scheduler")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    batches.load_state_dict(state["stream"])
    _set_rng_state(state["rng"])
    saved = state["window"]
    window.loss_sum = saved["loss_sum"].to(window.device)
    window.steps, window.tokens = saved["steps"], saved["tokens"]
    return state["step"], History(**state["history"])


def _take(batches: Iterator[Any], accumulate: int) -> list[Any]:
    """The next `accumulate` batches of the stream (fewer if it runs out)."""
    micro = []
    for _ in range(accumulate):
        try:
            micro.append(next(batches))
        except StopIteration:
            break
    return micro


def _backward(
    model: nn.Module,
    ddp: nn.parallel.DistributedDataParallel | None,
    micro: list[Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    device: torch.device,
    weighted: bool,
) -> tuple[Tensor, int]:
    """Backpropagate one step's micro-batches, each mean loss weighted by its share of the
    step's tokens over every worker (`_token_weights`) when `weighted`; under DDP the
    gradients are all-reduced once, after the last. Returns the step's loss (detached, the
    weighted sum) and this worker's token count."""
    counts = [_batch_tokens(b) for b in micro]  # counted on the CPU, before the move
    weights = _token_weights(counts, device) if weighted else [1.0]
    step_loss: Tensor | None = None
    for i, (batch, weight) in enumerate(zip(micro, weights, strict=True)):
        last = i == len(micro) - 1
        sync = ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext()
        with sync:  # DDP all-reduces the gradients once, after the last batch
            loss = loss_fn(model, _to_device(batch, device))
            if not isinstance(loss, Tensor) or loss.dim() != 0:
                raise ValueError(f"loss_fn must return a scalar tensor, got {loss!r}")
            if weighted:
                loss = loss * weight
            loss.backward()
        step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
    assert step_loss is not None
    return step_loss, sum(counts)


def _optimizer_step(
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    params: list[Tensor],
    clip_norm: float | None,
) -> float:
    """Clip, step, advance the schedule; returns the learning rate this step used."""
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, clip_norm)
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return lr


def train(
    model: nn.Module,
    batches: Iterator[Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    *,
    steps: int,
    clip_norm: float | None = None,
    max_seconds: float | None = None,
    device: torch.device | str | None = None,
    log_every: int = 10,
    eval_fn: Callable[[nn.Module, int], dict] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    accumulate: int = 1,
    checkpoint: str | Path | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
) -> History:
    """Train `model` for `steps` optimizer steps; return the `History`.

    `steps` makes a run reproducible; `max_seconds` is only a guard. The loop reads the device
    only at log steps, so make batches on the CPU. `eval_fn(model, step)` runs every
    `eval_every` steps and after the last; the model's mode is restored at the end.

    `accumulate` batches make one step (gradient accumulation). Under `torch.distributed`
    (`model` wrapped in `DistributedDataParallel`, each worker with its own batches), and with
    `accumulate > 1`, each batch's loss (`loss_fn` returns a mean over the batch's tokens) is
    weighted by its share of all the step's tokens, so the step is that of the mean over every
    token, not a mean of per-batch means. Only rank 0 shows the bar and evaluates (on the
    unwrapped model); the history's losses are averaged over the workers.

    `checkpoint` (a file path) makes the run resumable: every `checkpoint_every` steps, when
    `max_seconds` runs out and after the last step, the loop writes the model, optimizer,
    scheduler, random number generators, the stream's position and the history there
    (one file per worker under torch.distributed). With `resume=True` and that file present,
    the run goes on from it: the weights after `steps` are those of an uninterrupted run.
    `batches` must then be resumable (`ResumableStream`).
    """
    _check_train_args(
        model,
        loss_fn,
        optimizer,
        steps,
        clip_norm,
        max_seconds,
        log_every,
        eval_fn,
        eval_every,
        accumulate,
    )
    path = _check_checkpoint_args(checkpoint, checkpoint_every, resume, batches)
    world, main = world_size(), rank() == 0
    weighted = world > 1 or accumulate > 1  # else the one batch's mean is the step's loss
    ddp = model if isinstance(model, nn.parallel.DistributedDataParallel) else None
    inner: nn.Module = model if ddp is None else ddp.module
    if world > 1 and inner is model:
        raise ValueError(
            f"under torch.distributed ({world} processes) the model must be wrapped in "
            f"DistributedDataParallel, got {type(model).__name__}"
        )
    device = get_device() if device is None else torch.device(device)
    if not hasattr(batches, "__next__"):
        batches = iter(batches)
    was_training = model.training
    model.to(device)
    model.train()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    bar = tqdm(
        total=steps,
        disable=not (progress and main),
        file=sys.stderr,
        ncols=90,
        mininterval=0.5,
        desc="train",
        unit="step",
    )
    history = History(stop_reason="steps")
    started = time.perf_counter()
    window = _LogWindow(device, opened=started)
    step = 0
    if path is not None:
        path = _state_path(path, rank(), world)
        if resume and path.exists():
            step, history = _resume(path, inner, optimizer, scheduler, batches, window, accumulate)
            started -= history.elapsed_s[-1] if history.elapsed_s else 0.0
            bar.update(step)

    def save() -> None:  # the whole state at the end of `step`
        if path is not None:
            _save_train_state(
                path,
                _snapshot(step, inner, optimizer, scheduler, batches, history, window, accumulate),
            )

    lr = float(optimizer.param_groups[0]["lr"])
    try:
        while step < steps:
            micro = _take(batches, accumulate)
            # a partial step would weigh its batches wrongly; every worker stops together
            if _any_worker(len(micro) < accumulate, device):
                history.stop_reason = "data"
                break
            step += 1
            optimizer.zero_grad(set_to_none=True)
            step_loss, n_tokens = _backward(model, ddp, micro, loss_fn, device, weighted)
            lr = _optimizer_step(optimizer, scheduler, params, clip_norm)
            # bookkeeping: log, evaluate, stop
            window.add(step_loss, n_tokens)
            bar.update(1)
            out_of_time = max_seconds is not None and time.perf_counter() - started > max_seconds
            if max_seconds is not None:
                out_of_time = _any_worker(out_of_time, device)
            if step % log_every == 0 or step == steps or out_of_time:
                mean = window.close(history, step, lr, started)
                bar.set_postfix(loss=f"{mean:.3f}", lr=f"{lr:.2e}", refresh=False)
                if not math.isfinite(mean):
                    history.stop_reason = "nonfinite"
                    break
            if eval_every is not None and step % eval_every == 0 and main:
                window.eval_s += _evaluate(inner, eval_fn, step, history)  # type: ignore[arg-type]
            if out_of_time:
                history.stop_reason = "time"
                save()
                break
            if checkpoint_every is not None and step % checkpoint_every == 0:
                save()
        if window.steps:  # the iterator ran out between log steps
            window.close(history, step, lr, started)
        if (
            main
            and eval_fn is not None
            and step > 0
            and (not history.evals or history.evals[-1]["step"] != step)
        ):
            _evaluate(inner, eval_fn, step, history)  # always after the last step
        if history.stop_reason in ("steps", "data") and step > 0:
            save()
    finally:
        bar.close()
        model.train(was_training)
    return history


# --------------------------------------------------------------------------------------------
# loss functions for `train`, and a metric
# --------------------------------------------------------------------------------------------


def seq2seq_loss(
    smoothing: float = 0.1, pad_id: int = PAD_ID, convention: str = "uniform"
) -> Callable[[nn.Module, Seq2SeqBatch], Tensor]:
    """`loss_fn(model, batch)` for an encoder-decoder and `Seq2SeqBatch`es."""
    _check_smoothing(smoothing)
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")

    def loss_fn(model: nn.Module, batch: Seq2SeqBatch) -> Tensor:
        logits = model(batch.src, batch.tgt_in)
        return label_smoothing_loss(logits, batch.tgt_out, smoothing, pad_id, convention)

    return loss_fn


def lm_loss(
    smoothing: float = 0.0, pad_id: int | None = None, convention: str = "uniform"
) -> Callable[[nn.Module, LMBatch | tuple[Tensor, Tensor]], Tensor]:
    """`loss_fn(model, batch)` for a decoder-only LM: `model(x)` -> logits `(B, T, V)` vs `y`."""
    _check_smoothing(smoothing)
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")

    def loss_fn(model: nn.Module, batch: LMBatch | tuple[Tensor, Tensor]) -> Tensor:
        x, y = batch
        return label_smoothing_loss(model(x), y, smoothing, pad_id, convention)

    return loss_fn


def exact_match(
    predictions: Sequence[Sequence[int] | Tensor], references: Sequence[Sequence[int] | Tensor]
) -> float:
    """The fraction of predictions equal to their reference; strip special tokens first."""

    def as_list(seq: object, name: str) -> list[int]:
        if isinstance(seq, Tensor):
            if seq.dim() != 1:
                raise ValueError(f"{name} must be 1-D id sequences, got shape {tuple(seq.shape)}")
            return seq.tolist()
        if isinstance(seq, str) or not isinstance(seq, Sequence):
            raise ValueError(f"{name} must hold id sequences, got {type(seq).__name__}")
        return list(seq)

    if isinstance(predictions, Tensor):
        predictions = list(predictions)
    if isinstance(references, Tensor):
        references = list(references)
    if len(predictions) != len(references):
        raise ValueError(
            f"predictions and references must have one length, got {len(predictions)} "
            f"and {len(references)}"
        )
    if len(predictions) == 0:
        raise ValueError("exact_match needs at least one prediction, got none")
    hits = sum(
        as_list(p, "predictions") == as_list(r, "references")
        for p, r in zip(predictions, references, strict=True)
    )
    return hits / len(predictions)
