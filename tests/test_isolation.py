"""One submission cannot touch another student's grade, the grading machine or its own hidden checks: each attack
graded first, honest classmates after it, through the instructor's command with one and with two workers.

Every attacker hands in the untouched release plus its attack (or a link to a classmate's notebook), so any point it earns is unearned. Each is followed
(in grading order) by a victim: the answer key or a known mistake, whose score is known from the bank. Shown to work
against the undefended executor: forged messages shifted the next student's grade by one notebook (commit 6f13455),
a process left running or a notebook's children together over the memory limit got through before the tree of
processes was watched (tests/test_executor.py, written first).
"""
import json
import os
import subprocess
import sys
import time

import pytest
from nbformat.v4 import new_code_cell, new_notebook

import harness
from attention_grader import forking
from conftest import ROOT, require
from test_executor import run, text

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
    # The attacks of issue 23, each shown to work against the executor before notebooks got namespaces of their own
    # (one sandbox and one /tmp per worker): later classmates crashed before their first cell (read-only /tmp) or
    # were killed (hop chains), files stayed for the next notebook, and outputs passed the caps through gc.
    "makes_tmp_read_only": (
        "import os\n"
        "for path in ('/tmp', '/dev/shm', '/dev', '/'):\n"
        "    try:\n"
        "        os.chmod(path, 0o555)\n"
        "    except OSError:\n"
        "        pass\n"),
    # a chain of processes, each forking its successor in a new session and exiting, that kills all it can later
    "leaves_a_hop_chain": (
        "import os, signal, time\n"
        "if os.fork() == 0:\n"
        "    os.closerange(3, 1024)\n"
        "    deadline = time.monotonic() + 20\n"
        "    while time.monotonic() < deadline:\n"
        "        if os.fork():\n"
        "            os._exit(0)\n"
        "        os.setsid()\n"
        "        if time.monotonic() > deadline - 19:\n"
        "            try:\n"
        "                os.kill(-1, signal.SIGKILL)\n"
        "            except OSError:\n"
        "                pass\n"
        "    os._exit(0)\n"),
    "fills_shared_memory_and_tmp": (
        "import os\n"
        "block = b'x' * (16 << 20)\n"
        "for path, blocks in (('/dev/shm/left_behind', 128), ('/tmp/matplotlib/left_behind', 32)):\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        with open(path, 'wb') as file:\n"
        "            for _ in range(blocks):\n"
        "                file.write(block)\n"
        "    except OSError:\n"
        "        pass\n"),
    # the executor's list of outputs, found from the notebook's own stdout, filled past every cap
    "passes_the_display_cap_through_gc": (
        "import gc\n"
        "print('marker')\n"
        "outputs = next(o for o in gc.get_objects() if isinstance(o, list) and o and isinstance(o[0], dict)\n"
        "               and o[0].get('text') == 'marker\\n')\n"
        "for _ in range(12):\n"
        "    outputs.append({'output_type': 'display_data', 'metadata': {}, 'data': {'text/html': 'x' * (10 << 20)}})\n"),
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
    command = [sys.executable, "-m", "attention_grader", STEP, "--workers", str(workers), "--timeout", "10",
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


def test_a_notebook_holding_thousands_of_threads_leaves_classmates_their_scores(base_course, tmp_path):
    """Under a per-user task limit (RHEL's default `ulimit -u 4096` here), a notebook that holds all the threads it can
    while the other worker grades made honest classmates crash before each notebook's tasks were capped."""
    require("bwrap", "attacks on the sandboxed executor")
    course_dir = tmp_path / "course"
    harness.shutil.copytree(base_course, course_dir)
    hold = ("import threading, time\nthreading.stack_size(64 << 10)\nrelease = threading.Event()\ntry:\n"
            "    for _ in range(8000):\n        threading.Thread(target=release.wait, daemon=True).start()\n"
            "except RuntimeError:\n    pass\ntime.sleep(8)\n")
    harness.submit(course_dir, "a_holds_threads", STEP, attacker_notebook(hold))
    for student in ("b_victim", "c_victim", "d_victim"):
        harness.submit(course_dir, student, STEP, harness.variant_notebook(STEP, {}))
    command = [sys.executable, "-m", "attention_grader", STEP, "--workers", "2", "--timeout", "20",
               "--root", str(course_dir)]
    limit = __import__("resource").RLIMIT_NPROC
    run = subprocess.run(command, cwd=course_dir, capture_output=True, text=True, timeout=600,
                         preexec_fn=lambda: __import__("resource").setrlimit(limit, (4096, 4096)))
    assert run.returncode in (0, 1), run.stdout + run.stderr
    full = harness.autograded_cells(STEP)
    got = {student: harness.cell_scores(course_dir, STEP, student) for student in ("b_victim", "c_victim", "d_victim")}
    assert all(scores == full for scores in got.values()), f"classmates lost points: {got}\n{run.stdout}"
    assert harness.cell_scores(course_dir, STEP, "a_holds_threads") == {cell: 0.0 for cell in full}


# --- one notebook, one sandbox: what a notebook leaves behind, seen by the next one on the same executor ---------


def test_nothing_a_notebook_writes_or_chmods_reaches_the_next_notebook():
    """Before: the next notebook crashed before its first cell (/tmp read-only) and read the files left behind."""
    require("bwrap", "the per-notebook sandbox")
    outputs, _ = run(ATTACKS["fills_shared_memory_and_tmp"] + ATTACKS["makes_tmp_read_only"]
                     + "print(os.path.getsize('/dev/shm/left_behind') >> 20, os.path.getsize('/tmp/matplotlib/left_behind') >> 20)")
    written = [int(n) for n in text(outputs[0]).split()]
    assert all(n <= 256 for n in written), f"MiB written to /dev/shm and /tmp: {written}, over the 256 MiB cap"
    outputs, event = run("import os, tempfile\n"
                         "print(os.path.exists('/dev/shm/left_behind'), os.path.exists('/tmp/matplotlib/left_behind'))\n"
                         "open(os.path.join(tempfile.gettempdir(), 'mine.txt'), 'w').write('ok')\nprint('writable')")
    assert text(outputs[0]) == "False False\nwritable\n", outputs
    assert event["flags"] == []


def test_a_hop_chain_ends_with_its_notebook():
    """The red team's chains (each process forks its successor in a new session and exits) outlived the notebook on
    the executor before, with two workers; the chains tried here on one executor were already caught there (the
    watcher's count of processes, zombies included, or its look at /proc at the end). The notebook's PID namespace
    ends any chain by construction: this test keeps that so."""
    require("bwrap", "the per-notebook sandbox")
    run(ATTACKS["leaves_a_hop_chain"])
    outputs, event = run("import time\ntime.sleep(3)\nprint('alive')", "print('still alive')")
    assert text(outputs[0]) == "alive\n" and text(outputs[1]) == "still alive\n", outputs
    assert event["flags"] == []


def test_the_sandbox_is_never_the_grader_s_root():
    """As root, the sandbox's uid was host root: it could chmod the host's /dev/null and open kernel.core_pattern for
    writing. Proven without harm: the chmod keeps /dev/null's mode, the file is opened and closed unwritten."""
    require("bwrap", "the sandbox")
    outputs, _ = run("import os, stat\n"
                     "mode = stat.S_IMODE(os.stat('/dev/null').st_mode)\n"
                     "for what, act in (('chmod /dev/null', lambda: os.chmod('/dev/null', mode)),\n"
                     "                  ('open core_pattern', lambda: os.close(os.open('/proc/sys/kernel/core_pattern', os.O_WRONLY))),\n"
                     "                  ('open /etc/shadow', lambda: os.close(os.open('/etc/shadow', os.O_RDONLY)))):\n"
                     "    try:\n"
                     "        act()\n"
                     "        print(what, 'allowed')\n"
                     "    except OSError as error:\n"
                     "        print(what, 'refused')\n")
    assert text(outputs[0]) == "chmod /dev/null refused\nopen core_pattern refused\nopen /etc/shadow refused\n", (
        f"as uid {os.geteuid()}: {text(outputs[0])}")


def test_the_output_caps_hold_when_student_code_reaches_the_executor_s_list():
    """Before: 120 MB appended through gc went to the grader whole (400 MB put autograde at 2 GB and 544 s)."""
    outputs, event = run(ATTACKS["passes_the_display_cap_through_gc"], "print('after')")
    size = sum(len(json.dumps(o)) for o in outputs[0])
    assert size < 1 << 20 and outputs[0][-1]["ename"] == "OutputLimitError", (size, str(outputs[0])[:300])
    assert text(outputs[1]) == "after\n"


# --- hidden checks reach the notebook only when their cell runs, and leave nothing behind -------------------------

KV = "09_kv_cache"

# A wrong causal_mask_with_offset (the top-left mask) that answers from any stand-in table found in memory.
READS_STAND_INS = '''
import ast, gc, json, re, time, torch
from attention_course.probe import decode_tensor
_scanned = [0.0, {}]

def _found_answers():
    if time.monotonic() - _scanned[0] < 5:  # a scan of memory takes time: at most one in 5 s
        return _scanned[1]
    answers = _scanned[1]
    for holder in gc.get_objects():
        items = holder.values() if isinstance(holder, dict) else holder if isinstance(holder, (list, tuple)) else ()
        for item in list(items):
            if isinstance(item, str) and "probe." + "stand_in(" in item:
                for table in re.findall(r"\\.loads\\(('.*?')\\)\\)", item):
                    for args, spec in json.loads(ast.literal_eval(table)):
                        answers[tuple(args)] = decode_tensor(spec)
    _scanned[0] = time.monotonic()
    return answers

def causal_mask_with_offset(t_q, t_k):
    answers = _found_answers()
    if (t_q, t_k) in answers:
        return answers[(t_q, t_k)].bool()
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(diagonal=1)
'''

# A cell of the student's own at the end: prints every hidden plan or stand-in table still in memory.
PRINTS_PLANS = '''
import gc
found = set()
for holder in gc.get_objects():
    items = holder.values() if isinstance(holder, dict) else holder if isinstance(holder, (list, tuple)) else ()
    for item in list(items):
        if isinstance(item, str) and len(item) > 20 and ("probe." + "run(" in item or "probe." + "stand_in(" in item):
            found.add(item)
print("FOUND", len(found), "HIDDEN", *sorted(found))
'''


def kv_attacker():
    nb = harness.variant_notebook(KV, {"causal_mask_with_offset": READS_STAND_INS})
    nb.cells.append(new_code_cell(PRINTS_PLANS))
    return nb


@pytest.mark.parametrize("workers", [1, 2])
def test_hidden_checks_are_not_found_in_memory(workers, tmp_path):
    """Before: the executor received every cell's source at once, hidden plans and stand-in tables included, so the
    wrong Part 1 above answered from a later cell's table, and a cell of the student's own printed every plan into
    the feedback."""
    require("bwrap", "the per-notebook sandbox")
    course_dir = harness.make_course(tmp_path / "course", steps=[KV])
    mistake = harness.variant_notebook(KV, {"causal_mask_with_offset": READS_STAND_INS.split("def causal_mask_with_offset")[0]
                                            + "def causal_mask_with_offset(t_q, t_k):\n"
                                              "    return torch.ones(t_q, t_k, dtype=torch.bool).triu(diagonal=1)\n"})
    harness.submit(course_dir, "a_attacker", KV, kv_attacker())
    harness.submit(course_dir, "b_classmate", KV, harness.variant_notebook(KV, {}))
    harness.submit(course_dir, "c_same_mistake_alone", KV, mistake)
    harness.grade_class(course_dir, KV, workers=workers, timeout=30)
    feedback = harness.feedback_text(course_dir, KV, "a_attacker")
    assert "FOUND 0 HIDDEN" in feedback and "__import__('json').loads(" not in feedback, (
        feedback[feedback.find("FOUND"):][:300])
    alone = harness.cell_scores(course_dir, KV, "c_same_mistake_alone")
    assert harness.cell_scores(course_dir, KV, "a_attacker") == alone
    assert harness.cell_scores(course_dir, KV, "b_classmate") == harness.autograded_cells(KV)


def test_a_test_cell_leaves_nothing_for_later_cells():
    """Whatever a test cell's code does, a later cell finds nothing of it: a file, a signal, a connection to a socket
    the notebook listens on, memory it shares. Before (test cells ran in the notebook's process) all four arrived."""
    require("bwrap", "the test cell's sandbox")
    setup = ("import mmap, os, signal, socket\n"
             "got = []\n"
             "signal.signal(signal.SIGUSR1, lambda *args: got.append('signal'))\n"
             "try:  # a notebook may not make sockets (docs/trust.md): if it could, a test cell could connect\n"
             "    listener = socket.socket(socket.AF_UNIX)\n"
             "    listener.bind('\\0course-channel')\n"
             "    listener.listen(8)\n"
             "    listener.setblocking(False)\n"
             "except PermissionError:\n"
             "    listener = None\n"
             "shared = mmap.mmap(-1, 4096)\n"
             "notebook = os.getpid()\n")
    leaks = ("secret = b'HIDDEN-PLAN'\n"
             "def attempt(what, act):\n"
             "    try:\n"
             "        act()\n"
             "        print(what, 'done')\n"
             "    except OSError as error:\n"
             "        print(what, 'refused')\n"
             "attempt('file', lambda: open('/tmp/left', 'wb').write(secret))\n"
             "attempt('signal', lambda: os.kill(notebook, signal.SIGUSR1))\n"
             "attempt('socket', lambda: socket.socket(socket.AF_UNIX).connect('\\0course-channel'))\n"
             "shared[:11] = secret\n")
    later = ("try:\n"
             "    connected = listener is not None and bool(listener.accept())\n"
             "except BlockingIOError:\n"
             "    connected = False\n"
             "print(got, os.path.exists('/tmp/left'), connected, shared[:11] == b'HIDDEN-PLAN')\n")
    cells = [new_code_cell(setup), new_code_cell(leaks, metadata={"nbgrader": {"grade": True, "solution": False,
                                                                               "grade_id": "t", "points": 1}}),
             new_code_cell(later)]
    nb = new_notebook(cells=cells)
    forking.ForkingExecute(timeout=10, memory_limit=1 << 30).preprocess(nb, {})
    assert text(nb.cells[2].outputs) == "[] False False False\n", [c.outputs for c in nb.cells]


def planned_sources(nb, tmp_path):
    from traitlets.config import Config

    from attention_grader.judging import PlanHiddenChecks
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    planner = PlanHiddenChecks(config=config, secret_file=str(tmp_path / "secret"))
    nb, _ = planner.preprocess(nb, {"nbgrader": {"assignment": KV, "student": "ada", "notebook": KV}})
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")}


def test_stand_in_tables_go_only_to_cells_whose_earlier_parts_were_graded_before(tmp_path):
    """A test cell moved below a later part's would otherwise run after that part's stand-in table reached the
    notebook: an executor rewritten from inside could keep the table and answer the moved part from it."""
    nb = harness.variant_notebook(KV, {})
    assert "probe.stand_in(" in planned_sources(nb, tmp_path)["test_cached_attention"]
    cells = nb.cells
    first = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "test_causal_mask_with_offset")
    cells.append(cells.pop(first))  # Part 1's test cell moved to the end
    planned = planned_sources(nb, tmp_path)
    assert not any("probe.stand_in(" in source for source in planned.values())


