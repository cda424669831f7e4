"""Tests for `utils.model`: parity with nn.Transformer*, properties, counts, config errors."""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch
import torch.nn.functional as F
from conftest import padded_tokens, randomise_norms
from torch import nn

from utils.layers import LayerNorm
from utils.masks import (
    causal_mask,
    padding_mask,
    target_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)
from utils.model import (
    Decoder,
    Encoder,
    Generator,
    Transformer,
    TransformerConfig,
    count_parameters,
    make_embedding,
    parameter_breakdown,
    transformer_parameter_count,
)
from utils.parity import (
    copy_to_torch_decoder,
    copy_to_torch_decoder_layer,
    copy_to_torch_encoder,
    copy_to_torch_encoder_layer,
    copy_to_torch_transformer,
    torch_decoder,
    torch_encoder,
    torch_transformer,
)

PAD = 0
SMALL = {"d_model": 32, "n_heads": 4, "d_ff": 64, "n_layers": 2, "dropout": 0.1, "max_len": 64}


def small_config(**overrides: object) -> TransformerConfig:
    return TransformerConfig(**({"src_vocab_size": 11, "tgt_vocab_size": 13} | SMALL | overrides))


# --------------------------------------------------------------------------------------------
# parity with torch.nn (eval mode, copied weights; grad mode on, so PyTorch takes its
# reference path rather than the fused "fast path")
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_torch(norm_first: bool) -> None:
    config = small_config(norm_first=norm_first)
    ours, theirs = Encoder(config).eval(), torch_encoder(config).eval()
    randomise_norms(ours)
    copy_to_torch_encoder(ours, theirs)
    mask = padding_mask(padded_tokens(11, 7, [7, 5, 2]), PAD)
    x = torch.randn(3, 7, config.d_model)
    expected = theirs(x, src_key_padding_mask=to_torch_key_padding_mask(mask))
    torch.testing.assert_close(ours(x, mask), expected, atol=1e-5, rtol=0)
    assert (ours.norm is None) == (not norm_first)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_matches_torch(norm_first: bool) -> None:
    config = small_config(norm_first=norm_first)
    ours, theirs = Decoder(config).eval(), torch_decoder(config).eval()
    randomise_norms(ours)
    copy_to_torch_decoder(ours, theirs)
    src, tgt = padded_tokens(11, 7, [7, 5, 2]), padded_tokens(13, 6, [6, 4, 3])
    x, memory = torch.randn(3, 6, config.d_model), torch.randn(3, 7, config.d_model)
    expected = theirs(
        x,
        memory,
        tgt_mask=to_torch_attn_mask(causal_mask(6)),
        tgt_key_padding_mask=tgt == PAD,
        memory_key_padding_mask=src == PAD,
    )
    actual = ours(x, memory, target_mask(tgt, PAD), padding_mask(src, PAD))
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def _their_logits(ours: Transformer, theirs: nn.Transformer, src, tgt) -> torch.Tensor:
    """Run nn.Transformer on our embeddings and apply our generator to its output."""
    out = theirs(
        ours.src_embed(src),
        ours.tgt_embed(tgt),
        tgt_mask=to_torch_attn_mask(causal_mask(tgt.shape[1])),
        src_key_padding_mask=src == PAD,
        tgt_key_padding_mask=tgt == PAD,
        memory_key_padding_mask=src == PAD,
    )
    return ours.generator(out)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("tie_embeddings", [False, True])
def test_transformer_matches_torch(norm_first: bool, tie_embeddings: bool) -> None:
    vocab = {"tgt_vocab_size": 11} if tie_embeddings else {}
    config = small_config(norm_first=norm_first, tie_embeddings=tie_embeddings, **vocab)
    ours, theirs = Transformer(config).eval(), torch_transformer(config).eval()
    randomise_norms(ours)
    copy_to_torch_transformer(ours, theirs)
    assert (theirs.encoder.norm is None) == (not norm_first)  # removed for post-norm
    src = padded_tokens(11, 7, [7, 5, 2])
    tgt = padded_tokens(config.tgt_vocab_size, 6, [6, 4, 3])
    torch.testing.assert_close(
        ours(src, tgt), _their_logits(ours, theirs, src, tgt), atol=1e-5, rtol=0
    )


