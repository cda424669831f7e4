"""The book's GPT is GPT-2: weights to and from Hugging Face's `GPT2LMHeadModel` (notebook 15).

`utils.gpt.GPT` with `activation="gelu_tanh"`, `scale_embeddings=False` and `head_bias=False`
computes what `transformers`' GPT-2 computes; this module maps the configuration and the state
dict both ways. Two storage conventions differ and are mapped explicitly:

- GPT-2's `Conv1D` computes `x @ W + b` with `W` stored `(d_in, d_out)`; `nn.Linear` computes
  `x @ W.T + b` with `W` stored `(d_out, d_in)`. Every matrix is transposed on the way.
- `c_attn` is one `Conv1D(d_model -> 3 d_model)`: its columns are `[q | k | v]`, each block
  `d_model` wide with the heads side by side, the order `split_heads` reads. The book keeps
  `w_q`, `w_k` and `w_v` apart.

`transformers` is an optional dependency (`requirements-hf.txt`), imported only when a function
here needs it. Shapes: token ids `(B, T)`, logits `(B, T, vocab_size)`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from utils.embeddings import sinusoidal_encoding
from utils.gpt import GPT, GPTConfig

if TYPE_CHECKING:  # only for the type hints: importing transformers takes seconds
    from transformers import GPT2Config, GPT2LMHeadModel

__all__ = [
    "HF_ACTIVATIONS",
    "config_from_hf",
    "config_to_hf",
    "state_dict_from_hf",
    "state_dict_to_hf",
    "gpt_from_hf",
    "gpt_to_hf",
    "fold_output_bias",
]

# GPT2Config.activation_function -> the book's FeedForward activation. "gelu_new" is GPT-2's:
# 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the formula nn.GELU(approximate="tanh") uses.
HF_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
_TO_HF_ACTIVATION = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}


def _transformers() -> Any:
    try:
        import transformers
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "utils.gpt2 needs Hugging Face transformers: pip install -r requirements-hf.txt"
        ) from None
    return transformers


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


def config_from_hf(config: GPT2Config) -> GPTConfig:
    """The `GPTConfig` that computes what a `GPT2Config`'s model computes.

    `ValueError` for what the book's GPT cannot express: cross-attention, attention scaled
    otherwise than by 1/√d_head, or an activation outside `HF_ACTIVATIONS`.

    Dropout: the book's GPT has one rate where GPT-2 has three (`embd_pdrop`, `attn_pdrop`,
    `resid_pdrop`); it takes the largest of them. Dropout acts only in training (the parity of
    logits holds in evaluation mode, whatever the rates), and its sites differ anyway (the
    book's FFN also drops its hidden activations), so training the two models is not the same
    computation even with equal rates; refusing a checkpoint for its training-time rates would
    protect nothing that the book's GPT could reproduce.
    """
    transformers = _transformers()
    if not isinstance(config, transformers.GPT2Config):
        raise ValueError(f"config must be a transformers.GPT2Config, got {type(config).__name__}")
    if config.add_cross_attention:
        raise ValueError("config has add_cross_attention=True; the book's GPT has none")
    if not config.scale_attn_weights or config.scale_attn_by_inverse_layer_idx:
        raise ValueError(
            "the book's attention scales scores by 1/sqrt(d_head): config must have "
            "scale_attn_weights=True and scale_attn_by_inverse_layer_idx=False, got "
            f"{config.scale_attn_weights} and {config.scale_attn_by_inverse_layer_idx}"
        )
    if config.activation_function not in HF_ACTIVATIONS:
        raise ValueError(
            f"activation_function must be one of {tuple(HF_ACTIVATIONS)}, "
            f"got {config.activation_function!r}"
        )
    dropout = max(config.embd_pdrop, config.attn_pdrop, config.resid_pdrop)
    return GPTConfig(
        vocab_size=config.vocab_size,
        d_model=config.n_embd,
        n_heads=config.n_head,
        d_ff=config.n_inner if config.n_inner is not None else 4 * config.n_embd,
        n_layers=config.n_layer,
        dropout=float(dropout),
        max_len=config.n_positions,
        norm_first=True,
        positional="learned",
        tie_embeddings=bool(config.tie_word_embeddings),
        activation=HF_ACTIVATIONS[config.activation_function],
        norm_eps=float(config.layer_norm_epsilon),
        scale_embeddings=False,
        head_bias=False,
    )


def config_to_hf(config: GPTConfig, **overrides: Any) -> GPT2Config:
    """The `GPT2Config` of a book `GPTConfig` (pre-norm only); `overrides` go to `GPT2Config`.

    No begin/end-of-text ids (GPT-2's are 50256, outside a small vocabulary): `generate` then
    stops at `max_new_tokens` only, as the book's does.
    """
    transformers = _transformers()
    if not isinstance(config, GPTConfig):
        raise ValueError(f"config must be a utils.gpt.GPTConfig, got {type(config).__name__}")
    if not config.norm_first:
        raise ValueError("GPT-2 is pre-norm with a final LayerNorm: config needs norm_first=True")
    fields: dict[str, Any] = dict(
        vocab_size=config.vocab_size,
        n_positions=config.max_len,
        n_embd=config.d_model,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_inner=config.d_ff,
        activation_function=_TO_HF_ACTIVATION[config.activation],
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        layer_norm_epsilon=config.norm_eps,
        tie_word_embeddings=config.tie_embeddings,
        bos_token_id=None,
        eos_token_id=None,
    )
    fields.update(overrides)
    return transformers.GPT2Config(**fields)


# --------------------------------------------------------------------------------------------
# state dicts
# --------------------------------------------------------------------------------------------


def _check_shape(name: str, tensor: Tensor, shape: tuple[int, ...]) -> Tensor:
    if not isinstance(tensor, Tensor) or tuple(tensor.shape) != shape:
        got = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must have shape {shape}, got {got}")
    return tensor


def state_dict_from_hf(state: dict[str, Tensor], config: GPTConfig) -> dict[str, Tensor]:
    """A `GPT2LMHeadModel` state dict -> the state dict of `GPT(config)` (new tensors).

    `config` is `config_from_hf` of the model's config. Keys and shapes are checked: a missing
    or unexpected key, or a tensor of another shape, is a `ValueError`.
    """
    if not isinstance(config, GPTConfig):
        raise ValueError(f"config must be a utils.gpt.GPTConfig, got {type(config).__name__}")
    d, f, V, P = config.d_model, config.d_ff, config.vocab_size, config.max_len
    state = {k: v for k, v in state.items() if not k.endswith((".attn.bias", ".masked_bias"))}
    used: set[str] = set()

    def take(key: str, shape: tuple[int, ...]) -> Tensor:
        if key not in state:
            raise ValueError(f"the GPT-2 state dict has no {key!r}")
        used.add(key)
        return _check_shape(key, state[key], shape).detach().clone()

    out: dict[str, Tensor] = {
        "embed.token.weight": take("transformer.wte.weight", (V, d)),  # (V, d) both
        "embed.position.embedding.weight": take("transformer.wpe.weight", (P, d)),
    }
    for i in range(config.n_layers):
        theirs, ours = f"transformer.h.{i}.", f"layers.{i}."
        w_qkv = take(theirs + "attn.c_attn.weight", (d, 3 * d))  # Conv1D: (d_in, [q | k | v])
        b_qkv = take(theirs + "attn.c_attn.bias", (3 * d,))
        for j, name in enumerate(("w_q", "w_k", "w_v")):
            out[ours + f"self_attn.{name}.weight"] = w_qkv[:, j * d : (j + 1) * d].T  # (d, d)
            out[ours + f"self_attn.{name}.bias"] = b_qkv[j * d : (j + 1) * d]
        out[ours + "self_attn.w_o.weight"] = take(theirs + "attn.c_proj.weight", (d, d)).T
        out[ours + "self_attn.w_o.bias"] = take(theirs + "attn.c_proj.bias", (d,))
        out[ours + "ffn.linear1.weight"] = take(theirs + "mlp.c_fc.weight", (d, f)).T  # -> (f, d)
        out[ours + "ffn.linear1.bias"] = take(theirs + "mlp.c_fc.bias", (f,))
        out[ours + "ffn.linear2.weight"] = take(theirs + "mlp.c_proj.weight", (f, d)).T  # -> (d, f)
        out[ours + "ffn.linear2.bias"] = take(theirs + "mlp.c_proj.bias", (d,))
        for k, ln in ((0, "ln_1"), (1, "ln_2")):  # pre-norm: ln_1 before attention, ln_2 FFN
            out[ours + f"sublayers.{k}.norm.weight"] = take(theirs + f"{ln}.weight", (d,))
            out[ours + f"sublayers.{k}.norm.bias"] = take(theirs + f"{ln}.bias", (d,))
    out["norm.weight"] = take("transformer.ln_f.weight", (d,))
    out["norm.bias"] = take("transformer.ln_f.bias", (d,))
    if config.tie_embeddings:
        out["generator.proj.weight"] = out["embed.token.weight"]
        if "lm_head.weight" in state:  # tied in the model, so the same values
            used.add("lm_head.weight")
    else:
        out["generator.proj.weight"] = take("lm_head.weight", (V, d))
    unexpected = sorted(set(state) - used)
    if unexpected:
        raise ValueError(
            f"the GPT-2 state dict has keys the book's GPT has no place for: {unexpected}"
        )
    return out


def fold_output_bias(weight: Tensor, bias: Tensor, tol: float = 1e-4) -> tuple[Tensor, float]:
    """A vector δ `(d,)` with `weight @ δ = bias + κ` for some constant κ, and the residual.

    Softmax ignores a constant added to every logit, so an output layer with a bias, `u W^T + b`
    (`u` the final LayerNorm's output, `weight` W `(V, d)`, `bias` b `(V,)`), scores like one
    without, `(u + δ) W^T`, when δ solves `W δ = b + κ·1`: V equations in d + 1 unknowns,
    exactly solvable (generically) when V <= d + 1. Solved by least squares in float64;
    `ValueError` if the largest residual is above `tol` (then b is not in the span: GPT-2's head
    cannot express it).
    """
    V, d = weight.shape
    _check_shape("bias", bias, (V,))
    A = torch.cat([weight.double(), -torch.ones(V, 1, dtype=torch.float64)], dim=1)  # (V, d+1)
    solution = torch.linalg.lstsq(A, bias.double()[:, None], driver="gelsd").solution[:, 0]
    residual = (A @ solution - bias.double()).abs().max().item()
    if residual > tol:
        raise ValueError(
            f"the output bias cannot be folded into the final LayerNorm (residual {residual:.2e} "
            f"> {tol:.0e}; vocabulary {V} > d_model + 1 = {d + 1}?)"
        )
    return solution[:d].to(weight.dtype), residual


def state_dict_to_hf(model: GPT) -> dict[str, Tensor]:
    """The book's `GPT` (pre-norm) -> a `GPT2LMHeadModel` state dict of `config_to_hf(config)`.

    What GPT-2 lacks is folded into what it has, exactly up to float rounding:
    the √d_model scale of the token lookup (`scale_embeddings=True`) goes into `wte`, and, since
    the tied head then reads `√d·W`, 1/√d goes into the final LayerNorm's gain and bias; the
    sinusoidal table (if `positional="sinusoidal"`) becomes `wpe`; an output bias b is folded
    into the final LayerNorm's bias (`fold_output_bias`: only the softmax is kept, the logits
    move by a constant per position).
    """
    if not isinstance(model, GPT):
        raise ValueError(f"model must be a utils.gpt.GPT, got {type(model).__name__}")
    config = model.config
    if not config.norm_first:
        raise ValueError(
            "GPT-2 is pre-norm with a final LayerNorm: the model needs norm_first=True"
        )
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    d = config.d_model
    scale = math.sqrt(d) if config.scale_embeddings else 1.0
    wte = sd["embed.token.weight"] * scale  # (V, d): the lookup GPT-2 adds positions to
    if config.positional == "learned":
        wpe = sd["embed.position.embedding.weight"]
    else:
        wpe = sinusoidal_encoding(config.max_len, d).to(wte.dtype)
    out: dict[str, Tensor] = {"transformer.wte.weight": wte, "transformer.wpe.weight": wpe}
    for i in range(config.n_layers):
        theirs, ours = f"transformer.h.{i}.", f"layers.{i}."
        out[theirs + "attn.c_attn.weight"] = torch.cat(
            [sd[ours + f"self_attn.{n}.weight"].T for n in ("w_q", "w_k", "w_v")], dim=1
        )  # (d, 3d): Conv1D's x @ W, columns [q | k | v]
        out[theirs + "attn.c_attn.bias"] = torch.cat(
            [sd[ours + f"self_attn.{n}.bias"] for n in ("w_q", "w_k", "w_v")]
        )
        out[theirs + "attn.c_proj.weight"] = sd[ours + "self_attn.w_o.weight"].T.contiguous()
        out[theirs + "attn.c_proj.bias"] = sd[ours + "self_attn.w_o.bias"]
        out[theirs + "mlp.c_fc.weight"] = sd[ours + "ffn.linear1.weight"].T.contiguous()  # (d, f)
        out[theirs + "mlp.c_fc.bias"] = sd[ours + "ffn.linear1.bias"]
        out[theirs + "mlp.c_proj.weight"] = sd[ours + "ffn.linear2.weight"].T.contiguous()  # (f, d)
        out[theirs + "mlp.c_proj.bias"] = sd[ours + "ffn.linear2.bias"]
        for k, ln in ((0, "ln_1"), (1, "ln_2")):
            out[theirs + f"{ln}.weight"] = sd[ours + f"sublayers.{k}.norm.weight"]
            out[theirs + f"{ln}.bias"] = sd[ours + f"sublayers.{k}.norm.bias"]
    gain, shift = sd["norm.weight"], sd["norm.bias"]
    head = wte if config.tie_embeddings else sd["generator.proj.weight"]  # (V, d)
    if config.tie_embeddings:  # the head reads scale·W: divide the final LayerNorm's output
        gain, shift = gain / scale, shift / scale
    if config.head_bias:
        delta, _ = fold_output_bias(head, sd["generator.proj.bias"])
        shift = shift + delta
    out["transformer.ln_f.weight"] = gain
    out["transformer.ln_f.bias"] = shift
    out["lm_head.weight"] = head
    return out


# --------------------------------------------------------------------------------------------
# whole models
# --------------------------------------------------------------------------------------------


def gpt_from_hf(hf_model: GPT2LMHeadModel) -> GPT:
    """The book's `GPT` holding a `GPT2LMHeadModel`'s weights (float32, evaluation mode)."""
    transformers = _transformers()
    if not isinstance(hf_model, transformers.GPT2LMHeadModel):
        raise ValueError(
            f"hf_model must be a transformers.GPT2LMHeadModel, got {type(hf_model).__name__}"
        )
    config = config_from_hf(hf_model.config)
    model = GPT(config)
    state = {k: v.float() for k, v in hf_model.state_dict().items()}
    model.load_state_dict(state_dict_from_hf(state, config))
    return model.eval()


def gpt_to_hf(model: GPT, **overrides: Any) -> GPT2LMHeadModel:
    """A `GPT2LMHeadModel` (evaluation mode) computing the book's `model`'s next-token
    distribution; `overrides` go to its `GPT2Config` (e.g. `attn_implementation="eager"`)."""
    transformers = _transformers()
    if not isinstance(model, GPT):
        raise ValueError(f"model must be a utils.gpt.GPT, got {type(model).__name__}")
    state = state_dict_to_hf(model)
    hf_model = transformers.GPT2LMHeadModel(config_to_hf(model.config, **overrides))
    result = hf_model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(".attn.bias")]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"state dict mismatch: missing {missing}, unexpected {result.unexpected_keys}"
        )
    if (
        model.config.tie_embeddings
        and hf_model.lm_head.weight is not hf_model.transformer.wte.weight
    ):
        raise ValueError("the exported model's lm_head is not tied to wte")
    return hf_model.eval()
