"""The book's own checks can fail: hygiene, the shared setup cell, and nbval's strictness."""

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from book import ROOT, all_notebook_paths, notebook_paths, setup_cell
from check_notebooks import check_notebook, raw_float_reprs
from execute_notebooks import clean_metadata


def make_notebook(path, cells):
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def executed(source, count, text):
    cell = new_code_cell(source, execution_count=count)
    cell.outputs = [new_output("stream", name="stdout", text=text)]
    return cell


def clean_cells():
    return [new_markdown_cell("# t"), executed(setup_cell(), 1, ""), executed("print(2)", 2, "2\n")]


def test_a_clean_notebook_passes(tmp_path):
    assert check_notebook(make_notebook(tmp_path / "nb.ipynb", clean_cells())) == []


def test_out_of_order_or_unexecuted_cells_fail(tmp_path):
    cells = clean_cells()
    cells[2].execution_count = 5
    problems = check_notebook(make_notebook(tmp_path / "a.ipynb", cells))
    assert any("execution counts are [1, 5], expected 1..2" in p for p in problems)
    cells[2].execution_count = None
    problems = check_notebook(make_notebook(tmp_path / "b.ipynb", cells))
    assert any("execution counts are [1, None]" in p for p in problems)


def test_untagged_error_output_fails_and_tagged_one_passes(tmp_path):
    cells = clean_cells()
    cells[2].outputs = [new_output("error", ename="ValueError", evalue="x", traceback=[])]
    problems = check_notebook(make_notebook(tmp_path / "a.ipynb", cells))
    assert any("cell 2: stores an error (ValueError)" in p for p in problems)
    cells[2].metadata["tags"] = ["raises-exception"]
    assert check_notebook(make_notebook(tmp_path / "b.ipynb", cells)) == []


def test_volatile_metadata_and_wrong_kernel_fail(tmp_path):
    cells = clean_cells()
    cells[2].metadata["execution"] = {"iopub.execute_input": "2026-01-01"}
    path = make_notebook(tmp_path / "a.ipynb", cells)
    nb = nbformat.read(path, as_version=4)
    nb.metadata["colab"] = {"provenance": []}
    nb.metadata["kernelspec"]["name"] = "conda-env"
    nbformat.write(nb, path)
    problems = "\n".join(check_notebook(path))
    assert "kernelspec name is 'conda-env'" in problems
    assert "notebook metadata has 'colab'" in problems
    assert "cell 2: metadata has 'execution'" in problems
    # ... and the re-execution tool's clean-up removes exactly these.
    clean_metadata(nb)
    assert all("execution" not in cell.metadata for cell in nb.cells)
    assert "colab" not in nb.metadata and nb.metadata["kernelspec"]["name"] == "python3"


def test_a_changed_setup_cell_fails(tmp_path):
    cells = clean_cells()
    cells[1].source = setup_cell().replace("seed=0", "seed=1")
    problems = check_notebook(make_notebook(tmp_path / "a.ipynb", cells))
    assert any("not the book's setup cell" in p for p in problems)


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        ("tensor([1., 1., 1.])\n", True),  # PyTorch 2.13's text ...
        ("row sums: tensor([1.000, 1.000, 1.000])\n", True),  # ... and 2.11's
        ("tensor(0.3333)\n", True),  # a 0-d tensor
        ("tensor([[nan, nan],\n        [0.500, 0.500]])\n", True),  # over several lines
        ("tensor([-1e+09, 2e-03])\n", True),
        ("tensor([nan, nan, nan])\n", True),  # a fully masked row
        ("array([0.25, 0.75])\n", True),
        ("tensor([1., 2.], dtype=torch.float64)\n", True),
        ("tensor([1, 2, 3])\n", False),  # integers print the same in every version
        ("tensor([True, False])\n", False),
        ("tensor([[0, 1]], dtype=torch.int32)\n", False),
        ("torch.Size([2, 10, 32])\n", False),
        ("row sums: [1.000, 1.000, 1.000]\n", False),  # utils.fmt's text
        ("a tensor(...) call\n", False),
    ],
)
def test_raw_float_tensors_are_found_and_integers_are_not(text, raw):
    assert bool(raw_float_reprs(text)) == raw


def test_a_stored_raw_float_tensor_fails_the_hygiene_check(tmp_path):
    cells = clean_cells()
    cells[2].outputs = [new_output("stream", name="stdout", text="tensor([1., 1., 1.])\n")]
    problems = check_notebook(make_notebook(tmp_path / "a.ipynb", cells))
    assert any("cell 2: prints a raw float tensor/array" in p for p in problems)
    cells[2].outputs = [
        new_output("execute_result", execution_count=2, data={"text/plain": "array([0.5, 0.25])"})
    ]
    problems = check_notebook(make_notebook(tmp_path / "b.ipynb", cells))
    assert any("cell 2: prints a raw float tensor/array" in p for p in problems)


