"""utils.translation: notebook 12's recipe (split, batches, decoding, scores) and the shipped
translator, which still translates as recorded; bad files are refused.

`data/translation_long_run/` is written by `tools/experiments/train_translation.py --save`
(notebook 12, section 6): a checkpoint directory (`utils.checkpoint`) with the tokenizer and the
recorded translations beside it. Its recorded test translations are what notebook 12 scores,
so the model in it must still produce them: translating the first test verses again gives
(almost) the same text and the same BLEU. "Almost": the recorded run batched 1,000 verses by
length, this test batches 100, and a verse padded differently can round differently in its last
bits.
"""

from pathlib import Path

import pytest
import sacrebleu
import torch
from safetensors.torch import load_file

from utils.bpe import BPETokenizer
from utils.checkpoint import WEIGHTS_FILE
from utils.corpora import VersePair
from utils.model import Transformer, TransformerConfig
from utils.translation import (
    INFO_FILE,
    MAX_WORDS,
    MIN_WORDS,
    N_DEV,
    N_TEST,
    TOKENIZER_FILE,
    TokenCounter,
    batch_stream,
    corpus_scores,
    keep_by_length,
    load_translator,
    save_translator,
    split_by_chapter,
    translate_all,
)

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "translation_long_run"
N_VERSES = 100


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    return load_translator(SHIPPED, fused=True)  # the kernel the run was scored with


def bleu(hyps, refs):
    return sacrebleu.metrics.BLEU().corpus_score(list(hyps), [list(refs)]).score


def test_shipped_file_holds_its_test_set_and_scores(shipped):
    model, tok, info = shipped
    assert not model.training
    assert len(info["test_srcs"]) == len(info["test_refs"]) == 1000
    recorded = {r["decoder"]: r for r in info["rows"] if r["split"] == "test"}
    for key in ("greedy", "beam4"):  # the scores the run recorded are those of its translations
        assert len(info["test_hyps"][key]) == 1000
        score = bleu(info["test_hyps"][key], info["test_refs"])
        assert abs(score - recorded[key]["bleu"]) < 0.01
    assert recorded["beam4"]["bleu"] > 25  # a translator, not notebook 12's short run (BLEU ~17)


def test_shipped_model_translates_as_recorded(shipped):
    model, tok, info = shipped
    srcs, refs = info["test_srcs"][:N_VERSES], info["test_refs"][:N_VERSES]
    recorded = info["test_hyps"]["greedy"][:N_VERSES]
    with torch.no_grad():
        hyps = translate_all(model, tok, srcs, beam_size=1)
    same = sum(h == r for h, r in zip(hyps, recorded, strict=True))
    assert same >= 0.9 * N_VERSES, f"only {same} of {N_VERSES} translations as recorded"
    assert abs(bleu(hyps, refs) - bleu(recorded, refs)) < 1.0


def tiny_translator():
    tok = BPETokenizer.train(["el rey de Salem", "the king of Salem"] * 3, vocab_size=40)
    config = TransformerConfig(
        src_vocab_size=tok.vocab_size,
        tgt_vocab_size=tok.vocab_size,
        d_model=16,
        n_heads=2,
        d_ff=32,
        n_layers=1,
        dropout=0.0,
        norm_first=True,
        tie_embeddings=True,
        max_len=32,
    )
    torch.manual_seed(0)
    return Transformer(config).eval(), tok


def test_save_then_load_gives_the_float16_model_back(tmp_path):
    model, tok = tiny_translator()
    path = tmp_path / "tiny"
    save_translator(path, model, tok, {"rows": [], "note": "tiny"})
    loaded, loaded_tok, info = load_translator(path)
    assert info == {"rows": [], "note": "tiny"} and loaded_tok.to_str() == tok.to_str()
    assert loaded.config == model.config and not loaded.training
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a.half().float(), b), name  # float16 on disk, float32 once loaded
    # the tied matrix (source and target embeddings, output layer) is stored once
    stored = load_file(path / WEIGHTS_FILE)
    assert stored["src_embed.token.weight"].dtype == torch.float16
    assert not any(k.startswith("tgt_embed.token") for k in stored)
    src = torch.tensor([tok.encode("el rey de Salem")])
    tgt = torch.tensor([[1, *tok.encode("the king")]])
    with torch.no_grad():
        model.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
        assert torch.equal(model(src, tgt), loaded(src, tgt))


