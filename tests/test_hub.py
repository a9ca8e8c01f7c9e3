"""A class on JupyterHub (issue 28): `sudo python3 course.py hub` with an instructor and two students, driven in
headless Chromium, each person logged in with their own password.

What goes through the browser: every login; the instructor's formgrader (generate, release, collect, release
feedback); the students' Assignment List (fetch, submit, fetch feedback), Validate and their feedback page;
`course.py grade` typed into the instructor's JupyterLab terminal. One step uses a server's REST API instead, with
the student's own browser session, where typing a notebook would only be slower: saving the student's answers into
the fetched notebook (Jupyter's contents API). The attempts to read what is not one's own run as each student's Unix
account (`runuser`), with the class's Python, as code in the student's kernel or terminal would.

Needs root (it creates Unix accounts; CI runs it as root) and skips without it, with one loud line. Screenshots go to
artifacts/hub/.
"""
import datetime
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

import harness
from conftest import ROOT, require

STEP = "01_dot_product_scores"
PREFIX = "hubtest-"
INSTRUCTOR, STUDENTS = f"{PREFIX}instructor", [f"{PREFIX}student1", f"{PREFIX}student2"]
PROXY = ROOT / ".venv" / "hub-node" / "node_modules" / ".bin" / "configurable-http-proxy"
ARTIFACTS = ROOT / "artifacts" / "hub"
WRONG_PART = "attention_scores_for_query"  # student2 multiplies instead of taking dot products


