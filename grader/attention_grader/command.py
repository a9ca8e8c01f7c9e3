"""`python3 course.py grade`: the instructor's command line, above the two ways to grade a class: on this machine's
cores (attention_grader/grading.py) or on a Dask cluster (attention_grader/distributed.py)."""
import argparse
import os
from pathlib import Path

from attention_grader import distributed
from attention_grader.grading import (LOG, STAGING, export, find_submissions, grade_class, is_safe_id, known_steps,
                                      printable, warnings_to, worker)

DESCRIPTION = "Grade a whole class with one command: `python3 course.py grade [ASSIGNMENT ...] [--workers N]`."


def whole_number(text):
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def share(text):
    """argparse type: K/N, the K-th of N shares (1 <= K <= N)."""
    k, slash, n = text.partition("/")
    if not (slash and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N with 1 <= K <= N (machine K of N, such as 1/2)")
    return int(k), int(n)


def listing(names, most=20):
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "") if names else "none"


def unknown_names(args, root):
    """Why the steps or students asked for cannot be graded (checked before any work), or None."""
    import difflib
    steps = known_steps(root)
    unknown = [name for name in args.assignments if name not in steps]
    if unknown:
        close = [match for name in unknown for match in difflib.get_close_matches(name, steps, n=1)]
        return (f"unknown step {', '.join(map(repr, unknown))}" + (f" (did you mean {', '.join(close)}?)" if close
                                                                    else "")
                + f"; the steps are: {listing(steps)}")
    submitted = Path(root) / "submitted"
    students = sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
    if not students:
        return ("nothing to grade: submitted/ has no student folders; collect the submissions first "
                "(nbgrader collect STEP, or nbgrader zip_collect STEP)")
    unknown = [name for name in args.student or [] if name not in students]
    if unknown:
        close = [match for name in unknown for match in difflib.get_close_matches(name, students, n=1)]
        return (f"unknown student {', '.join(map(repr, unknown))}" + (f" (did you mean {', '.join(close)}?)" if close
                                                                       else "")
                + f"; the students in submitted/ are: {listing(students)}")
    if not args.shard and find_submissions(root, args.assignments or None, args.student) == ([], []):
        return (f"nothing to grade: no folder submitted/{'|'.join(args.student or ['<student>'])}/"
                f"{'|'.join(args.assignments or ['<step>'])}/")
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="course.py grade", description=DESCRIPTION)
    parser.add_argument("assignments", nargs="*", metavar="STEP",
                        help="steps to grade, such as 01_dot_product_scores (default: all submitted)")
    parser.add_argument("--student", action="append", help="grade only these students (repeatable)")
    parser.add_argument("--workers", type=whole_number, default=os.cpu_count() or 2,
                        help="parallel workers (default: cores)")
    parser.add_argument("--timeout", type=whole_number, help="seconds a cell may run (default: nbgrader_config.py)")
    parser.add_argument("--shard", type=share, help="K/N: grade only the K-th of N shares of the students (several "
                                                    "machines, one gradebook)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="grade on a Dask cluster: its scheduler's address (tcp://host:8786) or scheduler file; "
                             "the course folder must be on a filesystem every worker mounts (docs/scale.md)")
    parser.add_argument("--no-feedback", dest="feedback", action="store_false", help="skip generate_feedback")
    parser.add_argument("--unsandboxed", dest="sandbox", action="store_false",
                        help="run student code without the bubblewrap sandbox (stamped on the summary)")
    parser.add_argument("--csv", default="grades.csv", help="where to export the grades (default: grades.csv)")
    parser.add_argument("--export-only", action="store_true",
                        help="only write grades.csv from the gradebook (after every shard has finished)")
    parser.add_argument("--root", default=os.getcwd(), help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.timeout, args.feedback, args.sandbox)
    if args.export_only:
        (Path(args.root) / STAGING).mkdir(exist_ok=True)
        with open(Path(args.root) / LOG, "a") as log, warnings_to(log):
            export(args.root, args.csv)
        print(f"Grades: {args.csv}")
        return 0
    unsafe = [name for name in (args.student or []) + args.assignments if not is_safe_id(name)]
    if unsafe:
        parser.error(printable(f"not a valid id: {', '.join(map(repr, unsafe))} (letters, digits and . _ @ + - only)"))
    if args.scheduler and args.shard:
        parser.error("--scheduler and --shard: the scheduler shares out the work itself, give only --scheduler")
    why = unknown_names(args, args.root)
    if why:
        parser.exit(2, printable(f"{parser.prog}: error: {why}") + "\n")
    if args.scheduler:
        results = distributed.grade_class(args.root, args.scheduler, args.assignments or None, args.student, args.csv,
                                          args.timeout, args.feedback, args.sandbox)
    else:
        results = grade_class(args.root, args.assignments or None, args.student, args.workers, args.csv,
                              args.timeout, args.feedback, args.shard, args.sandbox)
    refused = find_submissions(args.root, args.assignments or None, args.student, args.shard)[1]
    if not results and not refused:
        if args.shard:  # students are shared out by a hash of their names: a share may hold none of them
            print(f"Shard {args.shard[0]}/{args.shard[1]} holds none of these submissions: nothing to do here.")
            return 0
        return 2
    return 0 if all(r["success"] for r in results) and not refused else 1


