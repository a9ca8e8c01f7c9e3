"""The course layout, and release/ and solutions/ exactly as the build makes them from source/."""
import ast
import json
import re

import nbformat
import pytest

import course
from conftest import ROOT, STEPS

PLANNED_STEPS = [
    "01_dot_product_scores", "02_softmax", "03_trainable_qkv", "04_causal_mask",
    "05_dropout", "06_multihead_wrapper", "07_weight_split_mha", "08_efficient_attention", "09_kv_cache",
    "10_flash_attention", "11_rope_gqa", "12_tiny_gpt", "13_attention_backward",
]
REBUILD = "run `python3 course.py build` and commit release/ and solutions/"


def test_every_planned_step_has_source_lesson_release_and_solution():
    assert STEPS == PLANNED_STEPS, f"source/ has steps {STEPS}, the course plans {PLANNED_STEPS}"
    for step in STEPS:
        for path in (f"source/{step}/{step}.ipynb", f"release/{step}/{step}.ipynb",
                     f"solutions/{step}/{step}.ipynb", f"notebooks/{step}.ipynb"):
            assert (ROOT / path).is_file(), f"{path} is missing"


@pytest.mark.parametrize("step", STEPS)
def test_source_notebooks_have_no_outputs(step):
    nb = nbformat.read(ROOT / "source" / step / f"{step}.ipynb", as_version=4)
    with_outputs = [i for i, cell in enumerate(nb.cells)
                    if cell.cell_type == "code" and (cell.outputs or cell.execution_count)]
    assert not with_outputs, f"source/{step}: cells {with_outputs} have outputs; clear them before committing"


@pytest.fixture(scope="module")
def fresh_release(tmp_path_factory):
    course_dir = tmp_path_factory.mktemp("course")
    course.make_course_copy(course_dir)
    return course.generate_release(course_dir)


@pytest.mark.parametrize("step", STEPS)
def test_release_equals_fresh_generate_assignment(step, fresh_release):
    fresh = {p.relative_to(fresh_release): p.read_bytes() for p in (fresh_release / step).rglob("*") if p.is_file()}
    committed = {p.relative_to(ROOT / "release"): p.read_bytes()
                 for p in (ROOT / "release" / step).rglob("*") if p.is_file()}
    assert sorted(committed) == sorted(fresh), f"release/{step} has other files than a fresh build: {REBUILD}"
    stale = [str(name) for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"release/{step} is stale ({stale}): {REBUILD}"


def cells(nb):
    """What the build writes into a solution besides outputs: each cell's type, source and metadata."""
    return [(cell.cell_type, cell.source, json.dumps(cell.metadata, sort_keys=True)) for cell in nb.cells]


@pytest.mark.parametrize("step", STEPS)
def test_solutions_equal_fresh_build(step):
    """The cells of solutions/ are the answer key of source/; nbval re-executes solutions/ and compares outputs."""
    fresh = course.answer_key(ROOT / "source" / step / f"{step}.ipynb")
    committed = nbformat.read(ROOT / "solutions" / step / f"{step}.ipynb", as_version=4)
    assert cells(committed) == cells(fresh), f"solutions/{step} is stale: {REBUILD}"


def names_students_write(step):
    """The functions and classes defined in the solution cells of a step's master notebook."""
    nb = nbformat.read(ROOT / "source" / step / f"{step}.ipynb", as_version=4)
    sources = [cell.source for cell in nb.cells
               if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution")]
    return [node.name for source in sources for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


@pytest.mark.parametrize("step", STEPS)
def test_readme_table_lists_what_students_write(step):
    row = next((line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(f"| {step[:2]} |")),
               None)
    assert row, f"README.md has no row for step {step[:2]} in its table of what students write"
    listed = re.findall(r"`(\w+)`", row.split("|")[3])
    assert listed == names_students_write(step), f"README.md's row for {step[:2]} lists {listed}"
