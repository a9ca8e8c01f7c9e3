"""Grade a class on a Dask cluster: `python3 course.py grade --scheduler ADDRESS`.

The same grading as on one machine (attention_grader/grading.py), with Dask's scheduler handing out the work: every
batch of submissions (one assignment, a few students) is a Dask task. Each thread of each Dask worker keeps one
grading process of the course, the same as a local worker, with its warm, sandboxed executor: started by the run's
first task there (a warm-up, before any submission is handed out) and kept for the run's other tasks. The course
folder is on a filesystem every worker mounts at the same path (docs/scale.md): the client stages submitted/ into
.grading/ there, the workers read it, write autograded/ and feedback/ there and their grades to one gradebook server
(PostgreSQL).

Nothing lost, nothing twice: when a worker dies, the scheduler runs its tasks again on another worker, and its
grading process dies with it (PR_SET_PDEATHSIG), so two processes never grade one submission at once. nbgrader's
autograde --force updates the same gradebook rows when a task runs again. A task whose every try ended with its
worker dead (distributed.scheduler.allowed-failures) ends flagged, not graded, with the reason. The client releases each
result as soon as it has it, so a worker that dies later does not make the scheduler grade that batch again.

The instructor's secret never travels with a task: workers read it where they read the course (.grading_secret,
or c.PlanHiddenChecks.secret_file), and a task carries only a fingerprint (an HMAC of a fixed text under the secret),
so that a worker that sees another secret refuses to grade instead of drawing other hidden inputs.
"""
import ctypes
import hashlib
import hmac
import json
import os
import signal
import socket
import sys
import threading
import uuid
from pathlib import Path

from attention_grader import grading

GRADERS = {}  # (Dask worker address, thread) -> the grading process kept warm there
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: a forked child of a threaded process only calls it


def secret_path(root):
    configured = grading.course_config(root).PlanHiddenChecks.get("secret_file", "")
    return Path(root) / (configured or ".grading_secret")


def secret_fingerprint(secret):
    return hmac.new(secret, b"attention-course: the same secret on every worker", hashlib.sha256).hexdigest()[:16]


def _die_with_parent():
    """In the grading process, before it starts: the kernel kills it when the Dask worker that started it dies."""
    _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _grader(options):
    """This Dask worker thread's grading process for this run: started on first use, warm for the run's later tasks
    (a worker with --nthreads N runs N of them, like N local workers)."""
    from distributed import get_worker
    place = (get_worker().address, threading.get_ident())
    grader = GRADERS.get(place)
    if grader is not None and (grader.options != options or grader.process.poll() is not None):
        grader.close()
        grader = None
    if grader is None:
        root = Path(options["root"])
        path = secret_path(root)
        if not path.is_file():
            raise RuntimeError(f"{socket.gethostname()} finds no instructor's secret at {path}: mount the course "
                               "folder at the same path on every worker (docs/scale.md)")
        if secret_fingerprint(path.read_text().strip().encode()) != options["secret"]:
            raise RuntimeError(f"{socket.gethostname()} reads another instructor's secret at {path} than the "
                               "machine that started the grading: give every worker the same course folder")
        log = open(root / grading.STAGING / f"worker-{socket.gethostname()}-{os.getpid()}.log", "a")
        grader = grading.Worker(root, options["timeout"], options["feedback"], options["sandbox"], log,
                                preexec_fn=_die_with_parent)
        grader.options = options
        GRADERS[place] = grader
    return grader


def warm_up(options):
    """Start this worker's grading process (the executor's warm-up); whether it is ready, and sandboxed."""
    from distributed import get_worker
    try:
        ready = dict(_grader(options).ready)
    except Exception as error:  # no secret, another secret, a course folder that does not load
        ready = {"ready": False, "error": str(error) if isinstance(error, RuntimeError) else
                 f"{type(error).__name__}: {error}"}
    return {**ready, "worker": get_worker().name}


def grade_batch(task, options):
    """One Dask task: grade one batch of one assignment on this worker's grading process; its results."""
    from distributed import get_worker
    grader = _grader(options)
    if not grader.ready.get("ready"):
        raise RuntimeError(grader.ready.get("error", "the grading process did not start"))
    grader.send(task)
    line = grader.process.stdout.readline()
    if line:
        results = json.loads(line)["results"]
    else:  # the grading process died (not its Dask worker): flag the batch, start another process next time
        results = [{"student": student, "assignment": task["assignment"], "success": False,
                    "error": "the grading worker died", "flags": ["crashed"], "feedback": False}
                   for student in task["students"]]
        grader.close()
    for result in results:
        result["worker"] = str(get_worker().name)
    return results


def close_graders():
    """Run on every Dask worker at the end: stop the grading processes (each holds torch and an executor)."""
    for place in list(GRADERS):
        GRADERS.pop(place).close()


