"""The plotting helpers: labels, shapes, one panel per head, and clear errors on bad input."""

import numpy as np
import pytest
import torch

from utils.diagrams import draw_transformer
from utils.plotting import (
    plot_attention,
    plot_attention_grid,
    plot_mask,
    plot_positional_encoding,
)

TOKENS = ["the", "cat", "sat", "down"]


def tick_texts(labels):
    return [t.get_text() for t in labels]


def test_attention_heatmap_labels_axes_with_tokens():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    fig, ax = plot_attention(weights, TOKENS[:3], TOKENS, title="demo")
    assert tick_texts(ax.get_yticklabels()) == TOKENS[:3]
    assert tick_texts(ax.get_xticklabels()) == TOKENS
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("key", "query", "demo")
    # The drawn matrix is the one given, queries as rows.
    drawn = np.asarray(ax.collections[0].get_array()).reshape(3, 4)
    np.testing.assert_allclose(drawn, weights.numpy(), rtol=1e-6)


def test_attention_heatmap_accepts_numpy_and_draws_into_given_axes():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    fig2, ax2 = plot_attention(np.eye(3), ax=ax)
    assert fig2 is fig and ax2 is ax


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), (1, 1, 3, 4)])
def test_attention_heatmap_rejects_wrong_rank(shape):
    with pytest.raises(ValueError, match=r"weights must be 2-D, got shape"):
        plot_attention(torch.rand(shape))


def test_attention_heatmap_rejects_labels_that_do_not_match():
    with pytest.raises(ValueError, match=r"key_labels has 3 labels but the matrix has 4 key"):
        plot_attention(torch.rand(4, 4), TOKENS, TOKENS[:3])
    with pytest.raises(ValueError, match=r"query_labels has 4 labels but the matrix has 2"):
        plot_attention(torch.rand(2, 4), TOKENS, TOKENS)
    with pytest.raises(ValueError, match=r"sequence of strings"):
        plot_attention(torch.rand(4, 4), "the cat sat down", TOKENS)


def test_attention_heatmap_rejects_non_arrays():
    with pytest.raises(ValueError, match=r"torch.Tensor or numpy.ndarray, got list"):
        plot_attention([[0.5, 0.5]])


def test_mask_heatmap_shows_true_as_may_attend():
    mask = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    fig, ax = plot_mask(mask, TOKENS, TOKENS)
    drawn = np.asarray(ax.collections[0].get_array()).reshape(4, 4)
    np.testing.assert_array_equal(drawn, mask.numpy().astype(float))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["may attend (True)", "masked (False)"]


def test_mask_heatmap_rejects_float_masks_and_wrong_rank():
    with pytest.raises(ValueError, match=r"mask must be a bool tensor .* got torch.float32"):
        plot_mask(torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"mask must be a bool array .* got float64"):
        plot_mask(np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"mask must be 2-D, got shape \(1, 1, 3, 3\)"):
        plot_mask(torch.ones(1, 1, 3, 3, dtype=torch.bool))


def test_positional_encoding_heatmap_is_positions_by_dimensions():
    pe = torch.randn(10, 16)
    fig, ax = plot_positional_encoding(pe)
    drawn = np.asarray(ax.collections[0].get_array()).reshape(10, 16)
    np.testing.assert_allclose(drawn, pe.numpy(), rtol=1e-6)
    assert "position" in ax.get_ylabel() and "dimension" in ax.get_xlabel()
    with pytest.raises(ValueError, match=r"encoding must be 2-D"):
        plot_positional_encoding(torch.randn(1, 10, 16))


def test_grid_has_one_panel_per_head():
    weights = torch.softmax(torch.randn(4, 3, 3), dim=-1)
    fig, axes = plot_attention_grid(weights, TOKENS[:3], TOKENS[:3])
    assert axes.shape == (1, 4)
    assert [ax.get_title() for ax in axes[0]] == ["head 0", "head 1", "head 2", "head 3"]
    for h, ax in enumerate(axes[0]):
        drawn = np.asarray(ax.collections[0].get_array()).reshape(3, 3)
        np.testing.assert_allclose(drawn, weights[h].numpy(), rtol=1e-6)
    # Row labels on the first column only, key labels on the bottom row.
    assert tick_texts(axes[0, 0].get_yticklabels()) == TOKENS[:3]
    assert tick_texts(axes[0, 1].get_yticklabels()) == []
    # Axis names: queries on the first column, keys on the bottom row.
    assert axes[0, 0].get_ylabel() == "query" and axes[0, 0].get_xlabel() == "key"


@pytest.mark.slow
def test_grid_of_layers_by_heads():
    weights = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)
    fig, axes = plot_attention_grid(weights, row_titles=["enc 1", "enc 2"])
    assert axes.shape == (2, 3)
    assert [axes[r, 0].get_ylabel() for r in range(2)] == ["enc 1\nquery", "enc 2\nquery"]
    assert axes[0, 0].get_xlabel() == "" and axes[1, 0].get_xlabel() == "key"
    default = plot_attention_grid(weights)[1]
    assert [default[r, 0].get_ylabel() for r in range(2)] == ["layer 0\nquery", "layer 1\nquery"]


def test_grid_scaled_per_panel_shows_each_panel_from_zero_to_its_max():
    weights = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)
    fig, axes = plot_attention_grid(weights, scale="per panel")
    for r in range(2):
        for h in range(3):
            drawn = np.asarray(axes[r, h].collections[0].get_array()).reshape(4, 5)
            panel = weights[r, h].numpy()
            np.testing.assert_allclose(drawn, panel / panel.max(), rtol=1e-6)
            assert axes[r, h].get_title() == f"head {h} (max {panel.max():.2f})"


def test_grid_rejects_bad_input():
    with pytest.raises(ValueError, match=r"weights must be 3-D or 4-D, got shape \(4, 4\)"):
        plot_attention_grid(torch.rand(4, 4))
    with pytest.raises(ValueError, match=r"query_labels has 2 labels but the matrix has 3"):
        plot_attention_grid(torch.rand(2, 3, 3), ["a", "b"])
    with pytest.raises(ValueError, match=r"row_titles has 1 entries but weights has 2 rows"):
        plot_attention_grid(torch.rand(2, 2, 3, 3), row_titles=["x"])
    with pytest.raises(ValueError, match=r'scale must be "fixed" or "per panel", got \'log\''):
        plot_attention_grid(torch.rand(2, 3, 3), scale="log")


def test_architecture_diagram_names_the_notebooks():
    fig, ax = draw_transformer()
    texts = " ".join(t.get_text() for t in ax.texts)
    for block in ("multi-head self-attention", "feed-forward", "add & norm", "softmax"):
        assert block in texts
    assert "(nb 05)" in texts or "(nb 03–05)" in texts
    assert "coming" not in texts  # every notebook the figure names exists
