"""Find asserts on speed: a comparison of a measured time with a bound, in tests or notebooks.

    python tools/book/timing_asserts.py            # tests/*.py and every notebook
    python tools/book/timing_asserts.py FILE ...   # .py files or notebooks

A test or a notebook cell that asserts `seconds < 10` or `speedup > 2` fails on a slower or
busier machine than the one it was written on: timings belong in `tools/experiments/bench.py`
and in `# NBVAL_IGNORE_OUTPUT` cells, and what an assert holds is a property that does not
depend on the clock (equal outputs, a FLOP or byte count, a loss).

How it finds them, by reading the code (nothing runs): a value is *timed* when it comes from
a clock (`time.perf_counter()`, `time.process_time()`, `time.time()`, `timeit`,
`utils.measure.interleaved`, ...) or from a name, attribute or string key that says it is a
time (`seconds`, `elapsed`, `speedup`, `timed_decode`, `time7`, `"naive time"`); a name
assigned from a timed value stays timed until it is assigned something else (the code is read
in source order, so short names reused for other values are not flagged). So the book names a
measured time as one, and this finds an assert on it. An assert is flagged when it
orders a timed value (`<`, `<=`, `>`, `>=`) against anything but zero: `t > 0` and
`elapsed == sorted(elapsed)` say nothing about speed and pass.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

from book import ROOT, all_notebook_paths

CLOCKS = frozenset(
    {
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "process_time_ns",
        "monotonic",
        "monotonic_ns",
        "time",
        "time_ns",
        "timeit",
        "repeat",  # timeit.repeat
        "interleaved",  # utils.measure
    }
)
# A word in a name, attribute or string key that says the value is a time or a speed.
_TIMED_WORD = re.compile(
    r"(?:^|[_\s])(?:seconds|secs|elapsed|speedups?|speed|wall|timings?|timed|time|times|"
    r"per_s|tokens_per_s|throughput|latency)(?:$|[_\s\d])",
    re.IGNORECASE,
)
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _words(node: ast.AST) -> list[str]:
    """The names, attributes and subscript string keys (`fit["naive time"]`) a node reads."""
    out: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
        elif isinstance(sub, ast.Subscript):
            key = sub.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                out.append(key.value)
    return out


def _reads_clock(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            fn = sub.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            owner = (
                fn.value.id
                if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                else ""
            )
            if name not in CLOCKS:
                continue
            if name in {"time", "repeat"} and owner not in {"time", "timeit"}:
                continue  # `torch.repeat`, a model's `.time()`: not a clock
            if name == "interleaved" and len(sub.args) + len(sub.keywords) < 2:
                continue  # utils.measure.interleaved(fns, repeats, device), not a model's name
            return True
    return False


def _targets(node: ast.AST) -> list[str]:
    """The names an assignment target binds (`a`, `a, b`, `a[k]` -> a, `a.b` -> a)."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
    return out


class _Taint(ast.NodeVisitor):
    """Follow timed names through a module in source order: an assignment from a timed value
    makes its targets timed, one from anything else makes them untimed again (notebooks
    reuse short names such as `r` or `out` for unrelated values)."""

    def __init__(self) -> None:
        self.timed: set[str] = set()
        self.found: list[int] = []  # line numbers of the timing asserts

    def is_timed(self, node: ast.AST) -> bool:
        if _reads_clock(node):
            return True
        return any(
            w in self.timed or _TIMED_WORD.search(w.replace("at_a_time", "")) for w in _words(node)
        )

    def _bind(self, targets: list[ast.AST], value: ast.AST | None, kill: bool = True) -> None:
        timed = value is not None and self.is_timed(value)
        for target in targets:
            names = _targets(target)
            if timed:
                self.timed.update(names)
            elif kill and isinstance(target, ast.Name | ast.Tuple | ast.List):
                self.timed.difference_update(names)  # a[k] = x or a.b = x: a keeps the rest

    def visit_Assign(self, node: ast.Assign) -> None:  # noqa: N802
        self.generic_visit(node)
        self._bind(list(node.targets), node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:  # noqa: N802
        self.generic_visit(node)
        self._bind([node.target], node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:  # noqa: N802
        self.generic_visit(node)
        self._bind([node.target], node.value, kill=False)

    def visit_For(self, node: ast.For) -> None:  # noqa: N802
        self._bind([node.target], node.iter)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._bind([node.target], node.iter)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:  # noqa: N802
        self.generic_visit(node)
        self._bind([node.target], node.value)

    def visit_Expr(self, node: ast.Expr) -> None:  # noqa: N802
        # `times.append(clock() - start)` makes `times` timed
        call = node.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in {"append", "extend", "update", "setdefault"}
            and any(self.is_timed(arg) for arg in call.args)
        ):
            self.timed.update(_targets(call.func.value))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:  # noqa: N802
        self.generic_visit(node)
        for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            sides = [cmp.left, *cmp.comparators]
            if any(
                isinstance(op, _ORDER)
                and not (_is_zero(left) or _is_zero(right))
                and (self.is_timed(left) or self.is_timed(right))
                for op, left, right in zip(cmp.ops, sides, sides[1:], strict=False)
            ):
                self.found.append(node.lineno)
                return


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in (0, 0.0) and node.value is not False


def timing_asserts(source: str) -> list[tuple[int, str]]:
    """(line, text) of every assert in `source` that orders a timed value against a bound.

    >>> timing_asserts("import time\\nt = time.perf_counter()\\nassert t < 10\\n")
    [(3, 'assert t < 10')]
    >>> timing_asserts("history = run()\\nassert all(t > 0 for t in history.tokens_per_s)\\n")
    []
    """
    taint = _Taint()
    taint.visit(ast.parse(source))
    lines = source.splitlines()
    return [(n, lines[n - 1].strip()) for n in taint.found]


def notebook_source(path: Path) -> tuple[str, list[int]]:
    """A notebook's code cells joined into one module (IPython magics commented out), and
    for each line of it the index of the cell it came from."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines: list[str] = []
    owner: list[int] = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        for line in "".join(cell.get("source", "")).splitlines() + [""]:
            stripped = line.lstrip()
            lines.append("# " + line if stripped.startswith(("%", "!")) else line)
            owner.append(i)
    return "\n".join(lines) + "\n", owner


def check_paths(paths: list[Path]) -> list[str]:
    """`path: line/cell: assert ...` for every timing assert in the files."""
    problems = []
    for path in paths:
        rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
        if path.suffix == ".ipynb":
            source, owner = notebook_source(path)
            for line, text in timing_asserts(source):
                problems.append(f"{rel}: cell {owner[line - 1]}: {text}")
        else:
            for line, text in timing_asserts(path.read_text(encoding="utf-8")):
                problems.append(f"{rel}:{line}: {text}")
    return problems


def default_paths() -> list[Path]:
    return sorted((ROOT / "tests").glob("*.py")) + list(all_notebook_paths())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or default_paths()
    problems = check_paths(paths)
    for problem in problems:
        print(problem)
    print(f"Timing asserts: {len(paths)} files, {len(problems)} found")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
