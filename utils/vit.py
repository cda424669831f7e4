"""The Vision Transformer (notebook 18): patches as tokens, the encoder of notebook 07 unchanged.

An image `(B, C, H, W)` is cut into `(H/p)·(W/p)` patches of `p × p` pixels; each patch,
flattened to `C·p·p` numbers, is mapped to `d_model` by one linear map (`PatchEmbedding`, a
convolution whose kernel and stride are both `p`); a learned `[CLS]` vector goes in front,
learned positions are added, and the book's `EncoderLayer`s (pre-norm, GELU) read the
sequence. The class logits come from `[CLS]`'s final state (Dosovitskiy et al., 2021).

Also here: the 8×8 handwritten digits shipped in `data/` (`load_digits`,
`stratified_split`), the two baselines of the chapter (`SmallCNN`, `LogisticRegression`), a
small training helper (`fit_classifier`, `count_correct`), attention rollout (Abnar & Zuidema,
2020) and Hugging Face's `ViTModel` / `ViTForImageClassification` weights in the book's model
(`from_hf_vit`; `utils` does not import `transformers`: any object with ViT's names works).
"""

from __future__ import annotations

import dataclasses
import gzip
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.checkpoint import Pretrained
from utils.checks import (
    check_bool,
    check_dropout,
    check_head_dims,
    check_positive_float,
    check_positive_int,
)
from utils.corpora import DATA_DIR
from utils.layers import ACTIVATIONS, EncoderLayer, LayerNorm, init_weights_
from utils.model import Generator
from utils.training import History, train, warmup_linear_decay

__all__ = [
    "DIGITS_FILE",
    "load_digits",
    "stratified_split",
    "check_images",
    "patchify",
    "PatchEmbedding",
    "VisionConfig",
    "VisionTransformer",
    "attention_rollout",
    "SmallCNN",
    "LogisticRegression",
    "fit_classifier",
    "count_correct",
    "config_from_hf_vit",
    "hf_vit_key_map",
    "load_hf_vit_state_dict",
    "from_hf_vit",
]

DIGITS_FILE = "digits.csv.gz"


# --------------------------------------------------------------------------------------------
# data: the 8×8 handwritten digits (UCI, via scikit-learn's bundled copy; data/README.md)
# --------------------------------------------------------------------------------------------


def load_digits(path: Path | str | None = None) -> tuple[Tensor, Tensor]:
    """The 1,797 handwritten digits: images `(1797, 1, 8, 8)` float32 in [0, 1], labels `(1797,)`.

    Each pixel is a count of 0..16 "on" pixels in a 4×4 block of a 32×32 bitmap; it is divided
    by 16. `path` defaults to `data/digits.csv.gz` (65 comma-separated integers a line: 64
    pixels, row by row, then the digit). A missing file raises `FileNotFoundError` saying how to
    get it back; a malformed line, `ValueError` naming it.
    """
    path = DATA_DIR / DIGITS_FILE if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"digits file {path} is missing: it ships with the repository (restore it with "
            f"`git checkout -- data/`) or can be rebuilt with `python tools/data/extract_digits.py`"
        )
    with gzip.open(path, "rt", encoding="ascii") as f:
        lines = f.read().split()
    rows = []
    for number, line in enumerate(lines, start=1):
        fields = line.split(",")
        values = [float(v) for v in fields] if len(fields) == 65 else []
        if not values or not all(v.is_integer() and 0 <= v <= 16 for v in values[:64]):
            raise ValueError(
                f"{path}, line {number}: expected 64 pixels in 0..16 and a digit, got {line[:80]!r}"
            )
        if values[64] not in range(10):
            raise ValueError(f"{path}, line {number}: expected a digit 0..9, got {fields[64]!r}")
        rows.append(values)
    if not rows:
        raise ValueError(f"{path}: expected rows of 65 integers, got none")
    table = torch.tensor(rows, dtype=torch.float64)
    images = (table[:, :64] / 16).reshape(-1, 1, 8, 8).float()
    return images, table[:, 64].long()


