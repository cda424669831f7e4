"""The modern block (utils.modern) and the Llama loader (utils.llama): parity with torch and
transformers, the rotary relative property, cached decoding, bad inputs."""

import pytest
import torch
import torch.nn.functional as F

from utils.cache import AttentionCache
from utils.gpt import GPT, GPTConfig
from utils.layers import FeedForward
from utils.llama import config_from_llama, from_llama, load_llama_state_dict
from utils.masks import causal_mask
from utils.model import count_parameters
from utils.modern import (
    GroupedQueryAttention,
    ModernConfig,
    ModernLM,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
    apply_rotary,
    generate,
    repeat_kv,
    rope_angles,
    rotate_half,
    swiglu_hidden,
)


def test_rmsnorm_equals_torch():
    norm, ref = RMSNorm(10, eps=1e-6), torch.nn.RMSNorm(10, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        ref.weight.copy_(norm.weight)
    x = 3 * torch.randn(4, 7, 10) + 1
    torch.testing.assert_close(norm(x), ref(x), rtol=0, atol=1e-6)
    unit = RMSNorm(10)(x).pow(2).mean(-1)  # unit gain: mean square 1 (up to eps)
    torch.testing.assert_close(unit, torch.ones_like(unit), rtol=0, atol=1e-4)


def test_rope_score_depends_only_on_offset():
    rope = RotaryEmbedding(8, max_len=64)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m, n):
        qm = apply_rotary(q, rope.cos[m], rope.sin[m])
        kn = apply_rotary(k, rope.cos[n], rope.sin[n])
        return (qm * kn).sum().item()

    for m, n in ((5, 2), (9, 9), (3, 11)):
        for shift in (1, 7, 40):
            assert abs(score(m, n) - score(m + shift, n + shift)) < 1e-5
    assert abs(score(5, 2) - score(6, 2)) > 1e-3  # but it does depend on the offset


def test_rotation_keeps_norms_and_rotate_half_is_a_quarter_turn():
    x = torch.randn(3, 5, 6)
    torch.testing.assert_close(rotate_half(rotate_half(x)), -x)
    angles = rope_angles(torch.arange(5), 6)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    torch.testing.assert_close(apply_rotary(x, cos, sin).norm(dim=-1), x.norm(dim=-1))


def test_swiglu_two_thirds_rule_matches_relu_parameters():
    d_model, d_ff = 128, 512
    hidden = swiglu_hidden(d_ff)
    relu, swiglu = FeedForward(d_model, d_ff), SwiGLU(d_model, hidden)
    gap = abs(count_parameters(relu) - count_parameters(swiglu))
    assert gap <= 3 * d_model + d_ff + d_model  # the rounding of d_ff' plus the ReLU FFN's biases
    assert swiglu_hidden(4 * 4096, multiple_of=256) == 11008  # Llama-2-7B
    assert swiglu_hidden(4 * 5120, multiple_of=256) == 13824  # Llama-2-13B: rounded up
    assert swiglu_hidden(4 * 64) == 170  # truncated, as Llama's int(2 * d_ff / 3)


@pytest.mark.parametrize("n_heads, n_kv_heads", [(6, 6), (6, 2), (6, 1)])
def test_gqa_equals_sdpa_enable_gqa(n_heads, n_kv_heads):
    q = torch.randn(2, n_heads, 7, 8)
    k, v = torch.randn(2, n_kv_heads, 7, 8), torch.randn(2, n_kv_heads, 7, 8)
    g = n_heads // n_kv_heads  # group size: query heads per key/value head
    ours = F.scaled_dot_product_attention(
        q, repeat_kv(k, g), repeat_kv(v, g), attn_mask=causal_mask(7)
    )
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(7), enable_gqa=True)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
    attn = GroupedQueryAttention(24, n_heads, n_kv_heads, 4, max_len=16)
    x = torch.randn(2, 7, 24)
    qh = attn.heads(x, attn.w_q, n_heads)
    kh, vh = attn.heads(x, attn.w_k, n_kv_heads), attn.heads(x, attn.w_v, n_kv_heads)
    qh, kh = attn.rotary(qh, kh)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=causal_mask(7), enable_gqa=True)
    expected = attn.w_o(out.transpose(1, 2).reshape(2, 7, n_heads * 4))
    torch.testing.assert_close(attn(x, causal_mask(7)), expected, rtol=0, atol=1e-5)


