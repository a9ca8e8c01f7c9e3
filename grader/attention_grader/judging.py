"""Judges: the half of a hidden test that decides, in the grading process, where no student code runs.

Two nbgrader preprocessors around the execute step (nbgrader_config.py):

- `PlanHiddenChecks` (before execute) draws each student's hidden inputs from the instructor's secret, the student id
  and the step, asks the step's judges (attention_grader/judges/stepNN.py) for the checks of every test cell, and
  replaces the cell's hidden region with one probe call carrying the plan: inputs and calls, plain data, no answer.
- `JudgeCells` (after execute) takes the records the probe published, runs the same plan on the reference (the
  answer key of source/, run here in float64), compares, and rewrites the cell's outputs to the verdicts: the
  messages, and an error output when a check failed. nbgrader's own SaveAutoGrades then scores the cell from those
  outputs, so a cell earns its points only when the kernel raised nothing in it and every judge passed. Displayed
  values and whatever student code printed while the hidden checks ran are dropped.
"""
import ast
import functools
import hashlib
import hmac
import importlib
import json
import math
import os
import re
import secrets
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import torch
from nbformat import NotebookNode
from traitlets import Unicode

from attention_course.checks import error_hint, shape_difference, specific_error_hint, value_error_hint
from attention_course.probe import (BEGIN_MIME, RECORDS_MIME, VISIBLE_FAILED_MIME, Interpreter, PlanError,
                                    decode_tensor, encode, encode_tensor)

try:
    from nbgrader.preprocessors import NbGraderPreprocessor
except ImportError:  # pragma: no cover
    NbGraderPreprocessor = object

HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
RECORDS_LIMIT = 4_000_000  # characters of records one cell may publish
EVENTS = []  # {"student", "flags", "judge_seconds"} per judged notebook, read by the class grader


# ---------------------------------------------------------------------------------------------------------------
# writing checks (used by the judges of each step)
# ---------------------------------------------------------------------------------------------------------------

class Ref:
    """A value in the notebook: a register, a global name, or an attribute or item of one."""

    def __init__(self, spec):
        self.spec = spec

    def attr(self, name):
        return Ref({"attr": [self.spec, name]})

    def __getitem__(self, index):
        return Ref({"item": [self.spec, index]})


def G(name):
    """The notebook's global `name` (the student's function or class)."""
    return Ref({"global": name})


def generator(seed):
    """A torch.Generator seeded in the notebook (for functions that take `generator=`)."""
    return Ref({"generator": seed})


def as_data(value):
    if isinstance(value, Ref):
        return value.spec
    if isinstance(value, torch.Tensor):
        return encode(value)
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [as_data(item) for item in value]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot send {type(value).__name__} to a probe")


@dataclass
class Expect:
    """How one record is compared: what it is called in a message, the likely mistake, and the tolerance."""
    label: str
    hint: str = ""
    atol: float = 1e-4
    rtol: float = 1e-4


class Program:
    """The operations of one check, and how each record it makes is judged."""

    def __init__(self):
        self.ops, self.expects = [], []

    def _register(self, op):
        name = f"r{len(self.ops)}"
        self.ops.append({**op, "set": name})
        return Ref({"ref": name})

    def tensor(self, value):
        return self._register({"value": as_data(value)})

    def call(self, function, *args, grad=False, measure=False, trace=None, inputs_of=None, catch=False, **kwargs):
        """function(*args, **kwargs). The probe also records, in this order: with measure=True the memory the call
        took; with trace=i the aten operations it ran and the elements of args[i] each one read; with inputs_of=
        {label: module} the shapes of the inputs each module saw; with catch=True what it raised (or None), and the
        check goes on (the result is then None)."""
        op = {"call": as_data(function), "args": [as_data(a) for a in args],
              "kwargs": {k: as_data(v) for k, v in kwargs.items()}}
        if grad:
            op["grad"] = True
        for wanted, key, value, label in ((measure, "measure", True, "its memory"),
                                          (trace is not None, "trace", trace, "the operations it ran"),
                                          (inputs_of, "inputs_of", {k: as_data(v) for k, v in (inputs_of or {}).items()},
                                           "the inputs its layers saw"),
                                          (catch, "catch", True, "what it raised")):
            if wanted:
                op[key] = value
                self.expects.append(Expect(label))
        return self._register(op)

    def seed(self, value):
        self.ops.append({"seed": int(value)})

    def load(self, module, state, label="its parameters", hint=""):
        self.ops.append({"load": as_data(module), "state": {k: as_data(v) for k, v in state.items()}})
        self.expects.append(Expect(label, hint))

    def record(self, value, label, hint="", kind="value", atol=1e-4, rtol=1e-4):
        self.ops.append({"record": as_data(value), "as": kind})
        self.expects.append(Expect(label, hint, atol, rtol))


@dataclass
class Check:
    """One hidden check: `what` names it for the student (call and input shapes, never the values).

    By default the student's records must match the reference's (same program, reference namespace, float64).
    `judge(got, want)` replaces that comparison; `source_rule(sources)` judges the submitted code instead of running
    it (sources: {grade_id: source of each solution cell}). Each returns a message for the student, or None.
    `mistakes` are known mistakes, (hint, {global name: replacement}): when the check fails and the student's records
    are what the answer key computes with those names replaced, the message names that mistake.
    """
    what: str
    program: Program = None
    judge: object = None
    source_rule: object = None
    mistakes: tuple = ()


