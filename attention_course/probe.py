"""Probes: the half of a hidden test that runs in the student's notebook.

A probe decides nothing. It receives a plan (plain data: inputs and the calls to make on them), calls the student's
functions and classes, and publishes what came back as data: tensors, numbers, exception types and messages,
parameter names and shapes. The grader, in a process that never runs student code, compares these records with the
reference on the same inputs and decides every check (the judges live on the instructor's side only).

A plan is a list of checks; a check is a list of operations on named registers:

    {"set": "x", "value": V}                          x = V
    {"call": V, "args": [V, ...], "kwargs": {...}, "set": "y", "grad": False, "measure": False,
     "trace": None, "inputs_of": None, "catch": False}
                                                      y = V(*args, **kwargs)  (under torch.no_grad unless grad;
                                                      with measure, the memory it took is recorded; with trace: i,
                                                      the aten operations it ran and the elements of args[i] each
                                                      read; with inputs_of: {"label": V, ...}, the shapes of the
                                                      inputs each of these modules saw during the call; with catch,
                                                      an exception is recorded and the check goes on)
    {"seed": 123}                                     torch.manual_seed(123)
    {"load": V, "state": {"name": V, ...}}            V.load_state_dict(state, strict=False), recorded
    {"record": V, "as": "value" | "parameters" | "buffers" | "state" | "grads" | "type" | "function"}

and a value V is JSON (numbers, strings, booleans, null) or one of {"tensor": ...}, {"ref": "x"}, {"global": "Name"},
{"attr": [V, "name"]}, {"item": [V, i]}, {"list": [V, ...]}, {"tuple": [V, ...]}, {"generator": seed},
{"dtype": "float32"}. An exception stops that check and is recorded with its type and message.
"""
import base64
import functools
import math
import operator
import sys
import types

import numpy
import torch

import contextlib

from attention_course.checks import size_origins
from attention_course.memory import OpTrace, PeakMemory, refusals

RECORDS_MIME = "application/vnd.attention-course.records+json"
BEGIN_MIME = "application/vnd.attention-course.begin+json"
VISIBLE_FAILED_MIME = "application/vnd.attention-course.visible-failed+json"
MAX_DEPTH, MAX_ITEMS, MAX_TEXT = 3, 64, 500

_NUMPY = {"float64": numpy.float64, "uint8": numpy.uint8, "int64": numpy.int64}


class PlanError(ValueError):
    """A plan or a record that does not follow the format above."""


# ---------------------------------------------------------------------------------------------------------------
# values <-> data
# ---------------------------------------------------------------------------------------------------------------

def encode_tensor(tensor):
    """A tensor as data: its dtype name, shape, and values (float64, uint8 for bool, or int64) in base64."""
    tensor = tensor.detach().cpu()
    if tensor.is_complex():
        raise PlanError("complex tensors are not recorded")
    storage = "float64" if tensor.is_floating_point() else "uint8" if tensor.dtype == torch.bool else "int64"
    values = tensor.to(getattr(torch, storage)).contiguous().numpy()
    return {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape), "storage": storage,
            "data": base64.b64encode(values.tobytes()).decode()}


def decode_tensor(spec, float_dtype=None, limit=1 << 24):
    """The tensor of `encode_tensor`'s data; checks every field, so that malformed data raises PlanError."""
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "storage", "data"}:
        raise PlanError("a tensor record needs exactly dtype, shape, storage and data")
    shape, storage, dtype = spec["shape"], spec["storage"], spec["dtype"]
    if (not isinstance(shape, list) or len(shape) > 8 or
            not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= limit for n in shape)):
        raise PlanError(f"a tensor record has an invalid shape: {str(shape)[:80]}")
    if storage not in _NUMPY or not isinstance(dtype, str) or not isinstance(getattr(torch, dtype, None),
                                                                               torch.dtype):
        raise PlanError(f"a tensor record has an invalid dtype: {str(dtype)[:40]} / {str(storage)[:40]}")
    count = math.prod(shape)
    if count > limit or not isinstance(spec["data"], str) or len(spec["data"]) > 4 * (count * 8 + 3) // 3 + 4:
        raise PlanError("a tensor record is larger than its shape says")
    try:
        raw = base64.b64decode(spec["data"], validate=True)
    except ValueError:
        raise PlanError("a tensor record's data is not base64") from None
    if len(raw) != count * numpy.dtype(_NUMPY[storage]).itemsize:
        raise PlanError("a tensor record's data does not match its shape")
    tensor = torch.from_numpy(numpy.frombuffer(raw, dtype=_NUMPY[storage]).copy()).reshape(shape)
    if storage == "float64":
        return tensor.to(float_dtype or getattr(torch, dtype)) if getattr(torch, dtype).is_floating_point else tensor
    return tensor.to(getattr(torch, dtype))


