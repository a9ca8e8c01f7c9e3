"""The grading guard: hidden tests run on the torch, numpy and checks they were written for.

Loaded into the kernel before the first cell (`--IPKernelApp.extensions` in nbgrader_config.py, and by the course's
forking executor), it keeps a copy of everything a check relies on. Before each cell that contains hidden tests
(only the instructor's autograded copy has them), it puts back whatever a student cell replaced (torch.allclose,
numpy, the course's check helpers, the shell's error display, global hooks and torch function modes) and notes it.
At the end of that cell it checks again: if code called by the tests replaced something while they ran, the cell
fails with GuardError, because its checks can no longer be trusted.

Student code shares the kernel with the tests, so a student who attacks the guard itself (through gc or ctypes)
is out of its reach; that is why grading also runs in a sandbox where the submission can read no solution and
write no grade. Every restore is recorded in the cell's output so instructors see who tried.
"""
import builtins
import math
import operator
import sys

import numpy
import torch
import torch.nn
import torch.nn.functional
import torch.nn.modules.module

from attention_course import checks, data

HIDDEN_MARK = "### BEGIN HIDDEN TESTS"
TAMPER_MARK = "grading guard:"

_MODULES = [math, operator, numpy, torch, torch.nn, torch.nn.functional, torch.nn.init, torch.linalg, torch.testing,
            torch.autograd, torch.nn.modules.module, checks, data, sys.modules[__name__]]
_CLASSES = [torch.Tensor, torch.nn.Module, torch.nn.Linear, torch.nn.Dropout, torch.nn.ModuleList,
            torch.nn.Parameter, torch.nn.Sequential]
# IPython itself swaps some builtins and sys.displayhook around each cell, so only these are watched.
_BUILTINS = ["print", "isinstance", "len", "abs", "all", "any", "bool", "int", "float", "str", "repr", "type", "id",
             "range", "list", "tuple", "dict", "set", "sum", "max", "min", "round", "sorted", "zip", "enumerate",
             "iter", "next", "getattr", "hasattr", "__import__", "AssertionError", "Exception", "ValueError"]
_SYS_NAMES = ["stdout", "stderr"]  # IPython swaps sys.excepthook while a cell runs
_SHELL_NAMES = ["showtraceback", "_showtraceback", "showsyntaxerror", "CustomTB", "custom_exceptions", "run_cell",
                "run_cell_async", "run_code", "run_ast_nodes", "transform_cell", "ex", "ev", "system"]
# Names a test cell reads from the notebook: the setup cell binds them, a student cell may rebind them.
_NAMESPACE = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math,
              **{name: getattr(checks, name) for name in ("CheckFailed", "fail", "expect", "expect_tensor",
                                                          "expect_shape", "expect_close", "expect_runs",
                                                          "expect_value_error")}}
_HOOK_DICTS = [name for name in dir(torch.nn.modules.module) if name.startswith("_global_") and
               isinstance(getattr(torch.nn.modules.module, name), dict)]


class GuardError(AssertionError):
    """The code under test replaced something the checks rely on while they ran."""


def _label(owner):
    return getattr(owner, "__name__", type(owner).__name__)


class Guard:
    def __init__(self, shell):
        self.shell = shell

    def snapshot(self):
        self.dicts = [(m, dict(vars(m))) for m in _MODULES]
        self.classes = [(c, dict(vars(c))) for c in _CLASSES + [c for c in type(self.shell).__mro__ if c is not object]]
        self.builtins = {name: getattr(builtins, name) for name in _BUILTINS}
        self.sys = {name: getattr(sys, name, None) for name in _SYS_NAMES}
        self.modules = {m.__name__: m for m in _MODULES}
        self.shell_attrs = {n: self.shell.__dict__[n] for n in _SHELL_NAMES if n in self.shell.__dict__}

    def changes(self):
        """What differs from the pristine copy, as readable names."""
        found = []
        for owner, pristine in self.dicts + self.classes:
            current = vars(owner)
            for name, value in pristine.items():
                if current.get(name, _MISSING) is not value:
                    found.append(f"{_label(owner)}.{name}")
            for name, value in current.items():
                if name not in pristine and not isinstance(value, type(sys)):  # a lazily imported submodule
                    found.append(f"{_label(owner)}.{name}")
        found += [f"builtins.{n}" for n, v in self.builtins.items() if getattr(builtins, n, None) is not v]
        found += [f"sys.{n}" for n, v in self.sys.items() if getattr(sys, n, None) is not v]
        found += [f"sys.modules[{n!r}]" for n, m in self.modules.items() if sys.modules.get(n) is not m]
        found += [f"the shell's {n}" for n in _SHELL_NAMES
                  if self.shell.__dict__.get(n, _MISSING) is not self.shell_attrs.get(n, _MISSING)]
        found += [f"a global module hook ({n})" for n in _HOOK_DICTS if getattr(torch.nn.modules.module, n)]
        if torch._C._len_torch_function_stack():
            found.append("an active torch function mode")
        namespace = self.shell.user_ns
        found += [f"the notebook's name {n!r}" for n, v in _NAMESPACE.items()
                  if n in namespace and namespace[n] is not v]
        return found

    def restore(self):
        for owner, pristine in self.dicts + self.classes:
            current = vars(owner)
            for name in [n for n, v in current.items() if n not in pristine and not isinstance(v, type(sys))]:
                delattr(owner, name)
            for name, value in pristine.items():
                if current.get(name, _MISSING) is not value:
                    if isinstance(current, dict):
                        current[name] = value
                    else:
                        type.__setattr__(owner, name, value)
        for name, value in self.sys.items():
            setattr(sys, name, value)
        for name, value in self.builtins.items():
            setattr(builtins, name, value)
        sys.modules.update(self.modules)
        for name in _SHELL_NAMES:
            self.shell.__dict__.pop(name, None)
        self.shell.__dict__.update(self.shell_attrs)
        for name in _HOOK_DICTS:
            getattr(torch.nn.modules.module, name).clear()
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
        for name, value in _NAMESPACE.items():
            if name in self.shell.user_ns:
                self.shell.user_ns[name] = value

    def before_cell(self, info):
        if HIDDEN_MARK not in (info.raw_cell or ""):
            return
        changed = self.changes()
        if changed:
            self.restore()
            print(f"{TAMPER_MARK} before these tests, the grader put back what earlier cells replaced: "
                  + ", ".join(changed[:8]))

    def check_after_tests(self):
        """Appended to every cell with hidden tests: fails it if the code under test replaced what checks use."""
        changed = self.changes()
        if changed:
            self.restore()
            raise GuardError(f"{TAMPER_MARK} the code under test replaced {', '.join(changed[:8])} while the checks "
                             "ran, so this cell's checks cannot be trusted and it gets no points. Solutions never "
                             "need to change torch, numpy or the course's checks.")


_MISSING = object()


def _append_check(lines):
    text = "".join(lines)
    if HIDDEN_MARK not in text:
        return lines
    return [*lines, "\n", "__import__('attention_course.guard').guard.ACTIVE.check_after_tests()\n"]


ACTIVE = None


def load_ipython_extension(shell):
    """Install the guard in this shell (idempotent)."""
    global ACTIVE
    if ACTIVE is not None:
        return
    checks.show_failed_checks_briefly(shell)  # before the snapshot: it is part of what the guard keeps
    ACTIVE = Guard(shell)
    ACTIVE.snapshot()
    shell.events.register("pre_run_cell", ACTIVE.before_cell)
    shell.input_transformers_post.append(_append_check)
