"""The course as people use it: JupyterLab with nbgrader, started as the README says (`course.py start`, and
`course.py start --instructor`), driven in headless Chromium.

Screenshots of each key state go to artifacts/browser/ (git-ignored); a failing test names the one to look at.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import harness
import test_check as learners
from attention_grader.selfcheck import lesson_opened, part_titles
from conftest import ROOT, require
from test_instructor_workflow import HOSTILE_MARKDOWN, HOSTILE_OUTPUTS

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts" / "browser"
STEP = "01_dot_product_scores"
CORRECT = {
    "def attention_scores_for_query": "def attention_scores_for_query(inputs, query):\n    return (inputs @ query.unsqueeze(-1)).squeeze(-1)\n",
    "def attention_scores(inputs)": "def attention_scores(inputs):\n    return inputs @ inputs.transpose(-2, -1)\n",
    "def distance_scores": "def distance_scores(queries, keys):\n    if keys.shape[-1] != queries.shape[-1]:\n"
                           "        raise ValueError('keys: last dimension differs')\n"
                           "    return (2 * (queries @ keys.transpose(-2, -1)) - (queries ** 2).sum(-1, keepdim=True)\n"
                           "            - (keys ** 2).sum(-1).unsqueeze(-2))\n",
    "def direction_scores": "def direction_scores(queries, keys):\n"
                            "    q = torch.nn.functional.normalize(queries, dim=-1)\n"
                            "    return q @ torch.nn.functional.normalize(keys, dim=-1).transpose(-2, -1)\n",
}
# A submission that tries to run script in the instructor's browser: in markdown, in an HTML output, in an SVG.
HOSTILE = {"reading_the_scores": HOSTILE_MARKDOWN,
           "attention_scores": HOSTILE_OUTPUTS + "def attention_scores(inputs):\n    return inputs @ inputs.mT\n"}
WRITTEN_ANSWER = "journey scores highest with itself, then with starts: the two embeddings are nearly the same vector."

@pytest.fixture(scope="module", autouse=True)
def chromium():
    require("chromium", "the browser tests")

from playwright.sync_api import expect, sync_playwright  # noqa: E402

# Kernels start and notebooks run on a busy 2-core machine: wait for pages as a patient person would.
expect.set_options(timeout=120_000)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(server, path, method="GET"):
    request = urllib.request.Request(f"{server['url']}{path}?token={server['token']}", method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


# What the student view must not list at the course root: answer keys, master notebooks, the grader, tooling.
HIDDEN_FROM_STUDENTS = ["solutions", "source", "release", "grader", "attention_course.egg-info", "nbgrader_config.py",
                        "course.py", "jupyter_config", "exchange"]


def course_copy(course_dir):
    """A copy of the course as a clone has it (the folders a student must not see included)."""
    for name in ("course.py", "nbgrader_config.py", "requirements.txt", "pyproject.toml", "HOME.md", "README.md"):
        shutil.copy(ROOT / name, course_dir / name)
    for folder in ("source", "release", "solutions", "notebooks", "jupyter_config", "grader"):
        shutil.copytree(ROOT / folder, course_dir / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (course_dir / "attention_course.egg-info").mkdir()
    (course_dir / ".venv").symlink_to(ROOT / ".venv")
    return course_dir


def start_lab(course_dir, *options):
    """`python3 course.py start [options]` in course_dir, on a free loopback port with a token; yields the server,
    stops it after."""
    port, token = free_port(), os.urandom(16).hex()
    # Runtime files, settings and workspaces of its own: nothing read from or left in the home folder.
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(course_dir / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(course_dir / "lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(course_dir / "lab-workspaces")}
    log = open(course_dir / "jupyter.log", "w")
    # sys.executable is the course environment's python, so course.py starts JupyterLab without reinstalling.
    process = subprocess.Popen(
        [sys.executable, "course.py", "start", *options, "--no-browser", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}"],
        cwd=course_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    info = {"url": f"http://127.0.0.1:{port}", "token": token, "dir": course_dir}
    deadline = time.time() + 120
    while True:
        try:
            api(info, "/api/status")
            break
        except OSError:
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"JupyterLab did not start; see {course_dir / 'jupyter.log'}")
            time.sleep(0.5)
    yield info
    for kernel in api(info, "/api/kernels"):
        api(info, f"/api/kernels/{kernel['id']}", method="DELETE")
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    log.close()
    stray = subprocess.run(["pgrep", "-f", str(course_dir)], capture_output=True, text=True).stdout.split()
    assert not stray, f"processes left running after the server stopped: {stray}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The student view: `python3 course.py start`, as the README says."""
    yield from start_lab(course_copy(tmp_path_factory.mktemp("lab")))