def stratified_split(
    labels: Tensor, test_fraction: float = 0.3, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Indices `(train, test)`: each class contributes `round(test_fraction · n_class)` to test.

    The draw uses its own `torch.Generator(seed)`, so the split does not depend on (or move)
    the global random state. Both index tensors are sorted.
    """
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.is_floating_point():
        raise ValueError(f"labels must be a 1-D integer tensor, got {_describe(labels)}")
    if not (isinstance(test_fraction, float) and 0 < test_fraction < 1):
        raise ValueError(f"test_fraction must be a float in (0, 1), got {test_fraction!r}")
    generator = torch.Generator().manual_seed(seed)
    test = []
    for c in labels.unique().tolist():
        members = (labels == c).nonzero().flatten()
        shuffled = members[torch.randperm(len(members), generator=generator)]
        test.append(shuffled[: round(test_fraction * len(members))])
    is_test = torch.zeros(len(labels), dtype=torch.bool)
    is_test[torch.cat(test)] = True
    return (~is_test).nonzero().flatten(), is_test.nonzero().flatten()


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__


# --------------------------------------------------------------------------------------------
# patches as tokens
# --------------------------------------------------------------------------------------------


def check_images(
    images: object, patch_size: int, channels: int | None = None, size: int | None = None
) -> None:
    """`ValueError` unless `images` is a float `(B, C, H, W)` tensor with H, W multiples of
    `patch_size` (and, when given, `C == channels`, `H == W == size`)."""
    if not isinstance(images, Tensor) or images.dim() != 4 or not images.is_floating_point():
        raise ValueError(
            f"images must be a float tensor (batch, channels, height, width), got "
            f"{_describe(images)}"
        )
    _, c, h, w = images.shape
    if channels is not None and c != channels:
        raise ValueError(
            f"images must have {channels} channel(s), got {c} (shape {tuple(images.shape)})"
        )
    if h % patch_size or w % patch_size:
        raise ValueError(
            f"image height and width must be multiples of the patch size {patch_size}, got {h}×{w}"
        )
    if size is not None and (h, w) != (size, size):
        raise ValueError(f"images must be {size}×{size} (the config's image_size), got {h}×{w}")


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """`(B, C, H, W)` -> `(B, (H/p)·(W/p), C·p·p)`: patches row by row, each flattened as
    (channel, row, column), the order of a `Conv2d` weight `(d_model, C, p, p)` flattened."""
    check_positive_int("patch_size", patch_size)
    check_images(images, patch_size)
    b, c, h, w = images.shape
    p = patch_size
    x = images.reshape(b, c, h // p, p, w // p, p)  # (B, C, rows, p, cols, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


class PatchEmbedding(nn.Module):
    """A linear map of each `p × p` patch to `d_model`, as a `Conv2d` with kernel = stride = p.

    `(B, C, H, W)` -> `(B, (H/p)·(W/p), d_model)`. Equal to `patchify(images, p) @ W.T + b`
    with `W = proj.weight.reshape(d_model, C·p·p)` (notebook 18 checks it).
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("patch_size", patch_size)):
            check_positive_int(name, value)
        check_positive_int("d_model", d_model)
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` -> `(B, N, d_model)`; the caller checks `images` (`check_images`)."""
        return self.proj(images).flatten(2).transpose(1, 2)


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VisionConfig:
    """Hyper-parameters of a ViT; shared fields mean what they mean in `TransformerConfig`.

    `image_size` (square images) must be a multiple of `patch_size`; the sequence is
    `(image_size / patch_size)² + 1` tokens (`seq_len`: the patches and `[CLS]`). Defaults are
    notebook 18's small model for 8×8 digits. ViT is pre-norm with GELU (`norm_first=True`,
    `activation="gelu"`); `norm_eps` is 1e-6 as in the ViT paper's code (Hugging Face: 1e-12).
    """

    n_classes: int = 10
    image_size: int = 8
    patch_size: int = 2
    in_channels: int = 1
    d_model: int = 32
    n_heads: int = 4
    d_ff: int = 64
    n_layers: int = 2
    dropout: float = 0.1
    norm_first: bool = True
    norm_eps: float = 1e-6
    activation: str = "gelu"

    def __post_init__(self) -> None:
        for name in ("n_classes", "image_size", "patch_size", "in_channels", "d_model"):
            check_positive_int(name, getattr(self, name))
        for name in ("n_heads", "d_ff", "n_layers"):
            check_positive_int(name, getattr(self, name))
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size must be a multiple of patch_size {self.patch_size}, "
                f"got {self.image_size}"
            )
        check_head_dims(self.d_model, self.n_heads)
        check_dropout(self.dropout)
        check_bool("norm_first", self.norm_first)
        check_positive_float("norm_eps", self.norm_eps)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")

    @property
    def n_patches(self) -> int:
        """(image_size / patch_size)²: the number of patch tokens."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_len(self) -> int:
        """The encoder's sequence length: the patches and `[CLS]`."""
        return self.n_patches + 1

    def replace(self, **changes: Any) -> VisionConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


class VisionTransformer(Pretrained, nn.Module):
    """ViT: `forward(images (B, C, H, W))` -> class logits `(B, n_classes)`.

    `patch_embed` (`PatchEmbedding`), `cls_token` `(1, 1, d_model)`, `position` `(1, seq_len,
    d_model)` (learned, one vector per token: `[CLS]` first, then the patches row by row),
    `layers` (the book's `EncoderLayer`s), `norm` (the final LayerNorm when pre-norm),
    `generator` (`[CLS]` -> logits). Matrices start Xavier-uniform, biases at 0, `[CLS]` and
    positions N(0, 0.02²).
    """

    kind = "vit"  # in config.json (utils.checkpoint)
    config_class = VisionConfig

    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        if not isinstance(config, VisionConfig):
            raise ValueError(f"config must be a VisionConfig, got {type(config).__name__}")
        self.config = config
        d = config.d_model
        self.patch_embed = PatchEmbedding(config.in_channels, config.patch_size, d)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.position = nn.Parameter(torch.zeros(1, config.seq_len, d))
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(
                d,
                config.n_heads,
                config.d_ff,
                config.dropout,
                norm_first=config.norm_first,
                activation=config.activation,
                eps=config.norm_eps,
            )
            for _ in range(config.n_layers)
        )
        self.norm = LayerNorm(d, eps=config.norm_eps) if config.norm_first else None
        self.generator = Generator(d, config.n_classes)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Xavier-uniform matrices (the patch kernel too), zero biases, small `[CLS]`/positions."""
        init_weights_(self, zero_biases=True, skip=[self.cls_token, self.position])
        bias = self.patch_embed.proj.bias
        assert bias is not None  # a Conv2d built with bias=True
        nn.init.zeros_(bias)
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.position, std=0.02)

    def encode(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` -> the final hidden states `(B, seq_len, d_model)`, `[CLS]` first
        (Hugging Face's `ViTModel(...).last_hidden_state`); checks `images`."""
        config = self.config
        check_images(images, config.patch_size, config.in_channels, config.image_size)
        x = self.patch_embed(images)  # (B, N, d_model)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.position)
        for layer in self.layers:
            x = layer(x)
        return x if self.norm is None else self.norm(x)

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` -> logits `(B, n_classes)`, read from `[CLS]`."""
        return self.generator(self.encode(images)[:, 0])

    def attention_maps(self) -> list[Tensor]:
        """The last forward's attention weights, one `(B, n_heads, seq_len, seq_len)` per layer
        (the readable backend keeps them; `utils.attention`)."""
        maps = [layer.self_attn.attn_weights for layer in self.layers]  # type: ignore[union-attr]
        if any(m is None for m in maps):
            raise ValueError(
                "expected attention weights from a forward pass on the readable backend, "
                "got none (run the model first, with backend 'readable')"
            )
        return maps  # type: ignore[return-value]


def attention_rollout(attentions: list[Tensor] | tuple[Tensor, ...]) -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): per layer `(B, h, T, T)` -> `(B, T, T)`.

    Each layer's heads are averaged and the residual stream added as half the weight,
    `Â = (mean_h A + I) / 2` (rows still sum to 1), and the layers multiplied from the first:
    `R = Â_L ⋯ Â_1`. Row `i` of `R` says how much of token `i`'s final state traces back to each
    input token, if information mixed only along attention and the residual path.
    """
    if not isinstance(attentions, list | tuple) or not attentions:
        raise ValueError(f"attentions must be a non-empty list of tensors, got {attentions!r}")
    first = attentions[0]
    if not isinstance(first, Tensor) or first.dim() != 4 or first.shape[-1] != first.shape[-2]:
        raise ValueError(f"each attention map must be (batch, heads, T, T), got {_describe(first)}")
    rollout = None
    for i, a in enumerate(attentions):
        if not isinstance(a, Tensor) or a.shape != first.shape:
            raise ValueError(
                f"attention map {i} must have the shape {tuple(first.shape)} of map 0, "
                f"got {_describe(a)}"
            )
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        step = (a.mean(dim=1) + eye) / 2
        rollout = step if rollout is None else step @ rollout
    assert rollout is not None
    return rollout


# --------------------------------------------------------------------------------------------
# baselines and training
# --------------------------------------------------------------------------------------------


class LogisticRegression(nn.Module):
    """Multinomial logistic regression on the raw pixels: `(B, C, H, W)` -> logits `(B, n)`."""

    def __init__(self, n_pixels: int = 64, n_classes: int = 10) -> None:
        super().__init__()
        check_positive_int("n_pixels", n_pixels)
        check_positive_int("n_classes", n_classes)
        self.linear = nn.Linear(n_pixels, n_classes)

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` with C·H·W = n_pixels -> logits `(B, n_classes)`; `ValueError` for
        anything else."""
        check_images(images, 1)
        n_pixels = images[0].numel()
        if n_pixels != self.linear.in_features:
            raise ValueError(
                f"images must have C·H·W = {self.linear.in_features} pixels, got {n_pixels} "
                f"(shape {tuple(images.shape)})"
            )
        return self.linear(images.flatten(1))


class SmallCNN(nn.Module):
    """A small convolutional net: two 3×3 conv blocks (ReLU, the second followed by 2×2 max
    pooling), then a 3×3 conv, global average pooling and a linear layer.

    `(B, C, H, W)` -> logits `(B, n_classes)`. Its priors: locality (3×3 kernels), weight
    sharing across positions, and translation invariance from the pooling.
    """

    def __init__(self, in_channels: int = 1, width: int = 32, n_classes: int = 10) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("width", width)):
            check_positive_int(name, value)
        check_positive_int("n_classes", n_classes)
        self.in_channels = in_channels
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(w, w, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(2 * w, n_classes)

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` -> logits `(B, n_classes)`; `ValueError` for other channels or an
        image smaller than the 2×2 pooling."""
        check_images(images, 1, self.in_channels)
        if min(images.shape[-2:]) < 2:
            raise ValueError(f"images must be at least 2×2, got shape {tuple(images.shape)}")
        return self.classifier(self.features(images).flatten(1))


def _batches(n: int, batch_size: int, seed: int) -> Iterator[Tensor]:
    """Indices of shuffled mini-batches, epoch after epoch (a fresh permutation each epoch)."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


def fit_classifier(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    weight_decay: float = 0.05,
    warmup: int = 50,
    seed: int = 0,
    device: torch.device | str | None = "cpu",
    progress: bool = False,
) -> History:
    """Train `model` with cross-entropy for `steps` AdamW steps (warm-up, linear decay).

    `images` `(N, C, H, W)`, `labels` `(N,)`; batches are drawn with their own generator
    (`seed`), so the run is fixed by the seed and the model's initial weights. `ValueError`
    for labels that are not class indices of the model (one forward pass in eval mode reads
    the number of classes from the logits).
    """
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise ValueError(f"images must be a (N, C, H, W) tensor, got {_describe(images)}")
    if not isinstance(labels, Tensor) or labels.shape != images.shape[:1]:
        raise ValueError(
            f"labels must be a tensor of shape ({images.shape[0]},), got {_describe(labels)}"
        )
    if labels.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise ValueError(f"labels must be class indices (an integer tensor), got {labels.dtype}")
    was_training = model.training
    model.eval()  # no dropout: this one forward pass draws no random numbers
    with torch.no_grad():
        n_classes = model(images[:1].to(next(model.parameters()).device)).shape[-1]
    model.train(was_training)
    if len(labels) and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(
            f"labels must be in [0, {n_classes}) (the model's {n_classes} classes), got "
            f"{labels.min().item()}..{labels.max().item()}"
        )
    check_positive_int("batch_size", batch_size)
    if batch_size > len(labels):
        raise ValueError(f"batch_size must be at most {len(labels)} (the images), got {batch_size}")
    batches = ((images[i], labels[i]) for i in _batches(len(labels), batch_size, seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = warmup_linear_decay(optimizer, warmup, steps)

    def loss_fn(m: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
        return F.cross_entropy(m(batch[0]), batch[1])

    return train(
        model,
        batches,
        loss_fn,
        optimizer,
        scheduler,
        steps=steps,
        device=device,
        log_every=max(1, steps // 20),
        progress=progress,
    )


@torch.no_grad()
def count_correct(model: nn.Module, images: Tensor, labels: Tensor, batch_size: int = 512) -> int:
    """How many of `images` `(N, C, H, W)` the model labels as `labels` `(N,)` (eval mode)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, len(labels), batch_size):
        logits = model(images[start : start + batch_size].to(device))
        correct += int((logits.argmax(-1).cpu() == labels[start : start + batch_size]).sum())
    model.train(was_training)
    return correct


