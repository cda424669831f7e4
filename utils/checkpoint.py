"""One checkpoint format for every model of the book: a directory with a config and weights.

    directory/
        config.json          {"format", "format_version", "kind", "model_class", "config",
                              "dtype", "tied", "sha256", "extra"}
        model.safetensors    the weights, one tensor per name (tied weights stored once)

This is the layout of the ecosystem (Hugging Face's `save_pretrained`): the weights are
safetensors, a header and raw numbers, so loading one can run no code (a pickled `torch.save`
file can). `config.json` names the model kind and its hyper-parameters; the model classes
(`Transformer`, `GPT`, `ModernLM`) inherit `save_pretrained`/`from_pretrained` from
`Pretrained` below. Fields that only choose how a model computes (`fused`: which attention
kernel) are not saved: they are chosen when loading (`from_pretrained(directory, fused=True)`).

Version 1 files (before the three configs shared one vocabulary) still load: each class lists
its `former_names` (old config field or weight name -> new), applied to version 1 only.

One error policy: a missing directory or file is `FileNotFoundError` naming it; everything
else wrong (another model's checkpoint, a newer format version, a config field of the wrong
type, a weights file truncated or changed since it was saved) is `ValueError` naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "STORAGE_DTYPES",
    "Pretrained",
    "save_pretrained",
    "load_pretrained",
    "read_checkpoint",
    "config_from_dict",
]

FORMAT = "attention-book-checkpoint"
FORMAT_VERSION = 2  # 2: one vocabulary of config names (docs/CONVENTIONS.md); 1 is still read
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

M = TypeVar("M", bound="Pretrained")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_kind(model: object) -> str:
    kind = getattr(type(model), "kind", None)
    config = getattr(model, "config", None)
    if not isinstance(model, nn.Module) or not isinstance(kind, str):
        raise ValueError(
            f"model must be one of the book's models (Transformer, GPT, ModernLM), "
            f"got {type(model).__name__}"
        )
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise ValueError(f"{type(model).__name__}.config must be a dataclass instance")
    return kind


def save_pretrained(
    model: nn.Module,
    directory: str | Path,
    *,
    dtype: str = "float32",
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write `model`'s config and weights to `directory` (created if missing); return it.

    `dtype` is the storage precision of floating-point tensors ("float32", "float16" or
    "bfloat16"; a model loads back in float32 either way). `extra` is any JSON-serialisable
    dict (a recipe, scores) kept in `config.json` and returned by `read_checkpoint`.
    """
    kind = _check_kind(model)
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(STORAGE_DTYPES)}, got {dtype!r}")
    runtime = set(getattr(type(model), "runtime_fields", ()))
    fields = dataclasses.asdict(model.config)  # type: ignore[call-overload]
    config = {k: v for k, v in fields.items() if k not in runtime}
    extra = dict(extra or {})
    try:
        json.dumps(extra)
    except TypeError as err:
        raise ValueError(f"extra must be JSON-serialisable (plain Python values): {err}") from None
    tensors: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    first: dict[tuple, str] = {}  # where in memory -> the first name stored for it
    for name, t in model.state_dict().items():
        where = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride())
        if where in first:  # a tied weight: one matrix under two names is stored once
            tied[name] = first[where]
            continue
        first[where] = name
        t = t.detach().to("cpu")
        if t.is_floating_point():
            t = t.to(STORAGE_DTYPES[dtype])
        tensors[name] = t.contiguous()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / WEIGHTS_FILE
    save_file(tensors, weights, metadata={"format": FORMAT, "kind": kind})
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "model_class": type(model).__name__,
        "config": config,
        "dtype": dtype,
        "tied": tied,
        "sha256": _sha256(weights),  # a truncated or edited weights file no longer matches
        "extra": extra,
    }
    (directory / CONFIG_FILE).write_text(json.dumps(header, indent=2) + "\n", encoding="utf-8")
    return directory


