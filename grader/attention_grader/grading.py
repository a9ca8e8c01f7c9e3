"""Grade a whole class on this machine's cores (`python3 course.py grade`; the command line is attention_grader/command.py).

nbgrader stays the engine: every submission goes through nbgrader's own autograde (sanitise, restore the test cells,
execute, score, gradebook) and generate_feedback, in worker processes that each keep one warm, sandboxed executor
(attention_grader/forking.py). The parent hands out submissions, shows progress, and at the end prints a summary,
flags what crashed, timed out, ran out of memory, left bad records or could not be read, and exports grades.csv.
It checks what it is asked before any work (an unknown step or student is an error naming the known ones), and
accounts for every folder of submitted/: graded, or refused with the reason (in the summary and in grades.csv).

One bad submission never stops the others: a notebook that is not valid JSON, or missing, is graded as its
assignment's release with a note saying why (so it scores zero for a reason the student can read, instead of being
silently absent), and a worker that dies is replaced. Students' files in submitted/ are never changed: nbgrader
reads a staged copy in .grading/.
"""
import csv
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

STAGING = ".grading"
LOG = os.path.join(STAGING, "grade.log")
UNREADABLE = "attention_course_unreadable"


def course_config(root):
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}")


def is_safe_id(name):
    """Ids that nbgrader's comma-separated lists, its path patterns, a file system and a spreadsheet read as meant."""
    return bool(SAFE_ID.fullmatch(name)) and ".." not in name


ID_RULE = "letters, digits and . _ @ + - (not first), and no .."


def known_steps(root):
    """The steps of this course: the folders of source/ (and of release/, on a grading machine given only that)."""
    return sorted({p.name for folder in ("source", "release") if (Path(root) / folder).is_dir()
                   for p in (Path(root) / folder).iterdir() if p.is_dir()})


def find_submissions(root, assignments=None, students=None, shard=None):
    """(student, assignment) pairs found in submitted/, sorted, and the folders refused, as (folder shown, student,
    assignment or None, why); with shard (k, n), only the k-th of n shares of the students, so that n machines
    sharing one gradebook grade a class."""
    import zlib
    pairs, refused = [], []
    submitted = Path(root) / "submitted"
    steps = known_steps(root)
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []:
        if students and student_dir.name not in students:
            continue
        if shard and zlib.crc32(student_dir.name.encode()) % shard[1] != shard[0] - 1:
            continue
        assignment_dirs = sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.is_symlink())
        assignment_dirs = [p for p in assignment_dirs if not assignments or p.name in assignments]
        if not is_safe_id(student_dir.name):
            why = f"the folder name is not a valid student id ({ID_RULE}): rename the folder and grade again"
            refused += [(f"submitted/{student_dir.name}/{p.name}", student_dir.name, p.name, why)
                        for p in assignment_dirs if p.name in steps] or (
                [] if assignments else [(f"submitted/{student_dir.name}", student_dir.name, None, why)])
            continue
        for assignment_dir in assignment_dirs:
            if assignment_dir.name not in steps:
                refused.append((f"submitted/{student_dir.name}/{assignment_dir.name}", student_dir.name,
                                assignment_dir.name, f"{assignment_dir.name} is not a step of this course"))
                continue
            pairs.append((student_dir.name, assignment_dir.name))
    return pairs, refused


