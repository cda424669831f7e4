"""The fast path's dropout (`utils.fast`) and its attention with dropout: the distribution and
the formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from utils.attention import MultiHeadAttention
from utils.fast import FastDropout, fast_dropout, keep_mask, use_fast_path
from utils.layers import FeedForward


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_fast_mask_keeps_one_minus_p_and_scales_the_rest(p):
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 0.5  # no zeros: a zero in the output means dropped
    out = fast_dropout(x, p, training=True)
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.002  # 1e6 draws: sd < 5e-4
    torch.testing.assert_close(out[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)
    assert abs(out.mean().item() / x.mean().item() - 1) < 0.005  # unbiased


@pytest.mark.parametrize("p", [0.1, 0.3, 0.9])
def test_each_16_bit_lane_of_a_64_bit_draw_keeps_one_minus_p(p):
    # the four 16-bit numbers read from one 64-bit draw must each be uniform: element i comes
    # from lane i % 4, so the keep rate of every lane is 1 - p
    torch.manual_seed(0)
    keep = keep_mask((4 * 250_000,), p).view(-1, 4).float()
    rates = keep.mean(0)
    assert (rates - (1 - p)).abs().max().item() < 0.004, rates  # 250,000 draws: sd < 1e-3


def test_keep_mask_rounds_p_to_two_to_the_minus_sixteen_and_is_reproducible():
    # p = 0.5 keeps exactly the u >= 0: half of all 16-bit values
    torch.manual_seed(0)
    a = keep_mask((3, 5, 7), 0.5)  # 105 elements: not a multiple of 4
    torch.manual_seed(0)
    assert torch.equal(a, keep_mask((3, 5, 7), 0.5)) and a.dtype == torch.bool
    assert keep_mask((0, 4), 0.2).shape == (0, 4)
    # the documented rule, element for element: u >= round(65536 p) - 32768 (1e6 draws, so
    # some u equal the threshold and > instead of >= would show)
    torch.manual_seed(1)
    mask = keep_mask((1000, 1000), 0.3)
    torch.manual_seed(1)
    u = torch.empty(250_000, dtype=torch.int64).random_(-(2**63), None).view(torch.int16)
    assert torch.equal(mask.flatten(), u >= round(65536 * 0.3) - 32768)
    assert bool(keep_mask((1000,), 0.0).all())  # p = 0: t = -32768, every u >= t
    assert not bool(keep_mask((1000,), 1 - 2**-17).any())  # rounds to p = 1: t = 32768
    with pytest.raises(ValueError, match=r"p must be a probability in \[0, 1\)"):
        keep_mask((2,), -0.1)


def test_fast_mask_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(0)
    x = (torch.rand(64, 32) + 0.5).requires_grad_()
    out = fast_dropout(x, 0.25, training=True)
    out.backward(torch.ones_like(out))
    expected = (out != 0).float() / 0.75
    torch.testing.assert_close(x.grad, expected, rtol=1e-6, atol=0)


def test_fast_dropout_keeps_only_a_one_byte_mask_for_backward():
    # what autograd saves is alive until backward: a bool mask, as F.dropout saves
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append((t.dtype, t.shape))
        return t

    x = torch.randn(16, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fast_dropout(x, 0.1, training=True)
    assert saved == [(torch.bool, (16, 8))], saved


def test_fast_dropout_makes_no_float_copy_of_the_mask():
    # `x * keep` would convert the bool mask to a float tensor of x's size (aten::_to_copy)
    # (copies of 0-dim scalars are fine)
    x = torch.randn(64, 32, requires_grad=True)
    with torch.profiler.profile(record_shapes=True) as prof:
        fast_dropout(x, 0.1, training=True).sum().backward()
    copies = [
        (e.key, e.input_shapes)
        for e in prof.key_averages(group_by_input_shape=True)
        if e.key in ("aten::_to_copy", "aten::copy_") and e.input_shapes and e.input_shapes[0]
    ]
    assert copies == [], copies


def test_identity_in_eval_or_at_p_zero_and_dtype_kept():
    x = torch.randn(4, 5)
    assert fast_dropout(x, 0.3, training=False) is x
    assert fast_dropout(x, 0.0, training=True) is x
    out = fast_dropout(x.bfloat16(), 0.3, training=True)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape


def test_fast_dropout_off_the_cpu_rule_is_f_dropout_and_modules_switch():
    x = torch.randn(8, 9)
    torch.manual_seed(3)
    ours = FastDropout(0.3)(x)  # the CPU's 16-bit mask: other draws than F.dropout
    torch.manual_seed(3)
    assert not torch.equal(ours, F.dropout(x, 0.3, training=True))
    ffn = FeedForward(8, 16, dropout=0.2)
    assert type(ffn.dropout) is nn.Dropout
    assert type(use_fast_path(ffn).dropout) is FastDropout and ffn.dropout.p == 0.2
    assert type(use_fast_path(ffn, False).dropout) is nn.Dropout


def test_bad_probability_is_a_clear_error():
    with pytest.raises(ValueError, match=r"p must be a probability in \[0, 1\), got 1.0"):
        fast_dropout(torch.ones(2), 1.0)


def test_fused_attention_with_dropout_on_cpu_is_the_written_formula():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.3)
    use_fast_path(mha).train()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    torch.manual_seed(1)
    out = mha(x, x, x, mask=mask)
    torch.manual_seed(1)  # the same draws, by hand
    q, k, v = mha.project_qkv(x, x, x)
    scores = (q @ k.transpose(-2, -1)) / 4**0.5  # d_k = 16 / 4
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    keep = keep_mask(weights.shape, 0.3).float() / 0.7
    heads = (weights * keep) @ v
    expected = mha.w_o(heads.transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_fused_attention_with_dropout_zeroes_fully_masked_rows():
    torch.manual_seed(0)
    mha = use_fast_path(MultiHeadAttention(16, 4, dropout=0.3)).train()
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[0, :, 2] = False  # query 2 of sentence 0 may attend to nothing
    out = mha(x, x, x, mask=mask)
    heads_out = out - mha.w_o.bias  # w_o of a zero row is its bias
    assert heads_out[0, 2].abs().max().item() == 0.0
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
