"""utils.checkpoint: one directory format (config.json + model.safetensors) for every model.

Each model family saves and loads back to the same logits, bit for bit in float32; tied
weights are stored once; float16/bfloat16 storage rounds each weight once; the attention
kernel (`fused`) is chosen when loading, not saved; and every kind of bad checkpoint is
refused with an error that names the file.
"""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from utils.checkpoint import (
    CONFIG_FILE,
    FORMAT_VERSION,
    WEIGHTS_FILE,
    config_from_dict,
    read_checkpoint,
    save_pretrained,
)
from utils.gpt import GPT, GPTConfig
from utils.model import Transformer, TransformerConfig
from utils.modern import ModernConfig, ModernLM


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """Every parameter moved off its init, so a loader that drops one is seen."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def transformer() -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(40, 40, d_model=16, n_heads=2, d_ff=32, n_layers=2,
                            tie_embeddings=True, max_len=32)  # fmt: skip
    return perturbed(Transformer(cfg))  # type: ignore[return-value]


def gpt() -> GPT:
    torch.manual_seed(0)
    return perturbed(GPT(GPTConfig(30, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=16)))  # type: ignore[return-value]


def modern(tie: bool = False) -> ModernLM:
    torch.manual_seed(0)
    cfg = ModernConfig(30, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, max_len=16,
                       rope_base=500_000.0, tie_embeddings=tie)  # fmt: skip
    return perturbed(ModernLM(cfg))  # type: ignore[return-value]


def logits(model: torch.nn.Module) -> torch.Tensor:
    tokens = torch.tensor([[1, 5, 7, 9, 3, 2]])
    with torch.no_grad():
        if isinstance(model, Transformer):
            return model(tokens, tokens)
        return model(tokens)


MODELS = {
    "transformer": transformer,
    "gpt": gpt,
    "modern": modern,
    "modern-tied": lambda: modern(tie=True),
}


@pytest.mark.parametrize("name", MODELS)
def test_round_trip_is_exact(name, tmp_path):
    model = MODELS[name]()
    model.save_pretrained(tmp_path / "ckpt", extra={"note": name, "scores": [1.5, 2]})
    loaded = type(model).from_pretrained(tmp_path / "ckpt")
    assert not loaded.training and loaded.config == model.config
    assert torch.equal(logits(loaded), logits(model))
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    header = read_checkpoint(tmp_path / "ckpt")
    assert header["kind"] == type(model).kind and header["format_version"] == FORMAT_VERSION
    assert header["extra"] == {"note": name, "scores": [1.5, 2]}
    assert "fused" not in header["config"]  # a kernel choice, not architecture


def test_tied_weights_are_stored_once_and_stay_tied(tmp_path):
    model = transformer()  # tie_embeddings: one matrix under three names
    model.save_pretrained(tmp_path)
    stored = load_file(tmp_path / WEIGHTS_FILE)
    tied = read_checkpoint(tmp_path)["tied"]
    assert len(stored) + len(tied) == len(model.state_dict()) and len(tied) >= 2
    loaded = Transformer.from_pretrained(tmp_path)
    state = loaded.state_dict()
    for alias, source in tied.items():  # still one matrix, so training moves all names at once
        assert state[alias].data_ptr() == state[source].data_ptr(), alias
    assert len(list(loaded.parameters())) == len(list(model.parameters()))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_storage_rounds_each_weight_once(dtype, tmp_path):
    model = gpt()
    model.save_pretrained(tmp_path / "half", dtype=dtype)
    model.save_pretrained(tmp_path / "full")
    half = GPT.from_pretrained(tmp_path / "half")
    assert next(half.parameters()).dtype == torch.float32  # loads back in float32
    to = getattr(torch, dtype)
    for (k, a), (_, b) in zip(model.state_dict().items(), half.state_dict().items(), strict=True):
        assert torch.equal(a.to(to).float(), b), k
    stored = load_file(tmp_path / "half" / WEIGHTS_FILE)
    assert {t.dtype for t in stored.values()} == {to}  # two bytes a number on disk


def test_the_kernel_is_chosen_when_loading(tmp_path):
    model = gpt()
    model.save_pretrained(tmp_path)
    fused = GPT.from_pretrained(tmp_path, fused=True)
    assert fused.config.fused and not GPT.from_pretrained(tmp_path).config.fused
    torch.testing.assert_close(logits(fused), logits(model), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="saved with the model"):
        GPT.from_pretrained(tmp_path, d_model=32)


def test_another_models_checkpoint_is_refused(tmp_path):
    gpt().save_pretrained(tmp_path)
    with pytest.raises(
        ValueError, match=r"config.json holds a 'gpt' model, not a 'modern'.*GPT.from_pretrained"
    ):
        ModernLM.from_pretrained(tmp_path)


def test_missing_files_are_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        GPT.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        GPT.from_pretrained(tmp_path)
    gpt().save_pretrained(tmp_path)
    (tmp_path / WEIGHTS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing"):
        GPT.from_pretrained(tmp_path)


def edit_config(directory: Path, **changes) -> None:
    path = directory / CONFIG_FILE
    header = json.loads(path.read_text())
    for key, value in changes.items():
        if key.startswith("config."):
            header["config"][key.removeprefix("config.")] = value
        else:
            header[key] = value
    path.write_text(json.dumps(header))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"format_version": FORMAT_VERSION + 1}, "newer than this utils reads"),
        ({"format_version": 0}, "format_version must be 1 or more, got 0"),
        ({"format": "something-else"}, "is not a 'attention-book-checkpoint' config"),
        ({"config.d_model": "16"}, r"GPTConfig.d_model must be <class 'int'>, got '16'"),
        ({"config.tie_embeddings": 1}, r"tie_embeddings must be <class 'bool'>, got 1"),
        ({"config.n_experts": 4}, r"unknown GPTConfig fields \['n_experts'\]"),
        ({"config.fused": True}, r"\['fused'\] are chosen when loading, not saved"),
        ({"dtype": "int8"}, "dtype must be one of"),
    ],
)
def test_bad_configs_are_refused_naming_the_file(changes, message, tmp_path):
    gpt().save_pretrained(tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(ValueError, match=message) as err:
        GPT.from_pretrained(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_a_config_file_that_is_not_json_is_refused(tmp_path):
    gpt().save_pretrained(tmp_path)
    (tmp_path / CONFIG_FILE).write_text("not json {")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_truncated_or_changed_weights_are_refused(damage, tmp_path):
    gpt().save_pretrained(tmp_path)
    weights = tmp_path / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    if damage == "truncate":  # an interrupted download
        data = data[: len(data) // 2]
    else:  # one bit of one weight: safetensors alone would load it
        data[-3] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match the sha256.*truncated or changed"):
        GPT.from_pretrained(tmp_path)


def test_bad_save_arguments(tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of"):
        gpt().save_pretrained(tmp_path, dtype="float64")
    with pytest.raises(ValueError, match="extra must be JSON-serialisable"):
        gpt().save_pretrained(tmp_path, extra={"t": torch.zeros(1)})
    with pytest.raises(ValueError, match="one of the book's models"):
        save_pretrained(torch.nn.Linear(2, 2), tmp_path)


def test_config_from_dict_checks_names_and_types():
    cfg = config_from_dict(ModernConfig, {"vocab_size": 10, "rope_base": 500000, "d_ff": None})
    assert cfg.rope_base == 500000 and cfg.d_ff is None  # an int is a fine float
    assert cfg.ff_dim == cfg.replace(d_ff=cfg.ff_dim).ff_dim  # None resolves, unchanged
    with pytest.raises(ValueError, match=r"needs fields \['vocab_size'\]"):
        config_from_dict(GPTConfig, {"d_model": 16})
    with pytest.raises(ValueError, match="n_kv_heads must be"):
        config_from_dict(ModernConfig, {"vocab_size": 10, "n_kv_heads": 2.0})


def as_version_1(directory: Path, config_renames: dict, weight_renames: dict) -> None:
    """Rewrite a saved checkpoint as format version 1 wrote it: the old names, and
    ModernConfig's defaults filled in (it wrote them into itself before saving)."""
    header = json.loads((directory / CONFIG_FILE).read_text())
    header["format_version"] = 1
    if header["kind"] == "modern":
        resolved = ModernConfig(**header["config"])
        header["config"].update(
            n_kv_heads=resolved.kv_heads, d_k=resolved.key_dim, d_ff=resolved.ff_dim
        )
    header["config"] = {config_renames.get(k, k): v for k, v in header["config"].items()}
    header["tied"] = {weight_renames.get(a, a): weight_renames.get(s, s)
                      for a, s in header["tied"].items()}  # fmt: skip
    tensors = load_file(directory / WEIGHTS_FILE)
    save_file({weight_renames.get(k, k): t for k, t in tensors.items()}, directory / WEIGHTS_FILE)
    header["sha256"] = hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()).hexdigest()
    (directory / CONFIG_FILE).write_text(json.dumps(header))


