"""One attention seam (`utils.attention.attend`): the backends "readable", "sdpa" and "flash"
compute the same attention, inside every model family, in training too (#27, item 3)."""

from __future__ import annotations

import copy
import types

import pytest
import torch

import utils.fast  # noqa: F401  (registers "sdpa")
import utils.flash  # noqa: F401  (registers "flash")
from utils.attention import BACKENDS as REGISTRY
from utils.attention import MultiHeadAttention, attend, register_backend, use_attention_backend
from utils.gpt import GPT, GPTConfig
from utils.model import Transformer, TransformerConfig
from utils.modern import GroupedQueryAttention, ModernConfig, ModernLM, repeat_kv
from utils.training import lm_loss

BACKENDS = ("readable", "sdpa", "flash")


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_computes_the_readable_attention(backend: str) -> None:
    """Grouped heads (6 query heads on 2 key/value heads), a padding mask with one fully
    masked query row (output 0 by the book's convention), float64."""
    torch.manual_seed(0)
    q = torch.randn(2, 6, 5, 4, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 7, 4, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool)
    mask[0, :, :, 5:] = False
    mask[1, :, 3] = False  # query 3 of sentence 1 sees no key
    expected = torch.softmax(
        (q @ repeat_kv(k, 3).transpose(-2, -1) / 2).masked_fill(~mask, float("-inf")), -1
    ).nan_to_num(0.0) @ repeat_kv(v, 3)
    out, weights = attend(q, k, v, mask, backend=backend)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert out[1, :, 3].abs().max() == 0
    assert (weights is not None) == (backend == "readable")


def test_an_unknown_backend_is_refused_by_name() -> None:
    x = torch.randn(1, 1, 2, 4)
    with pytest.raises(ValueError, match=r"backend must be one of \['flash', 'readable', 'sdpa'\]"):
        attend(x, x, x, backend="fast")
    with pytest.raises(ValueError, match="backend must be one of"):
        use_attention_backend(MultiHeadAttention(8, 2), "cuda")
    with pytest.raises(ValueError, match="backend must be one of"):
        GroupedQueryAttention(8, 2, 1, 4, max_len=4, backend=None)  # type: ignore[arg-type]


def test_flash_refuses_dropout_rather_than_ignoring_it() -> None:
    mha = use_attention_backend(MultiHeadAttention(8, 2, dropout=0.1), "flash").train()
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match="flash backend has no dropout"):
        mha(x, x, x)
    mha.eval()(x, x, x)  # no dropout in evaluation: allowed


