"""What the judges of several steps share: reading records, weights with the contract's names, and the checks of a
module (its forward pass, its dropout, what a function built). Each step's judge (stepNN.py) holds that step's checks.
"""
import re

import torch

from attention_course.checks import specific_error_hint
from attention_course.probe import decode_tensor
from attention_grader.judging import (OUT_OF_SIGHT, G, Check, Expect, NamedMistake, Program, compare, default_judge,
                                      raised_message)

# PyTorch's attention kernels, by the start of their aten names, and its softmax operations: a part that asks for the
# student's own computation runs none of them, whatever name reached them (judged from the operations traced in the
# kernel, a teaching check: a student who replaces the probe could forge the trace).
ATTENTION_KERNELS = ("_scaled_dot_product", "scaled_dot_product", "_flash_attention", "_efficient_attention",
                     "_fused_sdp", "_cudnn_attention", "_native_multi_head_attention")
SOFTMAX_OPS = frozenset({"_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax", "_masked_softmax"})
# What F.scaled_dot_product_attention runs on its math path (under a trace it takes that path): softmaxes that
# torch.softmax never dispatches.
ATTENTION_SOFTMAX = frozenset({"_safe_softmax", "_masked_softmax"})
# What attention written out runs and a part built on SDPA does not: a softmax, or the exponentials of one.
OWN_SOFTMAX_OPS = SOFTMAX_OPS | {"exp", "exp_"}
SDPA_BESIDES = ("the weights are computed outside SDPA (a softmax or exponential ran beside its call): let "
                "F.scaled_dot_product_attention compute the scores, mask, softmax and weighted sum, and use its output")


def library_ops(ops, refused=()):
    """The operations of a trace that are one of PyTorch's attention kernels or named in `refused`, sorted."""
    return sorted({str(op) for op in ops if str(op).startswith(ATTENTION_KERNELS) or str(op) in refused})


ANY_VALUES = Expect("", atol=float("inf"))
EXACT = Expect("", atol=0, rtol=0)
INPLACE = "use out-of-place operations on x"


def linear_state(inputs, name, d_in, d_out, bias=True):
    state = {f"{name}.weight": inputs.randn(d_out, d_in, scale=0.5)}
    if bias:
        state[f"{name}.bias"] = inputs.randn(d_out, scale=0.5)
    return state


def attention_state(inputs, d_in, d_out, qkv_bias):
    """Weights for W_query, W_key, W_value and out_proj, with the contract's names."""
    state = {}
    for name in ("W_query", "W_key", "W_value"):
        state.update(linear_state(inputs, name, d_in, d_out, qkv_bias))
    state.update(linear_state(inputs, "out_proj", d_out, d_out))
    return state


def with_later_tokens_changed(inputs, x, cut):
    changed = x.clone()
    changed[:, cut:] += inputs.randn(*changed[:, cut:].shape)
    return changed


def tensor_of(record):
    return decode_tensor(record["tensor"], torch.float64)


def first_raised(records):
    return next(((index, record) for index, record in enumerate(records) if "raised" in record), None)


def with_hint(problem, hint):
    return problem and problem + (f"\n  likely mistake: {hint}" if hint else "")


def with_other_hint(problem, hint):
    """`problem` with its likely mistake replaced by `hint`."""
    return with_hint(problem.split("\n  likely mistake: ")[0], hint)


def own_attention_check(what, p, call, hint):
    """`call` (the last call made in program `p`, with `trace=`) may not run one of PyTorch's attention kernels,
    whatever name reached it: for a part whose point is attention's own steps. Its values are judged by the cell's
    other checks."""
    index = len(p.expects) - 1  # the record of the operations the call ran, registered with the call
    p.record(call, "the result")

    def judge(got, want):
        found = first_raised(got)
        if found:  # the cell's other checks say why it raised, unless it computed out of the trace's sight
            return raised_message(what, found[1]) if OUT_OF_SIGHT in str(found[1].get("message")) else None
        trace = got[index].get("trace") if isinstance(got[index], dict) else None
        if not isinstance(trace, dict) or not isinstance(trace.get("ops"), list):
            return f"{what}: its operations were not recorded"
        used = library_ops(trace["ops"], ATTENTION_SOFTMAX)
        return with_hint(f"{what}: it ran aten.{used[0][:60]}, a library's attention kernel", hint) if used else None

    return Check(what, p, judge=judge)