def export(root, csv_path):
    """What `nbgrader export` writes (its CSV plugin, in this process), with a `note` column, and a row for every
    folder of submitted/ that was refused, saying why; made safe for spreadsheets."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins.export import CsvExportPlugin
    config = course_config(root)
    path = Path(root) / csv_path
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gradebook:
        CsvExportPlugin(config=config, to=str(path)).export(gradebook)
        notes = notes_of(root, gradebook)
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    header = rows[0]
    rows = [header + ["note"]] + [row + [notes.get((row[header.index("assignment")], row[header.index("student_id")]),
                                                   "")] for row in rows[1:]]
    for _, student, assignment, why in find_submissions(root)[1]:
        row = dict.fromkeys(rows[0], "")
        row.update(assignment=assignment or "", student_id=student, note=f"refused, not graded: {why}")
        rows.append(list(row.values()))
    with open(path, "w", newline="") as file:
        csv.writer(file).writerows(rows)
    neutralise_csv(path)


def notes_of(root, gradebook):
    """{(assignment, student): note} for grades.csv: a notebook that could not be read, and points that a person has
    still to grade, so that a spreadsheet or an LMS import shows why a score is low or not final."""
    import nbformat
    notes = {}
    for assignment in gradebook.assignments:
        for submission in assignment.submissions:
            said = []
            for path in sorted((Path(root) / STAGING / "submitted" / submission.student.id / assignment.name).glob(
                    "*.ipynb")):
                try:
                    said += [nbformat.read(path, as_version=4).metadata.get(UNREADABLE)]
                except Exception:  # a staged notebook is always readable; a missing one says nothing
                    continue
            said = [f"not graded: {reason}" for reason in said if reason]
            pending = sum(grade.max_score for notebook in submission.notebooks for grade in notebook.grades
                          if grade.auto_score is None and grade.manual_score is None)
            if pending:
                said.append(f"{pending:g} point{'s' if pending != 1 else ''} still to be graded by hand")
            if said:
                notes[(assignment.name, submission.student.id)] = "; ".join(said)
    return notes


def neutralise_csv(path):
    """Rewrite an exported CSV so that no cell is read as a spreadsheet formula (OWASP: CSV injection)."""
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    with open(path, "w", newline="") as file:
        csv.writer(file).writerows([["'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell
                                     for cell in row] for row in rows])


def placeholder(release_path, reason):
    """The release notebook, marked so that the executor fails every cell with `reason` instead of running it."""
    import nbformat
    nb = nbformat.read(release_path, as_version=4)
    nb.metadata[UNREADABLE] = reason
    return nb


FILE_LIMIT = 20_000_000  # bytes of one submitted file


def copy_plain_files(source, target):
    """Copy the regular files under `source`, never following a link; what is not copied, and why."""
    problems = []
    for folder, folders, files in os.walk(source):  # os.walk does not enter linked folders
        relative = Path(folder).relative_to(source)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in sorted(files + [f for f in folders if os.path.islink(os.path.join(folder, f))]):
            path, shown = Path(folder) / name, relative / name
            info = path.lstat()
            why = ("is a link" if stat.S_ISLNK(info.st_mode) else "is not a regular file (device, FIFO or socket)"
                   if not stat.S_ISREG(info.st_mode) else "is a hard link to a file elsewhere" if info.st_nlink > 1
                   else f"is larger than {FILE_LIMIT // 1_000_000} MB" if info.st_size > FILE_LIMIT else None)
            if why:
                problems.append(f"{shown} {why}: not graded")
                continue
            with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as src, open(target / shown, "wb") as dst:
                dst.write(src.read(FILE_LIMIT))
    return problems


def stage(root, student, assignment):
    """Copy one submission to the staging folder nbgrader reads; replace unreadable or missing notebooks."""
    import nbformat
    source = Path(root) / "submitted" / student / assignment
    target = Path(root) / STAGING / "submitted" / student / assignment
    shutil.rmtree(target, ignore_errors=True)
    problems = copy_plain_files(source, target)
    for release_path in sorted((Path(root) / "release" / assignment).glob("*.ipynb")):
        path = target / release_path.name
        reason = None
        if not path.exists():
            reason = f"no notebook named {release_path.name} was submitted, so nothing could be graded"
        else:
            try:
                nb = nbformat.read(path, as_version=4)
                nbformat.validate(nb)
            except Exception as error:  # invalid JSON, wrong format, binary garbage...
                reason = f"{release_path.name} could not be read as a notebook: {unreadable_because(error)}"
        if reason:
            nbformat.write(placeholder(release_path, reason), path)
            problems.append(reason)
    return problems


def unreadable_because(error):
    """Why a submitted file is not a notebook, in one line and without the file's content."""
    cause = error.__cause__ or error.__context__
    for candidate in (error, cause):
        if isinstance(candidate, UnicodeDecodeError):
            return "it is not text (binary data)"
        if isinstance(candidate, json.JSONDecodeError):
            # "Unterminated string starting at" already ends with "at"
            return (f"it is not valid JSON ({candidate.msg.removesuffix(' at')} at line {candidate.lineno}, "
                    f"column {candidate.colno})")
    if type(error).__name__ == "NotJSONError":
        return "it is not valid JSON"
    if type(error).__name__ == "ValidationError":
        return f"its JSON is not a valid notebook ({str(getattr(error, 'message', error)).splitlines()[0][:120]})"
    return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"


