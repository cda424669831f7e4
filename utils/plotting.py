"""Heatmaps with one look for every picture in the book, and one interactive view.

Every function accepts a torch tensor or a NumPy array and validates its rank and labels. The
heatmaps return the matplotlib figure and axes so a notebook can adjust them;
`explore_attention` returns an `AttentionView`, a plotly figure with menus for the layer and
the head, which draws offline in JupyterLab, Colab and the HTML book.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "ATTENTION_CMAP",
    "plot_attention",
    "plot_mask",
    "plot_positional_encoding",
    "plot_attention_grid",
    "plot_history",
    "explore_attention",
    "AttentionView",
    "PLOTLY_MIMETYPE",
]

ATTENTION_CMAP = "viridis"  # perceptually uniform: weight 0 is dark, weight 1 is bright
ENCODING_CMAP = "RdBu_r"  # diverging: the sign of an encoding matters
MASK_COLORS = ("#d9d9d9", "#2b8cbe")  # masked (False), may attend (True)


def _as_array(x: torch.Tensor | np.ndarray, ndim: int | tuple[int, ...], name: str) -> np.ndarray:
    """`x` as a float NumPy array of the expected rank; ValueError otherwise."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        x = x.numpy() if x.dtype == torch.bool else x.float().numpy()
    elif not isinstance(x, np.ndarray):
        raise ValueError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    ranks = (ndim,) if isinstance(ndim, int) else ndim
    if x.ndim not in ranks:
        expected = " or ".join(f"{r}-D" for r in ranks)
        raise ValueError(f"{name} must be {expected}, got shape {tuple(x.shape)} ({x.ndim}-D)")
    if x.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)})")
    return x


def _check_labels(labels: Sequence[str] | None, size: int, name: str, axis: str) -> list[str] | str:
    """Tick labels for one axis: the given tokens, or automatic numbers when None."""
    if labels is None:
        return "auto"  # seaborn picks readable integer ticks
    if isinstance(labels, str):
        raise ValueError(f"{name} must be a sequence of strings (one per {axis}), got one string")
    labels = [str(t) for t in labels]
    if len(labels) != size:
        raise ValueError(
            f"{name} has {len(labels)} labels but the matrix has {size} {axis}s; "
            f"give one label per {axis}"
        )
    return labels


def _tick_step(n: int, max_ticks: int = 10) -> int:
    """A round label step (1, 2, 5, 10, 20, 50, ...) that gives at most `max_ticks` labels."""
    step, factors = 1, (2, 2.5, 2)  # 1 -> 2 -> 5 -> 10 -> 20 -> 50 -> ...
    i = 0
    while -(-n // step) > max_ticks:
        step = int(step * factors[i % 3])
        i += 1
    return step


def _new_axes(ax: Axes | None, shape: tuple[int, int]) -> tuple[Figure, Axes]:
    if ax is not None:  # (its figure is a SubFigure if it lives in one; drawn on the same way)
        return cast(Figure, ax.figure), ax
    rows, cols = shape
    # Big enough for word labels, small enough for a notebook column.
    width = min(9.0, max(3.5, 0.45 * cols + 1.8))
    height = min(9.0, max(3.0, 0.45 * rows + 1.0))
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    return fig, ax


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    colorbar: bool = True,
    vmax: float | None = 1.0,
) -> tuple[Figure, Axes]:
    """Heatmap of one attention matrix `weights (queries, keys)` -> `(figure, axes)`.

    `annotate` defaults to on for small matrices; `vmax=1.0` keeps maps comparable.
    """
    w = _as_array(weights, 2, "weights")
    ylabels = _check_labels(query_labels, w.shape[0], "query_labels", "query row")
    xlabels = _check_labels(key_labels, w.shape[1], "key_labels", "key column")
    fig, ax = _new_axes(ax, w.shape)
    if annotate is None:
        annotate = max(w.shape) <= 8
    sns.heatmap(
        w,
        ax=ax,
        cmap=ATTENTION_CMAP,
        vmin=0.0,
        vmax=vmax,
        square=True,
        cbar=colorbar,
        annot=annotate,
        fmt=".2f",
        annot_kws={"fontsize": 8},
        xticklabels=xlabels,
        yticklabels=ylabels,
        linewidths=0.0,
    )
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.tick_params(axis="x", labelrotation=90 if key_labels is not None else 0)
    ax.tick_params(axis="y", labelrotation=0)
    if title:
        ax.set_title(title)
    return fig, ax


