"""Grade one synthetic class two ways and compare: plain nbgrader against the course's class grader.

Plain nbgrader is `nbgrader autograde STEP` (then `nbgrader generate_feedback STEP`) with COURSE_EXECUTOR=kernel:
one Jupyter kernel per notebook, one notebook at a time. The class grader is `python -m attention_grader`
(`course.py grade`): warm forked sandboxed executors, parallel workers, feedback included. Both run in identical
copies of a generated course, on the same submissions drawn from the submission bank (tests/bank/).

    .venv/bin/python benchmarks/grading_benchmark.py --students 4 --steps 01_dot_product_scores 02_softmax
    .venv/bin/python benchmarks/grading_benchmark.py                      # 40 students, all steps
    .venv/bin/python benchmarks/grading_benchmark.py --plain-sample 5     # plain nbgrader on 5 students only
    .venv/bin/python benchmarks/grading_benchmark.py --scheduler --students 10   # on a Dask cluster: 1 worker, 3
    .venv/bin/python benchmarks/grading_benchmark.py --scheduler --dask-workers 1 2 3
"""
import argparse
import io
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import harness  # noqa: E402
from attention_grader import distributed, grading  # noqa: E402
from conftest import STEPS  # noqa: E402

# These only wait for the cell timeout, which would measure the timeout rather than the grader.
SKIPPED = ("infinite_loop", "unstoppable")


def log(message):
    print(message, file=sys.stderr, flush=True)


def mix_names(step):
    """Bank variants that plain nbgrader may run and that score the same every time, sorted."""
    return sorted(name for name, spec in harness.bank(step, every_route=True).items()
                  if not spec.get("stock_hole") and not spec.get("at_most")
                  and not any(word in name for word in SKIPPED))


def make_class(num_students, steps):
    """{(student, step): (variant name, kind)}: even students hand in the answer key, odd ones cycle the bank."""
    answers = {}
    for i in range(num_students):
        student = f"student_{i:03d}"
        for step_index, step in enumerate(steps):
            if i % 2 == 0:
                answers[(student, step)] = ("answer_key", "correct")
            else:
                names = mix_names(step)
                name = names[(i * 7 + step_index) % len(names)]
                answers[(student, step)] = (name, harness.bank(step, every_route=True)[name]["kind"])
    return answers


def submit_class(course_dir, answers, students):
    for (student, step), (name, _) in answers.items():
        if student in students:
            spec = {"cells": {}} if name == "answer_key" else harness.bank(step, every_route=True)[name]
            harness.submit(course_dir, student, step, harness.variant_submission(step, spec))


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def scores_or_none(course_dir, step, student, reasons):
    """Per-cell scores, or None where the grader recorded why it could not grade this submission (`reasons`; plain
    nbgrader leaves zeros in the gradebook then) or the gradebook has no graded notebook for it."""
    if (student, step) in reasons:
        return None
    try:
        return harness.cell_scores(course_dir, step, student)
    except Exception:
        return None


def plain_reasons(nbgrader_log):
    """{(student, step): the exception nbgrader logged} for each submission `nbgrader autograde` could not grade."""
    reasons = {}
    for chunk in nbgrader_log.split("There was an error processing assignment: ")[1:]:
        path, *lines = chunk.splitlines()
        # The traceback follows its "[AutogradeApp | ERROR] Traceback" line and ends at the next log line.
        traceback = list(itertools.takewhile(lambda line: not line.startswith("["), lines[1:]))
        exception = next((line.strip() for line in reversed(traceback) if line.strip()), "nbgrader logged no traceback")
        reasons[(Path(path).parent.name, Path(path).name)] = exception
    return reasons


def fast_reasons(results):
    """{(student, step): why} for each submission the class grader could not grade, in the words of its summary."""
    return {(r["student"], r["assignment"]): "; ".join(r.get("problems", [])) or grading.nbgrader_message(r["error"])
            for r in results if not r["success"]}


def shown(scores, why):
    return scores if scores is not None else f"not graded ({why or 'the grader recorded no reason'})"