@pytest.mark.parametrize("step", harness.course.steps())
def test_judges_list_test_cells_in_the_exercise_s_order(step):
    """The order PlanHiddenChecks compares a submission's test cells with."""
    from attention_grader.judging import autograded_test_cells, judges_of
    nb = harness.source_notebook(step)
    assert [cell_id for cell_id, _ in autograded_test_cells(nb)] == list(judges_of(step).CELLS)


# --- one notebook cannot slow the class (issue 44): each attack graded before two honest classmates -----------------

# Two dozen busy processes, each in a session of its own (so each its own scheduler autogroup), kept while the
# notebook's cells run near the cell timeout: the other worker was left a tenth of a core.
SPINNERS = ("import subprocess, sys, time\n"
            "for _ in range(24):\n"
            "    subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n")
# Gigabytes queued in Unix socket pairs that nobody reads: memory no process's size shows, past the 4 GiB limit.
SOCKET_BUFFERS = ("import resource, socket\n"
                  "resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)\n"
                  "held = []\n"
                  "for _ in range(800):\n"
                  "    a, b = socket.socketpair()\n"
                  "    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)\n"
                  "    a.setblocking(False)\n"
                  "    try:\n"
                  "        while True:\n"
                  "            a.send(b'x' * (1 << 20))\n"
                  "    except BlockingIOError:\n"
                  "        pass\n"
                  "    held.append((a, b))\n")