def plot_mask(
    mask: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    legend: bool = True,
) -> tuple[Figure, Axes]:
    """Heatmap of a bool mask `(queries, keys)`, `True` = may attend; squeeze broadcast dims."""
    if isinstance(mask, torch.Tensor) and mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
    if isinstance(mask, np.ndarray) and mask.dtype != np.bool_:
        raise ValueError(f"mask must be a bool array (True = may attend), got {mask.dtype}")
    m = _as_array(mask, 2, "mask").astype(float)
    ylabels = _check_labels(query_labels, m.shape[0], "query_labels", "query row")
    xlabels = _check_labels(key_labels, m.shape[1], "key_labels", "key column")
    fig, ax = _new_axes(ax, m.shape)
    sns.heatmap(
        m,
        ax=ax,
        cmap=ListedColormap(MASK_COLORS),
        vmin=0.0,
        vmax=1.0,
        square=True,
        cbar=False,
        xticklabels=xlabels,
        yticklabels=ylabels,
        linewidths=0.5,
        linecolor="white",
    )
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.tick_params(axis="x", labelrotation=90 if key_labels is not None else 0)
    ax.tick_params(axis="y", labelrotation=0)
    if legend:
        handles = [
            Patch(facecolor=MASK_COLORS[1], label="may attend (True)"),
            Patch(facecolor=MASK_COLORS[0], label="masked (False)"),
        ]
        # Above the matrix (the title moves up to make room): never over cells or tick labels.
        ax.legend(
            handles=handles,
            loc="lower center",
            bbox_to_anchor=(0.5, 1.0),
            ncols=2,
            frameon=False,
            fontsize=8,
            handlelength=1.0,
            columnspacing=1.0,
        )
    if title:
        ax.set_title(title, pad=20 if legend else 6)
    return fig, ax


def plot_positional_encoding(
    encoding: torch.Tensor | np.ndarray,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    colorbar: bool = True,
) -> tuple[Figure, Axes]:
    """Heatmap of `encoding (positions, d_model)`, diverging colours centred on 0."""
    pe = _as_array(encoding, 2, "encoding")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 4.0), layout="constrained")
    else:
        fig = cast(Figure, ax.figure)
    limit = float(np.abs(pe).max()) or 1.0
    sns.heatmap(
        pe,
        ax=ax,
        cmap=ENCODING_CMAP,
        vmin=-limit,
        vmax=limit,
        center=0.0,
        cbar=colorbar,
        xticklabels=_tick_step(pe.shape[1]),
        yticklabels=_tick_step(pe.shape[0]),
    )
    ax.set_xlabel("dimension (column of PE)")
    ax.set_ylabel("position $p$")
    ax.tick_params(axis="y", labelrotation=0)
    ax.tick_params(axis="x", labelrotation=0)
    if title:
        ax.set_title(title)
    return fig, ax


def plot_attention_grid(
    weights: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    row_titles: Sequence[str] | None = None,
    title: str | None = None,
    panel_size: float = 2.4,
    scale: str = "fixed",
) -> tuple[Figure, np.ndarray]:
    """Attention heatmaps, a panel per head, a row per layer -> `(figure, axes (layers, heads))`.

    `weights`: `(heads, queries, keys)` or `(layers, heads, queries, keys)` of one batch element.
    `scale`: "fixed" (one 0-1 scale, comparable) or "per panel" (each to its own maximum).
    """
    w = _as_array(weights, (3, 4), "weights")
    if scale not in ("fixed", "per panel"):
        raise ValueError(f'scale must be "fixed" or "per panel", got {scale!r}')
    if w.ndim == 3:
        w = w[None]
    n_rows, n_heads, n_q, n_k = w.shape
    ylabels = _check_labels(query_labels, n_q, "query_labels", "query row")
    xlabels = _check_labels(key_labels, n_k, "key_labels", "key column")
    if row_titles is None:
        row_titles = [f"layer {r}" for r in range(n_rows)] if n_rows > 1 else [""]
    elif len(row_titles) != n_rows:
        raise ValueError(f"row_titles has {len(row_titles)} entries but weights has {n_rows} rows")
    fig, axes = plt.subplots(
        n_rows,
        n_heads,
        figsize=(panel_size * n_heads + 1.2, panel_size * n_rows + 0.6),
        squeeze=False,
        layout="constrained",
    )
    for r in range(n_rows):
        for h in range(n_heads):
            ax = axes[r, h]
            panel_max = float(w[r, h].max())
            per_panel = scale == "per panel"
            sns.heatmap(
                w[r, h] / panel_max if per_panel and panel_max > 0 else w[r, h],
                ax=ax,
                cmap=ATTENTION_CMAP,
                vmin=0.0,
                vmax=1.0,
                square=True,
                cbar=False,
                xticklabels=xlabels if r == n_rows - 1 else False,
                yticklabels=ylabels if h == 0 else False,
            )
            ax.set_title(f"head {h}" + (f" (max {panel_max:.2f})" if per_panel else ""), fontsize=9)
            if h == 0:
                ax.set_ylabel(f"{row_titles[r]}\nquery" if row_titles[r] else "query")
            if r == n_rows - 1:
                ax.set_xlabel("key")
                if key_labels is not None:
                    ax.tick_params(axis="x", labelrotation=90)
            ax.tick_params(axis="y", labelrotation=0)
    mappable = axes[0, 0].collections[0]
    label = "attention weight" if scale == "fixed" else "weight / the panel's max"
    fig.colorbar(mappable, ax=axes, shrink=0.8, label=label)
    if title:
        fig.suptitle(title)
    return fig, axes