def call_check(what, function, *args, hint="", atol=1e-4, rtol=1e-4, check_inputs=True, **kwargs):
    """The common check: call a function on tensors, compare its result, and check that it left its inputs alone."""
    program = Program()
    refs = [program.tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    result = program.call(G(function), *refs, **kwargs)
    program.record(result, "the result", hint, atol=atol, rtol=rtol)
    if check_inputs:
        for ref, arg in zip(refs, args):
            if isinstance(arg, torch.Tensor):
                program.record(ref, "its input after the call",
                               "it changed its input: use out-of-place operations (x - m, not x -= m or x.sub_(m))",
                               atol=0, rtol=0)
    return Check(what, program)


class Inputs:
    """The hidden inputs of one student, step and cell: a generator seeded from the instructor's secret."""

    def __init__(self, seed):
        self.generator = torch.Generator().manual_seed(seed)

    def randn(self, *shape, scale=1.0):
        return scale * torch.randn(*shape, generator=self.generator)

    def rand(self, *shape):
        return torch.rand(*shape, generator=self.generator)

    def randint(self, low, high):
        """An int in [low, high)."""
        return int(torch.randint(low, high, (1,), generator=self.generator))

    def seed(self):
        return self.randint(0, 2 ** 31 - 1)


# ---------------------------------------------------------------------------------------------------------------
# comparing records
# ---------------------------------------------------------------------------------------------------------------

def _kind(record):
    if not isinstance(record, dict) or not record:
        raise PlanError("a record must be an object")
    for kind in ("raised", "type"):  # the two records with two fields
        if kind in record:
            return kind
    if len(record) != 1:
        raise PlanError("a record must be an object with one field")
    return next(iter(record))


def describe(record):
    """What a record holds, in words, for messages (never its values)."""
    kind = _kind(record)
    if kind == "tensor":
        return f"a tensor of shape {tuple(record['tensor']['shape'])}"
    if kind in ("module", "object"):
        return f"a {str(record[kind])[:60]}"
    if kind == "const":
        return repr(record["const"])
    if kind in ("int", "float", "str"):
        return f"a {kind}"
    if kind in ("list", "tuple"):
        return f"a {kind} of {len(record[kind])} items"
    return kind


def _number(record):
    kind = _kind(record)
    if kind == "int":
        return int(record["int"])
    if kind == "float":
        return float(record["float"])
    if kind == "const" and isinstance(record["const"], bool):
        return None
    return None


def compare(got, want, name, expect):
    """None when the student's record `got` matches the reference's `want`; else a message naming the difference."""
    kind = _kind(want)
    if kind == "tensor":
        if _kind(got) != "tensor":
            return f"{name} should be a torch.Tensor, got {describe(got)}"
        expected, actual = decode_tensor(want["tensor"], torch.float64), decode_tensor(got["tensor"], torch.float64)
        if tuple(actual.shape) != tuple(expected.shape):
            difference = shape_difference(expected.shape, actual.shape)
            return (f"{name} has the wrong shape" + (f": {difference}" if difference else "") +
                    f"\n  expected: {tuple(expected.shape)}\n  got:      {tuple(actual.shape)}")
        if expected.dtype == torch.bool and actual.dtype != torch.bool:
            return f"{name} should be a bool tensor, got dtype {actual.dtype}"
        if expected.is_floating_point():
            actual = actual.to(torch.float64)  # an int or bool tensor where floats are due: compared as numbers
        else:
            if not torch.equal(actual.to(expected.dtype), expected):
                return f"{name} has the wrong entries ({int((actual.to(expected.dtype) != expected).sum())} differ)"
            return None
        if actual.numel() == 0:
            return None
        finite_expected, finite_actual = torch.isfinite(expected), torch.isfinite(actual)
        if not torch.equal(finite_actual, finite_expected) and bool(finite_expected.all()):
            return f"{name} contains nan or inf"
        if not torch.allclose(actual, expected, atol=expect.atol, rtol=expect.rtol, equal_nan=True):
            largest = (actual - expected).abs().nan_to_num(nan=math.inf).max().item()
            return f"{name} has the wrong values (largest difference {largest:.3g})"
        return None
    if kind in ("int", "float"):
        number = _number(got)
        if number is None:
            return f"{name} should be a number, got {describe(got)}"
        if kind == "int" and _kind(got) != "int":
            return f"{name} should be an int, got {describe(got)}"
        if not math.isclose(number, _number(want), rel_tol=expect.rtol, abs_tol=expect.atol):
            return f"{name} has the wrong value" + (f" (got {number:,})" if kind == "int" else "")
        return None
    if kind in ("list", "tuple"):
        if _kind(got) not in ("list", "tuple") or len(got[_kind(got)]) != len(want[kind]):
            return f"{name} should be a {kind} of {len(want[kind])} items, got {describe(got)}"
        for index, (g, w) in enumerate(zip(got[_kind(got)], want[kind])):
            problem = compare(g, w, f"item {index} of {name}", expect)
            if problem:
                return problem
        return None
    if kind == "parameters":
        if _kind(got) != "parameters":
            return f"{name}: no parameters were recorded"
        expected = {str(n): tuple(s) for n, s, _, *tied in want["parameters"] if not tied}
        actual = {str(n): tuple(s) for n, s, _, *tied in got["parameters"] if not tied}
        tied = {str(n): str(t[0]) for n, s, _, *t in got["parameters"] if t}
        if actual != expected:
            missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
            shapes = sorted(n for n in set(expected) & set(actual) if expected[n] != actual[n])
            return (f"{name}: the parameters differ from the contract" + (f"; missing: {', '.join(missing)}" if missing
                    else "") + (f"; unexpected: {', '.join(extra[:8])}" if extra else "") +
                    "".join(f"; {n} has shape {actual[n]}, expected {expected[n]}" for n in shapes) +
                    "".join(f"; {n} is the same tensor as {tied[n]} (tied weights): the contract gives it a weight of "
                            "its own" for n in missing if n in tied))
        return None
    if kind == "loaded":
        if _kind(got) != "loaded":
            return f"{name}: the weights could not be loaded"
        unexpected = sorted(set(map(str, got["loaded"]["unexpected"])) - set(want["loaded"]["unexpected"]))
        if unexpected:
            return (f"{name}: the module has no parameter named {', '.join(unexpected[:6])} (load_state_dict uses "
                    "the contract's names, e.g. W_query.weight)\n  likely mistake: a layer missing or named "
                    "otherwise, or created without bias=qkv_bias when the arguments ask for biases")
        return None
    if kind == "state":
        if _kind(got) != "state":
            return f"{name}: no state was recorded"
        for key, value in want["state"].items():
            if key not in got["state"]:
                return f"{name} has no entry {key}"
            problem = compare({"tensor": got["state"][key]}, {"tensor": value}, f"{name} {key}", expect)
            if problem:
                return problem
        return None
    if _kind(got) != kind or got != want:
        return f"{name} should be {describe(want)}, got {describe(got)}"
    return None


OUT_OF_SIGHT = "where the grader sees what runs"  # the words of attention_course/memory.py refusing a thread


def raised_message(what, record, hint=""):
    if record["raised"] == "NotImplementedError":
        return f"{what}: not written yet (replace the `raise NotImplementedError` line)"
    if OUT_OF_SIGHT in str(record["message"]):
        hint = "a thread or a process computes what the grader cannot watch: run everything in the calling thread"
    hint = specific_error_hint(record["message"]) or hint or error_hint(record["message"], str(record["raised"]))
    origins = f"\n  in this call: {str(record['origins'])[:300]}" if record.get("origins") else ""
    return f"{what} raised {str(record['raised'])[:80]}: {str(record['message'])[:300]}{origins}" + (
        f"\n  likely mistake: {hint}" if hint else "")


def default_judge(check, got, want):
    """The student's records must be the reference's, record by record."""
    for index, (expected_record, expect) in enumerate(zip(want, check.program.expects)):
        if index >= len(got):
            return f"{check.what}: stopped before {expect.label}"
        record = got[index]
        if _kind(record) == "raised" and _kind(expected_record) != "raised":
            return raised_message(check.what, record, expect.hint if index == 0 else "")
        if _kind(expected_record) == "raised":  # a known mistake run in the answer key raised: so must the student
            if _kind(record) != "raised" or record["raised"] != expected_record["raised"]:
                return f"{check.what}: {expect.label} differs"
            break
        problem = compare(record, expected_record, f"{check.what}: {expect.label}", expect)
        if problem:
            return problem + (f"\n  likely mistake: {expect.hint}" if expect.hint else "")
    if len(want) > len(check.program.expects) and _kind(want[-1]) == "raised":  # the reference itself raised
        raise RuntimeError(f"the reference raised on {check.what}: {want[-1]}")
    if len(got) > len(want) and _kind(got[len(want)]) == "raised":
        return raised_message(check.what, got[len(want)])
    return None


def expect_value_error(what, program, argument):
    """A check whose program must raise ValueError with a message naming `argument` as a word."""
    import re

    def judge(got, want):
        last = got[-1] if got else None
        if last is None or _kind(last) != "raised":
            return f"{what} did not raise a ValueError\n  likely mistake: {value_error_hint(argument)}"
        if last["raised"] == "NotImplementedError":
            return raised_message(what, last)
        if last["raised"] != "ValueError":
            return (f"{what} raised {str(last['raised'])[:80]} instead of a ValueError\n  likely mistake: "
                    f"{value_error_hint(argument, str(last['raised']))}")
        if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(argument)}(?![A-Za-z0-9_])", str(last["message"])):
            return (f"{what} raised a ValueError whose message does not name `{argument}`\n  likely mistake: say "
                    f"which argument is wrong, e.g. raise ValueError(f\"... {argument}={{...}} ...\")")
        return None

    return Check(what, program, judge=judge)