def sdpa_use_check(what, p, call, hint):
    """`call` (the last call made in program `p`, with `trace=`) must run PyTorch's attention kernel and compute no
    softmax or exponential of its own: a throwaway F.scaled_dot_product_attention call beside attention written out
    does not count, and SDPA reached under any name does (judged from the operations that ran)."""
    index = len(p.expects) - 1
    p.record(call, "the result")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1]) if OUT_OF_SIGHT in str(found[1].get("message")) else None
        trace = got[index].get("trace") if isinstance(got[index], dict) else None
        if not isinstance(trace, dict) or not isinstance(trace.get("ops"), list):
            return f"{what}: its operations were not recorded"
        ops = {str(op) for op in trace["ops"]}
        own = sorted(ops & (OWN_SOFTMAX_OPS - ATTENTION_SOFTMAX))
        if not library_ops(ops):
            return with_hint(f"{what}: F.scaled_dot_product_attention never ran", hint)
        if own:
            return with_hint(f"{what}: it ran aten.{own[0]} besides F.scaled_dot_product_attention", SDPA_BESIDES)
        return None

    return Check(what, p, judge=judge)


def shape_problem(got, want, name, hint):
    """A message when `got` is not a tensor of the reference's shape (whatever its values)."""
    if "tensor" not in got or got["tensor"]["shape"] != want["tensor"]["shape"]:
        return with_hint(compare(got, want, name, ANY_VALUES) or f"{name} has the wrong shape", hint)
    return None


def differ(a, b, atol):
    return a.shape != b.shape or not torch.allclose(a, b, atol=atol, rtol=atol, equal_nan=True)


def forward_check(what, cls, args, state, x, *, kwargs=None, mode="eval", cut=None, changed=None,
                  parameters_hint="", runs_hint="", value_hint="", again_hint="", causal_hint="", atol=1e-5):
    """cls(*args) with `state` loaded, run on x twice in `mode` (and on `changed`: x with tokens `cut` and later
    changed). Judged in the order a student would debug: parameters, shape, a second call, the input, causality,
    the values."""
    p = Program()
    module = p.call(G(cls), *args, **(kwargs or {}))
    p.record(module, "its parameters", kind="parameters")
    p.load(module, state)
    p.call(module.attr(mode))
    x_ref = p.tensor(x)
    p.record(p.call(module, x_ref), "the output")
    p.record(p.call(module, x_ref), "a second call")
    p.record(x_ref, "its input after the call")
    if changed is not None:
        p.record(p.call(module, p.tensor(changed)), "the output on changed later tokens")

    def judge(got, want):
        found = first_raised(got)
        if found:
            index, record = found
            return raised_message(what, record, parameters_hint if index < 2 else runs_hint)
        problem = with_hint(compare(got[0], want[0], f"{what}: its parameters", EXACT), parameters_hint)
        problem = problem or compare(got[1], want[1], what, EXACT)
        problem = problem or shape_problem(got[2], want[2], f"{what}: the output", value_hint)
        if problem:
            return problem
        first = tensor_of(got[2])
        if differ(tensor_of(got[3]), first, 1e-6):
            return with_hint(f"{what}: a second call in {mode} mode gives another output", again_hint)
        problem = with_hint(compare(got[4], want[4], f"{what}: its input after the call", EXACT),
                            "it changed its input: " + INPLACE)
        if problem:
            return problem
        if changed is not None and differ(tensor_of(got[5])[:, :cut], first[:, :cut], 1e-5):
            return with_hint(f"{what}: the outputs of tokens before {cut} change when tokens {cut} and later change",
                             causal_hint)
        return with_hint(compare(got[2], want[2], f"{what}: the output", Expect("", atol=atol)), value_hint)

    return Check(what, p, judge=judge)