def test_gqa_cache_holds_only_kv_heads():
    attn = GroupedQueryAttention(24, 6, 2, 4, max_len=16)
    cache = AttentionCache()
    attn(torch.randn(1, 5, 24), causal_mask(5), cache)
    assert cache.k is not None and tuple(cache.k.shape) == (1, 2, 5, 4)


def test_cached_decoding_equals_full_decoding():
    model = ModernLM(ModernConfig(vocab_size=19, d_model=24, n_heads=6, n_kv_heads=2, n_layers=2))
    model.eval()
    prompt = torch.randint(0, 19, (3, 4))
    with_cache = generate(model, prompt, 12, greedy=True, use_cache=True)
    without = generate(model, prompt, 12, greedy=True, use_cache=False)
    assert torch.equal(with_cache, without)
    tokens = torch.randint(0, 19, (2, 9))
    with torch.no_grad():
        full = model(tokens)
        cache = model.init_cache()
        steps = torch.cat([model(tokens[:, :4], cache), model(tokens[:, 4:], cache)], 1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-5)


def test_grouped_cache_is_smaller_than_the_full_head_cache():
    gpt = GPT(GPTConfig(vocab_size=11, d_model=24, n_heads=6, d_ff=32, n_layers=2, max_len=16))
    modern = ModernLM(ModernConfig(vocab_size=11, d_model=24, n_heads=6, n_kv_heads=2, n_layers=2))
    tokens = torch.randint(0, 11, (2, 10))
    caches = gpt.init_cache(), modern.init_cache()
    with torch.no_grad():
        gpt(tokens, caches[0])
        modern(tokens, caches[1])
    assert caches[0].memory_bytes() == 3 * caches[1].memory_bytes()


def test_bad_inputs():
    with pytest.raises(ValueError, match="n_kv_heads must divide n_heads"):
        ModernConfig(vocab_size=10, d_model=24, n_heads=6, n_kv_heads=4)
    with pytest.raises(ValueError, match="n_kv_heads must divide n_heads"):
        GroupedQueryAttention(24, 6, 4, 4, max_len=8)
    with pytest.raises(ValueError, match="d_head must be even"):
        RotaryEmbedding(7, max_len=8)
    with pytest.raises(ValueError, match="d_k must be even"):
        ModernConfig(vocab_size=10, d_model=15, n_heads=3)
    with pytest.raises(ValueError, match="d_k must be a positive int"):
        ModernConfig(vocab_size=10, d_k="8")  # type: ignore[arg-type]
    model = ModernLM(ModernConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, max_len=6))
    with pytest.raises(ValueError, match="exceeds max_len 6"):
        model(torch.zeros(1, 7, dtype=torch.long))
    cache = model.init_cache()
    model(torch.zeros(1, 4, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="positions 4..6 exceeds max_len 6"):
        model(torch.zeros(1, 3, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="max_len=6"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="token ids must be in"):
        model(torch.full((1, 2), 10))
    with pytest.raises(ValueError, match="ModernConfig"):
        ModernLM(GPTConfig(vocab_size=10))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# parity with transformers' LlamaForCausalLM (random weights, offline)
# --------------------------------------------------------------------------------------------

LLAMA_CONFIGS = {
    "gqa": dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2),
    "mqa, head_dim not d_model / h": dict(
        hidden_size=36, num_attention_heads=4, num_key_value_heads=1, head_dim=10
    ),
    "mha, tied": dict(
        hidden_size=30, num_attention_heads=3, num_key_value_heads=3, tie_word_embeddings=True
    ),
    # Llama 3's base and eps: a loader that ignored rope_theta would rotate by 10,000's angles,
    # one that ignored rms_norm_eps would keep the default 1e-6 (Llama 1's; Llama 2 and 3: 1e-5)
    "gqa, rope_theta 500,000, rms_norm_eps 1e-5": dict(
        hidden_size=48,
        num_attention_heads=6,
        num_key_value_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 500_000.0},
        rms_norm_eps=1e-5,
    ),
}


