"""Checks at the door: a forward pass validates each input once, at the public entry point.

Every `check_*` / `_check_*` function of every `utils` module (and every such method of its
classes) is wrapped to count its calls (outermost only: a check that calls another counts
once). One forward of a 2+2-layer Transformer, of a 2-layer GPT, of a 2-layer ModernLM and of a
2-layer ViT must stay under a small bound, and the count must not grow with the number of
layers: the layers, attention blocks and sublayers inside trust the checks made at the door.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import Counter

import pytest
import torch

import utils
from utils.bert import Bert, BertClassifier, BertConfig
from utils.gpt import GPT, GPTConfig
from utils.model import Transformer, TransformerConfig
from utils.modern import ModernConfig, ModernLM
from utils.vit import VisionConfig, VisionTransformer


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> Counter:
    calls: Counter = Counter()
    depth = [0]

    def counted(name: str, fn):
        def wrapper(*args, **kwargs):
            calls[name] += depth[0] == 0
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1

        return wrapper

    for info in pkgutil.iter_modules(utils.__path__):
        module = importlib.import_module(f"utils.{info.name}")
        for name, obj in list(vars(module).items()):
            if name.lstrip("_").startswith("check") and inspect.isfunction(obj):
                monkeypatch.setattr(module, name, counted(name, obj))
            elif inspect.isclass(obj) and obj.__module__ == module.__name__:
                for attr, fn in list(vars(obj).items()):
                    if attr.lstrip("_").startswith("check") and inspect.isfunction(fn):
                        monkeypatch.setattr(obj, attr, counted(f"{name}.{attr}", fn))
    return calls


def _transformer_checks(monkeypatch: pytest.MonkeyPatch, n_layers: int, fused: bool) -> Counter:
    config = TransformerConfig(20, 20, d_model=16, n_heads=2, d_ff=32, n_layers=n_layers)
    model = Transformer(config.replace(fused=fused))
    src, tgt = torch.randint(4, 20, (2, 7)), torch.randint(4, 20, (2, 5))
    with monkeypatch.context() as patch:
        calls = _count_checks(patch)
        model(src, tgt)
    return calls


def _lm_checks(monkeypatch: pytest.MonkeyPatch, model: GPT | ModernLM, cached: bool) -> Counter:
    """The checks one forward of a decoder-only model (GPT or ModernLM) runs."""
    tokens = torch.randint(0, 20, (2, 9))
    cache = model.init_cache() if cached else None
    with monkeypatch.context() as patch:
        calls = _count_checks(patch)
        model(tokens, cache=cache)
    return calls


def _gpt_checks(
    monkeypatch: pytest.MonkeyPatch, n_layers: int, fused: bool, cached: bool
) -> Counter:
    config = GPTConfig(20, d_model=16, n_heads=2, d_ff=32, n_layers=n_layers, max_len=16)
    return _lm_checks(monkeypatch, GPT(config.replace(fused=fused)), cached)


@pytest.mark.parametrize("fused", [False, True])
def test_one_transformer_forward_runs_few_checks(monkeypatch, fused: bool) -> None:
    calls = _transformer_checks(monkeypatch, 2, fused)
    # src and tgt (check_tokens), the default masks (4: padding twice, as encode builds its
    # own; padding and causal), the encoder (x, mask), the decoder (x, memory, two masks): 12
    # (143 before the checks moved to the door, 149 on the fast path)
    assert 0 < sum(calls.values()) <= 12, calls
    assert _transformer_checks(monkeypatch, 6, fused) == calls  # not per layer


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_one_gpt_forward_runs_few_checks(monkeypatch, fused: bool, cached: bool) -> None:
    calls = _gpt_checks(monkeypatch, 2, fused, cached)
    # the tokens (check_tokens) and the causal mask's size, plus the cache's fit if there is
    # one: 2 or 3 (52 before, 53 on the fast path)
    assert 0 < sum(calls.values()) <= 2 + cached, calls
    assert _gpt_checks(monkeypatch, 5, fused, cached) == calls


def _modern_checks(
    monkeypatch: pytest.MonkeyPatch, n_layers: int, fused: bool, cached: bool
) -> Counter:
    config = ModernConfig(20, d_model=16, n_heads=4, n_kv_heads=2, n_layers=n_layers, max_len=16)
    return _lm_checks(monkeypatch, ModernLM(config.replace(fused=fused)), cached)


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_one_modern_forward_runs_few_checks(monkeypatch, fused: bool, cached: bool) -> None:
    calls = _modern_checks(monkeypatch, 2, fused, cached)
    # as GPT: the tokens, the causal mask's size and the cache's fit if there is one (10 at
    # 2 layers and 22 at 6 on the readable path before #26 §3: 3 per layer, and the token
    # embedding checked the ids again)
    assert 0 < sum(calls.values()) <= 2 + cached, calls
    assert _modern_checks(monkeypatch, 6, fused, cached) == calls


def _bert_checks(monkeypatch: pytest.MonkeyPatch, n_layers: int, fused: bool) -> Counter:
    config = BertConfig(20, d_model=16, n_heads=2, d_ff=32, n_layers=n_layers, max_len=16)
    tokens = torch.randint(0, 20, (2, 9))
    calls: Counter = Counter()
    for model in (Bert(config.replace(fused=fused)), BertClassifier(config.replace(fused=fused))):
        with monkeypatch.context() as patch:
            counted = _count_checks(patch)
            model(tokens)
        calls.update(counted)
    return calls


@pytest.mark.parametrize("fused", [False, True])
def test_one_bert_forward_runs_few_checks(monkeypatch, fused: bool) -> None:
    calls = _bert_checks(monkeypatch, 2, fused)
    # one check_bert_input per forward (tokens, segments, attention mask), for the masked LM
    # and for the classifier: 2
    assert 0 < sum(calls.values()) <= 2, calls
    assert _bert_checks(monkeypatch, 5, fused) == calls


def _vit_checks(monkeypatch: pytest.MonkeyPatch, n_layers: int) -> Counter:
    model = VisionTransformer(VisionConfig(n_layers=n_layers))
    images = torch.rand(2, 1, 8, 8)
    with monkeypatch.context() as patch:
        calls = _count_checks(patch)
        model(images)
    return calls


def test_one_vit_forward_runs_few_checks(monkeypatch) -> None:
    calls = _vit_checks(monkeypatch, 2)
    # the images (check_images), once: the layers take no mask
    assert 0 < sum(calls.values()) <= 1, calls
    assert _vit_checks(monkeypatch, 5) == calls
