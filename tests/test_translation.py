"""utils.translation: the shipped translator still translates as recorded; bad files are refused.

`data/translation_long_run.pt` is written by `tools/train_translation.py --save` (notebook 12,
section 6). Its recorded test translations are what notebook 12 scores, so the model in the
file must still produce them: translating the first test verses again gives (almost) the same
text and the same BLEU. "Almost": the recorded run batched 1,000 verses by length, this test
batches 100, and a verse padded differently can round differently in its last bits.
"""

from pathlib import Path

import pytest
import sacrebleu
import torch

from tools.train_translation import translate_all
from utils.bpe import BPETokenizer
from utils.model import Transformer, TransformerConfig
from utils.translation import FORMAT, load_translator, save_translator

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "translation_long_run.pt"
N_VERSES = 100


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    return load_translator(SHIPPED)


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
        src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, d_model=16, n_heads=2,
        d_ff=32, n_layers=1, dropout=0.0, norm_first=True, share_embeddings=True, max_len=32,
    )
    torch.manual_seed(0)
    return Transformer(config).eval(), tok


def test_save_then_load_gives_the_float16_model_back(tmp_path):
    model, tok = tiny_translator()
    path = tmp_path / "tiny.pt"
    save_translator(path, model, tok, {"rows": [], "note": "tiny"})
    loaded, loaded_tok, info = load_translator(path)
    assert info == {"rows": [], "note": "tiny"} and loaded_tok.to_str() == tok.to_str()
    assert loaded.config == model.config and not loaded.training
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a.half().float(), b), name  # float16 on disk, float32 once loaded
    # the tied matrix (source and target embeddings, output layer) is stored once
    stored = torch.load(path, weights_only=True)["state_dict"]
    tied = [v.data_ptr() for k, v in stored.items() if k.endswith("token.weight")]
    assert len(tied) == 2 and len(set(tied)) == 1
    src = torch.tensor([tok.encode("el rey de Salem")])
    tgt = torch.tensor([[1, *tok.encode("the king")]])
    with torch.no_grad():
        model.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
        assert torch.equal(model(src, tgt), loaded(src, tgt))


def test_load_refuses_a_file_that_is_not_a_translator(tmp_path):
    text = tmp_path / "pointer.pt"  # e.g. a Git LFS pointer where the file should be
    text.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 6500000\n")
    with pytest.raises(ValueError, match="not a translator file.*torch.load failed"):
        load_translator(text)
    other = tmp_path / "weights.pt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(ValueError, match="not a translator file.*got format None"):
        load_translator(other)
    torch.save([1, 2], other)
    with pytest.raises(ValueError, match="not a translator file.*got list"):
        load_translator(other)
    torch.save({"format": FORMAT, "config": {}}, other)
    with pytest.raises(ValueError, match="truncated translator file"):
        load_translator(other)
    with pytest.raises(FileNotFoundError):
        load_translator(tmp_path / "missing.pt")
