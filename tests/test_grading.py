"""The instructor's round trip, per assignment, through the class grader (course.py grade) in a copy of the course.

The answer key submitted as a student gets full marks on every autograded cell, the untouched release gets zero,
`nbgrader export` reports exactly those numbers, every variant of the submission bank (tests/bank/: right answers
written another way, common mistakes, cheats, broken notebooks) gets its expected score per cell with a message
that names the mistake, no cheat changes a file of the course, and plain nbgrader (one Jupyter kernel per notebook)
gives the same scores as the course's forking executor.
"""
import csv
import hashlib
import shutil
import sqlite3
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import harness
from bank import integrity
from conftest import ROOT, STEPS

ANSWER_KEY, UNTOUCHED = "answer_key", "untouched_release"


def fingerprint(course_dir):
    """Hashes of every file the graded students must not touch: the course's own files and the submissions."""
    course_dir = Path(course_dir)
    files = {}
    for folder in ("source", "release", "solutions", "submitted"):
        for path in sorted((course_dir / folder).rglob("*")):
            if path.is_file():
                files[str(path.relative_to(course_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    files["nbgrader_config.py"] = hashlib.sha256((course_dir / "nbgrader_config.py").read_bytes()).hexdigest()
    return files


def submitted_lines(path):
    try:
        return {line.strip() for cell in harness.read_notebook(path).cells for line in cell.source.splitlines()}
    except Exception:  # the bank's unreadable and missing notebooks
        return set()


def submit_class(course_dir, step, variants):
    harness.submit(course_dir, ANSWER_KEY, step, harness.variant_notebook(step, {}))
    harness.submit(course_dir, UNTOUCHED, step, (ROOT / "release" / step / f"{step}.ipynb").read_text())
    for name, variant in variants.items():
        harness.submit(course_dir, name, step, harness.variant_submission(step, variant))


def results_of(course_dir, step, students):
    with open(course_dir / "grades.csv") as f:
        exported = {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == step}
    return {
        "scores": {s: harness.cell_scores(course_dir, step, s) for s in students},
        "errors": {s: harness.cell_errors(course_dir, step, s) for s in students},
        "export": exported,
        "feedback": {s: harness.feedback_text(course_dir, step, s) for s in students},
        "submitted_lines": {s: submitted_lines(course_dir / "submitted" / s / step / f"{step}.ipynb")
                            for s in students},
    }


IDENTITY_CHEATS = ["cheat_copies_test_cells", "cheat_displays_a_value", "cheat_rewrites_check_code",
                   "cheat_skips_the_probe"]


def identity_sample(step):
    """The submissions plain nbgrader grades too: the answer key and one mistake on every step; on the first step
    that carries every route, also a correct variant, the untouched release, a broken notebook and the cheats (the
    whole bank is in the grading benchmark). Variants that would damage an unsandboxed course, or whose effect
    depends on timing, are left out."""
    variants = {name: v for name, v in harness.bank(step).items() if not (v.get("stock_hole") or v.get("at_most"))}
    counts = {"mistake": 1}
    if step == integrity.EVERY_ROUTE_ON[0]:
        counts.update(correct=1, broken=1, cheat=0)
    sample = {}
    for kind, count in counts.items():
        sample.update({name: variants[name] for name in sorted(n for n, v in variants.items() if v["kind"] == kind)[:count]})
    if step == integrity.EVERY_ROUTE_ON[0]:
        sample.update({name: variants[name] for name in IDENTITY_CHEATS})
        sample[UNTOUCHED] = None
    return sample


def steps_needed(request):
    """The steps of this module's selected tests; every step when one of them is about the whole class."""
    params = [getattr(item, "callspec", None) for item in request.session.items
              if getattr(item, "module", None) is request.module]
    if any(p is None or "step" not in p.params for p in params):
        return STEPS
    return sorted({p.params["step"] for p in params})


@pytest.fixture(scope="module")
def base_course(tmp_path_factory):
    return harness.make_course(tmp_path_factory.mktemp("grading") / "base")


@pytest.fixture(scope="module")
def graded(request, base_course):
    """Every step the selected tests need, in one course copy, graded by one run of the class grader: the
    instructor's command, two workers."""
    course_dir = base_course.parent / "class"
    shutil.copytree(base_course, course_dir)
    steps = steps_needed(request)
    for step in steps:
        submit_class(course_dir, step, harness.bank(step))
    before = fingerprint(course_dir)
    summary = harness.grade_class(course_dir, *steps, workers=2)
    after = fingerprint(course_dir)
    graded = {step: results_of(course_dir, step, [ANSWER_KEY, UNTOUCHED, *harness.bank(step)]) for step in steps}
    return {"summary": summary, "files": (before, after), "course": course_dir, **graded}


@pytest.fixture(scope="module")
def graded_with_kernels(request, base_course):
    """Plain nbgrader on the identity sample: `nbgrader autograde` with its own Execute, one Jupyter kernel per
    notebook, two steps at a time, each step in its own course copy (two nbgrader processes starting on one SQLite
    gradebook can collide)."""
    def autograde(step):
        course_dir = base_course.parent / "kernels" / step
        shutil.copytree(base_course, course_dir)
        harness.submit(course_dir, ANSWER_KEY, step, harness.variant_notebook(step, {}))
        for name, variant in identity_sample(step).items():
            harness.submit(course_dir, name, step, harness.variant_submission(step, variant) if variant else
                           (ROOT / "release" / step / f"{step}.ipynb").read_text())
        result = harness.nbgrader(course_dir, "autograde", step, "--force", "--Execute.timeout=30", check=False,
                                  env={"COURSE_EXECUTOR": "kernel"})
        try:
            return {s: harness.cell_scores(course_dir, step, s) for s in [ANSWER_KEY, *identity_sample(step)]}
        except Exception as error:
            raise RuntimeError(f"nbgrader autograde {step} left no grades:\n{result.stdout}\n{result.stderr}") from error

    steps = steps_needed(request)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(steps, pool.map(autograde, steps)))


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
        # No plan (hidden inputs), no record, and nothing student code printed while the hidden checks ran.
        for secret in ("attention_course.probe", "application/vnd.attention-course", '"storage"', "HIDDEN-INPUT-SEEN ["):
            written = any(secret in line for line in graded[step]["submitted_lines"][student])  # their own code
            assert written or secret not in text, f"the feedback of {student} on {step} shows {secret!r}"
        # A line the student wrote themselves may happen to equal one of the hidden tests.
        lines = {line.strip() for line in text.splitlines()} - graded[step]["submitted_lines"][student]
        shown = sorted(hidden & lines)
        assert not shown, f"the feedback of {student} on {step} shows hidden test code: {shown}"
    for variant, spec in harness.bank(step).items():
        for text in spec.get("fails", {}).values():
            assert text.lower() in graded[step]["feedback"][variant].lower(), (
                f"the feedback of {variant} on {step} does not say {text!r}")


@pytest.mark.parametrize("step", STEPS)
def test_feedback_says_a_written_answer_is_not_graded_yet(step, graded):
    """Feedback goes out right after autograde, before the instructor grades written answers by hand: those read "not
    graded yet", and the heading says how many points are still to come (nbgrader's template shows 0.0)."""
    written = [cell for cell in harness.source_notebook(step).cells if cell.cell_type == "markdown"
               and cell.metadata.get("nbgrader", {}).get("grade")]
    text = graded[step]["feedback"][ANSWER_KEY]
    points = sum(float(cell.metadata.nbgrader.points) for cell in written)
    if not written:
        assert "not graded yet" not in text and "still to be graded" not in text
        return
    assert text.count(": written answer (Score: not graded yet") == len(written), text[:2000]
    assert ": written answer (Score: 0.0" not in text
    unit = "1 point" if points == 1 else f"{points:g} points"
    assert f"/ {float(sum(harness.autograded_cells(step).values()) + points):.1f}, {unit} still to be graded by hand)" in text


BANK = [(step, name) for step in STEPS for name in sorted(harness.bank(step))]


@pytest.mark.parametrize("step,variant", BANK, ids=[f"{step}-{name}" for step, name in BANK])
def test_bank_variant_gets_expected_scores(step, variant, graded):
    spec = harness.bank(step)[variant]
    errors = graded[step]["errors"][variant]
    assert harness.matches(harness.expected_scores(step, spec), graded[step]["scores"][variant], spec), errors
    for cell, text in spec.get("fails", {}).items():
        assert text.lower() in errors.get(cell, "").lower(), (
            f"the student's message for {cell} should mention {text!r}; it says: {errors.get(cell)!r}")


def test_failing_cells_of_the_banks_mistakes_name_the_mistake(graded):
    """Of the cells each known mistake fails, the share whose message says the bank's words for that mistake and
    gives a likely mistake: at least 90% over the course (issue 35), printed by step."""
    named, failing = Counter(), Counter()
    for step in STEPS:
        for variant, spec in harness.bank(step, integrity=False).items():
            for cell, words in spec.get("fails", {}).items() if spec["kind"] == "mistake" else ():
                message = graded[step]["errors"][variant].get(cell, "").lower()
                failing[step] += 1
                named[step] += bool(words.strip()) and words.lower() in message and "likely mistake" in message
    for step in STEPS:
        print(f"{step:24} {named[step]:3} of {failing[step]:3} failing cells name the mistake "
              f"({named[step] / max(failing[step], 1):.0%})")
    assert sum(named.values()) >= 0.9 * sum(failing.values()), (sum(named.values()), sum(failing.values()))


@pytest.mark.parametrize("step", STEPS)
def test_bank_has_correct_variants_and_mistakes(step):
    kinds = [variant["kind"] for variant in harness.bank(step).values()]
    assert kinds.count("correct") >= 2 and kinds.count("mistake") >= 1, f"tests/bank/{step}.py is too small: {kinds}"


def test_no_submission_changes_a_file_of_the_course(graded):
    before, after = graded["files"]
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"grading the class changed or deleted: {changed[:10]}"


def test_two_workers_on_one_sqlite_gradebook_lose_and_duplicate_no_grade(graded):
    """Every submission of the class (two workers wrote side by side) once in the gradebook, with all its cells."""
    steps = [step for step in graded if step in STEPS]
    with sqlite3.connect(graded["course"] / "gradebook.db") as db:
        grades = db.execute(
            "SELECT student.id, assignment.name, COUNT(grade.id) FROM grade "
            "JOIN submitted_notebook ON grade.notebook_id = submitted_notebook.id "
            "JOIN submitted_assignment ON submitted_notebook.assignment_id = submitted_assignment.id "
            "JOIN assignment ON submitted_assignment.assignment_id = assignment.id "
            "JOIN student ON submitted_assignment.student_id = student.id "
            "GROUP BY submitted_assignment.id").fetchall()
        cells = dict(db.execute("SELECT assignment.name, COUNT(grade_cells.id) FROM grade_cells "
                                "JOIN base_cell ON grade_cells.id = base_cell.id "
                                "JOIN notebook ON base_cell.notebook_id = notebook.id "
                                "JOIN assignment ON notebook.assignment_id = assignment.id "
                                "GROUP BY assignment.name").fetchall())
    graded_once = [(student, step) for student, step, _ in grades]
    assert len(graded_once) == len(set(graded_once)), "a submission is in the gradebook twice"
    missing = [(student, step) for step in steps for student in [ANSWER_KEY, UNTOUCHED, *harness.bank(step)]
               if (student, step) not in graded_once]
    assert not missing, f"graded but not in the gradebook: {missing}"
    assert all(count == cells[step] for _, step, count in grades), "a submission lacks grades of some cells"


@pytest.mark.parametrize("step", integrity.EVERY_ROUTE_ON)
def test_summary_flags_crashes_timeouts_bad_records_and_unreadable_notebooks(step, graded):
    flagged = {line.split(":")[0].strip(): line for line in graded["summary"].splitlines() if " / " in line}
    for student, flag in [("broken_os_exit", "crashed"), ("broken_unstoppable_loop", "crashed"),
                          ("broken_infinite_loop", "timed out"), ("broken_over_memory_limit", "out of memory"),
                          ("cheat_skips_the_probe", "bad records"),
                          ("broken_invalid_json", "unreadable"),
                          ("broken_missing_notebook", "unreadable")]:
        assert flag in flagged.get(f"{student} / {step}", ""), (
            f"{student} should be flagged {flag!r} on {step}:\n{graded['summary']}")
    assert f"{ANSWER_KEY} / {step}" not in flagged and "Graded" in graded["summary"]


@pytest.mark.parametrize("step", STEPS)
def test_fast_path_grades_like_plain_nbgrader(step, graded, graded_with_kernels):
    plain = graded_with_kernels[step]
    fast = {student: graded[step]["scores"][student] for student in plain}
    different = {s: (plain[s], fast[s]) for s in plain if plain[s] != fast[s]}
    assert not different, f"plain nbgrader and the forking executor disagree on {step}: {different}"
