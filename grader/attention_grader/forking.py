"""The course's notebook executor for nbgrader: a warm, sandboxed parent that forks a fresh child per notebook.

Starting a Jupyter kernel and importing torch takes seconds per notebook; forking a process that has already imported
them takes milliseconds. `ForkingExecute` replaces nbgrader's `Execute` step (see nbgrader_config.py), so sanitising,
restoring test cells, scoring, the gradebook, feedback and formgrader stay nbgrader's own.

    nbgrader process ── ForkingExecute ──pipes──> zygote (bubblewrap sandbox: torch, IPython, student package)
                                                    └─ fork per notebook, in namespaces of its own (below): cells in
                                                       order in an IPython shell, outputs sent back cell by cell

The zygote sees the Python environment, the student package and this file, read-only, and nothing else of the
course: no source/, no solutions, no judges, no gradebook, no other submission. It has no network. When the grader
runs as root, the sandbox runs as the unprivileged uid `nobody` (65534) of the host, never as root.
Each notebook gets new user, mount, IPC, network and PID namespaces with a fresh, size-limited /tmp and /dev/shm:
nothing it writes, chmods or starts outlives it. It runs under a memory limit and a per-cell timeout; a crash or
os._exit ends that notebook only. A notebook receives each cell's source when that cell runs, and each test cell
runs in a throwaway fork (then its visible part alone again in the notebook's process, for the names it makes), so
no hidden check is in the notebook's memory before or after its cell.
Without a working bubblewrap the executor refuses to run student code, unless told to (`sandbox=False`, which
`course.py grade --unsandboxed` sets): then it warns loudly, and the class summary says so.
"""
import base64
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

from nbformat import NotebookNode
from traitlets import Bool, Integer

try:  # only the nbgrader side needs nbgrader; the zygote does not import it
    from nbgrader.preprocessors import NbGraderPreprocessor
except ImportError:  # pragma: no cover
    NbGraderPreprocessor = object

THIS_FILE = os.path.abspath(__file__)
SANDBOXED_FILE = "/grader/forking.py"  # where the zygote sees this file, alone
OUTPUT_LIMIT = 1_000_000  # characters of text output kept per cell; LimitOutput trims further
DISPLAY_LIMIT = 8_000_000  # characters of displayed data (plots, HTML, the probe's records) kept per cell
NOTEBOOK_DISPLAY_LIMIT = 32_000_000  # ... and per notebook
EVENTS = []  # one record per executed notebook, read by the class grader
MAX_PROCESSES = 32  # processes one notebook may run at once, its own included
MAX_TASKS = 256  # threads and processes one notebook may run at once
MAX_FILES = 512  # descriptors each process of a notebook may hold (pipes' buffers are memory no process shows)
CPU_SHARE = 1.0  # cores a notebook's processes may use together, on average: however many sessions or processes
CPU_BURST = 0.2  # seconds of CPU time a notebook may use ahead of its share before it is paused
NOTEBOOK_TIME = 5  # a notebook's cells together may run this many cell timeouts: more long cells buy no more time
WATCH_INTERVAL = 0.05  # seconds between two looks at a notebook's processes
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
SELF_CHECK = ("import IPython.core.logger, IPython.lib.pretty, email.mime.text, matplotlib.pyplot, torch\n"
              "import attention_course.checks, attention_course.probe\nprint('ok')\n")  # modules imported late too


class SandboxUnavailable(RuntimeError):
    """Student code is not run without the sandbox unless the instructor asks for it."""


class Unsandboxed(RuntimeWarning):
    pass


NO_SANDBOX = ("bubblewrap (bwrap) is missing or does not work here, and the course does not run student code without "
              "its sandbox. Install it (Debian/Ubuntu: apt-get install bubblewrap; it needs unprivileged user "
              "namespaces), or grade unsandboxed on purpose with `python3 course.py grade --unsandboxed` "
              "(nbgrader: --ForkingExecute.sandbox=False), where student code can read and write all this user can.")


# ---------------------------------------------------------------------------------------------------------------
# nbgrader side
# ---------------------------------------------------------------------------------------------------------------

def student_package_dir():
    import importlib.util
    return importlib.util.find_spec("attention_course").submodule_search_locations[0]


SANDBOX_UID = 65534  # the host uid student code runs as when the grader is root ("nobody")


def sandbox_command(python):
    """bubblewrap arguments that run `python` with the environment, the student package and this file visible,
    read-only."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(python)))}
    # --as-pid-1: the zygote itself is the namespace's init. No other process of the sandbox holds the pipe to the
    # grader, so a notebook (which may open /proc/<pid>/fd of a dumpable process of its own uid) cannot write to it.
    command = [bwrap, "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--proc", "/proc", "--dev", "/dev",
               "--tmpfs", "/tmp", "--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
               "--setenv", "HOME", "/tmp"]
    system = ["/usr", "/lib", "/lib64", "/bin", "/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime", "/etc/fonts"]
    for path in system:
        command += ["--ro-bind-try", path, path]
    visible = sorted(prefixes) + [student_package_dir()]
    for path in visible:
        command += ["--ro-bind", path, path]
    # each notebook's fresh /tmp and /dev/shm keep these visible where they lie there (a clone under /tmp)
    command += ["--setenv", "COURSE_VISIBLE", json.dumps(visible)]
    # the zygote imports the very student package the grader found (an editable install's .pth may point elsewhere)
    command += ["--setenv", "PYTHONPATH", os.path.dirname(student_package_dir())]
    # nothing of the sandbox's own tree can be changed: only each notebook's fresh /tmp and /dev/shm are writable
    return command + ["--ro-bind", THIS_FILE, SANDBOXED_FILE, "--remount-ro", "/dev", "--remount-ro", "/"]


def closed_to_others(paths):
    """The folders on the way to `paths` that other users cannot pass (no o+x): the sandbox's uid cannot either."""
    closed = []
    for path in paths:
        folder = os.path.dirname(os.path.realpath(path))
        while folder != "/":
            if not os.stat(folder).st_mode & 0o001 and folder not in closed:
                closed.append(folder)
            folder = os.path.dirname(folder)
    return closed


