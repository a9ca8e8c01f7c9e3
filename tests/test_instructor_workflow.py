"""The instructor's workflow of docs/instructors.md, command by command, in a copy of the course:
generate -> release -> (student fetches, works, submits) -> collect -> autograde -> feedback -> export.
"""
import csv
import getpass
import subprocess
import sys
import time

import nbformat
import pytest

import harness
from conftest import ROOT, STEPS

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


HOSTILE_IDS = ["ada,bob", "=HYPERLINK(1)", "line\nbreak", "a..b", "-rf", "eve smith"]
UNREADABLE = "nora"  # hands in a file that is not JSON


def run_grade(course_dir, *args):
    """`course.py grade` as an instructor runs it (the module, in this environment): its exit code, stdout, stderr."""
    command = [sys.executable, "-m", "attention_grader", *args, "--root", str(course_dir)]
    command += [] if harness.SANDBOX else ["--unsandboxed"]
    run = subprocess.run(command, cwd=course_dir, capture_output=True, text=True)
    return run.returncode, run.stdout, run.stderr


@pytest.fixture(scope="module")
def fresh_clone_class(tmp_path_factory):
    """A fresh clone (no `nbgrader generate_assignment` run) with a class dropped into submitted/: two honest
    students, ids a file system or a spreadsheet would misread, a notebook that is not JSON, and a student whose
    answers carry script. One run of `course.py grade`, as an instructor would start."""
    course_dir = tmp_path_factory.mktemp("clone") / "course"
    course_dir.mkdir()
    harness.course.make_course_copy(course_dir)
    harness.shutil.copytree(harness.ROOT / "release", course_dir / "release")
    key = harness.variant_notebook(STEP, {})
    for student in ["ada", "bob", *HOSTILE_IDS]:
        harness.submit(course_dir, student, STEP, key)
    harness.submit(course_dir, UNREADABLE, STEP, '{"cells": [' + "x" * 5000)
    cells = {"reading_the_scores": HOSTILE_MARKDOWN,
             "attention_scores": HOSTILE_OUTPUTS + "def attention_scores(inputs):\n    return inputs @ inputs.mT\n"}
    harness.submit(course_dir, "mallory", STEP, harness.variant_notebook(STEP, cells))
    code, out, err = run_grade(course_dir, STEP, "--workers", "2", "--timeout", "10")
    assert code == 1, f"refused folders and a flagged submission exit 1, not {code}:\n{out}\n{err}"
    return course_dir, out, err


def test_class_grading_works_from_a_fresh_clone(fresh_clone_class):
    """`course.py grade` registers the assignment itself and says so; every folder is counted."""
    course_dir, summary, _ = fresh_clone_class
    assert f"{STEP}: not in the gradebook yet, registering it" in summary, summary
    assert f"Graded 4 of {4 + len(HOSTILE_IDS)} submissions; refused {len(HOSTILE_IDS)}: " in summary, summary
    assert harness.cell_scores(course_dir, STEP, "ada") == harness.autograded_cells(STEP)


def test_points_waiting_for_manual_grading_are_shown_as_such(fresh_clone_class):
    """The answer key scores every autograded point; its written answer waits for a person, and the summary says so."""
    _, summary, _ = fresh_clone_class
    auto = sum(harness.autograded_cells(STEP).values())
    release = harness.read_notebook(harness.ROOT / "release" / STEP / f"{STEP}.ipynb")
    by_hand = sum(cell.metadata.nbgrader["points"] for cell in release.cells if cell.cell_type == "markdown"
                  and cell.metadata.get("nbgrader", {}).get("grade"))
    assert by_hand == 1
    ada = next(line for line in summary.splitlines() if line.split()[:1] == ["ada"])
    assert ada.split(None, 1)[1] == f"{auto:g} / {auto:g} autograded, 1 point to grade by hand", summary


def test_no_library_warning_reaches_the_terminal(fresh_clone_class):
    course_dir, out, err = fresh_clone_class
    assert "Warning" not in out + err, out + err
    assert (course_dir / ".grading" / "grade.log").is_file() and "Log: .grading/grade.log" in out


