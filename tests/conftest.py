import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

# Kernels started by the tests inherit this: benchmark cells of the lessons run at their small size.
os.environ.setdefault("COURSE_QUICK", "1")
# nbgrader runs `alembic` from PATH; Jupyter finds kernels there too.
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

import course  # noqa: E402

STEPS = course.steps()