def _history_curves(history: object, name: str) -> dict[str, np.ndarray]:
    """`step`, `loss`, `lr` of one training history (an object or a dict), as float arrays."""
    curves = {}
    for key in ("step", "loss", "lr"):
        value = history.get(key) if isinstance(history, Mapping) else getattr(history, key, None)
        if value is None:
            raise ValueError(
                f"{name} must have step, loss and lr (a utils.training.History or its "
                f"to_dict()), but has no {key!r}"
            )
        curves[key] = np.asarray(value, dtype=float)
    if not len(curves["step"]) == len(curves["loss"]) == len(curves["lr"]):
        raise ValueError(
            f"{name}: step, loss and lr must have one length, got {len(curves['step'])}, "
            f"{len(curves['loss'])}, {len(curves['lr'])}"
        )
    if len(curves["step"]) == 0:
        raise ValueError(f"{name} is empty (nothing was logged)")
    return curves


def plot_history(
    history: object,
    ax: Sequence[Axes] | np.ndarray | None = None,
    *,
    title: str | None = None,
) -> tuple[Figure, np.ndarray]:
    """The loss (log scale) and the learning rate per step -> `(figure, axes)`.

    `history`: a `utils.training.History`, its `to_dict()`, or `{label: history}` to compare runs.
    """
    single = not isinstance(history, Mapping) or "step" in history
    runs = {"": history} if single else dict(cast(Mapping[str, object], history))
    if not runs:
        raise ValueError("history is an empty dict; give a History or {label: History}")
    curves = {
        label: _history_curves(h, f"history {label!r}" if label else "history")
        for label, h in runs.items()
    }
    if ax is None:
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
    else:
        axes = np.asarray(ax, dtype=object).ravel()
        if len(axes) != 2 or not all(isinstance(a, Axes) for a in axes):
            raise ValueError(f"ax must be two matplotlib Axes (loss, lr), got {ax!r}")
        fig = axes[0].figure
    loss_ax, lr_ax = axes
    for label, c in curves.items():
        loss_ax.plot(c["step"], c["loss"], label=label or None)
        lr_ax.plot(c["step"], c["lr"], label=label or None)
    loss_ax.set_yscale("log")
    loss_ax.set(xlabel="step", ylabel="training loss (log scale)", title="loss")
    lr_ax.set(xlabel="step", ylabel="learning rate", title="learning rate")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    for a in axes:
        a.grid(alpha=0.3)
    if not single:
        loss_ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig, np.asarray(axes, dtype=object)


# ---------------------------------------------------------------------------------------
# The interactive view: plotly, which draws offline in JupyterLab (its mime renderer ships
# with the plotly package), in Colab (the page carries plotly.js) and in the HTML book (the
# build draws the figure's JSON with the book's own copy of plotly.js).

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
_ROW_SUM_TOLERANCE = 1e-3  # float32 softmax rows sum to 1 within ~1e-6; 1e-3 allows bf16
_WHITESPACE_SHOWN = {" ": "␣", "\n": "⏎", "\t": "⇥"}


