"""What a student's Validate button says: every master notebook passes, every untouched release fails every test."""
import pytest
from nbgrader.validator import Validator

import harness
from conftest import ROOT, STEPS


@pytest.mark.parametrize("step", STEPS)
def test_master_notebook_passes_validation(step):
    result = Validator().validate(str(ROOT / "source" / step / f"{step}.ipynb"))
    assert result == {}, f"source/{step} fails validation: {result}"


@pytest.mark.parametrize("step", STEPS)
def test_untouched_release_fails_every_test_cell(step):
    release = ROOT / "release" / step / f"{step}.ipynb"
    failed = {cell["source"] for cell in Validator().validate(str(release)).get("failed", [])}
    tests = {cell.metadata.nbgrader.grade_id: cell.source.strip() for cell in harness.read_notebook(release).cells
             if cell.metadata.get("nbgrader", {}).get("grade_id") in harness.autograded_cells(step)}
    passing = sorted(grade_id for grade_id, source in tests.items() if source not in failed)
    assert tests and not passing, f"release/{step}: test cells {passing} pass before any code is written"


# What the Validate button of `course.py start` says (jupyter_config/jupyter_server_config.py wraps nbgrader's handler).
LESSON_STEP = STEPS[0]


@pytest.fixture(scope="module")
def validate(tmp_path_factory):
    """The Validate button's server side, as `course.py start` configures it, on a copy of the course."""
    import logging
    import os
    import runpy
    import shutil

    from nbgrader.server_extensions.validate_assignment import handlers
    from traitlets.config import Config

    runpy.run_path(str(ROOT / "jupyter_config" / "jupyter_server_config.py"), init_globals={"get_config": Config})
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "notebooks", course / "notebooks")
    (course / "work" / LESSON_STEP).mkdir(parents=True)
    shutil.copy(ROOT / "release" / LESSON_STEP / f"{LESSON_STEP}.ipynb", course / "work" / LESSON_STEP)

    class Handler:  # what the server's handler holds: the root folder, a log, nbgrader's own validation
        root_dir, log = str(course), logging.getLogger("validate")
        load_config = handlers.ValidateAssignmentHandler.load_config
        course_validate_notebook = handlers.ValidateAssignmentHandler.course_validate_notebook
        validate_notebook = handlers.ValidateAssignmentHandler.validate_notebook

    cwd = os.getcwd()
    os.chdir(course)  # the server runs in the course root, where nbgrader_config.py is
    yield course, Handler()
    os.chdir(cwd)


def notes(answer):
    """The texts of the dialog's entries: the course's notes as they read, failing cells by their first line."""
    assert answer["success"], answer
    return [entry["raw_error"] if not entry["source"] else "FAILED: " + entry["source"].splitlines()[0]
            for entry in answer["value"].get("failed", [])]


def test_validate_on_a_lesson_says_there_is_nothing_to_validate(validate):
    course, handler = validate
    answer = handler.validate_notebook(f"notebooks/{LESSON_STEP}.ipynb")
    assert notes(answer) == [f"Nothing to validate: {LESSON_STEP}.ipynb is a lesson, with no tests and no grade. Its "
                             f"exercise is work/{LESSON_STEP}/{LESSON_STEP}.ipynb: validate that one."]


def test_validate_reports_a_blank_written_answer_as_still_to_write_apart_from_failing_tests(validate):
    import nbformat
    course, handler = validate
    path = course / "work" / LESSON_STEP / f"{LESSON_STEP}.ipynb"
    answer = notes(handler.validate_notebook(str(path.relative_to(course))))
    release = nbformat.read(path, as_version=4)
    tests = [cell for cell in release.cells if cell.metadata.get("nbgrader", {}).get("grade")
             and cell.cell_type == "code"]
    question = "Still to write: your answer to \"Part 4 · Reading the scores\" (1 point, graded by hand), in place " \
               "of \"YOUR ANSWER HERE\"."
    assert answer[0] == f"{len(tests)} test cells still fail; 1 written answer still to write.", answer
    assert answer[1:-1] == ["FAILED: " + cell.source.strip().splitlines()[0] for cell in tests]
    assert answer[-1] == question

    key = harness.variant_notebook(LESSON_STEP, {})  # the answer key's code, the written answer left as released
    for cell, mine in zip(release.cells, key.cells, strict=True):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = mine.source
    nbformat.write(release, path)
    assert notes(handler.validate_notebook(str(path.relative_to(course)))) == [
        "Every test passes; 1 written answer still to write.", question]


def test_a_warning_prints_after_the_failed_check_in_the_validate_dialog(tmp_path):
    """A warning of the student's code (x.T on a 3-D tensor, say) must not push the check's message down the dialog."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    test = new_code_cell('import warnings\nwarnings.warn("x.T on a 3-D tensor is deprecated")\n'
                         'expect(False, "scores(x) has the wrong values", hint="one dot product per pair")')
    test.metadata.nbgrader = {"grade": True, "grade_id": "test_scores", "points": 1, "solution": False,
                              "locked": True, "schema_version": 3}
    notebook = new_notebook(cells=[new_code_cell("from attention_course.checks import expect"), test])
    nbformat.write(notebook, tmp_path / "warns.ipynb")
    error = Validator().validate(str(tmp_path / "warns.ipynb"))["failed"][0]["raw_error"]
    assert "x.T on a 3-D tensor is deprecated" in error
    assert error.index("scores(x) has the wrong values") < error.index("likely mistake") < error.index("x.T on a 3-D")
