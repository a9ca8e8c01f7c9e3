"""`course.py grade --scheduler`, run for real: a Dask scheduler and three Dask workers as separate processes on this
machine, a throwaway PostgreSQL gradebook (tests/test_postgres.py's), a class of every step, and one worker killed
(SIGKILL) while it grades. Every submission must end graded exactly once, with the scores and the grades.csv of a
one-machine grading of the same class on SQLite.

The workers run without a nanny on purpose: a nanny would start a new worker in place of the killed one, and the
test must show the other workers picking up its tasks."""
import contextlib
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

import course
import harness
from attention_grader.grading import STAGING
from conftest import STEPS
from test_postgres import grades, postgres  # noqa: F401  (postgres: the throwaway server, a fixture)

DASK = str(Path(sys.executable).parent / "dask")
STUDENTS = ["answer_key", "mistaken"]


def first_mistake(step):
    return next(name for name, spec in sorted(harness.bank(step).items())
                if spec["kind"] == "mistake" and not spec.get("stock_hole") and not spec.get("at_most"))


def course_with_class(base, path, db_url=None):
    """A copy of the course with two students on every step: the answer key and the bank's first mistake."""
    course_dir = Path(shutil.copytree(base, path))
    if db_url:  # docs/scale.md: the gradebook on the database server, every step registered there once
        with open(course_dir / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.CourseDirectory.db_url = {db_url!r}\n")
        course.generate_release(course_dir)
    (course_dir / ".grading_secret").write_text("the same secret on every worker\n")
    for step in STEPS:
        harness.submit(course_dir, "answer_key", step, harness.variant_notebook(step, {}))
        mistake = harness.bank(step)[first_mistake(step)]
        harness.submit(course_dir, "mistaken", step, harness.variant_submission(step, mistake))
    return course_dir


def class_summary(out):
    """What the summary says of the class (counts, per assignment, per student, flagged), without the per-worker
    figures."""
    text = out.split("\nGraded ")[1].split("\nGrades:")[0]
    return re.sub(r"\nPer worker:\n(  .*\n)*", "", text)


def gradebook(db_url):
    """{(student, step): [(cell, score), ...]} of every submission in the gradebook, as a list: a submission twice
    is there twice."""
    from nbgrader.api import Gradebook
    with Gradebook(db_url, "attention-step-by-step") as gb:
        return [((s.student.id, step), sorted((g.name, g.score) for nb in s.notebooks for g in nb.grades))
                for step in STEPS for s in gb.assignment_submissions(step)]


def start(command, log_path):
    log = open(log_path, "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def alive(process):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def command_line(process):
    try:
        return " ".join(process.cmdline()[:4])
    except psutil.Error:
        return "(ended)"


def logs(folder):
    return "\n".join(f"--- {path}\n{path.read_text()[-3000:]}" for path in sorted(Path(folder).glob("*.log")))


@contextlib.contextmanager
def dask_cluster(folder, workers):
    """A Dask scheduler and `workers` Dask workers (one thread, no nanny) as separate processes on this machine;
    yields (scheduler file, {worker name: process}). Everything started is killed on the way out."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    scheduler_file = folder / "scheduler.json"
    processes = [start([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                        "--scheduler-file", str(scheduler_file)], folder / "scheduler.log")]
    try:
        while not scheduler_file.exists():
            assert processes[0].poll() is None, logs(folder)
            time.sleep(0.2)
        named = {f"worker-{i}": start([DASK, "worker", "--scheduler-file", str(scheduler_file), "--name",
                                       f"worker-{i}", "--nthreads", "1", "--nworkers", "1", "--no-nanny",
                                       "--no-dashboard", "--host", "127.0.0.1", "--local-directory",
                                       str(folder / f"worker-{i}")], folder / f"worker-{i}.log")
                 for i in range(workers)}
        processes += named.values()
        yield scheduler_file, named
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_a_dask_cluster_grades_like_one_machine_when_a_worker_is_killed(tmp_path, postgres):  # noqa: F811
    from distributed import Client

    base = harness.make_course(tmp_path / "generated")
    alone = course_with_class(base, tmp_path / "one-machine")
    alone_summary = harness.grade_class(alone, workers=2)

    shared = course_with_class(base, tmp_path / "cluster", db_url=postgres)
    with dask_cluster(tmp_path / "dask", workers=3) as (scheduler_file, workers), \
            Client(scheduler_file=str(scheduler_file)) as watcher:
        watcher.wait_for_workers(3, timeout=120)
        address = {info["name"]: a for a, info in watcher.scheduler_info()["workers"].items()}
        command = [sys.executable, "-m", "attention_grader", "--scheduler", str(scheduler_file),
                   "--timeout", "10", "--root", str(shared)] + ([] if harness.SANDBOX else ["--unsandboxed"])
        grading = subprocess.Popen(command, cwd=shared, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim = None
        while victim is None:  # the first worker seen grading a batch (the executors are warm by then)
            assert grading.poll() is None, grading.communicate()
            busy = watcher.processing()
            victim = next((name for name, a in sorted(address.items())
                           if any(str(key).startswith("grade-") for key in busy.get(a, ()))), None)
            time.sleep(0.1)
        time.sleep(1.0)  # in the middle of its batch
        its_processes = psutil.Process(workers[victim].pid).children(recursive=True)
        assert its_processes, "the worker grades in a process of its own"
        shown = {p.pid: command_line(p) for p in its_processes}
        workers[victim].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        while any(map(alive, its_processes)) and time.monotonic() < killed + 1.0:
            time.sleep(0.05)
        left = [f"{p.pid} {shown[p.pid]}" for p in its_processes if alive(p)]  # would grade beside the task's rerun
        out, err = grading.communicate(timeout=600)
        assert grading.returncode == 0, f"{out}\n{err[-3000:]}\n{logs(tmp_path / 'dask')}\n{logs(shared / STAGING)}"

    assert not left, f"the killed worker's grading processes outlived it by a second: {left}"
    per_worker = dict(line.split()[:2] for line in out.split("Per worker:")[1].split("\n\n")[0].strip().splitlines())
    assert sum(map(int, per_worker.values())) == len(STUDENTS) * len(STEPS), out
    assert len(per_worker) >= 2 and set(per_worker) <= set(workers), out

    submissions = gradebook(postgres)
    assert len(submissions) == len({key for key, _ in submissions}) == len(STUDENTS) * len(STEPS), (
        "every submission in the gradebook exactly once")
    one_machine = gradebook(f"sqlite:///{alone / 'gradebook.db'}")
    assert sorted(submissions) == sorted(one_machine), "the same score on every cell as on one machine"
    assert grades(shared) == grades(alone)
    assert class_summary(out) == class_summary(alone_summary)


def test_a_worker_that_reads_another_secret_or_none_refuses_before_grading(tmp_path):
    """Tasks carry a fingerprint of the instructor's secret, never the secret: a worker that reads another secret
    (or finds none) in its course folder refuses at the warm-up, so no student is graded with other hidden inputs."""
    from distributed import Client, LocalCluster

    from attention_grader import distributed
    shutil.copy(course.ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    (tmp_path / STAGING).mkdir()
    secret_file = tmp_path / ".grading_secret"
    options = {"root": str(tmp_path), "timeout": 10, "feedback": True, "sandbox": harness.SANDBOX, "run": "test",
               "secret": distributed.secret_fingerprint(b"the instructor's secret")}
    assert "the instructor's secret" not in repr(options)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        missing = client.submit(distributed.warm_up, options, pure=False).result()
        secret_file.write_text("another secret\n")
        other = client.submit(distributed.warm_up, options, pure=False).result()
    assert not missing["ready"] and "finds no instructor's secret" in missing["error"], missing
    assert not other["ready"] and "another instructor's secret" in other["error"], other
    assert "another secret" not in other["error"]