def test_every_book_notebook_is_clean():
    paths = all_notebook_paths()  # the chapters and the solutions notebooks
    assert paths, "the book has no notebooks"
    assert [p for path in paths for p in check_notebook(path)] == []


def run_nbval(path):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--nbval",
            "--nbval-current-env",
            "--nbval-sanitize-with",
            str(ROOT / "tools" / "book" / "nbval_sanitize.cfg"),
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=path.parent,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stored", "verdict"),
    [
        ("4\n", "pass"),
        ("5\n", "fail"),  # a changed printed value
        (None, "fail"),  # a deleted output
        ("4\n<object at 0x7f3a2b1c9d10>\n", "pass"),  # addresses are sanitised...
    ],
)
def test_nbval_is_strict_about_printed_values(tmp_path, stored, verdict):
    source = "print(2 + 2)"
    if stored and "object at" in stored:
        source += "\nprint(f'<object at {hex(id(object()))}>')"  # ...whatever they are
    cell = new_code_cell(source, execution_count=1)
    if stored is not None:
        cell.outputs = [new_output("stream", name="stdout", text=stored)]
    result = run_nbval(make_notebook(tmp_path / "nb.ipynb", [cell]))
    assert (result.returncode == 0) == (verdict == "pass"), result.stdout[-2000:]


def test_readme_contents_link_every_notebook():
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(notebooks/(\d\d_[\w-]+\.ipynb)\)", readme))
    assert linked == {p.name for p in notebook_paths()}


def test_malformed_notebooks_and_empty_cells_are_reported_not_crashed_on(tmp_path):
    bad = tmp_path / "list.ipynb"
    bad.write_text("[]")
    assert any("not a notebook" in p for p in check_notebook(bad))
    cells = clean_cells() + [new_code_cell("")]
    problems = check_notebook(make_notebook(tmp_path / "empty.ipynb", cells))
    assert problems == [f"{tmp_path / 'empty.ipynb'}: cell 3: empty code cell (delete it)"]


@pytest.mark.slow
def test_set_repo_url_rewrites_every_place_in_a_copy(tmp_path):
    import shutil

    copy = tmp_path / "book"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "node_modules", ".venv"))
    url = "https://github.com/someone/my-fork"
    run = subprocess.run(
        [sys.executable, "tools/book/set_repo_url.py", url],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert f'REPO_URL = "{url}"' in (copy / "tools" / "book" / "book.py").read_text()
    assert "someone/my-fork/blob/main/notebooks" in (copy / "README.md").read_text()
    check = subprocess.run(
        [sys.executable, "tools/book/check_notebooks.py"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # every setup cell, chapters and solutions, now has the new address (the hygiene check's
    # other rules, the exercises' links among them, are the business of other tests)
    assert "Notebook hygiene:" in check.stdout and "setup cell" not in check.stdout, check.stdout
    again = subprocess.run(
        [sys.executable, "tools/book/set_repo_url.py", "not-a-url"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2


@pytest.mark.slow
def test_make_figures_writes_the_architecture_the_same_way_twice(tmp_path):
    from make_figures import make_figures

    first, second = make_figures(tmp_path / "a"), make_figures(tmp_path / "b")
    assert [p.name for p in first] == ["transformer_architecture.png"]
    assert first[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert first[0].read_bytes() == second[0].read_bytes()  # no time or version stamp


def test_no_notebook_writes_a_figure_into_the_repository():
    # Running a notebook must not change a tracked file: tools/book/make_figures.py writes figures.
    writers = [
        f"{path.name}: cell {i}"
        for path in all_notebook_paths()
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells)
        if cell.cell_type == "code" and "savefig(" in cell.source
    ]
    assert writers == []


@pytest.mark.slow
def test_run_cells_reports_each_failing_cell_and_goes_on(tmp_path):
    """tools/book/run_cells.py (the GPU check): a failed assert is one failure, later cells
    still run, nbval's skipped cells are skipped, and `--cpu-to` moves pinned devices."""
    import json

    notebook = make_notebook(
        tmp_path / "nb.ipynb",
        [
            new_code_cell("x = 1"),
            new_code_cell("assert x == 2, 'x is 1'"),
            new_code_cell("# NBVAL_SKIP\nraise SystemExit"),
            new_code_cell('y = dict(device="cpu")["device"]'),
            new_code_cell("assert y == 'meta'"),
        ],
    )
    report = tmp_path / "report.json"
    command = [sys.executable, str(ROOT / "tools" / "book" / "run_cells.py"), "--cpu-to", "meta"]
    done = subprocess.run(
        [*command, "--json", str(report), str(notebook)], capture_output=True, text=True
    )
    assert done.returncode == 1, done.stdout + done.stderr
    cells = json.loads(report.read_text())[0]["cells"]
    assert [c["status"] for c in cells] == ["ok", "failed", "skipped", "ok", "ok"]
    assert cells[1]["error"] == "AssertionError: x is 1"
    assert [c["device_changed"] for c in cells] == [False, False, False, True, False]
    assert "1/5 cells" not in done.stdout and "3/5 cells ran" in done.stdout
