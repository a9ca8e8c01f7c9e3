"""The course's notebook executor for nbgrader: a warm, sandboxed parent that forks a fresh child per notebook.

Starting a Jupyter kernel and importing torch takes seconds per notebook; forking a process that has already imported
them takes milliseconds. `ForkingExecute` replaces nbgrader's `Execute` step (see nbgrader_config.py), so sanitising,
restoring test cells, scoring, the gradebook, feedback and formgrader stay nbgrader's own.

    nbgrader process ── ForkingExecute ──pipes──> zygote (bubblewrap sandbox: torch, IPython, student package)
                                                    └─ fork per notebook: cells in order in an IPython shell,
                                                       outputs and errors sent back cell by cell

The zygote sees the Python environment, the student package and this file, read-only, and nothing else of the
course: no source/, no solutions, no judges, no gradebook, no other submission. It has no network and writes only to its own /tmp.
Each child also runs under a memory limit and a per-cell timeout; a crash or os._exit ends that child only.
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
WATCH_INTERVAL = 0.05  # seconds between two looks at a notebook's processes


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
               "--uid", "65534", "--gid", "65534", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
               "--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    system = ["/usr", "/lib", "/lib64", "/bin", "/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime", "/etc/fonts"]
    for path in system:
        command += ["--ro-bind-try", path, path]
    for path in sorted(prefixes) + [student_package_dir()]:
        command += ["--ro-bind", path, path]
    return command + ["--ro-bind", THIS_FILE, SANDBOXED_FILE]


class Zygote:
    """The warm parent, started once per grading process."""

    def __init__(self, sandbox=True, log=None):
        python = sys.executable
        env = {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/matplotlib", "PYTHONHASHSEED": "0",
               "COURSE_SANDBOXED": "1"}
        command = sandbox_command(python) if sandbox else None
        self.sandboxed = command is not None and self._sandbox_works(command, python)
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
        self.buffer = b""
        self.errors = tempfile.TemporaryFile()  # the zygote's own stderr: kept for the message below
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                        env=env, cwd=None if self.sandboxed else os.environ.get("TMPDIR", "/tmp"))
        ready = self._read(timeout=300)
        self.own = {self.process.pid, *_descendants(self.process.pid)}  # bubblewrap and the zygote
        # A notebook's processes share the zygote's pages; their share counts towards the tree's memory, so the
        # tree may hold the memory limit plus that much.
        self.size = sum(map(_memory, self.own))
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

    @staticmethod
    def _sandbox_works(command, python):
        try:
            probe = subprocess.run(command + [python, "-c", "print('ok')"], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return probe.returncode == 0 and probe.stdout.strip() == b"ok"

    def alive(self):
        return self.process.poll() is None

    def _read(self, timeout, watch=None):
        """The next message, None after `timeout` seconds of silence; `watch()` runs while it waits."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
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
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def notebook_processes(self):
        """Every process of the running notebook: the executor's descendants but its own, including any that left
        the notebook's process group or session."""
        return [pid for pid in _descendants(self.process.pid) if pid not in self.own]

    def watch(self, memory_limit):
        """Hold the notebook's whole tree of processes to the limits; stop all of it and say why when it is over."""
        processes = self.notebook_processes()
        if len(processes) > MAX_PROCESSES:
            self.stopped = f"the notebook started more than {MAX_PROCESSES} processes, so all of them were stopped"
        elif sum(map(_memory, processes)) > memory_limit + self.size:
            self.stopped = (f"the notebook's processes together used more than the memory limit "
                            f"({memory_limit / (1 << 30):.1f} GiB), so all of them were stopped (MemoryError)")
        else:
            return
        for pid in processes:
            _signal(pid, signal.SIGKILL)

    def run(self, sources, cell_timeout, memory_limit):
        """Run the sources in a fresh child; yield its messages ({"cell": i, ...}, then {"end": ...})."""
        request = {"sources": sources, "cell_timeout": cell_timeout, "memory_limit": memory_limit}
        self.stopped = None
        self.process.stdin.write((json.dumps(request) + "\n").encode())
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

    def close(self):
        if self.alive():
            self.process.stdin.close()
            self.process.wait(timeout=10)


