import os
import shutil
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

# System programs some tests need. Where one is missing those tests skip, each with one loud line, listed again at the
# end with the apt-get that enables them; with COURSE_NO_SKIP=1 (CI sets it) a missing program fails them instead.
SYSTEM_PROGRAMS = {"bwrap": "bubblewrap", "chromium": "chromium", "initdb": "postgresql"}


def find_program(program):
    found = shutil.which(program)
    if program == "initdb" and not found:
        found = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), None)
    return found


def require(program, why):
    """Skip (or, under COURSE_NO_SKIP=1, fail) the calling test when a system program is missing."""
    if find_program(program):
        return
    line = f"{why}: needs {program} (apt-get install {SYSTEM_PROGRAMS[program]})"
    if os.environ.get("COURSE_NO_SKIP"):
        pytest.fail(f"{line}; COURSE_NO_SKIP=1 turns this skip into a failure", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {line}")


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "SKIPPED LOUDLY" in str(r.longrepr)]
    if skipped:
        terminalreporter.section("tests skipped for a missing system program")
        for line in sorted({str(r.longrepr[2]).split("SKIPPED LOUDLY: ")[-1] for r in skipped}):
            terminalreporter.write_line(line)
        packages = " ".join(sorted(set(SYSTEM_PROGRAMS.values())))
        terminalreporter.write_line(f"enable them all: apt-get install {packages}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed browser test gets a screenshot of the page as it was, and its path in the report."""
    report = (yield).get_result()
    page = getattr(item, "funcargs", {}).get("page")
    if report.when == "call" and report.failed and hasattr(page, "shot"):
        report.sections.append(("screenshot", f"the page at the failure: {page.shot('FAILED')}"))