def floor(course_dir, answers):
    """{step: [seconds per notebook]}: what no grader can beat. Each honest submission (answer keys, correct variants
    and mistakes: a cheat or a broken notebook is never run outside the sandbox) is planned with this student's hidden
    inputs, its cells run one after the other in one warm IPython shell of this process (no fork, no sandbox, no
    nbgrader command), and its test cells judged."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import nbformat
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    from attention_grader import forking, judging

    config = Config()
    config.CourseDirectory.root = str(course_dir)
    shell = InteractiveShell.instance()
    seconds = {}
    streams = sys.stdout, sys.stderr
    for (student, step), (_, kind) in sorted(answers.items()):
        if kind not in ("correct", "mistake"):
            continue
        path = course_dir / "submitted" / student / step / f"{step}.ipynb"
        nb = nbformat.read(path, as_version=4)
        resources = {"nbgrader": {"assignment": step, "student": student, "notebook": step}}
        shell.reset(new_session=False)
        started = time.perf_counter()
        nb, resources = judging.PlanHiddenChecks(config=config).preprocess(nb, resources)
        run_cell = forking._cell_runner(60, plt, shell, DisplayHook, DisplayPublisher)
        try:
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs = [nbformat.NotebookNode(output) for output in run_cell(cell.source)]
        finally:
            sys.stdout, sys.stderr = streams
        judging.JudgeCells(config=config).preprocess(nb, resources)
        seconds.setdefault(step, []).append(time.perf_counter() - started)
        failed = [cell_id for cell_id, cell in judging.autograded_test_cells(nb)
                  if any(output.get("output_type") == "error" for output in cell.outputs)]
        if kind == "correct" and failed:
            raise RuntimeError(f"the floor failed {student}'s correct {step} in {failed}: it would not measure "
                               "what the grader does")
    return seconds


def grade_plain(course_dir, steps):
    """One `nbgrader autograde` per step, then one `generate_feedback` per step; return both times, failures and
    {(student, step): why} for the submissions autograde could not grade."""
    os.environ["COURSE_EXECUTOR"] = "kernel"
    try:
        failures, reasons = [], {}
        autograde_seconds = feedback_seconds = 0.0
        for step in steps:
            log(f"  plain nbgrader autograde {step}")
            result, seconds = timed(harness.nbgrader, course_dir, "autograde", step, "--force", check=False)
            autograde_seconds += seconds
            if result.returncode != 0:
                failures.append(f"autograde {step} exited {result.returncode}")
                reasons.update(plain_reasons(result.stdout + result.stderr))
        for step in steps:
            result, seconds = timed(harness.nbgrader, course_dir, "generate_feedback", step, "--force", check=False)
            feedback_seconds += seconds
            if result.returncode != 0:
                failures.append(f"generate_feedback {step} exited {result.returncode}")
        return autograde_seconds, feedback_seconds, failures, reasons
    finally:
        del os.environ["COURSE_EXECUTOR"]


def summary_lines(output, course_dir, most=10):
    """The class grader's warnings, count and first flagged submissions, with the temporary path taken out."""
    lines = output.splitlines()
    kept = [line for line in lines if line.startswith(("WARNING", "Graded ", "Nothing graded"))]
    start = next((i for i, line in enumerate(lines) if line.startswith("Flagged")), len(lines))
    flagged = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        flagged.append(line)
    kept += lines[start:start + 1] + flagged[:most]
    if len(flagged) > most:
        kept.append(f"  ... and {len(flagged) - most} more")
    return [line.replace(str(course_dir), "<course>") for line in kept]


def grade_on_dask(work, base, answers, students, steps, counts):
    """`course.py grade --scheduler`: the same class on a local Dask cluster of each size in `counts` (a scheduler
    and one-thread workers as processes of this machine, as tests/test_distributed.py starts them); print them side
    by side with the scaling efficiency: the speed-up over the first size, divided by how many times more workers
    (and by how many times more cores they can use: more workers than cores share them)."""
    from test_distributed import dask_cluster
    rows, cores = [], os.cpu_count() or 1
    for count in counts:
        course_dir = work / f"dask_{count}"
        shutil.copytree(base, course_dir)
        submit_class(course_dir, answers, set(students))
        with dask_cluster(work / f"cluster_{count}", count) as (scheduler_file, _):
            from distributed import Client
            with Client(scheduler_file=str(scheduler_file)) as client:
                client.wait_for_workers(count, timeout=300)
            log(f"Dask: {len(answers)} notebooks, {count} workers, with feedback")
            output = io.StringIO()
            results, seconds = timed(distributed.grade_class, course_dir, str(scheduler_file), steps, timeout=10,
                                     out=output)
        per_worker = Counter(r.get("worker") for r in results)
        rows.append((count, seconds, results, per_worker, (course_dir / "grades.csv").read_text(), output.getvalue()))
    print(f"`course.py grade --scheduler`, a local Dask cluster (one thread per worker, no nanny), "
          f"autograde + feedback, on {cores} cores:")
    print(f"{'workers':>7s} {'notebooks':>9s} {'wall s':>8s} {'nb/s':>7s} {'speed-up':>8s} {'efficiency':>10s}  "
          f"{'per core':>8s}  per worker (notebooks, seconds)")
    for count, seconds, results, per_worker, _, _ in rows:
        speedup = rows[0][1] / seconds  # over the first (smallest) cluster
        efficiency = speedup * rows[0][0] / count
        per_core = speedup * min(rows[0][0], cores) / min(count, cores)
        busy = {name: sum(r["seconds"] for r in results if r.get("worker") == name) for name in per_worker if name}
        figures = ", ".join(f"{name} {per_worker[name]} nb {busy[name]:.1f} s" for name in sorted(busy))
        print(f"{count:7d} {len(results):9d} {seconds:8.1f} {len(results) / seconds:7.2f} {speedup:8.2f} "
              f"{efficiency:10.2f} {per_core:8.2f}  {figures}")
    same = all(row[4] == rows[0][4] for row in rows)
    print(f"grades.csv identical on every cluster size: {'yes' if same else 'no'}")
    for line in summary_lines(rows[-1][5], work):
        print(f"Dask, {rows[-1][0]} workers: {line.strip()}")