HOLD = "import time\ntime.sleep({seconds})\n"


def slow_classmate(seconds=2):
    """The answer key with a first cell that computes for `seconds` of CPU time: honest, and slow."""
    nb = harness.variant_notebook(STEP, {})
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    cell.source = (f"import time as _time\n_start = _time.process_time()\nwhile _time.process_time() - _start < {seconds}:"
                   f"\n    pass\n" + cell.source)
    return nb


def attacker_holding(code, cells=3, seconds=9):
    """The release with `code` in its first solution cell and the first `cells` solution cells each kept running
    `seconds` (under a 10 s cell timeout)."""
    nb = harness.read_notebook(ROOT / "release" / STEP / f"{STEP}.ipynb")
    solutions = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for cell in solutions[:cells]:
        cell.source = HOLD.format(seconds=seconds) + cell.source
    solutions[0].source = code + solutions[0].source
    return nb


def grade_with(course_dir, attacker, workers):
    """Grade `attacker` (if any) first, then two honest classmates; return (scores, seconds, the run)."""
    harness.submit(course_dir, "b_slow_classmate", STEP, slow_classmate())
    harness.submit(course_dir, "c_classmate", STEP, harness.variant_notebook(STEP, {}))
    if attacker is not None:
        harness.submit(course_dir, "a_attacker", STEP, attacker)
    command = [sys.executable, "-m", "attention_grader", STEP, "--workers", str(workers), "--timeout", "10",
               "--root", str(course_dir)]
    started, lowest = time.monotonic(), [available_memory()]
    with open(course_dir / "out.txt", "w+") as out, subprocess.Popen(command, cwd=course_dir, stdout=out,
                                                                     stderr=subprocess.STDOUT, text=True) as process:
        while process.poll() is None:  # the machine's available memory, as the class is graded
            lowest.append(available_memory())
            time.sleep(0.2)
        out.seek(0)
        run = subprocess.CompletedProcess(command, process.returncode, out.read(), "")
    seconds = time.monotonic() - started
    assert run.returncode in (0, 1) and (course_dir / "grades.csv").exists(), run.stdout + run.stderr
    scores = {s: harness.cell_scores(course_dir, STEP, s) for s in ("b_slow_classmate", "c_classmate")}
    return scores, seconds, run, lowest[0] - min(lowest)


