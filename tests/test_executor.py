"""The course's forking executor, one behaviour at a time (attention_grader/forking.py).

These run notebooks straight through the executor, without nbgrader; tests/test_grading.py runs it inside nbgrader.
"""
import os
import subprocess
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

import harness
from attention_grader import forking
from conftest import ROOT, require


def run(*sources, timeout=10, memory_limit=1 << 30, sandbox=harness.SANDBOX):
    nb = new_notebook(cells=[new_code_cell(source) for source in sources])
    forking.ForkingExecute(timeout=timeout, memory_limit=memory_limit, sandbox=sandbox).preprocess(nb, {})
    return [cell.outputs for cell in nb.cells], forking.EVENTS[-1]


def text(outputs):
    return "".join(o.get("text", "") + o.get("evalue", "") for o in outputs)


def test_cells_run_in_order_with_outputs_results_and_errors():
    outputs, event = run("x = 2\nprint('x is', x)", "x * 21", "1 / 0", "print(x + 1)")
    assert text(outputs[0]) == "x is 2\n"
    assert outputs[1][0]["output_type"] == "execute_result" and outputs[1][0]["data"]["text/plain"] == "42"
    assert outputs[2][0]["ename"] == "ZeroDivisionError"
    assert text(outputs[3]) == "3\n" and event["flags"] == []


def test_each_notebook_gets_a_fresh_process():
    run("leftover = 1")
    outputs, _ = run("print('leftover' in globals())")
    assert text(outputs[0]) == "False\n"


def test_a_cell_that_runs_too_long_is_interrupted_and_the_next_cells_still_run():
    outputs, event = run("while True:\n    pass", "print('after')", timeout=2)
    assert outputs[0][-1]["ename"] == "CellTimeoutError" and text(outputs[1]) == "after\n"
    assert event["flags"] == ["timed out"]


def test_a_loop_that_swallows_the_interrupt_is_killed_and_later_cells_say_why():
    outputs, event = run("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass",
                         "print('never')", timeout=1)
    assert outputs[0][0]["ename"] == "DeadKernelError" and "could not be interrupted" in outputs[0][0]["evalue"]
    assert "ended in an earlier cell" in outputs[1][0]["evalue"] and event["flags"] == ["crashed"]


def test_os_exit_ends_only_that_notebook():
    outputs, event = run("print('before')", "import os\nos._exit(3)", "print('after')")
    assert text(outputs[0]) == "before\n" and "exited with code 3" in outputs[1][0]["evalue"]
    assert event["flags"] == ["crashed"]
    assert text(run("print('next notebook')")[0][0]) == "next notebook\n"


def test_memory_limit_turns_a_huge_allocation_into_an_error():
    outputs, event = run("import torch\nx = torch.ones(3 << 30, dtype=torch.uint8)", "print('still here')")
    assert outputs[0][0]["output_type"] == "error" and text(outputs[1]) == "still here\n"
    assert event["flags"] == ["out of memory"]


def test_output_floods_are_cut():
    outputs, _ = run("for _ in range(100_000):\n    print('spam ' * 40)")
    assert len(text(outputs[0])) < 1.1 * forking.OUTPUT_LIMIT and "truncated" in text(outputs[0])


def test_student_code_sees_no_course_file_and_cannot_write_outside_its_scratch():
    require("bwrap", "the sandbox")
    outputs, _ = run(f"import os\nprint(sorted(os.listdir({str(ROOT)!r})))",
                     f"open({str(ROOT / 'source' / 'pwned.txt')!r}, 'w')", "open('scratch.txt', 'w').write('ok')")
    assert text(outputs[0]) == "['.venv', 'attention_course']\n"  # only the environment and the package, read-only
    assert outputs[1][0]["output_type"] == "error" and not (ROOT / "source" / "pwned.txt").exists()
    assert outputs[2][0]["data"]["text/plain"] == "2"


def test_without_a_sandbox_the_executor_refuses_to_run_student_code(monkeypatch):
    monkeypatch.setattr(forking, "sandbox_command", lambda python: None)  # as where bwrap is missing
    with pytest.raises(forking.SandboxUnavailable, match="apt-get install bubblewrap.*--unsandboxed"):
        forking.Zygote(sandbox=True)


