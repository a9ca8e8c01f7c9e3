"""The instructor's workflow of the README, command by command, in a copy of the course:
generate -> release -> (student fetches, works, submits) -> collect -> autograde -> feedback -> export.
"""
import csv
import getpass

import pytest

import harness
from conftest import STEPS

COURSE_ID = "attention-step-by-step"
STEP = STEPS[0]


def test_full_nbgrader_workflow_through_the_exchange(tmp_path):
    step = STEPS[0]
    course_dir = harness.make_course(tmp_path / "course", steps=[step])  # runs `nbgrader generate_assignment`
    harness.nbgrader(course_dir, "release_assignment", step)

    student_home = tmp_path / "student"
    student_home.mkdir()
    student_flags = [f"--course={COURSE_ID}", f"--Exchange.root={course_dir / 'exchange'}"]
    harness.nbgrader(student_home, "fetch_assignment", step, *student_flags)
    fetched = student_home / step / f"{step}.ipynb"
    assert fetched.is_file(), "the student did not receive the notebook"
    harness.submit_into(fetched, harness.variant_notebook(step, {}))
    harness.nbgrader(student_home, "submit", step, *student_flags)

    harness.nbgrader(course_dir, "collect", step)
    student = getpass.getuser()
    assert (course_dir / "submitted" / student / step / f"{step}.ipynb").is_file()
    harness.nbgrader(course_dir, "autograde", step)
    harness.nbgrader(course_dir, "generate_feedback", step)
    feedback = (course_dir / "feedback" / student / step / f"{step}.html").read_text()
    assert "BEGIN HIDDEN TESTS" not in feedback

    harness.nbgrader(course_dir, "export", "--to=grades.csv")
    with open(course_dir / "grades.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["assignment"] == step]
    assert [(row["student_id"], float(row["score"])) for row in rows] == [
        (student, sum(harness.autograded_cells(step).values()))]


HOSTILE_IDS = ["ada,bob", "=HYPERLINK(1)", "line\nbreak", "a..b", "-rf"]


@pytest.fixture(scope="module")
def fresh_clone_class(tmp_path_factory):
    """A fresh clone (no `nbgrader generate_assignment` run) with a class dropped into submitted/: two honest
    students, ids a file system or a spreadsheet would misread, and a student whose answers carry script. One run of
    `course.py grade`, as an instructor would start."""
    course_dir = tmp_path_factory.mktemp("clone") / "course"
    course_dir.mkdir()
    harness.course.make_course_copy(course_dir)
    harness.shutil.copytree(harness.ROOT / "release", course_dir / "release")
    key = harness.variant_notebook(STEP, {})
    for student in ["ada", "bob", *HOSTILE_IDS]:
        harness.submit(course_dir, student, STEP, key)
    cells = {"reading_the_scores": HOSTILE_MARKDOWN,
             "attention_scores": HOSTILE_OUTPUTS + "def attention_scores(inputs):\n    return inputs @ inputs.mT\n"}
    harness.submit(course_dir, "mallory", STEP, harness.variant_notebook(STEP, cells))
    return course_dir, harness.grade_class(course_dir, STEP, workers=2)


def test_class_grading_works_from_a_fresh_clone(fresh_clone_class):
    """`course.py grade` registers the assignment itself and says so."""
    course_dir, summary = fresh_clone_class
    assert f"{STEP}: not in the gradebook yet, registering it" in summary and "Graded 3 of 3" in summary, summary
    assert harness.cell_scores(course_dir, STEP, "ada") == harness.autograded_cells(STEP)


def test_ids_that_would_be_misread_are_refused_and_no_classmate_is_left_ungraded(fresh_clone_class):
    course_dir, summary = fresh_clone_class
    for student in HOSTILE_IDS:
        assert f"refused 'submitted/{student}'".replace("\n", "\\n") in summary, summary
    full = harness.autograded_cells(STEP)
    assert harness.cell_scores(course_dir, STEP, "ada") == full and harness.cell_scores(course_dir, STEP, "bob") == full
    with open(course_dir / "grades.csv", newline="") as f:
        exported = sorted(row["student_id"] for row in csv.DictReader(f) if row["assignment"] == STEP)
    assert exported == ["ada", "bob", "mallory"]


def test_ids_given_on_the_command_line_are_checked_too():
    from attention_grader.grading import is_safe_id, main
    for name in ["a/b", "..", "../x", "ada,bob", "=1+1", "-rf", "line\nbreak", ""]:
        assert not is_safe_id(name), name
    assert all(is_safe_id(name) for name in ["ada", "ada.lovelace", "a_b-c", "ada@example.org", "01_dot_product_scores"])
    with pytest.raises(SystemExit) as refused:
        main(["--student", "../x", "--root", "/nonexistent"])
    assert refused.value.code == 2


def test_exported_cells_that_a_spreadsheet_would_run_are_neutralised(tmp_path):
    from attention_grader.grading import neutralise_csv
    path = tmp_path / "grades.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["student_id", "score"], ["=1+1", "3"], ["+cmd", "@SUM(A1)"], ["-2", "\tx"],
                                 ["ada", "7.0"]])
    neutralise_csv(path)
    with open(path, newline="") as f:
        assert list(csv.reader(f)) == [["student_id", "score"], ["'=1+1", "3"], ["'+cmd", "'@SUM(A1)"],
                                       ["'-2", "'\tx"], ["ada", "7.0"]]