def dropout_check(what, cls, args, state, x, seed, hint, *, copies=1, mean_hint=""):
    """cls(*args) in training mode must drop attention weights: its output differs from the eval-mode output (and,
    over `copies` copies of x in one call, averages to it)."""
    p = Program()
    module = p.call(G(cls), *args)
    p.load(module, state)
    p.call(module.attr("eval"))
    x_ref = p.tensor(x)
    p.record(p.call(module, x_ref), "the output in eval mode")
    p.call(module.attr("train"))
    p.seed(seed)
    p.record(p.call(module, p.call(x_ref.attr("repeat"), copies, 1, 1)), "the output in training mode")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = compare(got[0], want[0], what, EXACT)
        problem = problem or shape_problem(got[1], want[1], f"{what}: the output in eval mode", "")
        problem = problem or shape_problem(got[2], want[2], f"{what}: the output in training mode", "")
        if problem:
            return problem
        evaluated, trained = tensor_of(got[1]), tensor_of(got[2]).view(copies, *want[1]["tensor"]["shape"])
        if not (trained[0] - evaluated).abs().nan_to_num(nan=float("inf")).max().item() > 1e-4:
            return with_hint(f"{what}: the output in training mode equals the output in eval mode", hint)
        if copies > 1 and differ(trained.mean(0), evaluated, 0.3):
            return with_hint(f"{what}: the mean of {copies} outputs in training mode is far from the output in eval "
                             "mode", mean_hint)
        return None

    return Check(what, p, judge=judge)


CLASS = "the class of the result"


def returns_check(what, program, hint=""):
    """The default judge, with a message naming both classes when the record labelled CLASS differs (record
    `result.__class__.__name__` with that label)."""
    check = Check(what, program)

    def judge(got, want):
        for g, w, expect in zip(got, want, program.expects):
            if expect.label == CLASS and "str" in g and g != w:
                return with_hint(f"{what} should return a {w['str']}, got a {str(g['str'])[:60]}", hint)
        return default_judge(check, got, want)

    check.judge = judge
    return check


def built_like_check(what, program, result, cls, args, state, x, seed, hint):
    """The sizes and dropout rate of `result`, a module that the student's function built with the student's class
    `cls`: with the same weights loaded, it must compute what cls(*args) computes in the student's own kernel (in
    eval mode, and in training mode from the same seed). So a bug of the class itself costs nothing here; when the
    class cannot run at all, only its printed structure and buffers are compared."""
    p = program
    same = p.call(G(cls), *args)
    p.load(result, state)
    p.load(same, state)
    labels = ["result repr", "same repr", "result buffers", "same buffers", "same eval", "result eval",
              "same train", "result train"]
    first = len(p.expects)
    p.record(p.call(result.attr("__repr__")), labels[0])
    p.record(p.call(same.attr("__repr__")), labels[1])
    p.record(result, labels[2], kind="buffers")
    p.record(same, labels[3], kind="buffers")
    x_ref = p.tensor(x)
    for mode, pair in (("eval", labels[4:6]), ("train", labels[6:])):
        for module, label in zip((same, result), pair):
            p.call(module.attr(mode))
            p.seed(seed)  # the same random numbers for both, should the class draw any
            p.record(p.call(module, x_ref), label)
    built = f"{cls}({', '.join(map(repr, args))})"

    def judge(got, want):
        found = first_raised(got)
        if found and found[0] < first:
            return raised_message(what, found[1])
        count = found[0] if found else len(got)
        named = dict(zip(labels, got[first:count]))
        other = with_hint(f"{what} builds a module that differs from {built}", hint)
        if len(named) < 4:
            return other
        if named["result repr"] != named["same repr"] or named["result buffers"] != named["same buffers"]:
            return other
        for same_label, result_label in ((labels[4], labels[5]), (labels[6], labels[7])):
            if same_label not in named:  # the class itself cannot run: its own test says why
                return None
            if result_label not in named:
                return with_hint(f"{what}: the module it returned raised {str(found[1]['raised'])[:80]} where "
                                 f"{built} runs", hint)
            if differ(tensor_of(named[result_label]), tensor_of(named[same_label]), 1e-6):
                return other
        return None

    return Check(what, p, judge=judge)


