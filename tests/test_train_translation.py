"""tools/experiments/train_translation.py: it runs, and its recipe is utils.translation's.

The split, batches, decoding and scores are tested in tests/test_translation.py; here only that
the tool imports them (a re-typed copy could drift from notebook 12) and that `--help` works.
"""

import pytest

import train_translation as tool  # tools/experiments is on pytest's path (pyproject.toml)
import utils.translation


def test_tool_uses_the_recipe_of_utils_translation():
    for name in (
        "split_by_chapter",
        "keep_by_length",
        "batch_stream",
        "translate_all",
        "corpus_scores",
        "TokenCounter",
    ):
        assert getattr(tool, name) is getattr(utils.translation, name), name


def test_help_names_the_command_that_made_the_shipped_files(capsys):
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "tools/experiments/train_translation.py --steps 12000" in out
    assert "--save data/translation_long_run\n" in out


def test_resume_needs_a_checkpoint(capsys):
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["--resume"])
    assert exit_info.value.code == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err
