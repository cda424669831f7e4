"""The encoder alone as a language model: BERT (for notebook 17, being written: issue #29).

`Bert` is the book's `EncoderLayer` stack (notebook 07) with BERT's options: post-norm, GELU,
learned positions, segment (token type) embeddings, a LayerNorm on the embeddings and ε = 1e-12.
It is trained by masked language modelling (`mask_tokens`, the 80/10/10 rule) and fine-tuned as
a `BertClassifier` on the pooled [CLS] position. The functions at the end map the weights to
and from Hugging Face's `BertModel` / `BertForMaskedLM` (read by attribute and key names:
`utils` does not import `transformers` except in `bert_to_hf`, which builds one).

The special ids are the book's (`utils.vocab`): `<pad>` 0, `<bos>` 1 plays [CLS], `<eos>` 2
plays [SEP], `<unk>` 3, and `MASK_ID` = 4 is [MASK]. Shapes: token ids `(B, S)`, hidden
states `(B, S, d_model)`, MLM logits `(B, S, vocab_size)`, class logits `(B, n_classes)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    check_token_ids,
    check_token_range,
)
from utils.embeddings import LearnedPositionalEncoding, TokenEmbedding, tie_weights
from utils.fast import use_fast_path
from utils.layers import ACTIVATIONS, EncoderLayer, LayerNorm, init_weights_, make_activation
from utils.model import Generator
from utils.vocab import BOS_ID, EOS_ID, FIRST_TOKEN_ID, PAD_ID, UNK_ID, Vocab

__all__ = [
    "CLS_ID",
    "SEP_ID",
    "MASK_ID",
    "MASK_TOKEN",
    "SECTIONS",
    "BOOK_SECTIONS",
    "BertConfig",
    "BertEmbedding",
    "Bert",
    "BertClassifier",
    "check_bert_input",
    "bert_vocab",
    "encode_verses",
    "mask_tokens",
    "mlm_loss",
    "bag_of_words",
    "config_from_hf",
    "config_to_hf",
    "hf_key_map",
    "load_hf_state_dict",
    "bert_from_hf",
    "state_dict_to_hf",
    "bert_to_hf",
]

CLS_ID, SEP_ID = BOS_ID, EOS_ID  # [CLS] opens every input, [SEP] closes each segment
MASK_ID = FIRST_TOKEN_ID  # [MASK]: the first id after the book's four specials
MASK_TOKEN = "<mask>"
SPECIAL_IDS = (PAD_ID, CLS_ID, SEP_ID, UNK_ID, MASK_ID)  # never chosen as a random replacement

# The labelled task of notebook 17: the section of the Bible a verse comes from.
SECTIONS = ("law", "history", "wisdom", "prophets", "gospels", "letters")
_SECTION_BOOKS = {
    "law": "Gen Exod Lev Num Deut",
    "history": "Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Acts",
    "wisdom": "Job Ps Prov Eccl Song",
    "prophets": "Isa Jer Lam Ezek Dan Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech Mal Rev",
    "gospels": "Matt Mark Luke John",
    "letters": "Rom 1Cor 2Cor Gal Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus Phlm Heb Jas 1Pet "
    "2Pet 1John 2John 3John Jude",
}
BOOK_SECTIONS: dict[str, int] = {
    book: SECTIONS.index(section)
    for section, books in _SECTION_BOOKS.items()
    for book in books.split()
}


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of BERT; shared names as `utils.model.TransformerConfig` (CONVENTIONS).

    Always post-norm with learned positions (BERT's choices, so no `norm_first`, `positional`
    fields). `n_segments`: the token-type vocabulary (2: sentence A and B). `norm_eps`: every
    LayerNorm's ε (BERT's 1e-12). `activation`: the FFN's and the MLM head's ("gelu", exact).
    `tie_embeddings`: the MLM output layer reads the token embedding matrix. `n_classes`: the
    classes of a `BertClassifier` (unused by `Bert`). `fused`: PyTorch's attention kernel.
    """

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 512
    n_layers: int = 4
    dropout: float = 0.1
    max_len: int = 128
    n_segments: int = 2
    norm_eps: float = 1e-12
    activation: str = "gelu"
    tie_embeddings: bool = True
    pad_id: int = PAD_ID
    n_classes: int = 2
    fused: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("n_segments", self.n_segments)
        check_positive_int("n_classes", self.n_classes)
        check_head_dims(self.d_model, self.n_heads)
        check_dropout(self.dropout)
        check_positive_float("norm_eps", self.norm_eps)
        for name in ("tie_embeddings", "fused"):
            check_bool(name, getattr(self, name))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, int):
            raise ValueError(f"pad_id must be an int, got {self.pad_id!r}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id must be in [0, {self.vocab_size}), got {self.pad_id}")

    def replace(self, **changes: Any) -> BertConfig:
        """A copy with some fields changed (validated again), e.g. `replace(n_classes=6)`."""
        return dataclasses.replace(self, **changes)


