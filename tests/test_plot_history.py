"""`plot_history`: the loss (log scale) and the learning rate against the step, one look."""

import numpy as np
import pytest

from utils.plotting import plot_history
from utils.training import History


def _history(scale: float = 1.0) -> History:
    steps = [10, 20, 30, 40]
    return History(
        step=steps,
        loss=[scale * 2.0, scale * 1.0, scale * 0.5, scale * 0.25],
        lr=[1e-4, 2e-4, 1.5e-4, 1e-4],
        tokens_per_s=[1.0] * 4,
        elapsed_s=[1.0] * 4,
    )


def test_history_is_drawn_as_loss_and_lr_against_step():
    history = _history()
    fig, axes = plot_history(history, title="run")
    loss_ax, lr_ax = axes
    (loss_line,) = loss_ax.get_lines()
    (lr_line,) = lr_ax.get_lines()
    np.testing.assert_array_equal(loss_line.get_xdata(), history.step)
    np.testing.assert_array_equal(loss_line.get_ydata(), history.loss)
    np.testing.assert_array_equal(lr_line.get_ydata(), history.lr)
    assert loss_ax.get_yscale() == "log" and lr_ax.get_yscale() == "linear"
    assert loss_ax.get_xlabel() == lr_ax.get_xlabel() == "step"
    assert fig.get_suptitle() == "run"
    # Its to_dict() draws the same.
    _, axes2 = plot_history(history.to_dict())
    np.testing.assert_array_equal(axes2[0].get_lines()[0].get_ydata(), history.loss)


def test_several_runs_share_the_axes_with_a_legend():
    import matplotlib.pyplot as plt

    fig, given = plt.subplots(1, 2)
    fig2, axes = plot_history({"pre-norm": _history(), "post-norm": _history(2.0)}, ax=given)
    assert fig2 is fig and list(axes) == list(given)
    assert len(axes[0].get_lines()) == len(axes[1].get_lines()) == 2
    legend = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert legend == ["pre-norm", "post-norm"]


def test_plot_history_rejects_bad_input():
    with pytest.raises(ValueError, match=r"history must have step, loss and lr .* no 'lr'"):
        plot_history({"step": [1], "loss": [1.0]})
    with pytest.raises(ValueError, match=r"step, loss and lr must have one length, got 2, 1, 1"):
        plot_history({"step": [1, 2], "loss": [1.0], "lr": [1.0]})
    with pytest.raises(ValueError, match=r"history is empty \(nothing was logged\)"):
        plot_history(History())
    with pytest.raises(ValueError, match=r"history 'b' must have step, loss and lr"):
        plot_history({"a": _history(), "b": object()})
    with pytest.raises(ValueError, match=r"ax must be two matplotlib Axes"):
        import matplotlib.pyplot as plt

        plot_history(_history(), ax=plt.subplots()[1])
