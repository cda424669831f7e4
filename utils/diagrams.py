"""The encoder-decoder architecture, drawn with matplotlib patches and arrows.

The book draws its own figure rather than copying the paper's: every box is labelled with
the notebook that builds it, so the picture doubles as a map of the book.
"""

from __future__ import annotations

from typing import Any, cast

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["draw_transformer"]

# One colour per kind of block, used consistently through the book's diagrams.
COLORS = {
    "attention": "#fbd38d",
    "ffn": "#9ae6b4",
    "norm": "#fefcbf",
    "embed": "#fbb6ce",
    "pe": "#e2e8f0",
    "output": "#bee3f8",
    "stack": "#f7fafc",
}


def _box(
    ax: Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    text: str,
    color: str,
    fontsize: float = 8.5,
    **kw: Any,
) -> tuple[float, float, float, float]:
    """Draw a rounded box centred at (x, y); return its (left, bottom, right, top)."""
    patch = FancyBboxPatch(
        (x - w / 2, y - h / 2),
        w,
        h,
        boxstyle="round,pad=0.02,rounding_size=0.08",
        facecolor=color,
        edgecolor="#2d3748",
        linewidth=1.0,
        **kw,
    )
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, zorder=3)
    return (x - w / 2, y - h / 2, x + w / 2, y + h / 2)


def _arrow(
    ax: Axes, start: tuple[float, float], end: tuple[float, float], connectionstyle: str = "arc3"
) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=10,
            linewidth=1.0,
            color="#2d3748",
            connectionstyle=connectionstyle,
            shrinkA=0,
            shrinkB=0,
            zorder=2,
        )
    )


def _residual(
    ax: Axes, cx: float, y_from: float, norm_box: tuple[float, float, float, float], side: int
) -> None:
    """A residual connection as in the paper's figure: it branches off the main path at
    `(cx, y_from)` (a dot), runs beside the sublayer and enters the "add & norm" box."""
    x_side = cx + side * 1.72
    y_to = (norm_box[1] + norm_box[3]) / 2
    ax.plot([cx], [y_from], "o", color="#2d3748", ms=3, zorder=3)
    ax.plot([cx, x_side, x_side], [y_from, y_from, y_to], color="#2d3748", lw=1.0, zorder=2)
    _arrow(ax, (x_side, y_to), (norm_box[2] if side > 0 else norm_box[0], y_to))