def _weights_stack(weights: object) -> np.ndarray:
    """`(layers, heads, L_q, L_k)` float32 from a 3-D or 4-D array or a list of 3-D ones."""
    if isinstance(weights, list | tuple):
        if not weights:
            raise ValueError("weights is an empty list; give one (heads, L_q, L_k) per layer")
        layers = [_as_array(w, 3, f"weights[{i}]") for i, w in enumerate(weights)]
        shapes = {w.shape for w in layers}
        if len(shapes) != 1:
            got = ", ".join(str(tuple(w.shape)) for w in layers)
            raise ValueError(
                f"every layer's weights must have one shape (heads, L_q, L_k), got {got}"
            )
        w = np.stack(layers)
    else:
        w = _as_array(cast(torch.Tensor | np.ndarray, weights), (3, 4), "weights")
        if w.ndim == 3:
            w = w[None]
    return np.asarray(w, dtype=np.float32)


def _check_distributions(w: np.ndarray, rows_sum_to_one: bool) -> None:
    """Attention weights: finite, in [0, 1], each query row a distribution (or all zero)."""
    bad = ~np.isfinite(w)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"weights must be finite, got {int(bad.sum())} NaN or inf values "
            f"(the first at (layer, head, query, key) = {where})"
        )
    low, high = float(w.min()), float(w.max())
    if low < -1e-6 or high > 1 + 1e-6:
        raise ValueError(
            f"attention weights lie in [0, 1], got values from {low:.3g} to {high:.3g} "
            "(scores before the softmax?)"
        )
    if not rows_sum_to_one:
        return
    sums = w.sum(-1, dtype=np.float64)  # (layers, heads, L_q): one per query row
    off = np.minimum(np.abs(sums - 1.0), np.abs(sums))  # a fully masked row is all zero
    if off.max() > _ROW_SUM_TOLERANCE:
        where = tuple(int(i) for i in np.unravel_index(int(off.argmax()), off.shape))
        raise ValueError(
            "each query row of attention weights sums to 1 over the keys (or to 0 when "
            f"fully masked), got a row summing to {float(sums[where]):.4f} at (layer, head, "
            f"query) = {where}; pass rows_sum_to_one=False for maps cut to some of their keys"
        )


def _token_text(token: str) -> str:
    """A token as plotly shows it: whitespace made visible, `<`, `>`, `&` as entities
    (plotly reads labels as HTML, so `<bos>` would vanish as an unknown tag)."""
    if token == "" or token.isspace():
        token = "".join(_WHITESPACE_SHOWN.get(ch, "·") for ch in token) or "∅"
    return token.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _names(names: Sequence[str] | None, count: int, what: str, default: str) -> list[str]:
    if names is None:
        return [f"{default} {i}" for i in range(count)]
    if isinstance(names, str) or len(names) != count:
        got = "one string" if isinstance(names, str) else f"{len(names)} names"
        raise ValueError(f"{what} must give one name per {default} ({count}), got {got}")
    return [str(n) for n in names]