def test_unsandboxed_on_request_the_executor_warns_loudly(monkeypatch):
    monkeypatch.setattr(forking, "_ZYGOTE", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs, event = run("print('unsandboxed')", sandbox=False)
    assert text(outputs[0]) == "unsandboxed\n" and event["sandboxed"] is False
    assert any(issubclass(w.category, forking.Unsandboxed) for w in caught)
    forking._ZYGOTE.close()
    monkeypatch.setattr(forking, "_ZYGOTE", None)


def test_class_grading_without_a_sandbox_stops_unless_asked(tmp_path):
    step = "01_dot_product_scores"
    course_dir = harness.make_course(tmp_path / "course", steps=[step])
    harness.submit(course_dir, "ada", step, harness.variant_notebook(step, {}))
    no_bwrap = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    command = [sys.executable, "-m", "attention_grader", step, "--workers", "1", "--root", str(course_dir)]
    refused = subprocess.run(command, env=no_bwrap, capture_output=True, text=True)
    assert refused.returncode == 2 and "Nothing graded" in refused.stdout and "--unsandboxed" in refused.stdout
    asked = subprocess.run(command + ["--unsandboxed"], env=no_bwrap, capture_output=True, text=True)
    assert asked.returncode == 0 and asked.stdout.count("WITHOUT a sandbox") == 2, asked.stdout + asked.stderr
    assert harness.cell_scores(course_dir, step, "ada") == harness.autograded_cells(step)


def test_an_executor_that_cannot_start_says_why_and_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(forking, "THIS_FILE", str(tmp_path / "missing.py"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as error:
            forking.Zygote(sandbox=False)
    assert "it exited" in str(error.value) and "missing.py" in str(error.value)
    assert "What to do" in str(error.value)


def test_the_sandbox_starts_from_an_environment_reached_through_a_symlink(tmp_path):
    """A course whose .venv is a link (a hub's shared environment, a checkout on another disk): the sandbox mounts
    real paths, so it must run the environment's Python by its real folder, not by the link."""
    require("bwrap", "the sandbox")
    (tmp_path / "linked").symlink_to(Path(sys.executable).parents[1])
    for folder in (tmp_path, tmp_path.parent):
        folder.chmod(folder.stat().st_mode | 0o001)  # as root the sandbox's uid must pass (.ci/run does so for /root)
    python = tmp_path / "linked" / "bin" / Path(sys.executable).name
    started = subprocess.run([str(python), "-c", "from attention_grader.forking import Zygote\n"
                              "print('sandboxed:', Zygote().sandboxed)"], capture_output=True, text=True, timeout=120)
    assert started.stdout.strip() == "sandboxed: True", started.stdout + started.stderr[-2000:]


def test_a_display_flood_is_dropped_with_a_note_and_grading_goes_on():
    outputs, _ = run("from IPython.display import HTML, display\ndisplay(HTML('x' * 50_000_000))", "print('after')")
    assert "larger than the grader's limit was dropped" in text(outputs[0]) and text(outputs[1]) == "after\n"
    assert all(o["output_type"] == "stream" for o in outputs[0])


def test_processes_a_notebook_leaves_running_end_with_it():
    run("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])")
    outputs, _ = run("import os, time\ntime.sleep(0.5)\nprint(os.popen('ps -eo args').read().count('time.sleep(60)'))")
    assert text(outputs[0]) == "0\n"


def test_a_process_that_leaves_the_notebook_s_group_ends_with_it_too():
    run("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
        "start_new_session=True)")
    outputs, _ = run("import os, time\ntime.sleep(0.5)\nprint(os.popen('ps -eo args').read().count('time.sleep(60)'))")
    assert text(outputs[0]) == "0\n"


def test_memory_limit_holds_for_the_notebook_s_whole_tree():
    """Four children of 400 MB each stay under the per-process limit of 1 GiB, but not together."""
    child = "import time; block = bytearray(400 << 20); time.sleep(20)"
    started = time.monotonic()
    outputs, event = run("import subprocess, sys, time\n"
                         f"children = [subprocess.Popen([sys.executable, '-c', {child!r}]) for _ in range(4)]\n"
                         "[child.wait() for child in children]\n", "print('after')", timeout=10)
    assert "together" in text(outputs[0]) and "memory" in text(outputs[0]), outputs
    assert "out of memory" in event["flags"]
    assert time.monotonic() - started < 10
    outputs, _ = run("print('next notebook')")
    assert text(outputs[0]) == "next notebook\n"


HOLD_THREADS = ("import threading\n"
                "threading.stack_size(64 << 10)\n"
                "release, started = threading.Event(), []\n"
                "try:\n"
                "    for _ in range({count}):\n"
                "        thread = threading.Thread(target=release.wait, daemon=True)\n"
                "        thread.start()\n"
                "        started.append(thread)\n"
                "except RuntimeError as error:\n"
                "    print('refused:', error)\n"
                "print('threads held:', len(started))\n")


def test_a_notebook_s_threads_are_capped():
    require("bwrap", "the per-notebook task limit")
    outputs, _ = run(HOLD_THREADS.format(count=5000))
    said = text(outputs[0])
    held = int(said.split("threads held: ")[1])
    assert "refused" in said and held < forking.MAX_TASKS, said
    outputs, _ = run(HOLD_THREADS.format(count=100))
    assert text(outputs[0]) == "threads held: 100\n"  # an honest notebook's threads are not refused


# The shared memory a notebook could hold outside its processes' mappings, where summing their memory does not see it.
HOLD_MEMFD = ("import os\n"
              "fd = os.memfd_create('held')\n"
              "for _ in range(96):\n"
              "    os.write(fd, b'x' * (16 << 20))\n"
              "print('held 1.5 GiB')\n")
HOLD_OWN_TMPFS = ("import ctypes, os\n"
                  "libc = ctypes.CDLL(None, use_errno=True)\n"
                  "uid, gid = os.getuid(), os.getgid()\n"
                  "assert libc.unshare(0x10000000 | 0x00020000) == 0, os.strerror(ctypes.get_errno())\n"
                  "libc.prctl(4, 1, 0, 0, 0)\n"
                  "for name, line in (('setgroups', 'deny'), ('uid_map', f'{uid} {uid} 1'), ('gid_map', f'{gid} {gid} 1')):\n"
                  "    with open(f'/proc/self/{name}', 'w') as file:\n"
                  "        file.write(line)\n"
                  "os.makedirs('/tmp/own', exist_ok=True)\n"
                  "assert libc.mount(b'none', b'/tmp/own', b'tmpfs', 0, b'size=4g') == 0, os.strerror(ctypes.get_errno())\n"
                  "with open('/tmp/own/held', 'wb') as file:\n"
                  "    for _ in range(96):\n"
                  "        file.write(b'x' * (16 << 20))\n"
                  "print('held 1.5 GiB')\n")


@pytest.mark.parametrize("attack", [HOLD_MEMFD, HOLD_OWN_TMPFS], ids=["memfd", "own_tmpfs"])
def test_memory_held_outside_the_processes_counts_against_the_limit(attack):
    require("bwrap", "memory held outside a notebook's processes")
    outputs, event = run(attack + "import time\ntime.sleep(3)\nprint('kept it')", "print('after')",
                         memory_limit=1 << 30)
    said = text(outputs[0])
    assert "kept it" not in said, (said, event)
    outputs, _ = run("print('next notebook')")
    assert text(outputs[0]) == "next notebook\n"


def test_a_course_environment_under_tmp_is_seen_by_every_notebook(tmp_path_factory):
    """The sandbox gives each notebook a fresh /tmp: an environment stored under /tmp (a clone there, as many CI
    systems make) stays visible in it, in the notebook and in its test cells."""
    require("bwrap", "an environment under /tmp")
    under_tmp = Path(tempfile.mkdtemp(prefix="course-under-tmp-", dir="/tmp"))
    try:
        # hard links where this user may make them (root; an ordinary user owns none of a root-made .venv's files)
        if subprocess.run(["cp", "-a", "--link", str(ROOT / ".venv"), str(under_tmp / ".venv")],
                          capture_output=True).returncode:
            shutil.rmtree(under_tmp / ".venv")
            subprocess.run(["cp", "-a", str(ROOT / ".venv"), str(under_tmp / ".venv")], check=True)
        folder = under_tmp
        while folder != Path("/"):
            if not folder.stat().st_mode & 0o001:
                folder.chmod(folder.stat().st_mode | 0o001)
            folder = folder.parent
        script = ("from nbformat.v4 import new_code_cell, new_notebook\n"
                  "from attention_grader import forking\n"
                  "cells = [new_code_cell('import IPython.core.logger, nbformat\\nprint(\"imported\")'),\n"
                  "         new_code_cell('import email.mime.text, IPython.lib.pretty\\nprint(\"again\")')]\n"
                  "for cell in cells:\n"
                  "    cell.metadata['nbgrader'] = {'grade': True, 'grade_id': 'g' + str(id(cell)), 'points': 1,\n"
                  "                                 'solution': False, 'locked': True}\n"
                  "nb = new_notebook(cells=cells)\n"
                  "forking.ForkingExecute(timeout=30).preprocess(nb, {})\n"
                  "print([o.get('text', o.get('evalue')) for cell in nb.cells for o in cell.outputs])\n")
        done = subprocess.run([str(under_tmp / ".venv" / "bin" / "python"), "-c", script], capture_output=True,
                              text=True, timeout=300, cwd=under_tmp)
        assert "['imported\\n', 'again\\n']" in done.stdout, done.stdout + done.stderr
    finally:
        shutil.rmtree(under_tmp, ignore_errors=True)


def test_an_executor_that_cannot_run_a_notebook_grades_nothing(monkeypatch):
    """A fault of the grader (here: a module the notebooks import is missing) stops grading before any notebook, with
    the reason, instead of giving every student a zero."""
    monkeypatch.setattr(forking, "SELF_CHECK", "import a_module_the_environment_lacks\n")
    monkeypatch.setattr(forking, "_ZYGOTE", None)
    with pytest.raises(RuntimeError, match="no submission was graded.*a_module_the_environment_lacks|"
                                           "a_module_the_environment_lacks.*no submission was graded"):
        forking.Zygote(sandbox=harness.SANDBOX)


def test_as_root_a_base_python_others_cannot_reach_is_named(monkeypatch, tmp_path):
    """As root, the sandbox's uid must pass every folder on the way to the base installation's library (a pyenv under
    /root, mode 700, is not): grading names the folder and what to do, not a missing bubblewrap."""
    if os.geteuid() != 0:
        pytest.skip("only a grader running as root runs student code as another uid")
    closed = tmp_path / "closed"
    (closed / "lib").mkdir(parents=True)
    closed.chmod(0o700)
    monkeypatch.setattr(forking.os, "__file__", str(closed / "lib" / "os.py"))
    with pytest.raises(forking.SandboxUnavailable, match=f"{closed}.*chmod o\\+x"):
        forking.Zygote(sandbox=True)
