"""Judges of step 06: MultiHeadAttentionWrapper, its registered heads, choosing its width, and ALiBi heads.

The heads are the notebook's provided CausalAttention. Part 1 judges the wrapper's output against the heads it
holds (their weights loaded one head at a time, then read back), so that heads kept in a plain list or one head used
num_heads times cost the points of Part 2 only, as their own tests say.
"""
import re

import torch

from attention_course import data
from attention_course.probe import encode_tensor
from attention_grader.judging import (G, Check, Expect, NamedMistake, Program, compare, describe, expect_value_error,
                                      raised_message)
from attention_grader.judges.common import (EXACT, first_raised, floats_where_due, qkv_state, shape_problem, tensor_of,
                                            with_hint, with_later_tokens_changed)

BATCH = data.journey_batch()  # (2, 6, 3)
WRAPPER = "MultiHeadAttentionWrapper"
CREATE_HEADS = "self.heads = nn.ModuleList([CausalAttention(...) for _ in range(num_heads)])"
CONCAT = ("torch.cat([head(x) for head in self.heads], dim=-1): the first d_out columns are the output of "
          "self.heads[0], the next d_out of self.heads[1], ...")
PASS_BIAS = "pass qkv_bias on to every head: CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)"
REGISTERED = ("keep the heads in nn.ModuleList (a Python list hides their parameters), and create a new "
              "CausalAttention for every head (one head repeated num_heads times counts once)")


def causal_attention_64(state, x):
    """One head's causal attention in float64 from its weights (contract names), without dropout."""
    def project(name):
        out = x @ state[f"{name}.weight"].T
        return out + state[f"{name}.bias"] if f"{name}.bias" in state else out

    queries, keys, values = project("W_query"), project("W_key"), project("W_value")
    num_tokens = x.shape[1]
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
    scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


def count_of(record):
    return int(record["int"]) if "int" in record else None


ARGUMENT_ORDER = ("the value of context_length reached the dropout argument: CausalAttention and "
                  "MultiHeadAttentionWrapper take (d_in, d_out, context_length, dropout, ...), in this order (or pass "
                  "the arguments by name)")


def raised_reading(what, record, context, hint=""):
    """raised_message, naming the mistake where the error's words leave no doubt: nn.Dropout refusing the value of
    context_length (the arguments passed out of order), or a layer size that is a float (width / num_heads)."""
    message = str(record.get("message"))
    if context > 1 and re.search(rf"dropout probability has to be between 0 and 1, but got {context}(\.0)?\b",
                                 message):
        return NamedMistake(raised_message(what, record, ARGUMENT_ORDER))
    if re.search(r"must be tuple of ints, but found element of type float", message):
        return NamedMistake(raised_message(what, record, "a layer size is a float (width / num_heads is a float even "
                                                         "when it divides): layer sizes are ints, width // num_heads"))
    return raised_message(what, record, hint)


def joined_problem(what, record, outs):
    """A message naming how the heads' outputs `outs` were joined, when a usual wrong way gives the student's output
    `record`; None when none does."""
    if "tensor" not in record:
        return None
    mine, right = tensor_of(record).double(), torch.cat(outs, dim=-1)
    ways = [
        (f"the heads' outputs are joined along the tokens (dim=1): {CONCAT}", lambda: torch.cat(outs, dim=1)),
        (f"the heads' outputs are joined along the batch (dim=0): {CONCAT}", lambda: torch.cat(outs, dim=0)),
        (f"torch.stack puts the heads in a new dimension: {CONCAT}", lambda: torch.stack(outs, dim=-1)),
        (f"torch.stack puts the heads in a new dimension: {CONCAT}", lambda: torch.stack(outs, dim=-2)),
        (f"torch.stack puts the heads in a new dimension: {CONCAT}", lambda: torch.stack(outs, dim=0)),
        (f"torch.stack puts the heads in a new dimension: {CONCAT}", lambda: torch.stack(outs, dim=1)),
        ("the heads' columns are interleaved (column 0 of every head, then column 1, ...: torch.stack(..., dim=-1) "
         f"flattened): {CONCAT}", lambda: torch.stack(outs, dim=-1).flatten(-2)),
        (f"the heads' outputs are added, not set side by side: {CONCAT}", lambda: sum(outs)),
        (f"the heads' outputs are averaged, not set side by side: {CONCAT}", lambda: sum(outs) / len(outs)),
        (f"the heads are joined in reverse order: {CONCAT}", lambda: torch.cat(outs[::-1], dim=-1)),
        (f"only the first head's output is returned: {CONCAT}", lambda: outs[0]),
    ]
    for hint, way in ways:
        candidate = way()
        if candidate.shape == right.shape and torch.allclose(candidate, right, atol=1e-5, rtol=1e-4):
            continue
        if candidate.shape == mine.shape and torch.allclose(mine, candidate, atol=1e-5, rtol=1e-4):
            return NamedMistake(f"{what}: the output is the heads' outputs joined the wrong way (shape "
                                f"{tuple(mine.shape)}, expected {tuple(right.shape)})\n  likely mistake: {hint}")
    return None


# ---------------------------------------------------------------------------------------------------------------
# Part 1: the output
# ---------------------------------------------------------------------------------------------------------------