def mask_buffer_check(what, cls, args, hint):
    p = Program()
    p.record(p.call(G(cls), *args), "its buffers", kind="buffers")

    def judge(got, want):
        if "raised" in got[0]:
            return raised_message(what, got[0])
        if "mask" not in [str(entry[0]) for entry in got[0]["buffers"]]:
            return with_hint(f"{what} has no buffer named `mask`", hint)
        return None

    return Check(what, p, judge=judge)


def qkv_state(inputs, d_in, d_out, bias):
    state = {}
    for name in ("W_query", "W_key", "W_value"):
        state.update(linear_state(inputs, name, d_in, d_out, bias))
    return state


def floats_where_due(cell):
    """The checks of `cell`, whose judges first make sure that the student's records are all there and that a tensor
    holds floats wherever the reference's does (judging.compare raises RuntimeError on an integer tensor there)."""
    def checks(inputs):
        result = cell(inputs)
        for check in result:
            if check.program is not None:
                check.judge = whole_records(check, check.judge or (lambda got, want, check=check:
                                                                   default_judge(check, got, want)))
        return result

    return checks


def whole_records(check, judge):
    expects = check.program.expects

    def checked(got, want):
        for g, w, expect in zip(got, want, expects):
            floats_due = "tensor" in w and w["tensor"]["storage"] == "float64"
            if floats_due and "tensor" in g and g["tensor"]["storage"] != "float64":
                return (f"{check.what}: {expect.label} should be a float tensor, got dtype "
                        f"{str(g['tensor']['dtype'])[:20]}")
        if len(got) < len(expects) and not (got and "raised" in got[-1]):
            return f"{check.what}: stopped before {expects[len(got)].label}"
        return judge(got, want)

    return checked


def random_chunks(inputs, num_tokens):
    """Sizes of consecutive chunks of 1 to 3 tokens that add up to num_tokens: a sequence fed through a KV cache."""
    sizes = []
    while sum(sizes) < num_tokens:
        sizes.append(min(inputs.randint(1, 4), num_tokens - sum(sizes)))
    return sizes


def matched_records(check):
    """`check`, whose judge first asks whether the student's records are the ones it is compared with, record by
    record: so a mistake run in the answer key is named even where the judge would stop at a symptom of the records
    alone (a later token that changes an earlier output), and a mistake that raises is named where the student's
    code raises alike (at the same record, the same exception, a message with the same words and sizes: a view and a
    reshape, or masked_fill and masked_fill_, word it differently)."""
    judge = check.judge or (lambda got, want: default_judge(check, got, want))

    def words(record):
        text = re.sub(r"tensor [ab] ", "tensor ", str(record["message"]))
        return record["raised"], re.sub(r"\d+", "#", text), sorted(re.findall(r"\d+", text))

    def same(got, want):
        if len(got) != len(want):
            return False
        for g, w, expect in zip(got, want, check.program.expects):
            if "raised" in w or "raised" in g:
                if not ("raised" in w and "raised" in g and words(g) == words(w)):
                    return False
            elif compare(g, w, expect.label, Expect("", atol=1e-5, rtol=1e-4)):
                return False
        return True

    def judged(got, want):
        if same(got, want):
            return None
        if first_raised(want):  # a mistake that raises: the student's code did not raise alike
            return f"{check.what}: raised differently"
        return judge(got, want)

    check.judge = judged
    return check


# Naming a mistake by running it: the usual mistakes of a part, run in the answer key on the same inputs

NONE_MATCHES = "none of the usual mistakes gives these values"


