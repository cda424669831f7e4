"""utils.gpt2: the book's GPT against Hugging Face's GPT2LMHeadModel (random weights, offline).

Parity of logits on several configurations (odd widths, untied head, another eps, every
activation), greedy `generate` tokens against `transformers`' `generate`, the key/value caches
layer by layer, the export with its folded scale and bias and its mapped activation and eps, a
`save_pretrained` round trip, the new GPTConfig options on the fast path, and bad input.
"""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from utils.gpt import GPT, GPTConfig, generate  # noqa: E402
from utils.gpt2 import (  # noqa: E402
    config_from_hf,
    config_to_hf,
    fold_output_bias,
    gpt_from_hf,
    gpt_to_hf,
    state_dict_from_hf,
)
from utils.layers import FeedForward, make_activation  # noqa: E402

CONFIGS = {
    "small": dict(vocab_size=97, n_positions=24, n_embd=48, n_layer=2, n_head=4),
    "odd": dict(
        vocab_size=51,
        n_positions=17,
        n_embd=30,
        n_layer=3,
        n_head=5,
        n_inner=70,
        layer_norm_epsilon=1e-6,
        tie_word_embeddings=False,
    ),
    "gelu-exact": dict(
        vocab_size=64, n_positions=16, n_embd=24, n_layer=1, n_head=2, activation_function="gelu"
    ),
    "relu": dict(
        vocab_size=33, n_positions=16, n_embd=36, n_layer=2, n_head=3, activation_function="relu"
    ),
}


def hf_model(name: str, seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(**CONFIGS[name], bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    perturb(model)
    return model


def perturb(model: torch.nn.Module) -> None:
    """Add N(0, 0.1^2) noise to every parameter, in place.

    Biases start at 0 and LayerNorm gains at 1 (in transformers and in the book): a loader that
    swapped two of them, or never copied one, would pass a parity check on a fresh model.
    Perturbed, every tensor but one shows in the logits: the key bias adds q·b_K to every score
    of a row, which softmax ignores, so a loader that skips it passes every logit check here;
    `test_kv_cache_agrees_layer_by_layer`, which compares the cached keys, catches it.
    """
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))


@pytest.mark.parametrize("name", CONFIGS)
def test_logits_equal_transformers(name: str) -> None:
    hf = hf_model(name)
    ours = gpt_from_hf(hf)
    x = torch.randint(0, hf.config.vocab_size, (3, hf.config.n_positions))
    with torch.no_grad():
        gap = (hf(x).logits - ours(x)).abs().max().item()
    assert gap < 1e-5
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("name", ["small", "odd"])
def test_greedy_generate_tokens_equal(name: str) -> None:
    hf = hf_model(name, seed=1)
    ours = gpt_from_hf(hf)
    prompt = torch.randint(0, hf.config.vocab_size, (2, 3))
    n_new = hf.config.n_positions - 3
    theirs = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=n_new,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    mine = generate(ours, prompt, n_new, greedy=True)
    assert mine.tolist() == theirs.tolist()