@pytest.mark.parametrize(
    "name, config_renames, weight_renames",
    [
        ("transformer", {"tie_embeddings": "share_embeddings"}, {}),
        (
            "modern",
            {"norm_eps": "eps", "d_k": "d_head"},
            {"generator.proj.weight": "lm_head.weight"},
        ),
        ("modern-tied", {"norm_eps": "eps"}, {"generator.proj.weight": "lm_head.weight"}),
    ],
)
def test_version_1_files_with_the_old_names_still_load(name, config_renames, weight_renames,
                                                       tmp_path):  # fmt: skip
    model = MODELS[name]()
    model.save_pretrained(tmp_path / "v1")
    as_version_1(tmp_path / "v1", config_renames, weight_renames)
    header = json.loads((tmp_path / "v1" / CONFIG_FILE).read_text())
    assert set(config_renames.values()) <= set(header["config"])  # the old names are there
    loaded = type(model).from_pretrained(tmp_path / "v1")
    assert torch.equal(logits(loaded), logits(model))
    if name == "transformer":
        assert loaded.config == model.config
    else:  # the defaults come back as the numbers version 1 wrote: the same model
        for field in ("kv_heads", "key_dim", "ff_dim", "norm_eps", "tie_embeddings"):
            assert getattr(loaded.config, field) == getattr(model.config, field)


