"""The interactive attention view (`utils.plotting.explore_attention`): the data its plotly
figure carries, its menus, what it sends to Jupyter and Colab, and clear errors on bad input.

Whether it draws and responds in a browser is checked on the built book by
tools/book/check_book.py (headless Chromium, offline).
"""

import base64
import json
import sys

import numpy as np
import pytest
import torch

from utils.plotting import PLOTLY_MIMETYPE, explore_attention

pytest.importorskip("plotly")

WORDS = ["the", "cat", "sat", "on", "the", "mat"]
SOURCE = ["<bos>", "die", "katze", " "]


def softmax_weights(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(3 * torch.randn(*shape, generator=g), dim=-1)


def visible(view) -> list[int]:
    return [i for i, t in enumerate(view.figure.data) if t.visible]


def decode(array: dict) -> np.ndarray:
    """A plotly.js typed array ({"dtype", "bdata", "shape"}) as NumPy reads it."""
    shape = tuple(int(n) for n in array["shape"].split(","))
    return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).reshape(shape)


def test_every_head_and_the_mean_carry_their_weights():
    w = softmax_weights(2, 3, 6, 4)
    view = explore_attention(w, WORDS, SOURCE)
    assert view.shape == (2, 3, 6, 4)
    assert len(view.figure.data) == 2 * (3 + 1)  # per layer: the mean, then each head
    for layer in range(2):
        for head in range(3):
            drawn = np.asarray(view.trace(layer, head).z)
            np.testing.assert_allclose(drawn, w[layer, head].numpy(), rtol=0, atol=1e-7)
        mean = np.asarray(view.trace(layer, None).z)
        np.testing.assert_allclose(mean, w[layer].mean(0).numpy(), rtol=0, atol=1e-6)
    assert visible(view) == [1]  # layer 0, head 0 first
    assert visible(explore_attention(w, WORDS, SOURCE, layer=1, head=None)) == [4]


def test_what_the_browser_receives_is_the_weights_in_float32():
    w = softmax_weights(1, 4, 6, 6)
    spec = explore_attention(w, WORDS).to_json()
    assert set(spec) == {"data", "layout", "config"}
    z = decode(spec["data"][3]["z"])  # layer 0, head 2
    np.testing.assert_array_equal(z, w[0, 2].numpy())


def test_a_list_of_layers_equals_the_stacked_tensor():
    w = softmax_weights(2, 3, 6, 6)
    from_list = explore_attention([w[0], w[1].numpy()], WORDS)
    stacked = explore_attention(w, WORDS)
    for a, b in zip(from_list.figure.data, stacked.figure.data, strict=True):
        np.testing.assert_array_equal(np.asarray(a.z), np.asarray(b.z))


def test_axes_label_every_token_and_hover_names_query_key_and_weight():
    view = explore_attention(softmax_weights(1, 2, 6, 4), WORDS, SOURCE)
    layout = view.figure.layout
    assert list(layout.yaxis.ticktext) == WORDS  # queries are rows, from the top
    assert layout.yaxis.autorange == "reversed"
    # plotly reads labels as HTML: "<bos>" must be escaped or it vanishes; a space is shown
    assert list(layout.xaxis.ticktext) == ["&lt;bos&gt;", "die", "katze", "␣"]
    heatmap = view.trace(0, 1)
    assert list(heatmap.y) == [f"{i}: {t}" for i, t in enumerate(WORDS)]  # repeated words apart
    assert all(word in heatmap.hovertemplate for word in ("query %{y}", "key %{x}", "weight %{z"))


def test_one_layer_has_a_head_menu_whose_buttons_show_one_map_each():
    view = explore_attention(softmax_weights(4, 6, 6), WORDS, head_names=list("abcd"))
    (menu,) = view.figure.layout.updatemenus
    labels = [b.label for b in menu.buttons]
    assert labels == ["all heads (mean)", "a", "b", "c", "d"]
    for index, button in enumerate(menu.buttons):
        shown = [i for i, v in enumerate(button.args[0]["visible"]) if v]
        assert shown == [index]
    assert menu.active == 1


def test_the_layer_menu_gives_the_head_menu_that_layers_heads():
    view = explore_attention(softmax_weights(3, 2, 6, 6), WORDS, layer=2, head=1)
    head_menu, layer_menu = view.figure.layout.updatemenus
    assert [b.label for b in layer_menu.buttons] == ["layer 0", "layer 1", "layer 2"]
    assert layer_menu.active == 2 and head_menu.active == 2
    assert visible(view) == [2 * 3 + 2]
    for layer, button in enumerate(layer_menu.buttons):
        data, layout = button.args
        assert [i for i, v in enumerate(data["visible"]) if v] == [layer * 3]  # its mean
        heads = layout["updatemenus[0].buttons"]  # the head menu is updatemenus[0]
        for choice, head_button in enumerate(heads):
            shown = [i for i, v in enumerate(head_button["args"][0]["visible"]) if v]
            assert shown == [layer * 3 + choice]


