"""Shared test set-up: a non-interactive matplotlib backend and a seeded, one-thread torch."""

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported anywhere: tests never open windows

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import utils  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state, and leaves no figures open."""
    utils.setup(0)
    yield
    plt.close("all")
