"""Tests for utils.attention: parity with PyTorch, properties, gradients, bad input."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from utils.attention import (
    MultiHeadAttention,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from utils.checks import check_mask
from utils.fast import use_fast_path
from utils.masks import (
    causal_mask,
    padding_mask,
    target_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)
from utils.parity import copy_to_torch_mha

D_MODEL, N_HEADS = 16, 4


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def random_mask(*shape: int) -> torch.Tensor:
    """A random bool mask (..., q, k) with at least one True in every row."""
    m = torch.rand(*shape) > 0.5
    m[..., 0] = True
    return m


def make_pair(bias: bool = True) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    ours = MultiHeadAttention(D_MODEL, N_HEADS, bias=bias).eval()
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, bias=bias, batch_first=True).eval()
    copy_to_torch_mha(ours, theirs)
    return ours, theirs


# --- scaled dot-product attention -------------------------------------------------------------


@pytest.mark.parametrize("with_mask", [False, True])
def test_sdpa_matches_torch(with_mask):
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 6)
    mask = random_mask(2, 3, 5, 7) if with_mask else None
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # same convention
    assert out.shape == (2, 3, 5, 6) and weights.shape == (2, 3, 5, 7)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_sdpa_matches_the_formula():
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3)
    out, weights = scaled_dot_product_attention(q, k, v)
    expected_w = torch.softmax(q @ k.T / math.sqrt(8), dim=-1)
    torch.testing.assert_close(weights, expected_w)
    torch.testing.assert_close(out, expected_w @ v)


def test_weights_are_distributions_and_masked_weights_exactly_zero():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    mask = random_mask(2, 5, 7)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5))
    assert (weights[~mask] == 0).all()
    assert (weights[mask] > 0).all()


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_fully_masked_rows_give_zero_without_nan_forward_and_backward():
    q = torch.randn(2, 4, 8, requires_grad=True)
    k = torch.randn(2, 5, 8, requires_grad=True)
    v = torch.randn(2, 5, 8, requires_grad=True)
    mask = random_mask(2, 4, 5)
    mask[0, 1] = False  # query 1 of batch 0 may attend nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (weights[0, 1] == 0).all() and (out[0, 1] == 0).all()
    assert torch.isfinite(out).all()
    with torch.autograd.detect_anomaly():  # fails if any backward step makes a NaN, even
        out.sum().backward()  # one that a later masked_fill would hide
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[0, 1] == 0).all()  # the empty row has no influence to pass back


def test_dropout_changes_output_but_returned_weights_are_before_dropout():
    q, k, v = torch.randn(1, 6, 8), torch.randn(1, 6, 8), torch.randn(1, 6, 8)
    out0, w0 = scaled_dot_product_attention(q, k, v)
    out1, w1 = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(w1, w0)  # weights before dropout: rows still sum to 1
    assert not torch.allclose(out1, out0)


def test_sdpa_gradcheck_float64():
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    mask = random_mask(2, 3, 5)
    mask[1, 2] = False  # include a fully masked row
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v)
    )


def test_split_merge_heads_round_trip():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])  # head i = feature slice i
    torch.testing.assert_close(merge_heads(heads), x)


# --- multi-head attention: parity with nn.MultiheadAttention ----------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_mha_self_attention_matches_torch_with_padding_and_causal_masks(bias):
    ours, theirs = make_pair(bias)
    tokens = torch.tensor([[4, 5, 6, 7, 0, 0], [4, 5, 6, 7, 8, 9], [4, 5, 0, 0, 0, 0]])
    x = torch.randn(3, 6, D_MODEL)
    pad = padding_mask(tokens, 0)
    out = ours(x, x, x, target_mask(tokens, 0))
    expected, weights = theirs(
        x,
        x,
        x,
        key_padding_mask=to_torch_key_padding_mask(pad),
        attn_mask=to_torch_attn_mask(causal_mask(6)),
        average_attn_weights=False,
    )
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.attn_weights, weights, atol=1e-5, rtol=0)


def test_mha_cross_attention_matches_torch():
    ours, theirs = make_pair()
    query, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 7, D_MODEL)
    src = torch.tensor([[4, 5, 6, 7, 8, 0, 0], [4, 5, 6, 7, 8, 9, 10]])
    pad = padding_mask(src, 0)
    out = ours(query, memory, memory, pad)
    expected, _ = theirs(query, memory, memory, key_padding_mask=to_torch_key_padding_mask(pad))
    assert out.shape == (2, 3, D_MODEL) and ours.attn_weights.shape == (2, N_HEADS, 3, 7)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


# --- multi-head attention: properties ---------------------------------------------------------


def test_no_peeking_under_causal_mask():
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(2, 8, D_MODEL)
    changed = x.clone()
    changed[:, 5:] = torch.randn(2, 3, D_MODEL)  # rewrite the future from position 5 on
    mask = causal_mask(8)
    out, out_changed = mha(x, x, x, mask), mha(changed, changed, changed, mask)
    torch.testing.assert_close(out_changed[:, :5], out[:, :5], atol=0, rtol=0)
    assert not torch.allclose(out_changed[:, 5:], out[:, 5:])


def test_masked_padding_keys_do_not_change_real_positions():
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(2, 5, D_MODEL)
    tokens = torch.randint(1, 10, (2, 5))
    padded_x = torch.cat([x, torch.randn(2, 3, D_MODEL)], dim=1)  # 3 appended PAD positions
    padded_tokens = torch.cat([tokens, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    out = mha(x, x, x, padding_mask(tokens, 0))
    out_padded = mha(padded_x, padded_x, padded_x, padding_mask(padded_tokens, 0))
    torch.testing.assert_close(out_padded[:, :5], out, atol=1e-6, rtol=0)
    assert (mha.attn_weights[..., 5:] == 0).all()


def test_self_attention_is_permutation_equivariant_without_positions():
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(2, 6, D_MODEL)
    perm = torch.randperm(6)
    torch.testing.assert_close(mha(x[:, perm], x[:, perm], x[:, perm]), mha(x, x, x)[:, perm])


def test_h_small_projections_equal_one_big_projection_and_reshape():
    mha = MultiHeadAttention(D_MODEL, N_HEADS, d_k=3, d_v=5).eval()
    x = torch.randn(2, 4, D_MODEL)
    big = mha.project(x, "q")  # (B, h, S, d_k) from one Linear + reshape
    heads = []
    for i in range(N_HEADS):
        rows = slice(i * 3, (i + 1) * 3)
        w_i, b_i = mha.w_q.weight[rows], mha.w_q.bias[rows]  # head i's own W_i^Q (d_model x d_k)
        torch.testing.assert_close(big[:, i], x @ w_i.T + b_i)
        wk, bk = mha.w_k.weight[rows], mha.w_k.bias[rows]
        vrows = slice(i * 5, (i + 1) * 5)
        wv, bv = mha.w_v.weight[vrows], mha.w_v.bias[vrows]
        head, _ = scaled_dot_product_attention(x @ w_i.T + b_i, x @ wk.T + bk, x @ wv.T + bv)
        heads.append(head)
    expected = mha.w_o(torch.cat(heads, dim=-1))  # Concat(head_1..head_h) W^O
    torch.testing.assert_close(mha(x, x, x), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("mask_kind", ["none", "target", "fully_masked_row"])
def test_fused_equals_unfused(mask_kind):
    mha = MultiHeadAttention(D_MODEL, N_HEADS).train()  # dropout=0: training mode is exact
    x = torch.randn(2, 5, D_MODEL)
    mask = None
    if mask_kind == "target":
        mask = target_mask(torch.tensor([[3, 4, 5, 0, 0], [3, 4, 5, 6, 7]]), 0)
    elif mask_kind == "fully_masked_row":
        mask = random_mask(2, 1, 5, 5)
        mask[0, 0, 2] = False
    outs, grads = [], []
    for fused in (False, True):
        use_fast_path(mha, fused)
        mha.zero_grad()
        out = mha(x, x, x, mask)
        out.square().sum().backward()
        outs.append(out)
        grads.append(mha.w_q.weight.grad.clone())
    assert mha.attn_weights is None  # the fused path has no weights to keep
    torch.testing.assert_close(outs[1], outs[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=0)
    assert torch.isfinite(grads[1]).all()


def test_fused_path_guards_against_backends_that_return_nan(monkeypatch):
    """Some PyTorch versions/backends give NaN for fully masked rows; the fused path must not."""

    def naive_sdpa(q, k, v, attn_mask=None, dropout_p=0.0):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~attn_mask, -math.inf)
        return torch.softmax(scores, dim=-1) @ v  # NaN where a row is fully masked

    monkeypatch.setattr(F, "scaled_dot_product_attention", naive_sdpa)
    mha = use_fast_path(MultiHeadAttention(D_MODEL, N_HEADS))
    x = torch.randn(1, 4, D_MODEL, requires_grad=True)
    mask = causal_mask(4).clone()
    mask[2] = False
    out = mha(x, x, x, mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    use_fast_path(mha, False)
    torch.testing.assert_close(out, mha(x, x, x, mask), atol=1e-6, rtol=0)


def test_dropout_only_in_training():
    mha = MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.5)
    x = torch.randn(2, 5, D_MODEL)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))
    eval_out = mha(x, x, x)
    mha.train()
    assert not torch.allclose(mha(x, x, x), eval_out)


def test_mha_gradcheck_float64():
    mha = MultiHeadAttention(8, 2).double()
    q = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([[1, 2, 3, 0], [1, 2, 3, 4]]), 0)
    assert torch.autograd.gradcheck(lambda q, kv: mha(q, kv, kv, mask), (q, kv))


# --- bad input --------------------------------------------------------------------------------

q4, k4, v4 = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: MultiHeadAttention(10, 3), "n_heads=3 must divide d_model=10"),
        (lambda: MultiHeadAttention(16, 0), "n_heads must be a positive int"),
        (
            lambda: MultiHeadAttention(16, 4, dropout=1.0),
            r"dropout must be a probability in \[0, 1\)",
        ),
        (
            lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(2, 3, 5)),
            r"mask must be a bool tensor \(True = may attend\), got torch.float32",
        ),
        (
            lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(2, 3, 4, dtype=torch.bool)),
            r"does not broadcast to the attention scores of shape \(2, 3, 5\)",
        ),
        (  # would grow the scores from (2, 3, 5) to (4, 2, 3, 5): no silent broadcast
            lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(4, 2, 3, 5).bool()),
            "more than the attention scores",
        ),
        (  # a batch of 1 mask is fine, but a batch of 3 for a batch of 2 is not
            lambda: check_mask(torch.ones(3, 1, 1, 5, dtype=torch.bool), (2, 4, 3, 5)),
            "does not broadcast",
        ),
        (lambda: scaled_dot_product_attention(q4, k4[..., :3], v4), "same last dim d_k"),
        (lambda: scaled_dot_product_attention(q4, k4, v4[:, :4]), "same length"),
        (lambda: scaled_dot_product_attention(q4[0, 0], k4, v4), "at least 2 dims"),
        (lambda: scaled_dot_product_attention(q4, k4, v4, dropout_p=1.0), r"in \[0, 1\)"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_copy_to_torch_mha_rejects_mismatched_modules():
    with pytest.raises(ValueError, match="num_heads=2"):
        copy_to_torch_mha(MultiHeadAttention(16, 4), nn.MultiheadAttention(16, 2))
    with pytest.raises(ValueError, match="d_k = d_v = d_model // n_heads"):
        copy_to_torch_mha(MultiHeadAttention(16, 4, d_k=8), nn.MultiheadAttention(16, 4))
