"""A class on one machine: JupyterHub, a Unix account per student and one for the instructor, nbgrader's exchange.

`sudo python3 course.py hub` makes what is below, then runs JupyterHub with hub/jupyterhub_config.py (docs/hub.md).

    ROOT/            root:CLASS 0750: only the class's accounts (and root) get in
      env/           the course environment, linked file by file from .venv; its student package is public/'s and its
                     grader the instructor's course's, which only the instructor can read
      public/        what every account reads: the student package, the lessons, the course home, Jupyter settings
      exchange/      nbgrader's exchange, 1777 as /tmp: anyone may write in it, nobody may remove what is not theirs
      course/        the instructor's home and the course (0700): source/, solutions/, grader/, gradebook, secret;
                     safe_exchange.py, the collect its nbgrader_config.py names (hub/safe_exchange.py)
      hub/           JupyterHub's own files (0700): its database, cookie secret, the class (class.json), the proxy's pid
      passwords      "name password" per line (0600): written for new accounts, applied at every start; edit it to
                     change a password
"""
import argparse
import grp
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

CLONE = Path(__file__).resolve().parents[1]
VENV = CLONE / ".venv"
HUB = CLONE / "hub"
PROXY = VENV / "hub-node" / "node_modules" / ".bin" / "configurable-http-proxy"
# The instructor's course: everything a clone has but its history, tests and tooling.
COURSE_FILES = ["course.py", "nbgrader_config.py", "requirements.txt", "pyproject.toml", "HOME.md", "README.md",
                "LICENSE", "LICENSE-lessons", "attention_course", "grader", "source", "release", "solutions",
                "notebooks", "jupyter_config", "docs"]
COURSE_ID = "attention-step-by-step"


def run(*command, **kwargs):
    return subprocess.run(command, check=True, **kwargs)


def paths(root):
    root = Path(root).resolve()
    return {"root": root, "env": root / "env", "public": root / "public", "exchange": root / "exchange",
            "course": root / "course", "hub": root / "hub", "passwords": root / "passwords"}


def accounts(args):
    """{name: role} of the class: the instructor and student1..N, with the class's prefix."""
    names = {f"{args.prefix}instructor": "instructor"}
    names.update({f"{args.prefix}student{i}": "student" for i in range(1, args.students + 1)})
    return names


def install_proxy():
    """JupyterHub's proxy, as pinned in hub/package-lock.json, in .venv/hub-node (once, like the pip requirements)."""
    if PROXY.exists():
        return
    if not shutil.which("npm"):
        sys.exit("course.py hub: JupyterHub's proxy needs Node.js 18 or newer and npm (apt-get install nodejs npm)")
    print("installing JupyterHub's proxy (configurable-http-proxy, pinned in hub/package-lock.json) ...", flush=True)
    (VENV / "hub-node").mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(HUB / name, VENV / "hub-node" / name)
    run("npm", "ci", "--prefix", str(VENV / "hub-node"), "--omit=dev", "--no-audit", "--no-fund")


def make_accounts(args, where):
    """The class's group and accounts (created once), and their passwords from the passwords file."""
    group = args.prefix + "attention"
    try:
        grp.getgrnam(group)
    except KeyError:
        run("groupadd", group)
    passwords = {}
    if where["passwords"].exists():
        passwords = dict(line.split(None, 1) for line in where["passwords"].read_text().splitlines() if line.strip())
    for name, role in accounts(args).items():
        try:
            pwd.getpwnam(name)
            if name not in grp.getgrnam(group).gr_mem:
                sys.exit(f"course.py hub: the account {name} exists and is not in the class's group {group}: "
                         "not touching it (choose another --prefix)")
        except KeyError:
            home = ["--home-dir", str(where["course"]), "--no-create-home"] if role == "instructor" else \
                ["--create-home"]
            run("useradd", *home, "--groups", group, "--shell", "/bin/bash", name)
        passwords.setdefault(name, secrets.token_urlsafe(9))
    where["passwords"].touch()
    where["passwords"].chmod(0o600)
    where["passwords"].write_text("".join(f"{name} {password.strip()}\n" for name, password in passwords.items()))
    run("chpasswd", input="".join(f"{name}:{passwords[name].strip()}\n" for name in accounts(args)).encode())
    return group