def _as_sandbox_user():
    """Run as the unprivileged host uid (for bubblewrap started by root: inside, root's files are then not its own)."""
    os.setgroups([])
    os.setgid(SANDBOX_UID)
    os.setuid(SANDBOX_UID)


class Zygote:
    """The warm parent, started once per grading process."""

    def __init__(self, sandbox=True, log=None):
        # the environment's own folder, its symlinks resolved (the sandbox mounts real paths); not the interpreter's
        # target, which would leave the virtual environment
        python = os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))
        env = {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/matplotlib", "PYTHONHASHSEED": "0",
               "COURSE_SANDBOXED": "1", "TRITON_INTERPRET": "1",
               "NBGRADER_EXECUTION": "autograde"}  # as nbgrader's autograde sets it (this executor runs only there)
        command = sandbox_command(python) if sandbox else None
        # as root, student code runs as an unprivileged uid of the host, not as root
        preexec = _as_sandbox_user if os.geteuid() == 0 else None
        # os.__file__: the base installation's library, which a virtual environment's python reads too
        closed = closed_to_others([python, os.path.realpath(python), os.__file__, THIS_FILE, student_package_dir()])
        if command is not None and preexec and closed:
            raise SandboxUnavailable(
                f"grading as root, the sandbox runs student code as the unprivileged uid {SANDBOX_UID}, which cannot "
                f"reach the Python environment or the course through {', '.join(closed)}: let other users pass "
                f"(`chmod o+x {' '.join(closed)}`: they can then open what is inside that is readable to them, not "
                "list it), or grade as an ordinary user")
        self.sandboxed = command is not None and self._sandbox_works(command, python, preexec)
        if sandbox and not self.sandboxed:
            raise SandboxUnavailable(NO_SANDBOX)
        if self.sandboxed:
            for name, value in env.items():
                command += ["--setenv", name, value]
            argv = command + [python, SANDBOXED_FILE, "serve"]
            env = None
        else:
            message = ("grading WITHOUT a sandbox, as asked: student code can read and write everything this user can "
                       "(install Debian's bubblewrap: apt-get install bubblewrap)")
            warnings.warn(message, Unsandboxed, stacklevel=2)
            if log is not None:
                log.warning(message)
            argv = [python, THIS_FILE, "serve"]
            mpl = os.path.join(os.environ.get("TMPDIR", "/tmp"), "mpl-grader")
            env = {**os.environ, **env, "COURSE_SANDBOXED": "", "MPLCONFIGDIR": mpl}
        self.buffer = bytearray()
        self.errors = tempfile.TemporaryFile()  # the zygote's own stderr: kept for the message below
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                        env=env, cwd=None if self.sandboxed else os.environ.get("TMPDIR", "/tmp"),
                                        preexec_fn=preexec if self.sandboxed else None)
        ready = self._read(timeout=300)
        self.own = {self.process.pid, *_descendants(self.process.pid)}  # bubblewrap and the zygote
        # A notebook's processes share the zygote's pages; their share counts towards the tree's memory, so the
        # tree may hold the memory limit plus that much.
        self.size = sum(map(_memory, self.own))
        # a notebook's process must keep one of the roots the executor's own processes have
        self.roots = {_identity(f"/proc/{pid}/root") for pid in self.own} - {None}
        if ready is None or ready.get("ready") is not True:
            self.process.kill()
            self.errors.seek(0)
            said = self.errors.read().decode(errors="replace").strip().splitlines()[-5:]
            why = "it did not answer within 300 s" if ready is None else "it exited"
            what_to_do = ("the sandbox started it: check that `bwrap --unshare-all --ro-bind / / true` works for this "
                          "user (unprivileged user namespaces must be allowed)" if self.sandboxed else
                          "the course environment may be incomplete: delete .venv and run `python3 course.py test`")
            raise RuntimeError(f"the grading executor did not start ({why}); it said: {' | '.join(said) or 'nothing'}."
                               f" What to do: {what_to_do}")
        # A fault of the grader is never a student's zero: a notebook that only imports what notebooks use runs
        # first, and grading stops, saying why, when it fails.
        ends = list(self.run([SELF_CHECK], cell_timeout=60, memory_limit=1 << 30))
        outputs = next((m["outputs"] for m in ends if m.get("cell") == 0), [])
        if ends[-1].get("end") != "ok" or [o.get("text") for o in outputs] != ["ok\n"]:
            said = ends[-1].get("detail") or " ".join(str(o.get("text") or o.get("evalue")) for o in outputs)
            self.process.kill()
            raise RuntimeError(f"the grading executor cannot run a notebook here ({said.strip()[-300:]}), so no "
                               "submission was graded. What to do: check that the course environment is complete "
                               "(delete .venv and run `python3 course.py test`) and that `python3 course.py grade "
                               "--unsandboxed` grades the answer key; if only the sandbox fails, tell the course's "
                               "maintainers what it said")

    @staticmethod
    def _sandbox_works(command, python, preexec):
        try:
            probe = subprocess.run(command + [python, "-c", "print('ok')"], capture_output=True, timeout=60,
                                   preexec_fn=preexec)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return probe.returncode == 0 and probe.stdout.strip() == b"ok"

    def alive(self):
        return self.process.poll() is None

    def _read(self, timeout, watch=None):
        """The next message, None after `timeout` seconds of silence; `watch()` runs while it waits."""
        deadline = time.monotonic() + timeout
        searched = 0  # bytes of the buffer already searched for the end of the line: reading stays linear
        while (newline := self.buffer.find(b"\n", searched)) < 0:
            searched = len(self.buffer)
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, min(left, WATCH_INTERVAL)))
            if not ready and left <= 0:
                return None
            if not ready:
                if watch:
                    watch()
                continue
            chunk = os.read(self.process.stdout.fileno(), 1 << 20)
            if not chunk:
                return {"eof": True}
            self.buffer += chunk
        line = bytes(self.buffer[:newline])
        del self.buffer[:newline + 1]
        return json.loads(line)

    def notebook_processes(self):
        """Every process of the running notebook: the executor's descendants but its own, including any that left
        the notebook's process group or session."""
        return [pid for pid in _descendants(self.process.pid) if pid not in self.own]

    def watch(self, memory_limit):
        """Hold the notebook's whole tree of processes to the limits; stop all of it and say why when it is over."""
        processes = self.notebook_processes()
        files, uncountable = self.files_in_memory(processes)
        if time.monotonic() > self.deadline:
            self.stopped = (f"the notebook ran past its total time ({self.total_time} s: its cells together may run "
                            f"{NOTEBOOK_TIME} times the cell timeout), so all its processes were stopped")
        elif len(processes) > MAX_PROCESSES:
            self.stopped = f"the notebook started more than {MAX_PROCESSES} processes, so all of them were stopped"
        elif uncountable:
            self.stopped = f"the notebook {uncountable}, so all its processes were stopped"
        elif sum(map(_memory, processes)) + files > memory_limit + self.size:
            self.stopped = (f"the notebook's processes together used more than the memory limit "
                            f"({memory_limit / (1 << 30):.1f} GiB), files in memory included, so all of them were "
                            "stopped (MemoryError)")
        else:
            return self.hold_to_cpu_share(processes)
        for pid in processes:
            _signal(pid, signal.SIGKILL)

    def hold_to_cpu_share(self, processes):
        """Pause the notebook's processes while they have used more than CPU_SHARE cores since it started (a burst of
        CPU_BURST seconds allowed): classmates graded beside it keep their share of the machine, whatever the number
        of processes or sessions (each its own scheduler group) the notebook makes."""
        now = time.monotonic()
        # A process's time includes its children that ended and were waited for, so that the sum over the tree
        # grows by what the tree used, whichever of its processes ended since the last look.
        used = sum(map(_cpu_seconds, processes))
        spent, self.cpu_seen = used - self.cpu_seen, used
        self.cpu_ahead = max(self.cpu_ahead + spent - CPU_SHARE * (now - self.cpu_checked), -CPU_BURST)
        self.cpu_checked = now
        if self.cpu_ahead > 0:
            for pid in processes:
                _signal(pid, signal.SIGSTOP)
            time.sleep(min(self.cpu_ahead / CPU_SHARE, 1.0))
            for pid in processes:
                _signal(pid, signal.SIGCONT)

    def files_in_memory(self, processes):
        """Bytes of the memory-backed files (tmpfs) the notebook holds: its /tmp and /dev/shm, any file system it
        mounted in namespaces of its own, files it keeps open there; and, instead, why they cannot be counted. A
        mounted file system is counted whole, once; an open file of one that is no longer mounted, by its size."""
        measured, open_files = set(), {}
        for pid in processes:
            root = _identity(f"/proc/{pid}/root")
            if root is None:  # the process has ended
                continue
            if root not in self.roots:
                return 0, "changed its root directory"
            for device, fstype, path in _memory_file_systems(pid):
                if fstype == "nsfs":
                    return 0, "kept a namespace mounted"
                if device not in measured and _device_of(path) == device:
                    measured.add(device)
                    usage = _used_bytes(path)
                    open_files[device] = usage  # counted whole: no open file of it is counted again
            for path in [f"/proc/{pid}/cwd", *(f"/proc/{pid}/fd/{fd}" for fd in _listdir(f"/proc/{pid}/fd"))]:
                try:
                    if _NAMESPACE.match(os.readlink(path)):
                        return 0, "kept a namespace open"
                    status = os.stat(path)
                except OSError:
                    continue
                device = f"{os.major(status.st_dev)}:{os.minor(status.st_dev)}"
                if os.major(status.st_dev) == 0 and device not in measured:
                    open_files[(device, status.st_ino)] = status.st_blocks * 512
        return sum(open_files.values()), None

    def run(self, sources, cell_timeout, memory_limit, tests=()):
        """Run the sources in a fresh child, the cells at the indices `tests` each in a throwaway fork; yield its
        messages ({"cell": i, ...}, then {"end": ...})."""
        self.stopped = None
        self.total_time = notebook_time(cell_timeout)
        self.deadline = time.monotonic() + self.total_time
        self.cpu_seen, self.cpu_ahead, self.cpu_checked = 0.0, -CPU_BURST, time.monotonic()
        self._send({"cell_timeout": cell_timeout, "memory_limit": memory_limit})
        # the sources go to the notebook's relay, forked before they are sent, never to the zygote
        started = self._read(timeout=60)
        if started != {"started": True}:
            self.process.kill()
            yield {"end": "hung", "detail": f"the grading executor did not start the notebook ({started})"}
            return
        self.process.stdin.write(b"%d\n" % len(data := json.dumps({"sources": sources, "tests": sorted(tests)}).encode())
                                 + data)
        self.process.stdin.flush()
        try:
            while True:
                message = self._read(timeout=cell_timeout + 60, watch=lambda: self.watch(memory_limit))
                if message is None:  # the zygote itself hangs: give up on it
                    self.process.kill()
                    yield {"end": "hung", "detail": "the grading executor stopped answering"}
                    return
                if message.get("eof"):
                    yield {"end": "hung", "detail": "the grading executor stopped"}
                    return
                if "end" in message and self.stopped:
                    message = {"end": "stopped", "detail": self.stopped}
                yield message
                if "end" in message:
                    return
        finally:  # whatever the notebook left running ends with it, before the next notebook starts
            for pid in self.notebook_processes():
                _signal(pid, signal.SIGKILL)

    def _send(self, message):
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def close(self):
        if self.alive():
            self.process.stdin.close()
            self.process.wait(timeout=10)