# --------------------------------------------------------------------------------------------
# Hugging Face's ViT (transformers.ViTModel / ViTForImageClassification)
# --------------------------------------------------------------------------------------------

# transformers before 5 named the same tensors differently; both are read
_FORMER_HF = {
    "encoder.layer.": "layers.",
    "attention.attention.query.": "attention.q_proj.",
    "attention.attention.key.": "attention.k_proj.",
    "attention.attention.value.": "attention.v_proj.",
    "attention.output.dense.": "attention.o_proj.",
    "intermediate.dense.": "mlp.fc1.",
    "output.dense.": "mlp.fc2.",
}


def config_from_hf_vit(hf_config: Any) -> VisionConfig:
    """The `VisionConfig` of a `transformers.ViTConfig` (read by attribute name).

    Refused with a `ValueError`: what the book's model lacks (non-square images, no q/k/v
    bias, an activation it does not have, two dropout probabilities).
    """
    image = hf_config.image_size
    patch = hf_config.patch_size
    for name, value in (("image_size", image), ("patch_size", patch)):
        if isinstance(value, list | tuple):
            if len(value) != 2 or value[0] != value[1]:
                raise ValueError(f"{name} must be square, got {value!r}")
    image = image[0] if isinstance(image, list | tuple) else image
    patch = patch[0] if isinstance(patch, list | tuple) else patch
    if not getattr(hf_config, "qkv_bias", True):
        raise ValueError("the book's attention has q/k/v biases: expected qkv_bias=True, got False")
    act = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
    if hf_config.hidden_act not in act and hf_config.hidden_act != "relu":
        raise ValueError(
            f"hidden_act must be one of {sorted([*act, 'relu'])}, got {hf_config.hidden_act!r}"
        )
    hidden, attention = hf_config.hidden_dropout_prob, hf_config.attention_probs_dropout_prob
    if hidden != attention:
        raise ValueError(
            f"the book uses one dropout: expected hidden_dropout_prob == "
            f"attention_probs_dropout_prob, got {hidden} and {attention}"
        )
    return VisionConfig(
        n_classes=getattr(hf_config, "num_labels", 2),
        image_size=int(image),
        patch_size=int(patch),
        in_channels=hf_config.num_channels,
        d_model=hf_config.hidden_size,
        n_heads=hf_config.num_attention_heads,
        d_ff=hf_config.intermediate_size,
        n_layers=hf_config.num_hidden_layers,
        dropout=float(hidden),
        norm_eps=float(hf_config.layer_norm_eps),
        activation=act.get(hf_config.hidden_act, "relu"),
    )