def output_check(inputs, on, d_in, d_out, context, num_heads, bias, x, cut=None, changed=None):
    """The wrapper with each head's weights loaded into self.heads[h], in eval mode on x (and on `changed`: x with
    tokens `cut` and later changed); its output must be the heads' causal attention, side by side. `on` names x."""
    what = f"{WRAPPER}({d_in}, {d_out}, {context}, 0.0, num_heads={num_heads}, qkv_bias={bias}) on {on}"
    states = [qkv_state(inputs, d_in, d_out, bias) for _ in range(num_heads)]
    p = Program()
    wrapper = p.call(G(WRAPPER), d_in, d_out, context, 0.0, num_heads=num_heads, qkv_bias=bias)
    p.record(p.call(wrapper.attr("heads").attr("__len__")), "the number of heads")
    for h, state in enumerate(states):
        p.load(wrapper.attr("heads")[h], state)
    p.call(wrapper.attr("eval"))
    x_ref = p.tensor(x)
    p.record(p.call(wrapper, x_ref), "the output")
    if changed is not None:
        p.record(p.call(wrapper, p.tensor(changed)), "the output on changed later tokens")
    p.record(x_ref, "its input after the call")
    for h in range(num_heads):
        p.record(wrapper.attr("heads")[h], f"head {h}", kind="state")
    # records: the number of heads, one `loaded` per head, the output(s), x after the call, one state per head
    out = num_heads + 1
    x_after = out + (2 if changed is not None else 1)
    heads = x_after + 1

    def judge(got, want):
        found = first_raised(got)
        if found and found[0] == 0:
            return raised_reading(what, found[1], context, CREATE_HEADS)
        if got[0] != want[0]:
            return with_hint(f"{what}: self.heads holds {count_of(got[0])} heads, not num_heads", CREATE_HEADS)
        if found:
            sizes = re.search(r"copying a param with shape torch.Size\(\[(\d+), \d+\]\) from checkpoint, the shape in "
                              r"current model is torch.Size\(\[(\d+), \d+\]\)", str(found[1].get("message")))
            if 1 <= found[0] <= num_heads and sizes and int(sizes[1]) == d_out and int(sizes[2]) == d_out // num_heads:
                return NamedMistake(raised_message(what, found[1], "each head was built with d_out // num_heads: in "
                                                   "this wrapper d_out is the width of every head, CausalAttention("
                                                   "d_in, d_out, ...), and the output is d_out * num_heads wide"))
            return raised_reading(what, found[1], context, "" if found[0] <= num_heads else
                                  "run every head on x and concatenate: " + CONCAT)
        for h in range(num_heads):
            problem = compare(got[1 + h], want[1 + h], f"{what}: head {h}", EXACT)
            if problem:
                return with_hint(problem, PASS_BIAS)
        for h in range(num_heads):
            mine, theirs = got[heads + h]["state"], want[heads + h]["state"]
            if set(mine) != set(theirs):
                return with_hint(f"{what}: the heads' layers differ from CausalAttention({d_in}, {d_out}, {context}, "
                                 f"0.0, qkv_bias={bias})'s", PASS_BIAS)
            for name in theirs:
                problem = shape_problem({"tensor": mine[name]}, {"tensor": theirs[name]}, f"{what}: head {h} {name}",
                                        PASS_BIAS)
                if problem:
                    return problem
        loaded = [{name: tensor_of({"tensor": t}).double() for name, t in got[heads + h]["state"].items()
                   if name != "mask"} for h in range(num_heads)]
        outs = [causal_attention_64(w, x.double()) for w in loaded]
        named = joined_problem(what, got[out], outs)
        if named:
            return named
        problem = None
        for index in range(out, x_after):
            problem = problem or shape_problem(
                got[index], want[index], f"{what}: the output", "concatenate along the last dimension, "
                "torch.cat(..., dim=-1): (b, T, d_out * num_heads); dim=1 would glue the heads' tokens one after the "
                "other")
        problem = problem or with_hint(compare(got[x_after], want[x_after], f"{what}: its input after the call",
                                               EXACT), "it changed its input: use out-of-place operations on x")
        if problem:
            return problem
        weights = []
        for h in range(num_heads):
            weights.append({name: tensor_of({"tensor": t}).double() for name, t in got[heads + h]["state"].items()
                            if name != "mask"})
            if not any(all(torch.equal(weights[h][name], loaded[name].double()) for name in loaded)
                       for loaded in states):
                return with_hint(f"{what}: head {h} does not hold the weights loaded into the heads",
                                 "keep the heads' own layers; do not replace or re-create them in forward")
        first = tensor_of(got[out]).double()
        if changed is not None and not torch.allclose(tensor_of(got[out + 1]).double()[:, :cut], first[:, :cut],
                                                      atol=1e-5, rtol=1e-5):
            return with_hint(f"{what}: the outputs of tokens before {cut} change when tokens {cut} and later change",
                             "run every head on the same x; the heads are causal, so later tokens must not matter")
        expected = torch.cat([causal_attention_64(w, x.double()) for w in weights], dim=-1)
        return with_hint(compare(got[out], {"tensor": encode_tensor(expected)}, f"{what}: the output",
                                 Expect("", atol=1e-5)), CONCAT)

    return Check(what, p, judge=judge)