# ---------------------------------------------------------------------------------------------------------------
# rules about how a part is written, judged from every cell the student can edit
# ---------------------------------------------------------------------------------------------------------------

# What the course's setup cells import (locked cells: the student cannot change them).
SETUP_IMPORTS = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "math": "math",
                 "data": "attention_course.data"}
BUILTINS = {"range", "len", "enumerate", "zip", "min", "max", "sum", "abs", "float", "int", "bool", "list", "tuple",
            "dict", "set", "reversed", "sorted", "isinstance", "print", "round", "divmod", "pow", "any", "all", "map",
            "slice", "str", "repr", "iter", "next", "super", "object", "ValueError", "TypeError", "IndexError",
            "RuntimeError", "NotImplementedError", "AssertionError", "Exception", "KeyError", "ZeroDivisionError",
            "ArithmeticError", "StopIteration", "True", "False", "None", "hasattr", "type", "callable"}
TORCH_CREATION = {"tensor", "as_tensor", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
                  "empty_like", "arange", "linspace", "eye", "tril", "triu", "finfo", "iinfo", "float16", "bfloat16",
                  "float32", "float64", "float", "double", "half", "int64", "long", "int32", "int", "bool", "inf",
                  "nan", "Tensor", "Size", "device", "dtype", "no_grad", "inference_mode", "enable_grad", "is_tensor",
                  "is_floating_point", "numel",
                  "get_default_dtype", "result_type", "promote_types"}
TORCH_MATH = {"exp", "log", "max", "amax", "min", "amin", "sum", "cumsum", "mean", "maximum", "minimum", "where",
              "matmul", "mm", "bmm", "einsum", "tensordot", "outer", "clamp", "clip", "sqrt", "rsqrt", "abs", "neg",
              "add", "sub", "mul", "div", "true_divide", "pow", "reciprocal", "square", "isfinite", "isinf", "isnan",
              "nan_to_num", "masked_fill", "eq", "ne", "gt", "lt", "ge", "le", "logical_not", "logical_and",
              "logical_or", "allclose", "isclose", "equal", "sign", "exp2", "log2", "expm1", "log1p", "clamp_min",
              "clamp_max", "argmax", "cummax", "cumprod", "prod", "baddbmm", "addmm", "addcmul", "addcdiv",
              "floor_divide"}
TORCH_SHAPE = {"cat", "concat", "stack", "split", "chunk", "unbind", "flatten", "reshape", "transpose", "permute",
               "movedim", "unsqueeze", "squeeze", "broadcast_to", "narrow", "select", "index_select", "gather",
               "diagonal", "diag", "roll", "flip", "swapaxes"}