def _losses(
    model: torch.nn.Module, batches: list, loss_fn, backend: str, device: str = "cpu"
) -> list[float]:
    model = use_attention_backend(copy.deepcopy(model), backend).to(device).train()
    batches = [tuple(t.to(device) for t in batch) for batch in batches]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    losses = []
    for batch in batches * 2:  # each batch twice: the loss must fall on the second pass
        loss = loss_fn(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _families() -> list[tuple[str, torch.nn.Module, list, object]]:
    torch.manual_seed(0)
    tokens = [torch.randint(0, 20, (3, 9)) for _ in range(2)]
    lm = [(t[:, :-1], t[:, 1:]) for t in tokens]
    gpt = GPT(
        GPTConfig(vocab_size=20, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=8, dropout=0.0)
    )
    modern = ModernLM(
        ModernConfig(vocab_size=20, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, max_len=8)
    )
    seq2seq = Transformer(
        TransformerConfig(20, 20, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0)
    )

    def lm_step(model, batch):
        return lm_loss()(model, batch)

    def seq2seq_step(model, batch):
        src, tgt = batch
        logits = model(src, tgt[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())

    pairs = [(tokens[i], tokens[1 - i][:, :6]) for i in range(2)]
    return [
        ("GPT", gpt, lm, lm_step),
        ("ModernLM", modern, lm, lm_step),
        ("Transformer", seq2seq, pairs, seq2seq_step),
    ]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # the GPU when present


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["GPT", "ModernLM", "Transformer"])
def test_every_family_trains_to_the_same_losses_on_every_backend(family: str, device: str) -> None:
    """Four SGD steps (two batches, twice) from the same weights: the loss curves agree to
    float32 rounding, so the fused and tiled kernels are usable inside the models, gradients
    included."""
    name, model, batches, loss_fn = next(f for f in _families() if f[0] == family)
    curves = {b: _losses(model, batches, loss_fn, b, device) for b in BACKENDS}
    for backend in ("sdpa", "flash"):
        gap = max(abs(a - b) for a, b in zip(curves[backend], curves["readable"], strict=True))
        assert gap < 1e-5, (name, backend, curves)
    assert sum(curves["readable"][4:]) < sum(curves["readable"][:4])  # it did train


def test_every_attention_module_of_every_family_goes_through_the_seam() -> None:
    """A registered spy backend counts its calls: one per attention module per forward, in
    all three families (a module that bypassed `attend` would be missed), and
    `use_fast_path` / `fused=True` select "sdpa" for `ModernLM` too."""
    from utils.attention import BACKENDS, register_backend, unchecked_attention
    from utils.fast import use_fast_path

    calls = []

    def spy(q, k, v, mask, dropout_p):
        calls.append(q.shape)
        return unchecked_attention(q, k, v, mask, dropout_p)

    register_backend("spy", spy)
    try:
        expected = {"GPT": 2, "ModernLM": 2, "Transformer": 2 + 2 * 2}  # self, self + cross
        for name, model, batches, loss_fn in _families():
            calls.clear()
            use_attention_backend(model, "spy")
            loss_fn(model, batches[0])
            assert len(calls) == expected[name], name
            use_fast_path(model)
            backends = {m.backend for m in model.modules() if hasattr(m, "backend")}
            assert backends == {"sdpa"}, name
    finally:
        BACKENDS.pop("spy")
    config = ModernConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=1, fused=True)
    assert {m.backend for m in ModernLM(config).modules() if hasattr(m, "backend")} == {"sdpa"}


def test_cached_decoding_gives_the_same_tokens_on_every_backend() -> None:
    """Cached decoding feeds masks of shape (T, cached + T) through the seam: greedy tokens of
    the three families agree on every backend."""
    from utils.decoding import translate
    from utils.gpt import generate as gpt_generate
    from utils.modern import generate as modern_generate

    for name, model, batches, _ in _families():
        outputs = {}
        for backend in BACKENDS:
            m = use_attention_backend(copy.deepcopy(model), backend).eval()
            prompt = batches[0][0][:, :3]
            if name == "Transformer":
                outputs[backend] = translate(m, batches[0][0], max_len=8)
            elif name == "GPT":
                outputs[backend] = gpt_generate(m, prompt, 5, greedy=True).tolist()
            else:
                outputs[backend] = modern_generate(m, prompt, 5, greedy=True).tolist()
        assert outputs["sdpa"] == outputs["readable"] == outputs["flash"], name


def test_a_taken_backend_name_is_not_overwritten() -> None:
    def other(q, k, v, mask, dropout_p):  # type: ignore[no-untyped-def]
        return REGISTRY["readable"](q, k, v, mask, dropout_p)

    with pytest.raises(ValueError, match="backend name 'sdpa' is taken"):
        register_backend("sdpa", other)
    register_backend("sdpa", REGISTRY["sdpa"])  # the same function again: a no-op
    original = REGISTRY["sdpa"]
    reloaded = types.FunctionType(original.__code__, original.__globals__, original.__name__)
    reloaded.__qualname__ = original.__qualname__  # as importlib.reload(utils.fast) makes it
    try:
        register_backend("sdpa", reloaded)  # the same definition, a new object: accepted
        assert REGISTRY["sdpa"] is reloaded
    finally:
        REGISTRY["sdpa"] = original
    with pytest.raises(ValueError, match="must be callable"):
        register_backend("new", "not a function")  # type: ignore[arg-type]
    assert "new" not in REGISTRY
