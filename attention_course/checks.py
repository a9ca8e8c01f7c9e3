"""Readable checks for the exercise notebooks.

Every failure says what was expected, what came, and the likely mistake, as an AssertionError that
nbgrader shows to the student. Nothing here knows an answer: the expected values come from the test.
Imported in a notebook, this module makes IPython show a failed check as its message alone, without a traceback,
and print a cell's warnings after its failure, so that the Validate dialog shows the failure first.
"""
import inspect
import re
import sys
import warnings

import torch

# Taken once at import, so that a notebook which later replaces torch.allclose cannot fool these checks.
_allclose = torch.allclose
_Tensor = torch.Tensor


class CheckFailed(AssertionError):
    """A check that failed; the message is written for the student."""


def _show(value, limit=500):
    text = str(value.detach() if isinstance(value, _Tensor) else value)
    return text if len(text) <= limit else text[:limit] + " ..."


def _in_dtype_of(expected, got):
    """The expected tensor shown in the student's dtype (bool or floating), so that a dtype printed beside only one
    of them is not taken for the mistake."""
    if not (isinstance(expected, _Tensor) and isinstance(got, _Tensor)) or expected.dtype == got.dtype:
        return expected
    if got.dtype == torch.bool and not expected.is_complex():
        return expected != 0
    if got.is_floating_point() and (expected.is_floating_point() or expected.dtype == torch.bool):
        return expected.to(got.dtype)
    return expected


def likely_mistake(hint):
    """The words of a hint. A test cell names its hints by key ("03.weights"), so that the notebook shows no hint
    before its check fails: the words are looked up only then (attention_course/mistakes/stepNN.py)."""
    if isinstance(hint, str) and HINT_KEY.fullmatch(hint):
        from attention_course.mistakes import words
        return words(hint)
    return hint


HINT_KEY = re.compile(r"\d\d\.[A-Za-z0-9_-]+")


def fail(problem, expected, got, hint=""):
    """Raise a CheckFailed saying what was expected, what came, and the likely mistake."""
    hint = likely_mistake(hint)
    message = f"{problem}\n  expected: {_show(_in_dtype_of(expected, got))}\n  got:      {_show(got)}"
    if hint:
        message += f"\n  likely mistake: {hint}"
    raise CheckFailed(message)


def expect(condition, problem, hint=""):
    """Fail with `problem` (and the hint) unless `condition` holds."""
    if not condition:
        hint = likely_mistake(hint)
        message = problem + (f"\n  likely mistake: {hint}" if hint else "")
        raise CheckFailed(message)


def expect_tensor(name, actual, hint="did the function reach its `return` statement?"):
    if not isinstance(actual, _Tensor):
        fail(f"{name} should be a torch.Tensor", "a torch.Tensor", type(actual).__name__, hint)


def shape_difference(expected, got):
    """How shape `got` differs from `expected`, as a fact ("dimensions 1 and 2 are swapped"), or "" when it is not one
    simple difference."""
    expected, got = tuple(expected), tuple(got)
    if expected == got:
        return ""
    if len(got) == len(expected):
        differ = [i for i, (e, g) in enumerate(zip(expected, got)) if e != g]
        if len(differ) == 2 and (got[differ[0]], got[differ[1]]) == (expected[differ[1]], expected[differ[0]]):
            return f"dimensions {differ[0]} and {differ[1]} are swapped"
        if sorted(got) == sorted(expected):
            return "the same sizes in another order"
        if len(differ) == 1:
            i = differ[0]
            return f"dimension {i} has size {got[i]} where {expected[i]} belongs"
    longer, shorter, word = (got, expected, "an extra") if len(got) > len(expected) else (expected, got, "a missing")
    where = [i for i in range(len(longer)) if len(longer) == len(shorter) + 1 and longer[:i] + longer[i + 1:] == shorter]
    if where:
        at = f"dimension {where[0]}" if len(where) == 1 else f"dimensions {where[0]} to {where[-1]}: one of them"
        return f"{word} dimension of size {longer[where[0]]} ({at})"
    return ""


def expect_shape(name, actual, shape, hint=""):
    expect_tensor(name, actual)
    if tuple(actual.shape) != tuple(shape):
        difference = shape_difference(shape, actual.shape)
        fail(f"{name} has the wrong shape" + (f": {difference}" if difference else ""), tuple(shape),
             tuple(actual.shape), hint)