def encode(value, depth=0):
    """What came back from student code, as data."""
    if isinstance(value, torch.Tensor):
        return {"tensor": encode_tensor(value)}
    if value is None or isinstance(value, bool):
        return {"const": value}
    if isinstance(value, int):
        return {"int": str(value)[:MAX_TEXT]}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value[:MAX_TEXT]}
    if isinstance(value, (list, tuple)) and depth < MAX_DEPTH:
        return {type(value).__name__ if type(value) in (list, tuple) else "list":
                [encode(item, depth + 1) for item in list(value)[:MAX_ITEMS]]}
    if isinstance(value, torch.nn.Module):
        return {"module": type(value).__name__[:MAX_TEXT]}
    return {"object": type(value).__name__[:MAX_TEXT]}


def _code_names(code):
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


def _functions(root):
    """The function a check calls and every callable it reaches by a global name, following the notebook's own
    Python functions: for each, the global name, its own name, its module, and the file its code was compiled from
    (a notebook cell, a library, or "<string>" for code made by exec). The grader judges where each comes from."""
    found, todo, seen = [], [("", root)], set()
    inner = root
    for _ in range(MAX_ITEMS):
        if not (isinstance(inner, functools.partial) or callable(getattr(inner, "__wrapped__", None))):
            break
        inner = inner.func if isinstance(inner, functools.partial) else inner.__wrapped__
    notebook = getattr(inner, "__globals__", None)  # where the function the checks call was written
    while todo and len(found) < MAX_ITEMS:
        name, value = todo.pop(0)
        if id(value) in seen:
            continue
        seen.add(id(value))
        code = getattr(value, "__code__", None) if isinstance(value, types.FunctionType) else None
        found.append({"name": name[:MAX_TEXT], "called": str(getattr(value, "__name__", type(value).__name__))[:100],
                      "module": str((value.__globals__.get("__name__") if code else None)  # not what wraps copied
                                    or getattr(value, "__module__", "") or "")[:100],
                      "file": code.co_filename[:200] if code else None})
        if code is None or value.__globals__ is not notebook:  # a library's function: only what it wraps is followed
            if isinstance(value, functools.partial):
                todo += [(name, v) for v in (value.func, *value.args, *value.keywords.values()) if callable(v)]
            elif callable(getattr(value, "__wrapped__", None)):  # a decorator (torch.no_grad, functools.wraps)
                todo.append((name, value.__wrapped__))
            continue
        for global_name in sorted(_code_names(code)):
            target = value.__globals__.get(global_name)
            if callable(target) and not isinstance(target, (type, types.ModuleType)):
                todo.append((global_name, target))
    return found


def _raised(error):
    record = {"raised": type(error).__name__[:MAX_TEXT], "message": str(error)[:MAX_TEXT]}
    origins = getattr(error, "size_origins", "")
    return record | ({"origins": str(origins)[:MAX_TEXT]} if origins else {})


# ---------------------------------------------------------------------------------------------------------------
# running a plan
# ---------------------------------------------------------------------------------------------------------------

