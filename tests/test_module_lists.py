"""The three lists of utils' modules (README, utils/__init__.py, docs/CONVENTIONS.md) name
every module in utils/ and nothing else; the two in reading order agree on that order."""

import re
from pathlib import Path

import utils

ROOT = Path(__file__).resolve().parent.parent
MODULES = {p.stem for p in (ROOT / "utils").glob("*.py") if p.stem != "__init__"}
NAME = r"`(\w+)`"  # a module name in backticks (`torch.nn` and `utils/` do not match)


def readme_modules() -> list[str]:
    """The names in README's paragraph that starts "The finished code of each notebook"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("The finished code of each notebook")
    return re.findall(NAME, text[start : text.index("\n\n", start)])


def init_modules() -> list[str]:
    """The `- name  what -- notebook` lines of utils/__init__.py's docstring, in order."""
    return re.findall(r"^- `(\w+)`", utils.__doc__ or "", flags=re.MULTILINE)


def conventions_modules() -> list[str]:
    """The chain `a` → `b` (remarks in parentheses allowed) in docs/CONVENTIONS.md, in order."""
    text = (ROOT / "docs" / "CONVENTIONS.md").read_text(encoding="utf-8")
    link = NAME + r"(?:\s*\([^)]*\))?\s*→\s*"
    chain = re.search(rf"(?:{link})+{NAME}", text)
    assert chain, "docs/CONVENTIONS.md has no module chain `a` → `b` → ..."
    return re.findall(NAME, re.sub(r"\([^)]*\)", "", chain.group(0)))


def differences(listed: list[str]) -> str:
    missing = sorted(MODULES - set(listed))
    extra = sorted(set(listed) - MODULES)
    twice = sorted({m for m in listed if listed.count(m) > 1})
    return f"missing {missing}, not in utils/ {extra}, listed twice {twice}"


def test_readme_lists_every_module():
    listed = readme_modules()
    assert set(listed) == MODULES, f"README.md: {differences(listed)}"


def test_init_docstring_lists_every_module_once():
    listed = init_modules()
    assert sorted(listed) == sorted(MODULES), f"utils/__init__.py: {differences(listed)}"


def test_conventions_lists_every_module_once_in_the_docstrings_order():
    listed = conventions_modules()
    assert sorted(listed) == sorted(MODULES), f"docs/CONVENTIONS.md: {differences(listed)}"
    assert listed == init_modules(), "docs/CONVENTIONS.md and utils/__init__.py: other orders"
