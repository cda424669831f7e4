"""utils.bert: the book's encoder as BERT against Hugging Face's BertModel / BertForMaskedLM
(random configs, every parameter perturbed, float64, offline), both directions, the
save_pretrained round trip, the 80/10/10 masking, bidirectionality and bad input."""

from __future__ import annotations

import pytest
import torch

from utils.bert import (
    BOOK_SECTIONS,
    MASK_ID,
    SECTIONS,
    Bert,
    BertClassifier,
    BertConfig,
    bag_of_words,
    bert_vocab,
    encode_verses,
    load_hf_state_dict,
    mask_tokens,
    mlm_loss,
)
from utils.vocab import PAD_ID

CONFIGS = {
    "small": dict(
        vocab_size=50,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
        max_position_embeddings=20,
    ),
    "odd": dict(
        vocab_size=37,
        hidden_size=20,
        num_hidden_layers=3,
        num_attention_heads=5,
        intermediate_size=33,
        max_position_embeddings=16,
        type_vocab_size=3,
        layer_norm_eps=1e-6,
        hidden_act="relu",
        tie_word_embeddings=False,
    ),
}


def perturb(model: torch.nn.Module) -> None:
    """N(0, 0.1²) noise on every parameter: LayerNorm gains and zero biases become visible."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))


def hf_model(name: str, cls_name: str = "BertForMaskedLM", seed: int = 0):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = transformers.BertConfig(**CONFIGS[name], attn_implementation="eager")
    model = getattr(transformers, cls_name)(config).eval()
    perturb(model)
    return model


def inputs(config: BertConfig, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(MASK_ID + 1, config.vocab_size, (3, config.max_len - 2), generator=g)
    seg = torch.randint(0, config.n_segments, x.shape, generator=g)
    mask = torch.ones(x.shape, dtype=torch.bool)
    mask[1, 6:] = False
    return x, seg, mask


@pytest.mark.parametrize("name", CONFIGS)
def test_mlm_hidden_states_and_logits_equal_transformers(name: str) -> None:
    from utils.bert import bert_from_hf

    hf = hf_model(name)
    ours = bert_from_hf(hf).double()
    hf = hf.double()
    x, seg, mask = inputs(ours.config)
    with torch.no_grad():
        out = hf(
            input_ids=x, token_type_ids=seg, attention_mask=mask.long(), output_hidden_states=True
        )
        hidden = ours.encode(x, seg, mask)
        logits = ours.mlm_logits(hidden)
    torch.testing.assert_close(hidden, out.hidden_states[-1], rtol=0, atol=1e-12)
    torch.testing.assert_close(logits, out.logits, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_bert_model_and_pooler_equal_transformers(name: str) -> None:
    from utils.bert import bert_from_hf

    hf = hf_model(name, "BertModel")
    ours = bert_from_hf(hf).double()
    hf = hf.double()
    x, seg, mask = inputs(ours.config)
    with torch.no_grad():
        out = hf(input_ids=x, token_type_ids=seg, attention_mask=mask.long())
        hidden = ours.encode(x, seg, mask)
    torch.testing.assert_close(hidden, out.last_hidden_state, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.pool(hidden), out.pooler_output, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_export_to_transformers(name: str) -> None:
    from utils.bert import bert_to_hf, config_from_hf

    pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = config_from_hf(hf_model(name).config)
    ours = Bert(config).eval()
    perturb(ours)
    hf = bert_to_hf(ours, attn_implementation="eager").double()
    ours = ours.double()
    x, seg, mask = inputs(config)
    with torch.no_grad():
        theirs = hf(input_ids=x, token_type_ids=seg, attention_mask=mask.long()).logits
        torch.testing.assert_close(ours(x, seg, mask), theirs, rtol=0, atol=1e-12)


def test_save_pretrained_round_trip(tmp_path) -> None:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=24, n_layers=2, max_len=12)
    for model in (Bert(config), BertClassifier(config.replace(n_classes=3))):
        perturb(model)
        model.eval()
        model.save_pretrained(tmp_path / model.kind)
        loaded = type(model).from_pretrained(tmp_path / model.kind)
        x = torch.randint(0, 40, (2, 12))
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
        if isinstance(loaded, Bert):
            assert loaded.generator.proj.weight is loaded.embed.token.weight


def test_bidirectional_and_padding() -> None:
    torch.manual_seed(0)
    model = Bert(BertConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, n_layers=2)).eval()
    x = torch.randint(MASK_ID + 1, 30, (1, 8))
    y = x.clone()
    y[0, -1] = (x[0, -1] - MASK_ID) % (30 - MASK_ID - 1) + MASK_ID + 1  # another last token
    with torch.no_grad():
        hx, hy = model.encode(x), model.encode(y)
        padded = model.encode(torch.cat([x, torch.zeros(1, 4, dtype=torch.long)], dim=1))
    assert (hx[0, 0] - hy[0, 0]).abs().max() > 1e-4  # the first position sees the last
    torch.testing.assert_close(padded[:, :8], hx, rtol=0, atol=1e-5)  # pads are not seen


def test_classifier_from_bert_copies_the_encoder() -> None:
    torch.manual_seed(0)
    bert = Bert(BertConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, n_layers=1))
    clf = BertClassifier.from_bert(bert, n_classes=6)
    assert clf.config.n_classes == 6 and clf(torch.randint(0, 30, (2, 5))).shape == (2, 6)
    for (k, a), b in zip(bert.state_dict().items(), clf.bert.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_mask_tokens_80_10_10() -> None:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(MASK_ID + 1, 100, (400, 50))
    tokens[:, 0], tokens[:, -1] = 1, 2  # [CLS], [SEP]
    inputs_, targets = mask_tokens(tokens, 100, g)
    chosen = targets != PAD_ID
    assert not chosen[:, 0].any() and not chosen[:, -1].any()  # specials never chosen
    assert abs(chosen.float().mean().item() / (48 / 50) - 0.15) < 0.01
    assert torch.equal(targets[chosen], tokens[chosen])
    masked = (inputs_ == MASK_ID)[chosen].float().mean().item()
    kept = (inputs_ == tokens)[chosen].float().mean().item()
    assert abs(masked - 0.8) < 0.02 and abs(kept - 0.1 - 0.1 / 95) < 0.02
    assert torch.equal(inputs_[~chosen], tokens[~chosen])  # unchosen positions untouched


def test_mlm_loss_ignores_unchosen() -> None:
    logits = torch.randn(2, 3, 10)
    targets = torch.tensor([[0, 5, 0], [7, 0, 0]])
    expected = torch.nn.functional.cross_entropy(logits[targets > 0], targets[targets > 0])
    torch.testing.assert_close(mlm_loss(logits, targets), expected)


def test_vocab_encode_and_bag_of_words() -> None:
    vocab = bert_vocab(["the lord said unto moses", "the lord"], size=8)
    assert vocab.itos[MASK_ID] == "<mask>" and len(vocab) == 8
    ids = encode_verses(vocab, ["The LORD said", "moses"], length=6)
    assert ids.tolist()[0] == [1, vocab.stoi["the"], vocab.stoi["lord"], 3, 2, 0]
    bow = bag_of_words(ids, len(vocab))
    assert bow[0, vocab.stoi["the"]] == 1 and bow[:, :5].sum() == 0


def test_every_book_has_a_section() -> None:
    from utils.corpora import load_parallel_verses

    books = {v.book for v in load_parallel_verses()}
    assert books == set(BOOK_SECTIONS) and len(books) == 66
    assert set(BOOK_SECTIONS.values()) == set(range(len(SECTIONS)))


def test_bad_input() -> None:
    config = BertConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=10)
    model = Bert(config)
    x = torch.randint(0, 30, (2, 6))
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 30\)"):
        model(torch.full((2, 6), 30))
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of tokens"):
        model(x, attention_mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="attention_mask must be a bool tensor"):
        model(x, attention_mask=torch.ones(2, 6))
    with pytest.raises(ValueError, match="at least one position of every sequence"):
        model(x, attention_mask=torch.zeros(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"segments: token ids must be in \[0, 2\)"):
        model(x, segments=torch.full((2, 6), 2))
    with pytest.raises(ValueError, match="segments must have the shape of tokens"):
        model(x, segments=torch.zeros(2, 7, dtype=torch.long))
    with pytest.raises(ValueError, match="1 to max_len=10 positions, got 11"):
        model(torch.randint(0, 30, (2, 11)))
    with pytest.raises(ValueError, match="must be 2-D"):
        model(torch.randint(0, 30, (6,)))
    with pytest.raises(ValueError, match="n_heads"):
        BertConfig(vocab_size=30, d_model=15, n_heads=2)
    with pytest.raises(ValueError, match="activation must be one of"):
        BertConfig(vocab_size=30, activation="tanh")
    with pytest.raises(ValueError, match="rates must be three probabilities"):
        mask_tokens(x, 30, torch.Generator(), rates=(0.8, 0.1, 0.2))
    with pytest.raises(ValueError, match="logits must be"):
        mlm_loss(torch.randn(2, 6, 30), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="config must be a BertConfig"):
        Bert(object())  # type: ignore[arg-type]


def test_load_hf_state_dict_refuses_mismatches() -> None:
    from utils.bert import state_dict_to_hf

    config = BertConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, n_layers=1)
    state = state_dict_to_hf(Bert(config), prefix="")
    with pytest.raises(ValueError, match="does not have"):
        load_hf_state_dict(Bert(config), {**state, "encoder.layer.5.x.weight": torch.zeros(1)})
    half = {k: v for k, v in state.items() if k != "pooler.dense.bias"}
    with pytest.raises(ValueError, match="lacks 1 keys of 'pooler.'"):
        load_hf_state_dict(Bert(config), half)
    no_layer = {k: v for k, v in state.items() if "layer.0.output.dense" not in k}
    with pytest.raises(ValueError, match="of 'encoder.'"):
        load_hf_state_dict(Bert(config), no_layer)
    wrong = {**state, "pooler.dense.bias": torch.zeros(3)}
    with pytest.raises(ValueError, match=r"expected shape \(16,\)"):
        load_hf_state_dict(Bert(config), wrong)


def test_every_attention_backend_trains_bert_alike() -> None:
    """Four SGD steps of the masked LM (with padding) from the same weights on each backend of
    the attention seam (`utils.attention.attend`): the loss curves agree to float32 rounding."""
    import copy

    from utils.attention import BACKENDS, use_attention_backend

    torch.manual_seed(0)
    model = Bert(BertConfig(vocab_size=20, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0))
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(2):
        tokens = torch.randint(MASK_ID + 1, 20, (3, 9), generator=g)
        tokens[0, 6:] = PAD_ID
        batches.append(mask_tokens(tokens, 20, g, p=0.3))
    curves = {}
    for backend in sorted(BACKENDS):
        trained = use_attention_backend(copy.deepcopy(model), backend).train()
        assert {m.backend for m in trained.modules() if hasattr(m, "backend")} == {backend}
        optimizer = torch.optim.SGD(trained.parameters(), lr=0.05)
        curves[backend] = []
        for x, y in batches * 2:
            loss = mlm_loss(trained(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            curves[backend].append(loss.item())
    for backend, curve in curves.items():
        gap = max(abs(a - b) for a, b in zip(curve, curves["readable"], strict=True))
        assert gap < 1e-5, (backend, curves)
    assert sum(curves["readable"][2:]) < sum(curves["readable"][:2])  # it did train


def test_the_embedding_tables_share_one_scale_so_a_classifier_can_fit() -> None:
    torch.manual_seed(0)
    config = BertConfig(60, d_model=32, n_heads=2, d_ff=64, n_layers=2, max_len=24, n_classes=4)
    model = BertClassifier(config)
    embed = model.bert.embed
    stds = [t.weight.std().item() for t in (embed.token, embed.position.embedding, embed.segment)]
    assert all(0.015 < s < 0.025 for s in stds), stds  # BERT's N(0, 0.02²), each table
    tokens = torch.randint(5, 60, (24, 16))  # 24 random sequences with random labels
    tokens[:, 0] = 1
    labels = torch.randint(0, 4, (24,))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        fitted = (model(tokens).argmax(-1) == labels).float().mean().item()
    assert fitted == 1.0, fitted  # memorised; with a drowned token table it stays near 1/4