@pytest.fixture(scope="module", autouse=True)
def requirements():
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: the JupyterHub class (tests/test_hub.py): needs root, to create Unix accounts "
                    "(CI runs it as root)")
    require("chromium", "the JupyterHub class")
    require("bwrap", "the JupyterHub class")
    if not PROXY.exists():
        line = ("the JupyterHub class: needs JupyterHub's proxy (mkdir -p .venv/hub-node && cp hub/package*.json "
                ".venv/hub-node && npm ci --prefix .venv/hub-node, as .ci/run does)")
        if os.environ.get("COURSE_NO_SKIP"):
            pytest.fail(f"{line}; COURSE_NO_SKIP=1 turns this skip into a failure", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {line}")


from playwright.sync_api import expect, sync_playwright  # noqa: E402

expect.set_options(timeout=120_000)  # servers start and kernels import torch on a busy 2-core machine


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hub_command(root, *options):
    return [sys.executable, "course.py", "hub", "--root", str(root), "--prefix", PREFIX, *options]


def uids():
    found = []
    for name in [INSTRUCTOR, *STUDENTS]:
        try:
            found.append(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    return found


@pytest.fixture(scope="module")
def hub():
    """`course.py hub` as root in a folder of its own, on a free port; afterwards the hub stopped and the class
    removed (`course.py hub --remove`): no account, home or process left."""
    # not under /tmp: the class keeps its gradebook and submissions there, and /tmp is emptied when the machine restarts
    root = Path(tempfile.mkdtemp(prefix="course-hub-", dir="/var/tmp")) / "class"
    root.parent.chmod(0o711)  # the class's accounts pass through it to the class's folder
    subprocess.run(hub_command(root, "--remove"), cwd=ROOT, capture_output=True)  # what an interrupted run left
    port = free_port()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = open(ARTIFACTS / "hub.log", "w")  # the hub's log, and the servers' (kept after the class is removed)
    process = subprocess.Popen(hub_command(root, "--port", str(port), "--students", "2"), cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/hub/api", timeout=5)
                break
            except OSError:
                if process.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the hub did not start: {(ARTIFACTS / 'hub.log').read_text()[-3000:]}")
                time.sleep(0.5)
        passwords = dict(line.split() for line in (root / "passwords").read_text().splitlines())
        yield {"url": url, "root": root, "passwords": passwords}
    finally:
        process.terminate()  # the hub stops every server it started, then itself
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        left = uids()
        removed = subprocess.run(hub_command(root, "--remove"), cwd=ROOT, capture_output=True, text=True)
        shutil.rmtree(root.parent, ignore_errors=True)
        assert removed.returncode == 0, removed.stderr
        assert not uids() and not any(processes_of(uid) for uid in left), "the class was not removed"


def processes_of(uid):
    """{pid: command line} of the processes running as `uid`."""
    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if any(line.split()[1:2] == [str(uid)] for line in status.read_text().splitlines() if line[:4] == "Uid:"):
                found[int(status.parent.name)] = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"])
        yield chromium
        chromium.close()


def shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png")


def log_in(browser, hub, name):
    """A browser of this person's own, logged in with their password; their JupyterLab open on the course home."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{hub['url']}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", hub["passwords"][name])
    page.click("#login_submit")
    try:
        page.locator(".jp-LabShell").wait_for()
    except Exception:
        shot(page, f"{name}-FAILED-login")
        raise
    expect(page.locator(".jp-RenderedMarkdown h1").first).to_contain_text("Attention, step by step: start here")
    return page


def formgrader(page, hub, action, message):
    """Click one of formgrader's buttons on the step's row (Manage Assignments) and wait for its success message."""
    page.goto(f"{hub['url']}/user/{INSTRUCTOR}/formgrader/manage_assignments")
    page.locator("tr", has_text=STEP).locator(f"td.{action} a").click()
    expect(page.locator(".modal-body")).to_contain_text(message)
    shot(page, f"instructor-{action}")
    page.locator(".modal-footer button").first.click()


def assignment_list(page):
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    return page.locator("#nbgrader-assignment-list")


def put_notebook(page, hub, name, path, nb):
    """Save a notebook into the student's server with their own browser session (Jupyter's contents API)."""
    xsrf = next(c["value"] for c in page.context.cookies() if c["name"] == "_xsrf" and "/user/" in c["path"])
    answer = page.request.put(f"{hub['url']}/user/{name}/api/contents/{path}", headers={"X-XSRFToken": xsrf},
                              data=json.dumps({"type": "notebook", "format": "json", "content": nb}))
    assert answer.ok, answer.text()


def answers():
    """student1: the answer key, as solutions/ has it; student2: the same with Part 1 wrong."""
    key = nbformat.read(ROOT / "solutions" / STEP / f"{STEP}.ipynb", as_version=4)
    wrong = nbformat.from_dict(json.loads(json.dumps(key)))
    cell = next(c for c in wrong.cells if c.metadata.get("nbgrader", {}).get("grade_id") == WRONG_PART)
    cell.source = f"def {WRONG_PART}(inputs, query):\n    return inputs * query\n"
    return {STUDENTS[0]: key, STUDENTS[1]: wrong}


def in_terminal(page, hub, command, done, timeout=240):
    """Type a command into a new terminal of the instructor's JupyterLab; wait for the file `done` in the course."""
    page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
    page.locator(".lm-Menu-itemLabel", has_text="New").first.hover()
    page.locator(".lm-Menu-itemLabel", has_text="Terminal").click()
    expect(page.locator(".jp-Terminal .xterm")).to_be_visible()
    page.locator(".jp-Terminal .xterm").click()
    page.keyboard.type(command + "\n")
    marker = hub["root"] / "course" / done
    deadline = time.time() + timeout
    while not marker.exists():
        assert time.time() < deadline, f"no {done} after {timeout} s"
        time.sleep(1)
    shot(page, "instructor-terminal")
    return marker.read_text()


def test_a_class_releases_fetches_submits_grades_and_returns_feedback(browser, hub):
    full = sum(harness.autograded_cells(STEP).values())
    started = time.time()
    # A wrong password is refused.
    page = browser.new_context().new_page()
    page.goto(f"{hub['url']}/hub/login")
    page.fill("#username_input", STUDENTS[0])
    page.fill("#password_input", "not-the-password")
    page.click("#login_submit")
    expect(page.locator(".login_error")).to_contain_text("Invalid username or password")
    page.context.close()

    # The instructor generates step 01 and releases it, in formgrader.
    teacher = log_in(browser, hub, INSTRUCTOR)
    shot(teacher, "instructor-home")
    server = [command for command in processes_of(pwd.getpwnam(INSTRUCTOR).pw_uid).values() if "singleuser" in command]
    assert server, "the instructor's server does not run as the instructor's account"
    # Nbgrader > Formgrader opens formgrader in a frame of JupyterLab (allowed for the hub's own origin only).
    teacher.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    teacher.locator(".lm-Menu-itemLabel", has_text=re.compile("^Formgrader$")).click()  # not "(local)"
    expect(teacher.frame_locator("iframe").first.locator("body")).to_contain_text("Manage Assignments")
    shot(teacher, "instructor-formgrader-menu")
    said = teacher.request.get(f"{hub['url']}/user/{INSTRUCTOR}/formgrader").headers["content-security-policy"]
    assert said == "frame-ancestors 'self'", said
    formgrader(teacher, hub, "assign", f"Successfully created the student version of '{STEP}'")
    formgrader(teacher, hub, "release", f"Successfully released '{STEP}'")

    # Each student fetches it from the Assignment List, answers and submits.
    students = {}
    for name, nb in answers().items():
        page = students[name] = log_in(browser, hub, name)
        assert any("singleuser" in command for command in processes_of(pwd.getpwnam(name).pw_uid).values())
        names = page.locator(".jp-DirListing-content .jp-DirListing-itemText")
        expect(names).to_have_text(["notebooks", "work", "HOME.md"])  # no answer key, source or grader to list
        assert page.request.get(f"{hub['url']}/user/{name}/formgrader").status == 404  # no instructor tools
        said = page.request.get(f"{hub['url']}/user/{name}/lab").headers["content-security-policy"]
        assert "frame-ancestors 'none'" in said, said  # JupyterHub's default: a student's server is never framed
        listing = assignment_list(page)
        listing.locator("#released_assignments_list .list_item", has_text=STEP).get_by_role("button", name="Fetch") \
            .click()
        fetched = listing.locator("#fetched_assignments_list .list_item", has_text=STEP)
        expect(fetched.get_by_role("button", name="Submit")).to_be_visible()
        path = f"work/{STEP}/{STEP}.ipynb"  # where the course home links the exercise
        assert (Path(pwd.getpwnam(name).pw_dir) / path).stat().st_uid == pwd.getpwnam(name).pw_uid
        put_notebook(page, hub, name, path, nb)
        if name == STUDENTS[1]:  # Validate, in the notebook's toolbar, tells them what is wrong before they submit
            page.goto(f"{hub['url']}/user/{name}/lab/tree/{path}")
            page.locator(".jp-Notebook").wait_for()
            page.locator("[data-jp-item-name=runAll]").get_by_text("Validate").click()
            expect(page.locator(".jp-Dialog")).to_contain_text("likely mistake: return one number per token")
            shot(page, f"{name}-validated")
            page.locator(".jp-Dialog").get_by_role("button", name="Ok").click()
            listing = assignment_list(page)
            fetched = listing.locator("#fetched_assignments_list .list_item", has_text=STEP)
        fetched.get_by_role("button", name="Submit").click()
        expect(listing.locator("#submitted_assignments_list .list_item", has_text=STEP).first).to_be_visible()
        shot(page, f"{name}-submitted")

    # The instructor collects, grades in the terminal of their server (sandboxed), and releases the feedback.
    formgrader(teacher, hub, "collect", f"Successfully collected submissions of '{STEP}'")
    teacher.goto(f"{hub['url']}/user/{INSTRUCTOR}/lab?reset")
    teacher.locator(".jp-LabShell").wait_for()
    output = in_terminal(teacher, hub, f"python3 course.py grade {STEP} --workers 1 > grade.out 2>&1; "
                                       "echo $? > grade.exit", "grade.exit")
    summary = (hub["root"] / "course" / "grade.out").read_text()
    assert output.strip() == "0", summary
    assert "Graded 2 of 2 submissions" in summary and "WITHOUT a sandbox" not in summary, summary
    scores = {name: sum(harness.cell_scores(hub["root"] / "course", STEP, name).values()) for name in STUDENTS}
    lost = harness.autograded_cells(STEP)[f"test_{WRONG_PART}"]
    errors = {name: harness.cell_errors(hub["root"] / "course", STEP, name) for name in STUDENTS}
    assert scores == {STUDENTS[0]: full, STUDENTS[1]: full - lost}, f"{summary}\n{errors}"
    formgrader(teacher, hub, "release-feedback", f"Successfully released feedback of '{STEP}'")

    # Each student fetches their feedback and reads their own score in it.
    for name, page in students.items():
        page.goto(f"{hub['url']}/user/{name}/lab?reset")
        listing = assignment_list(page)
        listing.locator("#submitted_assignments_list").get_by_role("button", name="Fetch Feedback").click()
        listing.get_by_text("(view feedback)").click()
        feedback = next((Path(pwd.getpwnam(name).pw_dir) / "work" / STEP / "feedback").glob(f"*/{STEP}.html"))
        relative = feedback.relative_to(pwd.getpwnam(name).pw_dir)
        page.goto(f"{hub['url']}/user/{name}/files/{relative}")
        # the written answer (1 point) waits for the instructor
        expect(page.locator("body")).to_contain_text(f"{STEP} (Score: {scores[name]:.1f} / {full + 1:.1f}")
        shot(page, f"{name}-feedback")
    print(f"the class, from the first login to the last feedback: {time.time() - started:.0f} s")


def as_user(hub, name, code):
    """Run Python code as a Unix account, with the hub's Python (as the student's kernel runs)."""
    run = subprocess.run(["runuser", "-u", name, "--", str(hub["root"] / "env" / "bin" / "python"), "-c", code],
                         capture_output=True, text=True, cwd="/")
    return run.stdout + run.stderr


def test_each_student_is_refused_what_is_not_their_own(hub):
    course = hub["root"] / "course"
    targets = {"the other student's home": None, "source/": course / "source" / STEP / f"{STEP}.ipynb",
               "solutions/": course / "solutions" / STEP / f"{STEP}.ipynb", "the gradebook": course / "gradebook.db",
               "the instructor's secret": course / ".grading_secret",
               "the judges": course / "grader" / "attention_grader" / "judges" / "step01.py",
               "the exchange's submissions": hub["root"] / "exchange" / "attention-step-by-step" / "inbound",
               "the class's passwords": hub["root"] / "passwords"}
    for name, other in [STUDENTS, STUDENTS[::-1]]:
        for what, path in targets.items():
            path = path or Path(pwd.getpwnam(other).pw_dir) / "work" / STEP / f"{STEP}.ipynb"
            assert path.exists(), f"{what} ({path}) should exist: the class test before this one makes it"
            said = as_user(hub, name, f"import os\np = {str(path)!r}\n"
                                 "print(os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read(10))")
            assert "PermissionError: [Errno 13] Permission denied" in said, f"{name} read {what} ({path}): {said}"
        said = as_user(hub, name, "import attention_grader")
        assert "PermissionError: [Errno 13] Permission denied" in said, f"{name} imported the grader: {said}"
    # What they may read: the student package, with which their kernels run the lessons.
    assert as_user(hub, STUDENTS[0], "import attention_course.data; print('ok')").strip() == "ok"


def test_grading_without_the_sandbox_is_refused_with_what_to_do(hub):
    """Where bubblewrap cannot start (here: not on the PATH), course.py grade runs no student code and says why."""
    run = subprocess.run(["runuser", "-u", INSTRUCTOR, "--", "env", f"PATH={hub['root'] / 'env' / 'bin'}",
                          "python3", "course.py", "grade", STEP, "--workers", "1"],
                         cwd=hub["root"] / "course", capture_output=True, text=True, timeout=300)
    said = run.stdout + run.stderr
    assert run.returncode != 0 and "bubblewrap (bwrap) is missing or does not work here" in said, said


def test_a_student_cannot_submit_for_a_classmate_nor_collect_the_answer_key(browser, hub):
    """Issue 33: inbound/ is writable by every account, and nbgrader's own collect trusts a folder's name and follows
    links as the instructor. student1, as their Unix account, puts in inbound/: a folder named for student2 (dated 2099,
    the untouched release, a secret of its own); one of its own name dated 2099 holding a link to the answer key; one
    of now holding links to the answer key and the instructor's secret, a hard link to that secret and a fifo; a link
    named as a submission to the source folder. The instructor collects in formgrader, then with `nbgrader collect`,
    grades and releases the feedback: student2's own submission is graded and its feedback filed under student2's own
    secret; no file of the instructor's reaches student1; every refusal is in collect's log."""
    attacker, victim = STUDENTS
    course, exchange = hub["root"] / "course", hub["root"] / "exchange" / "attention-step-by-step"
    inbound, key = exchange / "inbound", course / "source" / STEP / f"{STEP}.ipynb"
    stamp = lambda seconds: (datetime.datetime.now(datetime.timezone.utc)  # noqa: E731  (nbgrader's format)
                             + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    future = "2099-01-01 00:00:00.000000 UTC"
    forged, later = f"{victim}+{STEP}+{future}+forged", f"{attacker}+{STEP}+{future}+later"
    links, folder = f"{attacker}+{STEP}+{stamp(-20)}+links", f"{attacker}+{STEP}+{stamp(-10)}+folder"
    said = as_user(hub, attacker, f"""import os, shutil
os.chdir({str(inbound)!r})
for name in {[forged, later, links]!r}:
    os.mkdir(name)
    open(name + '/timestamp.txt', 'w').write(name.split('+')[2])
    open(name + '/submission_secret.txt', 'w').write('forged' if name == {forged!r} else 'own')
shutil.copy({str(exchange / 'outbound' / STEP / f'{STEP}.ipynb')!r}, {forged!r})
os.symlink({str(key)!r}, {later!r} + '/{STEP}.ipynb')
os.symlink({str(key)!r}, {links!r} + '/{STEP}.ipynb')
os.symlink({str(course / '.grading_secret')!r}, {links!r} + '/secret')
os.mkfifo({links!r} + '/fifo')
os.symlink({str(key.parent)!r}, {folder!r})
print('ready')""")
    assert said.strip() == "ready", said
    # A hard link to a file the student does not own: made by root here, as a student can where fs.protected_hardlinks
    # is 0 (or for any file they may write).
    os.link(course / ".grading_secret", inbound / links / "linked")
    problems = []

    # Collect in formgrader: the log in its dialog names every refusal.
    teacher = log_in(browser, hub, INSTRUCTOR)
    teacher.goto(f"{hub['url']}/user/{INSTRUCTOR}/formgrader/manage_assignments")
    teacher.locator("tr", has_text=STEP).locator("td.collect a").click()
    expect(teacher.locator(".modal-body")).to_contain_text(f"Successfully collected submissions of '{STEP}'")
    teacher.wait_for_timeout(1000)  # the dialog fades in
    shot(teacher, "instructor-collect-refusals")
    log = teacher.locator(".modal-body").inner_text()
    teacher.context.close()
    refusals = {forged: f"named for {victim} but owned by {attacker}", later: "is from the future",
                folder: "not a folder", f"{links}/{STEP}.ipynb": "a symbolic link",
                f"{links}/secret": "a symbolic link",
                f"{links}/fifo": "not a plain file", f"{links}/linked": f"owned by {INSTRUCTOR}, not by the student"}
    problems += [f"formgrader's collect log does not say {what}: {why}" for what, why in refusals.items()
                 if not any(what in line and why in line for line in log.splitlines())]
    # `nbgrader collect` in the instructor's terminal: the same refusals; nothing newer to collect.
    env = ["env", f"PATH={hub['root'] / 'env' / 'bin'}:/usr/bin:/bin"]
    run = subprocess.run(["runuser", "-u", INSTRUCTOR, "--", *env, "nbgrader", "collect", "--update", STEP],
                         cwd=course, capture_output=True, text=True, timeout=300)
    problems += [f"nbgrader collect does not refuse {what}" for what in (forged, later, folder)
                 if not any("Not collected" in line and what in line for line in run.stderr.splitlines())]

    submitted = course / "submitted"
    if (submitted / victim / STEP / "submission_secret.txt").read_text() == "forged":
        problems.append(f"the folder {attacker} made was collected as {victim}'s")
    files = {path.name: path for path in (submitted / attacker / STEP).iterdir()}
    if set(files) != {"timestamp.txt", "submission_secret.txt"}:
        problems.append(f"collected for {attacker}: {sorted(files)}, not only their own plain files")
    if any(path.is_file() and b"BEGIN HIDDEN TESTS" in path.read_bytes() for path in files.values()):
        problems.append("the answer key was collected")

    # Grading and feedback: student2's own submission, graded as before; its feedback under student2's own secret.
    graded = subprocess.run(["runuser", "-u", INSTRUCTOR, "--", *env, "python3", "course.py", "grade", STEP,
                             "--workers", "1"], cwd=course, capture_output=True, text=True, timeout=400)
    full = sum(harness.autograded_cells(STEP).values())
    lost = harness.autograded_cells(STEP)[f"test_{WRONG_PART}"]
    scores = {name: sum(harness.cell_scores(course, STEP, name).values()) for name in STUDENTS}
    if scores != {attacker: 0, victim: full - lost}:
        problems.append(f"scores {scores}, not {{{attacker!r}: 0 (nothing of theirs to grade), {victim!r}: "
                        f"{full - lost}}}:\n{graded.stdout[-2000:]}{graded.stderr[-2000:]}")
    for old in (exchange / "feedback").glob("*.html"):  # what the class test released: only this release counts
        old.unlink()
    released = subprocess.run(["runuser", "-u", INSTRUCTOR, "--", *env, "nbgrader", "release_feedback", STEP],
                              cwd=course, capture_output=True, text=True, timeout=300)
    cache = Path(pwd.getpwnam(victim).pw_dir) / ".local/share/jupyter/nbgrader_cache/attention-step-by-step"
    secret = next(cache.glob(f"{victim}+{STEP}+*/submission_secret.txt")).read_text()
    from nbgrader.utils import notebook_hash
    feedback = exchange / "feedback" / f"{notebook_hash(secret=secret, notebook_id=STEP)}.html"
    if not feedback.exists() or f"Score: {full - lost:.1f} / {full + 1:.1f}" not in feedback.read_text():
        problems.append(f"no feedback for {victim}'s own submission with their score: {released.stderr[-2000:]}")
    if (exchange / "feedback" / f"{notebook_hash(secret='forged', notebook_id=STEP)}.html").exists():
        problems.append(f"{victim}'s feedback was released under the secret {attacker} forged")
    assert not problems, "\n".join(problems)