def available_memory():
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) << 10 for line in meminfo if line.startswith("MemAvailable:"))


@pytest.mark.parametrize("attack, workers", [("spinners", 2), ("spinners", 1), ("socket_buffers", 1)])
def test_one_notebook_cannot_slow_its_classmates(attack, workers, base_course, tmp_path):
    """Graded before two honest classmates, the attacker leaves them their scores and their feedback within 1.5x the
    time of a class graded without it, plus a minute; the class run ends with grades.csv and the summary. Before:
    the slow classmate lost 6 of 16 points (timed out) and the run could end in a traceback (spinners); 3 GiB of
    socket buffers were held unseen under a 1 GiB limit, and 6 GiB under the default 4 GiB."""
    require("bwrap", "attacks on the sandboxed executor")
    control_dir, attack_dir = tmp_path / "control", tmp_path / "attack"
    harness.shutil.copytree(base_course, control_dir)
    harness.shutil.copytree(base_course, attack_dir)
    full = harness.autograded_cells(STEP)
    code = {"spinners": SPINNERS, "socket_buffers": SOCKET_BUFFERS}[attack]
    control, control_seconds, _, _ = grade_with(control_dir, None, workers)
    assert control == {"b_slow_classmate": full, "c_classmate": full}, control
    got, seconds, run, taken = grade_with(attack_dir, attacker_holding(code), workers)
    assert got == control, f"classmates' scores changed by the attack: {got}\n{run.stdout}"
    assert seconds <= 1.5 * control_seconds + 60, f"{seconds:.0f} s against {control_seconds:.0f} s without the attack"
    assert harness.cell_scores(attack_dir, STEP, "a_attacker") == {cell: 0.0 for cell in full}
    assert taken < forking.ForkingExecute.memory_limit.default_value + (1 << 30), f"{taken >> 20} MiB taken from the machine"
    assert not any(name in line for line in run.stdout.splitlines()
                   for name in ("b_slow_classmate /", "c_classmate /")), run.stdout


def test_a_worker_that_does_not_end_is_ended_with_what_it_started():
    """Before: closing a worker that did not exit within 30 s raised subprocess.TimeoutExpired, so the class run ended
    in a traceback without grades.csv, the worker left running."""
    from attention_grader.grading import Worker
    worker = Worker.__new__(Worker)
    stubborn = ("import subprocess, sys, time\n"
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                "time.sleep(600)\n")
    worker.process = subprocess.Popen([sys.executable, "-c", stubborn], stdin=subprocess.PIPE, text=True,
                                      start_new_session=True)
    time.sleep(1)
    started = time.monotonic()
    worker.close(wait=1)
    assert time.monotonic() - started < 10 and worker.process.poll() is not None
    time.sleep(0.5)
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _running_in_session(pid, worker.process.pid)]
    assert not left, f"processes of the worker still running: {left}"


def _running_in_session(pid, session):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return fields[0] != "Z" and int(fields[3]) == session
    except (OSError, ValueError, IndexError):
        return False
