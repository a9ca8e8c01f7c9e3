#!/usr/bin/env python3
"""One entry point for the course. Needs only Python 3.11: creates .venv on first use.

    python3 course.py start      JupyterLab on the course home (HOME.md): lessons and your work/ only
    python3 course.py start --instructor        everything, with formgrader
    python3 course.py test       the whole test suite (what CI runs)
    python3 course.py check [STEP ...]          a learner alone: grade your work/ with the hidden checks (--help)
    python3 course.py grade      autograde every submission, with feedback, a summary and grades.csv (--help)
    python3 course.py build      regenerate release/ and solutions/ from source/ (--lessons: re-execute notebooks/ too)
    python3 course.py build STEP ...            only these steps (and, with --lessons, only their lessons)
    sudo python3 course.py hub   a class on this machine: JupyterHub, an account per student (docs/hub.md, --help)
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
SETUP_FILES = [ROOT / "requirements.txt", ROOT / "pyproject.toml", ROOT / "grader" / "pyproject.toml"]
SOLUTION_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def ensure_environment():
    """Create .venv and install the pinned requirements when missing or when they changed."""
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in SETUP_FILES)).hexdigest()
    stamp = VENV / ".requirements.sha256"
    if not VENV_PYTHON.exists():
        print(f"creating the course environment in {VENV} ...", flush=True)
        venv.create(VENV, with_pip=True)
    if not stamp.exists() or stamp.read_text() != digest:
        print("installing the pinned requirements (first run takes a few minutes) ...", flush=True)
        subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "--quiet", "-r", "requirements.txt"],
                       cwd=ROOT, check=True)
        stamp.write_text(digest)


def steps():
    """The assignment names, in course order: one folder per step under source/."""
    return sorted(path.name for path in (ROOT / "source").iterdir() if path.is_dir())


def make_course_copy(target):
    """A throwaway copy of the course (config + source/) to run nbgrader in without touching the real gradebook."""
    target = Path(target)
    shutil.copy(ROOT / "nbgrader_config.py", target / "nbgrader_config.py")
    shutil.copytree(ROOT / "source", target / "source")
    return target


# `nbgrader generate_assignment STEP --force` for several steps in one process (nbgrader takes seconds to start).
GENERATE = """
import sys
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader
config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
for step in sys.argv[1:]:
    result = api.generate_assignment(step, force=True, create=True)
    if not result["success"]:
        sys.exit(f"nbgrader generate_assignment {step} failed:\\n{result['log']}")
"""


def generate_release(course_dir, only=None):
    """Run nbgrader generate_assignment for every step (or the steps in `only`) inside course_dir; return release/."""
    subprocess.run([sys.executable, "-c", GENERATE, *(only or steps())], cwd=course_dir, check=True)
    return Path(course_dir) / "release"


def answer_key(source_nb):
    """The answer key of a master notebook: hidden tests and solution markers removed, outputs cleared."""
    import nbformat
    from nbgrader.preprocessors import ClearHiddenTests

    nb = nbformat.read(source_nb, as_version=4)
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    for cell in nb.cells:
        cell.source = "\n".join(line for line in cell.source.splitlines() if not SOLUTION_MARKER.match(line))
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def execute(nb, cwd):
    """Run a notebook top to bottom in a fresh kernel of this environment, without timing metadata."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def build_solution(step, out_dir):
    import nbformat

    nb = answer_key(ROOT / "source" / step / f"{step}.ipynb")
    target = Path(out_dir) / step
    target.mkdir(parents=True, exist_ok=True)
    nbformat.write(execute(nb, target), target / f"{step}.ipynb")


def build(only=None, lessons=False):
    import nbformat

    only = only or steps()
    unknown = sorted(set(only) - set(steps()))
    if unknown:
        sys.exit(f"unknown step(s) {', '.join(unknown)}; the steps are: {', '.join(steps())}")
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate_release(make_course_copy(tmp), only)
        for step in only:
            shutil.rmtree(ROOT / "release" / step, ignore_errors=True)
            shutil.copytree(fresh / step, ROOT / "release" / step)
    for step in only:
        print(f"solutions/{step}", flush=True)
        shutil.rmtree(ROOT / "solutions" / step, ignore_errors=True)
        build_solution(step, ROOT / "solutions")
    if lessons:
        for lesson in sorted(ROOT / "notebooks" / f"{step}.ipynb" for step in only):
            print(f"notebooks/{lesson.name}", flush=True)
            nb = nbformat.read(lesson, as_version=4)
            nbformat.write(execute(nb, lesson.parent), lesson)


def copy_release_to_work():
    """Students work on copies in work/ (git-ignored), so updating the course never overwrites their answers; the
    release each copy came from is kept (.check/copied/) to tell a started exercise from an updated release."""
    from attention_grader.selfcheck import as_copied
    for notebook in sorted((ROOT / "release").glob("*/*.ipynb")):
        copy = ROOT / "work" / notebook.parent.name / notebook.name
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(notebook, copy)
            as_copied(ROOT, notebook.parent.name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(notebook, as_copied(ROOT, notebook.parent.name))


def main(argv):
    command = argv[0] if argv else "help"
    if command not in ("start", "test", "build", "grade", "check", "hub"):
        print(__doc__)
        return 0 if command in ("help", "-h", "--help") else 2
    if Path(sys.prefix).resolve() != VENV.resolve():
        ensure_environment()
        os.execv(VENV_PYTHON, [str(VENV_PYTHON), str(ROOT / "course.py"), *argv])
    os.chdir(ROOT)
    # nbgrader runs `alembic` and Jupyter runs kernels from PATH: make this environment's tools the ones found.
    os.environ["PATH"] = str(VENV / "bin") + os.pathsep + os.environ.get("PATH", "")
    if command == "start":
        copy_release_to_work()
        from attention_grader.selfcheck import write_progress
        write_progress(ROOT)
        # nbgrader's release/collect need the exchange folder (nbgrader_config.py points into the course).
        (ROOT / "exchange").mkdir(exist_ok=True)
        instructor = "--instructor" in argv[1:]
        # The views' Jupyter settings (jupyter_config/): the course home, Validate's words, and for students a file
        # browser without the answer keys and without nbgrader's instructor tools.
        views = ([] if instructor else [ROOT / "jupyter_config" / "student"]) + [ROOT / "jupyter_config"]
        inherited = [path for path in os.environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if path]
        os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(path) for path in views] + inherited)
        print("instructor view: every file, formgrader" if instructor else
              "student view: the course home, the lessons and work/ (python3 course.py start --instructor: everything, "
              "with formgrader)", flush=True)
        args = ["--ServerApp.ip=127.0.0.1", "--ServerApp.root_dir=" + str(ROOT),
                *[a for a in argv[1:] if a != "--instructor"]]
        if os.geteuid() == 0:  # containers and CI machines run as root
            args.insert(0, "--allow-root")
        os.execv(VENV / "bin" / "jupyter", ["jupyter", "lab", *args])
    if command == "test":
        # Two workers; --dist loadscope keeps the cells of one notebook together on one worker for nbval.
        options = argv[1:] or ["-n", "2", "--dist", "loadscope", "--durations=10"]
        return subprocess.call([sys.executable, "-m", "pytest", *options])
    if command == "grade":
        from attention_grader.command import main as grade
        return grade(argv[1:])
    if command == "check":
        from attention_grader.selfcheck import main as check
        return check(argv[1:], ROOT)
    if command == "hub":
        sys.path.insert(0, str(ROOT / "hub"))
        from classhub import main as hub
        return hub(argv[1:])
    build([a for a in argv[1:] if not a.startswith("--")], lessons="--lessons" in argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