def same_raise(got, want):
    """Both records stopped at the same call with the same exception and the same message (a known mistake run in the
    answer key raises as the student's code did)."""
    a, b = first_raised(got), first_raised(want)
    if not a or not b or a[0] != b[0] or a[1]["raised"] != b[1]["raised"]:
        return False
    words = [re.sub(r"tensor [ab] ", "tensor ", str(r[1].get("message"))) for r in (a, b)]
    return words[0] == words[1]


def raised_alike(got, want):
    """The student's code raised where a known mistake run in the answer key raises: at the same record, the same
    exception, and (but for a ValueError, whose words are the student's own) the same message."""
    a, b = first_raised(got), first_raised(want)
    if not a or not b or a[0] != b[0] or a[1]["raised"] != b[1]["raised"]:
        return False
    return a[1]["raised"] == "ValueError" or same_raise(got, want)


def strictly(check):
    """`check`, naming a mistake that raises only when the student's code raised alike (see raised_alike), not on
    any exception of the same type at that record."""
    judge = check.judge or (lambda got, want: default_judge(check, got, want))

    def judged(got, want):
        if first_raised(want):
            return None if raised_alike(got, want) else f"{check.what}: raised differently"
        return judge(got, want)

    check.judge = judged
    return check


def read_error(message):
    """What an error says the code did, when its words leave no doubt; "" otherwise."""
    message = str(message)
    if "return_types.max" in message or "return_types.min" in message:
        return ("torch.max(x, dim=...) (and min) returns a pair (values, indices), not a tensor: subtract its "
                ".values, or use torch.amax(x, dim=dim, keepdim=True)")
    return specific_error_hint(message)


def by_running(check, mistakes, read=read_error):
    """`check`, naming a mistake of `mistakes` ((hint, {name: mistaken function}), run in the answer key) when it gives
    the student's records; otherwise reading the student's error (`read`), or, where the values are wrong, saying that
    no usual mistake gives them."""
    judge = check.judge or (lambda got, want: default_judge(check, got, want))

    def judged(got, want):
        if first_raised(want):  # only a mistake run in the answer key raises here: the student's code must raise alike
            return None if same_raise(got, want) else f"{check.what}: raised differently"
        problem = judge(got, want)
        if not problem or isinstance(problem, NamedMistake):
            return problem
        found = first_raised(got)
        if found:
            reading = read(found[1].get("message"))
            return NamedMistake(raised_message(check.what, found[1], reading)) if reading else problem
        head, _, hint = problem.partition("\n  likely mistake: ")
        first = head.split("\n")[0]
        if "after the call" in first or not ("has the wrong values" in first or "nan or inf" in first):
            return problem  # not wrong values of the result (it changed its input, say): the message says what
        return head + f"\n  likely mistake: {NONE_MATCHES}" + (f"; {hint}" if hint else "")

    check.judge = judged
    check.mistakes = tuple(mistakes)
    return check


def _outcome(function, args, kwargs):
    try:
        result = function(*[(a.double() if a.is_floating_point() else a).clone() if isinstance(a, torch.Tensor) else a
                            for a in args], **kwargs)
        return ("value", result.detach() if isinstance(result, torch.Tensor) else result)
    except Exception as error:  # a mistake may raise, as the student's code does
        return ("raised", type(error).__name__, str(error))


def _same_outcome(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "raised":
        return a[1:] == b[1:]
    x, y = a[1], b[1]
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        return x == y
    return x.shape == y.shape and torch.allclose(x, y, atol=1e-6, rtol=1e-6, equal_nan=True)


def distinct(mistakes, args, kwargs, plain=()):
    """The mistakes that tell themselves apart on this input: one whose result (or error) another mistake, or a plain
    computation without the mistake (`plain`), gives as well would be named where the student made the other one."""
    outcomes = [_outcome(next(iter(replacements.values())), args, kwargs) for _, replacements in mistakes]
    plain_outcomes = [_outcome(function, args, kwargs) for function in plain]
    return tuple(mistake for i, mistake in enumerate(mistakes)
                 if not any(_same_outcome(outcomes[i], other) for j, other in enumerate(outcomes) if j != i)
                 and not any(_same_outcome(outcomes[i], other) for other in plain_outcomes))