def test_nn_transformer_post_norm_has_an_extra_final_norm() -> None:
    """Pitfall: nn.Transformer(norm_first=False) ends both stacks with one more LayerNorm.

    At initialisation it is almost invisible (it re-normalises an output whose last
    LayerNorm has gain 1 and bias 0); with learned gains and biases it is not.
    """
    config = small_config()
    ours, theirs = Transformer(config).eval(), torch_transformer(config).eval()
    with torch.no_grad():  # LayerNorms as after training
        for module in ours.modules():
            if isinstance(module, LayerNorm):
                module.weight.uniform_(0.5, 2.0)
                module.bias.normal_(0.0, 0.5)
    # Copy every layer but leave nn.Transformer's final norms in place: the outputs differ.
    for mine, their in zip(ours.encoder.layers, theirs.encoder.layers, strict=True):
        copy_to_torch_encoder_layer(mine, their)
    for mine, their in zip(ours.decoder.layers, theirs.decoder.layers, strict=True):
        copy_to_torch_decoder_layer(mine, their)
    src, tgt = padded_tokens(11, 7, [7, 5, 2]), padded_tokens(13, 6, [6, 4, 3])
    assert not torch.allclose(ours(src, tgt), _their_logits(ours, theirs, src, tgt), atol=0.1)
    # Copying stacks whose final norms differ is refused...
    with pytest.raises(ValueError, match="final norm differs"):
        copy_to_torch_encoder(ours.encoder, theirs.encoder)
    # ...and copy_to_torch_transformer removes theirs, after which the two agree.
    copy_to_torch_transformer(ours, theirs)
    torch.testing.assert_close(
        ours(src, tgt), _their_logits(ours, theirs, src, tgt), atol=1e-5, rtol=0
    )


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_does_not_peek(norm_first: bool) -> None:
    config = small_config(norm_first=norm_first)
    decoder = Decoder(config).eval()
    x, memory = torch.randn(2, 6, config.d_model), torch.randn(2, 5, config.d_model)
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, 3, config.d_model)
    before, after = decoder(x, memory, causal_mask(6)), decoder(changed, memory, causal_mask(6))
    torch.testing.assert_close(before[:, :3], after[:, :3], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, 3:], after[:, 3:])


def test_transformer_does_not_peek_at_future_targetpadded_tokens() -> None:
    model = Transformer(small_config()).eval()
    src = padded_tokens(11, 7, [7, 4])
    tgt = padded_tokens(13, 6, [6, 6])
    changed = tgt.clone()
    changed[:, 3:] = (tgt[:, 3:] % 12) + 1  # different real tokens at positions 3..5
    before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(before[:, :3], after[:, :3], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, 3:], after[:, 3:])


def test_padding_does_not_change_the_real_positions() -> None:
    model = Transformer(small_config()).eval()
    src, tgt = padded_tokens(11, 5, [5]), padded_tokens(13, 4, [4])
    padded_src = F.pad(src, (0, 3), value=PAD)
    padded_tgt = F.pad(tgt, (0, 2), value=PAD)
    expected = model(src, tgt)
    torch.testing.assert_close(model(padded_src, padded_tgt)[:, :4], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True},
        {"tie_embeddings": True, "tgt_vocab_size": 11},
        {"positional": "learned", "d_k": 5, "d_v": 3},
    ],
    ids=["post-norm", "pre-norm", "tied", "learned-custom-heads"],
)
def test_gradients_reach_every_parameter(overrides: dict) -> None:
    model = Transformer(small_config(**overrides)).train()
    src, tgt = padded_tokens(11, 7, [7, 5]), padded_tokens(model.config.tgt_vocab_size, 6, [6, 4])
    logits = model(src, tgt)
    labels = torch.randint(1, model.config.tgt_vocab_size, tgt.shape)
    F.cross_entropy(logits.transpose(1, 2), labels).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert p.grad.abs().sum() > 0, f"{name} got an all-zero gradient"


def test_state_dict_round_trip_gives_identical_outputs() -> None:
    config = small_config(tie_embeddings=True, tgt_vocab_size=11, positional="learned")
    model = Transformer(config).eval()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    clone = Transformer(config).eval()
    src, tgt = padded_tokens(11, 7, [7, 5]), padded_tokens(11, 6, [6, 4])
    assert not torch.equal(clone(src, tgt), model(src, tgt))  # a fresh model differs
    clone.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(clone(src, tgt), model(src, tgt))
    assert clone.generator.proj.weight is clone.src_embed.token.weight  # still tied


def test_dropout_active_in_train_and_inactive_in_eval() -> None:
    model = Transformer(small_config(dropout=0.1))
    src, tgt = padded_tokens(11, 7, [7, 5]), padded_tokens(13, 6, [6, 4])
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))
    model.eval()
    assert torch.equal(model(src, tgt), model(src, tgt))


