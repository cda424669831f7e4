"""A pytest plugin that times each notebook under nbval and writes the times for the budgets.

    python -m pytest -p nbtimes ... notebooks --nbval ...

``-p nbtimes`` finds this file because pyproject.toml puts tools/book on pytest's pythonpath
(xdist workers load it the same way). ``-p tools.book.nbtimes`` works too, from the repository
root under ``python -m pytest`` (the current folder is then on sys.path, and tools/ is a
namespace package: no ``__init__.py`` needed).

nbval makes one test item per cell, with a node id that starts with the notebook's path
(``notebooks/03_attention.ipynb::Cell 4``). The plugin sums, per notebook, the durations of every
phase of those items: setup (the first cell's setup starts the kernel), call (the cell) and
teardown (the last one's stops the kernel). At the end of the session it prints the slowest ten
notebooks and writes the times as JSON to ``--nbtimes-file``, else ``$BOOK_NOTEBOOK_TIMES``, else
``<rootdir>/.cache/notebook_times.json``, where ``tools/book/budget.py`` reads them.

Under pytest-xdist (``-n 2 --dist loadscope``) each worker runs whole notebooks, and every
item's reports reach the controller through ``pytest_runtest_logreport``; so only the
controller (or a run without xdist) records, and a notebook's time is its wall time on its
worker while the other worker runs something else: what "on 2 CPU cores" means for the book.

The file keeps the times of notebooks this session did not run (each entry says when it was
measured), so timing one notebook does not erase the others. An interrupted session writes
nothing: its last notebook's time would be short.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

TIMES_ENV = "BOOK_NOTEBOOK_TIMES"  # the same variable tools/book/budget.py reads
DEFAULT_RELATIVE = Path(".cache") / "notebook_times.json"  # under pytest's rootdir
SLOWEST = 10


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--nbtimes-file``: where to write the notebook times."""
    parser.getgroup("nbtimes").addoption(
        "--nbtimes-file",
        default=None,
        help=f"JSON file for the per-notebook times (default: ${TIMES_ENV}, "
        f"else <rootdir>/{DEFAULT_RELATIVE.as_posix()})",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Record in the controller only: an xdist worker's reports also reach the controller."""
    if hasattr(config, "workerinput"):  # an xdist worker
        return
    config.pluginmanager.register(NotebookTimes(config), "nbtimes-recorder")


def times_path(config: pytest.Config) -> Path:
    """The file the times go to (option, then environment variable, then the default)."""
    chosen = config.getoption("nbtimes_file") or os.environ.get(TIMES_ENV)
    return Path(chosen) if chosen else config.rootpath / DEFAULT_RELATIVE


def notebook_of(nodeid: str) -> str | None:
    """The notebook path a node id belongs to (relative to the rootdir), or None."""
    path = nodeid.split("::", 1)[0]
    return path if path.endswith(".ipynb") else None


class NotebookTimes:
    """Sums report durations per notebook, then prints and writes them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)
        self.cells: dict[str, int] = defaultdict(int)
        self.failed: set[str] = set()
        self.started = time.monotonic()
        self.written: Path | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add one phase (setup, call or teardown) of one cell to its notebook."""
        notebook = notebook_of(report.nodeid)
        if notebook is None:
            return
        self.seconds[notebook] += report.duration
        self.cells[notebook] += report.when == "call"
        if report.failed:
            self.failed.add(notebook)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Merge this session's times into the JSON file (not after an interruption)."""
        if not self.seconds or exitstatus == pytest.ExitCode.INTERRUPTED:
            return
        path = times_path(self.config)
        data: dict = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError:
                data = {}  # a broken file is rewritten, not a reason to fail the tests
        now = datetime.now().astimezone().isoformat(timespec="seconds")
        workers = getattr(self.config.option, "numprocesses", None) or 1
        notebooks = data.get("notebooks", {})
        for notebook, seconds in self.seconds.items():
            notebooks[notebook] = {
                "seconds": round(seconds, 2),
                "cells": self.cells[notebook],
                "failed": notebook in self.failed,
                "measured": now,
                "workers": workers,
            }
        data.update(
            rootdir=str(self.config.rootpath),
            written=now,
            workers=workers,
            cpus=os.cpu_count(),
            session_seconds=round(time.monotonic() - self.started, 1),
            notebooks=dict(sorted(notebooks.items())),
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        self.written = path

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The slowest notebooks of this session, in minutes."""
        if not self.seconds:
            return
        slowest = sorted(self.seconds.items(), key=lambda item: -item[1])[:SLOWEST]
        terminalreporter.write_sep(
            "=", f"slowest {len(slowest)} notebooks (cells summed, kernel start included)"
        )
        for notebook, seconds in slowest:
            failed = "  (failed)" if notebook in self.failed else ""
            terminalreporter.write_line(f"{seconds / 60:6.2f} min  {notebook}{failed}")
        if self.written:
            terminalreporter.write_line(
                f"all {len(self.seconds)} notebooks' times: {self.written} "
                "(budgets: python tools/book/budget.py)"
            )