def test_jupyter_gets_plotly_json_and_a_light_fallback(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    view = explore_attention(softmax_weights(1, 4, 10, 10), WORDS + WORDS[:4])
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {PLOTLY_MIMETYPE, "text/html", "text/plain"}
    assert len(json.dumps(bundle)) < 30_000  # no plotly.js in a committed output
    assert "<script" not in bundle["text/html"]
    assert "4 heads" in bundle["text/plain"]


def test_colab_gets_html_that_carries_plotly_js(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", object())
    bundle = explore_attention(softmax_weights(1, 2, 6, 6), WORDS)._repr_mimebundle_()
    assert PLOTLY_MIMETYPE not in bundle
    html = bundle["text/html"]
    assert "plotly.js v" in html and "Plotly.newPlot" in html  # nothing fetched from a CDN
    assert 'src="http' not in html  # (plotly.js names its CDN only for maps' topojson)


def test_a_per_map_scale_sets_each_maximum():
    w = softmax_weights(1, 2, 6, 6)
    view = explore_attention(w, WORDS, vmax=None)
    assert view.trace(0, 1).zmax == pytest.approx(float(w[0, 1].max()))
    assert explore_attention(w, WORDS).trace(0, 1).zmax == 1.0


def test_fully_masked_rows_and_cut_maps():
    w = softmax_weights(1, 2, 6, 6)
    w[0, :, 5] = 0.0  # a fully masked query row: all zero, allowed
    explore_attention(w, WORDS)
    cut = w[..., :3]  # three keys of six: rows no longer sum to 1
    with pytest.raises(ValueError, match=r"sums to 1 over the keys.*rows_sum_to_one=False"):
        explore_attention(cut, WORDS, WORDS[:3])
    explore_attention(cut, WORDS, WORDS[:3], rows_sum_to_one=False)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (torch.rand(6, 6), r"weights must be 3-D or 4-D, got shape \(6, 6\) \(2-D\)"),
        (torch.rand(1, 1, 1, 6, 6), r"got shape \(1, 1, 1, 6, 6\) \(5-D\)"),
        ([], r"empty list"),
        ([torch.rand(2, 6, 6), torch.rand(3, 6, 6)], r"one shape.*\(2, 6, 6\), \(3, 6, 6\)"),
        ([[0.5, 0.5]], r"torch.Tensor or numpy.ndarray, got list"),
    ],
)
def test_rejects_weights_of_the_wrong_rank(weights, message):
    with pytest.raises(ValueError, match=message):
        explore_attention(weights, WORDS)


def test_rejects_tokens_that_do_not_match():
    w = softmax_weights(1, 2, 6, 4)
    with pytest.raises(ValueError, match=r"queries has 5 labels but the matrix has 6 query rows"):
        explore_attention(w, WORDS[:5], SOURCE)
    with pytest.raises(ValueError, match=r"keys has 6 labels but the matrix has 4 key columns"):
        explore_attention(w, WORDS, WORDS)
    with pytest.raises(ValueError, match=r"6 queries x 4 keys: cross-attention needs"):
        explore_attention(w, WORDS)
    with pytest.raises(ValueError, match=r"sequence of strings"):
        explore_attention(w, "the cat sat on the mat", SOURCE)


def test_rejects_weights_that_are_not_attention_weights():
    w = softmax_weights(1, 2, 6, 6)
    w[0, 1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"finite, got 1 NaN.*\(0, 1, 2, 3\)"):
        explore_attention(w, WORDS)
    scores = torch.randn(1, 2, 6, 6)  # before the softmax
    with pytest.raises(ValueError, match=r"lie in \[0, 1\], got values from -"):
        explore_attention(scores, WORDS)


def test_rejects_names_and_choices_that_do_not_fit():
    w = softmax_weights(2, 3, 6, 6)
    with pytest.raises(ValueError, match=r"head_names must give one name per head \(3\), got 2"):
        explore_attention(w, WORDS, head_names=["a", "b"])
    with pytest.raises(ValueError, match=r"layer must be in 0..1 and head in 0..2 or None"):
        explore_attention(w, WORDS, head=3)
    with pytest.raises(ValueError, match=r"got layer=2, head=None"):
        explore_attention(w, WORDS).trace(2, None)