def link_environment(env):
    """env/: .venv linked file by file (instant, no second copy), with the paths that named the clone rewritten."""
    sys.path.insert(0, str(CLONE))
    import course
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in course.SETUP_FILES)).hexdigest()
    if (env / ".requirements.sha256").exists() and (env / ".requirements.sha256").read_text() == digest:
        return
    shutil.rmtree(env, ignore_errors=True)
    if subprocess.run(["cp", "-a", "--link", str(VENV), str(env)], capture_output=True).returncode:
        run("cp", "-a", str(VENV), str(env))  # another file system: a real copy
    shutil.rmtree(env / "hub-node", ignore_errors=True)
    # The editable installs: the student package is public/'s, the grader the instructor's course's.
    moved = {str(CLONE / "attention_course"): str(env.parent / "public" / "attention_course"),
             str(CLONE / "grader"): str(env.parent / "course" / "grader"), str(VENV): str(env)}
    site = next(env.glob("lib/python3*/site-packages"))
    for path in [*(env / "bin").iterdir(), *site.glob("__editable__*")]:
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 100_000:
            text = path.read_bytes()
            new = text
            for old, to in moved.items():
                new = new.replace(old.encode(), to.encode())
            if new != text:  # a new file, not the linked one: .venv stays as it was
                mode = path.stat().st_mode
                path.unlink()
                path.write_bytes(new)
                path.chmod(mode)
    # what course.py checks before it runs (the course's copy has the clone's requirements)
    (env / ".requirements.sha256").unlink(missing_ok=True)
    (env / ".requirements.sha256").write_text(digest)