METHODS = (TORCH_MATH | TORCH_SHAPE | {
    "view", "view_as", "expand", "expand_as", "contiguous", "T", "mT", "size", "shape", "dim", "ndim", "dtype",
    "device", "values", "indices", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "to", "float",
    "double", "half", "long", "int", "bool", "type_as", "clone", "detach", "item", "tolist", "fill_", "zero_",
    "copy_", "tril", "triu", "add_", "sub_", "mul_", "div_", "masked_fill_", "clamp_", "exp_", "unfold", "is_floating_point",
    "numel", "min", "max", "eps", "tiny", "append", "extend", "insert", "pop", "items", "keys", "get", "index",
    "count", "format", "join", "requires_grad", "is_cuda", "shape", "any", "all", "nelement", "element_size"})
ELEMENTARY_MATH = {"sqrt", "exp", "log", "inf", "isqrt", "ceil", "floor", "prod", "isfinite", "nan", "e", "pi", "log2"}
# Not the exercise's point wherever a rule applies: scalar maths (math or numpy), wrapping a function of one's own.
MODULE_FUNCTIONS = {"math": ELEMENTARY_MATH, "numpy": ELEMENTARY_MATH | {"float32", "float64", "maximum", "minimum"},
                    "functools": {"partial", "wraps", "reduce", "lru_cache", "cache"},
                    "torch.nn.functional": {"pad", "linear"}}
CODE_MAGICS = {"time", "timeit", "capture", "prun"}  # their line or body is Python that the kernel runs here
RUNS_FILES = {"run", "load", "load_ext", "reload_ext", "macro", "rerun", "recall", "autoreload", "aimport", "paste",
              "cpaste", "loadpy", "store", "pycat"}  # magics that run or bring in code the grader cannot read


def allowed_torch(extra=()):
    """What a part with a rule may reach: elementary operations, tensor creation, shape operations (+ `extra`)."""
    return {f"torch.{name}" for name in TORCH_CREATION | TORCH_MATH | TORCH_SHAPE | set(extra)} | {
        f"{module}.{name}" for module, names in MODULE_FUNCTIONS.items() for name in names}


def python_of(source):
    """(tree, problem): the cell as IPython runs it (magics and indentation transformed), parsed; or why not."""
    from IPython.core.inputtransformer2 import TransformerManager
    try:
        return ast.parse(TransformerManager().transform_cell(source)), None
    except SyntaxError as error:
        return None, f"it does not parse (SyntaxError: {error.msg}, line {error.lineno})"
    except Exception as error:  # IPython itself could not transform it
        return None, f"IPython cannot read it ({type(error).__name__})"


def _magic_code(tree, problems):
    """The Python inside code magics (%time, %%capture...) as extra statements; magics that run code from elsewhere
    (%run, %load...) go to `problems`."""
    extra = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_line_magic", "run_cell_magic") and isinstance(node.func.value, ast.Call)
                and isinstance(node.func.value.func, ast.Name) and node.func.value.func.id == "get_ipython"):
            continue
        args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
        name = args[0] if args else None
        if name in CODE_MAGICS:
            body = args[1] if node.func.attr == "run_line_magic" else (args[2] if len(args) > 2 else None)
            inner, problem = python_of(body) if isinstance(body, str) else (None, "its code is not written out")
            if inner is None:
                problems.append(f"the magic %{name}, whose code {problem}")
            else:
                extra += inner.body + _magic_code(inner, problems)
        elif name in RUNS_FILES or not isinstance(name, str):
            problems.append(f"the magic %{name}, which runs code the grader cannot read")
    return extra


REBINDING = {"globals", "vars", "locals", "exec", "eval", "compile", "setattr", "delattr", "__import__",
             "importlib", "builtins", "__builtins__", "modules", "__code__", "__globals__", "__dict__", "__wrapped__"}


def _rebinding(tree):
    """What in a cell can rebind a name behind the source's back (globals()[...] = ..., f.__code__ = ...); a module's
    setattr(self, ...) on its own attributes is not that."""
    own = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
           and node.func.id in ("setattr", "delattr") and node.args and isinstance(node.args[0], ast.Name)
           and node.args[0].id == "self"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in REBINDING and id(node) not in own or isinstance(
                node, ast.Attribute) and node.attr in REBINDING and not (
                node.attr == "modules" and ast.unparse(node.value) != "sys"):
            yield ast.unparse(node)


class StudentCode:
    """Every cell the student can edit (`sources`: {key: source}, in notebook order), read as IPython runs it: what
    each global name is bound to, and what the cells do at the top level."""

    def __init__(self, sources):
        self.unreadable, self.problems = {}, []  # {key: why}, [what no rule can allow]
        self.bindings = {}  # global name -> [(cell key, node)]: def, class, import alias or statement
        self.imports = dict(SETUP_IMPORTS)  # global name -> qualified name, when the name is an import
        self.top_level = []  # (cell key, statement) outside functions and classes
        self.rebinding = []  # (cell key, what): code that can change at run time what a global name is
        for key, source in sources.items():
            tree, problem = python_of(source)
            if tree is None:
                self.unreadable[key] = (problem, source)
                continue
            for statement in tree.body + _magic_code(tree, self.problems):
                self._bind(key, statement)
            self.rebinding += [(key, use) for use in _rebinding(tree)]

    def _bind(self, key, statement):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.bindings.setdefault(statement.name, []).append((key, statement))
            return
        self.top_level.append((key, statement))
        for node in walk_outside_functions(statement):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not statement:
                self.bindings.setdefault(node.name, []).append((key, node))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias, qualified in imported(node):
                    self.bindings.setdefault(alias, []).append((key, node))
                    self.imports[alias] = qualified
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bindings.setdefault(node.id, []).append((key, statement))

    def qualified(self, node, local=()):
        """torch.nn.functional.softmax for F.softmax (F imported); None when the chain does not start at an import."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id in local or node.id not in self.imports:
            return None
        if any(key for key, n in self.bindings.get(node.id, ()) if not isinstance(n, (ast.Import, ast.ImportFrom))):
            return None  # also bound by the student's own code: judged there
        return ".".join([self.imports[node.id], *reversed(parts)])


def walk_outside_functions(node):
    """ast.walk, without entering the bodies of functions, lambdas and classes (their names are bound, though)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            yield child
            if not isinstance(child, ast.Lambda):
                for decorator in child.decorator_list:
                    yield from walk_outside_functions(decorator)
        else:
            yield from walk_outside_functions(child)


