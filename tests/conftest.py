import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

# Kernels started by the tests inherit this: benchmark cells of the lessons run at their small size.
os.environ.setdefault("COURSE_QUICK", "1")
# nbgrader runs `alembic` from PATH; Jupyter finds kernels there too.
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

import course  # noqa: E402

STEPS = course.steps()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed browser test gets a screenshot of the page as it was, and its path in the report."""
    report = (yield).get_result()
    page = getattr(item, "funcargs", {}).get("page")
    if report.when == "call" and report.failed and hasattr(page, "shot"):
        report.sections.append(("screenshot", f"the page at the failure: {page.shot('FAILED')}"))