def hf_vit_key_map(n_layers: int) -> dict[str, str]:
    """Hugging Face's ViT parameter names (transformers 5, without the `vit.` prefix) -> the
    book's, for a model of `n_layers` layers."""
    names = {
        "embeddings.cls_token": "cls_token",
        "embeddings.position_embeddings": "position",
        "embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
        "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
        "layernorm.weight": "norm.weight",
        "layernorm.bias": "norm.bias",
        "classifier.weight": "generator.proj.weight",
        "classifier.bias": "generator.proj.bias",
    }
    per_layer = {
        "layernorm_before": "sublayers.0.norm",
        "attention.q_proj": "self_attn.w_q",
        "attention.k_proj": "self_attn.w_k",
        "attention.v_proj": "self_attn.w_v",
        "attention.o_proj": "self_attn.w_o",
        "layernorm_after": "sublayers.1.norm",
        "mlp.fc1": "ffn.linear1",
        "mlp.fc2": "ffn.linear2",
    }
    for i in range(n_layers):
        for theirs, ours in per_layer.items():
            for kind in ("weight", "bias"):
                names[f"layers.{i}.{theirs}.{kind}"] = f"layers.{i}.{ours}.{kind}"
    return names


def _hf_name(key: str) -> str:
    """A transformers state-dict key without `vit.`, in transformers 5's naming."""
    key = key.removeprefix("vit.")
    for old, new in _FORMER_HF.items():
        key = key.replace(old, new)
    return key