# ---------------------------------------------------------------------------------------------------------------
# worker: one process, one warm executor, many submissions
# ---------------------------------------------------------------------------------------------------------------

def write_ahead(connection, record):
    """SQLite's write-ahead log: a notebook's ~24 commits append to the log, which is synced when it is copied back
    into the database, instead of each waiting for the disk (some ms per commit); readers no longer block the writer.
    A power cut can lose the last commits, never corrupt the gradebook: grading again restores them. Needs the
    gradebook on a local disk, not a network share (docs/scale.md)."""
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")


def reuse_database_connections():
    """nbgrader opens the gradebook several times per notebook, each time creating an engine and checking every
    table. A worker grades many notebooks against one gradebook: create the engine and check the tables once, and
    write SQLite through its write-ahead log."""
    import nbgrader.api
    from sqlalchemy import event
    engines, checked = {}, set()
    create_engine, create_all = nbgrader.api.create_engine, nbgrader.api.Base.metadata.create_all

    def cached_engine(url, **kwargs):
        if url not in engines:
            engines[url] = create_engine(url, **kwargs)
            if url.startswith("sqlite:"):
                event.listen(engines[url], "connect", write_ahead)
        return engines[url]

    def create_all_once(bind=None, **kwargs):
        if bind not in checked:
            create_all(bind=bind, **kwargs)
            checked.add(bind)

    nbgrader.api.create_engine = cached_engine
    nbgrader.api.Base.metadata.create_all = create_all_once


