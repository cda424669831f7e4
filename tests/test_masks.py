"""Tests for utils.masks: shapes, values, combination, PyTorch's flipped convention."""

import pytest
import torch

from utils.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    target_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)

PAD = 0


def test_padding_mask_shape_and_values():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
    m = padding_mask(tokens, PAD)
    assert m.dtype == torch.bool and m.shape == (2, 1, 1, 4)
    assert m[:, 0, 0].tolist() == [[True, True, False, False], [True, False, True, True]]


def test_causal_mask_is_lower_triangular():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(m[i, j]) == (j <= i)
    assert causal_mask(1).tolist() == [[True]]


def test_target_mask_is_padding_and_causal():
    tokens = torch.tensor([[5, 6, 7, 0], [5, 0, 0, 0]])
    m = target_mask(tokens, PAD)
    assert m.shape == (2, 1, 4, 4)
    expected = padding_mask(tokens, PAD) & causal_mask(4)
    assert torch.equal(m, expected)
    assert m[0, 0, 3].tolist() == [True, True, True, False]  # pad key hidden, past visible
    assert m[1, 0, 2].tolist() == [True, False, False, False]


def test_combine_masks_broadcasts_and_ignores_none():
    pad = torch.tensor([[True, True, False]])[:, None, None, :]  # (1, 1, 1, 3)
    out = combine_masks(pad, None, causal_mask(3))
    assert out.shape == (1, 1, 3, 3)
    assert out[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(causal_mask(2)), causal_mask(2))


def test_to_torch_conventions_flip():
    tokens = torch.tensor([[5, 0]])
    assert to_torch_key_padding_mask(padding_mask(tokens, PAD)).tolist() == [[False, True]]
    assert to_torch_attn_mask(causal_mask(2)).tolist() == [[False, True], [False, False]]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: padding_mask(torch.zeros(2, 3), PAD), "integer tensor"),
        (lambda: padding_mask(torch.zeros(3, dtype=torch.long), PAD), r"2-D \(batch, seq\)"),
        (lambda: causal_mask(0), "positive int"),
        (lambda: combine_masks(torch.ones(2, 2)), "bool tensor"),
        (lambda: combine_masks(causal_mask(3), causal_mask(4)), "must broadcast together"),
        (lambda: to_torch_key_padding_mask(causal_mask(3)[None, None]), r"\(B, 1, 1, S\)"),
        (
            lambda: to_torch_attn_mask(target_mask(torch.ones(2, 3, dtype=torch.long), PAD)),
            r"attn_mask is \(T, S\) or \(B\*h, T, S\), got shape \(2, 1, 3, 3\)",
        ),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