def wrapper_output(inputs):
    changed = BATCH.clone()
    changed[:, 3:] += 1.0
    checks = [output_check(inputs, "the (2, 6, 3) batch", 3, 2, 6, 2, False, BATCH, cut=3, changed=changed),
              output_check(inputs, "the first 4 tokens of the batch, (2, 4, 3)", 3, 2, 6, 2, False,
                           BATCH[:, :4].contiguous())]
    for b, t, context, d_in, d_out, num_heads, bias in [(1, 1, 4, 3, 2, 1, False), (3, 5, 8, 4, 3, 3, True),
                                                        (2, 7, 7, 5, 1, 4, False), (4, 3, 10, 2, 5, 2, True),
                                                        (2, 6, 6, 6, 2, 5, False)]:
        x = inputs.randn(b, t, d_in)
        cut = t // 2 if t > 1 else None
        checks.append(output_check(inputs, f"a random ({b}, {t}, {d_in}) input", d_in, d_out, context, num_heads,
                                   bias, x, cut=cut,
                                   changed=with_later_tokens_changed(inputs, x, cut) if cut else None))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 2: heads that PyTorch can see
# ---------------------------------------------------------------------------------------------------------------

def registered_check(d_in, d_out, context, rate, num_heads, bias):
    """Every head's parameters registered under heads.h, and heads that start with weights of their own."""
    what = f"{WRAPPER}({d_in}, {d_out}, {context}, {rate}, num_heads={num_heads}, qkv_bias={bias})"
    p = Program()
    wrapper = p.call(G(WRAPPER), d_in, d_out, context, rate, num_heads=num_heads, qkv_bias=bias)
    p.record(wrapper, "its parameters", kind="parameters")
    for h in range(num_heads):
        p.record(wrapper.attr("heads")[h].attr("W_query").attr("weight"), f"heads[{h}].W_query.weight")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_reading(what, found[1], context, CREATE_HEADS)
        mine = {str(entry[0]) for entry in got[0].get("parameters", [])}
        theirs = {str(entry[0]) for entry in want[0]["parameters"]}
        problem = compare(got[0], want[0], f"{what}: its registered parameters", EXACT) or (
            mine != theirs and f"{what}: its registered parameters are {sorted(mine)[:6]}, not {sorted(theirs)[:6]}")
        if problem:
            names = mine ^ theirs
            only_biases = names and all(name.endswith(".bias") for name in names)
            named = heads_registered_mistake(what, got[0].get("parameters", []), want[0]["parameters"], num_heads)
            return named or with_hint(problem, PASS_BIAS if only_biases else REGISTERED)
        for h in range(1, num_heads):
            if torch.equal(tensor_of(got[1]).double(), tensor_of(got[1 + h]).double()):
                return with_hint(f"{what}: heads 0 and {h} start with identical weights",
                                 "create every head with its own CausalAttention(...) call (a copy of one head "
                                 "starts identical and stays identical)")
        return None

    return Check(what, p, judge=judge)


def heads_registered_mistake(what, mine, theirs, num_heads):
    """A message naming why the wrapper's registered parameters (probe entries [name, shape, requires_grad, (first
    name of a tied tensor)]) differ from num_heads separate heads', when they leave no doubt; None otherwise."""
    if not mine:
        return NamedMistake(f"{what} has no registered parameters\n  likely mistake: self.heads is not a module "
                            "PyTorch looks into (a Python list or tuple hides the heads): keep them in nn.ModuleList")
    names = [str(entry[0]) for entry in mine]
    if names != [str(entry[0]) for entry in theirs]:
        return None
    if num_heads > 1 and all(len(entry) > 3 and str(entry[3]).startswith("heads.0.") for entry in mine
                             if not str(entry[0]).startswith("heads.0.")):
        return NamedMistake(f"{what}: every entry of self.heads is the same module, head 0\n  likely mistake: one "
                            "head repeated: one CausalAttention object is used num_heads times ([head] * num_heads, "
                            "or one head appended in a loop): create a new CausalAttention for every head")
    sizes = {str(e[0]): list(e[1]) for e in mine}
    wanted = {str(e[0]): list(e[1]) for e in theirs}
    query = next((name for name in wanted if name.endswith("W_query.weight")), None)
    if query and sizes != wanted and all(len(sizes[n]) == len(wanted[n]) for n in wanted):
        width, d_out = sizes[query][0], wanted[query][0]
        if width == d_out // num_heads:
            return NamedMistake(f"{what}: each head is {width} wide instead of d_out={d_out}\n  likely mistake: each "
                                "head was built with d_out // num_heads: in this wrapper d_out is the width of every "
                                "head, CausalAttention(d_in, d_out, ...), and the output is d_out * num_heads wide")
    return None


