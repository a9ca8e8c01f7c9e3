"""A learner on their own: `python3 course.py check [STEP ...]` grades their work/STEP/STEP.ipynb with the hidden
checks, judges and sandbox of the instructor's grading (grading.grade_class), and writes the feedback page
work/STEP/feedback.html and the progress page work/PROGRESS.md.

It grades in a private course folder, .check/ (git-ignored): the course's nbgrader_config.py, source/ and release/,
its own gradebook, and a secret of the learner's own (created on first use; it seeds the hidden inputs). Nothing of the
instructor's grading in the course root (gradebook.db, submitted/, autograded/, feedback/, .grading_secret) is touched.
"""
import argparse
import difflib
import io
import json
import os
import shutil
import time
from pathlib import Path

from attention_grader import grading

PRIVATE = ".check"
LEARNER = "learner"
RESULTS = "results.json"


def cell_sources(path):
    """The sources of a notebook's cells (outputs and metadata left out), or None when it cannot be read."""
    try:
        cells = json.loads(Path(path).read_text())["cells"]
        return ["".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"] for cell in cells]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def work_notebook(root, step):
    return Path(root) / "work" / step / f"{step}.ipynb"


def as_copied(root, step):
    """The release as it was when work/STEP was made from it (an update of the course may change the release)."""
    return Path(root) / PRIVATE / "copied" / f"{step}.ipynb"


def started(root, step):
    """The exercise is started when a cell of the learner's copy differs from the release it was copied from (saving
    alone is not)."""
    work, copied = work_notebook(root, step), as_copied(root, step)
    release = copied if copied.exists() else Path(root) / "release" / step / f"{step}.ipynb"
    return work.exists() and cell_sources(work) != cell_sources(release)


def opened_mark(root, step):
    """Left by the student view of `course.py start` when it opens the lesson (jupyter_config/student/)."""
    return Path(root) / PRIVATE / "opened" / step


def lesson_opened(root, step):
    """The student view marks a lesson it opens; before lessons were read-only there, JupyterLab kept a checkpoint of
    a lesson from the first time it opened it (notebooks/.ipynb_checkpoints/)."""
    return (opened_mark(root, step).exists()
            or (Path(root) / "notebooks" / ".ipynb_checkpoints" / f"{step}-checkpoint.ipynb").exists())


def last_results(root):
    path = Path(root) / PRIVATE / RESULTS
    return json.loads(path.read_text()) if path.exists() else {}


def step_title(root, step):
    """"01 · Dot-product scores", from the heading of its release ("# Step 01 · Dot-product scores: exercises")."""
    for source in cell_sources(Path(root) / "release" / step / f"{step}.ipynb") or []:
        for line in source.splitlines():
            if line.startswith("# Step "):
                return line[len("# Step "):].split(":")[0].strip()
    return f"{step[:2]} {step[3:].replace('_', ' ')}"


def write_progress(root):
    """work/PROGRESS.md: per step, lesson opened, exercise started, the last check's points and what is left."""
    root = Path(root)
    results = last_results(root)
    rows = []
    for step in grading.known_steps(root):
        work = work_notebook(root, step)
        lesson = f"[{'opened' if lesson_opened(root, step) else 'not yet'}](../notebooks/{step}.ipynb)"
        exercise = (f"[{'started' if started(root, step) else 'not started'}]({step}/{step}.ipynb)" if work.exists()
                    else "no copy yet")
        result = results.get(step)
        if work.exists() and cell_sources(work) is None:
            # the last check's points are not this notebook's: say what is true now
            checked = "none now: your notebook cannot be read (not valid JSON)"
            left = "`python3 course.py check` says how to restore it"
        elif result:
            checked = f"[{result['points']:g}/{result['max']:g} points]({step}/feedback.html), {result['when']}"
            if work.exists() and work.stat().st_mtime > result["time"]:
                checked += " (changed since: check again)"
            left = "; ".join(result["left"]) or "nothing"
        else:
            checked, left = "not checked yet", ""
        rows.append(f"| {step_title(root, step)} | {lesson} | {exercise} | {checked} | {left} |")
    page = ["# Your progress", "",
            f"Written {time.strftime('%Y-%m-%d %H:%M')} by `python3 course.py check` (it refreshes this page) or "
            "`python3 course.py start`. [Back to the course home](../HOME.md)", "",
            "| step | lesson | exercise | last check (hidden checks) | what is left |",
            "| --- | --- | --- | --- | --- |", *rows, "",
            "*Lesson opened*: you have opened the lesson in JupyterLab. "
            "*Started*: a cell of your exercise differs from the one you were given. *Last check*: the points of the "
            "autograded tests in `python3 course.py check`, with the hidden checks on other inputs; the points link "
            "to the feedback page, which says what each failing check found. Written answers are graded by hand and "
            "not counted here.", ""]
    (root / "work").mkdir(exist_ok=True)
    (root / "work" / "PROGRESS.md").write_text("\n".join(page))


def prepare(root, steps):
    """The private course folder: the course's config, source/ and release/ as they are now, a fresh gradebook and
    the learner's submissions; the learner's secret stays."""
    private = Path(root) / PRIVATE
    for name in ("source", "release", "submitted", "autograded", "feedback", ".grading", "gradebook.db"):
        path = private / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    private.mkdir(exist_ok=True)
    shutil.copy(Path(root) / "nbgrader_config.py", private / "nbgrader_config.py")
    for step in steps:
        for folder in ("source", "release"):
            shutil.copytree(Path(root) / folder / step, private / folder / step)
        submission = private / "submitted" / LEARNER / step
        submission.mkdir(parents=True)
        shutil.copy(work_notebook(root, step), submission / f"{step}.ipynb")
    return private


def part_titles(notebook):
    """{grade id of a test cell: the title of the part it is in ("Part 2 · A softmax that does not overflow")}. A text
    cell may open two parts whose test cells follow it: they take its headings in order."""
    titles, parts = {}, []
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        headings = [line.lstrip("# ").split(" (")[0] for line in source.splitlines() if line.startswith("## Part")]
        parts = headings if cell["cell_type"] == "markdown" and headings else parts
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("grade_id") and parts:
            titles[nbgrader["grade_id"]] = parts.pop(0) if nbgrader.get("grade") and len(parts) > 1 else parts[0]
    return titles


def failing_checks(private, step):
    """(test cell, what it said) for every autograded test cell that lost points."""
    autograded = private / "autograded" / LEARNER / step / f"{step}.ipynb"
    failing = []
    for cell in json.loads(autograded.read_text())["cells"] if autograded.exists() else []:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        errors = [f"{out['ename']}: {out['evalue']}" for out in cell.get("outputs", []) if out["output_type"] == "error"]
        if meta.get("grade") and not meta.get("solution") and errors:
            failing.append((meta["grade_id"], "\n".join(errors)))
    return failing


def check(root, steps, sandbox=True):
    root = Path(root).resolve()
    from nbgrader.api import Gradebook
    private = prepare(root, steps)
    captured = io.StringIO()
    print(f"checking {', '.join(steps)} with the hidden checks (a fresh sandboxed process per notebook) ...",
          flush=True)
    outcome = grading.grade_class(private, steps, [LEARNER], workers=min(len(steps), os.cpu_count() or 1),
                                  sandbox=sandbox, out=captured)
    if not outcome:
        why = captured.getvalue().strip().splitlines()
        print(f"Nothing checked: {why[-1] if why else 'the grader stopped'}"
              + ("\nWithout bubblewrap, `python3 course.py check --unsandboxed` runs your code unsandboxed (it is your "
                 "own code; the instructor's grading always uses the sandbox)." if sandbox else ""))
        return 2
    results = last_results(root)
    config = grading.course_config(private)
    with Gradebook(config.CourseDirectory.db_url, config.CourseDirectory.course_id) as gradebook:
        for result in sorted(outcome, key=lambda r: r["assignment"]):
            step = result["assignment"]
            if not result["success"]:
                print(f"{step}: not graded ({grading.nbgrader_message(result['error'])}); "
                      f"details in {PRIVATE}/{grading.LOG}")
                continue
            auto, auto_max, _, _, blank, pending = grading.points(gradebook.find_submission(step, LEARNER))
            failing = failing_checks(private, step)
            feedback = private / "feedback" / LEARNER / step / f"{step}.html"
            if feedback.exists():
                shutil.copy(feedback, root / "work" / step / "feedback.html")
            written = blank + pending
            state = "still blank" if blank else "to be graded by hand (no check grades it)"
            print(f"{step}: {auto:g}/{auto_max:g} points" + (f"; the written answer ({written:g} point"
                                                              f"{'s' if written != 1 else ''}) is {state}: "
                                                              f"{auto:g}/{auto_max + written:g} on the feedback page"
                                                              if written else ""))
            for grade_id, message in failing:
                print(f"  failing {grade_id}:\n" + "\n".join("    " + line for line in message.splitlines()))
            print(f"  feedback page: work/{step}/feedback.html")
            titles = part_titles(private / "release" / step / f"{step}.ipynb")
            parts = [titles.get(grade_id, grade_id) for grade_id, _ in failing]
            results[step] = {"points": auto, "max": auto_max, "left": list(dict.fromkeys(parts))
                             + (["written answer still blank"] if blank else []),
                             "time": time.time(), "when": time.strftime("%Y-%m-%d %H:%M")}
    (private / RESULTS).write_text(json.dumps(results, indent=1))
    write_progress(root)
    print("progress: work/PROGRESS.md (linked from the course home)")
    return 0 if all(r["success"] for r in outcome) else 1


def step_named(name, known):
    """The step a learner means by `name`: its folder (01_dot_product_scores), its number (01 or 1) or a word of its
    name (softmax); None when none or several match."""
    number = f"{int(name):02d}" if name.isdigit() else None
    matches = [step for step in known if name == step or step[:2] == number or name.lower() in step[3:].split("_")]
    return matches[0] if len(matches) == 1 else None


def main(argv, root):
    parser = argparse.ArgumentParser(prog="course.py check", description="Grade your own work/ with the hidden "
                                     "checks, as the instructor's grading would; write feedback and work/PROGRESS.md.")
    parser.add_argument("steps", nargs="*", metavar="STEP", help="steps to check, such as 01_dot_product_scores or 01 "
                                                                 "(default: every exercise you have started)")
    parser.add_argument("--unsandboxed", dest="sandbox", action="store_false",
                        help="run your code without the bubblewrap sandbox (where bubblewrap is missing)")
    args = parser.parse_args(argv)
    known = grading.known_steps(root)
    steps = [step_named(name, known) or name for name in args.steps]
    unknown = [name for name in steps if name not in known]
    if unknown:
        close = [match for name in unknown for match in difflib.get_close_matches(name, known, n=1, cutoff=0.5)]
        parser.exit(2, f"{parser.prog}: error: unknown step {', '.join(map(repr, unknown))}"
                       + (f" (did you mean {', '.join(close)}?)" if close else "")
                       + f"; the steps are: {', '.join(known)}\n")
    missing = [step for step in steps if not work_notebook(root, step).exists()]
    if missing:
        parser.exit(2, f"{parser.prog}: error: no work/{missing[0]}/{missing[0]}.ipynb: `python3 course.py start` "
                       "makes your copy of every exercise\n")
    steps = steps or [step for step in known if started(root, step)]
    if not steps:
        write_progress(root)
        print("No exercise started yet: write your answers in work/NN_step/NN_step.ipynb (`python3 course.py start`), "
              "then check again, or name a step: python3 course.py check 01_dot_product_scores")
        return 0
    unreadable = [step for step in steps if cell_sources(work_notebook(root, step)) is None]
    if unreadable:
        write_progress(root)
        parser.exit(2, f"{parser.prog}: error: work/{unreadable[0]}/{unreadable[0]}.ipynb is not a readable notebook "
                       f"(not valid JSON): restore it from work/{unreadable[0]}/.ipynb_checkpoints/ (JupyterLab's "
                       "last save), or move it aside and run `python3 course.py start`, which makes a fresh copy, then copy your "
                       "answers over from the old file\n")
    return check(root, steps, args.sandbox)