class _Launches:
    """While a traced call runs, the Triton kernels it launches in Triton's interpreter (TRITON_INTERPRET=1): each
    kernel's name and grid and, per tensor argument, whether it holds the watched tensor (or a copy of it), the most of
    its elements one load read and how many elements were stored into it; then, of the call's result, how many
    elements hold a value a kernel stored, and how many a value a kernel loaded from memory no kernel had written (a
    copy). Without the interpreter (or without triton imported) nothing is recorded."""

    def __init__(self, watched):
        self.watched, self.launches, self.patched, self.regions = watched, [], [], []
        self.stored, self.loaded, self.written = [], [], []  # values stored, values copied in, addresses stored

    def __enter__(self):
        module = sys.modules.get("triton.runtime.interpreter")
        if module is None:
            return self
        executor, builder = module.GridExecutor, module.InterpreterBuilder
        launch, load, store = executor.__call__, builder.create_masked_load, builder.create_masked_store
        self.patched = [(executor, "__call__", launch), (builder, "create_masked_load", load),
                        (builder, "create_masked_store", store)]

        def launched(runner, *args, **kwargs):
            return self.launch(launch, runner, args, kwargs, module.interpreter_builder)

        def loaded(builder_, ptrs, mask, *rest, **options):
            result = load(builder_, ptrs, mask, *rest, **options)
            self.access(ptrs, mask, result.data, "most_read")
            return result

        def stored(builder_, ptrs, value, mask, *rest, **options):
            self.access(ptrs, mask, value.data, "stored")
            return store(builder_, ptrs, value, mask, *rest, **options)

        executor.__call__, builder.create_masked_load, builder.create_masked_store = launched, loaded, stored
        return self

    def __exit__(self, *exc):
        for owner, name, original in self.patched:
            setattr(owner, name, original)

    def launch(self, original, runner, args, kwargs, builder):
        given = list(zip(runner.arg_names, args)) + list(kwargs.items())
        record = {"kernel": str(getattr(runner.fn, "__name__", ""))[:100], "grid": None, "tensors": []}
        self.regions = []
        for name, t in given:
            t = t if isinstance(t, torch.Tensor) else getattr(t, "base", None)  # a TensorDescriptor's tensor
            if isinstance(t, torch.Tensor):
                entry = {"arg": str(name)[:100], "shape": list(t.shape), "most_read": 0, "stored": 0,
                         "watched": t.untyped_storage().data_ptr() in self.watched}
                start = t.untyped_storage().data_ptr()
                self.regions.append((start, start + t.untyped_storage().nbytes(), entry))
                record["tensors"].append(entry)
        if len(self.launches) < MAX_ITEMS:
            self.launches.append(record)
        try:
            return original(runner, *args, **kwargs)
        finally:
            record["grid"] = [int(n) for n in getattr(builder, "grid_dim", ())]
            self.regions = []

    def access(self, ptrs, mask, values, key):
        addresses = numpy.asarray(ptrs.data)
        keep = numpy.broadcast_to(numpy.asarray(mask.data, dtype=bool), addresses.shape)
        addresses = addresses[keep]
        values = numpy.broadcast_to(numpy.asarray(values), keep.shape)[keep]
        for start, end, entry in self.regions:
            inside = numpy.unique(addresses[(addresses >= start) & (addresses < end)])
            entry[key] = max(entry[key], inside.size) if key == "most_read" else entry[key] + inside.size
        if key == "stored":
            self.stored.append(values.copy())
            self.written.append(addresses.copy())
        elif self.written:  # a load of memory no kernel wrote in this call brings values in
            self.written = [numpy.unique(numpy.concatenate(self.written))]
            self.loaded.append(values[~numpy.isin(addresses, self.written[0])].copy())
        else:
            self.loaded.append(values.copy())

    def record(self, result):
        found = {"launches": self.launches}
        if self.patched and isinstance(result, torch.Tensor) and result.is_floating_point():
            got = result.detach().cpu().reshape(-1)
            counts = []
            for pool in (self.stored, self.loaded):
                hit = numpy.zeros(got.numel(), dtype=bool)
                for dtype in {values.dtype for values in pool if values.dtype.kind == "f"}:
                    same = numpy.concatenate([values for values in pool if values.dtype == dtype])
                    mine = got.to(getattr(torch, dtype.name)).numpy()
                    bits = numpy.dtype(f"u{dtype.itemsize}")
                    hit |= numpy.isin(mine.view(bits), same.view(bits))
                counts.append(int(hit.sum()))
            found["returned"] = {"elements": got.numel(), "stored": counts[0], "copied": counts[1]}
        return found