@pytest.fixture(scope="module")
def instructor(tmp_path_factory):
    """The instructor view, `python3 course.py start --instructor`, after the instructor has generated the
    assignment and collected three submissions (the answer key, one whose answers carry script, and a file that is
    not a notebook, already graded by `course.py grade`)."""
    course_dir = course_copy(tmp_path_factory.mktemp("instructor"))
    harness.nbgrader(course_dir, "generate_assignment", STEP, "--force")
    harness.submit(course_dir, "alice", STEP, harness.variant_notebook(STEP, {}))
    harness.submit(course_dir, "mallory", STEP, harness.variant_notebook(STEP, HOSTILE))
    harness.submit(course_dir, "nora", STEP, '{"cells": [')
    assert "nora / " in harness.grade_class(course_dir, STEP, "--student", "nora")
    yield from start_lab(course_dir, "--instructor")


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
    """A learner on their own: `python3 course.py start`, step 01 answered correctly, step 02 with a mistake of the
    bank, step 03 untouched, then one `python3 course.py check` in a terminal."""
    lab = start_lab(course_copy(tmp_path_factory.mktemp("learner")))
    server = next(lab)
    _, mistake = learners.bank_mistake()
    learners.write_learners_work(server["dir"], mistake)
    started = time.perf_counter()
    learners.check(server["dir"])
    print(f"course.py check on {learners.CORRECT} and {learners.MISTAKEN}: {time.perf_counter() - started:.1f} s")
    yield {**server, "mistake": mistake}
    next(lab, None)  # stops the server


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.shot = lambda name: screenshot(page, f"{request.node.name}-{name}")
    yield page
    context.close()


def screenshot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=path)
    return path


def open_notebook(page, server, path):
    # A workspace of its own, reset: only this notebook is open, whatever earlier tests left in theirs.
    workspace = path.replace("/", "-").replace(".", "-")
    page.goto(f"{server['url']}/lab/workspaces/{workspace}/tree/{path}?token={server['token']}&reset")
    page.locator(".jp-Notebook").wait_for()
    wait_for_idle_kernel(page)
    news = page.get_by_role("button", name="No")
    if news.count():
        news.first.click()


def wait_for_idle_kernel(page):
    page.wait_for_function(
        "() => { const s = document.querySelector('.jp-StatusBar-Widget');"
        " return s && s.innerText.includes('Idle') && !document.body.innerText.includes('[*]'); }")


def replace_cell(page, cell, text):
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)


def menu(page, top, item):
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def validate(page):
    page.locator("[data-jp-item-name=runAll]").get_by_text("Validate").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Validation Results")
    return dialog


def run_all_and_validate(page):
    menu(page, "Run", "Run All Cells")
    wait_for_idle_kernel(page)
    page.locator("[data-jp-item-name=runAll]").get_by_text("Validate").click()
    # the notebook runs for some seconds before the results come: the button says so meanwhile
    expect(page.locator("[data-jp-item-name=runAll]").get_by_text("Validating...")).to_be_visible()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Validation Results")
    return dialog


def fill_in_exercise(page, sources):
    for marker, source in sources.items():
        replace_cell(page, page.locator(".jp-CodeCell").filter(has_text=marker), source)
    answer = page.locator(".jp-MarkdownCell").filter(has_text="YOUR ANSWER HERE")
    answer.dblclick()
    replace_cell(page, answer, WRITTEN_ANSWER)
    page.keyboard.press("Shift+Enter")


def student_notebook(server):
    """The student's copy in work/, fresh from release/ as on the first start."""
    path = f"work/{STEP}/{STEP}.ipynb"
    shutil.copy(server["dir"] / "release" / STEP / f"{STEP}.ipynb", server["dir"] / path)
    return path


def file_browser_names(page):
    items = page.locator(".jp-DirListing-content .jp-DirListing-itemText")
    expect(items.first).to_be_visible()
    page.wait_for_timeout(500)  # the listing fills in at once; let it settle
    return sorted(items.all_inner_texts())


def printed_address(server):
    """The address `course.py start` prints for the student to open (with the token it hides in its log)."""
    log = (server["dir"] / "jupyter.log").read_text()
    address = next(word for line in log.splitlines() for word in line.split() if word.startswith(server["url"]))
    return address.replace("token=...", f"token={server['token']}")