def draw_transformer(ax: Axes | None = None, notebooks: bool = True) -> tuple[Figure, Axes]:
    """Draw the encoder-decoder Transformer of Vaswani et al. (2017), Figure 1's content.

    Args:
        ax: draw into this axes; a new figure when None.
        notebooks: tag each block with the notebook that builds it (e.g. "nb 05").

    Returns:
        `(figure, axes)`.
    """
    if ax is None:
        fig, ax = plt.subplots(figsize=(8.0, 8.6))
    else:
        fig = cast(Figure, ax.figure)  # a SubFigure if ax lives in one: drawn on the same way
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 11.4)
    ax.set_aspect("equal")
    ax.axis("off")

    def tag(text: str, nb: str) -> str:
        return f"{text}\n(nb {nb})" if notebooks else text

    w, h = 3.0, 0.62
    ex, dx = 2.6, 7.2  # centres of the encoder and decoder columns

    # Inputs, embeddings and positional encodings.
    ax.text(ex, 0.35, "inputs (source tokens)", ha="center", fontsize=9)
    ax.text(dx, 0.35, "outputs, shifted right (target tokens)", ha="center", fontsize=9)
    e_emb = _box(
        ax, ex, 1.25, w, h, tag("input embedding × √d_model", "01"), COLORS["embed"], fontsize=7.5
    )
    d_emb = _box(
        ax, dx, 1.25, w, h, tag("output embedding × √d_model", "01"), COLORS["embed"], fontsize=7.5
    )
    for cx, emb in ((ex, e_emb), (dx, d_emb)):
        _arrow(ax, (cx, 0.6), (cx, emb[1]))
        ax.text(cx, 2.12, "⊕", ha="center", va="center", fontsize=16)
        ax.text(
            cx - w / 2 - 0.1,
            1.98,
            tag("positional\nencoding", "02"),
            ha="right",
            va="center",
            fontsize=7.5,
        )
        _arrow(ax, (cx - w / 2 - 0.05, 2.12), (cx - 0.17, 2.12))
        _arrow(ax, (cx, emb[3]), (cx, 1.98))

    # Encoder stack.
    enc = FancyBboxPatch(
        (ex - 1.95, 2.4),
        3.9,
        3.9,
        boxstyle="round,pad=0.05",
        facecolor=COLORS["stack"],
        edgecolor="#4a5568",
        linestyle="--",
    )
    ax.add_patch(enc)
    ax.text(ex - 2.15, 4.4, "N ×", ha="right", va="center", fontsize=11)
    ax.text(ex - 1.9, 6.42, tag("encoder layer", "07"), ha="left", va="bottom", fontsize=8)
    e_att = _box(ax, ex, 3.15, w, h, tag("multi-head self-attention", "03–05"), COLORS["attention"])
    e_n1 = _box(ax, ex, 3.95, w, 0.38, tag("add & norm", "06"), COLORS["norm"], fontsize=7.5)
    e_ffn = _box(ax, ex, 4.85, w, h, tag("feed-forward", "06"), COLORS["ffn"])
    e_n2 = _box(ax, ex, 5.65, w, 0.38, tag("add & norm", "06"), COLORS["norm"], fontsize=7.5)
    _arrow(ax, (ex, 2.26), (ex, e_att[1]))
    _arrow(ax, (ex, e_att[3]), (ex, e_n1[1]))
    _arrow(ax, (ex, e_n1[3]), (ex, e_ffn[1]))
    _arrow(ax, (ex, e_ffn[3]), (ex, e_n2[1]))
    # Residual connections skip each sublayer.
    _residual(ax, ex, 2.6, e_n1, side=-1)
    _residual(ax, ex, 4.34, e_n2, side=-1)

    # Decoder stack.
    dec = FancyBboxPatch(
        (dx - 1.95, 2.4),
        3.9,
        5.6,
        boxstyle="round,pad=0.05",
        facecolor=COLORS["stack"],
        edgecolor="#4a5568",
        linestyle="--",
    )
    ax.add_patch(dec)
    ax.text(dx + 2.15, 5.3, "× N", ha="left", va="center", fontsize=11)
    ax.text(dx + 1.9, 8.12, tag("decoder layer", "08"), ha="right", va="bottom", fontsize=8)
    d_att = _box(
        ax,
        dx,
        3.15,
        w,
        0.8,
        tag("masked multi-head\nself-attention", "04–05"),
        COLORS["attention"],
        fontsize=7.5,
    )
    d_n1 = _box(ax, dx, 3.95, w, 0.38, tag("add & norm", "06"), COLORS["norm"], fontsize=7.5)
    d_x = _box(ax, dx, 4.85, w, h, tag("multi-head cross-attention", "08"), COLORS["attention"])
    d_n2 = _box(ax, dx, 5.65, w, 0.38, tag("add & norm", "06"), COLORS["norm"], fontsize=7.5)
    d_ffn = _box(ax, dx, 6.55, w, h, tag("feed-forward", "06"), COLORS["ffn"])
    d_n3 = _box(ax, dx, 7.35, w, 0.38, tag("add & norm", "06"), COLORS["norm"], fontsize=7.5)
    _arrow(ax, (dx, 2.26), (dx, d_att[1]))
    for lower, upper in ((d_att, d_n1), (d_n1, d_x), (d_x, d_n2), (d_n2, d_ffn), (d_ffn, d_n3)):
        _arrow(ax, (dx, lower[3]), (dx, upper[1]))
    _residual(ax, dx, 2.5, d_n1, side=1)
    _residual(ax, dx, 4.34, d_n2, side=1)
    _residual(ax, dx, 6.04, d_n3, side=1)

    # The encoder's output (memory) feeds every decoder layer's cross-attention as K and V.
    # Routed up, across the gap between the stacks, and into the cross-attention block.
    gap_x = (ex + 1.95 + dx - 1.95) / 2
    ax.plot([ex, ex, gap_x, gap_x], [e_n2[3], 7.0, 7.0, 4.85], color="#2d3748", lw=1.0)
    _arrow(ax, (gap_x, 4.85), (d_x[0], 4.85))
    ax.text(gap_x - 0.35, 7.12, "memory\n(keys & values)", ha="center", va="bottom", fontsize=7.5)

    # Output head.
    lin = _box(ax, dx, 8.95, w, h, tag("linear (generator)", "09"), COLORS["output"])
    soft = _box(ax, dx, 9.85, w, 0.45, "softmax", COLORS["output"])
    _arrow(ax, (dx, d_n3[3]), (dx, lin[1]))
    _arrow(ax, (dx, lin[3]), (dx, soft[1]))
    _arrow(ax, (dx, soft[3]), (dx, 10.75))
    ax.text(dx, 10.95, "output probabilities", ha="center", fontsize=9)
    ax.text(
        ex,
        9.7,
        "The Transformer\n(Vaswani et al., 2017)",
        ha="center",
        va="center",
        fontsize=12,
        fontweight="bold",
    )
    ax.text(ex, 8.9, "trained in nb 10, decoded in nb 11", ha="center", fontsize=8, color="#4a5568")
    return fig, ax