def connect(scheduler):
    """A Client for an address (tcp://host:8786), a scheduler file written by `dask scheduler --scheduler-file`,
    or the Client itself (a Dask Gateway or dask-jobqueue cluster's, from Python)."""
    from distributed import Client
    if isinstance(scheduler, Client):
        return scheduler
    if os.path.isfile(scheduler):
        return Client(scheduler_file=scheduler)
    return Client(scheduler)


def lost(task, error):
    """The results of a batch that no worker could grade (each one that tried died, or refused)."""
    tries = getattr(error, "allowed_failures", 0) + 1
    why = (f"{tries} Dask worker{'s' if tries > 1 else ''} died grading it (distributed.scheduler.allowed-failures)"
           if type(error).__name__ == "KilledWorker" else f"{type(error).__name__}: {error}")
    return [{"student": student, "assignment": task["assignment"], "success": False,
             "error": f"not graded: {why}; grade it again", "feedback": False,
             "flags": ["crashed"] if type(error).__name__ == "KilledWorker" else []}
            for student in task["students"]]


def grade_class(root, scheduler, assignments=None, students=None, csv_path="grades.csv", timeout=None,
                feedback=True, sandbox=True, out=sys.stdout):
    """grading.grade_class on a Dask cluster: the same staging, gradebook, export and summary."""
    root = Path(root).resolve()
    (root / grading.STAGING).mkdir(exist_ok=True)
    with open(root / grading.LOG, "w") as log, grading.warnings_to(log):
        return _grade_class(root, scheduler, assignments, students, csv_path, timeout, feedback, sandbox, out, log)


def _grade_class(root, scheduler, assignments, students, csv_path, timeout, feedback, sandbox, out, log):
    from distributed import as_completed

    from attention_grader import judging
    pairs, refused_folders = grading.find_submissions(root, assignments, students)
    for shown, _, _, why in refused_folders:
        print(grading.printable(f"refused {shown!r}: {why}; nothing else is affected"), file=out)
    staged_problems = {pair: grading.stage(root, *pair) for pair in pairs}
    grading._register(root, pairs, out)
    results = []
    log.flush()
    if pairs:
        try:
            client = connect(scheduler)
            client.wait_for_workers(1, timeout=300)
        except (OSError, TimeoutError) as error:
            print(f"Nothing graded: no Dask cluster to grade on at {scheduler} ({type(error).__name__}: {error})",
                  file=out)
            return []
        workers = sorted(client.scheduler_info()["workers"])
        run = uuid.uuid4().hex[:8]
        options = {"root": str(root), "timeout": timeout, "feedback": feedback, "sandbox": sandbox, "run": run,
                   "secret": secret_fingerprint(judging.read_secret(secret_path(root)))}  # created here if new
        warm = [client.submit(warm_up, options, key=f"warm-up-{run}-{i}", workers=[address],
                              allow_other_workers=True, pure=False) for i, address in enumerate(workers)]
        ready = client.gather(warm)
        refused = next((r for r in ready if not r.get("ready")), None)
        if refused:
            client.run(close_graders, on_error="ignore")
            if client is not scheduler:
                client.close()
            print(f"Nothing graded: Dask worker {refused['worker']}: {refused['error']}", file=out)
            return []
        unsandboxed = ("WARNING: student code ran WITHOUT a sandbox (--unsandboxed): it could read the solutions and "
                       "the grading secret and write the gradebook. Install Debian's bubblewrap."
                       if any(not r.get("sandboxed") for r in ready) else "")
        if unsandboxed:
            print(unsandboxed, file=out)
        print(f"Grading on {len(workers)} Dask workers at {client.scheduler.address}", file=out)
        progress = grading.Progress(len(pairs))
        tasks = {client.submit(grade_batch, task, options, key=f"grade-{task['assignment']}-{i}-{run}",
                               pure=False): task for i, task in enumerate(grading.batches(pairs, len(workers)))}
        for future in as_completed(list(tasks)):
            task = tasks.pop(future)
            if future.status == "finished":
                done = future.result()
            else:
                done = lost(task, future.exception() if future.status == "error" else RuntimeError("cancelled"))
            future.release()  # the scheduler forgets it: a worker dying later does not make it run again
            for result in done:
                result["problems"] = staged_problems[(result["student"], result["assignment"])]
            results += done
            progress.step(len(done))
        client.run(close_graders, on_error="ignore")
        if client is not scheduler:
            client.close()
    else:
        unsandboxed = ""
    grading.export(root, csv_path)
    grading.flag_in_gradebook(root, [r for r in results if grading.flags_of(r)])
    grading.summarize(root, results, csv_path, out, refused_folders)
    if unsandboxed:
        print(unsandboxed, file=out)
    return results