class AttentionView:
    """An interactive attention view (`explore_attention`): a plotly figure with a menu for the
    head (and one for the layer), that shows itself in JupyterLab, Colab and the HTML book.

    `weights (layers, heads, L_q, L_k)` is what it was given (float32); `figure` is the plotly
    figure, one heatmap per layer and head plus one per layer for the heads' mean, one visible
    at a time; `trace(layer, head)` is the heatmap of one map (`head=None`: the mean).
    """

    def __init__(
        self, figure: go.Figure, weights: np.ndarray, queries: list[str], keys: list[str]
    ) -> None:
        self.figure = figure
        self.weights = weights
        self.queries = queries
        self.keys = keys

    @property
    def shape(self) -> tuple[int, int, int, int]:
        n_layers, n_heads, n_q, n_k = self.weights.shape
        return n_layers, n_heads, n_q, n_k

    def trace(self, layer: int, head: int | None) -> go.Heatmap:
        """The heatmap of `layer`'s `head` (`None`: the mean over heads)."""
        n_layers, n_heads = self.shape[:2]
        if not 0 <= layer < n_layers or (head is not None and not 0 <= head < n_heads):
            raise ValueError(
                f"layer must be in 0..{n_layers - 1} and head in 0..{n_heads - 1} or None, "
                f"got layer={layer}, head={head}"
            )
        per_layer = n_heads + 1  # the mean, then the heads
        return self.figure.data[layer * per_layer + (0 if head is None else head + 1)]

    def to_json(self) -> dict:
        """The figure as plotly.js reads it: `{"data", "layout", "config"}`, arrays in base64."""
        import plotly.io as pio

        spec = json.loads(pio.to_json(self.figure, validate=False))
        spec["config"] = {"displaylogo": False, "responsive": False}
        return spec

    def to_html(self, *, include_plotlyjs: bool = True) -> str:
        """A `<div>` that draws the view; with plotly.js inside it (4-5 MB) unless told not to."""
        import plotly.io as pio

        return pio.to_html(
            self.to_json(),
            include_plotlyjs=include_plotlyjs,
            full_html=False,
            validate=False,
            config=self.to_json()["config"],
        )

    def __repr__(self) -> str:
        n_layers, n_heads, n_q, n_k = self.shape
        return (
            f"AttentionView: {n_layers} layer(s) x {n_heads} heads, {n_q} queries x {n_k} keys "
            "(interactive: choose a head, hover a cell)"
        )

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
        """What Jupyter shows. Colab draws only HTML: there the view carries plotly.js itself
        (nothing is fetched). Elsewhere the output is plotly's JSON, which JupyterLab draws
        with the renderer that ships with plotly and the HTML book with its own plotly.js,
        plus a line of HTML for viewers that can draw neither (GitHub, nbviewer)."""
        if "google.colab" in sys.modules:
            return {"text/html": self.to_html(include_plotlyjs=True), "text/plain": repr(self)}
        n_layers, n_heads, n_q, n_k = self.shape
        fallback = (
            '<div class="attention-view-fallback"><em>Interactive attention view '
            f"({n_layers} layer(s) x {n_heads} heads, {n_q} x {n_k}): run the notebook in "
            "JupyterLab or Colab, or read the HTML book, to explore it.</em></div>"
        )
        return {PLOTLY_MIMETYPE: self.to_json(), "text/html": fallback, "text/plain": repr(self)}