def modes_check(on, d_in, d_out, context, rate, num_heads, bias, x):
    """eval() must reach every head's dropout (two equal outputs), train() too (two different outputs)."""
    what = f"{WRAPPER}({d_in}, {d_out}, {context}, {rate}, num_heads={num_heads}, qkv_bias={bias}) on {on}"
    p = Program()
    wrapper = p.call(G(WRAPPER), d_in, d_out, context, rate, num_heads=num_heads, qkv_bias=bias)
    x_ref = p.tensor(x)
    for mode in ("eval", "train"):
        p.call(wrapper.attr(mode))
        for _ in range(2):
            p.record(p.call(wrapper, x_ref), f"an output in {mode} mode")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_reading(what, found[1], context)
        other = next((g for g in got if "tensor" not in g), None)  # the output's shape is Part 1's business
        if other is not None:
            return f"{what}: the output should be a torch.Tensor, got {describe(other)}"
        outputs = [tensor_of(g).double() for g in got]
        if any(o.shape != outputs[0].shape for o in outputs) or not all(bool(o.isfinite().all()) for o in outputs):
            return f"{what}: its outputs differ in shape or contain nan or inf"
        if not torch.equal(outputs[0], outputs[1]):
            return with_hint(f"{what}: in eval mode the wrapper gave two different outputs for the same input",
                             "mha.eval() reaches the heads' dropout only if the heads are registered: use "
                             "nn.ModuleList")
        if torch.equal(outputs[2], outputs[3]):
            return with_hint(f"{what}: in training mode with dropout={rate} the wrapper gave the same output twice",
                             "every head must drop with the wrapper's dropout probability: pass dropout on to "
                             "every head, CausalAttention(d_in, d_out, context_length, dropout, "
                             "qkv_bias)")
        return None

    return Check(what, p, judge=judge)


def num_heads_error(num_heads):
    """MultiHeadAttentionWrapper(..., num_heads) must raise; for num_heads=0, the wrapper is first built with
    num_heads=-1 (what it raised kept), to tell a check that lets 0 through from no check at all."""
    what = f"{WRAPPER}(3, 2, 6, 0.0, num_heads={num_heads})"
    p = Program()
    if num_heads == 0:
        p.call(G(WRAPPER), 3, 2, 6, 0.0, num_heads=-1, catch=True)
    p.call(G(WRAPPER), 3, 2, 6, 0.0, num_heads=num_heads)
    check = expect_value_error(what, p, "num_heads")
    judge = check.judge

    def named(got, want):
        problem = judge(got, want)
        caught = got[0].get("caught") if num_heads == 0 and got and isinstance(got[0], dict) else None
        if problem and num_heads == 0 and isinstance(caught, dict) and caught.get("raised") == "ValueError" and not (
                "raised" in got[-1]):
            return NamedMistake(f"{what} did not raise a ValueError, though num_heads=-1 does\n  likely mistake: the "
                                "check lets num_heads=0 through: a wrapper needs at least one head, num_heads < 1 "
                                "(not num_heads < 0) must raise")
        return problem

    check.judge = named
    return check


def wrapper_heads(inputs):
    checks = [registered_check(3, 2, 6, 0.5, 3, False),
              modes_check("the (2, 6, 3) batch", 3, 2, 6, 0.5, 3, False, BATCH)]
    for d_in, d_out, context, num_heads, bias in [(4, 3, 5, 2, False), (5, 2, 3, 4, True), (2, 7, 4, 1, False)]:
        checks.append(registered_check(d_in, d_out, context, 0.3, num_heads, bias))
        checks.append(modes_check(f"a random (30, {context}, {d_in}) input", d_in, d_out, context, 0.3, num_heads,
                                  bias, inputs.randn(30, context, d_in)))
    return checks


def wrapper_arguments(inputs):
    return [num_heads_error(num_heads) for num_heads in (0, -1, -3)]


# ---------------------------------------------------------------------------------------------------------------
# Part 3: choosing the width
# ---------------------------------------------------------------------------------------------------------------

FIELDS = ("d_in", "d_out", "qkv_bias", "context_length", "dropout")


def record_heads(p, wrapper, num_heads, label):
    """(d_in, d_out, qkv_bias, context_length, dropout) of every head, as FIELDS records per head."""
    for h in range(num_heads):
        head = wrapper.attr("heads")[h]
        p.record(head.attr("W_query").attr("in_features"), f"{label} head {h} d_in")
        p.record(head.attr("W_value").attr("out_features"), f"{label} head {h} d_out")
        p.record(head.attr("W_query").attr("bias"), f"{label} head {h} qkv_bias", kind="type")
        p.record(head.attr("mask").attr("shape")[0], f"{label} head {h} context_length")
        p.record(head.attr("dropout").attr("p"), f"{label} head {h} dropout")


def plain(record):
    """A head's setting as a plain value: a number, or whether a bias exists."""
    if "type" in record:
        return record["type"] != "NoneType"
    if "int" in record:
        return int(record["int"])
    if "float" in record:
        return float(record["float"])
    raise ValueError("a head's setting should be a number")


