"""A trained translator on disk: the model, its BPE vocabulary and its recorded scores.

`tools/train_translation.py --save PATH` writes one file; notebook 12 and the tests read it
back with `load_translator`. Weights are stored in float16 (half the bytes; the model is
loaded back into float32, and a test checks that its BLEU is what the run recorded).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from utils.bpe import BPETokenizer
from utils.model import Transformer, TransformerConfig

FORMAT = "attention-book translator v1"


def save_translator(
    path: str | Path, model: Transformer, tokenizer: BPETokenizer, info: dict[str, Any]
) -> None:
    """Write `model` (float16 weights), `tokenizer` and `info` (recipe, scores) to `path`."""
    state, halves = {}, {}
    for k, v in model.state_dict().items():
        if v.is_floating_point():
            # Tied weights (one matrix under three names) stay one tensor on disk.
            key = (v.data_ptr(), v.shape)
            if key not in halves:
                halves[key] = v.detach().to("cpu", torch.float16)
            v = halves[key]
        state[k] = v.cpu()
    torch.save(
        {"format": FORMAT, "config": dataclasses.asdict(model.config), "state_dict": state,
         "tokenizer": tokenizer.to_str(), "info": dict(info)},
        Path(path),
    )


def load_translator(path: str | Path) -> tuple[Transformer, BPETokenizer, dict[str, Any]]:
    """`(model, tokenizer, info)` from a file written by `save_translator`; model in eval mode.

    Raises:
        ValueError: if the file is not a translator written by `save_translator`.
    """
    try:
        blob = torch.load(Path(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # not a torch file at all (text, a truncated download, ...)
        raise ValueError(f"{path} is not a translator file ({FORMAT!r}): torch.load failed "
                         f"with {type(err).__name__}") from err
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        got = f"format {blob.get('format')!r}" if isinstance(blob, dict) else type(blob).__name__
        raise ValueError(f"{path} is not a translator file ({FORMAT!r}), got {got}")
    missing = {"config", "state_dict", "tokenizer", "info"} - set(blob)
    if missing:
        raise ValueError(f"{path} is a truncated translator file: no {sorted(missing)}")
    model = Transformer(TransformerConfig(**blob["config"]))
    model.load_state_dict({k: v.float() if v.is_floating_point() else v
                           for k, v in blob["state_dict"].items()})
    return model.eval(), BPETokenizer.from_str(blob["tokenizer"]), blob["info"]