def test_kv_cache_agrees_layer_by_layer() -> None:
    hf = hf_model("odd", seed=2)
    ours = gpt_from_hf(hf)
    x = torch.randint(0, hf.config.vocab_size, (2, 9))
    cache = ours.init_cache()
    past = None
    with torch.no_grad():
        for t in range(x.shape[1]):  # one token at a time, both caches growing
            out = hf(x[:, t : t + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = ours(x[:, t : t + 1], cache=cache)
            assert (out.logits - logits).abs().max().item() < 1e-5
    assert cache.length == x.shape[1]
    for i, block in enumerate(cache.self_attn):
        assert block.k is not None and block.v is not None
        assert block.k.shape == past.layers[i].keys.shape == (2, 5, 9, 6)
        assert (block.k - past.layers[i].keys).abs().max().item() < 1e-5
        assert (block.v - past.layers[i].values).abs().max().item() < 1e-5


def exported_gap(**fields) -> tuple[GPT2LMHeadModel, float]:
    """A small book GPT (every parameter perturbed, a random output bias) exported to GPT-2:
    the export and the max |log-probability difference| on random tokens."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=20, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=16,
                       **fields)  # fmt: skip
    ours = GPT(config).eval()
    perturb(ours)
    with torch.no_grad():
        ours.generator.proj.bias.normal_()
    hf = gpt_to_hf(ours)
    x = torch.randint(0, 20, (2, 16))
    with torch.no_grad():
        gap = (hf(x).logits.log_softmax(-1) - ours(x).log_softmax(-1)).abs().max().item()
    return hf, gap


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_export_of_a_book_model_keeps_its_distribution(tied: bool, positional: str) -> None:
    # notebook 13's kind of model: √d-scaled lookup, output bias, ReLU; vocabulary <= d_model
    hf, gap = exported_gap(tie_embeddings=tied, positional=positional)
    assert hf.config.activation_function == "relu"
    assert (hf.lm_head.weight is hf.transformer.wte.weight) == tied
    assert gap < 1e-5


@pytest.mark.parametrize(
    ("activation", "hf_activation"),
    [("gelu_tanh", "gelu_new"), ("gelu", "gelu"), ("relu", "relu")],
)
def test_export_maps_activation_and_norm_eps(activation: str, hf_activation: str) -> None:
    # the export's config mapping: each activation, and a LayerNorm eps other than 1e-5 (at
    # 1e-5 a dropped eps would be invisible). The log-probabilities are compared first, so a
    # wrong mapping fails on what the model computes, not only on a config field.
    hf, gap = exported_gap(activation=activation, norm_eps=1e-2)
    assert gap < 1e-5
    assert hf.config.activation_function == hf_activation
    assert hf.config.layer_norm_epsilon == 1e-2


def test_save_pretrained_round_trip(tmp_path) -> None:
    torch.manual_seed(3)
    ours = GPT(GPTConfig(vocab_size=30, d_model=32, n_heads=2, d_ff=48, n_layers=2, max_len=20))
    perturb(ours)
    with torch.no_grad():
        ours.generator.proj.bias.normal_()
    gpt_to_hf(ours).save_pretrained(tmp_path)
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    prompt = torch.tensor([[1, 2, 3]])
    theirs = loaded.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=17, do_sample=False
    )
    assert generate(ours, prompt, 17, greedy=True).tolist() == theirs.tolist()
    # and back into the book's GPT: GPT-2's own parametrisation, same distribution
    back = gpt_from_hf(loaded)
    x = torch.randint(0, 30, (2, 20))
    with torch.no_grad():
        gap = (back(x).log_softmax(-1) - ours(x).log_softmax(-1)).abs().max().item()
    assert gap < 1e-5


def test_fold_output_bias_solves_up_to_a_constant() -> None:
    torch.manual_seed(0)
    weight, bias = torch.randn(10, 16), torch.randn(10)
    delta, residual = fold_output_bias(weight, bias)
    shifted = weight @ delta - bias  # a constant vector
    assert residual < 1e-6 and (shifted - shifted.mean()).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="cannot be folded"):
        fold_output_bias(torch.randn(40, 16), torch.randn(40))  # more words than d_model + 1
    with pytest.raises(ValueError, match="shape"):
        fold_output_bias(weight, torch.randn(9))


def test_gelu_tanh_is_gpt2s_formula_and_fast_path_honours_options() -> None:
    x = torch.linspace(-6, 6, 1001)
    formula = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert (make_activation("gelu_tanh")(x) - formula).abs().max().item() < 1e-6
    assert isinstance(FeedForward(4, 8).activation, torch.nn.ReLU)  # the default is unchanged
    config = GPTConfig(
        vocab_size=40,
        d_model=24,
        n_heads=3,
        d_ff=40,
        n_layers=2,
        max_len=12,
        activation="gelu_tanh",
        norm_eps=1e-3,
        scale_embeddings=False,
        head_bias=False,
    )
    torch.manual_seed(0)
    slow = GPT(config).eval()
    perturb(slow)
    fast = GPT(config.replace(fused=True)).eval()
    fast.load_state_dict(slow.state_dict())
    assert slow.generator.proj.bias is None and not slow.embed.token.scale
    assert all(layer.sublayers[0].norm.eps == 1e-3 for layer in fast.layers)
    x = torch.randint(0, 40, (2, 12))
    with torch.no_grad():
        assert (slow(x) - fast(x)).abs().max().item() < 1e-5


def test_config_mapping_gelu_pytorch_tanh_and_dropout() -> None:
    # "gelu_pytorch_tanh" is the same tanh formula as "gelu_new", computed by PyTorch's kernel
    fields = dict(CONFIGS["small"], activation_function="gelu_pytorch_tanh")
    assert config_from_hf(GPT2Config(**fields)).activation == "gelu_tanh"
    torch.manual_seed(0)
    theirs = GPT2LMHeadModel(GPT2Config(**fields)).eval()
    perturb(theirs)
    mine = gpt_from_hf(theirs)
    tokens = torch.randint(0, fields["vocab_size"], (2, fields["n_positions"]))
    with torch.no_grad():
        assert (theirs(tokens).logits - mine(tokens)).abs().max().item() < 1e-5
    # three dropout rates become the book's one: the largest
    rates = GPT2Config(**CONFIGS["small"], embd_pdrop=0.05, attn_pdrop=0.0, resid_pdrop=0.2)
    assert config_from_hf(rates).dropout == 0.2


def test_defaults_keep_notebook_13s_model() -> None:
    model = GPT(GPTConfig(vocab_size=10, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=4))
    assert model.embed.token.scale and model.generator.proj.bias is not None
    assert isinstance(model.layers[0].ffn.activation, torch.nn.ReLU)
    assert model.norm is not None and model.norm.eps == 1e-5


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="GPT2Config"):
        config_from_hf(GPTConfig(vocab_size=10))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale_attn"):
        config_from_hf(GPT2Config(**CONFIGS["small"], scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match="activation_function"):
        config_from_hf(GPT2Config(**CONFIGS["small"], activation_function="silu"))
    with pytest.raises(ValueError, match="activation"):
        GPTConfig(vocab_size=10, d_model=8, n_heads=2, activation="swish")
    with pytest.raises(ValueError, match="norm_eps"):
        GPTConfig(vocab_size=10, d_model=8, n_heads=2, norm_eps=0.0)
    with pytest.raises(ValueError, match="activation"):
        make_activation("tanh")
    hf = hf_model("small")
    config = config_from_hf(hf.config)
    state = hf.state_dict()
    wrong = {**state, "transformer.h.0.attn.c_attn.weight": torch.zeros(48, 48)}
    with pytest.raises(ValueError, match=r"c_attn.weight must have shape \(48, 144\)"):
        state_dict_from_hf(wrong, config)
    missing = {k: v for k, v in state.items() if k != "transformer.ln_f.bias"}
    with pytest.raises(ValueError, match="no 'transformer.ln_f.bias'"):
        state_dict_from_hf(missing, config)
    with pytest.raises(ValueError, match="no place for"):
        state_dict_from_hf({**state, "transformer.h.9.ln_1.weight": torch.ones(48)}, config)
    with pytest.raises(ValueError, match="no 'transformer.h.2"):  # a config with a layer more
        state_dict_from_hf(state, config.replace(n_layers=3))
    with pytest.raises(ValueError, match="wte.weight must have shape"):  # another vocabulary
        state_dict_from_hf(state, config.replace(vocab_size=98))
    with pytest.raises(ValueError, match="norm_first"):
        config_to_hf(GPTConfig(vocab_size=10, d_model=8, n_heads=2, norm_first=False))
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        gpt_from_hf(GPT(config))  # type: ignore[arg-type]
