"""Copy our weights into PyTorch's own modules, for the parity checks of notebooks 04-09.

Build both, copy ours into theirs, compare in `eval()` mode. The copiers live here so the
model files read like the paper; `torch_*` build the matching `torch.nn` module. A pair
that cannot match raises `ValueError` naming what differs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

from utils.attention import MultiHeadAttention
from utils.layers import DecoderLayer, EncoderLayer, LayerNorm
from utils.model import Decoder, Encoder, Transformer, TransformerConfig

__all__ = [
    "copy_to_torch_mha",
    "copy_to_torch_encoder_layer",
    "copy_to_torch_decoder_layer",
    "copy_to_torch_encoder",
    "copy_to_torch_decoder",
    "copy_to_torch_transformer",
    "torch_encoder_layer",
    "torch_decoder_layer",
    "torch_encoder",
    "torch_decoder",
    "torch_transformer",
]


def copy_to_torch_mha(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Copy our weights into `nn.MultiheadAttention`: `in_proj_weight` is `[W_q; W_k; W_v]`.

    PyTorch's heads have width `d_model // n_heads`, so `ours` must use the default d_k, d_v.
    Its bool masks mean True = *not* allowed (`utils.masks.to_torch_attn_mask`).
    """
    if not isinstance(ours, MultiHeadAttention) or not isinstance(theirs, nn.MultiheadAttention):
        raise ValueError(
            f"expected (MultiHeadAttention, nn.MultiheadAttention), got "
            f"({type(ours).__name__}, {type(theirs).__name__})"
        )
    if theirs.embed_dim != ours.d_model or theirs.num_heads != ours.n_heads:
        raise ValueError(
            f"shapes differ: ours d_model={ours.d_model}, n_heads={ours.n_heads}; theirs "
            f"embed_dim={theirs.embed_dim}, num_heads={theirs.num_heads}"
        )
    head_dim = ours.d_model // ours.n_heads
    if ours.d_k != head_dim or ours.d_v != head_dim:
        raise ValueError(
            f"nn.MultiheadAttention needs d_k = d_v = d_model // n_heads = {head_dim}, got "
            f"d_k={ours.d_k}, d_v={ours.d_v}"
        )
    if theirs.kdim != ours.d_model or theirs.vdim != ours.d_model:
        raise ValueError(
            f"theirs must take keys and values of width d_model={ours.d_model}, got "
            f"kdim={theirs.kdim}, vdim={theirs.vdim}"
        )
    if theirs.bias_k is not None or theirs.bias_v is not None:
        raise ValueError("theirs uses add_bias_kv=True, which ours has no counterpart for")
    ours_bias = ours.w_q.bias is not None
    theirs_bias = theirs.in_proj_bias is not None
    if ours_bias != theirs_bias:
        raise ValueError(f"bias differs: ours bias={ours_bias}, theirs bias={theirs_bias}")
    with torch.no_grad():
        if theirs.in_proj_weight is not None:
            theirs.in_proj_weight.copy_(
                torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight], dim=0)
            )
        else:  # a module built with explicit kdim/vdim keeps separate weights
            theirs.q_proj_weight.copy_(ours.w_q.weight)
            theirs.k_proj_weight.copy_(ours.w_k.weight)
            theirs.v_proj_weight.copy_(ours.w_v.weight)
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        if ours_bias:
            theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
            theirs.out_proj.bias.copy_(ours.w_o.bias)


@torch.no_grad()
def _copy_param(name: str, dst: Tensor, src: Tensor) -> None:
    if dst.shape != src.shape:
        raise ValueError(
            f"cannot copy {name}: ours has shape {tuple(src.shape)}, "
            f"theirs has shape {tuple(dst.shape)}"
        )
    dst.copy_(src)


def _copy_linear(name: str, ours: nn.Linear, theirs: nn.Linear) -> None:
    _copy_param(f"{name}.weight", theirs.weight, ours.weight)
    _copy_param(f"{name}.bias", theirs.bias, ours.bias)