def imported(node):
    """(bound name, qualified name) of each alias of an import statement."""
    for alias in node.names:
        if isinstance(node, ast.Import):
            yield (alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0], alias.name.split(".")[0])
        else:
            module = "." * node.level + (node.module or "")
            yield alias.asname or alias.name, f"{module}.{alias.name}"


def locals_of(function):
    """The names a function (or lambda) binds itself: parameters, assignments, loops, its own imports and defs."""
    names = set()
    arguments = function.args
    for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [arguments.vararg, arguments.kwarg]:
        if arg is not None:
            names.add(arg.arg)
    declared_global = {n for node in ast.walk(function) if isinstance(node, ast.Global) for n in node.names}
    for node in ast.walk(function):
        if node is function:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias for alias, _ in imported(node))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names - declared_global


DYNAMIC = {"getattr", "setattr", "delattr", "vars", "globals", "locals", "eval", "exec", "compile", "__import__",
           "open", "importlib", "__builtins__", "builtins", "get_ipython"}


class Allowlist:
    """What the code of one part may reach, from the function the exercise names through the student's own helpers.

    `allowed`: qualified names (torch.exp, math.sqrt, ...); tensor methods and attributes from METHODS; the builtins
    of BUILTINS; the student's own functions, classes and globals (judged in turn); nothing else: no dynamic access
    (getattr, vars, globals, eval, exec, __import__, importlib, torch.ops), no private `_` names of a library."""

    def __init__(self, code, allowed, methods=METHODS):
        self.code, self.methods = code, methods
        changed = tampered(code)
        self.allowed = {name for name in allowed if not any(name == c or name.startswith(c + ".") for c in changed)}
        self.own_attributes = set()
        for bound in code.bindings.values():
            for _, node in bound:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store):
                        self.own_attributes.add(inner.attr)
                    elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.own_attributes.add(inner.name)

    def outside(self, name):
        """(what it uses outside the list, the cell) for the code reachable from global `name`; None if all is in."""
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for key, node in self.code.bindings.get(current, ()):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    qualified = self.code.imports.get(current)
                    if qualified not in self.allowed:
                        return f"{qualified} (imported as {current})" if current != qualified.split(".")[-1] \
                            else qualified, key
                    continue
                found = self.outside_node(node, todo)
                if found:
                    return found, key
        return None

    def outside_node(self, root, todo):
        functions = [n for n in ast.walk(root) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        local = set().union(*(locals_of(f) for f in functions)) if functions else set()
        if isinstance(root, ast.ClassDef):
            local |= {n.name for n in root.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        chained = set()
        for node in ast.walk(root):
            if isinstance(node, ast.Attribute):
                chained.add(id(node.value))
        for node in ast.walk(root):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias, qualified in imported(node):
                    if qualified not in self.allowed:
                        return qualified
            elif isinstance(node, ast.Attribute) and id(node) not in chained:
                problem = self.attribute_problem(node, local)
                if problem:
                    return problem
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in chained:
                problem = self.name_problem(node.id, local, todo)
                if problem:
                    return problem
        return None

    def name_problem(self, name, local, todo):
        if name in local:
            return None
        if name in self.code.imports and (name not in self.code.bindings
                                          or self.code.qualified(ast.Name(id=name)) is not None):
            qualified = self.code.imports[name]
            if qualified in self.allowed:
                return None
            return qualified if qualified.split(".")[-1] == name else f"{qualified} (imported as {name})"
        if name in self.code.bindings:
            todo.append(name)  # the student's own: judged in turn
            return None
        if name in BUILTINS and name not in DYNAMIC:
            return None
        return name

    def attribute_problem(self, node, local):
        """The outermost attribute of a chain: a library's name, or attributes of a value (its methods)."""
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        chain.reverse()
        written = ast.unparse(node)
        if any(part in DYNAMIC or part == "ops" or part == "__dict__" for part in chain):
            return written
        qualified = self.code.qualified(node, local) if isinstance(base, ast.Name) else None
        if qualified is not None:  # a library's name, judged whole (torch.finfo(...).min: `min` is judged apart)
            if qualified in self.allowed or (qualified.startswith("torch.Tensor.") and qualified.count(".") == 2
                                             and self.method_ok(chain[-1])):
                return None
            return written
        if isinstance(base, ast.Name) and base.id not in local and base.id not in self.code.bindings \
                and base.id not in BUILTINS:
            return written  # a global the student did not write (a locked cell's)
        return None if all(self.method_ok(part) for part in chain) else written

    def method_ok(self, name):
        if name in self.methods or name == "__init__":
            return True
        return name in self.own_attributes and not name.startswith("__") and name not in FORBIDDEN_METHODS


FORBIDDEN_METHODS = {"softmax", "log_softmax", "softmin", "logsumexp", "logcumsumexp", "scaled_dot_product_attention"}


def tampered(code):
    """{qualified name: cell} of a library's names that top-level code changes (torch.exp = ..., setattr(torch, ...)
    changes every name of torch)."""
    changed = {}
    for key, statement in code.top_level:
        for node in walk_outside_functions(statement):
            targets = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("setattr", "delattr") and node.args):
                targets = [node.args[0] if not (len(node.args) > 1 and isinstance(node.args[1], ast.Constant))
                           else ast.Attribute(value=node.args[0], attr=str(node.args[1].value))]
            for target in (t for target in targets for t in ast.walk(target)):
                if isinstance(target, (ast.Attribute, ast.Name)):
                    qualified = code.qualified(target)
                    if qualified is not None and (isinstance(target, ast.Attribute) or isinstance(node, ast.Call)):
                        changed.setdefault(qualified, key)
    return changed


def written_in_a_cell(file):
    """Code compiled from a notebook cell: by IPython, by a Jupyter kernel, or the answer key's (the reference)."""
    return isinstance(file, str) and (file.startswith(("<ipython-input-", "<reference ")) or
                                      re.search(r"ipykernel_\d+[/\\][^/\\]+\.py$", file) is not None)


def kernel_rule(what, name, hint, forbidden):
    """The rule's half observed in the kernel (a teaching check: a student who replaces the probe could forge it):
    the function the checks call, and each callable it reaches by a global name through the notebook's own
    functions, is code written in a cell or a library function outside `forbidden` (not torch.softmax bound to the
    name by globals(), nor a function made by exec)."""
    p = Program()
    p.record(G(name), "the function", kind="function")

    def judge(got, want):
        if not got or "raised" in got[0]:
            return None  # not defined: the calls say so
        found = got[0].get("function")
        if not isinstance(found, list) or not all(isinstance(f, dict) for f in found) or not found:
            return f"{what}: the function {name} was not recorded"
        # the function itself, and what it wraps when it is decorated (torch.no_grad) or a functools.partial
        own_root = any(written_in_a_cell(entry.get("file")) for entry in found if not entry.get("name"))
        for entry in found:
            called, file, module = str(entry.get("called")), entry.get("file"), str(entry.get("module"))
            shown = f"{name}" if not entry.get("name") else f"{entry.get('name')}, which {name} calls,"
            if file is None or not written_in_a_cell(file):
                library = module.startswith(("torch", "math", "builtins", "numpy", "functools")) and file != "<string>"
                if (entry.get("name") or own_root) and library and called not in forbidden and not called.startswith(
                        ("_scaled_dot_product", "_flash_attention", "_efficient_attention")):
                    continue
                origin = "made by exec or eval" if file == "<string>" else f"{module}.{called}"[:80].lstrip(".")
                return (f"{what}: in the kernel, {shown} is {origin}, not a function written in your cells"
                        f"\n  likely mistake: {hint}")
        return None

    return Check(what, p, judge=judge)


def where(key):
    return f"the cell {key}" if not key.startswith("cell ") else f"a cell of your own ({key})"


def allow_only(what, name, hint, extra=(), methods=METHODS):
    """A rule about how a part is written, judged from every cell the student can edit (as IPython runs them): the
    function `name`, and everything of the student's it reaches, may only use what `allowed_torch(extra)` and
    METHODS list (elementary operations, tensor creation, shape operations, the student's own helpers). Two checks:
    the source rule, and what the kernel shows of the function the checks call (`kernel_rule`)."""
    allowed = allowed_torch(extra)

    def rule(sources):
        code = StudentCode(sources)
        for key, (problem, source) in code.unreadable.items():
            if key == name or re.search(rf"\b{re.escape(name)}\b", source):
                return (f"{what}: the grader cannot read {where(key)}: {problem}\n  likely mistake: write it as "
                        f"plain Python (IPython runs it; the rule about how to write {name} is judged from it)")
        if code.problems:
            return f"{what}: your cells use {code.problems[0]}\n  likely mistake: {hint}"
        if code.rebinding:
            key, use = code.rebinding[0]
            return (f"{what}: {where(key)} uses {use}, which can change at run time what {name} is, so the grader "
                    f"cannot read how {name} is written\n  likely mistake: define {name} with def in a cell and "
                    f"call it by its name; {hint}")
        if name not in code.bindings:
            return None  # not written: the calls say so
        found = Allowlist(code, allowed, methods).outside(name)
        if found:
            return (f"{what}: the code uses {found[0]} (in {where(found[1])}), which this exercise does not allow "
                    f"here\n  likely mistake: {hint}")
        return None

    forbidden = FORBIDDEN_METHODS | {"_softmax", "_log_softmax", "_safe_softmax"}
    forbidden -= {name.rsplit(".", 1)[-1] for name in allowed}
    return [Check(what, source_rule=rule), kernel_rule(what, name, hint, forbidden)]


# ---------------------------------------------------------------------------------------------------------------
# secrets, references, plans
# ---------------------------------------------------------------------------------------------------------------

def read_secret(path):
    """The instructor's secret (created on first use, readable by the instructor only, never released)."""
    path = Path(path)
    if not path.exists():
        # Written whole under another name, then linked into place: two workers starting at once both get the one
        # that was linked first, and neither reads a half-written file.
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32) + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text().strip().encode()


