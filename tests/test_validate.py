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
