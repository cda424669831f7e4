"""The fast path (`utils.fast`: packed projections, fused attention, one-kernel LayerNorm,
16-bit dropout masks) computes the same function as the readable path: outputs and
gradients within 1e-5; switching changes classes only, never parameters."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from utils.attention import MultiHeadAttention
from utils.fast import FastDropout, FastLayerNorm, use_fast_path
from utils.layers import LayerNorm
from utils.model import Transformer, TransformerConfig


@pytest.mark.parametrize("norm_first", [False, True])
def test_fast_path_equals_readable_path_outputs_and_gradients(norm_first: bool) -> None:
    torch.manual_seed(0)
    config = TransformerConfig(
        30, 30, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, norm_first=norm_first
    )
    slow = Transformer(config)
    with torch.no_grad():  # non-trivial LayerNorm parameters
        for m in slow.modules():
            if isinstance(m, LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    fast = use_fast_path(copy.deepcopy(slow))
    src = torch.randint(3, 30, (4, 9))
    tgt = torch.randint(3, 30, (4, 7))
    src[0, 6:] = 0
    tgt[1, 5:] = 0
    outs = []
    for model in (slow, fast):
        logits = model(src, tgt)
        logits.square().mean().backward()
        outs.append((logits, {n: p.grad for n, p in model.named_parameters()}))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=0)
    for name, grad in outs[0][1].items():
        torch.testing.assert_close(outs[1][1][name], grad, atol=1e-5, rtol=0, msg=name)


def test_use_fast_path_switches_every_block_and_the_config_builds_it() -> None:
    """Attention modules get the "sdpa" backend (an attribute, not a class swap); LayerNorm
    and Dropout their fast subclasses; the state dict never changes."""
    config = TransformerConfig(10, 10, d_model=16, n_heads=2, d_ff=32, n_layers=2)
    torch.manual_seed(0)
    model = Transformer(config)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    kinds = (LayerNorm, nn.Dropout)
    readable = [type(m) for m in model.modules() if type(m) in kinds]
    assert len(readable) == 10 + 16  # LayerNorms, dropouts
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attention) == 6 and {m.backend for m in attention} == {"readable"}
    use_fast_path(model)
    fast = (FastLayerNorm, FastDropout)
    assert [type(m) for m in model.modules() if type(m) in fast] == [
        dict(zip(kinds, fast, strict=True))[t] for t in readable
    ]
    assert not any(type(m) in kinds for m in model.modules())
    assert {type(m) for m in attention} == {MultiHeadAttention}
    assert {m.backend for m in attention} == {"sdpa"}
    use_fast_path(model, False)
    assert [type(m) for m in model.modules() if type(m) in kinds] == readable
    assert {m.backend for m in attention} == {"readable"}
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    torch.manual_seed(0)
    built = Transformer(config.replace(fused=True))  # same draws, same weights
    assert all(torch.equal(v, state[k]) for k, v in built.state_dict().items())
    assert not any(type(m) in kinds for m in built.modules())
    assert {m.backend for m in built.modules() if isinstance(m, MultiHeadAttention)} == {"sdpa"}
    with pytest.raises(ValueError, match="enabled must be a bool"):
        use_fast_path(model, "yes")  # type: ignore[arg-type]


def test_weights_are_kept_unless_told_not_to_and_never_on_the_fast_path() -> None:
    mha = MultiHeadAttention(16, 2).train()
    x = torch.randn(2, 5, 16)
    mha(x, x, x)
    assert mha.attn_weights is not None and mha.attn_weights.shape == (2, 2, 5, 5)
    assert not mha.attn_weights.requires_grad  # detached: plotting keeps no graph alive
    mha.need_weights = False
    mha(x, x, x)
    assert mha.attn_weights is None
    mha = use_fast_path(MultiHeadAttention(16, 2, need_weights=True))
    mha(x, x, x)
    assert mha.attn_weights is None