def explore_attention(
    weights: torch.Tensor | np.ndarray | Sequence[torch.Tensor | np.ndarray],
    queries: Sequence[str],
    keys: Sequence[str] | None = None,
    *,
    head_names: Sequence[str] | None = None,
    layer_names: Sequence[str] | None = None,
    title: str | None = None,
    layer: int = 0,
    head: int | None = 0,
    vmax: float | None = 1.0,
    rows_sum_to_one: bool = True,
) -> AttentionView:
    """An interactive view of one example's attention: pick the layer and the head (or all heads
    averaged) from menus, hover a cell to read its query token, key token and weight.

    `weights`: `(layers, heads, L_q, L_k)`, `(heads, L_q, L_k)` (one layer) or a list of
    per-layer `(heads, L_q, L_k)`; self- or cross-attention. `queries` labels the `L_q` rows,
    `keys` the `L_k` columns (default: `queries`, self-attention). Each query row must be a
    distribution over the keys (or all zero, a fully masked row): `rows_sum_to_one=False` lets
    through maps cut to some of their keys. `layer`, `head` pick the map shown first
    (`head=None`: the mean); `vmax=1.0` keeps maps comparable, `None` scales each to its max.
    Display the returned `AttentionView` (the last line of a cell); its `figure` is plotly's.
    """
    import plotly.graph_objects as go

    w = _weights_stack(weights)
    n_layers, n_heads, n_q, n_k = w.shape
    _check_distributions(w, rows_sum_to_one)
    if keys is None and n_q != n_k:
        raise ValueError(
            f"weights are {n_q} queries x {n_k} keys: cross-attention needs the keys' tokens "
            "(keys=...)"
        )
    query_list = _check_labels(queries, n_q, "queries", "query row")
    key_list = _check_labels(queries if keys is None else keys, n_k, "keys", "key column")
    if not isinstance(query_list, list) or not isinstance(key_list, list):
        raise ValueError("queries must be a sequence of token strings, got None")
    heads = _names(head_names, n_heads, "head_names", "head")
    layers = _names(layer_names, n_layers, "layer_names", "layer")
    if not 0 <= layer < n_layers or (head is not None and not 0 <= head < n_heads):
        raise ValueError(
            f"layer must be in 0..{n_layers - 1} and head in 0..{n_heads - 1} or None, "
            f"got layer={layer}, head={head}"
        )

    # Categories unique per position (a sentence may repeat a word), shown as the bare token.
    y_cats = [f"{i}: {_token_text(t)}" for i, t in enumerate(query_list)]
    x_cats = [f"{j}: {_token_text(t)}" for j, t in enumerate(key_list)]
    maps = np.concatenate([w.mean(1, keepdims=True), w], axis=1)  # (layers, 1 + heads, q, k)
    choices = ["all heads (mean)", *heads]
    shown = layer * (n_heads + 1) + (0 if head is None else head + 1)
    figure = go.Figure()
    for li in range(n_layers):
        for ci in range(n_heads + 1):
            z = np.ascontiguousarray(maps[li, ci])
            figure.add_trace(
                go.Heatmap(
                    z=z,
                    x=x_cats,
                    y=y_cats,
                    zmin=0.0,
                    zmax=vmax if vmax is not None else max(float(z.max()), 1e-6),
                    colorscale=ATTENTION_CMAP.capitalize(),
                    colorbar={"title": {"text": "weight"}, "thickness": 12},
                    hovertemplate=(
                        "query %{y}<br>key %{x}<br>weight %{z:.3f}"
                        f"<extra>{layers[li]}, {choices[ci]}</extra>"
                    ),
                    name=f"{layers[li]}, {choices[ci]}",
                    visible=li * (n_heads + 1) + ci == shown,
                    xgap=0,
                    ygap=0,
                )
            )

    n_traces = n_layers * (n_heads + 1)

    def head_buttons(li: int) -> list[dict]:
        return [
            {
                "label": choices[ci],
                "method": "restyle",
                "args": [{"visible": [t == li * (n_heads + 1) + ci for t in range(n_traces)]}],
            }
            for ci in range(n_heads + 1)
        ]

    # Cells big enough to read a token beside them, the whole map within a notebook column.
    longest = max(n_q, n_k)
    cell = float(np.clip(520 / longest, 9, 30))
    font = int(np.clip(cell * 0.8, 8, 12))
    label_step = 1 if cell * 1.1 >= font else 2

    menu_style = {"type": "dropdown", "direction": "down", "showactive": True, "yanchor": "bottom"}
    head_menu = {
        **menu_style,
        "buttons": head_buttons(layer),
        "active": 0 if head is None else head + 1,
        "x": 0.0 if n_layers == 1 else min(0.6, 100 / (n_k * cell + 40)),  # after the layer menu
        "xanchor": "left",
        "y": 1.02,
        "name": "head",
    }
    menus = [head_menu]
    if n_layers > 1:  # choosing a layer shows its mean and gives the head menu that layer's heads
        layer_buttons = [
            {
                "label": layers[li],
                "method": "update",
                "args": [
                    {"visible": [t == li * (n_heads + 1) for t in range(n_traces)]},
                    {
                        "updatemenus[0].buttons": head_buttons(li),
                        "updatemenus[0].active": 0,
                    },
                ],
            }
            for li in range(n_layers)
        ]
        menus.append(
            {
                **menu_style,
                "buttons": layer_buttons,
                "active": layer,
                "x": 0.0,
                "xanchor": "left",
                "y": 1.02,
                "name": "layer",
            }
        )

    def ticks(cats: list[str], tokens: list[str]) -> dict:
        kept = range(0, len(cats), label_step)
        return {
            "tickmode": "array",
            "tickvals": [cats[i] for i in kept],
            "ticktext": [_token_text(tokens[i]) for i in kept],
            "tickfont": {"size": font},
            "automargin": True,
            "showgrid": False,
        }

    figure.update_layout(
        template="none",
        title={"text": title or "", "x": 0.01, "xanchor": "left", "y": 0.99, "yanchor": "top"},
        width=int(n_k * cell + 260),
        height=int(n_q * cell + 230),
        margin={"l": 60, "r": 20, "t": 100 if title else 70, "b": 60},
        xaxis={**ticks(x_cats, key_list), "title": {"text": "key"}, "tickangle": -90},
        yaxis={**ticks(y_cats, query_list), "title": {"text": "query"}, "autorange": "reversed"},
        updatemenus=menus,
        plot_bgcolor="white",
        paper_bgcolor="white",
    )
    return AttentionView(figure, w, query_list, key_list)