def expect_close(name, actual, expected, hint="", atol=1e-4, rtol=1e-4):
    """`actual` must have the shape of `expected` and the same values to within atol + rtol * |expected|."""
    expected = torch.as_tensor(expected, dtype=torch.float64)
    expect_shape(name, actual, expected.shape, hint)
    got = actual.detach().to(torch.float64)
    if not bool(torch.isfinite(got).all()) and bool(torch.isfinite(expected).all()):
        fail(f"{name} contains nan or inf", expected, actual, hint)
    if not _allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
        largest = (got - expected).abs().nan_to_num(nan=float("inf")).max().item()
        fail(f"{name} has the wrong values (largest difference {largest:.3g})", expected, actual, hint)


# What PyTorch's own error messages most often mean in these exercises, for a failure that has no hint of its own.
# Errors whose message names the operation that failed: their hint outranks a part's general one.
SPECIFIC_ERROR_HINTS = [
    ("view size is not compatible", "a view after transpose or permute needs .contiguous() first (or use .reshape)"),
    ("1D tensors expected", "torch.dot multiplies two 1-D vectors only, and here it met a tensor with more "
                            "dimensions: use @ or (a * b).sum(-1), which work on batches too"),
    ("does not match the number of dimensions", "an einsum equation names one letter per dimension, and this tensor "
                                                "has another number of them: write ... for the leading dimensions, "
                                                "so that one equation serves every shape the task allows"),
    ("must be a 3D tensor", "torch.bmm takes exactly 3-D tensors (batch, n, m): for other shapes use @ or "
                            "torch.matmul, which broadcast the leading dimensions"),
]
ERROR_HINTS = SPECIFIC_ERROR_HINTS + [
    ("mat1 and mat2 shapes cannot be multiplied", "the inner sizes of a matrix product must match: check which "
                                                  "operand is transposed, and over which dimensions"),
    ("must match the size of tensor", "two shapes that do not broadcast: print both operands' shapes at that line"),
    ("is invalid for input of size", "the sizes of the new shape must multiply to the tensor's number of elements"),
    ("out of range", "an index or a dimension past the end: count the dimensions of a batched input too"),
    ("expected scalar type", "two tensors of different dtypes in one operation: make them the same (e.g. .to(x.dtype))"),
    ("Expected size for first two dimensions", "a batched matrix product of tensors whose batch dimensions differ: "
                                               "print both operands' shapes at that line"),
    ("got NoneType", "a None reached a tensor operation (a layer built with bias=False has .bias None): handle that "
                     "case apart"),
    ("object has no attribute", "a name the task uses is missing or spelt otherwise: create it (in __init__ for a "
                                "module) under exactly that name"),
]
DIMENSION_OUT_OF_RANGE = re.compile(r"Dimension out of range \(expected to be in range of \[-(\d+), \d+\], "
                                    r"but got (-?\d+)\)")


def specific_error_hint(error):
    """The hint of an error whose message names what failed (see SPECIFIC_ERROR_HINTS), or ""."""
    dimension = DIMENSION_OUT_OF_RANGE.search(str(error))
    if dimension:
        size, index = dimension.groups()
        return (f"a tensor with {size} dimensions has no dimension {index}: either it lacks a dimension the code "
                "expects (print its shape at that line), or the code counts dimensions from the front (transpose(1, "
                "2), torch.bmm's 3-D batches) where counting from the end (transpose(-2, -1), @) works with or "
                "without leading dimensions")
    return next((hint for words, hint in SPECIFIC_ERROR_HINTS if words in str(error)), "")


def error_hint(error, kind=None):
    """The likely meaning of an exception (or of its message and the name of its type) that came with no hint."""
    kind = kind or type(error).__name__
    if kind == "ValueError":
        return "your code raised this ValueError on an input the exercise allows: check the condition that raises it"
    return specific_error_hint(error) or next((hint for words, hint in ERROR_HINTS if words in str(error)), "")


SIZE_ERROR_WORDS = ("must match the size", "cannot be multiplied", "is invalid for input of size", "Expected size",
                    "shape", "out of bounds", "size mismatch", "expected size")


def _sizes_of(name, value):
    if isinstance(value, _Tensor):
        return [(size, f"{name}.shape[{dim}]") for dim, size in enumerate(value.shape)]
    if isinstance(value, int) and not isinstance(value, bool):
        return [(value, name)]
    return []


def size_origins(error, function, args=(), kwargs=None):
    """Where the sizes a shape error names came from, in this call: "6 is x.shape[1]; 3 is x.shape[2], self.d_in".
    Facts about the call's own arguments (and a module's int attributes and parameters), not a guess: empty when the
    error names no size or none of them is one of the call's."""
    text = str(error)
    if not any(words in text for words in SIZE_ERROR_WORDS):
        return ""
    try:
        known = _known_sizes(function, args, kwargs or {})
    except Exception:  # a signature or a module that cannot be read: no origins, the message stands alone
        return ""
    text = re.sub(r"(\d)x(\d)", r"\1 x \2", text)  # "6x3 and 2x2"
    named = [int(n) for n in re.findall(r"(?<![\w.-])(\d+)(?![\w.])", text) if int(n) > 1]
    shown = []
    for size in dict.fromkeys(named):
        sources = [source for value, source in known if value == size]
        if sources:
            shown.append(f"{size} is {', '.join(dict.fromkeys(sources[:4]))}")
    return "; ".join(shown[:4])