def worker(root, timeout=None, feedback=True, sandbox=True):
    """Grade batches of one assignment's submissions: one nbgrader converter per batch, one warm executor for all."""
    from attention_grader import forking

    os.chdir(root)
    config = course_config(root)
    config.CourseDirectory.submitted_directory = os.path.join(STAGING, "submitted")
    if timeout:
        config.ForkingExecute.timeout = timeout
    if not sandbox:
        config.ForkingExecute.sandbox = False
    reuse_database_connections()
    import torch
    torch.set_num_threads(1)  # the judges' reference runs: one worker per core, side by side
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from attention_grader import judging

    coursedir = CourseDirectory(config=config)
    api = NbGraderAPI(coursedir=coursedir, config=config)
    try:
        forking.zygote(sandbox=config.ForkingExecute.get("sandbox", True))  # warm up before the first submission
    except (forking.SandboxUnavailable, RuntimeError) as error:
        print(json.dumps({"ready": False, "error": str(error)}), flush=True)
        return 2
    print(json.dumps({"ready": True, "sandboxed": forking._ZYGOTE.sandboxed}), flush=True)
    everyone = {p.name for p in (Path(root) / STAGING / "submitted").iterdir()}
    for line in sys.stdin:
        task = json.loads(line)
        assignment, batch = task["assignment"], task["students"]
        before, judged, started = len(forking.EVENTS), len(judging.EVENTS), time.perf_counter()
        coursedir.student_id_exclude = ",".join(sorted(everyone - set(batch)))
        graded = api.autograde(assignment, "*", force=True, create=True)
        rendering = time.perf_counter()
        made = api.generate_feedback(assignment, "*") if feedback else {"success": False, "log": ""}
        rendering = (time.perf_counter() - rendering) / len(batch)
        failed = set(re.findall(r"error processing assignment '[^']*' for student '([^']*)'", graded["log"]))
        unfed = set(re.findall(r"for student '([^']*)'", made.get("log", ""))) if not made["success"] else set()
        flags, executed, judge = {}, {}, {}
        for event in forking.EVENTS[before:] + judging.EVENTS[judged:]:
            flags.setdefault(event["student"], set()).update(event["flags"])
            executed[event["student"]] = executed.get(event["student"], 0.0) + event.get("seconds", 0.0)
            judge[event["student"]] = judge.get(event["student"], 0.0) + event.get("judge_seconds", 0.0)
        share = (time.perf_counter() - started) / len(batch)
        print(json.dumps({"assignment": assignment, "results": [
            {"student": student, "assignment": assignment, "success": student not in failed,
             "error": graded["log"][-2000:] if student in failed else "",
             "feedback": feedback and student not in failed and (made["success"] or student not in unfed),
             "flags": sorted(flags.get(student, ())), "seconds": share,
             "executor_seconds": executed.get(student, 0.0), "judge_seconds": judge.get(student, 0.0),
             "feedback_seconds": rendering}
            for student in batch]}), flush=True)