class Interpreter:
    """Runs the checks of a plan against a namespace: the notebook's globals, or (in the grader) the reference's.

    With `float_dtype=torch.float64` (the grader's reference runs) float inputs and modules become double precision.
    """

    def __init__(self, namespace, float_dtype=None):
        self.namespace, self.float_dtype = namespace, float_dtype

    def value(self, spec, registers):
        if not isinstance(spec, dict):
            if isinstance(spec, list):
                raise PlanError("a list value must be written {\"list\": [...]}")
            return spec
        (kind, body), = spec.items()
        if kind == "tensor":
            return decode_tensor(body, self.float_dtype)
        if kind == "ref":
            return registers[body]
        if kind == "global":
            if body not in self.namespace:
                raise NameError(f"name '{body}' is not defined")
            return self.namespace[body]
        if kind == "attr":
            return getattr(self.value(body[0], registers), body[1])
        if kind == "item":
            return self.value(body[0], registers)[body[1]]
        if kind in ("list", "tuple"):
            items = [self.value(item, registers) for item in body]
            return items if kind == "list" else tuple(items)
        if kind == "generator":
            return torch.Generator().manual_seed(body)
        if kind == "dtype":
            return getattr(torch, body)
        raise PlanError(f"unknown value kind {kind!r}")

    def record(self, value, kind):
        if kind == "value":
            return encode(value)
        if kind == "type":
            return {"type": type(value).__name__, "module": isinstance(value, torch.nn.Module)}
        if kind == "parameters":  # a parameter that is another's tensor (tied weights) names the first: [.., first]
            first, listed = {}, []
            for name, p in list(value.named_parameters(remove_duplicate=False))[:MAX_ITEMS]:
                listed.append([name, list(p.shape), bool(p.requires_grad)] + ([first[id(p)]] if id(p) in first else []))
                first.setdefault(id(p), name)
            return {"parameters": listed}
        if kind == "buffers":
            persistent = set(value.state_dict())
            return {"buffers": [[name, list(b.shape), name in persistent] for name, b in
                                list(value.named_buffers())[:MAX_ITEMS]]}
        if kind == "state":
            return {"state": {name: encode_tensor(t) for name, t in list(value.state_dict().items())[:MAX_ITEMS]}}
        if kind == "function":
            return {"function": _functions(value)}
        if kind == "grads":
            return {"grads": {name: None if p.grad is None else encode_tensor(p.grad)
                              for name, p in list(value.named_parameters())[:MAX_ITEMS]}}
        raise PlanError(f"unknown record kind {kind!r}")

    def call(self, function, args, kwargs, op, registers, records):
        """function(*args, **kwargs), with what `op` asks to observe while it runs recorded."""
        watched = {label: self.value(v, registers) for label, v in (op.get("inputs_of") or {}).items()}
        seen = {label: [] for label in watched}
        handles = [module.register_forward_pre_hook(
            lambda _, inputs, label=label: seen[label].append(
                list(inputs[0].shape) if inputs and isinstance(inputs[0], torch.Tensor) else None))
            for label, module in watched.items()]
        trace = op.get("trace")
        if trace is not None and not (isinstance(trace, int) and 0 <= trace < len(args)
                                      and isinstance(args[trace], torch.Tensor)):
            raise PlanError("trace names a tensor argument by its position")
        refused = refusals[0]
        with contextlib.ExitStack() as stack:
            memory = stack.enter_context(PeakMemory()) if op.get("measure") else None
            traced = stack.enter_context(OpTrace(args[trace])) if trace is not None else None
            launches = stack.enter_context(_Launches(traced.watched)) if trace is not None else None
            for handle in handles:
                stack.callback(handle.remove)
            try:
                result = function(*args, **kwargs)
                caught = None
            except Exception as error:
                if not isinstance(error, ValueError):  # a ValueError is the student's own words: judged as written
                    try:
                        error.size_origins = size_origins(error, function, args, kwargs)
                    except Exception:
                        pass
                if not op.get("catch") or refusals[0] > refused:  # computing out of sight is never forgiven
                    raise
                result, caught = None, _raised(error)
        if memory is not None:
            records.append({"memory": {"peak_bytes": memory.peak_bytes, "largest_numel": memory.largest_numel,
                                       "retained_bytes": memory.current_bytes}})  # made inside, alive after it
        if traced is not None:
            records.append({"trace": {"ops": traced.ops, "reads": [list(r) for r in traced.reads][:4000],
                                      "unseeded": traced.unseeded[:4000], "outside": traced.outside(result)}
                            | launches.record(result)})
        if watched:
            records.append({"inputs_of": {label: shapes[:MAX_ITEMS] for label, shapes in seen.items()}})
        if op.get("catch"):
            records.append({"caught": caught})
        return result

    def run_check(self, operations):
        """The records of one check: one per `record` or `load`, then one `raised` if an operation failed."""
        registers, records = {}, []
        try:
            for op in operations:
                if "set" in op and "call" not in op:
                    registers[op["set"]] = self.value(op["value"], registers)
                elif "call" in op:
                    function = self.value(op["call"], registers)
                    args = [self.value(a, registers) for a in op.get("args", [])]
                    kwargs = {k: self.value(v, registers) for k, v in op.get("kwargs", {}).items()}
                    with torch.enable_grad() if op.get("grad") else torch.no_grad():
                        result = self.call(function, args, kwargs, op, registers, records)
                    if self.float_dtype is not None and isinstance(result, torch.nn.Module):
                        result = result.to(self.float_dtype)
                    registers[op.get("set", "_")] = result
                elif "seed" in op:
                    torch.manual_seed(op["seed"])
                elif "load" in op:
                    module = self.value(op["load"], registers)
                    state = {name: self.value(v, registers) for name, v in op["state"].items()}
                    missing, unexpected = module.load_state_dict(state, strict=False)
                    records.append({"loaded": {"missing": sorted(missing)[:MAX_ITEMS],
                                               "unexpected": sorted(unexpected)[:MAX_ITEMS]}})
                elif "record" in op:
                    records.append(self.record(self.value(op["record"], registers), op.get("as", "value")))
                else:
                    raise PlanError(f"unknown operation {sorted(op)}")
        except PlanError:
            raise
        except Exception as error:  # the student's code failed: that is a record too
            records.append(_raised(error))
        return records