def test_ids_that_would_be_misread_are_refused_counted_and_in_grades_csv(fresh_clone_class):
    course_dir, summary, _ = fresh_clone_class
    rule = "the folder name is not a valid student id (letters, digits and . _ @ + - (not first), and no ..)"
    for student in HOSTILE_IDS:
        shown = repr(f"submitted/{student}/{STEP}").replace("\n", "\\n")
        assert f"refused {shown}: {rule}" in summary, summary
        assert f"  {shown}: {rule}: rename the folder and grade again" in summary.split("Refused:")[1], summary
    full = harness.autograded_cells(STEP)
    assert harness.cell_scores(course_dir, STEP, "ada") == full and harness.cell_scores(course_dir, STEP, "bob") == full
    with open(course_dir / "grades.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["assignment"] == STEP]
    graded = {row["student_id"]: row["note"] for row in rows if not row["note"].startswith("refused")}
    assert sorted(graded) == ["ada", "bob", "mallory", UNREADABLE]
    # an LMS import shows why a score is low or not final: the written answer waits for a person, the notebook that
    # could not be read says so
    assert graded["ada"] == "1 point still to be graded by hand", graded
    assert graded[UNREADABLE].startswith("not graded: ") and "could not be read as a notebook" in graded[UNREADABLE]
    refused = {row["student_id"]: row for row in rows if row["note"].startswith("refused")}
    shown = {"=HYPERLINK(1)": "'=HYPERLINK(1)", "-rf": "'-rf"}  # neutralised for spreadsheets
    assert sorted(refused) == sorted(shown.get(s, s) for s in HOSTILE_IDS), rows
    assert refused["eve smith"]["note"] == f"refused, not graded: {rule}: rename the folder and grade again"
    assert refused["eve smith"]["score"] == ""


def test_an_unreadable_notebook_is_flagged_in_one_readable_line_and_in_formgrader(fresh_clone_class):
    course_dir, summary, _ = fresh_clone_class
    flagged = [line for line in summary.splitlines() if line.startswith(f"  {UNREADABLE} / ")]
    assert flagged == [f"  {UNREADABLE} / {STEP}: unreadable ({STEP}.ipynb could not be read as a notebook: it is "
                       f"not valid JSON (Expecting value at line 1, column 12))"], summary
    nora = next(line for line in summary.splitlines() if line.split()[:1] == [UNREADABLE])
    auto = sum(harness.autograded_cells(STEP).values())
    assert nora.split(None, 1)[1] == f"0 / {auto:g} autograded, written answer left blank (0 / 1)", summary
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}", COURSE_ID) as gradebook:
        flags = {s.student.id: s.flagged for s in gradebook.notebook_submissions(STEP, STEP)}
    assert flags == {"ada": False, "bob": False, "mallory": False, UNREADABLE: True}


def test_feedback_says_why_by_the_score_names_the_parts_and_wraps(fresh_clone_class):
    course_dir, _, _ = fresh_clone_class
    unreadable = (course_dir / "feedback" / UNREADABLE / STEP / f"{STEP}.html").read_text()
    heading = unreadable.split("<h4>")[1].split("</h4>")[0]
    assert ": not graded, " in heading and "not valid JSON (Expecting value at line 1, column 12)" in heading, heading
    page = (course_dir / "feedback" / "ada" / STEP / f"{STEP}.html").read_text()
    contents = page.split('<div id="toc">')[1].split("</ol>")[0]
    assert "Part 1 · " in contents and "Test cell" not in contents and ": written answer" in contents, contents
    assert "still to be graded by hand" in page.split("<h4>")[1].split("</h4>")[0]
    assert "white-space: pre-wrap" in page


def test_an_unterminated_string_is_named_once():
    from attention_grader.grading import unreadable_because
    with pytest.raises(Exception) as error:
        nbformat.reads('{"cells": ["abc', as_version=4)
    assert unreadable_because(error.value) == "it is not valid JSON (Unterminated string starting at line 1, column 12)"


@pytest.fixture(scope="module")
def small_class(tmp_path_factory):
    """Two students who handed in step 01; nothing graded yet."""
    course_dir = tmp_path_factory.mktemp("small") / "course"
    course_dir.mkdir()
    harness.course.make_course_copy(course_dir)
    for student in ("ada", "bob"):
        harness.submit(course_dir, student, STEP, "{}")
    return course_dir