class Worker:
    def __init__(self, root, timeout=None, feedback=True, sandbox=True, log=None, preexec_fn=None):
        command = [sys.executable, "-m", "attention_grader", "--worker", str(root)]
        command += (["--timeout", str(timeout)] if timeout else []) + ([] if feedback else ["--no-feedback"])
        command += [] if sandbox else ["--unsandboxed"]
        # What libraries say on stderr (nbgrader's log, SQLAlchemy's warnings) goes to the grading log. A session of
        # its own: a worker that does not end is ended with everything it started.
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                        text=True, bufsize=1, preexec_fn=preexec_fn, start_new_session=True)
        self.ready = json.loads(self.process.stdout.readline() or '{"ready": false}')
        self.task, self.deadline = None, None

    def send(self, task, seconds=float("inf")):
        """Give the worker a batch, to answer within `seconds`."""
        self.task, self.deadline = task, time.monotonic() + seconds
        self.process.stdin.write(json.dumps(task) + "\n")

    def close(self, wait=30):
        """Let the worker end; after `wait` seconds, end it and what it started."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=wait)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self.close_pipes()

    def kill(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.process.kill()
        self.process.wait()
        self.close_pipes()

    def close_pipes(self):
        """Otherwise each pipe is a ResourceWarning in the grading log when it is garbage collected."""
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is None:  # a worker started without that pipe
                continue
            try:
                pipe.close()
            except OSError:  # a broken pipe's buffered write
                pass


# ---------------------------------------------------------------------------------------------------------------
# the instructor's command
# ---------------------------------------------------------------------------------------------------------------

class Progress:
    def __init__(self, total, stream=sys.stderr):
        self.total, self.done, self.started, self.stream = total, 0, time.monotonic(), stream
        self.tty = stream.isatty()
        self.shown = -1

    def step(self, count=1):
        self.done += count
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed else 0.0
        left = (self.total - self.done) / rate if rate else 0.0
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} notebooks, "
                f"{rate:.1f}/s, {left:.0f} s left")
        if self.tty:
            print("\r" + line, end="" if self.done < self.total else "\n", file=self.stream, flush=True)
        elif self.done * 10 // max(self.total, 1) != self.shown or self.done == self.total:
            self.shown = self.done * 10 // max(self.total, 1)
            print(line, file=self.stream, flush=True)


def batches(pairs, workers):
    """Submissions grouped by assignment, in batches small enough to keep every worker busy to the end."""
    by_assignment = {}
    for student, assignment in pairs:
        by_assignment.setdefault(assignment, []).append(student)
    size = max(1, min(8, len(pairs) // (4 * workers)))
    return [{"assignment": assignment, "students": students[i:i + size]}
            for assignment, students in sorted(by_assignment.items()) for i in range(0, len(students), size)]


def grade_class(root, assignments=None, students=None, workers=2, csv_path="grades.csv", timeout=None,
                feedback=True, shard=None, sandbox=True, out=sys.stdout):
    """Autograde and generate feedback for every submission found; return the list of per-submission results."""
    root = Path(root).resolve()
    (root / STAGING).mkdir(exist_ok=True)
    with open(root / LOG, "w") as log, warnings_to(log):
        return _grade_class(root, assignments, students, workers, csv_path, timeout, feedback, shard, sandbox, out,
                            log)


class warnings_to:
    """Send Python warnings (SQLAlchemy's SAWarning, deprecations) to the grading log instead of the terminal."""

    def __init__(self, log):
        self.log = log

    def __enter__(self):
        import warnings
        self.catcher = warnings.catch_warnings()
        self.catcher.__enter__()
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: self.log.write(
            warnings.formatwarning(message, category, filename, lineno, line))

    def __exit__(self, *exc):
        self.catcher.__exit__(*exc)


def _grade_class(root, assignments, students, workers, csv_path, timeout, feedback, shard, sandbox, out, log):
    import select

    pairs, refused_folders = find_submissions(root, assignments, students, shard)
    for shown, _, _, why in refused_folders:
        print(printable(f"refused {shown!r}: {why}; nothing else is affected"), file=out)
    staged_problems = {pair: stage(root, *pair) for pair in pairs}
    _register(root, pairs, out)
    results, queue = [], batches(pairs, workers)
    progress = Progress(len(pairs))
    log.flush()
    if not pairs:
        export(root, csv_path)
        summarize(root, results, csv_path, out, refused_folders)
        return results
    pool = [Worker(root, timeout, feedback, sandbox, log) for _ in range(max(1, min(workers, len(queue))))]
    refused = next((w.ready["error"] for w in pool if not w.ready.get("ready")), None)
    if refused:
        for w in pool:
            w.close()
        print(f"Nothing graded: {refused}", file=out)
        return []
    unsandboxed = ("WARNING: student code ran WITHOUT a sandbox (--unsandboxed): it could read the solutions and the "
                   "grading secret and write the gradebook. Install Debian's bubblewrap."
                   if any(not w.ready.get("sandboxed") for w in pool) else "")
    if unsandboxed:
        print(unsandboxed, file=out)
    # A batch may take as long as its notebooks' total times and a minute per notebook for nbgrader's own work; a
    # worker past that is ended, and its batch graded again one notebook at a time, so that one notebook that holds a
    # worker costs its classmates no more than its own time.
    from attention_grader.forking import notebook_time
    per_notebook = notebook_time(timeout or course_config(root).ForkingExecute.get("timeout", 60)) + 60
    busy = {}
    for w in pool:
        if queue:
            task = queue.pop(0)
            w.send(task, per_notebook * len(task["students"]))
            busy[w.process.stdout.fileno()] = w
    while busy:
        soonest = min(w.deadline for w in busy.values())
        ready, _, _ = select.select(list(busy), [], [], max(0.0, soonest - time.monotonic()))
        late = [fd for fd, w in busy.items() if fd not in ready and time.monotonic() > w.deadline]
        for fd in ready + late:
            w = busy.pop(fd)
            line = w.process.stdout.readline() if fd in ready else ""
            if line:
                done = json.loads(line)["results"]
            else:  # the worker died or stopped answering: end it, start another
                why = "the grading worker died" if fd in ready else "the grading worker stopped answering"
                w.kill()
                students = w.task["students"]
                if len(students) > 1:  # again one at a time: only the notebook at fault is listed
                    queue[:0] = [{"assignment": w.task["assignment"], "students": [s]} for s in students]
                    done = []
                else:
                    done = [{"student": students[0], "assignment": w.task["assignment"], "success": False,
                             "error": why, "flags": ["crashed"], "feedback": False}]
                w = Worker(root, timeout, feedback, sandbox, log)
            for result in done:
                result["problems"] = staged_problems[(result["student"], result["assignment"])]
            results += done
            progress.step(len(done))
            if queue:
                task = queue.pop(0)
                w.send(task, per_notebook * len(task["students"]))
                busy[w.process.stdout.fileno()] = w
            else:
                w.close()
    for w in pool:
        w.close()
    export(root, csv_path)
    flag_in_gradebook(root, [r for r in results if flags_of(r)])
    summarize(root, results, csv_path, out, refused_folders)
    if unsandboxed:
        print(unsandboxed, file=out)
    return results


def flags_of(result):
    """What went wrong with one submission, as short words (empty when nothing did)."""
    return sorted(set(result["flags"] + ["refused files" if p.endswith("not graded") else "unreadable"
                                         for p in result["problems"]] + ([] if result["success"] else ["not graded"])))


def flag_in_gradebook(root, flagged):
    """Mark flagged submissions in the gradebook, so that formgrader shows them flagged too."""
    from nbgrader.api import Gradebook, MissingEntry
    config = course_config(root)
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gradebook:
        for r in flagged:
            try:
                submission = gradebook.find_submission(r["assignment"], r["student"])
            except MissingEntry:
                continue
            for notebook in submission.notebooks:
                notebook.flagged = True
        gradebook.db.commit()


def _register(root, pairs, out):
    """Add every student to the gradebook once, before workers write to it side by side; register every assignment
    the gradebook lacks as `nbgrader generate_assignment` does (a fresh clone has none)."""
    from nbgrader.api import Gradebook, MissingEntry
    config = course_config(root)
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gradebook:
        for student in sorted({student for student, _ in pairs}):
            gradebook.update_or_create_student(student)
        missing = []
        for assignment in sorted({assignment for _, assignment in pairs}):
            try:
                gradebook.find_assignment(assignment)
            except MissingEntry:
                missing.append(assignment)
    for assignment in missing:
        if not (Path(root) / "source" / assignment).is_dir():
            print(f"{assignment}: not in the gradebook and no source/{assignment} to generate it from", file=out)
            continue
        print(f"{assignment}: not in the gradebook yet, registering it (nbgrader generate_assignment)", file=out)
        subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "generate_assignment", assignment, "--force",
                        "--log-level=WARN"], cwd=root, check=True, capture_output=True)


