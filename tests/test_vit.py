"""The Vision Transformer (utils.vit): patch embedding = patchify + matmul, parity with
transformers' ViTModel and ViTForImageClassification (random configs, float64, offline), the
digits data and split, attention rollout, baselines, and bad input."""

import gzip

import pytest
import torch

from utils.layers import EncoderLayer
from utils.vit import (
    LogisticRegression,
    PatchEmbedding,
    SmallCNN,
    VisionConfig,
    VisionTransformer,
    attention_rollout,
    config_from_hf_vit,
    count_correct,
    fit_classifier,
    from_hf_vit,
    load_digits,
    load_hf_vit_state_dict,
    patchify,
    stratified_split,
)

# --------------------------------------------------------------------------------------------
# patches as tokens
# --------------------------------------------------------------------------------------------


def test_patch_embedding_is_patchify_then_matmul():
    torch.manual_seed(0)
    embed = PatchEmbedding(3, 4, 10).double()
    images = torch.randn(2, 3, 12, 8, dtype=torch.float64)
    weight = embed.proj.weight.reshape(10, 3 * 4 * 4)
    by_matmul = patchify(images, 4) @ weight.T + embed.proj.bias
    torch.testing.assert_close(embed(images), by_matmul, rtol=0, atol=1e-12)
    assert embed(images).shape == (2, 6, 10)  # 3 rows × 2 columns of patches


def test_patchify_order_is_row_by_row():
    image = torch.arange(16.0).reshape(1, 1, 4, 4)
    patches = patchify(image, 2)
    assert patches[0, 0].tolist() == [0.0, 1.0, 4.0, 5.0]  # top-left
    assert patches[0, 1].tolist() == [2.0, 3.0, 6.0, 7.0]  # top-right
    assert patches[0, 2].tolist() == [8.0, 9.0, 12.0, 13.0]  # bottom-left


def test_model_reuses_the_encoder_layer_and_counts():
    config = VisionConfig()
    model = VisionTransformer(config)
    assert all(type(layer) is EncoderLayer for layer in model.layers)
    assert config.seq_len == 17 and model.position.shape == (1, 17, 32)
    logits = model(torch.rand(5, 1, 8, 8))
    assert logits.shape == (5, 10)


def test_the_model_without_positions_is_blind_to_patch_order():
    torch.manual_seed(0)
    model = VisionTransformer(VisionConfig()).double().eval()
    with torch.no_grad():
        model.position.zero_()
    images = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    # swap the top-left and bottom-right 2×2 patches: the same set of tokens
    swapped = images.clone()
    swapped[..., :2, :2], swapped[..., 6:, 6:] = images[..., 6:, 6:], images[..., :2, :2]
    torch.testing.assert_close(model(images), model(swapped), rtol=0, atol=1e-12)
    with torch.no_grad():
        model.position.normal_()
    assert (model(images) - model(swapped)).abs().max() > 1e-3


# --------------------------------------------------------------------------------------------
# parity with transformers (random configs, every parameter perturbed, float64)
# --------------------------------------------------------------------------------------------


def hf_config(**overrides):
    transformers = pytest.importorskip("transformers")
    fields = dict(
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=3,
        intermediate_size=40,
        image_size=12,
        patch_size=3,
        num_channels=2,
        num_labels=7,
        layer_norm_eps=1e-5,  # not HF's 1e-12: a loader that ignored it would show
    )
    return transformers.ViTConfig(**{**fields, **overrides})


def perturbed(model):
    torch.manual_seed(1)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("act", ["gelu", "gelu_pytorch_tanh"])
def test_parity_with_vit_for_image_classification(act):
    transformers = pytest.importorskip("transformers")
    hf = perturbed(transformers.ViTForImageClassification(hf_config(hidden_act=act)))
    ours = from_hf_vit(hf)
    assert ours.config.norm_eps == 1e-5 and ours.config.n_classes == 7
    images = torch.randn(4, 2, 12, 12, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), hf(pixel_values=images).logits, rtol=0, atol=1e-10)