def _copy_norm(name: str, ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    if theirs.weight is None or theirs.bias is None:
        raise ValueError(f"cannot copy {name}: the nn.LayerNorm has no affine parameters")
    if abs(theirs.eps - ours.eps) > 0.0:
        raise ValueError(f"cannot copy {name}: ours has eps={ours.eps}, theirs eps={theirs.eps}")
    _copy_param(f"{name}.weight", theirs.weight, ours.weight)
    _copy_param(f"{name}.bias", theirs.bias, ours.bias)


def _check_torch_layer(
    ours: EncoderLayer | DecoderLayer,
    theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer,
) -> None:
    if theirs.norm_first != ours.norm_first:
        raise ValueError(
            f"norm_first differs: ours has {ours.norm_first}, theirs has {theirs.norm_first}"
        )
    if getattr(theirs, "activation_relu_or_gelu", 1) != 1:
        raise ValueError("theirs must use activation='relu' like our FeedForward")
    if not theirs.self_attn.batch_first:
        raise ValueError("theirs must be built with batch_first=True, as our layers are")


@torch.no_grad()
def copy_to_torch_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    """Copy our encoder layer into `nn.TransformerEncoderLayer` (norm i = `norm{i+1}`)."""
    _check_torch_layer(ours, theirs)
    copy_to_torch_mha(ours.self_attn, theirs.self_attn)
    _copy_linear("ffn.linear1", ours.ffn.linear1, theirs.linear1)
    _copy_linear("ffn.linear2", ours.ffn.linear2, theirs.linear2)
    _copy_norm("sublayers[0].norm", cast(LayerNorm, ours.sublayers[0].norm), theirs.norm1)
    _copy_norm("sublayers[1].norm", cast(LayerNorm, ours.sublayers[1].norm), theirs.norm2)


@torch.no_grad()
def copy_to_torch_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    """Copy our decoder layer into `nn.TransformerDecoderLayer`; `cross_attn` = `multihead_attn`."""
    _check_torch_layer(ours, theirs)
    copy_to_torch_mha(ours.self_attn, theirs.self_attn)
    copy_to_torch_mha(ours.cross_attn, theirs.multihead_attn)
    _copy_linear("ffn.linear1", ours.ffn.linear1, theirs.linear1)
    _copy_linear("ffn.linear2", ours.ffn.linear2, theirs.linear2)
    for i in range(3):
        our_norm = cast(LayerNorm, ours.sublayers[i].norm)
        _copy_norm(f"sublayers[{i}].norm", our_norm, getattr(theirs, f"norm{i + 1}"))


def _check_stack(
    name: str, ours: Encoder | Decoder, theirs: nn.TransformerEncoder | nn.TransformerDecoder
) -> None:
    if len(ours.layers) != len(theirs.layers):
        raise ValueError(
            f"{name}: ours has {len(ours.layers)} layers, theirs has {len(theirs.layers)}"
        )
    if (ours.norm is None) != (theirs.norm is None):
        raise ValueError(
            f"{name}: final norm differs: ours has {'none' if ours.norm is None else 'one'}, "
            f"theirs has {'none' if theirs.norm is None else 'one'} (build theirs with "
            f"norm=None for post-norm, norm=nn.LayerNorm(d_model) for pre-norm)"
        )


def _copy_stack(
    name: str,
    ours: Encoder | Decoder,
    theirs: nn.TransformerEncoder | nn.TransformerDecoder,
    copy_layer: Callable[[Any, Any], None],
) -> None:
    """Copy a stack layer by layer (errors name the layer), then its final norm if any."""
    _check_stack(name, ours, theirs)
    for i, (our_layer, their_layer) in enumerate(zip(ours.layers, theirs.layers, strict=True)):
        try:
            copy_layer(our_layer, their_layer)
        except ValueError as error:
            raise ValueError(f"{name} layer {i}: {error}") from None
    if ours.norm is not None:
        _copy_norm(f"{name}.norm", ours.norm, cast(nn.LayerNorm, theirs.norm))


@torch.no_grad()
def copy_to_torch_encoder(ours: Encoder, theirs: nn.TransformerEncoder) -> None:
    """Copy our encoder stack into `nn.TransformerEncoder`; final norm only for pre-norm."""
    _copy_stack("encoder", ours, theirs, copy_to_torch_encoder_layer)


@torch.no_grad()
def copy_to_torch_decoder(ours: Decoder, theirs: nn.TransformerDecoder) -> None:
    """Copy our decoder stack into `nn.TransformerDecoder`; final norm only for pre-norm."""
    _copy_stack("decoder", ours, theirs, copy_to_torch_decoder_layer)


@torch.no_grad()
def copy_to_torch_transformer(ours: Transformer, theirs: nn.Transformer) -> None:
    """Copy our encoder and decoder stacks into `nn.Transformer` (no embeddings, no generator).

    `nn.Transformer` always ends each stack with a LayerNorm, which cannot be the identity
    (it rescales by 1/sqrt(1 + eps)), so for a post-norm model this *removes* them.
    """
    if not isinstance(ours, Transformer) or not isinstance(theirs, nn.Transformer):
        raise ValueError(
            f"expected (Transformer, nn.Transformer), got "
            f"({type(ours).__name__}, {type(theirs).__name__})"
        )
    if not ours.config.norm_first:
        theirs.encoder.norm = None
        theirs.decoder.norm = None
    copy_to_torch_encoder(ours.encoder, theirs.encoder)
    copy_to_torch_decoder(ours.decoder, theirs.decoder)


# --------------------------------------------------------------------------------------------
# the matching torch.nn modules
# --------------------------------------------------------------------------------------------


def torch_encoder_layer(
    d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False
) -> nn.TransformerEncoderLayer:
    """`nn.TransformerEncoderLayer` shaped like `EncoderLayer(d_model, n_heads, d_ff, dropout,
    norm_first)`: ReLU, `batch_first=True`."""
    return nn.TransformerEncoderLayer(
        d_model, n_heads, d_ff, dropout=dropout, batch_first=True, norm_first=norm_first
    )


def torch_decoder_layer(
    d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False
) -> nn.TransformerDecoderLayer:
    """`nn.TransformerDecoderLayer` shaped like `DecoderLayer(d_model, n_heads, d_ff, dropout,
    norm_first)`: ReLU, `batch_first=True`."""
    return nn.TransformerDecoderLayer(
        d_model, n_heads, d_ff, dropout=dropout, batch_first=True, norm_first=norm_first
    )


def _layer_sizes(config: TransformerConfig) -> tuple[int, int, int, float, bool]:
    if not isinstance(config, TransformerConfig):
        raise ValueError(f"config must be a TransformerConfig, got {type(config).__name__}")
    return config.d_model, config.n_heads, config.d_ff, config.dropout, config.norm_first


def torch_encoder(
    config: TransformerConfig, enable_nested_tensor: bool = False
) -> nn.TransformerEncoder:
    """`nn.TransformerEncoder` like `Encoder(config)`, final LayerNorm only for pre-norm.

    `enable_nested_tensor` is off, so padded positions are computed, as ours.
    """
    norm = nn.LayerNorm(config.d_model) if config.norm_first else None
    return nn.TransformerEncoder(
        torch_encoder_layer(*_layer_sizes(config)),
        config.n_layers,
        norm=norm,
        enable_nested_tensor=enable_nested_tensor,
    )


def torch_decoder(config: TransformerConfig) -> nn.TransformerDecoder:
    """`nn.TransformerDecoder` like `Decoder(config)` (final LayerNorm only for pre-norm)."""
    norm = nn.LayerNorm(config.d_model) if config.norm_first else None
    return nn.TransformerDecoder(
        torch_decoder_layer(*_layer_sizes(config)), config.n_layers, norm=norm
    )


def torch_transformer(config: TransformerConfig) -> nn.Transformer:
    """`nn.Transformer` with `config`'s sizes, dropout and `norm_first`; final norms always."""
    d_model, n_heads, d_ff, dropout, norm_first = _layer_sizes(config)
    with warnings.catch_warnings():  # pre-norm: "enable_nested_tensor is True, but ..."
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        return nn.Transformer(
            d_model=d_model,
            nhead=n_heads,
            num_encoder_layers=config.n_layers,
            num_decoder_layers=config.n_layers,
            dim_feedforward=d_ff,
            dropout=dropout,
            batch_first=True,
            norm_first=norm_first,
        )
