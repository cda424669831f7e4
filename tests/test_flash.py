"""utils.flash: tiled attention with the online softmax equals F.scaled_dot_product_attention,
forward and backward, with and without masks, for block sizes that do not divide n."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from utils.attention import scaled_dot_product_attention
from utils.flash import flash_attention, flash_forward
from utils.measure import peak_cpu_bytes

TOL = {torch.float64: 1e-12, torch.float32: 2e-5}


def _inputs(shape_q, n_k, d_v, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    *lead, n_q, d_k = shape_q
    q = torch.randn(*lead, n_q, d_k, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(*lead, n_k, d_k, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(*lead, n_k, d_v, generator=g, dtype=dtype, requires_grad=True)
    grad = torch.randn(*lead, n_q, d_v, generator=g, dtype=dtype)
    return q, k, v, grad


def _compare(q, k, v, grad, mask, causal, block_q, block_k):
    out = flash_attention(q, k, v, mask, causal, block_q, block_k)
    allowed = mask
    if causal:
        tri = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        allowed = tri if mask is None else mask & tri
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    tol = TOL[q.dtype]
    assert (out - ref).abs().max().item() < tol
    ours = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(ref, (q, k, v), grad)
    for a, b in zip(ours, theirs, strict=True):
        assert (a - b).abs().max().item() < tol * 10


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("blocks", [(16, 10), (7, 64), (1, 40), (40, 3)])
def test_equals_sdpa_forward_and_backward(dtype, causal, padded, blocks) -> None:
    q, k, v, grad = _inputs((2, 3, 37, 8), 37, 5, dtype)
    mask = None
    if padded:  # key padding (B, 1, 1, n_k): the second sequence has 20 real keys
        mask = (torch.arange(37)[None, :] < torch.tensor([37, 20])[:, None])[:, None, None, :]
    _compare(q, k, v, grad, mask, causal, *blocks)


def test_cross_attention_lengths_and_3d_inputs() -> None:
    q, k, v, grad = _inputs((4, 13, 6), 29, 3, torch.float64, seed=1)  # (B, n, d), no heads
    _compare(q, k, v, grad, None, False, 5, 8)
    _compare(q, k, v, grad, None, True, 4, 4)  # causal, top-left aligned as in SDPA


def test_full_mask_and_row_with_no_key() -> None:
    q, k, v, grad = _inputs((1, 2, 9, 4), 11, 4, torch.float64, seed=2)
    mask = torch.rand(1, 2, 9, 11, generator=torch.Generator().manual_seed(3)) > 0.4
    mask[..., 3, :] = False  # query 3 may attend nothing: output 0, gradients 0, no NaN
    out = flash_attention(q, k, v, mask, block_q=4, block_k=4)
    ref, _ = scaled_dot_product_attention(q, k, v, mask)  # the book's convention
    assert (out - ref).abs().max().item() < 1e-12
    assert out[..., 3, :].abs().max().item() == 0
    ours = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(ref, (q, k, v), grad)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.isfinite(a).all() and (a - b).abs().max().item() < 1e-12
    assert ours[0][..., 3, :].abs().max().item() == 0


def test_gradcheck_and_logsumexp() -> None:
    q, k, v, _ = _inputs((1, 5, 3), 7, 2, torch.float64, seed=4)
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, causal=True, block_q=2, block_k=3), (q, k, v)
    )
    _, lse = flash_forward(q.detach(), k.detach(), v.detach(), block_q=2, block_k=3)
    scores = q.detach() @ k.detach().transpose(-2, -1) / 3**0.5
    assert (lse - scores.logsumexp(-1)).abs().max().item() < 1e-12


def test_training_memory_has_no_n_by_n_tensor() -> None:
    q, k, v, grad = _inputs((1, 1, 256, 8), 256, 8, torch.float32, seed=5)
    out = flash_attention(q, k, v, block_q=32, block_k=32)
    saved = [t for t in out.grad_fn.saved_tensors if t is not None]
    assert max(t.numel() for t in saved) <= 256 * 8  # q, k, v, out (n, d) and lse (n,)


def _peak_bytes(n: int, d: int, tile: int, backward: bool) -> int:
    """Peak CPU bytes of one tiled attention at length n, forward or forward+backward."""
    q, k, v, grad = _inputs((1, 1, n, d), n, d, torch.float32, seed=6)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        out = flash_attention(q, k, v, block_q=tile, block_k=tile)
        if backward:
            out.backward(grad)
    return peak_cpu_bytes(prof)


@pytest.mark.parametrize("backward", [False, True])
def test_peak_memory_is_linear_in_n_plus_a_few_tiles(backward) -> None:
    d, tile = 16, 64
    # float32 numbers kept per query row: out and lse; in the backward also dq, dk, dv, delta
    kept_per_row = 4 * d + 2 if backward else d + 1
    peaks = {n: _peak_bytes(n, d, tile, backward) for n in (256, 512)}
    # doubling n adds the bytes of the kept (n, d) tensors, and no tile: the tiles keep their size
    added = 4 * 256 * kept_per_row
    assert abs((peaks[512] - peaks[256]) / added - 1) < 0.02, peaks
    # the rest is a few tiles alive inside the loop, never an (n, n) matrix (64 tiles here)
    rest = peaks[512] - 4 * 512 * kept_per_row
    assert 1 * tile * tile * 4 < rest < 8 * tile * tile * 4, rest


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_q": 0}, "block_q must be a positive int"),
        ({"block_k": -3}, "block_k must be a positive int"),
        ({"block_q": 2.5}, "block_q must be a positive int"),
        ({"causal": 1}, "causal must be a bool"),
        ({"mask": torch.ones(2, 1, 5, 6)}, "bool"),
        ({"mask": torch.ones(3, 1, 1, 6, dtype=torch.bool)}, "does not broadcast"),
    ],
)
def test_bad_options(kwargs, message) -> None:
    q, k, v, _ = _inputs((2, 1, 5, 4), 6, 3, torch.float32)
    with pytest.raises(ValueError, match=message):
        flash_attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((2, 5, 4), (2, 6, 3), (2, 6, 3)), "query and key must have the same last dim d_k"),
        (((2, 5, 4), (2, 6, 4), (2, 7, 3)), "key and value must have the same length"),
        (((2, 5, 4), (3, 6, 4), (3, 6, 3)), "leading"),
        (((5,), (6, 4), (6, 3)), "at least 2 dims"),
    ],
)
def test_mismatched_shapes(shapes, message) -> None:
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        flash_attention(q, k, v)


def test_dtype_and_type_errors() -> None:
    q = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match="share a dtype"):
        flash_attention(q, q.double(), q)
    with pytest.raises(ValueError, match="floating-point"):
        flash_attention(q, q.long(), q)
    with pytest.raises(ValueError, match="query must be a torch.Tensor, got list"):
        flash_attention(q.tolist(), q, q)  # type: ignore[arg-type]


def test_flash_and_the_books_attention_refuse_bad_inputs_in_the_same_words() -> None:
    """One check of query, key and value (`utils.checks.check_qkv`), not two copies (#26 §3)."""
    q = torch.randn(2, 5, 4)
    bad = [
        (q, torch.randn(2, 6, 3), torch.randn(2, 6, 3)),  # d_k differs
        (q, torch.randn(2, 6, 4), torch.randn(2, 7, 3)),  # n_k differs
        (q, torch.randn(3, 6, 4), torch.randn(3, 6, 3)),  # leading dims differ
        (torch.randn(5), torch.randn(6, 4), torch.randn(6, 3)),  # 1-D query
        (q, q.double(), q),
        (q, q.long(), q),
        (q.tolist(), q, q),
    ]
    for query, key, value in bad:
        with pytest.raises(ValueError) as ours:
            scaled_dot_product_attention(query, key, value)
        with pytest.raises(ValueError, match=re.escape(str(ours.value))):
            flash_attention(query, key, value)
