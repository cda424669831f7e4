"""The decoder-only model of notebook 13: same blocks, same cache."""

from __future__ import annotations

import pytest
import torch

from utils.gpt import GPT, GPTConfig, LMScorer, generate
from utils.layers import EncoderLayer
from utils.model import count_parameters


def tiny_gpt(**overrides) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=11, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=12)
    return GPT(config.replace(**overrides)).eval()


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_cached_forward_equals_full_forward(fused: bool, positional: str) -> None:
    model = tiny_gpt(fused=fused, positional=positional)
    tokens = torch.randint(0, 11, (3, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = model.init_cache()
        steps = [model(tokens[:, :4], cache=cache)]
        steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_no_future_leakage() -> None:
    model = tiny_gpt()
    a = torch.tensor([[1, 2, 3, 4, 5]])
    b = torch.tensor([[1, 2, 3, 9, 9]])
    with torch.no_grad():
        torch.testing.assert_close(model(a)[:, :3], model(b)[:, :3])


def test_generation_with_and_without_cache_is_identical_beyond_the_context() -> None:
    model = tiny_gpt()
    prompt = torch.tensor([[1, 2, 3]])
    runs = [
        generate(
            model,
            prompt,
            30,
            temperature=0.8,
            top_k=5,
            use_cache=use_cache,
            rng=torch.Generator().manual_seed(0),
        )
        for use_cache in (True, False)
    ]
    assert runs[0].shape == (1, 33)  # longer than the context of 12: the window slides
    assert torch.equal(runs[0], runs[1])
    greedy = [generate(model, prompt, 30, greedy=True, use_cache=c) for c in (True, False)]
    assert torch.equal(greedy[0], greedy[1])


def test_window_never_exceeds_the_context() -> None:
    scorer = LMScorer(tiny_gpt())
    for length in range(1, 60):
        start = scorer.window_start(length)
        assert 0 < length - start <= 12


def test_the_blocks_are_the_books_layers_and_embeddings_are_tied() -> None:
    model = tiny_gpt()
    assert all(type(layer) is EncoderLayer for layer in model.layers)
    assert model.generator.proj.weight is model.embed.token.weight
    untied = tiny_gpt(tie_embeddings=False)
    assert count_parameters(untied) - count_parameters(model) == 11 * 32


def test_bad_input() -> None:
    model = tiny_gpt()
    with pytest.raises(ValueError, match="longer than the context"):
        generate(model, torch.ones(1, 13, dtype=torch.long), 5)
    with pytest.raises(ValueError, match=r"prompt ids must be in \[0, 11\)"):
        generate(model, torch.tensor([[11]]), 5)
    with pytest.raises(ValueError, match="sequence length 13 exceeds max_len 12"):
        model(torch.ones(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        generate(model, torch.ones(1, 2, dtype=torch.long), 5, temperature=-1.0)
    with pytest.raises(ValueError, match="n_heads=3 must divide d_model=32"):
        GPTConfig(vocab_size=5, d_model=32, n_heads=3)
    # the config, not the model, refuses what the model could not build
    with pytest.raises(ValueError, match="sinusoidal positional encoding needs an even d_model"):
        GPTConfig(vocab_size=5, d_model=9, n_heads=3, positional="sinusoidal")
    with pytest.raises(ValueError, match="fused must be a bool, got 1"):
        GPTConfig(vocab_size=5, d_model=8, n_heads=2, fused=1)


def test_wrong_models_empty_tokens_and_training_mode_are_refused() -> None:
    """Found by using it (#26 §3): each a `ValueError` that names what was expected."""
    from utils.decoding import greedy_search
    from utils.model import Transformer, TransformerConfig

    transformer = Transformer(TransformerConfig(11, 11, d_model=16, n_heads=2, d_ff=32))
    prompt = torch.ones(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="model must be a utils.gpt.GPT, got Transformer"):
        generate(transformer, prompt, 3)  # type: ignore[arg-type]
    model = tiny_gpt()
    with pytest.raises(ValueError, match="scorer must have next_logits.*got GPT"):
        greedy_search(model, prompt, 5, eos_id=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tokens must hold at least one position, got shape"):
        model(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="model is in training mode"):
        LMScorer(model.train())
    LMScorer(model.eval())  # fine in eval mode
