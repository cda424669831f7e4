"""Heatmaps with one look for every picture in the book.

Every function accepts a torch tensor or a NumPy array, validates its rank and labels, and
returns the matplotlib figure and axes so a notebook can adjust them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

__all__ = [
    "ATTENTION_CMAP",
    "plot_attention",
    "plot_mask",
    "plot_positional_encoding",
    "plot_attention_grid",
    "plot_history",
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