def print_split(results, fed_results, floors, fast_seconds, fast_cores):
    """Per step and for the class, seconds per notebook: the floor (cells, planning and judging of the honest
    notebooks in one warm process) beside the grader's time and its parts, each summed in the workers."""
    def mean(values):
        return sum(values) / max(len(values), 1)

    print("seconds per notebook, per step: the floor (honest notebooks: cells, planning and judging in one warm "
          "process) beside the class grader (autograde, summed over workers) and its parts")
    print(f"{'step':24s} {'floor':>7s} {'grader':>7s} {'x floor':>7s} {'sandbox':>8s} {'judging':>8s} "
          f"{'nbgrader':>8s} {'feedback':>8s}")
    steps = sorted({r["assignment"] for r in results})
    for step in steps + ["class"]:
        mine = [r for r in results if step in ("class", r["assignment"])]
        fed = [r for r in fed_results if step in ("class", r["assignment"])]
        low = mean([s for name, values in floors.items() if step in ("class", name) for s in values])
        total = mean([r["seconds"] for r in mine])
        sandbox = mean([r["executor_seconds"] for r in mine])
        judge = mean([r.get("judge_seconds", 0.0) for r in mine])
        feedback = mean([r.get("feedback_seconds", 0.0) for r in fed])
        print(f"{step:24s} {low:7.3f} {total:7.3f} {total / max(low, 1e-9):7.1f} {sandbox:8.3f} {judge:8.3f} "
              f"{total - sandbox - judge:8.3f} {feedback:8.3f}")
    print("  sandbox: the notebook run in its forked, sandboxed child (namespaces, a fork per test cell and the "
          "visible part run again, the cells); judging: planning hidden inputs, running the answer key, comparing; "
          "nbgrader: its preprocessors, the gradebook's writes and the files; feedback: rendering the pages (the "
          "autograde + feedback run)")
    outside = fast_seconds - sum(r["seconds"] for r in results) / fast_cores
    print(f"  wall time outside the workers (staging, start-up and warm-up, export): {outside:.1f} s for the class")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--steps", nargs="+", default=STEPS, choices=STEPS)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--plain-sample", type=int, default=0,
                        help="plain nbgrader grades only the first K students; its time is extrapolated (0: all)")
    parser.add_argument("--keep", help="keep the course copies in this folder (base/, plain/, fast/)")
    parser.add_argument("--scheduler", action="store_true",
                        help="grade the class on a local Dask cluster of 1, then 3 workers instead (course.py grade "
                             "--scheduler), side by side with the scaling efficiency")
    parser.add_argument("--dask-workers", type=int, nargs="+", default=[1, 3],
                        help="with --scheduler: the cluster sizes, in workers (default: 1 3)")
    args = parser.parse_args()

    steps = [step for step in STEPS if step in args.steps]
    answers = make_class(args.students, steps)
    students = sorted({student for student, _ in answers})
    sampled = students[:args.plain_sample] if 0 < args.plain_sample < len(students) else students
    cores = os.cpu_count() or 1
    fast_cores = min(args.workers, cores)
    kinds = Counter(kind for _, kind in answers.values())

    print(f"Grading benchmark: {len(students)} students x {len(steps)} steps = {len(answers)} notebooks, "
          f"{cores} cores")
    print(f"  steps: {' '.join(steps)}")
    print("  class: even students hand in the answer key, odd ones a bank variant (stock_hole and at_most variants "
          "left out)")
    print(f"  left out as well: variants named *{'*, *'.join(SKIPPED)}* (they only wait for the cell timeout)")
    print(f"  mix: {', '.join(f'{kinds[k]} {k}' for k in ('correct', 'mistake', 'cheat', 'broken'))}")
    if args.scheduler:
        print(f"  load average at start: {os.getloadavg()[0]:.1f}", flush=True)
        work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="grading_benchmark_"))
        try:
            log("building the course (generate_assignment for every step, about a minute)")
            base = harness.make_course(work / "base")
            grade_on_dask(work, base, answers, students, steps, args.dask_workers)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        return
    print("  plain nbgrader: COURSE_EXECUTOR=kernel, one `nbgrader autograde` per step, then "
          "`nbgrader generate_feedback` per step; serial (1 core)")
    print(f"  fast grader: python -m attention_grader, all steps at once, {args.workers} workers; "
          f"its time includes feedback")
    # Other work on the machine slows both paths; the load average shows whether it was quiet.
    print(f"  load average at start: {os.getloadavg()[0]:.1f}")
    print(flush=True)

    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="grading_benchmark_"))
    try:
        log("building the course (generate_assignment for every step, about a minute)")
        base = harness.make_course(work / "base")
        plain_dir, fast_dir, fed_dir = work / "plain", work / "fast", work / "fast_feedback"
        for course_dir in (plain_dir, fast_dir, fed_dir):
            shutil.copytree(base, course_dir)
        # The sample is the whole plain class: the students outside it are never submitted there.
        submit_class(plain_dir, answers, set(sampled))
        submit_class(fast_dir, answers, set(students))
        submit_class(fed_dir, answers, set(students))

        log(f"plain nbgrader: {len(sampled) * len(steps)} notebooks")
        autograde_seconds, feedback_seconds, plain_failures, plain_why = grade_plain(plain_dir, steps)
        log(f"fast grader: {len(answers)} notebooks, {args.workers} workers, autograde only")
        summary = io.StringIO()
        results, fast_seconds = timed(grading.grade_class, fast_dir, steps, workers=args.workers, timeout=10,
                                      feedback=False, out=summary)
        log(f"fast grader: {len(answers)} notebooks, {args.workers} workers, with feedback")
        fed_results, fed_seconds = timed(grading.grade_class, fed_dir, steps, workers=args.workers, timeout=10,
                                         out=io.StringIO())
        output = summary.getvalue()
        fast_why = fast_reasons(results)
        log("the floor: honest notebooks in one warm process, no sandbox, no nbgrader")
        floors = floor(fast_dir, answers)

        log("comparing grades")
        same, different = 0, []
        for student in sampled:
            for step in steps:
                plain = scores_or_none(plain_dir, step, student, plain_why)
                fast = scores_or_none(fast_dir, step, student, fast_why)
                if plain == fast:
                    same += 1
                else:
                    different.append((student, step, answers[(student, step)][0], plain, fast))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    total = len(answers)
    plain_count = len(sampled) * len(steps)
    scale = total / plain_count  # linear: also scales nbgrader's per-command start, so slightly pessimistic
    extrapolated = scale != 1
    mark = "*" if extrapolated else ""
    rows = [
        (f"plain nbgrader, autograde{mark}", total, autograde_seconds * scale, 1),
        (f"fast grader, {args.workers} workers, autograde", total, fast_seconds, fast_cores),
        (f"plain nbgrader, autograde + feedback{mark}", total, (autograde_seconds + feedback_seconds) * scale, 1),
        (f"fast grader, {args.workers} workers, autograde + feedback", total, fed_seconds, fast_cores),
    ]
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"{'path':44s} {'notebooks':>9s} {'wall s':>8s} {'nb/s':>7s} {'cores':>5s} {'nb/s/core':>9s}")
    for name, count, seconds, used in rows:
        print(f"{name:44s} {count:9d} {seconds:8.1f} {count / seconds:7.2f} {used:5d} {count / seconds / used:9.3f}")
    if extrapolated:
        print(f"* extrapolated linearly from plain nbgrader on the first {len(sampled)} students = {plain_count} "
              f"notebooks (measured {autograde_seconds:.1f} s autograde, {feedback_seconds:.1f} s feedback)")
    print()
    print(f"plain / fast: {autograde_seconds * scale / fast_seconds:.1f}x (autograde), "
          f"{(autograde_seconds + feedback_seconds) * scale / fed_seconds:.1f}x (autograde + feedback)")
    print(f"plain nbgrader: {autograde_seconds / plain_count:.2f} s per notebook (autograde, "
          f"{len(steps)} command starts included)")
    print()
    print_split(results, fed_results, floors, fast_seconds, fast_cores)
    print()
    print(f"grades identical: {'yes' if not different else 'no'} ({same} of {same + len(different)} "
          f"submissions graded both ways)")
    for student, step, name, plain, fast in different[:10]:
        print(f"  {student} {step} ({name}):")
        print(f"    plain: {shown(plain, plain_why.get((student, step)))}")
        print(f"    fast:  {shown(fast, fast_why.get((student, step)))}")
    if len(different) > 10:
        print(f"  ... and {len(different) - 10} more")
    for failure in plain_failures:
        print(f"plain nbgrader: {failure}")
    for line in summary_lines(output, fast_dir):
        print(f"fast grader: {line.strip()}")
    if args.keep:
        print(f"course copies kept in {args.keep}")


if __name__ == "__main__":
    main()
