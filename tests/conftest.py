"""Shared test set-up: a non-interactive matplotlib backend and a seeded, one-thread torch."""

import os

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

import utils
from utils.layers import LayerNorm

matplotlib.use("Agg")  # tests never open windows (switches pyplot too)


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state, and leaves no figures open."""
    utils.setup(0)
    yield
    plt.close("all")


# --------------------------------------------------------------------------------------------
# shared helpers (import with `from conftest import ...`)
# --------------------------------------------------------------------------------------------


def padded_tokens(vocab: int, seq: int, lengths: list[int], pad: int = 0) -> torch.Tensor:
    """Random token ids `(len(lengths), seq)` in [1, vocab), right-padded with `pad` after
    `lengths[i]` tokens."""
    tokens = torch.randint(1, vocab, (len(lengths), seq))
    for i, n in enumerate(lengths):
        tokens[i, n:] = pad
    return tokens


def randomise_norms(module: torch.nn.Module) -> None:
    """Random LayerNorm gains and biases (as after training), so a norm copied into the wrong
    slot, or left uncopied, changes the output; at gain 1 and bias 0 it would not."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, LayerNorm):
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)


def needs(what: str, available: bool, install: str) -> None:
    """Skip a test without an external tool; under CI=true a missing tool fails it."""
    if available:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {what} is missing: {install}")
    pytest.skip(f"{what} is not installed ({install})")
