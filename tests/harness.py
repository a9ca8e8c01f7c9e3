"""nbgrader on a throwaway copy of the course: generate, submit, autograde, read the gradebook.

The tests use it; a maintainer can also grade bank variants of one step by hand:

    .venv/bin/python tests/harness.py 04_causal_mask [VARIANT ...]
"""
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import course  # noqa: E402

os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
# Without bubblewrap the grader refuses to run student code; the tests then grade unsandboxed on purpose and leave
# out what only the sandbox keeps safe (tests/conftest.py `require` says so).
SANDBOX = shutil.which("bwrap") is not None


def nbgrader(course_dir, *args, check=True, env=None):
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"], cwd=course_dir,
                            capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def make_course(target, steps=None):
    """A course copy in `target` with every assignment (or `steps`) generated and registered in its own gradebook."""
    Path(target).mkdir(parents=True, exist_ok=True)
    course.make_course_copy(target)
    course.generate_release(target, steps)
    return Path(target)


def read_notebook(path):
    import nbformat
    return nbformat.read(path, as_version=4)


def source_notebook(step):
    return read_notebook(ROOT / "source" / step / f"{step}.ipynb")


HIDDEN = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
SOLUTION = ("### BEGIN SOLUTION", "### END SOLUTION")


def block_runs(step, begin, end):
    """The runs of stripped lines inside begin/end blocks of the master notebook, and the set of lines outside them."""
    runs, outside = [], set()
    nb = source_notebook(step)
    for cell in nb.cells:
        run = None
        for line in cell.source.splitlines():
            stripped = line.strip()
            if begin in stripped:
                run = []
                runs.append(run)
            elif end in stripped:
                run = None
            elif stripped:
                run.append(stripped) if run is not None else outside.add(stripped)
    return runs, outside


def blocks(step, begin, end):
    """Lines only written inside the blocks: a line also written outside (a print, a `for` header) shows nothing."""
    runs, outside = block_runs(step, begin, end)
    return {line for run in runs for line in run if line not in outside and len(line) > 8}


def autograded_cells(step):
    """{grade_id: points} of the cells autograde scores (test cells; manually graded answers excluded)."""
    cells = {}
    for cell in source_notebook(step).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            cells[meta["grade_id"]] = float(meta["points"])
    return cells


def variant_notebook(step, replacements):
    """The answer key of a step with the source of some cells (by grade_id) replaced."""
    nb = course.answer_key(ROOT / "source" / step / f"{step}.ipynb")
    unknown = set(replacements) - {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
    if unknown:
        raise KeyError(f"{step} has no cells {sorted(unknown)}")
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in replacements:
            cell.source = replacements[grade_id]
    return nb


def variant_submission(step, variant):
    """What a bank variant submits: the answer key with its cells replaced, then its `notebook` transform if any
    (which may return raw text, e.g. invalid JSON, or None for a submission without the notebook)."""
    nb = variant_notebook(step, variant.get("cells", {}))
    transform = variant.get("notebook")
    return transform(nb) if transform else nb


def submit(course_dir, student, step, nb):
    import nbformat
    folder = Path(course_dir) / "submitted" / student / step
    folder.mkdir(parents=True, exist_ok=True)
    if nb is None:
        return
    if isinstance(nb, (str, bytes)):
        (folder / f"{step}.ipynb").write_text(nb if isinstance(nb, str) else nb.decode())
    else:
        nbformat.write(nb, folder / f"{step}.ipynb")


def submit_into(path, nb):
    """Overwrite a fetched notebook with the cells of `nb`, as a student who typed the answers would."""
    import nbformat
    nbformat.write(nb, path)


def grade_class(course_dir, *args, workers=1, timeout=10):
    """The instructor's class grading command (course.py grade) run in a course copy; returns its output."""
    command = [sys.executable, "-m", "attention_grader", *args, "--workers", str(workers),
               "--timeout", str(timeout), "--root", str(course_dir)] + ([] if SANDBOX else ["--unsandboxed"])
    run = subprocess.run(command, cwd=course_dir, capture_output=True, text=True)
    if run.returncode not in (0, 1):
        raise RuntimeError(f"course.py grade failed:\n{run.stdout}\n{run.stderr}")
    return run.stdout


def cell_scores(course_dir, step, student):
    """{grade_id: score} of the autograded cells of one student's submission, from the gradebook."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{Path(course_dir) / 'gradebook.db'}", "attention-step-by-step") as gb:
        submission = gb.find_submission_notebook(step, step, student)
        autograded = autograded_cells(step)
        return {grade.name: grade.score for grade in submission.grades if grade.name in autograded}


def cell_errors(course_dir, step, student):
    """{grade_id: error text} of the cells that failed in the autograded notebook."""
    nb = read_notebook(Path(course_dir) / "autograded" / student / step / f"{step}.ipynb")
    errors = {}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        texts = [f"{out.get('ename')}: {out.get('evalue')}" for out in cell.get("outputs", [])
                 if out.output_type == "error"]
        texts += [out.text for out in cell.get("outputs", []) if out.get("name") == "stderr"]
        if grade_id and texts:
            errors[grade_id] = "\n".join(texts)
    return errors


def feedback_text(course_dir, step, student):
    """The text a student reads in the HTML feedback, tags removed and entities decoded."""
    import html
    import re
    page = (Path(course_dir) / "feedback" / student / step / f"{step}.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def bank_module(step):
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    return importlib.import_module(f"bank.{step}")


def bank(step, integrity=True, every_route=None):
    """The submission bank of a step: VARIANTS of tests/bank/<step>.py, plus the cheating and broken submissions
    of tests/bank/integrity.py built for that step ({} when the step has no bank file); every_route=True adds every
    route of integrity.py to any step."""
    if not (ROOT / "tests" / "bank" / f"{step}.py").exists():
        return {}
    variants = dict(bank_module(step).VARIANTS)
    if integrity:
        variants.update(importlib.import_module("bank.integrity").variants(step, every_route))
    return variants


def matches(expected, got, variant):
    """Scores as the bank expects: exactly, or at most (`at_most`) for a cheat whose effect depends on timing."""
    if variant.get("at_most"):
        return set(expected) == set(got) and all(got[cell] <= expected[cell] for cell in expected)
    return expected == got


def expected_scores(step, variant):
    full = autograded_cells(step)
    return {grade_id: 0.0 if grade_id in variant.get("fails", {}) else points for grade_id, points in full.items()}


def grade_variants(step, names=None, variants=None):
    """Grade bank variants of one step (or the `variants` given) in a fresh course copy; return {name: (expected,
    got, errors)}."""
    variants = variants or bank(step)
    names = names or sorted(variants)
    with tempfile.TemporaryDirectory() as tmp:
        course_dir = make_course(tmp)
        for name in names:
            submit(course_dir, name, step, variant_submission(step, variants[name]))
        grade_class(course_dir, step, workers=2)
        return {name: (expected_scores(step, variants[name]), cell_scores(course_dir, step, name),
                       cell_errors(course_dir, step, name)) for name in names}


if __name__ == "__main__":
    step, names = sys.argv[1], sys.argv[2:]
    for name, (expected, got, errors) in grade_variants(step, names).items():
        verdict = "ok " if matches(expected, got, bank(step)[name]) else "BAD"
        print(f"{verdict} {name}: expected {expected} got {got}")
        wanted = bank(step)[name].get("fails", {})
        for grade_id, text in wanted.items():
            if text.lower() not in errors.get(grade_id, "").lower():
                print(f"    message of {grade_id} lacks {text!r}: {errors.get(grade_id, '')[:300]!r}")
