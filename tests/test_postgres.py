"""The README's recipe for a class graded on several machines, run for real: one throwaway PostgreSQL server, the
gradebook there, and two `course.py grade --shard K/2` processes at the same time, two workers each. Their union must
equal a one-machine grading of the same class on SQLite: every submission graded once, grades.csv identical."""
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

import harness
from conftest import find_program, require

STEPS = ["01_dot_product_scores"]


def as_server_user(command, **kwargs):
    """PostgreSQL will not run as root: run it as the `postgres` user (or nobody) when the tests run as root."""
    if os.geteuid() == 0:
        user = "postgres" if subprocess.run(["id", "postgres"], capture_output=True).returncode == 0 else "nobody"
        command = ["runuser", "-u", user, "--", *command]
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def postgres():
    require("initdb", "the PostgreSQL gradebook test")
    bin_dir = Path(os.path.realpath(find_program("initdb"))).parent
    top = Path(tempfile.mkdtemp(prefix="course-postgres-"))  # not under pytest's root-only folder
    data, sockets = top / "data", top / "sockets"
    data.mkdir()
    sockets.mkdir()
    top.chmod(0o755)
    if os.geteuid() == 0:
        user = "postgres" if subprocess.run(["id", "postgres"], capture_output=True).returncode == 0 else "nobody"
        for path in (data, sockets):
            shutil.chown(path, user)
    as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "grader"])
    as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(data / "log"), "-o",
                    f"-k {sockets} -c listen_addresses='' -p 5499", "start"])
    try:
        as_server_user([str(bin_dir / "createdb"), "-h", str(sockets), "-p", "5499", "-U", "grader", "attention"])
        yield f"postgresql://grader@/attention?host={sockets}&port=5499"
    finally:
        as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
        shutil.rmtree(top, ignore_errors=True)


def course_with_class(base, path, db_url=None):
    course_dir = Path(shutil.copytree(base, path))
    if db_url:  # the README's recipe: point the gradebook at the one PostgreSQL database
        with open(course_dir / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.CourseDirectory.db_url = {db_url!r}\n")
        for step in STEPS:  # registered on the database by generate_assignment, as on one machine first
            harness.nbgrader(course_dir, "generate_assignment", step, "--force")
    (course_dir / ".grading_secret").write_text("the same secret on every machine\n")
    for step in STEPS:
        variants = harness.bank(step, integrity=False)
        for name in four_per_shard(sorted(variants)):
            harness.submit(course_dir, name, step, harness.variant_submission(step, variants[name]))
    return course_dir


def shard_of(student):
    return zlib.crc32(student.encode()) % 2 + 1  # as find_submissions shares them out


def four_per_shard(names):
    """Eight students, four in each shard: a test where one shard held every student would prove nothing."""
    return [name for k in (1, 2) for name in [n for n in names if shard_of(n) == k][:4]]


def grades(course_dir):
    with open(course_dir / "grades.csv", newline="") as f:
        return sorted(tuple(row.items()) for row in csv.DictReader(f))


def test_two_shards_on_one_postgresql_gradebook_grade_like_one_machine(tmp_path, postgres):
    base = harness.make_course(tmp_path / "generated", steps=STEPS)
    alone = course_with_class(base, tmp_path / "one-machine")
    harness.grade_class(alone, workers=2)

    shared = course_with_class(base, tmp_path / "shards", db_url=postgres)
    command = [sys.executable, "-m", "attention_grader", "--workers", "2", "--timeout", "10",
               "--root", str(shared)] + ([] if harness.SANDBOX else ["--unsandboxed"])
    shards = [subprocess.Popen(command + ["--shard", f"{k}/2"], cwd=shared, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for k in (1, 2)]
    outputs = [shard.communicate(timeout=900) for shard in shards]
    assert all(shard.returncode == 0 for shard in shards), outputs
    students = sorted(p.name for p in (shared / "submitted").iterdir())
    other = next(s for s in students if shard_of(s) == 2)
    empty = subprocess.run(command + ["--shard", "1/2", "--student", other], cwd=shared, capture_output=True, text=True)
    assert empty.returncode == 0 and "holds none" in empty.stdout, "a shard with no students is not an error"
    subprocess.run(command + ["--export-only"], cwd=shared, check=True, capture_output=True)

    graded = [line.split()[0] for out, _ in outputs for line in out.split("Per student:")[1].split("\n\n")[0]
              .strip().splitlines()]
    assert sorted(graded) == students, "every student is graded by exactly one shard"
    assert grades(shared) == grades(alone)
    from nbgrader.api import Gradebook
    with Gradebook(postgres, "attention-step-by-step") as gradebook:
        submissions = [(s.student.id, s.assignment.name) for a in STEPS for s in gradebook.assignment_submissions(a)]
    assert len(submissions) == len(set(submissions)) == sum(
        len(list((shared / "submitted" / s).iterdir())) for s in students)