def test_parity_with_vit_model_hidden_states():
    transformers = pytest.importorskip("transformers")
    hf = perturbed(transformers.ViTModel(hf_config()))  # with its pooler, which is skipped
    ours = from_hf_vit(hf)
    eager = transformers.ViTModel(hf_config(attn_implementation="eager")).double().eval()
    eager.load_state_dict(hf.state_dict())
    images = torch.randn(3, 2, 12, 12, dtype=torch.float64)
    with torch.no_grad():
        expected = hf(pixel_values=images)
        torch.testing.assert_close(
            ours.encode(images), expected.last_hidden_state, rtol=0, atol=1e-10
        )
        # sdpa returns no weights; the eager path does, with its softmax in float32
        theirs = eager(pixel_values=images, output_attentions=True).attentions
        for mine, their in zip(ours.attention_maps(), theirs, strict=True):
            torch.testing.assert_close(mine, their, rtol=0, atol=1e-6)


def test_transformers_4_names_load_too():
    transformers = pytest.importorskip("transformers")
    hf = perturbed(transformers.ViTForImageClassification(hf_config()))
    renames = {
        "vit.layers.": "vit.encoder.layer.",
        "attention.q_proj.": "attention.attention.query.",
        "attention.o_proj.": "attention.output.dense.",
        "mlp.fc1.": "intermediate.dense.",
        "mlp.fc2.": "output.dense.",
    }
    old = {}
    for key, value in hf.state_dict().items():
        for new, former in renames.items():
            key = key.replace(new, former)
        old[key] = value
    ours = load_hf_vit_state_dict(VisionTransformer(config_from_hf_vit(hf.config)).double(), old)
    images = torch.randn(2, 2, 12, 12, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(images), hf(pixel_values=images).logits)


def test_hf_loader_refuses_what_the_book_lacks():
    transformers = pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="expected qkv_bias=True"):
        config_from_hf_vit(hf_config(qkv_bias=False))
    with pytest.raises(ValueError, match="one dropout"):
        config_from_hf_vit(hf_config(hidden_dropout_prob=0.1))
    hf = transformers.ViTForImageClassification(hf_config())
    state = dict(hf.state_dict())
    del state["vit.layernorm.bias"]
    model = VisionTransformer(config_from_hf_vit(hf.config))
    with pytest.raises(ValueError, match="missing.*norm.bias"):
        load_hf_vit_state_dict(model, state)
    state = dict(hf.state_dict(), extra=torch.zeros(1))
    with pytest.raises(ValueError, match="unexpected key 'extra'"):
        load_hf_vit_state_dict(model, state)


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def test_digits_load_and_split_without_overlap():
    images, labels = load_digits()
    assert images.shape == (1797, 1, 8, 8) and labels.shape == (1797,)
    assert images.min() == 0 and images.max() == 1
    assert torch.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    train, test = stratified_split(labels, 0.3, seed=0)
    assert len(train) + len(test) == 1797 and len(set(train.tolist()) & set(test.tolist())) == 0
    assert (torch.bincount(labels[test]) - 0.3 * torch.bincount(labels)).abs().max() <= 0.5
    seen = {tuple(x.flatten().tolist()) for x in images[train]}
    assert not any(tuple(x.flatten().tolist()) in seen for x in images[test])
    again = stratified_split(labels, 0.3, seed=0)
    assert torch.equal(again[1], test) and not torch.equal(
        stratified_split(labels, 0.3, 1)[1], test
    )


def test_digits_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="extract_digits.py"):
        load_digits(tmp_path / "none.csv.gz")
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(gzip.compress(b"1,2,3\n"))
    with pytest.raises(ValueError, match="line 1: expected 64 pixels"):
        load_digits(bad)
    with pytest.raises(ValueError, match="1-D integer tensor"):
        stratified_split(torch.zeros(3, 2).long())


# --------------------------------------------------------------------------------------------
# attention rollout, baselines, training
# --------------------------------------------------------------------------------------------


def test_rollout_of_uniform_attention_and_identity():
    uniform = [torch.full((1, 2, 5, 5), 0.2) for _ in range(3)]
    rollout = attention_rollout(uniform)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(1, 5))
    eye = [torch.eye(5).expand(1, 2, 5, 5) for _ in range(2)]
    torch.testing.assert_close(attention_rollout(eye), torch.eye(5).unsqueeze(0))
    # one layer: (A + I) / 2
    a = torch.softmax(torch.randn(2, 3, 4, 4), -1)
    torch.testing.assert_close(attention_rollout([a]), (a.mean(1) + torch.eye(4)) / 2)