@torch.no_grad()
def load_hf_vit_state_dict(
    model: VisionTransformer, state_dict: Mapping[str, Tensor]
) -> VisionTransformer:
    """Copy a `ViTModel` or `ViTForImageClassification` state dict into `model`, in place.

    The pooler of `ViTModel` (a tanh layer on `[CLS]` that the classifier does not use) is
    skipped; without a `classifier`, `model.generator` keeps its weights. Every other key must
    be used and every other parameter filled, with the shape it has; else `ValueError`.
    """
    names = hf_vit_key_map(model.config.n_layers)
    ours = model.state_dict()
    filled = set()
    for key, tensor in state_dict.items():
        name = _hf_name(key)
        if name.startswith("pooler."):
            continue
        if name not in names:
            raise ValueError(f"unexpected key {key!r}: the book's ViT has no such parameter")
        target = names[name]
        if ours[target].shape != tensor.shape:
            raise ValueError(
                f"{key}: expected shape {tuple(ours[target].shape)} for {target}, "
                f"got {tuple(tensor.shape)}"
            )
        ours[target].copy_(tensor)
        filled.add(target)
    missing = set(ours) - filled - {"generator.proj.weight", "generator.proj.bias"}
    if missing:
        raise ValueError(f"expected every parameter in the state dict, missing {sorted(missing)}")
    return model


def from_hf_vit(hf_model: nn.Module) -> VisionTransformer:
    """The book's `VisionTransformer` with the weights of a transformers ViT (eval mode, the
    dtype of the weights)."""
    config = config_from_hf_vit(hf_model.config)
    dtype = next(hf_model.parameters()).dtype
    model = VisionTransformer(config).to(dtype)
    load_hf_vit_state_dict(model, hf_model.state_dict())
    return model.eval()