def read_checkpoint(directory: str | Path) -> dict[str, Any]:
    """The checked contents of `directory/config.json` (format, kind, config, extra, ...)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no checkpoint directory {directory}")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {directory} is not a saved model")
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise ValueError(f"{path} is not a {FORMAT!r} config (format {got!r})")
    version = header.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"{path}: format_version must be an int, got {version!r}")
    if version < 1:
        raise ValueError(f"{path}: format_version must be 1 or more, got {version}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} has format_version {version}, newer than this utils reads "
            f"({FORMAT_VERSION}): update the book's code"
        )
    expected = {
        "kind": str,
        "config": dict,
        "dtype": str,
        "tied": dict,
        "sha256": str,
        "extra": dict,
    }
    for key, kind in expected.items():
        if not isinstance(header.get(key), kind):
            raise ValueError(
                f"{path}: field {key!r} must be a {kind.__name__}, got {header.get(key)!r}"
            )
    if header["dtype"] not in STORAGE_DTYPES:
        raise ValueError(f"{path}: dtype must be one of {sorted(STORAGE_DTYPES)}")
    return header


def _field_ok(value: object, annotation: Any) -> bool:
    """Whether a JSON value fits a field annotation (int, float, bool, str, X | None)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(_field_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:  # JSON writes 1.0 as 1.0, but a hand-edited 1 is fine too
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return True  # a field type this check does not know: the config's own checks decide


def config_from_dict(config_class: type, data: Mapping[str, Any], source: str = "config") -> Any:
    """`config_class(**data)` after checking every field's name and JSON type.

    `ValueError` naming `source` for an unknown or missing field or a value of the wrong type
    (the config's own `__post_init__` then checks ranges).
    """
    hints = typing.get_type_hints(config_class)
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{source}: unknown {config_class.__name__} fields {unknown}")
    required = [
        n
        for n, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [n for n in required if n not in data]
    if missing:
        raise ValueError(f"{source}: {config_class.__name__} needs fields {missing}")
    for name, value in data.items():
        if not _field_ok(value, hints[name]):
            raise ValueError(
                f"{source}: {config_class.__name__}.{name} must be {hints[name]}, got {value!r}"
            )
    return config_class(**data)


def load_pretrained(model_class: type[M], directory: str | Path, **runtime: Any) -> M:
    """The `model_class` saved in `directory`, in float32, evaluation mode, on the CPU.

    `runtime` sets fields that are not saved (`model_class.runtime_fields`, e.g. `fused`).
    """
    directory = Path(directory)
    header = read_checkpoint(directory)
    path = directory / CONFIG_FILE
    if header["kind"] != model_class.kind:
        raise ValueError(
            f"{path} holds a {header['kind']!r} model, not a {model_class.kind!r} "
            f"({model_class.__name__}): load it with "
            f"{header.get('model_class', 'its class')}.from_pretrained"
        )
    not_runtime = sorted(set(runtime) - set(model_class.runtime_fields))
    if not_runtime:
        raise ValueError(
            f"only {list(model_class.runtime_fields)} can be chosen when loading; "
            f"{not_runtime} are saved with the model"
        )
    if header["format_version"] < 2:
        header = _rename_v1(header, model_class.former_names, path)
    saved_runtime = sorted(set(header["config"]) & set(model_class.runtime_fields))
    if saved_runtime:
        raise ValueError(f"{path}: {saved_runtime} are chosen when loading, not saved")
    config = config_from_dict(
        model_class.config_class, {**header["config"], **runtime}, source=str(path)
    )
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} is missing")
    if _sha256(weights) != header["sha256"]:
        raise ValueError(
            f"{weights} does not match the sha256 in {path}: the file was truncated or "
            "changed after it was saved"
        )
    try:
        tensors = load_file(weights)
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{weights} is not a readable safetensors file: {err}") from None
    if header["format_version"] < 2:
        renamed = {model_class.former_names.get(k, k): t for k, t in tensors.items()}
        if len(renamed) != len(tensors):
            raise ValueError(f"{weights} holds a weight under both its old and its new name")
        tensors = renamed
    for alias, source in header["tied"].items():
        if source not in tensors:
            raise ValueError(f"{path}: tied weight {alias!r} points at missing {source!r}")
        tensors[alias] = tensors[source]
    model = typing.cast(nn.Module, model_class(config))  # type: ignore[call-arg]
    expected = model.state_dict()
    if set(tensors) != set(expected):
        raise ValueError(
            f"{weights} does not fit {model_class.__name__}: missing "
            f"{sorted(set(expected) - set(tensors))[:5]}, unexpected "
            f"{sorted(set(tensors) - set(expected))[:5]}"
        )
    for name, t in tensors.items():
        if t.shape != expected[name].shape:
            raise ValueError(
                f"{weights}: {name} has shape {tuple(t.shape)}, the config makes "
                f"{tuple(expected[name].shape)}"
            )
    model.load_state_dict(
        {k: t.to(expected[k].dtype) if t.is_floating_point() else t for k, t in tensors.items()}
    )
    return typing.cast(M, model.eval())


def _rename_v1(header: dict[str, Any], former: Mapping[str, str], path: Path) -> dict[str, Any]:
    """A version 1 header with its config fields and tied weight names renamed by `former`."""
    config = {}
    for name, value in header["config"].items():
        new = former.get(name, name)
        if new in config:
            raise ValueError(f"{path}: config has both {name!r} and its new name {new!r}")
        config[new] = value
    tied = {former.get(a, a): former.get(s, s) for a, s in header["tied"].items()}
    return {**header, "config": config, "tied": tied}


class Pretrained:
    """`save_pretrained` and `from_pretrained` for a model class with a dataclass `config`.

    A class sets `kind` (the name written in `config.json`), `config_class`,
    `runtime_fields` (config fields chosen at load time, not saved) and `former_names`
    (config fields and weights renamed since format version 1: old name -> new).
    """

    kind: ClassVar[str]
    config_class: ClassVar[type]
    runtime_fields: ClassVar[tuple[str, ...]] = ()
    former_names: ClassVar[Mapping[str, str]] = {}

    def save_pretrained(
        self,
        directory: str | Path,
        *,
        dtype: str = "float32",
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write config and weights to `directory` (`utils.checkpoint.save_pretrained`)."""
        return save_pretrained(self, directory, dtype=dtype, extra=extra)  # type: ignore[arg-type]

    @classmethod
    def from_pretrained(cls: type[M], directory: str | Path, **runtime: Any) -> M:
        """The model saved in `directory`, in eval mode (`utils.checkpoint.load_pretrained`)."""
        return load_pretrained(cls, directory, **runtime)