def test_rollout_refuses_maps_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"\(batch, heads, T, T\)"):
        attention_rollout([torch.rand(2, 5, 5)])
    with pytest.raises(ValueError, match=r"map 1 must have the shape \(1, 2, 5, 5\)"):
        attention_rollout([torch.rand(1, 2, 5, 5), torch.rand(1, 2, 6, 6)])
    with pytest.raises(ValueError, match="non-empty list"):
        attention_rollout([])


def test_attention_maps_before_a_forward_are_refused():
    with pytest.raises(ValueError, match="expected attention weights"):
        VisionTransformer(VisionConfig()).attention_maps()


def test_baselines_shapes():
    images = torch.rand(3, 1, 8, 8)
    assert SmallCNN(width=8)(images).shape == (3, 10)
    assert LogisticRegression()(images).shape == (3, 10)


@pytest.mark.slow
def test_a_tiny_vit_learns_the_digits():
    torch.manual_seed(0)
    images, labels = load_digits()
    train, test = stratified_split(labels, 0.3, seed=0)
    model = VisionTransformer(VisionConfig(patch_size=4, d_model=16, n_layers=1, d_ff=32))
    fit_classifier(model, images[train], labels[train], steps=150, lr=3e-3)
    assert count_correct(model, images[test], labels[test]) / len(test) > 0.6  # chance: 0.1


def test_save_and_load(tmp_path):
    model = VisionTransformer(VisionConfig(n_layers=1)).eval()
    model.save_pretrained(tmp_path)
    again = VisionTransformer.from_pretrained(tmp_path)
    images = torch.rand(2, 1, 8, 8)
    torch.testing.assert_close(again(images), model(images))


# --------------------------------------------------------------------------------------------
# bad input: ValueError saying what was expected and what came
# --------------------------------------------------------------------------------------------


def test_image_not_a_multiple_of_the_patch():
    with pytest.raises(ValueError, match="multiples of the patch size 2, got 9×8"):
        VisionTransformer(VisionConfig())(torch.rand(1, 1, 9, 8))
    with pytest.raises(ValueError, match="multiples of the patch size 3, got 8×8"):
        patchify(torch.rand(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="image_size must be a multiple of patch_size 3, got 8"):
        VisionConfig(patch_size=3)


def test_other_bad_images():
    model = VisionTransformer(VisionConfig())
    with pytest.raises(ValueError, match="must be 8×8 .* got 4×4"):
        model(torch.rand(1, 1, 4, 4))
    with pytest.raises(ValueError, match="1 channel\\(s\\), got 3"):
        model(torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match="float tensor .* got a torch.float32 tensor of shape"):
        model(torch.rand(1, 8, 8))
    with pytest.raises(ValueError, match="float tensor"):
        model(torch.zeros(1, 1, 8, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="config must be a VisionConfig"):
        VisionTransformer({"d_model": 32})  # type: ignore[arg-type]


def test_fit_classifier_checks_labels():
    with pytest.raises(ValueError, match=r"labels must be a tensor of shape \(4,\)"):
        fit_classifier(LogisticRegression(), torch.rand(4, 1, 8, 8), torch.zeros(3).long(), steps=2)


def test_baselines_refuse_bad_shapes():
    with pytest.raises(ValueError, match="C·H·W = 64 pixels, got 16"):
        LogisticRegression()(torch.rand(2, 1, 4, 4))
    with pytest.raises(ValueError, match="float tensor"):
        LogisticRegression()(torch.rand(2, 64))
    with pytest.raises(ValueError, match="1 channel\\(s\\), got 3"):
        SmallCNN(width=4)(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="at least 2×2"):
        SmallCNN(width=4)(torch.rand(2, 1, 1, 1))


def test_fit_classifier_refuses_labels_outside_the_classes():
    images = torch.rand(4, 1, 8, 8)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 10\) .* got 0..10"):
        fit_classifier(LogisticRegression(), images, torch.tensor([0, 1, 2, 10]), steps=2)
    with pytest.raises(ValueError, match=r"got -1..2"):
        fit_classifier(SmallCNN(width=4), images, torch.tensor([0, -1, 2, 1]), steps=2)
    with pytest.raises(ValueError, match="integer tensor"):
        fit_classifier(LogisticRegression(), images, torch.zeros(4), steps=2)
