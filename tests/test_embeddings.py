"""Tests for utils.embeddings: token embeddings, tying, positional encodings."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from utils.embeddings import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_encoding,
    tie_weights,
)

TEXTS = ["The cat sat on the mat.", "The dog sat, too!", "A cat and a dog."]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- token embedding ----------------------------------------------------------------------------


def test_lookup_is_one_hot_times_matrix_and_scaled():
    emb = TokenEmbedding(10, 8)
    tokens = torch.tensor([[1, 5, 9], [0, 0, 3]])
    expected = F.one_hot(tokens, 10).float() @ emb.weight
    torch.testing.assert_close(emb(tokens), expected * math.sqrt(8))
    emb.scale = False
    torch.testing.assert_close(emb(tokens), expected)


def test_init_gives_unit_variance_after_scaling():
    emb = TokenEmbedding(4000, 64)
    assert abs(emb.weight.std().item() - 64**-0.5) < 0.01 * 64**-0.5 * 10
    scaled = emb(torch.arange(4000)[None])
    assert abs(scaled.var().item() - 1.0) < 0.05


def test_padding_idx_row_is_zero_and_gets_no_gradient():
    emb = TokenEmbedding(10, 8, padding_idx=0)
    assert (emb.weight[0] == 0).all()
    emb(torch.tensor([[0, 2, 0]])).sum().backward()
    assert (emb.weight.grad[0] == 0).all() and (emb.weight.grad[2] != 0).all()


def test_tie_weights_shares_storage_and_one_step_moves_both():
    emb = TokenEmbedding(10, 8)
    generator = nn.Linear(8, 10, bias=False)
    tie_weights(generator, emb)
    assert generator.weight is emb.weight
    assert generator.weight.data_ptr() == emb.weight.data_ptr()
    model = nn.ModuleDict({"emb": emb, "generator": generator})
    assert len(list(model.parameters())) == 1  # one matrix, not two
    before = emb.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.tensor([[1, 2, 3]])
    F.cross_entropy(generator(emb(tokens)).flatten(0, 1), tokens.flatten()).backward()
    opt.step()
    assert not torch.equal(emb.weight, before)
    assert torch.equal(generator.weight, emb.weight)
    with pytest.raises(ValueError, match=r"different shapes: target \(10, 7\), source \(10, 8\)"):
        tie_weights(nn.Linear(7, 10), emb)


# --- positional encodings ----------------------------------------------------------------------


def test_sinusoidal_formula_at_hand_computed_entries():
    pe = sinusoidal_encoding(3, 4)  # frequencies 1 and 1/100
    assert pe.shape == (3, 4) and pe.dtype == torch.float32
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    expected_1 = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]
    torch.testing.assert_close(pe[1], torch.tensor(expected_1))
    expected_2 = [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]
    torch.testing.assert_close(pe[2], torch.tensor(expected_2))
    torch.testing.assert_close(  # PE(p, 2i) = sin(p / 10000^(2i/d)) with p=7, i=3, d=16
        sinusoidal_encoding(8, 16)[7, 6], torch.tensor(math.sin(7 / 10000 ** (6 / 16)))
    )


def test_shift_by_k_is_a_fixed_block_rotation():
    d_model, k = 16, 7
    pe = sinusoidal_encoding(100, d_model).double()
    omega = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i, w in enumerate(omega):
        c, s = math.cos(k * w), math.sin(k * w)
        # (sin(a + b), cos(a + b)) = [[cos b, sin b], [-sin b, cos b]] (sin a, cos a)
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    torch.testing.assert_close(pe[k:], pe[:-k] @ rotation.T, atol=1e-5, rtol=0)


def test_dot_product_depends_only_on_offset():
    pe = sinusoidal_encoding(50, 16)
    torch.testing.assert_close(pe[3] @ pe[10], pe[20] @ pe[27])


def test_sinusoidal_module_adds_and_applies_dropout_in_training():
    module = SinusoidalPositionalEncoding(8, max_len=20, dropout=0.5)
    assert "pe" not in module.state_dict()  # recomputed, not saved
    x = torch.randn(2, 5, 8)
    module.eval()
    torch.testing.assert_close(module(x), x + sinusoidal_encoding(20, 8)[:5])
    module.train()
    out = module(x)
    assert ((out == 0) | torch.isclose(out, 2 * (x + module.pe[:5]))).all()
    assert module(x.double()).dtype == torch.float64


def test_learned_positional_encoding():
    module = LearnedPositionalEncoding(8, max_len=10)
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(module(x), x + module.embedding.weight[:4])
    module(x).sum().backward()
    assert (module.embedding.weight.grad[4:] == 0).all()  # positions not used get no gradient


def test_learned_positions_start_at_the_sinusoids_scale_in_the_module_and_the_model():
    from utils.model import Transformer, TransformerConfig

    d_model, max_len = 512, 400
    sinusoid_ms = sinusoidal_encoding(max_len, d_model).pow(2).mean().item()  # 1/2 exactly
    learned = LearnedPositionalEncoding(d_model, max_len=max_len)
    assert abs(learned.embedding.weight.pow(2).mean().item() - sinusoid_ms) < 0.05 * sinusoid_ms
    # Next to unit-variance tokens, positions carry about a third of the input's energy.
    tokens = TokenEmbedding(1000, d_model)(torch.arange(1000)[None])[0]
    share = learned.embedding.weight.pow(2).sum(1).mean() / (
        learned.embedding.weight.pow(2).sum(1).mean() + tokens.pow(2).sum(1).mean()
    )
    assert 0.3 < share.item() < 0.37
    # The model's (re-)initialisation keeps that scale.
    config = TransformerConfig(
        src_vocab_size=11,
        tgt_vocab_size=11,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_layers=1,
        max_len=2000,
        positional="learned",
    )
    model = Transformer(config)
    for embed in (model.src_embed, model.tgt_embed):
        ms = embed.position.embedding.weight.pow(2).mean().item()
        assert abs(ms - 0.5) < 0.05, ms


def test_learned_positional_encoding_applies_dropout_in_training():
    module = LearnedPositionalEncoding(8, max_len=20, dropout=0.5)
    x = torch.randn(2, 5, 8)
    summed = x + module.embedding.weight[:5]
    module.eval()
    torch.testing.assert_close(module(x), summed)
    module.train()
    out = module(x)
    dropped = out == 0
    assert 0 < dropped.float().mean() < 1  # some entries dropped, not all
    torch.testing.assert_close(out[~dropped], 2 * summed[~dropped])  # the rest scaled by 1/(1-p)


@pytest.mark.parametrize("encoding", [SinusoidalPositionalEncoding, LearnedPositionalEncoding])
def test_a_sequence_of_exactly_max_len_is_accepted(encoding):
    module = encoding(8, max_len=6)
    x = torch.randn(2, 6, 8)
    table = module.pe if encoding is SinusoidalPositionalEncoding else module.embedding.weight
    torch.testing.assert_close(module(x), x + table)  # every row of the table used once
    with pytest.raises(ValueError, match="sequence length 7 exceeds max_len 6"):
        module(torch.randn(2, 7, 8))


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: TokenEmbedding(10, 8)(torch.tensor([[0, 12]])),
            r"token ids must be in \[0, 10\) for vocab_size 10, got ids in \[0, 12\]",
        ),
        (lambda: TokenEmbedding(10, 8)(torch.tensor([[-1, 3]])), r"got ids in \[-1, 3\]"),
        # the boundary: id == vocab_size is one past the last row (an off-by-one `>` would pass)
        (lambda: TokenEmbedding(10, 8)(torch.tensor([[0, 10]])), r"got ids in \[0, 10\]"),
        (lambda: TokenEmbedding(10, 8)(torch.zeros(1, 3)), "integer tensor"),
        (lambda: sinusoidal_encoding(10, 7), "d_model must be even"),
        (lambda: sinusoidal_encoding(0, 8), "max_len must be a positive int"),
        (
            lambda: SinusoidalPositionalEncoding(8, max_len=4)(torch.randn(1, 5, 8)),
            "sequence length 5 exceeds max_len 4",
        ),
        (
            lambda: LearnedPositionalEncoding(8, max_len=4)(torch.randn(1, 5, 8)),
            "sequence length 5 exceeds max_len 4",
        ),
        (lambda: SinusoidalPositionalEncoding(8)(torch.randn(1, 5, 6)), "d_model=8"),
        # the learned table checks its sizes with the shared check_positive_int
        (lambda: LearnedPositionalEncoding(0), "d_model must be a positive int, got 0"),
        (lambda: LearnedPositionalEncoding(True), "d_model must be a positive int, got True"),
        (lambda: LearnedPositionalEncoding(8.0), r"d_model must be a positive int, got 8\.0"),
        (lambda: LearnedPositionalEncoding(8, max_len=0), "max_len must be a positive int"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