def _check_config(config: object) -> BertConfig:
    if not isinstance(config, BertConfig):
        raise ValueError(f"config must be a BertConfig, got {type(config).__name__}")
    return config


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------


def check_bert_input(
    tokens: object,
    segments: object,
    attention_mask: object,
    config: BertConfig,
) -> tuple[Tensor, Tensor]:
    """Check a BERT input at the door; returns `(segments, attention_mask)` with defaults.

    `tokens (B, S)` ids in `[0, vocab_size)`, `S <= max_len`; `segments` `(B, S)` ids in
    `[0, n_segments)` (default: all 0); `attention_mask` `(B, S)` bool, `True` = a real token
    (default: `tokens != pad_id`), at least one per sequence. `ValueError` otherwise.
    """
    check_token_ids(tokens)
    assert isinstance(tokens, Tensor)  # for mypy: checked above
    check_token_range(tokens, config.vocab_size)
    batch, length = tokens.shape
    if length == 0 or length > config.max_len:
        raise ValueError(f"tokens must have 1 to max_len={config.max_len} positions, got {length}")
    if segments is None:
        segments = torch.zeros_like(tokens)
    check_token_ids(segments, "segments")
    assert isinstance(segments, Tensor)
    if segments.shape != tokens.shape:
        raise ValueError(
            f"segments must have the shape of tokens {tuple(tokens.shape)}, "
            f"got {tuple(segments.shape)}"
        )
    check_token_range(segments, config.n_segments, "segments")
    if attention_mask is None:
        attention_mask = tokens != config.pad_id
    if not isinstance(attention_mask, Tensor) or attention_mask.dtype != torch.bool:
        got = attention_mask.dtype if isinstance(attention_mask, Tensor) else type(attention_mask)
        raise ValueError(f"attention_mask must be a bool tensor (True = real token), got {got}")
    if attention_mask.shape != tokens.shape:
        raise ValueError(
            f"attention_mask must have the shape of tokens (batch, seq) = {(batch, length)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    if attention_mask.device.type == "cpu" and not bool(attention_mask.any(dim=1).all()):
        raise ValueError("attention_mask must keep at least one position of every sequence")
    return segments, attention_mask


class BertEmbedding(nn.Module):
    """`LayerNorm(token + position + segment)`, then dropout: `(B, S)` ids -> `(B, S, d_model)`.

    No √d_model scale (BERT's lookup is not scaled); the LayerNorm sets the scale instead.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.token = TokenEmbedding(config.vocab_size, config.d_model, scale=False)
        self.position = LearnedPositionalEncoding(config.d_model, config.max_len)
        self.segment = nn.Embedding(config.n_segments, config.d_model)
        self.norm = LayerNorm(config.d_model, eps=config.norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, tokens: Tensor, segments: Tensor) -> Tensor:
        """`tokens`, `segments` `(B, S)` (checked by the caller) -> `(B, S, d_model)`."""
        positions = self.position.embedding.weight[: tokens.shape[1]]  # (S, d_model)
        x = self.token.lookup(tokens) + positions + self.segment(segments)
        return self.dropout(self.norm(x))


class Bert(Pretrained, nn.Module):
    """BERT: embeddings, `n_layers` post-norm `EncoderLayer`s, the pooler and the MLM head.

    `encode(tokens, segments, attention_mask)` -> hidden `(B, S, d_model)`; `forward` -> MLM
    logits `(B, S, vocab_size)`; `pool(hidden)` -> `tanh(W h_[CLS] + b)` `(B, d_model)`.
    No mask hides the future: every position attends to every real token (bidirectional).
    """

    kind = "bert"
    config_class = BertConfig
    runtime_fields = ("fused",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config = _check_config(config)
        self.embed = BertEmbedding(config)
        self.layers = nn.ModuleList(
            EncoderLayer(
                config.d_model,
                config.n_heads,
                config.d_ff,
                config.dropout,
                norm_first=False,
                activation=config.activation,
                eps=config.norm_eps,
            )
            for _ in range(config.n_layers)
        )
        self.pooler = nn.Linear(config.d_model, config.d_model)
        # the MLM head: transform (dense, GELU, LayerNorm), then the (tied) output layer
        self.transform = nn.Linear(config.d_model, config.d_model)
        self.transform_act = make_activation(config.activation)
        self.transform_norm = LayerNorm(config.d_model, eps=config.norm_eps)
        self.generator = Generator(config.d_model, config.vocab_size, bias=True)
        if config.tie_embeddings:
            tie_weights(self.generator.proj, self.embed.token)
        self.reset_parameters()
        if config.fused:
            use_fast_path(self)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Xavier-uniform matrices, zero biases; the three embedding tables N(0, 0.02²).

        BERT's `initializer_range`. The tables must share one scale: they are summed before
        the LayerNorm, and a token table far smaller than the position and segment tables
        (the book's other defaults: N(0, 1/d_model), N(0, 1/2), N(0, 1)) is drowned by them,
        so every sequence looks alike to the layers and a classifier cannot fit its labels.
        """
        init_weights_(self, zero_biases=True, skip=self.embed.parameters())
        for table in (self.embed.token, self.embed.position.embedding, self.embed.segment):
            nn.init.normal_(table.weight, std=0.02)

    def encode(
        self,
        tokens: Tensor,
        segments: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        """`tokens (B, S)` -> hidden states `(B, S, d_model)` (see `check_bert_input`)."""
        segments, attention_mask = check_bert_input(tokens, segments, attention_mask, self.config)
        x = self.embed(tokens, segments)
        mask = attention_mask[:, None, None, :]  # (B, 1, 1, S): every query sees the real keys
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def pool(self, hidden: Tensor) -> Tensor:
        """`hidden (B, S, d_model)` -> `tanh(W h_0 + b)` `(B, d_model)`, h_0 at [CLS]."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """`hidden (B, S, d_model)` -> logits `(B, S, vocab_size)` of the MLM head."""
        return self.generator(self.transform_norm(self.transform_act(self.transform(hidden))))

    def forward(
        self,
        tokens: Tensor,
        segments: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        """`tokens (B, S)` -> MLM logits `(B, S, vocab_size)`."""
        return self.mlm_logits(self.encode(tokens, segments, attention_mask))


class BertClassifier(Pretrained, nn.Module):
    """`Bert` with a linear layer on the pooled [CLS] state: `(B, S)` -> logits `(B, n_classes)`.

    As `BertForSequenceClassification`: `classifier(dropout(pool(encode(tokens))))`.
    """

    kind = "bert-classifier"
    config_class = BertConfig
    runtime_fields = ("fused",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config = _check_config(config)
        self.bert = Bert(config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.n_classes)
        nn.init.xavier_uniform_(self.classifier.weight)
        nn.init.zeros_(self.classifier.bias)

    @classmethod
    def from_bert(cls, bert: Bert, n_classes: int) -> BertClassifier:
        """A classifier whose encoder starts as a copy of `bert`'s weights (fine-tuning)."""
        if not isinstance(bert, Bert):
            raise ValueError(f"bert must be a utils.bert.Bert, got {type(bert).__name__}")
        model = cls(bert.config.replace(n_classes=n_classes))
        model.bert.load_state_dict(bert.state_dict())
        return model

    def forward(
        self,
        tokens: Tensor,
        segments: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        """`tokens (B, S)` -> class logits `(B, n_classes)`."""
        pooled = self.bert.pool(self.bert.encode(tokens, segments, attention_mask))
        return self.classifier(self.dropout(pooled))


# --------------------------------------------------------------------------------------------
# data: vocabulary, masking, the MLM loss, bag of words
# --------------------------------------------------------------------------------------------


def bert_vocab(texts: Iterable[str], size: int) -> Vocab:
    """A word `Vocab` of `size` ids: the four specials, `<mask>` (= `MASK_ID`), then the
    `size - 5` most frequent words of `texts` (ties alphabetical)."""
    check_positive_int("size", size)
    if size <= MASK_ID + 1:
        raise ValueError(f"size must leave room for words after the 5 special ids, got {size}")
    words = Vocab.build(texts).itos[FIRST_TOKEN_ID:]
    return Vocab([MASK_TOKEN, *[w for w in words if w != MASK_TOKEN][: size - MASK_ID - 1]])


def encode_verses(vocab: Vocab, texts: Sequence[str], length: int) -> Tensor:
    """`[CLS] words… [SEP]` per text, cut to `length` and padded with `<pad>` -> `(N, length)`."""
    check_positive_int("length", length)
    if length < 3:
        raise ValueError(f"length must hold [CLS], a word and [SEP] (>= 3), got {length}")
    out = torch.full((len(texts), length), PAD_ID, dtype=torch.long)
    for i, text in enumerate(texts):
        ids = [CLS_ID, *vocab.encode(text)[: length - 2], SEP_ID]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


def mask_tokens(
    tokens: Tensor,
    vocab_size: int,
    generator: torch.Generator,
    p: float = 0.15,
    rates: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> tuple[Tensor, Tensor]:
    """BERT's corruption: `tokens (B, S)` -> `(inputs, targets)`, both `(B, S)`.

    Each ordinary token (not a special id) is chosen with probability `p`; a chosen token is
    replaced by `[MASK]`, by a random ordinary token, or kept, with probabilities `rates`
    (80/10/10). `targets` holds the original id where chosen and `PAD_ID` elsewhere (the loss
    ignores `PAD_ID`).
    """
    check_token_ids(tokens)
    check_token_range(tokens, vocab_size)
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if len(rates) != 3 or min(rates) < 0 or abs(sum(rates) - 1) > 1e-9:
        raise ValueError(f"rates must be three probabilities (mask, random, keep), got {rates!r}")
    if vocab_size <= MASK_ID + 1:
        raise ValueError(
            f"vocab_size must hold ordinary tokens after id {MASK_ID}, got {vocab_size}"
        )
    ordinary = tokens > MASK_ID
    chosen = ordinary & (torch.rand(tokens.shape, generator=generator) < p)
    u = torch.rand(tokens.shape, generator=generator)
    to_mask = chosen & (u < rates[0])
    to_random = chosen & (u >= rates[0]) & (u < rates[0] + rates[1])
    random_ids = torch.randint(MASK_ID + 1, vocab_size, tokens.shape, generator=generator)
    inputs = torch.where(to_mask, torch.full_like(tokens, MASK_ID), tokens)
    inputs = torch.where(to_random, random_ids, inputs)
    targets = torch.where(chosen, tokens, torch.full_like(tokens, PAD_ID))
    return inputs, targets


def mlm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over the chosen positions: `logits (B, S, V)`, `targets (B, S)`."""
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, S, V) and targets (B, S), got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_ID)


def bag_of_words(tokens: Tensor, vocab_size: int) -> Tensor:
    """Word counts per row: `tokens (B, S)` -> `(B, vocab_size)` float, specials not counted."""
    check_token_ids(tokens)
    check_token_range(tokens, vocab_size)
    counts = torch.zeros(tokens.shape[0], vocab_size)
    counts.scatter_add_(1, tokens, torch.ones(tokens.shape))
    counts[:, : MASK_ID + 1] = 0
    return counts


# --------------------------------------------------------------------------------------------
# Hugging Face: BertModel / BertForMaskedLM
# --------------------------------------------------------------------------------------------

_HF_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh"}
_TO_HF_ACTIVATION = {"gelu": "gelu", "relu": "relu", "gelu_tanh": "gelu_new"}


def config_from_hf(hf_config: Any) -> BertConfig:
    """The `BertConfig` of a `transformers.BertConfig` (read by attribute name).

    Refused (`ValueError`): a decoder, relative positions, an activation the book lacks.
    """
    if getattr(hf_config, "is_decoder", False) or getattr(hf_config, "add_cross_attention", False):
        raise ValueError("the book's BERT is an encoder: is_decoder and add_cross_attention False")
    positions = getattr(hf_config, "position_embedding_type", "absolute") or "absolute"
    if positions != "absolute":
        raise ValueError(f"position_embedding_type must be 'absolute', got {positions!r}")
    if hf_config.hidden_act not in _HF_ACTIVATIONS:
        raise ValueError(
            f"hidden_act must be one of {tuple(_HF_ACTIVATIONS)}, got {hf_config.hidden_act!r}"
        )
    dropout = max(hf_config.hidden_dropout_prob, hf_config.attention_probs_dropout_prob)
    return BertConfig(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        n_heads=hf_config.num_attention_heads,
        d_ff=hf_config.intermediate_size,
        n_layers=hf_config.num_hidden_layers,
        dropout=float(dropout),
        max_len=hf_config.max_position_embeddings,
        n_segments=hf_config.type_vocab_size,
        norm_eps=float(hf_config.layer_norm_eps),
        activation=_HF_ACTIVATIONS[hf_config.hidden_act],
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", True)),
        pad_id=int(hf_config.pad_token_id or 0),
    )


def config_to_hf(config: BertConfig, **overrides: Any) -> Any:
    """The `transformers.BertConfig` of a book `BertConfig`; `overrides` go to it."""
    from transformers import BertConfig as HFBertConfig

    _check_config(config)
    fields: dict[str, Any] = dict(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        max_position_embeddings=config.max_len,
        type_vocab_size=config.n_segments,
        layer_norm_eps=config.norm_eps,
        hidden_act=_TO_HF_ACTIVATION[config.activation],
        tie_word_embeddings=config.tie_embeddings,
        pad_token_id=config.pad_id,
        num_labels=config.n_classes,
    )
    fields.update(overrides)
    return HFBertConfig(**fields)


def hf_key_map(n_layers: int) -> dict[str, str]:
    """Hugging Face's `BertModel` / MLM-head parameter names -> the book's (`Bert`).

    Names without the `bert.` prefix; the MLM head's start with `cls.predictions.`.
    """
    check_positive_int("n_layers", n_layers)
    names = {
        "embeddings.word_embeddings.weight": "embed.token.weight",
        "embeddings.position_embeddings.weight": "embed.position.embedding.weight",
        "embeddings.token_type_embeddings.weight": "embed.segment.weight",
        "embeddings.LayerNorm.weight": "embed.norm.weight",
        "embeddings.LayerNorm.bias": "embed.norm.bias",
        "pooler.dense.weight": "pooler.weight",
        "pooler.dense.bias": "pooler.bias",
        "cls.predictions.transform.dense.weight": "transform.weight",
        "cls.predictions.transform.dense.bias": "transform.bias",
        "cls.predictions.transform.LayerNorm.weight": "transform_norm.weight",
        "cls.predictions.transform.LayerNorm.bias": "transform_norm.bias",
        "cls.predictions.decoder.weight": "generator.proj.weight",
        "cls.predictions.decoder.bias": "generator.proj.bias",
    }
    per_layer = {
        "attention.self.query": "self_attn.w_q",
        "attention.self.key": "self_attn.w_k",
        "attention.self.value": "self_attn.w_v",
        "attention.output.dense": "self_attn.w_o",
        "attention.output.LayerNorm": "sublayers.0.norm",  # post-norm: after the residual
        "intermediate.dense": "ffn.linear1",
        "output.dense": "ffn.linear2",
        "output.LayerNorm": "sublayers.1.norm",
    }
    for i in range(n_layers):
        for theirs, ours in per_layer.items():
            for p in ("weight", "bias"):
                names[f"encoder.layer.{i}.{theirs}.{p}"] = f"layers.{i}.{ours}.{p}"
    return names


_GROUPS = ("embeddings.", "encoder.", "pooler.", "cls.predictions.")


@torch.no_grad()
def load_hf_state_dict(model: Bert, state_dict: Mapping[str, Tensor]) -> Bert:
    """Copy a `BertModel` or `BertForMaskedLM` state dict into `model`, in place.

    The embeddings and every layer must be there; the pooler (absent from `BertForMaskedLM`)
    and the MLM head (absent from `BertModel`) are each copied whole or left as they are.
    Unknown keys, half a group, or a shape that differs are a `ValueError` naming the keys.
    """
    if not isinstance(model, Bert):
        raise ValueError(f"model must be a utils.bert.Bert, got {type(model).__name__}")
    state = {
        (k[len("bert.") :] if k.startswith("bert.") else k): v
        for k, v in state_dict.items()
        if not k.endswith(("position_ids", "token_type_ids"))
    }
    if model.config.tie_embeddings:  # the decoder is the word embedding matrix
        state.pop("cls.predictions.decoder.weight", None)
    # the decoder's bias is what the head adds; `cls.predictions.bias` is the same tensor when
    # the embeddings are tied, and an unused copy when not
    state.pop("cls.predictions.bias", None)
    key_map = hf_key_map(model.config.n_layers)
    if model.config.tie_embeddings:
        key_map.pop("cls.predictions.decoder.weight")
    unknown = sorted(set(state) - set(key_map))
    if unknown:
        raise ValueError(f"state dict keys the book's BERT does not have: {unknown[:5]}")
    for group in _GROUPS:
        wanted = {k for k in key_map if k.startswith(group)}
        present = wanted & set(state)
        required = group in ("embeddings.", "encoder.")
        if (present or required) and present != wanted:
            missing = sorted(wanted - present)
            raise ValueError(
                f"state dict lacks {len(missing)} keys of {group!r}, e.g. {missing[:3]}"
            )
    ours = dict(model.named_parameters(remove_duplicate=False))
    for theirs, tensor in state.items():
        target = ours[key_map[theirs]]
        if target.shape != tensor.shape:
            raise ValueError(
                f"{theirs}: expected shape {tuple(target.shape)} for {key_map[theirs]}, "
                f"got {tuple(tensor.shape)}"
            )
        target.copy_(tensor)
    return model


def bert_from_hf(hf_model: nn.Module) -> Bert:
    """The book's `Bert` (float32, evaluation mode) holding a `BertModel`'s or a
    `BertForMaskedLM`'s weights."""
    hf_config = getattr(hf_model, "config", None)
    if hf_config is None or not hasattr(hf_config, "type_vocab_size"):
        raise ValueError(f"hf_model must be a BertModel, got {type(hf_model).__name__}")
    model = Bert(config_from_hf(hf_config))
    load_hf_state_dict(model, {k: v.float() for k, v in hf_model.state_dict().items()})
    return model.eval()


def state_dict_to_hf(model: Bert, prefix: str = "bert.") -> dict[str, Tensor]:
    """The book's `Bert` -> a state dict of Hugging Face's names (copies).

    `prefix="bert."` for `BertForMaskedLM` (which has no pooler: the pooler is left out), `""`
    for `BertModel` (the MLM head is left out).
    """
    if not isinstance(model, Bert):
        raise ValueError(f"model must be a utils.bert.Bert, got {type(model).__name__}")
    if prefix not in ("bert.", ""):
        raise ValueError(
            f"prefix must be 'bert.' (BertForMaskedLM) or '' (BertModel), got {prefix!r}"
        )
    ours = dict(model.named_parameters(remove_duplicate=False))
    out: dict[str, Tensor] = {}
    for theirs, name in hf_key_map(model.config.n_layers).items():
        is_head = theirs.startswith("cls.")
        if (prefix and theirs.startswith("pooler.")) or (not prefix and is_head):
            continue
        out[theirs if is_head else prefix + theirs] = ours[name].detach().clone()
    if prefix:
        out["cls.predictions.bias"] = out["cls.predictions.decoder.bias"]
    return out


def bert_to_hf(model: Bert, **overrides: Any) -> nn.Module:
    """A `transformers.BertForMaskedLM` (evaluation mode) with `model`'s weights; `overrides`
    go to its config (e.g. `attn_implementation="eager"`)."""
    from transformers import BertForMaskedLM

    if not isinstance(model, Bert):
        raise ValueError(f"model must be a utils.bert.Bert, got {type(model).__name__}")
    hf_model = BertForMaskedLM(config_to_hf(model.config, **overrides))
    result = hf_model.load_state_dict(state_dict_to_hf(model), strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"state dict mismatch: missing {missing}, unexpected {result.unexpected_keys}"
        )
    return hf_model.eval()