def test_three_way_tying_shares_one_parameter() -> None:
    model = Transformer(small_config(tie_embeddings=True, tgt_vocab_size=11))
    shared = model.src_embed.token.weight
    assert model.tgt_embed.token.weight is shared
    assert model.generator.proj.weight is shared
    untied = Transformer(small_config(tgt_vocab_size=11))
    assert untied.generator.proj.weight is not untied.tgt_embed.token.weight
    # tying saves the target embedding and the generator matrix, 11 x 32 each
    assert count_parameters(untied) - count_parameters(model) == 2 * 11 * 32


def test_initialisation() -> None:
    config = small_config(d_model=64, n_heads=4)
    model = Transformer(config)
    # embeddings N(0, 1/d_model), pad row zero
    table = model.src_embed.token.weight
    assert abs(table[1:].std().item() * 64**0.5 - 1.0) < 0.15
    assert torch.equal(table[PAD], torch.zeros(64))
    # every other weight matrix Xavier-uniform: |w| <= sqrt(6 / (fan_in + fan_out))
    w = model.encoder.layers[0].ffn.linear1.weight
    bound = (6 / (w.shape[0] + w.shape[1])) ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    generator = model.generator.proj.weight
    assert generator.abs().max() <= (6 / sum(generator.shape)) ** 0.5
    norm = model.decoder.layers[1].sublayers[2].norm
    assert torch.equal(norm.weight, torch.ones(64)) and torch.equal(norm.bias, torch.zeros(64))


def test_generator_returns_raw_logits() -> None:
    """The generator is one affine map; no softmax (the loss applies log_softmax itself)."""
    torch.manual_seed(0)
    generator = Generator(8, 5)
    x = 3.0 * torch.randn(2, 4, 8)
    logits = generator(x)
    torch.testing.assert_close(logits, x @ generator.proj.weight.T + generator.proj.bias)
    # Probabilities would be positive and sum to 1 along the vocabulary; logits do neither.
    assert (logits < 0).any()
    assert (logits.sum(-1) - 1.0).abs().max() > 0.1


def test_encode_decode_are_the_forward_pass() -> None:
    model = Transformer(small_config()).eval()
    src, tgt = padded_tokens(11, 7, [7, 5]), padded_tokens(13, 6, [6, 4])
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src)
    assert memory.shape == (2, 7, 32)
    hidden = model.decode(tgt, memory, memory_mask=src_mask)
    assert hidden.shape == (2, 6, 32)
    logits = model(src, tgt)
    assert logits.shape == (2, 6, 13)
    torch.testing.assert_close(model.generator(hidden), logits)
    assert isinstance(model.generator, Generator)


# --------------------------------------------------------------------------------------------
# parameter counts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"d_k": 5, "d_v": 7},
        {"tie_embeddings": True, "tgt_vocab_size": 11},
        {"positional": "learned"},
        {"norm_first": True, "n_layers": 3},
        {"n_heads": 3, "d_model": 30, "d_k": 4, "d_v": 6, "positional": "learned"},
    ],
    ids=["default", "dk!=d/h", "tied", "learned", "pre-norm", "odd-sizes"],
)
def test_parameter_formula_equals_actual_count(overrides: dict) -> None:
    config = small_config(**overrides)
    model = Transformer(config)
    assert transformer_parameter_count(config) == count_parameters(model)
    parts = parameter_breakdown(config)
    assert parts["encoder"] == count_parameters(model.encoder)
    assert parts["decoder"] == count_parameters(model.decoder)


def test_base_and_big_presets() -> None:
    base, big = TransformerConfig.base(), TransformerConfig.big()
    assert (base.d_model, base.n_heads, base.d_ff, base.n_layers, base.dropout) == (
        512, 8, 2048, 6, 0.1,
    )  # fmt: skip
    assert (big.d_model, big.n_heads, big.d_ff, big.n_layers, big.dropout) == (
        1024, 16, 4096, 6, 0.3,
    )  # fmt: skip
    assert base.tie_embeddings and base.key_dim == base.value_dim == 64
    assert big.key_dim == 64
    # The paper's Table 3 reports 65M (base) and 213M (big); with a shared 37000-token
    # vocabulary, biases and a generator bias we count 63.1M and 214.3M.
    assert transformer_parameter_count(base) == 63_119_496
    assert transformer_parameter_count(big) == 214_282_376
    assert count_parameters(Transformer(base)) == 63_119_496
    assert not TransformerConfig.base(37000, 30000).tie_embeddings
    assert TransformerConfig.base(n_layers=2).n_layers == 2