_STOOD_IN = {}  # name -> the notebook's own value (or _MISSING) while a stand-in answers for it
_MISSING = object()


def stand_in(namespace, name=None, table=()):
    """Grading only: for the rest of a test cell, the calls of `name` listed in `table` ([[args], tensor data], ...)
    get the listed results, so that a part is graded on its own, not through the student's earlier part; any other
    call goes to the student's own function. Called with no name, it only puts back what a stand-in replaced."""
    for replaced, own in _STOOD_IN.items():
        if own is _MISSING:
            namespace.pop(replaced, None)
        else:
            namespace[replaced] = own
    _STOOD_IN.clear()
    if name is None:
        return
    own = namespace.get(name, _MISSING)
    answers = {tuple(args): decode_tensor(spec) for args, spec in table}

    def standing_in(*args, **kwargs):
        try:
            key = tuple(operator.index(a) for a in args)
        except TypeError:
            key = None
        if kwargs or key not in answers:
            if own is _MISSING:
                raise NameError(f"name {name!r} is not defined")
            return own(*args, **kwargs)
        return _as_written(answers[key], own, key)

    _STOOD_IN[name] = own
    namespace[name] = standing_in


def _as_written(right, own, key):
    """The right mask (True = blocked) as the student's own function means it when that writes numbers: an additive
    mask of 0 and a negative number stays one; a mask of 0 and 1 comes as a bool mask whose True is what their 1
    marks: blocked, or may attend where their own mask agrees with that reading on more entries (a lower-triangular
    mask of ones), so that `masked_fill(mask, ...)`, `mask == 0`, `mask.bool()` and `weights * mask` all read it
    right. A bool mask is the exercise's, True = blocked."""
    try:
        theirs = own(*key)
    except Exception:
        return right.clone()
    if (not isinstance(theirs, torch.Tensor) or theirs.shape != right.shape or theirs.dtype == torch.bool
            or theirs.is_complex()):
        return right.clone()
    if theirs.is_floating_point() and bool((theirs < 0).any()):
        return torch.zeros(right.shape, dtype=theirs.dtype).masked_fill(right, theirs.min().item())
    theirs = theirs.detach().cpu()
    if int((theirs == (~right).to(theirs.dtype)).sum()) > int((theirs == right.to(theirs.dtype)).sum()):
        return ~right
    return right.clone()


_armed = {}  # the hidden checks of the test cell now running, while its visible tests run


def arm(namespace, cell, plan):
    """Before a test cell's visible tests (the graded copy only): should they fail, the hidden checks run all the same,
    so that the grader can name a mistake they recognise; the visible failure is shown after them, as it would be."""
    from IPython import get_ipython

    shell = get_ipython()
    _armed.update(namespace=namespace, cell=cell, plan=plan, shell=shell,
                  previous=(shell.custom_exceptions, shell.CustomTB))
    previous_types, previous_handler = _armed["previous"]

    def after_failure(self, etype, value, tb, tb_offset=None):
        try:
            run(namespace, cell, plan)
            from IPython.display import publish_display_data
            publish_display_data({VISIBLE_FAILED_MIME: {"cell": cell}})
        except Exception:
            pass  # no records: the grader shows the visible failure alone
        if previous_types and issubclass(etype, previous_types):
            return previous_handler(etype, value, tb, tb_offset)
        return self.showtraceback((etype, value, tb), tb_offset=tb_offset)

    shell.set_custom_exc((Exception,), after_failure)


def run(namespace, cell, plan=None):
    """Run one test cell's hidden checks in the notebook and publish the records (called by the graded copy only)."""
    from IPython.display import publish_display_data

    if _armed:
        _armed["shell"].custom_exceptions, _armed["shell"].CustomTB = _armed["previous"]
        plan = _armed["plan"] if plan is None else plan
        _armed.clear()
    publish_display_data({BEGIN_MIME: {"cell": cell}})
    interpreter = Interpreter(namespace)
    try:
        records = [interpreter.run_check(check) for check in plan]
    finally:
        stand_in(namespace)
    publish_display_data({RECORDS_MIME: {"cell": cell, "records": records}})