def hidden_seed(secret, step, student, cell):
    """Different for every student, step and cell; the same on every re-grade."""
    digest = hmac.new(secret, f"{step}\0{student}\0{cell}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") % (2 ** 62)


def judges_of(step):
    """The judge module of a step: attention_grader/judges/stepNN.py, with CELLS = {grade_id: checks(inputs)}."""
    return importlib.import_module(f"attention_grader.judges.step{step[:2]}")


@functools.lru_cache(maxsize=None)
def reference_namespace(source_path):
    """The answer key's setup, provided and solution cells, run in this process: the reference for every check."""
    import matplotlib
    matplotlib.use("Agg")
    import nbformat
    namespace = {"__name__": "reference"}
    for cell in nbformat.read(source_path, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta or (meta.get("grade") and not meta.get("solution")):
            continue
        with redirect_stdout(StringIO()), redirect_stderr(StringIO()):
            exec(compile(cell.source, f"<reference {meta.get('grade_id')}>", "exec"), namespace)
    namespace["__reference_path__"] = source_path
    return namespace


_MISTAKEN = {}


def mistaken_namespace(namespace, replacements):
    """The answer key run again with some of its globals replaced: what a known mistake computes. Its functions and
    classes look the replaced names up in this namespace, so a mistake in a helper reaches everything that calls it."""
    key = (namespace["__reference_path__"], tuple(sorted((name, id(value)) for name, value in replacements.items())))
    if key not in _MISTAKEN:
        _MISTAKEN[key] = reference_namespace.__wrapped__(namespace["__reference_path__"])
        _MISTAKEN[key].update(replacements)
    return _MISTAKEN[key]


def plan_cell(step, cell_id, seed):
    """The checks of one test cell for one seed."""
    return judges_of(step).CELLS[cell_id](Inputs(seed))


def probe_source(cell_id, checks):
    plan = json.dumps([c.program.ops for c in checks if c.program is not None], separators=(",", ":"))
    return (f"{HIDDEN_BEGIN}\n__import__('attention_course.probe').probe.run(globals(), {cell_id!r}, "
            f"__import__('json').loads({plan!r}))\n{HIDDEN_END}")


def stand_in_source(stand_in):
    """A hidden region that, before the visible tests, makes the judge's stand-in answer for an earlier part."""
    name, table = stand_in
    table = json.dumps([[list(args), encode_tensor(result)] for args, result in table], separators=(",", ":"))
    return (f"{HIDDEN_BEGIN}\n__import__('attention_course.probe').probe.stand_in(globals(), {name!r}, "
            f"__import__('json').loads({table!r}))\n{HIDDEN_END}\n")


def with_probe(source, cell_id, checks, stand_in=None):
    """The test cell's source with its hidden region replaced by the probe call; with a stand-in (name, [(args,
    result), ...]) from the judges' STAND_INS, that part's calls listed there get those results in this cell. Should
    the visible tests fail, the probe runs all the same (`arm`), so that a mistake the judges name is shown."""
    visible = source.split(HIDDEN_BEGIN)[0].rstrip("\n")
    if not visible.strip():
        return (stand_in_source(stand_in) if stand_in else "") + probe_source(cell_id, checks)
    plan = json.dumps([c.program.ops for c in checks if c.program is not None], separators=(",", ":"))
    return ((stand_in_source(stand_in) if stand_in else "")
            + f"{HIDDEN_BEGIN}\n__import__('attention_course.probe').probe.arm(globals(), {cell_id!r}, "
              f"__import__('json').loads({plan!r}))\n{HIDDEN_END}\n" + visible + "\n"
            + f"{HIDDEN_BEGIN}\n__import__('attention_course.probe').probe.run(globals(), {cell_id!r})\n{HIDDEN_END}")


def autograded_test_cells(nb):
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            yield meta["grade_id"], cell


class PlanHiddenChecks(NbGraderPreprocessor):
    """Before execution: every test cell's hidden region becomes a probe call with this student's hidden inputs."""

    secret_file = Unicode("", help="The instructor's secret (default: .grading_secret in the course root; created "
                                   "on first use, never released).").tag(config=True)

    def preprocess(self, nb, resources):
        from nbgrader.coursedir import CourseDirectory
        started = time.perf_counter()
        coursedir = CourseDirectory(config=self.config)
        info = resources["nbgrader"]
        secret = read_secret(self.secret_file or Path(coursedir.root) / ".grading_secret")
        plans = {}
        judges = judges_of(info["assignment"])
        order = [cell_id for cell_id, _ in autograded_test_cells(nb)]
        exercise_order = [cell_id for cell_id in judges.CELLS if cell_id in order]
        for position, (cell_id, cell) in enumerate(autograded_test_cells(nb)):
            checks = plan_cell(info["assignment"], cell_id,
                               hidden_seed(secret, info["assignment"], info["student"], cell_id))
            plans[cell_id] = checks
            # A stand-in's answers reach a cell only when every test cell before it in the exercise ran before it: the
            # part it stands in for was graded already, so nothing kept of the table can earn that part a point.
            in_order = order[:position + 1] == exercise_order[:exercise_order.index(cell_id) + 1]
            stand_in = getattr(judges, "STAND_INS", {}).get(cell_id) if in_order else None
            cell.source = with_probe(cell.source, cell_id, checks, stand_in and stand_in())
        resources["hidden_checks"] = plans
        resources["planning_seconds"] = time.perf_counter() - started
        resources["reference_notebook"] = str(Path(coursedir.format_path(
            coursedir.source_directory, ".", info["assignment"])) / f"{info['notebook']}.ipynb")
        return nb, resources


def _error(ename, evalue):
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def read_records(outputs, cell_id, expected_count):
    """(outputs before the hidden checks, error outputs after them, records, problem) of one test cell."""
    before, errors, payloads, begun, visible_failed = [], [], [], 0, False
    for output in outputs:
        data = output.get("data", {})
        if BEGIN_MIME in data:
            begun += 1
        elif RECORDS_MIME in data:
            payloads.append(data[RECORDS_MIME])
        elif VISIBLE_FAILED_MIME in data:
            visible_failed = True  # the error that follows is the visible tests': the checks ran after it
        elif output.output_type == "error":
            errors.append(output if not begun or visible_failed else _error(
                str(output.get("ename"))[:80], "the hidden checks stopped with this error" if
                output.get("ename") not in ("CellTimeoutError", "DeadKernelError") else str(output.get("evalue"))))
        elif not begun and output.output_type == "stream":
            before.append(output)
    if errors and not visible_failed:
        return before, errors, None, None
    if begun != 1 or len(payloads) != 1:
        return before, errors, None, (f"the hidden checks of this cell left {'no' if not payloads else 'duplicate'} "
                                      "records (was the test cell or the course package changed?)")
    payload = payloads[0]
    try:
        size = len(json.dumps(payload))
    except (TypeError, ValueError):
        size = None
    if size is None or size > RECORDS_LIMIT:
        return before, errors, None, "the hidden checks of this cell left records that are too large or malformed"
    if (not isinstance(payload, dict) or payload.get("cell") != cell_id or not isinstance(payload.get("records"), list)
            or len(payload["records"]) != expected_count
            or not all(isinstance(r, list) and all(isinstance(x, dict) for x in r) for r in payload["records"])):
        return before, errors, None, "the hidden checks of this cell left malformed records"
    return before, errors, payload["records"], None


def editable_sources(nb):
    """{key: source} of every code cell the student can edit, in notebook order: solution cells by grade id (a copy
    of one gets its own key) and cells that are neither locked nor tests ("cell N": N counts the notebook's cells)."""
    sources = {}
    for index, cell in enumerate(nb.cells, 1):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or (not meta.get("solution") and (meta.get("locked") or meta.get("grade"))):
            continue
        key = meta.get("grade_id") if meta.get("solution") and meta.get("grade_id") else f"cell {index}"
        while key in sources:
            key += " (copy)"
        sources[key] = cell.source
    return sources


class NamedMistake(str):
    """A failure message that names a known mistake, reproduced by running it: shown before the other failures."""


def judge_check(check, got, namespace, sources):
    if check.source_rule is not None:
        return check.source_rule(sources)

    def judge(namespace):
        want = Interpreter(namespace, torch.float64).run_check(check.program.ops)
        return check.judge(got, want) if check.judge is not None else default_judge(check, got, want)

    try:
        problem = judge(namespace)
        for hint, replacements in check.mistakes if problem else ():
            if judge(mistaken_namespace(namespace, replacements)) is None:
                return NamedMistake(problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {hint}")
        return problem
    except (PlanError, KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
        return f"{check.what}: the records of this check are malformed ({type(error).__name__})"


def _undefined_name_hint(text, sources):
    """Why a name is not defined: the student's cell that defines it did not run through (it does not parse, or it
    stopped with an error), or the code reads a variable that only another test cell made."""
    undefined = re.search(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined", text)
    code = StudentCode(sources)
    for key, (problem, source) in code.unreadable.items():
        if undefined and re.search(rf"^\s*(?:def|class)\s+{undefined[1]}\b|^{undefined[1]}\s*[:=]", source, re.M):
            return (f"`{undefined[1]}` is defined in your cell `{key}`, which Python cannot run: {problem}. Fix that "
                    "cell and run it, then run this test again")
    if undefined and any(key in sources for key, _ in code.bindings.get(undefined[1], ())):
        key = next(key for key, _ in code.bindings[undefined[1]] if key in sources)
        return (f"`{undefined[1]}` is defined in your cell `{key}`, which stopped with an error before it defined "
                f"`{undefined[1]}` (the error is in that cell's output): fix that cell and run it, then this test")
    return ("the code reads a variable of the notebook that this test cell does not have (test cells run on "
            "their own, so names another test cell made are not there): a function should use its own arguments "
            "and a module the module's attributes, never notebook globals")


def _kernel_error_hint(error, sources):
    """A hint for an error the test cell stopped with, when its message gives none: a name that is not defined
    (see _undefined_name_hint), or what PyTorch's or Python's message most often means here
    (attention_course.checks.error_hint)."""
    name, text = str(error.get("ename")), str(error.get("evalue", ""))
    if name == "NameError" or "raised NameError" in text:
        text = text.split("\n  likely mistake: ")[0]
        return _error(name, f"{text}\n  likely mistake: {_undefined_name_hint(text, sources)}")
    hint = "" if "likely mistake" in text else error_hint(text, name)
    if not hint:
        return error
    # the traceback kept: it shows the line of the student's code that raised
    return NotebookNode(output_type="error", ename=name, evalue=f"{text}\n  likely mistake: {hint}",
                        traceback=[*error.get("traceback", [])][-50:] + [f"  likely mistake: {hint}"])


def verdict(outputs, cell_id, checks, namespace, sources):
    """(new outputs of a test cell, flags): the judges' verdicts, or the kernel's own error."""
    probed = [c for c in checks if c.program is not None]
    before, errors, records, problem = read_records(outputs, cell_id, len(probed))
    # A warning printed before a failure (x.T's UserWarning, say) goes after it: the message and its hint come first.
    printed = [o for o in before if o.get("name") != "stderr"]
    warned = [o for o in before if o.get("name") == "stderr"]
    if errors and records is None:
        return printed + [_kernel_error_hint(e, sources) for e in errors] + warned, []
    if problem:
        return printed + [_error("RecordError", problem)] + warned, ["bad records"]
    got = dict(zip(map(id, probed), records))
    failures = [m for m in (judge_check(c, got.get(id(c)), namespace, sources) for c in checks) if m]
    if errors:  # the visible tests failed, and the hidden checks ran after them: a mistake they name comes first
        named = [_error("CheckFailed", m) for m in failures if isinstance(m, NamedMistake)][:1]
        return printed + named + [_kernel_error_hint(e, sources) for e in errors] + warned, []
    if failures:
        shown = next((m for m in failures if isinstance(m, NamedMistake)), failures[0])
        which = "The first:" if shown is failures[0] else "This one names the likely mistake:"
        head = f"{len(failures)} of {len(checks)} checks of this cell failed. {which}\n" if len(failures) > 1 else ""
        return printed + [_error("CheckFailed", head + shown + also_failed(failures, shown))] + warned, []
    note = NotebookNode(output_type="stream", name="stdout",
                        text=f"Graded: all {len(checks)} checks of this cell passed.\n")
    return before + [note], []


def also_failed(failures, shown, most=3):
    """The first line of the other failures, each once: the first failure shown may not be the one the mistake is."""
    others = list(dict.fromkeys(str(m).split("\n")[0][:200] for m in failures if m is not shown))
    others = [line for line in others if line != str(shown).split("\n")[0][:200]]
    if not others:
        return ""
    more = f"\n  ... and {len(others) - most} more" if len(others) > most else ""
    return "\nAlso failed:\n" + "\n".join(f"  - {line}" for line in others[:most]) + more


class JudgeCells(NbGraderPreprocessor):
    """After execution: each test cell's outputs become the judges' verdicts (see the module's docstring)."""

    def preprocess(self, nb, resources):
        started = time.perf_counter()
        plans = resources.get("hidden_checks", {})
        namespace = reference_namespace(resources["reference_notebook"])
        sources = editable_sources(nb)
        flags = set()
        for cell_id, cell in autograded_test_cells(nb):
            if cell_id not in plans:
                continue
            cell.outputs, cell_flags = verdict(cell.get("outputs", []), cell_id, plans[cell_id], namespace, sources)
            flags.update(cell_flags)
        EVENTS.append({"student": resources["nbgrader"]["student"], "flags": sorted(flags),
                       "judge_seconds": time.perf_counter() - started + resources.get("planning_seconds", 0.0)})
        return nb, resources