def _descendants(root):
    """The pids of every process below `root`, from /proc (the grading machine's own view)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


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
        for message in zygote(self.sandbox, self.log).run([c.source for c in code_cells], self.timeout,
                                                          self.memory_limit):
            if "end" in message:
                end = message
                break
            cell = code_cells[message["cell"]]
            cell.outputs = [NotebookNode(output) for output in message["outputs"]]
            cell.execution_count = message["cell"] + 1
        flags = set()
        if end["end"] != "ok":
            flags.add("out of memory" if end["end"] == "stopped" and "memory" in end["detail"] else "crashed")
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
                if output.get("ename") == "MemoryError" or "DefaultCPUAllocator" in text:
                    flags.add("out of memory")
        EVENTS.append({"student": resources.get("nbgrader", {}).get("student"), "flags": sorted(flags),
                       "seconds": time.perf_counter() - started,
                       "sandboxed": _ZYGOTE is not None and _ZYGOTE.sandboxed})
        return nb, resources


# ---------------------------------------------------------------------------------------------------------------
# zygote side (inside the sandbox)
# ---------------------------------------------------------------------------------------------------------------

class _CellTimeout(BaseException):
    """Raised in a cell that runs past its time; BaseException so that `except Exception` cannot swallow it."""


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
    # descriptors under /proc/<pid>/fd of the zygote or of another notebook.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4

    from traitlets.config import Config
    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "NoColor"
    shell = InteractiveShell.instance(config=config)
    torch.ones(2, 2) @ torch.ones(2, 2)  # warm up the kernels once, not in every child
    out = sys.stdout.buffer
    sys.stdout = open(os.devnull, "w")  # nothing but messages goes to the worker
    out.write(b'{"ready": true}\n')
    out.flush()
    kept = set(os.listdir(tempfile.gettempdir()))
    for line in sys.stdin.buffer:
        request = json.loads(line)
        _reap()  # processes of the last notebook, stopped by the grader, that were left to this namespace's init
        # Every notebook starts with the /tmp the zygote started with: nothing an earlier notebook left there (all of
        # whose processes the grader has stopped by now) can be found or imported by this one.
        for name in set(os.listdir(tempfile.gettempdir())) - kept if os.environ.get("COURSE_SANDBOXED") else ():
            path = os.path.join(tempfile.gettempdir(), name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                _child(request, os.fdopen(write_end, "wb"), resource, plt, shell, DisplayHook, DisplayPublisher)
            finally:
                os._exit(0)
        os.close(write_end)
        _relay(pid, os.fdopen(read_end, "rb"), out, request["cell_timeout"], len(request["sources"]))


def _reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _kill(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _parse(line, cells):
    """A child's message, checked: {"cell": i, "outputs": [...]} or {"end": "ok"}; None when malformed."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if message == {"end": "ok"}:
        return message
    if (not isinstance(message, dict) or set(message) != {"cell", "outputs"} or type(message["cell"]) is not int
            or not 0 <= message["cell"] < cells or not isinstance(message["outputs"], list)
            or not all(isinstance(o, dict) and o.get("output_type") in ("stream", "display_data", "execute_result",
                                                                         "error") for o in message["outputs"])):
        return None
    return message


def _relay(pid, messages, out, cell_timeout, len_sources):
    """Forward the child's messages; kill it if a cell overruns its timeout by far (a loop that catches everything)
    or if it sends anything but well-formed messages."""
    end, buffer = None, b""
    while end is None:
        ready, _, _ = select.select([messages], [], [], cell_timeout + 10)
        if not ready:
            _kill(pid)
            end = {"end": "killed", "detail": f"a cell ran for more than {cell_timeout} s and could not be "
                                              "interrupted, so the notebook's process was stopped"}
            break
        chunk = os.read(messages.fileno(), 1 << 20)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            message = _parse(line, len_sources)
            if message is None:
                _kill(pid)
                end = {"end": "died", "detail": "the notebook's process sent a malformed message to the grader"}
                break
            if "end" in message:
                end = message
            else:
                out.write(json.dumps(message).encode() + b"\n")
        if end is not None:
            break
    messages.close()
    _, status = os.waitpid(pid, 0)
    _kill(pid)  # what the notebook left running in its process group ends with it, before the next notebook
    if end is None:
        if os.WIFSIGNALED(status):
            detail = f"the notebook's process was killed by signal {os.WTERMSIG(status)}"
        else:
            detail = f"the notebook's process exited with code {os.WEXITSTATUS(status)} (os._exit or sys.exit?)"
        end = {"end": "died", "detail": detail}
    out.write((json.dumps(end) + "\n").encode())
    out.flush()


def _virtual_memory():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(request, channel, resource, plt, shell, DisplayHook, DisplayPublisher):
    import tempfile
    os.setpgid(0, 0)
    # The inherited descriptors 0-2 are the zygote's pipes to the grader: a notebook that wrote to them could forge
    # the messages of its own and of later notebooks. It talks only through `channel`.
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1, 2):
        os.dup2(null, descriptor)
    os.chdir(tempfile.mkdtemp(prefix="notebook-"))
    limit = _virtual_memory() + request["memory_limit"]
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
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
    sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")

    def on_alarm(signum, frame):
        raise _CellTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    for index, source in enumerate(request["sources"]):
        outputs.clear()
        sys.stdout.size = sys.stderr.size = shown["cell"] = 0
        signal.alarm(request["cell_timeout"])
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
            message = (f"the cell ran for more than {request['cell_timeout']} s and was stopped: look for a loop "
                       "that never ends in the code it runs")
            outputs.append({"output_type": "error", "ename": "CellTimeoutError", "evalue": message,
                            "traceback": [f"CellTimeoutError: {message}"]})
        elif error is not None and not any(o["output_type"] == "error" for o in outputs):
            outputs.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error),
                            "traceback": [f"{type(error).__name__}: {error}"]})
        channel.write((json.dumps({"cell": index, "outputs": outputs}, default=str) + "\n").encode())
        channel.flush()
    channel.write(b'{"end": "ok"}\n')
    channel.flush()


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    _serve()
