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
import secrets
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import torch
from nbformat import NotebookNode
from traitlets import Unicode

from attention_course.probe import (BEGIN_MIME, RECORDS_MIME, Interpreter, PlanError, decode_tensor, encode,
                                    encode_tensor)

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

    def call(self, function, *args, grad=False, measure=False, **kwargs):
        """function(*args, **kwargs); with measure=True the probe also records the memory the call took."""
        op = {"call": as_data(function), "args": [as_data(a) for a in args],
              "kwargs": {k: as_data(v) for k, v in kwargs.items()}}
        if grad:
            op["grad"] = True
        if measure:
            op["measure"] = True
            self.expects.append(Expect("its memory"))
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
            return (f"{name} has the wrong shape\n  expected: {tuple(expected.shape)}\n"
                    f"  got:      {tuple(actual.shape)}")
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
        expected = {n: tuple(s) for n, s, _ in want["parameters"]}
        actual = {str(n): tuple(s) for n, s, *_ in got["parameters"]}
        if actual != expected:
            missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
            shapes = sorted(n for n in set(expected) & set(actual) if expected[n] != actual[n])
            return (f"{name}: the parameters differ from the contract" + (f"; missing: {', '.join(missing)}" if missing
                    else "") + (f"; unexpected: {', '.join(extra[:8])}" if extra else "") +
                    "".join(f"; {n} has shape {actual[n]}, expected {expected[n]}" for n in shapes))
        return None
    if kind == "loaded":
        if _kind(got) != "loaded":
            return f"{name}: the weights could not be loaded"
        unexpected = sorted(set(map(str, got["loaded"]["unexpected"])) - set(want["loaded"]["unexpected"]))
        if unexpected:
            return (f"{name}: the module has no parameter named {', '.join(unexpected[:6])} (load_state_dict uses "
                    "the contract's names, e.g. W_query.weight)")
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


def raised_message(what, record, hint=""):
    if record["raised"] == "NotImplementedError":
        return f"{what}: not written yet (replace the `raise NotImplementedError` line)"
    return f"{what} raised {str(record['raised'])[:80]}: {str(record['message'])[:300]}" + (
        f"\n  likely mistake: {hint}" if hint else "")


def default_judge(check, got, want):
    """The student's records must be the reference's, record by record."""
    for index, (expected_record, expect) in enumerate(zip(want, check.program.expects)):
        if index >= len(got):
            return f"{check.what}: stopped before {expect.label}"
        record = got[index]
        if _kind(record) == "raised" and _kind(expected_record) != "raised":
            return raised_message(check.what, record, expect.hint if index == 0 else "")
        if _kind(expected_record) == "raised":
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
            return (f"{what} did not raise a ValueError\n  likely mistake: check `{argument}` first and raise "
                    f"ValueError naming it (not assert, not a later shape error)")
        if last["raised"] == "NotImplementedError":
            return raised_message(what, last)
        if last["raised"] != "ValueError":
            return (f"{what} raised {str(last['raised'])[:80]} instead of a ValueError\n  likely mistake: check "
                    f"`{argument}` first and raise ValueError naming it (not assert, not a later shape error)")
        if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(argument)}(?![A-Za-z0-9_])", str(last["message"])):
            return (f"{what} raised a ValueError whose message does not name `{argument}`\n  likely mistake: say "
                    f"which argument is wrong, e.g. raise ValueError(f\"... {argument}={{...}} ...\")")
        return None

    return Check(what, program, judge=judge)


def names_used(sources, grade_id):
    """Every name and attribute the submitted cell uses, with its call or reference as written; None when it does
    not parse (the kernel reports that)."""
    try:
        tree = ast.parse(sources.get(grade_id, ""))
    except SyntaxError:
        return None
    return [(node.attr if isinstance(node, ast.Attribute) else node.id, ast.unparse(node)) for node in ast.walk(tree)
            if isinstance(node, (ast.Attribute, ast.Name))]


