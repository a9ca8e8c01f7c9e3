"""The instructor's round trip, per assignment, through nbgrader's own commands in a copy of the course.

The answer key submitted as a student gets full marks on every autograded cell, the untouched release gets zero,
`nbgrader export` reports exactly those numbers, and every variant of the submission bank (tests/bank/) gets its
expected score per cell with a message that names the mistake.
"""
import csv
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness
from conftest import ROOT, STEPS

ANSWER_KEY, UNTOUCHED = "answer_key", "untouched_release"


def grade_step(base, step, tmp_path):
    course_dir = tmp_path / step
    shutil.copytree(base, course_dir)
    harness.submit(course_dir, ANSWER_KEY, step, harness.variant_notebook(step, {}))
    harness.submit(course_dir, UNTOUCHED, step, (ROOT / "release" / step / f"{step}.ipynb").read_text())
    variants = harness.bank(step)
    for name, variant in variants.items():
        harness.submit(course_dir, name, step, harness.variant_notebook(step, variant["cells"]))
    harness.autograde(course_dir, step)
    harness.nbgrader(course_dir, "generate_feedback", step)
    harness.nbgrader(course_dir, "export", "--to=grades.csv")
    with open(course_dir / "grades.csv") as f:
        exported = {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == step}
    students = [ANSWER_KEY, UNTOUCHED, *variants]
    return {
        "scores": {s: harness.cell_scores(course_dir, step, s) for s in students},
        "errors": {s: harness.cell_errors(course_dir, step, s) for s in students},
        "export": exported,
        "feedback": {s: harness.feedback_text(course_dir, step, s) for s in students},
        "submitted_lines": {s: {line.strip() for cell in harness.read_notebook(
            course_dir / "submitted" / s / step / f"{step}.ipynb").cells for line in cell.source.splitlines()}
            for s in students},
    }


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """Each step the selected tests need, graded once: two at a time, each in its own copy of one generated course."""
    steps = sorted({item.callspec.params["step"] for item in request.session.items
                    if getattr(item, "module", None) is request.module and "step" in item.callspec.params})
    tmp_path = tmp_path_factory.mktemp("grading")
    base = harness.make_course(tmp_path / "base")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {step: pool.submit(grade_step, base, step, tmp_path) for step in steps}
        return {step: future.result() for step, future in futures.items()}


@pytest.mark.parametrize("step", STEPS)
def test_answer_key_gets_full_marks(step, graded):
    assert graded[step]["scores"][ANSWER_KEY] == harness.autograded_cells(step), graded[step]["errors"][ANSWER_KEY]


@pytest.mark.parametrize("step", STEPS)
def test_untouched_release_gets_zero(step, graded):
    assert graded[step]["scores"][UNTOUCHED] == {cell: 0.0 for cell in harness.autograded_cells(step)}


@pytest.mark.parametrize("step", STEPS)
def test_export_reports_the_autograded_scores(step, graded):
    rows = graded[step]["export"]
    full = sum(harness.autograded_cells(step).values())
    assert float(rows[ANSWER_KEY]["score"]) == full
    assert float(rows[UNTOUCHED]["score"]) == 0.0
    assert rows[ANSWER_KEY]["assignment"] == step


@pytest.mark.parametrize("step", STEPS)
def test_feedback_shows_failures_but_no_hidden_test(step, graded):
    hidden = harness.blocks(step, *harness.HIDDEN)
    for student, text in graded[step]["feedback"].items():
        # A line the student wrote themselves may happen to equal one of the hidden tests.
        lines = {line.strip() for line in text.splitlines()} - graded[step]["submitted_lines"][student]
        shown = sorted(hidden & lines)
        assert not shown, f"the feedback of {student} on {step} shows hidden test code: {shown}"
    for variant, spec in harness.bank(step).items():
        for text in spec.get("fails", {}).values():
            assert text.lower() in graded[step]["feedback"][variant].lower(), (
                f"the feedback of {variant} on {step} does not say {text!r}")


BANK = [(step, name) for step in STEPS for name in sorted(harness.bank(step))]


@pytest.mark.parametrize("step,variant", BANK, ids=[f"{step}-{name}" for step, name in BANK])
def test_bank_variant_gets_expected_scores(step, variant, graded):
    spec = harness.bank(step)[variant]
    errors = graded[step]["errors"][variant]
    assert graded[step]["scores"][variant] == harness.expected_scores(step, spec), errors
    for cell, text in spec.get("fails", {}).items():
        assert text.lower() in errors.get(cell, "").lower(), (
            f"the student's message for {cell} should mention {text!r}; it says: {errors.get(cell)!r}")


@pytest.mark.parametrize("step", STEPS)
def test_bank_has_correct_variants_and_mistakes(step):
    kinds = [variant["kind"] for variant in harness.bank(step).values()]
    assert kinds.count("correct") >= 2 and kinds.count("mistake") >= 1, f"tests/bank/{step}.py is too small: {kinds}"
