"""What the per-notebook sandbox costs: this checkout's notebook executor against another commit's, side by side.

Both executors (attention_grader/forking.py here, and the same file at `--against`, loaded from a temporary
worktree) start their warm, sandboxed parent in this process; every step's answer key (solutions/, test cells
included) then runs through each in turn, round after round, so both see the same machine load.

    .venv/bin/python benchmarks/executor_benchmark.py --against 6b46ba8 --rounds 3

6b46ba8 is the last commit with one sandbox per worker (test cells run in the notebook's own process).
"""
import argparse
import copy
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import course  # noqa: E402
from attention_grader import forking  # noqa: E402


def executor_at(commit, folder):
    """forking.py as it was at `commit`, loaded as a module of its own."""
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(folder), commit], cwd=ROOT, check=True)
    path = folder / "grader" / "attention_grader" / "forking.py"
    spec = importlib.util.spec_from_file_location("forking_at_" + commit, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the commit whose executor to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    notebooks = {step: nbformat.read(ROOT / "solutions" / step / f"{step}.ipynb", as_version=4)
                 for step in course.steps()}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            executors = {"this checkout": forking, args.against: executor_at(args.against, Path(tmp) / "other")}
            seconds = {name: {step: 0.0 for step in notebooks} for name in executors}
            for executor in executors.values():  # start both warm parents before timing anything
                executor.ForkingExecute(timeout=60).preprocess(copy.deepcopy(notebooks[course.steps()[0]]), {})
            for _ in range(args.rounds):
                for step, nb in notebooks.items():
                    for name, executor in executors.items():
                        started = time.perf_counter()
                        executor.ForkingExecute(timeout=60).preprocess(copy.deepcopy(nb), {})
                        seconds[name][step] += time.perf_counter() - started
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(Path(tmp) / "other")], cwd=ROOT)
    names = list(executors)
    print(f"seconds per notebook, mean of {args.rounds} rounds (load average {os.getloadavg()[0]:.1f})")
    print(f"{'step':26s} {'test cells':>10s} " + " ".join(f"{name:>14s}" for name in names) + f" {'difference':>10s}")
    for step, nb in notebooks.items():
        tests = sum(1 for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
                    and not c.metadata["nbgrader"].get("solution"))
        times = [seconds[name][step] / args.rounds for name in names]
        print(f"{step:26s} {tests:10d} " + " ".join(f"{t:14.3f}" for t in times) + f" {times[0] - times[1]:+10.3f}")
    totals = [sum(seconds[name].values()) / args.rounds / len(notebooks) for name in names]
    print(f"{'mean':26s} {'':10s} " + " ".join(f"{t:14.3f}" for t in totals) + f" {totals[0] - totals[1]:+10.3f}")


if __name__ == "__main__":
    main()