def _process_tree():
    """{parent pid: [child pids]} of every process this process's /proc shows."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(name))
    return children


def _descendants(root):
    """The pids of every process below `root`, from /proc (the grading machine's own view)."""
    children = _process_tree()
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def notebook_time(cell_timeout):
    """Seconds a notebook's cells may run together: NOTEBOOK_TIME cell timeouts, never less than one cell's timeout
    and the relay's 10 s to see that a cell could not be interrupted."""
    return max(NOTEBOOK_TIME * cell_timeout, cell_timeout + 20)


def _cpu_seconds(pid):
    """CPU time a process and its children that ended have used, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return sum(int(field) for field in fields[11:15]) / CLOCK_TICK  # utime, stime, cutime, cstime
    except (OSError, ValueError, IndexError):
        return 0.0


def _memory(pid):
    """Bytes of memory a process holds, pages it shares with others counted in proportion (PSS)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


_NAMESPACE = __import__("re").compile(r"^(mnt|user|ipc|net|pid|uts|cgroup|time)(_for_children)?:\[")


def _identity(path):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def _memory_file_systems(pid):
    """(device, type, path from here) of each memory-backed (tmpfs) or namespace (nsfs) mount `pid` sees."""
    try:
        with open(f"/proc/{pid}/mountinfo") as mountinfo:
            lines = mountinfo.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("tmpfs", "nsfs"):
            where = __import__("re").sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            found.append((fields[2], fstype, f"/proc/{pid}/root{where}"))
    return found


def _device_of(path):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return f"{os.major(status.st_dev)}:{os.minor(status.st_dev)}"


def _used_bytes(path):
    try:
        usage = os.statvfs(path)
    except OSError:
        return 0
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_ZYGOTE = None


def zygote(sandbox=True, log=None):
    global _ZYGOTE
    if _ZYGOTE is None or not _ZYGOTE.alive():
        _ZYGOTE = Zygote(sandbox=sandbox, log=log)
    return _ZYGOTE


def _error_output(ename, evalue):
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class ForkingExecute(NbGraderPreprocessor):
    """nbgrader's Execute step, run in a forked child of a warm, sandboxed parent."""

    timeout = Integer(60, help="Seconds one cell may run before it is interrupted.").tag(config=True)
    memory_limit = Integer(4 << 30, help="Bytes of address space one notebook may add.").tag(config=True)
    sandbox = Bool(True, help="Run student code in a bubblewrap sandbox; False runs it unsandboxed, with a warning "
                              "(without it, grading stops when the sandbox is unavailable).").tag(config=True)

    def preprocess(self, nb, resources):
        code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
        started = time.perf_counter()
        unreadable = nb.metadata.get("attention_course_unreadable")  # set by the class grader (grading.py)
        if unreadable:
            for cell in code_cells:
                cell.outputs = [_error_output("SubmissionError", unreadable)]
            EVENTS.append({"student": resources.get("nbgrader", {}).get("student"), "flags": ["unreadable"],
                           "seconds": 0.0, "sandboxed": None})
            return nb, resources
        end = {"end": "hung"}
        tests = [i for i, cell in enumerate(code_cells) if cell.metadata.get("nbgrader", {}).get("grade")
                 and not cell.metadata.get("nbgrader", {}).get("solution")]
        for message in zygote(self.sandbox, self.log).run([c.source for c in code_cells], self.timeout,
                                                          self.memory_limit, tests):
            if "end" in message:
                end = message
                break
            cell = code_cells[message["cell"]]
            cell.outputs = [NotebookNode(output) for output in message["outputs"]]
            cell.execution_count = message["cell"] + 1
        flags = set()
        if end["end"] != "ok":
            detail = end.get("detail", "") if end["end"] == "stopped" else ""
            flags.add("out of memory" if "memory" in detail else "timed out" if "total time" in detail else "crashed")
            reason = end.get("detail", "the notebook's process ended")
            stopped = False
            for cell in code_cells:
                if cell.get("execution_count") is None:
                    cell.outputs = [_error_output("DeadKernelError", reason if not stopped else
                                                  "not run: the notebook's process had ended in an earlier cell")]
                    stopped = True
        for cell in code_cells:
            for output in cell.get("outputs", []):
                text = output.get("evalue", "") + output.get("text", "")
                if output.get("ename") == "CellTimeoutError":
                    flags.add("timed out")
                if output.get("ename") == "DeadKernelError":
                    flags.add("crashed")
                if output.get("ename") == "MemoryError" or "DefaultCPUAllocator" in text:
                    flags.add("out of memory")
        EVENTS.append({"student": resources.get("nbgrader", {}).get("student"), "flags": sorted(flags),
                       "seconds": time.perf_counter() - started,
                       "sandboxed": _ZYGOTE is not None and _ZYGOTE.sandboxed})
        return nb, resources


# ---------------------------------------------------------------------------------------------------------------
# zygote side (inside the sandbox)
# ---------------------------------------------------------------------------------------------------------------
#
#   zygote ── fork per notebook ──> relay: new user, mount, IPC, network and PID namespaces, a fresh /tmp and /dev/shm
#                                     └─ init (pid 1 of the notebook's PID namespace: when it ends, every process does)
#                                          └─ notebook: cells sent one at a time by the relay, no capabilities
#                                               └─ per test cell, a throwaway fork in mount and IPC namespaces of
#                                                  its own with an empty /tmp and /dev/shm, scoped by Landlock: the
#                                                  test cell's source reaches only it
#
# The zygote never reads a notebook's sources: the relay, forked before they are sent, holds them, and no process of
# the notebook can reach it (another PID namespace, not dumpable). The relay enforces the output limits as it reads.

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"  # nbgrader's markers
TMPFS_SIZE = 256 << 20  # bytes of files a notebook may keep in /tmp, and again in /dev/shm
CELL_MESSAGE_LIMIT = 2 * OUTPUT_LIMIT + DISPLAY_LIMIT + (1 << 20)  # bytes of one cell's message the relay reads
NOTEBOOK_MESSAGE_LIMIT = NOTEBOOK_DISPLAY_LIMIT + 16 * OUTPUT_LIMIT  # ... and of a whole notebook's messages


class _CellTimeout(BaseException):
    """Raised in a cell that runs past its time; BaseException so that `except Exception` cannot swallow it."""


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        import ctypes
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _new_namespaces(flags):
    """Enter new namespaces (a new user namespace first, so no privilege is needed), keeping this uid and gid."""
    uid, gid, libc = os.getuid(), os.getgid(), _libc()
    _check(libc.unshare(CLONE_NEWUSER | flags), "unshare")
    # /proc/self of a process that is not dumpable belongs to root: dumpable for as long as it takes to write the maps
    # (no process of the notebook exists yet)
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
    finally:
        libc.prctl(4, 0, 0, 0, 0)
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")


def _fresh_tmpfs(path):
    """An empty tmpfs on `path`, in which the folders the sandbox shows (the environment, the student package) stay
    where they are, read-only, when they lie under `path`."""
    libc = _libc()
    kept = [folder for folder in json.loads(os.environ.get("COURSE_VISIBLE", "[]")) if folder.startswith(path + "/")]
    handles = [os.open(folder, os.O_PATH | os.O_DIRECTORY) for folder in kept]  # reachable once the tmpfs hides them
    _check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                      f"size={TMPFS_SIZE},mode=1777".encode()), f"mount tmpfs on {path}")
    for folder, handle in zip(kept, handles):
        os.makedirs(folder, exist_ok=True)
        _check(libc.mount(f"/proc/self/fd/{handle}".encode(), folder.encode(), None, MS_BIND | MS_REC, None),
               f"mount --bind {folder}")
        _check(libc.mount(None, folder.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
               f"mount -o remount,ro {folder}")
        os.close(handle)


def _drop_capabilities():
    """No capability left, none to gain: what unshare gave this process in its namespaces is given back."""
    import ctypes
    libc = _libc()
    for capability in range(64):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP, until past the last capability
            break
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    _check(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


# x86_64 and aarch64 numbers of the calls refused to a notebook: memory no process's size shows (memfd_create, memfd_secret, shmget, msgget, io_uring_setup,
# and socket and socketpair, whose buffers a notebook without a network needs for nothing), and setsid (a session is
# a scheduler group of its own: two dozen of them took the machine from the notebooks graded beside it).
REFUSED_CALLS = {"x86_64": (0xC000003E, [319, 447, 29, 68, 425, 41, 53, 112]),
                 "aarch64": (0xC00000B7, [279, 447, 194, 186, 425, 198, 199, 157])}


def _refuse_calls():
    """A seccomp filter on this process and its children: those calls fail with EPERM."""
    import ctypes
    import platform
    arch, numbers = REFUSED_CALLS[platform.machine()]
    load, jump_equal, jump_above_equal, ret = 0x20, 0x15, 0x35, 0x06
    refuse, allow = 0x00050000 | 1, 0x7FFF0000  # SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    checks = [(jump_above_equal, 0x40000000)] if arch == 0xC000003E else []  # the x32 ABI: refused whole
    checks += [(jump_equal, number) for number in numbers]
    program = [(load, 0, 0, 4), (jump_equal, 0, len(checks) + 1, arch), (load, 0, 0, 0)]
    program += [(code, len(checks) - i, 0, k) for i, (code, k) in enumerate(checks)]
    program += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    instructions = (Instruction * len(program))(*program)
    filter_program = Program(len(program), instructions)
    _check(_libc().prctl(22, 2, ctypes.byref(filter_program), 0, 0), "seccomp")  # PR_SET_SECCOMP, MODE_FILTER


def _close_descriptors(keep):
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2 and int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass


def _unmap_shared_memory():
    """Memory this process shares with the notebook (mmap MAP_SHARED made by an earlier cell) is unmapped."""
    import ctypes
    libc = _libc()
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    with open("/proc/self/maps") as maps:
        shared = [line.split()[0] for line in maps if line.split()[1][3] == "s"]
    for span in shared:
        start, end = (int(x, 16) for x in span.split("-"))
        libc.munmap(start, end - start)


def _write_line(fd, message):
    _write_all(fd, json.dumps(message, default=str).encode() + b"\n")


def _read_header(fd):
    """One line, read a byte at a time so that nothing after it is read ahead into this process."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            return None
        line += byte
    return json.loads(line)


def _send_framed(fd, message):
    """A message as its length, a newline and its bytes: the reader takes exactly that much, nothing of the next."""
    data = json.dumps(message).encode()
    _write_all(fd, b"%d\n" % len(data) + data)


def _read_framed(fd):
    size = _read_header(fd)
    if size is None:
        return None
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _serve():
    import resource

    import torch
    torch.set_num_threads(1)  # before any fork: every child inherits one thread, workers run side by side
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy  # noqa: F401
    import torch.nn.functional  # noqa: F401
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    import attention_course.checks  # noqa: F401
    import attention_course.data  # noqa: F401
    import attention_course.plots  # noqa: F401
    import attention_course.probe  # noqa: F401
    import ctypes
    # Not dumpable, and so are the children forked from it: a notebook cannot open /proc/<pid>/mem or the
    # descriptors under /proc/<pid>/fd of the zygote, its relay or another notebook.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4

    from traitlets.config import Config
    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "NoColor"
    shell = InteractiveShell.instance(config=config)
    torch.ones(2, 2) @ torch.ones(2, 2)  # warm up the kernels once, not in every child
    sys.stdout = open(os.devnull, "w")  # nothing but messages goes to the worker
    _write_line(1, {"ready": True})
    kit = (resource, plt, shell, DisplayHook, DisplayPublisher)
    while True:
        request = _read_header(0)
        if request is None:  # the grader is done: no clean-up worth the seconds a full interpreter shutdown takes
            os._exit(0)
        _reap()
        end_read, end_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(end_read)
            try:
                _relay(request, end_write, kit)
            except BaseException as error:
                os.write(end_write, json.dumps({"end": "died", "detail": "the grading executor could not run the "
                                                f"notebook ({type(error).__name__}: {error})"}).encode())
            finally:
                os._exit(0)
        os.close(end_write)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(end_read, "rb") as said:
            end = said.read(1 << 16)
        _write_line(1, json.loads(end) if end else
                    {"end": "died", "detail": f"the grading executor's relay ended ({_status_text(status)})"})


def _status_text(status):
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def _reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _relay(request, end_channel, kit):
    """One notebook: its namespaces, its processes, and the messages between them and the grader."""
    sandboxed = bool(os.environ.get("COURSE_SANDBOXED"))
    if sandboxed:
        # Threads and processes count per user namespace and uid (Linux 5.14 and later): set before the notebook's user
        # namespace is made, the limit holds the notebook's tasks together, whatever uid other notebooks share.
        resource = kit[0]
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_TASKS, MAX_TASKS))
        # a network namespace of its own has no interface up: no loopback to leave a listening socket on
        _new_namespaces(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID)
        _fresh_tmpfs("/tmp")
        _fresh_tmpfs("/dev/shm")
        os.chdir("/tmp")
    else:
        os.chdir(tempfile.mkdtemp(prefix="notebook-"))
    from_relay, to_notebook = os.pipe()
    from_notebook, to_relay = os.pipe()
    init = os.fork()  # pid 1 of the notebook's PID namespace
    if init == 0:
        for fd in (0, 1, end_channel, to_notebook, from_notebook):
            os.close(fd)
        _init(request, from_relay, to_relay, sandboxed, kit)
    os.close(from_relay)
    os.close(to_relay)
    _write_line(1, {"started": True})
    sources = _read_framed(0)
    relay = Relay(init, to_notebook, from_notebook, request["cell_timeout"], sandboxed)
    try:
        end = relay.run(sources["sources"], set(sources["tests"]))
    except Exception as error:  # the grader is told, whatever happened here
        end = {"end": "died", "detail": f"the grading executor's relay failed ({type(error).__name__}: {error})" + __import__("traceback").format_exc()}
    relay.stop()
    os.write(end_channel, json.dumps(end).encode())


def _init(request, from_relay, to_relay, sandboxed, kit):
    """pid 1 of the notebook: reaps what is left to it and ends when the notebook's process ends (which, in a PID
    namespace, ends every process of the notebook)."""
    if not sandboxed:
        os.setpgid(0, 0)
    notebook = os.fork()
    if notebook == 0:
        try:
            _notebook(request, from_relay, to_relay, sandboxed, kit)
        finally:
            os._exit(0)
    os.close(from_relay)
    os.close(to_relay)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == notebook:
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


class Relay:
    """The grader's side of one notebook, inside the sandbox but out of the notebook's reach: sends each cell's source
    when the cell runs, reads the notebook's messages within the output limits (the oversized part of a message is
    skipped as it streams), and forwards the well-formed ones to the grader."""

    def __init__(self, init, to_notebook, from_notebook, cell_timeout, sandboxed):
        self.init, self.to_notebook, self.from_notebook = init, to_notebook, from_notebook
        self.cell_timeout, self.sandboxed = cell_timeout, sandboxed
        self.pending, self.total = bytearray(), 0  # bytes read and not yet a message; bytes of messages kept

    def message(self):
        """The notebook's next message, "oversized" for one longer than CELL_MESSAGE_LIMIT (its bytes are read and
        dropped), None at its end."""
        skipped = searched = 0  # searched: bytes of `pending` known to hold no newline, so reading stays linear
        while True:
            newline = self.pending.find(b"\n", searched)
            searched = len(self.pending)
            if newline >= 0:
                line = bytes(self.pending[:newline])
                del self.pending[:newline + 1]
                if skipped:
                    return "oversized"
                self.total += len(line)
                if self.total > NOTEBOOK_MESSAGE_LIMIT:
                    return "flood"
                try:
                    return json.loads(line)
                except ValueError:
                    return "malformed"
            if len(self.pending) > CELL_MESSAGE_LIMIT:
                skipped += len(self.pending)
                self.pending.clear()
                if skipped > 64 * CELL_MESSAGE_LIMIT:
                    return "flood"
            ready, _, _ = select.select([self.from_notebook], [], [], self.cell_timeout + 10)
            if not ready:
                return "silent"
            chunk = os.read(self.from_notebook, 1 << 20)
            if not chunk:
                return None
            self.pending += chunk

    def expect(self, kinds, index):
        """The next message, checked to be one of `kinds` for cell `index`; otherwise the end of the notebook."""
        message = self.message()
        if message == "oversized" and "cell" in kinds:
            return {"cell": index, "outputs": [{
                "output_type": "error", "ename": "OutputLimitError", "traceback": [],
                "evalue": f"the outputs of this cell passed the grader's limit of {CELL_MESSAGE_LIMIT >> 20} MB and "
                          "were dropped: print or display less"}]}
        if message is None:
            raise Ended(None)
        if message == "silent":
            raise Ended({"end": "killed", "detail": f"a cell ran for more than {self.cell_timeout} s and could not "
                                                    "be interrupted, so the notebook's process was stopped"})
        if message == "flood":
            raise Ended({"end": "stopped", "detail": f"the notebook's outputs passed the grader's limit of "
                                                     f"{NOTEBOOK_MESSAGE_LIMIT >> 20} MB, so it was stopped"})
        kind = next((k for k in kinds if isinstance(message, dict) and _well_formed(message, k, index)), None)
        if kind is None:
            raise Ended({"end": "died", "detail": "the notebook's process sent a malformed message to the grader"})
        return message

    def run(self, sources, tests):
        try:
            for index, source in enumerate(sources):
                if index in tests:
                    self.test_cell(index, source)
                else:
                    _send_framed(self.to_notebook, {"run": index, "source": source})
                    _write_line(1, self.expect(["cell"], index))
            _send_framed(self.to_notebook, {"end": True})
            return {"end": "ok"}
        except Ended as ended:
            return ended.end or {"end": "died", "detail": self.exit_detail()}
        except BrokenPipeError:
            return {"end": "died", "detail": self.exit_detail()}

    def test_cell(self, index, source):
        """A test cell runs in a throwaway fork of the notebook; its source goes to that fork alone, and only while
        nothing else of the notebook runs (no other process or thread could read it on the way)."""
        _send_framed(self.to_notebook, {"fork": index})
        message = self.expect(["ready", "forked"], index)
        if "forked" in message:
            return _write_line(1, _cell_error(index, "DeadKernelError", "the process of this test cell ended before "
                                              f"the cell ran ({message['forked']})"))
        crowd = self.others_running()
        _send_framed(self.to_notebook, {"run": index, "source": source} if not crowd else {"refused": index})
        if crowd:
            _write_line(1, _cell_error(index, "TestCellRefused", "the hidden checks of a test cell run only while "
                                       f"nothing else of the notebook runs, and {crowd}: stop background threads "
                                       "and processes (or wait for them) before the tests"))
        else:
            result = self.expect(["cell", "forked"], index)
            if "forked" in result:
                return _write_line(1, _cell_error(index, "DeadKernelError", "the process of this test cell ended "
                                                  f"while the cell ran ({result['forked']}): os._exit or a crash?"))
            _write_line(1, result)
        self.expect(["forked"], index)
        # The names the visible tests make stay in the notebook, as in a kernel (a later test cell may use them): the
        # visible part runs again in the notebook's own process, and what it shows is dropped (the fork's counts).
        visible = _visible_part(source)
        if visible.strip():
            _send_framed(self.to_notebook, {"run": index, "source": visible})
            self.expect(["cell"], index)

    def others_running(self):
        """What runs in the notebook besides its init, the notebook's process and the test cell's fork: "" when
        nothing does. Zombies do not count."""
        if not self.sandboxed:
            return ""
        tree = _process_tree()
        chain, pid = [self.init], self.init
        for _ in range(2):  # init > notebook > the test cell's fork, each the only child of the one before
            children = [c for c in tree.get(pid, ()) if _state(c) != "Z"]
            if len(children) != 1:
                return f"{len(children)} processes were found where one was expected"
            pid = children[0]
            chain.append(pid)
        if tree.get(pid):
            return "the test cell's process has children"
        threads = {p: _threads(p) for p in chain[:2]}
        if any(count != 1 for count in threads.values()):
            return f"the notebook's process runs {threads[chain[1]]} threads"
        return ""

    def exit_detail(self):
        try:
            _, status = os.waitpid(self.init, 0)
        except ChildProcessError:
            return "the notebook's process ended"
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        if code > 128:
            return f"the notebook's process was killed by signal {code - 128}"
        return f"the notebook's process exited with code {code} (os._exit or sys.exit?)"

    def stop(self):
        """Every process of the notebook ends with it, before the next notebook starts."""
        _signal(self.init, signal.SIGKILL)  # pid 1 of the notebook's PID namespace: the kernel ends the rest
        if not self.sandboxed:
            try:
                os.killpg(self.init, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(self.init, 0)
        except ChildProcessError:
            pass


class Ended(Exception):
    def __init__(self, end):
        self.end = end


def _well_formed(message, kind, index):
    if kind == "cell":
        return (set(message) == {"cell", "outputs"} and message["cell"] == index
                and type(message["cell"]) is int and isinstance(message["outputs"], list)
                and all(isinstance(o, dict) and o.get("output_type") in ("stream", "display_data", "execute_result",
                                                                         "error") for o in message["outputs"]))
    return set(message) == {kind} and (kind == "forked" and isinstance(message[kind], str) or message[kind] == index)


def _visible_part(source):
    """A test cell's source without its hidden regions (the probe's plan, a stand-in's table)."""
    lines, hidden = [], False
    for line in source.splitlines():
        if line.strip() == HIDDEN_BEGIN:
            hidden = True
        elif line.strip() == HIDDEN_END:
            hidden = False
        elif not hidden:
            lines.append(line)
    return "\n".join(lines)