def _known_sizes(function, args, kwargs):
    """(size, where it is) for every dimension of the call's tensor arguments and a module's ints and parameters."""
    module = function if isinstance(function, torch.nn.Module) else None
    try:
        arguments = inspect.signature(module.forward if module else function).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        arguments = {f"argument {i + 1}": a for i, a in enumerate(args)} | kwargs
    known = [pair for name, value in arguments.items() for pair in _sizes_of(name, value)]
    if module is not None:
        known += [pair for name, value in vars(module).items() if not name.startswith("_")
                  for pair in _sizes_of(f"self.{name}", value)]
        known += [pair for name, p in module.named_parameters() for pair in _sizes_of(f"self.{name}", p)]
    return known


def expect_runs(description, function, *args, hint="", **kwargs):
    """Call function(*args, **kwargs) and return its result; an exception becomes a failure that says where it came from."""
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(f"{description} is not written yet: replace the `raise NotImplementedError` line") from None
    except Exception as error:
        message = f"{description} raised {type(error).__name__}: {error}"
        origins = size_origins(error, function, args, kwargs)
        hint = specific_error_hint(error) or likely_mistake(hint) or error_hint(error)
        message += f"\n  in this call: {origins}" if origins else ""
        raise CheckFailed(message + (f"\n  likely mistake: {hint}" if hint else "")) from error


def value_error_hint(argument, raised=None):
    """What a check that wants a ValueError naming `argument` says when it got no error (raised None) or another."""
    if raised is None:
        return f"the wrong `{argument}` is let through: check it first and raise ValueError naming it"
    if raised == "AssertionError":
        return f"assert raises AssertionError (and is skipped under python -O): raise ValueError naming `{argument}`"
    return (f"the wrong `{argument}` reached the computation and failed there: check it before anything else and "
            "raise ValueError naming it")


def expect_value_error(description, call, argument, also=()):
    """`call()` must raise a ValueError whose message names `argument`, or one of the words in `also`, as a word
    (not an assert, not a later shape error)."""
    problem, hint = None, value_error_hint(argument)
    try:
        call()
        problem = f"{description} did not raise a ValueError"
    except NotImplementedError:
        raise CheckFailed(f"{description}: not written yet, replace the `raise NotImplementedError` line") from None
    except ValueError as error:
        words = "|".join(re.escape(word) for word in (argument, *also))
        if not re.search(rf"(?<![A-Za-z0-9_])({words})(?![A-Za-z0-9_])", str(error)):  # a word, not a letter
            problem = f"{description} raised ValueError({str(error)!r}), which does not name `{argument}`"
            hint = f"say which argument is wrong, e.g. raise ValueError(f\"... {argument}={{...}} ...\")"
    except Exception as error:
        problem = f"{description} raised {type(error).__name__} ({error}) instead of a ValueError"
        hint = value_error_hint(argument, type(error).__name__)
    expect(problem is None, problem, hint=hint)


def load_seeded_weights(module, seed, scale=0.5):
    """Overwrite every parameter of `module` with seeded random numbers, name by name in sorted order, so that a
    test's expected values do not depend on the order in which the module creates its layers."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parameter in sorted(module.named_parameters()):
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * scale)
    return module


def _show_failed_check(shell, etype, value, tb, tb_offset=None):
    # The message is written for the student; a traceback through the test code would only bury it.
    shell._showtraceback(etype, value, [f"{etype.__name__}: {value}"])


_held_warnings = []


def _hold_warning(message, category, filename, lineno, file=None, line=None):
    _held_warnings.append(warnings.formatwarning(message, category, filename, lineno, line))


def _print_held_warnings(*_):
    if _held_warnings:
        sys.stderr.write("".join(_held_warnings))
        _held_warnings.clear()


def show_failed_checks_briefly(shell):
    """Make `shell` show a failed check as its message alone, and a cell's warnings after it, at the cell's end."""
    shell.set_custom_exc((CheckFailed,), _show_failed_check)
    warnings.showwarning = _hold_warning
    if _print_held_warnings not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _print_held_warnings)


try:
    from IPython import get_ipython
except ImportError:
    get_ipython = None
if get_ipython is not None and get_ipython() is not None:
    show_failed_checks_briefly(get_ipython())
