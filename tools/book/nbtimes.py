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

A notebook is recorded only when every cell nbval made of it ran (passed, failed or skipped):
a run with ``-k``, ``--deselect``, ``--lf``, a ``notebook.ipynb::Cell N`` argument or ``-x`` that
stopped early would otherwise write a partial sum as the notebook's time. The cells a notebook
has are counted when collection ends (``pytest_collection_finish``), from the notebook each
collected cell's parent read: nbval makes one item per code cell, and counting them there sees
the cells that ``-k``, ``--deselect`` or ``::Cell N`` left out (a ``::Cell N`` argument does not
even report the notebook's full collection). Under xdist the workers collect, so each worker
counts and hands its counts to the controller in ``workeroutput`` (``pytest_testnodedown``). A
cell ran when its teardown was reported. A notebook whose cells all ran but one failed is
recorded with ``"failed": true``; budget.py marks its time.

The file keeps the times of notebooks this session did not run (each entry says when it was
measured), so timing one notebook does not erase the others. An interrupted session writes
nothing: its last notebook's time would be short. Keys are notebook paths relative to pytest's
rootdir, which for the book is the repository root (its pyproject.toml); budget.py reads them
relative to the repository it belongs to, so the file can come from another checkout.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import nbformat
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


WORKER_KEY = "nbtimes_collected"  # the workeroutput entry: {notebook: cells nbval made}


def pytest_configure(config: pytest.Config) -> None:
    """Record in the controller only: an xdist worker's reports also reach the controller. A
    worker only counts the cells it collects, for the controller."""
    if hasattr(config, "workerinput"):  # an xdist worker
        config.pluginmanager.register(CollectedCells(config), "nbtimes-collected")
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


def notebook_cells(session: pytest.Session) -> dict[str, int]:
    """{notebook: its number of cells} for the notebooks with a collected cell. nbval makes one
    item per code cell; its notebook collector keeps the notebook it read (``nb``), else the
    file is read again."""
    counts: dict[str, int] = {}
    for item in session.items:
        notebook = notebook_of(item.nodeid)
        if notebook is None or notebook in counts or item.parent is None:
            continue
        nb = getattr(item.parent, "nb", None)
        if nb is None:
            nb = nbformat.read(item.parent.path, as_version=4)
        counts[notebook] = sum(cell.cell_type == "code" for cell in nb.cells)
    return counts


class CollectedCells:
    """In an xdist worker: counts each notebook's cells into ``workeroutput`` for the
    controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Count the notebooks' cells."""
        self.config.workeroutput[WORKER_KEY] = notebook_cells(session)  # type: ignore[attr-defined]


class NotebookTimes:
    """Sums report durations per notebook, then prints and writes those that ran whole."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)
        self.ran: dict[str, set[str]] = defaultdict(set)  # the cells whose teardown came
        self.collected: dict[str, int] = {}  # the cells nbval made, per notebook
        self.failed: set[str] = set()
        self.started = time.monotonic()
        self.written: Path | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Count the notebooks' cells (without xdist; under xdist the workers collect)."""
        self.collected.update(notebook_cells(session))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """An xdist worker is done: take its counts (every worker collects every notebook)."""
        for notebook, cells in getattr(node, "workeroutput", {}).get(WORKER_KEY, {}).items():
            self.collected[notebook] = max(cells, self.collected.get(notebook, 0))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add one phase (setup, call or teardown) of one cell to its notebook."""
        notebook = notebook_of(report.nodeid)
        if notebook is None:
            return
        self.seconds[notebook] += report.duration
        if report.when == "teardown":
            self.ran[notebook].add(report.nodeid)
        if report.failed:
            self.failed.add(notebook)

    def complete(self, notebook: str) -> bool:
        """Whether every cell nbval made of the notebook ran in this session."""
        return len(self.ran[notebook]) == self.collected.get(notebook, -1)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Merge this session's times into the JSON file (not after an interruption)."""
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return
        if not any(self.complete(notebook) for notebook in self.seconds):
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
            if not self.complete(notebook):
                continue  # a partial sum is not the notebook's time; an older entry stays
            notebooks[notebook] = {
                "seconds": round(seconds, 2),
                "cells": len(self.ran[notebook]),
                "collected": self.collected[notebook],
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
            notes = ["failed"] if notebook in self.failed else []
            if not self.complete(notebook):
                notes.append(
                    f"partial: {len(self.ran[notebook])} of "
                    f"{self.collected.get(notebook, '?')} cells ran, not written"
                )
            note = f"  ({'; '.join(notes)})" if notes else ""
            terminalreporter.write_line(f"{seconds / 60:6.2f} min  {notebook}{note}")
        if self.written:
            terminalreporter.write_line(
                f"all notebooks' times: {self.written} (budgets: python tools/book/budget.py)"
            )
