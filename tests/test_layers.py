"""Tests for `utils.layers`: parity with torch.nn, properties, gradients, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import padded_tokens, randomise_norms
from torch import nn

from utils.layers import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    SublayerConnection,
    init_weights_,
)
from utils.masks import (
    causal_mask,
    padding_mask,
    target_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)
from utils.parity import (
    copy_to_torch_decoder_layer,
    copy_to_torch_encoder_layer,
    torch_decoder_layer,
    torch_encoder_layer,
)

D_MODEL, N_HEADS, D_FF = 32, 4, 64
PAD = 0


# --------------------------------------------------------------------------------------------
# LayerNorm
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "tol"),
    # float32: the weight gradient sums over 28 positions, so allow 1e-6 relative as well.
    [(torch.float32, {"atol": 1e-6, "rtol": 1e-6}), (torch.float64, {"atol": 1e-12, "rtol": 0})],
)
def test_layer_norm_matches_torch_values_and_gradients(dtype: torch.dtype, tol: dict) -> None:
    ours = LayerNorm(D_MODEL).to(dtype)
    theirs = nn.LayerNorm(D_MODEL).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(D_MODEL))
        ours.bias.copy_(torch.randn(D_MODEL))
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)
    x = (3.0 * torch.randn(4, 7, D_MODEL, dtype=dtype) + 1.0).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    upstream = torch.randn(4, 7, D_MODEL, dtype=dtype)
    y_ours, y_theirs = ours(x), theirs(x2)
    torch.testing.assert_close(y_ours, y_theirs, **tol)
    (y_ours * upstream).sum().backward()
    (y_theirs * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, **tol)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, **tol)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad, **tol)


def test_layer_norm_uses_biased_variance_inside_the_root() -> None:
    # Few features make the unbiased/biased difference large: n/(n-1) = 2 for n = 2.
    ln = LayerNorm(2, eps=0.0 + 1e-12)
    y = ln(torch.tensor([[0.0, 2.0]]))
    torch.testing.assert_close(y, torch.tensor([[-1.0, 1.0]]))
    assert torch.equal(LayerNorm(5).weight, torch.ones(5))
    assert torch.equal(LayerNorm(5).bias, torch.zeros(5))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"d_model": 0}, "d_model"), ({"d_model": 4, "eps": 0.0}, "eps")],
)
def test_layer_norm_bad_config(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LayerNorm(**kwargs)


# --------------------------------------------------------------------------------------------
# FeedForward
# --------------------------------------------------------------------------------------------


def test_feed_forward_equals_two_kernel_size_one_convolutions() -> None:
    ffn = FeedForward(D_MODEL, D_FF)
    conv1 = nn.Conv1d(D_MODEL, D_FF, kernel_size=1)
    conv2 = nn.Conv1d(D_FF, D_MODEL, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])
        conv1.bias.copy_(ffn.linear1.bias)
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])
        conv2.bias.copy_(ffn.linear2.bias)
    x = torch.randn(3, 5, D_MODEL)  # conv wants (batch, channels, seq)
    expected = conv2(torch.relu(conv1(x.transpose(1, 2)))).transpose(1, 2)
    torch.testing.assert_close(ffn(x), expected, atol=1e-5, rtol=1e-5)
    assert ffn.linear1.weight.shape == (D_FF, D_MODEL)
    assert ffn.linear2.weight.shape == (D_MODEL, D_FF)


def test_feed_forward_dropout_sits_after_the_relu() -> None:
    ffn = FeedForward(D_MODEL, D_FF, dropout=0.5).train()
    x = torch.randn(2, 5, D_MODEL)
    torch.manual_seed(1)
    y = ffn(x)
    torch.manual_seed(1)
    hidden = F.dropout(torch.relu(ffn.linear1(x)), p=0.5, training=True)
    torch.testing.assert_close(y, ffn.linear2(hidden))
    ffn.eval()
    torch.testing.assert_close(ffn(x), ffn.linear2(torch.relu(ffn.linear1(x))))


@pytest.mark.parametrize(
    ("args", "match"),
    [((0, 8), "d_model"), ((8, -1), "d_ff"), ((8, 8, 1.0), "dropout"), ((8, 8, -0.1), "dropout")],
)
def test_feed_forward_bad_config(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FeedForward(*args)


# --------------------------------------------------------------------------------------------
# SublayerConnection
# --------------------------------------------------------------------------------------------


def test_sublayer_connection_post_norm_and_pre_norm() -> None:
    linear = nn.Linear(D_MODEL, D_MODEL)
    x = torch.randn(2, 5, D_MODEL)
    post = SublayerConnection(D_MODEL, dropout=0.3, norm_first=False).eval()
    pre = SublayerConnection(D_MODEL, dropout=0.3, norm_first=True).eval()
    torch.testing.assert_close(post(x, linear), post.norm(x + linear(x)))
    torch.testing.assert_close(pre(x, linear), x + linear(pre.norm(x)))
    # Pre-norm keeps an identity path: a zero sublayer returns x exactly; post-norm normalises.
    zero = lambda y: torch.zeros_like(y)
    assert torch.equal(pre(x, zero), x)
    torch.testing.assert_close(post(x, zero), post.norm(x))


def test_sublayer_connection_dropout_on_the_sublayer_output_only_in_training() -> None:
    block = SublayerConnection(D_MODEL, dropout=0.5, norm_first=True).train()
    x = torch.randn(2, 5, D_MODEL)
    ones = lambda y: torch.ones_like(y)
    out = block(x, ones) - x  # the dropped-out sublayer output: 0 or 1 / (1 - p) = 2
    kept = out != 0
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 2.0))
    assert 0 < kept.sum() < out.numel()
    block.eval()
    torch.testing.assert_close(block(x, ones) - x, torch.ones_like(x))


# --------------------------------------------------------------------------------------------
# EncoderLayer / DecoderLayer against nn.TransformerEncoderLayer / nn.TransformerDecoderLayer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first: bool) -> None:
    ours = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, norm_first=norm_first).eval()
    randomise_norms(ours)
    theirs = torch_encoder_layer(D_MODEL, N_HEADS, D_FF, 0.1, norm_first).eval()
    copy_to_torch_encoder_layer(ours, theirs)
    tokens = padded_tokens(10, 7, [7, 4, 1])
    mask = padding_mask(tokens, PAD)
    x = torch.randn(3, 7, D_MODEL)
    # Grad mode stays on, so PyTorch takes its reference (not fused fast) path.
    expected = theirs(x, src_key_padding_mask=to_torch_key_padding_mask(mask))
    torch.testing.assert_close(ours(x, mask), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first: bool) -> None:
    ours = DecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, norm_first=norm_first).eval()
    randomise_norms(ours)
    theirs = torch_decoder_layer(D_MODEL, N_HEADS, D_FF, 0.1, norm_first).eval()
    copy_to_torch_decoder_layer(ours, theirs)
    src, tgt = padded_tokens(10, 7, [7, 4, 2]), padded_tokens(10, 5, [5, 3, 2])
    memory_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)
    x, memory = torch.randn(3, 5, D_MODEL), torch.randn(3, 7, D_MODEL)
    expected = theirs(
        x,
        memory,
        tgt_mask=to_torch_attn_mask(causal_mask(5)),
        tgt_key_padding_mask=to_torch_key_padding_mask(padding_mask(tgt, PAD)),
        memory_key_padding_mask=to_torch_key_padding_mask(memory_mask),
    )
    torch.testing.assert_close(ours(x, memory, tgt_mask, memory_mask), expected, atol=1e-5, rtol=0)


def test_layers_attention_dropout_and_submodules() -> None:
    enc = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.2)
    dec = DecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.2, norm_first=True)
    assert enc.self_attn.dropout == 0.2 and dec.cross_attn.dropout == 0.2
    assert len(enc.sublayers) == 2 and len(dec.sublayers) == 3
    assert all(s.norm_first for s in dec.sublayers) and not any(s.norm_first for s in enc.sublayers)


def test_copy_refuses_mismatched_layers() -> None:
    ours = EncoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=True)
    with pytest.raises(ValueError, match="norm_first"):
        copy_to_torch_encoder_layer(ours, nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF))
    with pytest.raises(ValueError, match="d_k"):
        copy_to_torch_encoder_layer(
            EncoderLayer(D_MODEL, N_HEADS, D_FF, d_k=4),
            nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, batch_first=True),
        )
    with pytest.raises(ValueError, match="linear1"):
        copy_to_torch_encoder_layer(
            EncoderLayer(D_MODEL, N_HEADS, D_FF),
            nn.TransformerEncoderLayer(D_MODEL, N_HEADS, 2 * D_FF, batch_first=True),
        )


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


def test_decoder_layer_does_not_peek_at_future_positions() -> None:
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF).eval()
    x, memory = torch.randn(2, 6, D_MODEL), torch.randn(2, 4, D_MODEL)
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, 3, D_MODEL)
    mask = causal_mask(6)
    before, after = layer(x, memory, mask), layer(changed, memory, mask)
    torch.testing.assert_close(before[:, :3], after[:, :3], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, 3:], after[:, 3:])


def test_encoder_layer_padding_does_not_change_real_positions() -> None:
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF).eval()
    tokens = padded_tokens(10, 6, [4])
    x = torch.randn(1, 6, D_MODEL)
    noisy = x.clone()
    noisy[:, 4:] = torch.randn(1, 2, D_MODEL)  # different content at the padded positions
    mask = padding_mask(tokens, PAD)
    short = layer(x[:, :4])  # the same sentence without padding
    torch.testing.assert_close(layer(x, mask)[:, :4], short, atol=1e-5, rtol=0)
    torch.testing.assert_close(layer(noisy, mask)[:, :4], short, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layers_with_custom_head_sizes_and_gradients(norm_first: bool) -> None:
    enc = EncoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=norm_first, d_k=5, d_v=3)
    dec = DecoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=norm_first, d_k=5, d_v=3)
    assert enc.self_attn.w_q.weight.shape == (N_HEADS * 5, D_MODEL)
    assert dec.cross_attn.w_o.weight.shape == (D_MODEL, N_HEADS * 3)
    memory = enc(torch.randn(2, 7, D_MODEL))
    out = dec(torch.randn(2, 5, D_MODEL), memory, causal_mask(5))
    assert out.shape == (2, 5, D_MODEL)
    (out * torch.randn_like(out)).sum().backward()
    for name, p in [*enc.named_parameters(), *dec.named_parameters()]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_layer_dropout_active_in_train_only() -> None:
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1)
    x = torch.randn(2, 5, D_MODEL)
    layer.train()
    assert not torch.allclose(layer(x), layer(x))
    layer.eval()
    assert torch.equal(layer(x), layer(x))


# --------------------------------------------------------------------------------------------
# bad configuration and bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 30}, "n_heads=4 must divide d_model=30"),
        ({"d_model": 0}, "d_model must be a positive int"),
        ({"n_heads": -2}, "n_heads must be a positive int"),
        ({"d_ff": 0}, "d_ff must be a positive int"),
        ({"dropout": 1.0}, r"dropout must be a probability in \[0, 1\)"),
        ({"d_k": 0}, "d_k must be a positive int"),
        ({"d_model": 2.5}, "d_model must be a positive int"),
    ],
)
def test_layer_bad_config(cls: type, kwargs: dict, match: str) -> None:
    config = {"d_model": D_MODEL, "n_heads": N_HEADS, "d_ff": D_FF} | kwargs
    with pytest.raises(ValueError, match=match):
        cls(**config)


@pytest.mark.parametrize("zero_biases", [False, True])
def test_init_weights_touches_weight_matrices_and_zeroes_biases_if_asked(zero_biases) -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF)
    before = {name: p.clone() for name, p in layer.named_parameters()}
    skipped = layer.ffn.linear2.weight
    assert init_weights_(layer, zero_biases=zero_biases, skip=[skipped]) is layer
    assert torch.equal(skipped, before["ffn.linear2.weight"])
    for name, p in layer.named_parameters():
        if p is skipped:
            continue
        if p.dim() > 1:
            fan_out, fan_in = p.shape
            bound = (6 / (fan_in + fan_out)) ** 0.5
            assert not torch.equal(p, before[name]), name  # redrawn
            assert p.abs().max() <= bound
            assert p.abs().max() > 0.9 * bound  # uniform up to the bound, not PyTorch's default
        elif zero_biases and name.endswith("bias") and "norm" not in name:
            assert not p.any(), name
        else:
            assert torch.equal(p, before[name]), name  # biases and LayerNorm untouched
    with pytest.raises(ValueError, match="module must be an nn.Module, got Tensor"):
        init_weights_(torch.zeros(2, 2), zero_biases=False)  # type: ignore[arg-type]