def test_start_opens_on_the_course_home_and_the_student_view_hides_the_answer_keys(page, server):
    address = printed_address(server)
    assert address.startswith(f"{server['url']}/lab/tree/HOME.md?"), address
    page.goto(address)
    home = page.locator(".jp-RenderedMarkdown").filter(has_text="start here")
    expect(home.locator("h1")).to_contain_text("Attention, step by step: start here")
    for step in harness.course.steps():
        for href in (f"notebooks/{step}.ipynb", f"work/{step}/{step}.ipynb"):
            expect(home.locator(f'a[href*="/files/{href}?"]')).to_have_count(1, timeout=5_000)
    expect(home).to_contain_text("Press Validate")
    page.shot("1-home")
    shown = ["HOME.md", "README.md", "notebooks", "work"]
    assert file_browser_names(page) == shown
    assert sorted(entry["name"] for entry in api(server, "/api/contents")["content"]) == shown
    for name in HIDDEN_FROM_STUDENTS:
        assert (server["dir"] / name).exists(), f"{name} should exist in the course copy, to be hidden"
    # nbgrader's instructor tools and its Assignment List (which needs a JupyterHub exchange) are not offered.
    expect(page.locator(".lm-MenuBar-itemLabel")).to_contain_text(["File", "Edit", "View"])
    expect(page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader")).to_have_count(0)
    with pytest.raises(urllib.error.HTTPError) as missing:
        api(server, "/formgrader")
    assert missing.value.code == 404
    # The home's first link opens the first lesson.
    home.locator(f'a[href*="/files/notebooks/{STEP}.ipynb?"]').click()
    expect(page.locator(".jp-Notebook .jp-RenderedMarkdown h1").first).to_contain_text("Step 01")
    page.shot("2-lesson")


def test_validate_on_a_lesson_says_there_is_nothing_to_validate(page, server):
    open_notebook(page, server, f"notebooks/{STEP}.ipynb")
    dialog = validate(page)
    page.shot("validated")
    text = dialog.inner_text()
    assert f"Nothing to validate: {STEP}.ipynb is a lesson, with no tests and no grade. Its exercise is " \
           f"work/{STEP}/{STEP}.ipynb: validate that one." in text and "failed" not in text, text
    dialog.get_by_role("button", name="Ok").click()


def test_validate_reports_a_blank_written_answer_as_still_to_write(page, server):
    open_notebook(page, server, student_notebook(server))
    for marker, source in CORRECT.items():
        replace_cell(page, page.locator(".jp-CodeCell").filter(has_text=marker), source)
    dialog = run_all_and_validate(page)
    page.shot("validated")
    text = dialog.inner_text()
    assert "Every test passes; 1 written answer still to write." in text and "Still to write: your answer to " \
           "\"Part 4 · Reading the scores\"" in text and "failed" not in text, text
    dialog.get_by_role("button", name="Ok").click()


def test_student_validates_a_correct_solution(page, server):
    open_notebook(page, server, student_notebook(server))
    page.shot("1-opened")
    fill_in_exercise(page, CORRECT)
    dialog = run_all_and_validate(page)
    page.shot("2-validated")
    expect(dialog).to_contain_text("Success! Your notebook passes all the tests.")
    dialog.get_by_role("button", name="Ok").click()


def test_student_sees_the_failure_and_its_hint(page, server):
    open_notebook(page, server, student_notebook(server))
    wrong = {**CORRECT, "def attention_scores_for_query":
             "def attention_scores_for_query(inputs, query):\n    return inputs * query\n"}
    fill_in_exercise(page, wrong)
    dialog = run_all_and_validate(page)
    page.shot("validated")
    expect(dialog).to_contain_text("wrong shape")
    expect(dialog).to_contain_text("likely mistake: return one number per token")
    # Each failing part: its title, then the check's message; the test code is folded below it.
    parts = dialog.locator(".course-validate-part")
    expect(parts.first).to_be_visible()
    for part in parts.all():
        lines = [line for line in part.inner_text().splitlines() if line.strip()]
        assert lines[0].startswith("Part ") and lines[0].endswith(": fails"), lines
        assert "Error" in lines[1] or "Failed" in lines[1] or "wrong" in lines[1], lines
        assert part.locator("details").get_attribute("open") is None
    for line in dialog.get_by_text("The following cell failed:").all():
        expect(line).to_be_hidden()
    dialog.get_by_role("button", name="Ok").click()


def test_lesson_renders_its_plots(page, server):
    open_notebook(page, server, f"notebooks/{STEP}.ipynb")
    menu(page, "Edit", "Clear Outputs of All Cells")
    expect(page.locator(".jp-OutputArea-output img")).to_have_count(0)
    menu(page, "Run", "Run All Cells")
    wait_for_idle_kernel(page)
    plots = page.locator(".jp-OutputArea-output img")
    expect(plots).to_have_count(2)
    plots.last.scroll_into_view_if_needed()
    page.shot("plot")
    assert plots.last.evaluate("img => img.naturalWidth") > 300, "the heatmap did not render"
    # Lessons are read-only in the student view: run and changed, the course's copy stays as `git pull` expects it.
    expect(page.locator(".jp-NotebookPanel-toolbar")).to_contain_text("read-only")
    page.keyboard.press("Control+s")
    expect(page.get_by_text("is read-only. Use \"Save as…\" instead.")).to_be_visible()
    lesson = f"notebooks/{STEP}.ipynb"
    assert (server["dir"] / lesson).read_bytes() == (ROOT / lesson).read_bytes(), f"{lesson} was written"
    assert lesson_opened(server["dir"], STEP), f"opening {lesson} left no mark for the progress page"


def test_instructor_view_shows_every_file_and_nbgrader(page, instructor):
    page.goto(f"{instructor['url']}/?token={instructor['token']}")
    home = page.locator(".jp-RenderedMarkdown").filter(has_text="start here")
    expect(home.locator("h1")).to_contain_text("Attention, step by step: start here")
    names = file_browser_names(page)
    assert set(HIDDEN_FROM_STUDENTS) <= set(names), names
    expect(page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader")).to_have_count(1)
    page.shot("files")


def test_formgrader_shows_the_submissions_course_py_grade_flagged(page, instructor):
    page.goto(f"{instructor['url']}/lab?token={instructor['token']}")
    page.locator(".jp-LabShell").wait_for()
    page.goto(f"{instructor['url']}/formgrader/gradebook/{STEP}/{STEP}")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(1)  # only nora has been graded so far
    expect(rows.locator("td.flagged .glyphicon-flag")).to_have_count(1)
    page.shot("flagged")


def test_instructor_sees_assignments_and_autogrades_from_formgrader(page, instructor):
    server = instructor
    # Logging in through JupyterLab sets the cookies formgrader's own requests need.
    page.goto(f"{server['url']}/lab?token={server['token']}")
    page.locator(".jp-LabShell").wait_for()
    page.goto(f"{server['url']}/formgrader")
    table = page.locator("table")
    for step in harness.course.steps():
        expect(table).to_contain_text(step)
    page.shot("1-assignments")
    page.goto(f"{server['url']}/formgrader/manage_submissions/{STEP}")
    row = page.locator("tr", has_text="alice")
    expect(row).to_contain_text("needs autograding")
    row.locator("td.autograde a").click()
    full = sum(harness.autograded_cells(STEP).values())
    expect(page.locator(".modal-body")).to_contain_text(f"Successfully autograded '{STEP}' for student 'alice'")
    page.locator(".modal-footer button").first.click()
    expect(row.locator("td.score")).to_contain_text(f"{full:g} / ")
    page.shot("2-autograded")


def test_no_script_of_a_submission_runs_in_formgrader_or_feedback(page, instructor):
    server = instructor
    harness.nbgrader(server["dir"], "autograde", STEP, "--student", "mallory")
    harness.nbgrader(server["dir"], "generate_feedback", STEP, "--student", "mallory")
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{server['dir'] / 'gradebook.db'}", "attention-step-by-step") as gradebook:
        submission = gradebook.find_submission_notebook(STEP, STEP, "mallory").id
    page.goto(f"{server['url']}/lab?token={server['token']}")
    page.locator(".jp-LabShell").wait_for()
    views = {"formgrader": f"{server['url']}/formgrader/submissions/{submission}/",
             "feedback": (server["dir"] / "feedback" / "mallory" / STEP / f"{STEP}.html").as_uri()}
    for name, url in views.items():
        page.goto(url)
        expect(page.get_by_text("click", exact=False).first).to_be_visible()
        page.wait_for_timeout(1000)  # time for an onerror handler to fire
        page.shot(name)
        assert page.title() != "pwned", f"a script of the submission ran in {name}"
        assert page.evaluate("document.querySelectorAll('[onerror], a[href^=\\'javascript:\\']').length") == 0


def test_learner_reaches_progress_from_home_in_one_click_and_reads_the_feedback(page, learner):
    page.goto(f"{learner['url']}/lab/workspaces/progress/tree/HOME.md?token={learner['token']}&reset")
    home = page.locator(".jp-RenderedMarkdown").filter(has_text="start here")
    home.locator('a[href*="/files/work/PROGRESS.md?"]').click()
    progress = page.locator(".jp-RenderedMarkdown").filter(has=page.get_by_role("heading", name="Your progress"))
    expect(progress).to_be_visible()
    page.shot("1-progress")
    rows = progress.locator("tbody tr")
    expect(rows).to_have_count(len(harness.course.steps()))
    correct, mistaken, untouched = rows.nth(0), rows.nth(1), rows.nth(2)
    for row, step in zip((correct, mistaken, untouched), (learners.CORRECT, learners.MISTAKEN, learners.UNTOUCHED)):
        expect(row.locator("td").first).to_contain_text(step[:2])
    mistake = learner["mistake"]
    full = sum(harness.autograded_cells(learners.CORRECT).values())
    got = sum(harness.expected_scores(learners.MISTAKEN, mistake).values())
    most = sum(harness.autograded_cells(learners.MISTAKEN).values())
    expect(correct).to_contain_text(f"{full:g}/{full:g} points")
    expect(correct.locator("td").last).to_have_text("nothing")
    expect(mistaken).to_contain_text(f"{got:g}/{most:g} points")
    titles = part_titles(ROOT / "release" / learners.MISTAKEN / f"{learners.MISTAKEN}.ipynb")
    for grade_id in mistake["fails"]:
        expect(mistaken.locator("td").last).to_contain_text(titles[grade_id])
    expect(untouched).to_contain_text("not started")
    expect(untouched).to_contain_text("not checked yet")
    assert "[" not in progress.inner_text(), f"markdown shown raw on the progress page: {progress.inner_text()}"

    mistaken.get_by_role("link", name=f"{got:g}/{most:g} points").click()
    # The failing checks' messages (the exercise's own text may use the same words).
    errors = page.frame_locator(".jp-HTMLViewer iframe").locator(".output_error")
    expect(errors).to_have_count(len(mistake["fails"]))
    for words in mistake["fails"].values():
        expect(errors.filter(has_text=re.compile(re.escape(words), re.IGNORECASE))).not_to_have_count(0)
    errors.first.scroll_into_view_if_needed()
    page.shot("2-feedback")


def uncut(page):
    """The pre and code elements whose text runs past their right edge."""
    return page.evaluate("[...document.querySelectorAll('pre, code')].filter(e => e.scrollWidth > e.clientWidth + 1)"
                         ".map(e => e.innerText.slice(0, 80))")


def test_feedback_wraps_long_messages_on_a_phone_and_a_laptop(page, learner):
    feedback = (learner["dir"] / "work" / learners.MISTAKEN / "feedback.html").as_uri()
    for width in (390, 1366):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(feedback)
        expect(page.locator(".output_error").first).to_be_visible()
        page.shot(f"{width}")
        assert uncut(page) == [], f"messages cut at {width} px: {uncut(page)}"
    expect(page.locator("#toc")).to_contain_text("Part 1 · ")  # the contents name the parts
    expect(page.locator("#toc")).not_to_contain_text("Test cell")


def test_unreadable_notebook_says_why_by_its_score_and_grades_csv_has_notes(page, instructor):
    server = instructor
    harness.grade_class(server["dir"], STEP, "--student", "alice")  # a written answer still to grade by hand
    page.goto((server["dir"] / "feedback" / "nora" / STEP / f"{STEP}.html").as_uri())
    heading = page.locator(".panel-heading h4").first
    expect(heading).to_contain_text("not graded")
    expect(heading).to_contain_text("not valid JSON")
    page.shot("unreadable")
    import csv
    with open(server["dir"] / "grades.csv", newline="") as file:
        rows = {row["student_id"]: row for row in csv.DictReader(file) if row["assignment"] == STEP}
    notes = {student: " ".join(value for key, value in row.items() if "note" in key) for student, row in rows.items()}
    assert "not graded" in notes["nora"], rows["nora"]
    assert "still to be graded by hand" in notes["alice"], rows["alice"]