def _cell_error(index, ename, evalue):
    return {"cell": index, "outputs": [{"output_type": "error", "ename": ename, "evalue": evalue,
                                        "traceback": [f"{ename}: {evalue}"]}]}


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def _threads(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _virtual_memory():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _notebook(request, from_relay, to_relay, sandboxed, kit):
    """The notebook's own process: runs the cells the relay sends, one at a time, as the student."""
    import gc
    import posix
    resource, plt, shell, DisplayHook, DisplayPublisher = kit
    if sandboxed:
        _drop_capabilities()
        _refuse_calls()
    # The inherited descriptors 0-2 are the zygote's pipes to the grader: the notebook talks only to its relay.
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1, 2):
        os.dup2(null, descriptor)
    os.close(null)
    limit = _virtual_memory() + request["memory_limit"]
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    files = min(MAX_FILES, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    run_cell = _cell_runner(request["cell_timeout"], plt, shell, DisplayHook, DisplayPublisher)
    fork, waitpid, sigmask = posix.fork, posix.waitpid, signal.pthread_sigmask  # as they are now, whatever a cell does

    def read():
        return _read_framed(from_relay) or os._exit(0)

    while True:
        message = read()
        if "end" in message:
            return
        if "run" in message:
            _write_line(to_relay, {"cell": message["run"], "outputs": run_cell(message["source"])})
            continue
        index = message["fork"]
        gc.disable()
        sys.settrace(None)
        sys.setprofile(None)
        sigmask(signal.SIG_BLOCK, signal.valid_signals())
        child = fork()
        if child == 0:
            try:
                _test_cell(index, read, to_relay, from_relay, sandboxed, run_cell)
            finally:
                os._exit(0)
        _, status = waitpid(child, 0)
        while pending := signal.sigpending():  # what the test cell's process signalled is not delivered
            signal.sigtimedwait(pending, 0)
        sigmask(signal.SIG_UNBLOCK, signal.valid_signals())
        gc.enable()
        _write_line(to_relay, {"forked": _status_text(status)})


def _test_cell(index, read, to_relay, from_relay, sandboxed, run_cell):
    """A test cell's throwaway process: mount and IPC namespaces of its own with an empty /tmp and /dev/shm (no file,
    socket or IPC object of the notebook's), no descriptor or shared memory of the notebook's, and no way to signal
    the notebook's process or reach its abstract sockets (Landlock scopes, or a network namespace of its own where the
    kernel lacks them; the signals it sends are dropped anyway): nothing of its hidden checks outlives it."""
    if sandboxed:
        scoped = _landlock_scopes_available()
        _new_namespaces(CLONE_NEWNS | CLONE_NEWIPC | (0 if scoped else CLONE_NEWNET))
        _fresh_tmpfs("/tmp")
        _fresh_tmpfs("/dev/shm")
        os.chdir("/tmp")
        _drop_capabilities()
        if scoped:
            _landlock_scope()
    _close_descriptors(keep={from_relay, to_relay})
    _unmap_shared_memory()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signal.valid_signals())
    _write_line(to_relay, {"ready": index})
    message = read()
    if "run" in message:
        _write_line(to_relay, {"cell": index, "outputs": run_cell(message["source"])})
    os._exit(0)