def width_check(d_in, context, width, num_heads, rate=None, bias=None):
    """wrapper_with_output_width(...) must build what MultiHeadAttentionWrapper(d_in, width // num_heads,
    context_length, dropout, num_heads, qkv_bias) builds in the student's own notebook (so a bug of the class itself
    costs nothing here)."""
    options = {} if rate is None else {"dropout": rate, "qkv_bias": bias}
    what = f"wrapper_with_output_width({d_in}, {context}, width={width}, num_heads={num_heads}" + "".join(
        f", {k}={v}" for k, v in options.items()) + ")"
    p = Program()
    result = p.call(G("wrapper_with_output_width"), d_in, context, width=width, num_heads=num_heads, **options)
    p.record(result.attr("__class__").attr("__name__"), "the class of the result")
    p.record(p.call(result.attr("heads").attr("__len__")), "the number of heads")
    record_heads(p, result, num_heads, "result")
    same = p.call(G(WRAPPER), d_in, width // num_heads, context, rate or 0.0, num_heads, bool(bias))
    record_heads(p, same, num_heads, "same")
    size = len(FIELDS) * num_heads

    def judge(got, want):
        found = first_raised(got)
        if found and found[0] == 0:
            return raised_reading(what, found[1], context)
        if got[0] != want[0]:
            return with_hint(f"{what} should return a {WRAPPER}, got a {str(got[0].get('str'))[:60]}",
                             f"return {WRAPPER}(...)")
        if got[1] != want[1]:
            return with_hint(f"{what} has {count_of(got[1])} heads", "keep num_heads as it is")
        if found:
            return raised_message(what, found[1])
        settings = [plain(record) for record in got[2:2 + 2 * size]]
        mine, theirs = settings[:size], settings[size:]
        widths = mine[1::len(FIELDS)]
        built = theirs[1::len(FIELDS)]
        if sum(widths) != width and widths == built and width % num_heads == 0 and built != [width // num_heads] * (
                num_heads):
            return NamedMistake(f"the heads of {what} are {widths} wide, and so are those of your {WRAPPER}(d_in, "
                                f"{width // num_heads}, ...)\n  likely mistake: the class of Part 1 builds its heads "
                                "with another width than its d_out: each head is CausalAttention(d_in, d_out, ...)")
        if num_heads > 1 and widths == [width] * num_heads:
            return NamedMistake(f"the heads of {what} are each {width} wide, together {width * num_heads}\n  likely "
                                "mistake: every head got the whole width: d_out is each head's width, and the heads "
                                "share `width`: d_out = width // num_heads")
        if sum(widths) != width:
            return with_hint(f"the heads of {what} have widths {widths}, which add up to {sum(widths)} instead of "
                             f"width={width}", "the output width is d_out * num_heads, so each head gets d_out = "
                                               "width // num_heads")
        wrong = [name for index, name in enumerate(FIELDS) if mine[index::len(FIELDS)] != theirs[index::len(FIELDS)]]
        if wrong:
            return with_hint(f"the heads of {what} differ from those of {WRAPPER}(d_in, width // num_heads, "
                             f"context_length, dropout, num_heads, qkv_bias) in: {', '.join(wrong)}",
                             "pass d_in, context_length, dropout and qkv_bias on: MultiHeadAttentionWrapper(d_in, "
                             "d_out, context_length, dropout, num_heads, qkv_bias)")
        return None

    return Check(what, p, judge=judge)


def width_error(width, num_heads):
    what = f"wrapper_with_output_width(3, 6, width={width}, num_heads={num_heads})"
    p = Program()
    p.call(G("wrapper_with_output_width"), 3, 6, width=width, num_heads=num_heads)
    check = expect_value_error(what, p, "num_heads")
    judge = check.judge

    def named(got, want):
        problem = judge(got, want)
        if problem and num_heads >= 1 and not (got and "raised" in got[-1]):
            return NamedMistake(f"{what} did not raise a ValueError\n  likely mistake: nothing checks that the heads "
                                f"can share the width: {width} is not divisible by {num_heads} "
                                "(width % num_heads != 0), which must raise ValueError naming num_heads")
        return problem

    check.judge = named
    return check


def wrapper_with_output_width(inputs):
    checks = [width_check(3, 6, 2, 2)]
    for d_in, context, width, num_heads, rate, bias in [(6, 4, 6, 3, 0.1, True), (4, 9, 8, 1, 0.0, False),
                                                        (5, 2, 12, 4, 0.2, False), (3, 6, 7, 7, 0.0, True)]:
        checks.append(width_check(d_in, context, width, num_heads, rate, bias))
    return checks


def wrapper_with_output_width_arguments(inputs):
    return [width_error(width, num_heads) for width, num_heads in [(5, 2), (7, 3), (4, 8), (4, 0)]]


# ---------------------------------------------------------------------------------------------------------------
# Part 4 (transfer): ALiBiWrapper, heads that prefer recent tokens, on any number of tokens
# ---------------------------------------------------------------------------------------------------------------

ALIBI = "ALiBiWrapper"
HEAD_LAYERS = ("every head has the layers of a CausalAttention head: W_query, W_key and W_value, from d_in to d_out, "
               "with a bias only with qkv_bias")
ALIBI_RULE = ("the weight token i gives token j <= i is its plain causal weight times exp(-m * (i - j)), every row "
              "normalised again: the same as subtracting m * (i - j) from the scaled scores before the softmax, the "
              "future still hidden")
IGNORED = ("every head ignored its slope: plain causal attention (the lesson's heads, or is_causal=True) knows no "
           "distance; each head's weights must carry its own factor exp(-slopes[h] * (i - j))")


def alibi_logits(scores, slope, behind, mistake):
    """What the softmax of a head reads (scores already divided by sqrt(d_out)), right or with a known mistake."""
    hidden = behind < 0
    if mistake == "sign":
        return (scores + slope * behind).masked_fill(hidden, float("-inf"))
    if mistake == "future":
        return scores - slope * behind
    if mistake == "both_ways":
        return scores - slope * behind.abs()
    if mistake == "scores_times":
        return (scores * torch.exp(-slope * behind)).masked_fill(hidden, float("-inf"))
    if mistake == "base_2":
        return (scores - slope * behind * torch.log(torch.tensor(2.0, dtype=scores.dtype))).masked_fill(
            hidden, float("-inf"))
    return (scores - slope * behind).masked_fill(hidden, float("-inf"))


def alibi_expected(states, slopes, x, mistake=None):
    """The heads' outputs side by side, in float64, with the weights in `states`, right or with a known mistake."""
    outputs = []
    t = x.shape[1]
    positions = torch.arange(t)
    behind = (positions[:, None] - positions[None, :]).double()
    order = {"first": [slopes[0]] * len(slopes), "reversed": slopes[::-1], "ignored": [0.0] * len(slopes)}
    for state, slope in zip(states, order.get(mistake, slopes)):
        def project(name):
            out = x @ state[f"{name}.weight"].double().T
            return out + state[f"{name}.bias"].double() if f"{name}.bias" in state else out

        queries, keys, values = project("W_query"), project("W_key"), project("W_value")
        d_out = keys.shape[-1]
        scores = queries @ keys.transpose(-2, -1) / d_out ** 0.5
        if mistake == "scaled":
            logits = (scores - slope * behind / d_out ** 0.5).masked_fill(behind < 0, float("-inf"))
        elif mistake == "unnormalised":
            logits = None
            weights = torch.softmax(scores.masked_fill(behind < 0, float("-inf")), dim=-1) * torch.exp(
                -slope * behind.clamp_min(0))
        else:
            logits = alibi_logits(scores, slope, behind, mistake)
        if logits is not None:
            weights = torch.softmax(logits, dim=-1)
        outputs.append(weights @ values)
    return torch.cat(outputs, dim=-1)


OVERFLOW = ("exp(-m * (i - j)) overflows where j > i (the future: i - j < 0), and 0 * inf is nan: apply the factor "
            "only where j <= i, or hide the future before the factor is computed")

ALIBI_MISTAKES = [
    ("ignored", IGNORED),
    ("sign", "the factor must shrink the weights of far keys: a key d = i - j tokens back gets exp(-m * d); here the "
             "farther keys gained weight (the sign of the penalty, or a distance counted the other way)"),
    ("scaled", "the penalty was divided by sqrt(d_out) with the scores: the factor exp(-m * (i - j)) multiplies step "
               "04's weights as it is, so m * (i - j) is not scaled"),
    ("unnormalised", "after multiplying by the factors, every row must be normalised again to sum to 1"),
    ("future", "the future must stay hidden: the penalty only makes the past weigh less; keys after the query are "
               "still blocked"),
    ("both_ways", "the future must stay hidden: a penalty on |i - j| does not block the keys after the query"),
    ("base_2", "the factor is exp(-m * d), base e, not 2 ** (-m * d)"),
    ("scores_times", "the factor exp(-m * (i - j)) multiplied the scores: it multiplies the weights (the softmax's "
                     "output), which is the same as subtracting m * (i - j) from the scaled scores"),
    ("first", "head h uses slopes[h]; here every head used the first slope"),
    ("reversed", "head h uses slopes[h], in the order of slopes"),
]


def alibi_problem(what, mine, states, slopes, x):
    """None when `mine` is the ALiBi output; otherwise a message naming the known mistake that reproduces it, or the
    first head whose columns are wrong."""
    if torch.allclose(mine, alibi_expected(states, slopes, x), atol=1e-5, rtol=1e-4):
        return None
    if not bool(mine.isfinite().all()):
        return NamedMistake(with_hint(f"{what}: the output holds nan or inf", OVERFLOW))
    for mistake, hint in ALIBI_MISTAKES:
        if torch.allclose(mine, alibi_expected(states, slopes, x, mistake), atol=1e-5, rtol=1e-4):
            return NamedMistake(f"{what}: the output is not what the slopes ask for\n  likely mistake: {hint}")
    d_out = mine.shape[-1] // len(slopes)
    right = alibi_expected(states, slopes, x)
    for h, slope in enumerate(slopes):
        columns = slice(h * d_out, (h + 1) * d_out)
        if not torch.allclose(mine[..., columns], right[..., columns], atol=1e-5, rtol=1e-4):
            return with_hint(f"{what}: the output of head {h} (slope {slope}) has the wrong values; none of the usual "
                             "mistakes gives these values", ALIBI_RULE + "; the heads' outputs side by side, in order")
    return None


def matching_mistake(mine, states, slopes, x):
    """The name of the rule that gives `mine` ("right" or a known mistake; "ignored" last), or None."""
    for mistake in ["right"] + [name for name, _ in ALIBI_MISTAKES if name != "ignored"] + ["ignored"]:
        expected = alibi_expected(states, slopes, x, None if mistake == "right" else mistake)
        if torch.allclose(mine, expected, atol=1e-5, rtol=1e-4):
            return mistake
    return None


def alibi_program(inputs, d_in, d_out, context, slopes, bias, xs):
    """The wrapper built, each head's weights loaded, in eval mode, run on each x of xs."""
    states = [qkv_state(inputs, d_in, d_out, bias) for _ in slopes]
    p = Program()
    wrapper = p.call(G(ALIBI), d_in, d_out, context, 0.0, slopes=list(slopes), qkv_bias=bias)
    p.record(p.call(wrapper.attr("heads").attr("__len__")), "the number of heads")
    for h, state in enumerate(states):
        p.load(wrapper.attr("heads")[h], state)
    p.call(wrapper.attr("eval"))
    refs = [p.tensor(x) for x in xs]
    for ref in refs:
        p.record(p.call(wrapper, ref), "the output")
    for ref in refs:
        p.record(ref, "its input after the call")
    return p, states


def alibi_setup_problem(what, got, want, heads, runs):
    """A message when the wrapper could not be built, loaded or run, or its outputs are not shaped right."""
    found = first_raised(got)
    if found and found[0] == 0:
        return raised_message(what, found[1], "one head per slope, kept in self.heads")
    if got[0] != want[0]:
        return with_hint(f"{what}: self.heads holds {count_of(got[0])} heads, not len(slopes)",
                         "one head per slope, in the order of slopes")
    if found:
        return raised_message(what, found[1], HEAD_LAYERS if found[0] <= heads else "")
    for h in range(heads):
        problem = compare(got[1 + h], want[1 + h], f"{what}: head {h}", EXACT)
        if problem:
            return with_hint(problem, HEAD_LAYERS)
    out = heads + 1
    for index in range(out, out + runs):
        problem = shape_problem(got[index], want[index], f"{what}: the output",
                                "the heads' outputs side by side: (b, T, d_out * len(slopes))")
        if problem:
            return problem
    for index in range(out + runs, out + 2 * runs):
        problem = with_hint(compare(got[index], want[index], f"{what}: its input after the call", EXACT),
                            "it changed its input: use out-of-place operations on x")
        if problem:
            return problem
    return None


def alibi_output_check(inputs, on, d_in, d_out, context, slopes, bias, x):
    what = f"{ALIBI}({d_in}, {d_out}, {context}, 0.0, slopes={list(slopes)}, qkv_bias={bias}) on {on}"
    p, states = alibi_program(inputs, d_in, d_out, context, slopes, bias, [x])

    def judge(got, want):
        problem = alibi_setup_problem(what, got, want, len(slopes), 1)
        return problem or alibi_problem(what, tensor_of(got[len(slopes) + 1]), states, slopes, x.double())

    return Check(what, p, judge=judge)


def slopes_error(slopes):
    what = f"{ALIBI}(3, 2, 6, 0.0, slopes={slopes})"
    p = Program()
    p.call(G(ALIBI), 3, 2, 6, 0.0, slopes=slopes)
    check = expect_value_error(what, p, "slopes")
    judge = check.judge
    let_through = ("an empty list of slopes is let through: with no slope there is no head, which must raise "
                   "ValueError naming slopes" if not slopes else
                   "a negative slope is let through: it would make far tokens weigh more, so every slope below 0 must "
                   "raise ValueError naming slopes")

    def named(got, want):
        problem = judge(got, want)
        if problem and not (got and "raised" in got[-1]):
            return NamedMistake(f"{what} did not raise a ValueError\n  likely mistake: {let_through}")
        return problem

    check.judge = named
    return check


def alibi_registered_check(d_in, d_out, context, rate, slopes, bias, x):
    """Only the heads' layers are parameters (the slopes are fixed), and eval()/train() reach every head's dropout."""
    what = f"{ALIBI}({d_in}, {d_out}, {context}, {rate}, slopes={slopes}, qkv_bias={bias})"
    p = Program()
    wrapper = p.call(G(ALIBI), d_in, d_out, context, rate, slopes=slopes, qkv_bias=bias)
    p.record(wrapper, "its parameters", kind="parameters")
    x_ref = p.tensor(x)
    for mode in ("eval", "train"):
        p.call(wrapper.attr(mode))
        for _ in range(2):
            p.record(p.call(wrapper, x_ref), f"an output in {mode} mode")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        names = {str(entry[0]) for entry in got[0].get("parameters", [])}
        wanted = {str(entry[0]) for entry in want[0]["parameters"]}
        if names - wanted and all("slope" in name.lower() for name in names - wanted):
            return NamedMistake(with_hint(f"{what}: its parameters include {sorted(names - wanted)}",
                                          "the slopes are fixed, not learned: keep them as a plain list or a buffer, "
                                          "not an nn.Parameter"))
        problem = compare(got[0], want[0], f"{what}: its registered parameters", EXACT) or (
            names != wanted and f"{what}: its registered parameters are {sorted(names)[:6]}, not {sorted(wanted)[:6]}")
        if problem:
            return with_hint(problem, "keep the heads where PyTorch registers them (as in Part 1), every head with "
                                      "its own layers and nothing else learned; " + HEAD_LAYERS)
        outputs = []
        for g, w in zip(got[1:], want[1:]):
            problem = shape_problem(g, w, f"{what}: an output", "the heads' outputs side by side")
            if problem:
                return problem
            outputs.append(tensor_of(g))
        if not torch.equal(outputs[0], outputs[1]):
            return with_hint(f"{what}: in eval mode two outputs for the same input differ",
                             "eval() must reach every head's dropout: keep the heads registered")
        if torch.equal(outputs[2], outputs[3]):
            return with_hint(f"{what}: in training mode with dropout={rate} the output was the same twice",
                             "every head drops its attention weights with the wrapper's dropout probability")
        return None

    return Check(what, p, judge=judge)


def alibi_wrapper(inputs):
    checks = [alibi_output_check(inputs, "the (2, 6, 3) batch", 3, 2, 6, [0.25, 0.6931, 50.0], False, BATCH),
              alibi_output_check(inputs, "the first 4 tokens of the batch, (2, 4, 3)", 3, 2, 6, [0.5, 0.25], False,
                                 BATCH[:, :4].contiguous())]
    for b, t, context, d_in, d_out, slopes, bias in [(3, 7, 9, 4, 3, [1.0, 0.0, 0.3], True),
                                                     (2, 8, 8, 5, 2, [0.125, 2.0], False),
                                                     (1, 5, 10, 3, 4, [0.5, 0.25, 0.125, 0.0625], True),
                                                     (4, 6, 6, 2, 1, [0.7], False), (2, 1, 4, 3, 2, [1.5, 0.2], False)]:
        checks.append(alibi_output_check(inputs, f"a random ({b}, {t}, {d_in}) input", d_in, d_out, context, slopes,
                                         bias, inputs.randn(b, t, d_in)))
    checks.append(alibi_registered_check(3, 2, 6, 0.5, [0.5, 0.25], False, BATCH))
    checks.append(alibi_registered_check(4, 3, 5, 0.4, [1.0, 0.0, 0.1], True, inputs.randn(30, 5, 4)))
    checks += alibi_longer(inputs)
    return checks + [slopes_error(s) for s in ([], [1.0, -0.5], [-0.25], [0.5, 0.25, -1.0])]


def alibi_longer_check(inputs, d_in, d_out, context, slopes, bias, b, short, long):
    """The wrapper on `long` > context tokens, and on the first `short` of them: the long output must follow the rule
    the short one follows (the other checks judge which rule that is), unless that rule ignores the slopes; when no
    known rule gives the short output, the long one must at least agree with it on the first tokens."""
    what = (f"{ALIBI}({d_in}, {d_out}, {context}, 0.0, slopes={list(slopes)}, qkv_bias={bias}) on a random "
            f"({b}, {long}, {d_in}) input, longer than context_length")
    x = inputs.randn(b, long, d_in)
    p, states = alibi_program(inputs, d_in, d_out, context, slopes, bias, [x[:, :short].contiguous(), x])

    def judge(got, want):
        found = first_raised(got)
        if found and found[0] == len(slopes) + 2:
            return raised_message(what, found[1], "nothing in the rule depends on a largest length: build what the "
                                  "heads need (the hidden future, the distances) for the T tokens of x, not once for "
                                  "context_length")
        problem = alibi_setup_problem(what, got, want, len(slopes), 2)
        if problem:
            return problem
        mine_short, mine = tensor_of(got[len(slopes) + 1]), tensor_of(got[len(slopes) + 2])
        rule = matching_mistake(mine_short, states, slopes, x[:, :short].double())
        if rule == "ignored":
            return NamedMistake(with_hint(f"{what}: the output ignores the slopes", IGNORED))
        if rule is not None:
            expected = alibi_expected(states, slopes, x.double(), None if rule == "right" else rule)
            if torch.allclose(mine, expected, atol=1e-5, rtol=1e-4):
                return None
            wrong = (mine - expected).abs().amax(dim=(0, 2)).gt(1e-5).nonzero().flatten().tolist()
            return with_hint(f"{what}: tokens {wrong[:6]} do not follow the rule the first {short} tokens follow",
                             "the same rule for every pair of tokens, whatever T: look at what the heads build from "
                             "context_length")
        if not torch.allclose(mine[:, :short], mine_short, atol=1e-5, rtol=1e-4):
            return with_hint(f"{what}: the outputs of the first {short} tokens change when later tokens follow",
                             "the heads are causal: hide the future of every token, for any T")
        return None

    return Check(what, p, judge=judge)


def alibi_longer(inputs):
    return [alibi_longer_check(inputs, d_in, d_out, context, slopes, bias, b, short, long)
            for d_in, d_out, context, slopes, bias, b, short, long in [
                (3, 2, 6, [0.5, 0.0], False, 2, 6, 15), (4, 3, 4, [1.0, 0.25, 0.0], True, 3, 4, 11),
                (2, 2, 3, [0.125], False, 1, 3, 20), (5, 1, 8, [2.0, 0.5, 0.3, 0.1], True, 2, 5, 17)]]


# Part 4 builds heads that differ by design (ALiBi), which the lesson did not do, and runs them past the length they
# are trained on.
TRANSFER = {"test_alibi_wrapper"}

CELLS = {
    "test_wrapper_output": floats_where_due(wrapper_output),
    "test_wrapper_heads": floats_where_due(wrapper_heads),
    "test_wrapper_arguments": floats_where_due(wrapper_arguments),
    "test_wrapper_with_output_width": floats_where_due(wrapper_with_output_width),
    "test_wrapper_with_output_width_arguments": floats_where_due(wrapper_with_output_width_arguments),
    "test_alibi_wrapper": floats_where_due(alibi_wrapper),
}