def test_staging_copies_plain_files_only(tmp_path):
    """Links, hard links, device files, FIFOs and huge files in a submission are not copied (nor followed)."""
    import os
    from attention_grader.grading import FILE_LIMIT, copy_plain_files
    source, target = tmp_path / "submission", tmp_path / "staged"
    source.mkdir()
    (source / "notebook.ipynb").write_text("{}")
    classmate = tmp_path / "classmate.ipynb"
    classmate.write_text("their work")
    (source / "copied.ipynb").symlink_to(classmate)
    (source / "passwd").symlink_to("/etc/passwd")
    (source / "zeros").symlink_to("/dev/zero")
    (source / "folder").symlink_to(tmp_path)
    os.link(classmate, source / "hard.ipynb")
    os.mkfifo(source / "pipe")
    with open(source / "huge.bin", "wb") as f:
        f.truncate(FILE_LIMIT + 1)
    problems = copy_plain_files(source, target)
    assert sorted(p.name for p in target.iterdir()) == ["notebook.ipynb"]
    assert len(problems) == 7 and all(p.endswith("not graded") for p in problems), problems


HOSTILE_MARKDOWN = ("<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\"> "
                    "[click](javascript:document.title='pwned') <svg><script>document.title='pwned'</script></svg>")
HOSTILE_OUTPUTS = (
    "from IPython.display import HTML, SVG, display\n"
    "display(HTML(\"<script>document.title='pwned'</script><img src=x onerror=\\\"document.title='pwned'\\\">\"))\n"
    "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"><script>document.title=\\'pwned\\'</script></svg>'))\n")


def active_parts(page):
    """The scripts, event handlers and javascript: links of an HTML page that a student wrote."""
    from html.parser import HTMLParser

    class Parser(HTMLParser):
        found, in_script = [], False

        def handle_starttag(self, tag, attrs):
            self.in_script = tag == "script"
            self.found += [f"{tag} {name}" for name, value in attrs
                           if name.startswith("on") or (value or "").strip().lower().startswith("javascript:")]

        def handle_data(self, data):
            if self.in_script and "pwned" in data:
                self.found.append(f"script {data[:40]}")

    parser = Parser()
    parser.feed(page)
    return parser.found


def test_feedback_shows_student_html_without_running_it(fresh_clone_class):
    course_dir, _ = fresh_clone_class
    page = (course_dir / "feedback" / "mallory" / STEP / f"{STEP}.html").read_text()
    assert "pwned" in page and active_parts(page) == []