def test_load_refuses_a_directory_that_is_not_a_translator(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        load_translator(tmp_path / "missing")
    model, tok = tiny_translator()
    save_translator(tmp_path, model, tok, {"note": "tiny"})
    (tmp_path / INFO_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError, match="info.json must hold a JSON object, got list"):
        load_translator(tmp_path)
    (tmp_path / TOKENIZER_FILE).write_text("version https://git-lfs.github.com/spec/v1\n")
    with pytest.raises(ValueError, match="tokenizer.json is not a tokenizer"):
        load_translator(tmp_path)
    (tmp_path / TOKENIZER_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json is missing"):
        load_translator(tmp_path)
    with pytest.raises(ValueError, match="info must be JSON-serialisable"):
        save_translator(tmp_path / "other", model, tok, {"t": torch.zeros(1)})


# --------------------------------------------------------------------------------------------
# the recipe: split, batches, decoding a test set, scores
# --------------------------------------------------------------------------------------------


def make_pairs(n_chapters=120, n_verses=20):
    pairs = []
    for c in range(n_chapters):
        for v in range(n_verses):
            if v == 0 and c % 4 == 0:  # a refrain that recurs in every fourth chapter
                es, en = "y fue la tarde y la mañana", "and the evening and the morning were"
            elif v == 1 and c % 5 == 0:  # the English recurs, the Spanish differs each time
                es, en = f"y habló el Señor {c} a Moisés", "and the LORD spake unto Moses saying"
            else:
                es, en = f"palabra {c} {v} de la ley", f"word {c} {v} of the law"
            pairs.append(VersePair("Gen" if c < 60 else "Exod", c % 60 + 1, v + 1, es, en))
    pairs.append(VersePair("Exod", 1, 99, "uno dos", "one two"))  # too short: dropped
    return pairs


def chapters(verses):
    return {(p.book, p.chapter) for p in verses}


def test_keep_by_length_keeps_verses_with_4_to_30_words_on_both_sides():
    long = " ".join(["palabra"] * (MAX_WORDS + 1))
    pairs = [
        VersePair("Gen", 1, 1, "uno dos tres cuatro", "one two three four"),
        VersePair("Gen", 1, 2, "uno dos tres", "one two three four"),  # Spanish too short
        VersePair("Gen", 1, 3, "uno dos tres cuatro", long),
    ]  # English too long
    assert keep_by_length(pairs) == pairs[:1]
    assert MIN_WORDS == 4 and MAX_WORDS == 30


def test_split_holds_out_whole_chapters_without_twins():
    pairs = keep_by_length(make_pairs())
    train, dev, test, n_dropped = split_by_chapter(pairs)
    assert len(test) == N_TEST and 0.9 * N_DEV < len(dev) <= N_DEV  # dev: chapters, twins out
    assert not chapters(train) & chapters(test) and not chapters(train) & chapters(dev)
    assert not chapters(dev) & chapters(test)
    seen = {p.es for p in train} | {p.en for p in train}
    assert not any(p.es in seen or p.en in seen for p in dev + test)
    assert n_dropped > 0  # the refrain, held out in some chapters, trains in others
    # every verse is in one set or was dropped; the test set is cut at N_TEST
    assert len(train) + len(dev) + len(test) + n_dropped <= len(pairs)
    assert len({(p.book, p.chapter, p.verse) for p in train + dev + test}) == len(
        train + dev + test
    )


def test_split_is_seeded():
    pairs = keep_by_length(make_pairs())
    assert split_by_chapter(pairs) == split_by_chapter(pairs)
    assert split_by_chapter(pairs, seed=1).test != split_by_chapter(pairs).test


def test_split_refuses_too_few_verses():
    with pytest.raises(ValueError, match="expected at least n_dev \\+ n_test"):
        split_by_chapter(make_pairs(n_chapters=10))
    with pytest.raises(ValueError, match="n_dev must be a positive int"):
        split_by_chapter(make_pairs(), n_dev=0)


def test_batch_stream_covers_every_pair_once_per_epoch():
    src = [[4 + i % 7] * (1 + i % 9) for i in range(60)]
    tgt = [[5 + i] * (1 + i % 5) for i in range(60)]  # target token 5 + i names pair i
    stream = TokenCounter(batch_stream(src, tgt, max_tokens=40))
    seen, tokens = [], 0
    while len(seen) < 2 * len(src):
        batch = next(stream)
        assert batch.src.numel() <= 40 and batch.tgt_in.numel() <= 40
        seen += [int(row[0]) - 5 for row in batch.tgt_out]
        tokens += batch.n_tokens
    assert len(seen) == 2 * len(src)  # batches never straddle two epochs
    assert sorted(seen[:60]) == sorted(seen[60:]) == list(range(60))
    assert seen[:60] != seen[60:]  # a new order each epoch
    assert stream.tokens == tokens == 2 * sum(len(t) + 1 for t in tgt)


def test_translate_all_keeps_the_order_of_its_sources():
    model, tok = tiny_translator()
    sources = ["el rey de Salem", "el rey", "Salem", "de Salem el rey de Salem"]
    one_by_one = [translate_all(model, tok, [s])[0] for s in sources]
    assert translate_all(model, tok, sources, batch_size=3) == one_by_one
    assert translate_all(model, tok, sources, beam_size=2) == [
        translate_all(model, tok, [s], beam_size=2)[0] for s in sources
    ]


def test_corpus_scores_are_sacrebleus_and_check_their_lengths():
    hyps = ["the king of Salem came", "and he blessed him"]
    refs = ["the king of Salem met Abraham", "and he blessed him"]
    scores = corpus_scores(hyps, refs)
    assert scores.hyps == hyps
    assert scores.bleu == pytest.approx(bleu(hyps, refs))
    assert scores.chrf == pytest.approx(sacrebleu.metrics.CHRF().corpus_score(hyps, [refs]).score)
    assert scores.line.startswith("BLEU = ") and "tok:13a" in scores.bleu_signature
    assert corpus_scores(refs, refs).bleu == pytest.approx(100)
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        corpus_scores(hyps, refs[:1])