def llama(**kw):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=37,
        intermediate_size=70,
        num_hidden_layers=2,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=0.1,
        **kw,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    # every RMSNorm gain starts at 1, in transformers and in the book: a loader that swapped two
    # norms (or never copied them) would pass; perturbing every parameter makes each one count
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LLAMA_CONFIGS))
def test_logits_and_greedy_tokens_equal_llama(name):
    hf = llama(**LLAMA_CONFIGS[name])
    ours = from_llama(hf).eval()
    tokens = torch.randint(0, 37, (3, 20))
    with torch.no_grad():
        theirs = hf(tokens).logits
        diff = (ours(tokens) - theirs).abs().max().item()
    assert diff < 1e-5 and theirs.std() > 0.1  # logits far from zero, and equal
    assert ours.config.rope_base == hf.config.rope_parameters["rope_theta"]
    assert ours.config.norm_eps == hf.config.rms_norm_eps
    assert all(p.std() > 0.05 for p in hf.parameters())  # no tensor left at a constant
    prompt = tokens[:, :5]
    expected = hf.generate(  # no end-of-text id: it would stop there and pad, the book's not
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=12,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    assert torch.equal(generate(ours, prompt, 12, greedy=True), expected)


@pytest.mark.slow  # imports transformers (seconds)
def test_loader_refuses_what_it_cannot_express():
    hf = llama(**LLAMA_CONFIGS["gqa"])
    state = hf.state_dict()
    model = ModernLM(config_from_llama(hf.config))
    with pytest.raises(ValueError, match="lacks 1 keys"):
        load_llama_state_dict(
            model, {k: v for k, v in state.items() if "q_proj" not in k or ".1." not in k}
        )
    with pytest.raises(ValueError, match="expected shape"):
        load_llama_state_dict(model, {**state, "model.norm.weight": torch.ones(3)})
    hf.config.mlp_bias = True
    with pytest.raises(ValueError, match="mlp_bias"):
        config_from_llama(hf.config)
    hf.config.mlp_bias = False
    # long-context rotary scalings (position interpolation, Llama 3.1's "llama3") are not the
    # book's RotaryEmbedding: refused rather than loaded with the wrong angles
    hf.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="only the default rotary positions"):
        config_from_llama(hf.config)


def test_fused_attention_equals_the_readable_path():
    config = ModernConfig(vocab_size=23, d_model=24, n_heads=6, n_kv_heads=3, n_layers=2)
    readable = ModernLM(config).eval()
    fused = ModernLM(config.replace(fused=True)).eval()
    fused.load_state_dict(readable.state_dict())
    tokens = torch.randint(0, 23, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(fused(tokens), readable(tokens), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="fused must be a bool"):
        ModernConfig(vocab_size=5, fused=1)  # type: ignore[arg-type]


def test_wrong_models_empty_tokens_and_training_mode_are_refused():
    """Found by using it (#26 §3): each a `ValueError` that names what was expected."""
    from utils.modern import ModernScorer

    gpt = GPT(GPTConfig(vocab_size=10, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=8))
    prompt = torch.ones(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="model must be a utils.modern.ModernLM, got GPT"):
        generate(gpt, prompt, 3)  # type: ignore[arg-type]
    model = ModernLM(ModernConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, max_len=8))
    with pytest.raises(ValueError, match=r"tokens must hold at least one position, got shape"):
        model(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="model is in training mode"):
        ModernScorer(model.train())
    ModernScorer(model.eval())  # fine in eval mode


def test_config_defaults_stay_unresolved_so_replace_moves_them():
    config = ModernConfig(50, d_model=32, n_heads=4)
    assert (config.n_kv_heads, config.d_k, config.d_ff) == (None, None, None)
    assert (config.kv_heads, config.key_dim, config.ff_dim) == (4, 8, swiglu_hidden(128))
    wider = config.replace(d_model=64)  # the defaults follow d_model
    assert (wider.key_dim, wider.ff_dim) == (16, swiglu_hidden(256))
    assert ModernLM(wider).layers[0].ffn.up.out_features == swiglu_hidden(256)