def test_a_version_1_file_with_an_old_and_a_new_name_is_refused(tmp_path):
    transformer().save_pretrained(tmp_path / "v1")
    as_version_1(tmp_path / "v1", {}, {})
    header = json.loads((tmp_path / "v1" / CONFIG_FILE).read_text())
    header["config"]["share_embeddings"] = True  # and tie_embeddings is still there
    (tmp_path / "v1" / CONFIG_FILE).write_text(json.dumps(header))
    with pytest.raises(ValueError, match="both 'share_embeddings' and its new name"):
        Transformer.from_pretrained(tmp_path / "v1")


def test_a_version_1_file_with_a_weight_under_both_names_is_refused(tmp_path):
    modern().save_pretrained(tmp_path / "v1")
    as_version_1(tmp_path / "v1", {"norm_eps": "eps", "d_k": "d_head"}, {})
    tensors = load_file(tmp_path / "v1" / WEIGHTS_FILE)
    tensors["lm_head.weight"] = tensors["generator.proj.weight"].clone()
    save_file(tensors, tmp_path / "v1" / WEIGHTS_FILE)
    header = json.loads((tmp_path / "v1" / CONFIG_FILE).read_text())
    header["sha256"] = hashlib.sha256((tmp_path / "v1" / WEIGHTS_FILE).read_bytes()).hexdigest()
    (tmp_path / "v1" / CONFIG_FILE).write_text(json.dumps(header))
    with pytest.raises(ValueError, match="both its old and its new name"):
        ModernLM.from_pretrained(tmp_path / "v1")