def forbid_calls(what, grade_id, names, hint):
    """A rule about how to write a part, judged from the submitted source: no use of a name or attribute in `names`
    (e.g. {"softmax"} catches torch.softmax, F.softmax, x.softmax and `from torch import softmax`, also imported under
    another name). A name the cell defines itself (a variable, a function, an argument) is the student's own."""
    def rule(sources):
        try:
            tree = ast.parse(sources.get(grade_id, ""))
        except SyntaxError:
            return None  # the kernel reports that
        nodes = list(ast.walk(tree))
        own = ({n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
               | {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
               | {n.arg for n in nodes if isinstance(n, ast.arg)})
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                    alias.name.split(".")[-1] in names for alias in node.names):
                written = ast.unparse(node)
            elif isinstance(node, ast.Attribute) and node.attr in names:
                written = ast.unparse(node)
            elif isinstance(node, ast.Name) and node.id in names and node.id not in own:
                written = node.id
            else:
                continue
            return f"{what}: the code uses {written}\n  likely mistake: {hint}"
        return None

    return Check(what, source_rule=rule)


def require_call(what, grade_id, name, hint):
    """A rule judged from the submitted source: the cell must use `name` (however imported)."""
    def rule(sources):
        used = names_used(sources, grade_id)
        if used is None or any(n == name for n, _ in used):
            return None
        return f"{what} never calls {name}\n  likely mistake: {hint}"

    return Check(what, source_rule=rule)


# ---------------------------------------------------------------------------------------------------------------
# secrets, references, plans
# ---------------------------------------------------------------------------------------------------------------

def read_secret(path):
    """The instructor's secret (created on first use, readable by the instructor only, never released)."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32) + "\n")
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
    result), ...]) from the judges' STAND_INS, that part's calls listed there get those results in this cell."""
    visible = source.split(HIDDEN_BEGIN)[0].rstrip("\n")
    return ((stand_in_source(stand_in) if stand_in else "") + (visible + "\n" if visible else "")
            + probe_source(cell_id, checks))


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
        for cell_id, cell in autograded_test_cells(nb):
            checks = plan_cell(info["assignment"], cell_id,
                               hidden_seed(secret, info["assignment"], info["student"], cell_id))
            plans[cell_id] = checks
            stand_in = getattr(judges_of(info["assignment"]), "STAND_INS", {}).get(cell_id)
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
    before, errors, payloads, begun = [], [], [], 0
    for output in outputs:
        data = output.get("data", {})
        if BEGIN_MIME in data:
            begun += 1
        elif RECORDS_MIME in data:
            payloads.append(data[RECORDS_MIME])
        elif output.output_type == "error":
            errors.append(output if not begun else _error(
                str(output.get("ename"))[:80], "the hidden checks stopped with this error" if
                output.get("ename") not in ("CellTimeoutError", "DeadKernelError") else str(output.get("evalue"))))
        elif not begun and output.output_type == "stream":
            before.append(output)
    if errors:
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


def verdict(outputs, cell_id, checks, namespace, sources):
    """(new outputs of a test cell, flags): the judges' verdicts, or the kernel's own error."""
    probed = [c for c in checks if c.program is not None]
    before, errors, records, problem = read_records(outputs, cell_id, len(probed))
    if errors:
        return before + errors, []
    if problem:
        return before + [_error("RecordError", problem)], ["bad records"]
    got = dict(zip(map(id, probed), records))
    failures = [m for m in (judge_check(c, got.get(id(c)), namespace, sources) for c in checks) if m]
    if failures:
        shown = next((m for m in failures if isinstance(m, NamedMistake)), failures[0])
        which = "The first:" if shown is failures[0] else "This one names the likely mistake:"
        head = f"{len(failures)} of {len(checks)} checks of this cell failed. {which}\n" if len(failures) > 1 else ""
        return before + [_error("CheckFailed", head + shown)], []
    note = NotebookNode(output_type="stream", name="stdout",
                        text=f"Graded: all {len(checks)} checks of this cell passed.\n")
    return before + [note], []


class JudgeCells(NbGraderPreprocessor):
    """After execution: each test cell's outputs become the judges' verdicts (see the module's docstring)."""

    def preprocess(self, nb, resources):
        started = time.perf_counter()
        plans = resources.get("hidden_checks", {})
        namespace = reference_namespace(resources["reference_notebook"])
        sources = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in nb.cells
                   if cell.metadata.get("nbgrader", {}).get("solution")}
        flags = set()
        for cell_id, cell in autograded_test_cells(nb):
            if cell_id not in plans:
                continue
            cell.outputs, cell_flags = verdict(cell.get("outputs", []), cell_id, plans[cell_id], namespace, sources)
            flags.update(cell_flags)
        EVENTS.append({"student": resources["nbgrader"]["student"], "flags": sorted(flags),
                       "judge_seconds": time.perf_counter() - started + resources.get("planning_seconds", 0.0)})
        return nb, resources