# --------------------------------------------------------------------------------------------
# configuration errors and bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"d_model": 30}, "n_heads=4 must divide d_model=30"),
        (
            {"tie_embeddings": True},
            "tie_embeddings=True needs one vocabulary, but src_vocab_size=11 != tgt_vocab_size=13",
        ),
        ({"d_model": 0}, "d_model must be a positive int, got 0"),
        ({"n_heads": -1}, "n_heads must be a positive int, got -1"),
        ({"d_ff": 0}, "d_ff must be a positive int"),
        ({"n_layers": 0}, "n_layers must be a positive int"),
        ({"src_vocab_size": -5}, "src_vocab_size must be a positive int"),
        ({"d_k": 0}, "d_k must be a positive int"),
        ({"max_len": 0}, "max_len must be a positive int"),
        ({"dropout": 1.0}, r"dropout must be a probability in \[0, 1\)"),
        ({"dropout": -0.1}, r"dropout must be a probability in \[0, 1\)"),
        ({"positional": "rotary"}, "positional must be one of"),
        ({"d_model": 33, "n_heads": 3}, "needs an even d_model, got 33"),
        ({"pad_id": 11}, r"pad_id must be an int in \[0, 11\)"),
        ({"norm_first": 1}, "norm_first must be a bool"),
    ],
)
def test_config_errors(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        small_config(**overrides)


def test_config_is_frozen_and_replace_validates() -> None:
    config = small_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 64  # type: ignore[misc]
    assert config.replace(d_model=64).d_model == 64
    with pytest.raises(ValueError, match="n_heads=4 must divide d_model=30"):
        config.replace(d_model=30)


def test_bad_input() -> None:
    model = Transformer(small_config())
    src, tgt = padded_tokens(11, 7, [7, 5]), padded_tokens(13, 6, [6, 4])
    with pytest.raises(ValueError, match=r"src must be 2-D \(batch, seq\) token ids"):
        model(src[0], tgt)
    with pytest.raises(ValueError, match=r"tgt: token ids must be in \[0, 13\)"):
        model.decode(tgt + 13, model.encode(src))
    with pytest.raises(ValueError, match="src: sequence length 65 exceeds max_len 64"):
        model.encode(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match=r"memory batch size must equal x's \(1\)"):
        model(src, tgt[:1])
    with pytest.raises(ValueError, match="memory batch size must equal"):
        model.decode(tgt, model.encode(src[:1]))
    with pytest.raises(ValueError, match="token ids must be in"):
        model(src, tgt + 13)
    with pytest.raises(ValueError, match="config must be a TransformerConfig"):
        Transformer({"d_model": 32})  # type: ignore[arg-type]


@pytest.mark.parametrize("fused", [False, True])
def test_the_stacks_check_inputs_and_masks_at_the_door(fused: bool) -> None:
    # the layers and attention blocks inside trust these checks (tests/test_check_count.py)
    config = small_config(fused=fused)
    model = Transformer(config)
    enc, dec = model.encoder, model.decoder
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    with pytest.raises(ValueError, match="last dim d_model=32"):
        enc(torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match="must have 3 dims"):
        enc(torch.randn(5, 32))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 6\) does not broadcast"):
        enc(x, torch.ones(2, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask must be a bool tensor"):
        enc(x, torch.ones(5, 5))
    with pytest.raises(ValueError, match="memory batch size must equal"):
        dec(x, torch.randn(3, 7, 32))
    with pytest.raises(ValueError, match="memory must have last dim"):
        dec(x, torch.randn(2, 7, 16))
    with pytest.raises(ValueError, match=r"attention scores of shape \(2, 4, 5, 7\)"):
        dec(x, memory, memory_mask=torch.ones(2, 1, 1, 5, dtype=torch.bool))  # keyed by target
    with pytest.raises(ValueError, match=r"attention scores of shape \(2, 4, 5, 5\)"):
        dec(x, memory, tgt_mask=causal_mask(4))


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_make_embedding_is_the_transformers_input_block(positional: str) -> None:
    config = small_config(positional=positional)
    model = Transformer(config).eval()
    embed = make_embedding(config, config.src_vocab_size).eval()
    embed.load_state_dict(model.src_embed.state_dict())  # strict: the same modules and names
    src = padded_tokens(11, 7, [7, 5])
    torch.testing.assert_close(embed(src), model.src_embed(src))
    assert embed.position.dropout.p == config.dropout
    assert embed.token.padding_idx == config.pad_id
    with pytest.raises(ValueError, match="vocab_size must be a positive int"):
        make_embedding(config, 0)
