"""`python3 course.py check`: a learner alone grades their own work/ with the hidden checks, gets the points, the named
mistakes, a feedback page and a progress page, and the instructor's grading is left as it was.

Runs course.py in a copy of the course (its own work/; .venv linked to this one), as a learner would run it.
"""
import hashlib
import html
import re
import shutil
import subprocess
import sys

import harness
from attention_grader.selfcheck import opened_mark, part_titles, started
from conftest import ROOT

CORRECT, MISTAKEN, UNTOUCHED = "01_dot_product_scores", "02_softmax", "03_trainable_qkv"
INSTRUCTOR_STATE = ["gradebook.db", "submitted", "autograded", "feedback", ".grading_secret"]


def learner_course(tmp_path):
    """A clone as a learner has it after `course.py start`: the course, and work/ holding a copy of every release."""
    course = tmp_path / "course"
    course.mkdir()
    for name in ("course.py", "nbgrader_config.py", "HOME.md"):
        shutil.copy(ROOT / name, course / name)
    for name in ("source", "release", "notebooks"):
        shutil.copytree(ROOT / name, course / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    (course / ".venv").symlink_to(ROOT / ".venv")
    for notebook in (course / "release").glob("*/*.ipynb"):
        (course / "work" / notebook.parent.name).mkdir(parents=True)
        shutil.copy(notebook, course / "work" / notebook.parent.name / notebook.name)
    return course


def bank_mistake():
    """(name, variant): the first mistake of step 02's bank that lives in the notebook's cells."""
    return next((name, v) for name, v in harness.bank(MISTAKEN, integrity=False).items()
                if v["kind"] == "mistake" and "notebook" not in v)


def write_learners_work(course, mistake):
    """Step 01 answered correctly, step 02 with `mistake`, step 03 left as it was given."""
    import nbformat
    nbformat.write(harness.variant_notebook(CORRECT, {}), course / "work" / CORRECT / f"{CORRECT}.ipynb")
    nbformat.write(harness.variant_submission(MISTAKEN, mistake), course / "work" / MISTAKEN / f"{MISTAKEN}.ipynb")


def check(course, *args):
    run = subprocess.run([sys.executable, "course.py", "check", *args, *([] if harness.SANDBOX else ["--unsandboxed"])],
                         cwd=course, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def test_check_grades_a_learners_work_and_shows_progress(tmp_path):
    import nbformat
    instructor_gradebook = digest(ROOT / "gradebook.db")
    course = learner_course(tmp_path)

    out = check(course)
    assert "No exercise started yet" in out
    assert "| not started |" not in (course / "work" / "PROGRESS.md").read_text()  # links, not bare words
    assert "[not started](01_dot_product_scores/01_dot_product_scores.ipynb)" in (course / "work" / "PROGRESS.md").read_text()

    # step 01 answered correctly, step 02 with a mistake of the bank, step 03 untouched; lesson 01 opened in JupyterLab
    name, mistake = bank_mistake()
    write_learners_work(course, mistake)
    opened_mark(course, CORRECT).parent.mkdir(parents=True, exist_ok=True)  # as the student view leaves it
    opened_mark(course, CORRECT).touch()

    out = check(course)
    full = sum(harness.autograded_cells(CORRECT).values())
    got, most = sum(harness.expected_scores(MISTAKEN, mistake).values()), sum(harness.autograded_cells(MISTAKEN).values())
    assert f"{CORRECT}: {full:g}/{full:g} points" in out, out
    assert f"{MISTAKEN}: {got:g}/{most:g} points" in out, out
    assert UNTOUCHED not in out, out
    for grade_id, words in mistake["fails"].items():
        assert f"failing {grade_id}" in out and words.lower() in out.lower(), (name, words, out)
        page = html.unescape(re.sub(r"<[^>]+>", "", (course / "work" / MISTAKEN / "feedback.html").read_text()))
        assert words.lower() in page.lower(), (name, words)
    assert "### BEGIN HIDDEN TESTS" not in (course / "work" / MISTAKEN / "feedback.html").read_text()
    assert (course / "work" / CORRECT / "feedback.html").exists()
    assert not (course / "work" / UNTOUCHED / "feedback.html").exists()

    rows = {line.split(" |")[0][2:4]: line for line in (course / "work" / "PROGRESS.md").read_text().splitlines()
            if line.startswith("| 0")}
    assert "[opened](../notebooks/" in rows["01"] and "[started]" in rows["01"], rows["01"]
    assert f"[{full:g}/{full:g} points]({CORRECT}/feedback.html)" in rows["01"], rows["01"]
    assert "| nothing |" in rows["01"], rows["01"]
    assert "[not yet](../notebooks/" in rows["02"] and f"[{got:g}/{most:g} points]" in rows["02"], rows["02"]
    titles = part_titles(ROOT / "release" / MISTAKEN / f"{MISTAKEN}.ipynb")
    assert all(titles[grade_id] in rows["02"] for grade_id in mistake["fails"]), rows["02"]
    assert "[not started]" in rows["03"] and "not checked yet" in rows["03"], rows["03"]
    assert rows["02"].startswith("| 02 · Softmax"), rows["02"]  # the step's title, not its folder

    # a notebook broken after its check: refused, and the progress page no longer shows the old score as current
    good = (course / "work" / MISTAKEN / f"{MISTAKEN}.ipynb").read_text()
    (course / "work" / MISTAKEN / f"{MISTAKEN}.ipynb").write_text(good[:len(good) // 2])
    refused = subprocess.run([sys.executable, "course.py", "check", MISTAKEN], cwd=course, capture_output=True,
                             text=True)
    assert refused.returncode == 2 and "not a readable notebook" in refused.stderr, refused.stderr
    row = next(line for line in (course / "work" / "PROGRESS.md").read_text().splitlines() if line.startswith("| 02"))
    assert f"{got:g}/{most:g} points" not in row and "cannot be read" in row, row
    (course / "work" / MISTAKEN / f"{MISTAKEN}.ipynb").write_text(good)

    # an update of the course changes step 03's release: the learner's untouched copy is still not started
    copied = course / ".check" / "copied" / f"{UNTOUCHED}.ipynb"
    copied.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(course / "release" / UNTOUCHED / f"{UNTOUCHED}.ipynb", copied)
    updated = nbformat.read(course / "release" / UNTOUCHED / f"{UNTOUCHED}.ipynb", as_version=4)
    updated.cells.append(nbformat.v4.new_markdown_cell("A part added by an update of the course."))
    nbformat.write(updated, course / "release" / UNTOUCHED / f"{UNTOUCHED}.ipynb")
    assert not started(course, UNTOUCHED) and started(course, MISTAKEN)

    # the instructor's grading is left as it was: in the learner's clone and in this one
    assert [name for name in INSTRUCTOR_STATE if (course / name).exists()] == []
    assert digest(ROOT / "gradebook.db") == instructor_gradebook
    assert (course / ".check" / ".grading_secret").exists()


def test_a_step_is_found_by_folder_number_or_word():
    from attention_grader.selfcheck import step_named
    known = sorted(path.name for path in (ROOT / "source").iterdir() if path.is_dir())
    for name in ("02_softmax", "02", "2", "softmax"):
        assert step_named(name, known) == "02_softmax", name
    assert step_named("attention", known) is None  # a word of several steps' names
    assert step_named("99", known) is None