LANDLOCK_CREATE_RULESET, LANDLOCK_RESTRICT_SELF = 444, 446  # x86_64 and aarch64 share these syscall numbers
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, LANDLOCK_SCOPE_SIGNAL = 1, 2  # Landlock ABI 6 (Linux 6.12)


def _landlock_scopes_available():
    return _libc().syscall(LANDLOCK_CREATE_RULESET, None, 0, 1) >= 6  # 1: LANDLOCK_CREATE_RULESET_VERSION


def _landlock_scope():
    """This process and its children can no longer signal, or connect to the abstract sockets of, any process
    outside them."""
    import ctypes

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    libc = _libc()
    attr = RulesetAttr(0, 0, LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL)
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        _check(ruleset, "landlock_create_ruleset")
    try:
        _check(libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _cell_runner(cell_timeout, plt, shell, DisplayHook, DisplayPublisher):
    """A function that runs one cell's source in the shell and returns its outputs, within the limits (the friendly
    ones, which say what was cut; the relay holds the notebook to the hard ones)."""
    outputs = []

    class Stream(io.TextIOBase):
        def __init__(self, name):
            self.name, self.size = name, 0

        def writable(self):
            return True

        def write(self, text):
            if not isinstance(text, str):
                raise TypeError(f"write() argument must be str, not {type(text).__name__}")
            self.size += len(text)
            if self.size > OUTPUT_LIMIT:
                if self.size - len(text) <= OUTPUT_LIMIT:
                    text = text[:max(0, OUTPUT_LIMIT - self.size + len(text))] + "\n[output truncated by the grader]\n"
                else:
                    return len(text)
            if outputs and outputs[-1]["output_type"] == "stream" and outputs[-1]["name"] == self.name:
                outputs[-1]["text"] += text
            else:
                outputs.append({"output_type": "stream", "name": self.name, "text": text})
            return len(text)

    shown = {"cell": 0, "notebook": 0}

    def keep_display(output):
        """Append a display output unless it passes the cell's or the notebook's cap; then say so, once a cell."""
        try:
            size = len(json.dumps(output, default=str))
        except (TypeError, ValueError, RecursionError):
            size = DISPLAY_LIMIT + 1
        if shown["cell"] + size > DISPLAY_LIMIT or shown["notebook"] + size > NOTEBOOK_DISPLAY_LIMIT:
            if shown["cell"] <= DISPLAY_LIMIT:
                outputs.append({"output_type": "stream", "name": "stdout", "text": "[a display larger than the "
                                "grader's limit was dropped]\n"})
            shown["cell"] = DISPLAY_LIMIT + 1
            return
        shown["cell"] += size
        shown["notebook"] += size
        outputs.append(output)

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            keep_display({"output_type": "display_data", "data": data, "metadata": metadata or {}})

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            keep_display({"output_type": "execute_result", "data": format_dict, "metadata": md_dict or {},
                          "execution_count": self.prompt_count})

        def finish_displayhook(self):
            pass

    shell.display_pub = Publisher(shell=shell, parent=shell)
    shell.displayhook = shell.display_trap.hook = Hook(shell=shell, cache_size=shell.cache_size, parent=shell)

    def show_traceback(etype, evalue, stb):
        outputs.append({"output_type": "error", "ename": getattr(etype, "__name__", str(etype)),
                        "evalue": str(evalue), "traceback": [line[:10_000] for line in stb][-50:]})

    shell._showtraceback = show_traceback
    stdout, stderr = Stream("stdout"), Stream("stderr")

    def on_alarm(signum, frame):
        raise _CellTimeout()

    def run_cell(source):
        outputs.clear()
        sys.stdout, sys.stderr = stdout, stderr
        stdout.size = stderr.size = shown["cell"] = 0
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(cell_timeout)
        try:
            result = shell.run_cell(source, store_history=True)
        except _CellTimeout:
            result = None
        finally:
            signal.alarm(0)
        for number in plt.get_fignums():
            figure = plt.figure(number)
            png = io.BytesIO()
            figure.savefig(png, format="png", bbox_inches="tight")
            keep_display({"output_type": "display_data", "metadata": {},
                          "data": {"image/png": base64.b64encode(png.getvalue()).decode(),
                                   "text/plain": f"<Figure size {figure.get_size_inches()}>"}})
        plt.close("all")
        error = None if result is None else (result.error_before_exec or result.error_in_exec)
        if result is None or isinstance(error, _CellTimeout):
            outputs[:] = [o for o in outputs if o.get("ename") != "_CellTimeout"]
            message = (f"the cell ran for more than {cell_timeout} s and was stopped: look for a loop "
                       "that never ends in the code it runs")
            outputs.append({"output_type": "error", "ename": "CellTimeoutError", "evalue": message,
                            "traceback": [f"CellTimeoutError: {message}"]})
        elif error is not None and not any(o["output_type"] == "error" for o in outputs):
            outputs.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error),
                            "traceback": [f"{type(error).__name__}: {error}"]})
        return list(outputs)

    return run_cell


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    _serve()