def copy_public(where):
    """public/: the student package, the lessons, the course home, the Jupyter settings of both views."""
    public = where["public"]
    shutil.rmtree(public, ignore_errors=True)
    public.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
    for name in ("attention_course", "notebooks", "jupyter_config"):
        shutil.copytree(CLONE / name, public / name, ignore=ignore)
    for name in ("server", "student"):
        shutil.copytree(HUB / name, public / name, ignore=ignore)
    shutil.copy(CLONE / "HOME.md", public / "HOME.md")
    (public / "student" / "nbgrader_config.py").write_text(
        '"""nbgrader for a student of the hub (written by hub/classhub.py)."""\nimport os\n\nc = get_config()  # noqa\n'
        f'c.CourseDirectory.course_id = "{COURSE_ID}"\nc.Exchange.root = "{where["exchange"]}"\n'
        '# fetched exercises go to ~/work/STEP/, where the course home links them\n'
        'c.Exchange.assignment_dir = os.path.expanduser("~/work")\n')
    for path in [public, *public.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def make_course(where, instructor):
    """course/: the instructor's home and course, made once (the gradebook and submissions live there)."""
    course = where["course"]
    if not (course / "course.py").exists():
        course.mkdir(exist_ok=True)
        for name in COURSE_FILES:
            source, target = CLONE / name, course / name
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            elif source.exists():
                shutil.copy(source, target)
        (course / ".venv").symlink_to(where["env"])  # course.py finds its environment: the hub's
        # a login shell (ssh) also finds the class's Python first
        (course / ".profile").write_text(f'PATH="{where["env"]}/bin:$PATH"\n')
        with open(course / "nbgrader_config.py", "a") as config:
            config.write(f"\n# course.py hub: this class's exchange\nc.Exchange.root = \"{where['exchange']}\"\n")
        run("chown", "-R", "--no-dereference", f"{instructor}:{instructor}", str(course))
    course.chmod(0o700)


COLLECT = """
# course.py hub: collect takes a submission only from the account that owns it, and only its plain files
# (safe_exchange.py, copied from the clone's hub/ at every start; docs/hub.md)
import sys  # noqa: E402
if c.CourseDirectory.root not in sys.path:
    sys.path.append(c.CourseDirectory.root)
c.ExchangeFactory.collect = "safe_exchange.SafeCollect"
"""


def install_collect(where, instructor):
    """The course's collect (hub/safe_exchange.py), written as the instructor: root writes nothing in their home."""
    course = where["course"]
    as_instructor = ["runuser", "-u", instructor, "--", "tee"]
    run(*as_instructor, str(course / "safe_exchange.py"), input=(HUB / "safe_exchange.py").read_bytes(),
        stdout=subprocess.DEVNULL)
    if COLLECT not in (course / "nbgrader_config.py").read_text():
        run(*as_instructor, "-a", str(course / "nbgrader_config.py"), input=COLLECT.encode(), stdout=subprocess.DEVNULL)


def make_homes(args, where):
    """Each student's home (0700): the course home and the lessons, copied once; work/ for fetched exercises."""
    for name, role in accounts(args).items():
        if role != "student":
            continue
        home = Path(pwd.getpwnam(name).pw_dir)
        home.chmod(0o700)
        for item in ("HOME.md", "notebooks", "work"):
            if not (home / item).exists():
                if item == "work":
                    (home / item).mkdir()
                elif item == "notebooks":
                    shutil.copytree(where["public"] / item, home / item)
                else:
                    shutil.copy(where["public"] / item, home / item)
                run("chown", "-R", f"{name}:{name}", str(home / item))


def closed_to_others(path):
    """The folders on the way to `path` that other users cannot pass."""
    folders = [Path(path).resolve(), *Path(path).resolve().parents]
    return [str(f) for f in folders if f.is_dir() and not f.stat().st_mode & 0o001]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sandbox_line(instructor):
    """One line on whether `course.py grade` can start its sandbox as the instructor."""
    bwrap = shutil.which("bwrap")
    works = bwrap and subprocess.run(["runuser", "-u", instructor, "--", bwrap, "--unshare-all", "--ro-bind", "/", "/",
                                      "true"], capture_output=True).returncode == 0
    if works:
        return f"grading: the sandbox starts for {instructor} (course.py grade runs student code in it)"
    return (f"WARNING: bubblewrap {'does not start' if bwrap else 'is missing'} for {instructor}: course.py grade will "
            "refuse to run student code. Fix: apt-get install bubblewrap, and allow unprivileged user namespaces "
            "(docs/hub.md)")


def setup(args):
    where = paths(args.root)
    install_proxy()
    root = where["root"]
    if any(root.is_relative_to(hidden) for hidden in ("/tmp", "/dev/shm")):
        sys.exit(f"course.py hub: the class's folder cannot be under /tmp or /dev/shm ({root}): it keeps the "
                 "gradebook and every submission, and those folders are emptied when the machine restarts; choose "
                 "a folder such as /srv/attention-class")
    for what, path in (("the Python in " + sys.base_prefix, Path(sys.base_prefix) / "lib"), (str(root), root.parent)):
        closed = closed_to_others(path)
        if closed:
            sys.exit(f"course.py hub: the class's servers run {what}, which other users cannot reach through "
                     f"{', '.join(closed)}: `chmod o+x` them (passing, not listing)")
    root.mkdir(parents=True, exist_ok=True)
    group = make_accounts(args, where)
    names = accounts(args)
    instructor = next(name for name, role in names.items() if role == "instructor")
    copy_public(where)
    link_environment(where["env"])
    make_course(where, instructor)
    install_collect(where, instructor)
    make_homes(args, where)
    where["exchange"].mkdir(exist_ok=True)
    where["exchange"].chmod(0o1777)
    where["hub"].mkdir(exist_ok=True)
    where["hub"].chmod(0o700)
    shutil.chown(root, "root", group)
    root.chmod(0o750)
    state = {"root": str(root), "ip": args.ip, "port": args.port, "hub_port": free_port(), "api_port": free_port(),
             "proxy": str(PROXY), "instructor": instructor, "students": [n for n, r in names.items() if r == "student"]}
    (where["hub"] / "class.json").write_text(json.dumps(state, indent=1))
    print(sandbox_line(instructor), flush=True)
    readable = [name for name in ("solutions", "source", "grader")
                if not closed_to_others(CLONE / name) and (CLONE / name).stat().st_mode & 0o004]
    if readable:  # the hub needs none of them: its accounts use the copies in ROOT
        print(f"WARNING: every account of this machine can read {CLONE}'s {', '.join(readable)}: "
              f"`chmod 700 {CLONE}` keeps the class out of the answer keys (the hub does not need it)", flush=True)
    return where


def processes_of(uid):
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\t{uid}\t" in next(line for line in status.read_text().splitlines() if line.startswith("Uid:")):
                pids.append(int(status.parent.name))
        except (OSError, StopIteration):
            pass
    return pids


def remove(args):
    """Delete the class: its accounts (their processes ended first), the students' homes, the group and ROOT."""
    group = args.prefix + "attention"
    try:
        members = grp.getgrnam(group).gr_mem
    except KeyError:
        members = []
    for name in members:
        uid = pwd.getpwnam(name).pw_uid
        for pid in processes_of(uid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        student = Path(pwd.getpwnam(name).pw_dir) != paths(args.root)["course"]
        subprocess.run(["userdel", *(["--remove"] if student else []), name], capture_output=True)
    if members or group in {g.gr_name for g in grp.getgrall()}:
        subprocess.run(["groupdel", group], capture_output=True)
    shutil.rmtree(paths(args.root)["root"], ignore_errors=True)
    print(f"removed the class {group}: {', '.join(members) or 'no accounts'}, and {args.root}")


def main(argv):
    parser = argparse.ArgumentParser(prog="course.py hub", description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=2, help="student accounts student1..N (default 2)")
    parser.add_argument("--prefix", default="", help="put before every account's and the group's name")
    parser.add_argument("--root", default="/srv/attention-hub", help="the class's folder (default /srv/attention-hub)")
    parser.add_argument("--ip", default="127.0.0.1", help="address to serve on (default 127.0.0.1; 0.0.0.0: every "
                                                          "interface, behind HTTPS)")
    parser.add_argument("--port", type=int, default=8000, help="port to serve on (default 8000)")
    parser.add_argument("--remove", action="store_true", help="delete the class: accounts, homes, group, ROOT")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.exit(2, "course.py hub: run it as root (sudo python3 course.py hub): it creates the class's accounts "
                       "and starts each one's server as that account\n")
    if args.remove:
        remove(args)
        return 0
    where = setup(args)
    print(f"the class's accounts and passwords: {where['passwords']}\nJupyterHub on http://{args.ip}:{args.port}",
          flush=True)
    os.chdir(where["hub"])
    os.environ["COURSE_HUB_CLASS"] = str(where["hub"] / "class.json")
    os.execv(sys.executable, [sys.executable, "-m", "jupyterhub", "-f", str(HUB / "jupyterhub_config.py")])