def points(submission):
    """(autograded score, autograded max, score and max of the written answers graded by hand, points of written
    answers left blank (nbgrader scores an untouched answer zero), points still to grade by hand)."""
    auto = auto_max = hand = hand_max = blank = pending = 0.0
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            if grade.cell_type == "code":
                auto, auto_max = auto + (grade.score or 0.0), auto_max + grade.max_score
            elif grade.needs_manual_grade:
                pending += grade.max_score
            elif grade.manual_score is not None:
                hand, hand_max = hand + grade.score, hand_max + grade.max_score
            else:
                blank += grade.max_score
    return auto, auto_max, hand, hand_max, blank, pending


def describe(auto, auto_max, hand, hand_max, blank, pending):
    """'9 / 9 autograded, 1 point to grade by hand': what a submission (or a student's total) scored, and what waits."""
    text = f"{auto:g} / {auto_max:g} autograded"
    if hand_max:
        text += f", {hand:g} / {hand_max:g} graded by hand"
    if blank:
        text += f", written answer{'s' if blank != 1 else ''} left blank (0 / {blank:g})"
    if pending:
        text += f", {pending:g} point{'s' if pending != 1 else ''} to grade by hand"
    return text


def summarize(root, results, csv_path, out, refused=()):
    from nbgrader.api import Gradebook
    config = course_config(root)
    scores = {}
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gradebook:
        for r in results:
            try:
                scores[(r["student"], r["assignment"])] = points(gradebook.find_submission(r["assignment"],
                                                                                            r["student"]))
            except Exception:
                scores[(r["student"], r["assignment"])] = None
    graded = sum(r["success"] for r in results)
    line = f"\nGraded {graded} of {len(results) + len(refused)} submissions"
    print(line + (f"; refused {len(refused)}: " + ", ".join(printable(repr(shown)) for shown, *_ in refused)
                  if refused else "."), file=out)
    print("\nPer assignment:", file=out)
    for assignment in sorted({r["assignment"] for r in results}):
        got = [scores[(r["student"], assignment)] for r in results if r["assignment"] == assignment]
        valid = [p for p in got if p is not None]
        mean = sum(p[0] + p[2] for p in valid) / max(len(valid), 1)
        maximum = max((p[1] + p[3] + p[4] + p[5] for p in valid), default=0)
        waiting = sum(1 for p in valid if p[5])
        text = f"mean {mean:5.1f} / {maximum:g}" + (f", {waiting} with points to grade by hand" if waiting else "")
        print(f"  {assignment:28s} {len(valid):4d} graded   {text}", file=out)
    print("\nPer student:", file=out)
    for student in sorted({r["student"] for r in results}):
        mine = [scores[(student, r["assignment"])] for r in results if r["student"] == student]
        totals = [sum(p[i] for p in mine if p is not None) for i in range(6)]
        print(printable(f"  {student:28s} {describe(*totals)}"), file=out)
    workers = sorted({r["worker"] for r in results if r.get("worker")})  # graded on a Dask cluster
    if workers:
        print("\nPer worker:", file=out)
        for name in workers:
            mine = [r for r in results if r.get("worker") == name]
            print(f"  {name:28s} {len(mine):4d} submissions {sum(r.get('seconds', 0.0) for r in mine):8.1f} s",
                  file=out)
    flagged = [r for r in results if flags_of(r)]
    print(f"\nFlagged: {len(flagged)}" + (" (marked flagged in formgrader too)" if flagged else ""), file=out)
    for r in flagged:
        detail = "; ".join(r["problems"]) or nbgrader_message(r["error"])
        print(printable(f"  {r['student']} / {r['assignment']}: {', '.join(flags_of(r))}" + (f" ({detail})" if detail
                                                                                           else "")), file=out)
    if refused:
        print(f"\nRefused: {len(refused)} (not graded; in {csv_path} with the reason)", file=out)
        for shown, _, _, why in refused:
            print(printable(f"  {shown!r}: {why}"), file=out)
    print(f"\nGrades: {csv_path}" + ("   Feedback: feedback/<student>/<assignment>/"
                                     if any(r.get("feedback") for r in results) else "") + f"   Log: {LOG}", file=out)
    print("Next: `nbgrader formgrader` (or the Formgrader tab) for the written answers and a review, "
          "`nbgrader release_feedback ASSIGNMENT` to hand the feedback back, and "
          "`python3 course.py grade --export-only` again after manual grading.", file=out)


def printable(text):
    """Text from a submission or about it, safe for a terminal: control characters (escape sequences) shown as codes."""
    return "".join(ch if ch.isprintable() or ch == "\n" else f"\\x{ord(ch):02x}" for ch in text)


def nbgrader_message(log):
    """What nbgrader said about a failed submission: its exception and the lines just before it."""
    lines = [line.strip() for line in log.strip().splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if "Error" in line or "Exception" in line]
    chosen = lines[max(0, errors[-1] - 2):errors[-1] + 1] if errors else lines[-3:]
    return " | ".join(chosen)[-600:]