STEP_LIST = ", ".join(STEPS)
BAD_INPUTS = {
    "a misspelt step": ([STEPS[1][:5] + STEPS[1][6:]], f"unknown step '{STEPS[1][:5] + STEPS[1][6:]}' (did you mean "
                                                         f"{STEPS[1]}?); the steps are: {STEP_LIST}"),
    "an unknown step": (["99_nothing"], f"unknown step '99_nothing'; the steps are: {STEP_LIST}"),
    "an unknown student": (["--student", "zoe"], "unknown student 'zoe'; the students in submitted/ are: ada, bob"),
    "a misspelt student": (["--student", "adda"], "unknown student 'adda' (did you mean ada?); the students in "
                                                  "submitted/ are: ada, bob"),
    "a step nobody submitted": ([STEPS[1]], f"nothing to grade: no folder submitted/<student>/{STEPS[1]}/"),
    "no workers": (["--workers", "0"], "argument --workers: must be at least 1, not 0"),
    "negative workers": (["--workers", "-1"], "argument --workers: must be at least 1, not -1"),
    "workers not a number": (["--workers", "two"], "argument --workers: 'two' is not a whole number"),
    "a zero timeout": (["--timeout", "0"], "argument --timeout: must be at least 1, not 0"),
    "a fractional timeout": (["--timeout", "1.5"], "argument --timeout: '1.5' is not a whole number"),
    "a shard out of range": (["--shard", "3/2"], "argument --shard: '3/2' is not K/N with 1 <= K <= N (machine K of "
                                                 "N, such as 1/2)"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_an_error_naming_what_is_known_before_any_work(small_class, case):
    args, message = BAD_INPUTS[case]
    code, out, err = run_grade(small_class, *args)
    assert (code, err.splitlines()[-1:], out) == (2, [f"course.py grade: error: {message}"], ""), err
    assert not (small_class / ".grading").exists() and not (small_class / "gradebook.db").exists()


def test_an_empty_class_is_an_error_not_an_empty_summary(tmp_path):
    harness.course.make_course_copy(tmp_path)
    code, out, err = run_grade(tmp_path)
    assert (code, err.strip(), out) == (2, "course.py grade: error: nothing to grade: submitted/ has no student "
                                           "folders; collect the submissions first (nbgrader collect STEP, or "
                                           "nbgrader zip_collect STEP)", "")


def test_ids_given_on_the_command_line_are_checked_too():
    from attention_grader.command import main
    from attention_grader.grading import is_safe_id
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
    course_dir, _, _ = fresh_clone_class
    page = (course_dir / "feedback" / "mallory" / STEP / f"{STEP}.html").read_text()
    assert "pwned" in page and active_parts(page) == []


@pytest.mark.parametrize("pattern", ["<b><i><p>x", "<div>x", "<ul><li>x", "<table><b>x"])
def test_feedback_renders_a_flood_of_misnested_html_in_seconds(pattern):
    """Eight megabytes (the output cap) of misnested or deeply nested HTML, in outputs and a markdown cell, are
    rendered by the course's feedback exporter in seconds (bleach's html5lib took minutes on 360 KB, ammonia's parser
    20 s on 256 KB of nested <div>s), their beginning shown as text and nothing in them run."""
    from nbconvert import HTMLExporter
    from traitlets.config.loader import PyFileConfigLoader
    flood = HOSTILE_MARKDOWN + pattern * (3_000_000 // len(pattern))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(flood),
        nbformat.v4.new_code_cell("flood()", outputs=[
            nbformat.v4.new_output("display_data", data={"text/html": flood, "text/plain": "<HTML>"}),
            nbformat.v4.new_output("display_data", data={"text/markdown": flood})])])
    exporter = HTMLExporter(config=PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config())
    started = time.perf_counter()
    page, _ = exporter.from_notebook_node(nb)
    elapsed = time.perf_counter() - started
    assert elapsed < 10, f"{elapsed:.1f} s to render {len(flood):,} characters of {pattern!r}"
    assert "pwned" in page and active_parts(page) == [] and "more characters, not shown here" in page
