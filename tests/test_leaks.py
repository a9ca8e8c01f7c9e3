"""Nothing hidden reaches students: no solution code in release/, no hidden test in release/, solutions/ or the package."""
import re

import nbformat
import pytest

from conftest import ROOT, STEPS

MARKERS = re.compile(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)")


def blocks(step, begin, end):
    """Lines inside begin/end blocks of the master notebook, and the lines outside them."""
    inside, outside = set(), set()
    nb = nbformat.read(ROOT / "source" / step / f"{step}.ipynb", as_version=4)
    for cell in nb.cells:
        within = False
        for line in cell.source.splitlines():
            stripped = line.strip()
            if begin in stripped:
                within = True
            elif end in stripped:
                within = False
            elif stripped:
                (inside if within else outside).add(stripped)
    # A line written both inside and outside a block (a print, a `for` header) shows nothing secret.
    return {line for line in inside - outside if len(line) > 8}


def code_lines(paths):
    lines = {}
    for path in paths:
        if path.suffix == ".ipynb":
            text = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
        else:
            text = path.read_text()
        for line in text.splitlines():
            lines.setdefault(line.strip(), path.relative_to(ROOT))
    return lines


def leaked(secret_lines, paths):
    published = code_lines(paths)
    return sorted(f"{published[line]}: {line}" for line in secret_lines if line in published)


STUDENT_FILES = {
    "release": lambda step: sorted((ROOT / "release" / step).rglob("*.ipynb")),
    "solutions": lambda step: sorted((ROOT / "solutions" / step).rglob("*.ipynb")),
    "package": lambda step: sorted((ROOT / "attention_course").rglob("*.py")),
    "lessons": lambda step: sorted((ROOT / "notebooks").glob("*.ipynb")),
}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("where", sorted(STUDENT_FILES))
def test_no_hidden_test_line_is_published(step, where):
    hidden = blocks(step, "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
    assert hidden, f"source/{step} has no hidden tests"
    found = leaked(hidden, STUDENT_FILES[where](step))
    assert not found, f"hidden tests of {step} appear in {where}:\n" + "\n".join(found)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("where", ["release", "package"])
def test_no_solution_line_reaches_students(step, where):
    solution = blocks(step, "### BEGIN SOLUTION", "### END SOLUTION")
    assert solution, f"source/{step} has no solution blocks"
    found = leaked(solution, STUDENT_FILES[where](step))
    assert not found, f"solution code of {step} appears in {where}:\n" + "\n".join(found)


@pytest.mark.parametrize("folder", ["release", "solutions"])
def test_no_nbgrader_markers_are_published(folder):
    marked = [str(path.relative_to(ROOT)) for path in (ROOT / folder).rglob("*.ipynb")
              if MARKERS.search(path.read_text())]
    assert not marked, f"nbgrader markers left in {marked}"
