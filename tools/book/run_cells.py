"""Run notebooks' code cells in plain Python processes, without Jupyter, and report which fail.

    python tools/book/run_cells.py notebooks/12_translation.ipynb
    python tools/book/run_cells.py --cpu-to cuda --jobs 8 --json out.json notebooks/1*.ipynb

For a machine that has PyTorch but no Jupyter, such as a rented GPU (where the book is not
installed, run it with `PYTHONPATH=$PWD` from the repository's root): each notebook's code
cells run top to bottom in one namespace of a fresh `python` process started in `notebooks/`
(as `execute_notebooks.py` starts its kernels), figures go to matplotlib's Agg backend, and
every cell's outcome is recorded. A failing cell does not stop the notebook: its later cells
still run, so one failed assert is reported as one failure (a later cell that needed a name
the failed cell would have defined fails too, and says so). Outputs are not compared: on
another device the printed numbers move, and what must hold there is every `assert`.

`--cpu-to cuda` turns the keyword `device="cpu"`, with which chapters 10 and 11 pin their
small training runs to the CPU, into `device="cuda"`, so those runs train on the GPU as well;
chapters that call `utils.get_device()` use the GPU without it. The report names each cell
so changed. Exits 1 if any cell failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PINNED_CPU = re.compile(r"""device\s*=\s*["']cpu["']""")


def code_cells(path: Path) -> list[tuple[str, bool]]:
    """Each code cell's source and whether nbval skips it (`# NBVAL_SKIP`, tag `nbval-skip`)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            tags = cell.get("metadata", {}).get("tags", [])
            cells.append((source, "# NBVAL_SKIP" in source or "nbval-skip" in tags))
    return cells


def run_one(path: Path, cpu_to: str | None) -> dict:
    """Run one notebook's code cells in this process; return one record per cell."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    os.chdir(ROOT / "notebooks")
    namespace: dict = {"__name__": "__main__"}
    cells = []
    start_all = time.perf_counter()
    for index, (source, skip) in enumerate(code_cells(path)):
        if skip:
            cells.append({"cell": index, "asserts": False, "device_changed": False})
            cells[-1].update(status="skipped", seconds=0.0)
            continue
        changed = False
        if cpu_to is not None and PINNED_CPU.search(source):
            source = PINNED_CPU.sub(f'device="{cpu_to}"', source)
            changed = True
        record = {"cell": index, "asserts": "assert " in source, "device_changed": changed}
        print(f"--- {path.name} cell {index}", flush=True)
        start = time.perf_counter()
        try:
            exec(compile(source, f"<{path.name} cell {index}>", "exec"), namespace)
            record["status"] = "ok"
        except BaseException as error:  # an assert, a NameError, a KeyboardInterrupt
            if isinstance(error, KeyboardInterrupt):
                raise
            record["status"] = "failed"
            record["error"] = (
                f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            )
            traceback.print_exc()
        record["seconds"] = round(time.perf_counter() - start, 2)
        plt.close("all")
        cells.append(record)
    return {
        "notebook": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "seconds": round(time.perf_counter() - start_all, 1),
        "cells": cells,
    }


def summary_line(result: dict) -> str:
    cells = result["cells"]
    failed = [c for c in cells if c["status"] == "failed"]
    skipped = [c for c in cells if c["status"] == "skipped"]
    asserting = [c for c in cells if c["asserts"]]
    held = [c for c in asserting if c["status"] == "ok"]
    moved = [c["cell"] for c in cells if c["device_changed"]]
    line = (
        f"{result['notebook']}: {len(cells) - len(failed) - len(skipped)}/{len(cells)} cells ran, "
        f"{len(held)}/{len(asserting)} cells with asserts held, {result['seconds']} s"
    )
    if skipped:
        line += f"; skipped as nbval does: {[c['cell'] for c in skipped]}"
    if moved:
        line += f"; device='cpu' -> GPU in cells {moved}"
    for c in failed:
        line += f"\n    cell {c['cell']}: {c['error']}"
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--cpu-to", default=None, help='replace device="cpu" with this device')
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once")
    parser.add_argument("--json", type=Path, default=None, help="write every record here")
    parser.add_argument("--log-dir", type=Path, default=None, help="one log per notebook")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = [p.resolve() for p in args.notebooks]

    if args.one:  # the child process: one notebook, its record on the last line
        result = run_one(paths[0], args.cpu_to)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    def child(path: Path) -> dict:
        command = [sys.executable, __file__, "--one", str(path)]
        if args.cpu_to:
            command += ["--cpu-to", args.cpu_to]
        log_dir = args.log_dir or Path(tempfile.mkdtemp())
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{path.stem}.log"  # written as the notebook runs, kept if it is killed
        with log.open("w") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        text = log.read_text()
        for line in reversed(text.splitlines()):
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
                print(summary_line(result), flush=True)
                return result
        tail = text[-2000:]
        print(f"{path.name}: the process died (exit {done.returncode})\n{tail}", flush=True)
        return {"notebook": str(path), "crashed": done.returncode, "cells": [], "seconds": 0}

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(child, paths))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    bad = sum(1 for r in results if r.get("crashed") is not None)
    bad += sum(1 for r in results for c in r["cells"] if c["status"] == "failed")
    print(f"{len(results)} notebooks, {bad} failed cells or crashed processes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
