"""One submission cannot touch another student's grade: each attack of issue 13 graded first, honest classmates after
it, through the instructor's command with one and with two workers.

Every attacker hands in the untouched release plus its attack (or a link to a classmate's notebook), so any point it earns is unearned. Each is followed
(in grading order) by a victim: the answer key or a known mistake, whose score is known from the bank. Shown to work
against the undefended executor: forged messages shifted the next student's grade by one notebook (commit 6f13455),
a process left running or a notebook's children together over the memory limit got through before the tree of
processes was watched (tests/test_executor.py, written first).
"""
import subprocess
import sys

import pytest

import harness
from conftest import ROOT, require

STEP = "01_dot_product_scores"

ATTACKS = {
    # fake "cell finished" messages on every descriptor the notebook has, as the executor's own format
    "forges_executor_messages": (
        "import json, os\n"
        "fake = b''.join(json.dumps({'cell': i, 'outputs': []}).encode() + b'\\n' for i in range(40)) + b'{\"end\": \"ok\"}\\n'\n"
        "for fd in range(64):\n"
        "    try:\n"
        "        os.write(fd, fake)\n"
        "    except OSError:\n"
        "        pass\n"),
    # the executor's memory and descriptors through /proc
    "writes_executor_memory": (
        "import os\n"
        "for pid in [os.getppid(), 1, 2, 3]:\n"
        "    for what in ('mem', 'fd/1', 'fd/0'):\n"
        "        try:\n"
        "            with open(f'/proc/{pid}/{what}', 'r+b', buffering=0) as f:\n"
        "                f.seek(0x400000) if what == 'mem' else None\n"
        "                f.write(b'{\"end\": \"ok\"}\\n' * 64)\n"
        "        except OSError:\n"
        "            pass\n"),
    # a process that leaves the notebook's session and kills whatever it can later
    "leaves_a_killer_running": (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import os, signal, time\\n'\n"
        "                  'for _ in range(300):\\n'\n"
        "                  '    time.sleep(0.1)\\n'\n"
        "                  '    for pid in range(2, 5000):\\n'\n"
        "                  '        try: os.kill(pid, signal.SIGKILL)\\n'\n"
        "                  '        except OSError: pass\\n'], start_new_session=True)\n"),
    # modules planted where a later notebook might import from
    "plants_modules": (
        "import os, tempfile\n"
        "for folder in (tempfile.gettempdir(), os.getcwd(), os.path.dirname(os.getcwd())):\n"
        "    for name in ('torch', 'numpy', 'attention_course', 'json', 'sitecustomize', 'math'):\n"
        "        try:\n"
        "            with open(os.path.join(folder, name + '.py'), 'w') as f:\n"
        "                f.write('raise SystemExit(\"planted\")\\n')\n"
        "        except OSError:\n"
        "            pass\n"),
    # children, each under the per-process limit, together far over the notebook's limit
    "children_over_the_memory_limit": (
        "import subprocess, sys\n"
        "children = [subprocess.Popen([sys.executable, '-c', 'import time; b = bytearray(700 << 20); time.sleep(30)'])\n"
        "            for _ in range(8)]\n"
        "[child.wait() for child in children]\n"),
    "floods_the_display": "from IPython.display import HTML, display\ndisplay(HTML('x' * 200_000_000))\n",
    # escape sequences for the instructor's terminal, on every stream
    "writes_to_the_terminal": (
        "import os, sys\n"
        "for fd in (1, 2):\n"
        "    os.write(fd, b'\\x1b]0;owned\\x07\\x1b[2J')\n"
        "print('\\x1b[31mred\\x1b[0m')\n"
        "print('\\x1b]0;owned\\x07', file=sys.stderr)\n"),
}


def first_solution_cell():
    nb = harness.variant_notebook(STEP, {})
    return next(c.metadata.nbgrader.grade_id for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))


def attacker_notebook(code):
    nb = harness.read_notebook(ROOT / "release" / STEP / f"{STEP}.ipynb")
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == first_solution_cell())
    cell.source = code + "\n" + cell.source
    return nb


@pytest.fixture(scope="module")
def base_course(tmp_path_factory):
    return harness.make_course(tmp_path_factory.mktemp("isolation") / "base", steps=[STEP])


@pytest.mark.parametrize("workers", [1, 2])
def test_no_attack_changes_a_classmate_s_grade_or_earns_a_point(workers, base_course, tmp_path):
    require("bwrap", "attacks on the sandboxed executor")
    course_dir = tmp_path / "course"
    harness.shutil.copytree(base_course, course_dir)
    full = harness.autograded_cells(STEP)
    mistake = harness.bank(STEP, integrity=False)[harness.bank_module(STEP).CHEATS_RIDE_ON]
    victims = {"key": (harness.variant_notebook(STEP, {}), full),
               "mistake": (harness.variant_submission(STEP, mistake), harness.expected_scores(STEP, mistake))}
    expected = {}
    for index, (attack, code) in enumerate(sorted(ATTACKS.items())):
        attacker = f"r{index}a_{attack}"
        harness.submit(course_dir, attacker, STEP, attacker_notebook(code))
        expected[attacker] = {cell: 0.0 for cell in full}
        kind = ("key", "mistake")[index % 2]
        victim = f"r{index}b_victim_{kind}"
        harness.submit(course_dir, victim, STEP, victims[kind][0])
        expected[victim] = victims[kind][1]
    # a notebook that is a link to a classmate's: staged without it, so graded as missing
    linker = "r9a_links_a_classmate_s_notebook"
    harness.submit(course_dir, linker, STEP, None)
    (course_dir / "submitted" / linker / STEP / f"{STEP}.ipynb").symlink_to(
        course_dir / "submitted" / "r9b_victim_key" / STEP / f"{STEP}.ipynb")
    harness.submit(course_dir, "r9b_victim_key", STEP, victims["key"][0])
    expected.update({linker: {cell: 0.0 for cell in full}, "r9b_victim_key": full})
    command = [sys.executable, "-m", "attention_grader.grading", STEP, "--workers", str(workers), "--timeout", "10",
               "--root", str(course_dir)]
    run = subprocess.run(command, cwd=course_dir, capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    got = {student: harness.cell_scores(course_dir, STEP, student) for student in expected}
    wrong = {s: (expected[s], got[s]) for s in expected if got[s] != expected[s]}
    assert not wrong, f"scores other than earned (expected, got): {wrong}\n{run.stdout}"
    flagged = {line.split(" / ")[0].strip() for line in run.stdout.splitlines() if f" / {STEP}:" in line}
    assert f"r{sorted(ATTACKS).index('children_over_the_memory_limit')}a_children_over_the_memory_limit" in flagged
    assert linker in flagged and "refused files" in run.stdout
    assert not any("victim" in student for student in flagged), run.stdout
    # nothing a submission printed reaches the instructor's terminal as a control sequence
    assert "\x1b" not in run.stdout + run.stderr
