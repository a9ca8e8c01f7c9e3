"""Judges of step 06: MultiHeadAttentionWrapper, its registered heads, and choosing its width.

The heads are the notebook's provided CausalAttention. Part 1 judges the wrapper's output against the heads it
holds (their weights loaded one head at a time, then read back), so that heads kept in a plain list or one head used
num_heads times cost the points of Part 2 only, as their own tests say.
"""
import torch

from attention_course import data
from attention_course.probe import encode_tensor
from attention_grader.judging import (G, Check, Expect, Program, compare, describe, expect_value_error,
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
            return raised_message(what, found[1], CREATE_HEADS)
        if got[0] != want[0]:
            return with_hint(f"{what}: self.heads holds {count_of(got[0])} heads, not num_heads", CREATE_HEADS)
        if found:
            return raised_message(what, found[1], "" if found[0] <= num_heads else
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
            return raised_message(what, found[1], CREATE_HEADS)
        mine = {str(entry[0]) for entry in got[0].get("parameters", [])}
        theirs = {str(entry[0]) for entry in want[0]["parameters"]}
        problem = compare(got[0], want[0], f"{what}: its registered parameters", EXACT) or (
            mine != theirs and f"{what}: its registered parameters are {sorted(mine)[:6]}, not {sorted(theirs)[:6]}")
        if problem:
            names = mine ^ theirs
            only_biases = names and all(name.endswith(".bias") for name in names)
            return with_hint(problem, PASS_BIAS if only_biases else REGISTERED)
        for h in range(1, num_heads):
            if torch.equal(tensor_of(got[1]).double(), tensor_of(got[1 + h]).double()):
                return with_hint(f"{what}: heads 0 and {h} start with identical weights",
                                 "create every head with its own CausalAttention(...) call (a copy of one head "
                                 "starts identical and stays identical)")
        return None

    return Check(what, p, judge=judge)


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
            return raised_message(what, found[1])
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
    p = Program()
    p.call(G(WRAPPER), 3, 2, 6, 0.0, num_heads=num_heads)
    return expect_value_error(f"{WRAPPER}(3, 2, 6, 0.0, num_heads={num_heads})", p, "num_heads")


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
            return raised_message(what, found[1])
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
    p = Program()
    p.call(G("wrapper_with_output_width"), 3, 6, width=width, num_heads=num_heads)
    return expect_value_error(f"wrapper_with_output_width(3, 6, width={width}, num_heads={num_heads})", p,
                              "num_heads")


def wrapper_with_output_width(inputs):
    checks = [width_check(3, 6, 2, 2)]
    for d_in, context, width, num_heads, rate, bias in [(6, 4, 6, 3, 0.1, True), (4, 9, 8, 1, 0.0, False),
                                                        (5, 2, 12, 4, 0.2, False), (3, 6, 7, 7, 0.0, True)]:
        checks.append(width_check(d_in, context, width, num_heads, rate, bias))
    return checks


def wrapper_with_output_width_arguments(inputs):
    return [width_error(width, num_heads) for width, num_heads in [(5, 2), (7, 3), (4, 8), (4, 0)]]


# ---------------------------------------------------------------------------------------------------------------
# Part 4 (transfer): LookbackWrapper, heads with windows of their own
# ---------------------------------------------------------------------------------------------------------------

LOOKBACK = "LookbackWrapper"
WINDOW_RULE = ("token i of a head with window w sees the w tokens i - w + 1, ..., i: itself and w - 1 before it, never "
               "a later one")
HEAD_LAYERS = ("every head has the layers of a CausalAttention head: W_query, W_key and W_value, from d_in to d_out, "
               "with a bias only with qkv_bias")


def window_hidden(num_tokens, window, causal=True):
    """True where head with `window` may not look (query i, key j)."""
    behind = torch.arange(num_tokens)[:, None] - torch.arange(num_tokens)[None, :]
    far_back = behind.abs() >= window if not causal else behind >= window
    return far_back | (behind < 0) if causal else far_back


def windowed_attention_64(state, x, hidden):
    def project(name):
        out = x @ state[f"{name}.weight"].double().T
        return out + state[f"{name}.bias"].double() if f"{name}.bias" in state else out

    queries, keys, values = project("W_query"), project("W_key"), project("W_value")
    scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(nan=0.0) @ values


def misreadings(num_tokens, windows):
    """(hint, hidden mask of every head) for the likely misreadings of the windows."""
    heads = len(windows)
    return [
        ("a window of w sees w tokens, the token itself included: the heads see one token too many (hide the keys "
         "w or more positions back)", [window_hidden(num_tokens, w + 1) for w in windows]),
        ("a window of w sees w tokens, the token itself included: the heads see one token too few",
         [window_hidden(num_tokens, max(w - 1, 1)) for w in windows]),
        ("a window looks back only: keep the future hidden, as CausalAttention's mask does",
         [window_hidden(num_tokens, w, causal=False) for w in windows]),
        ("every head kept the plain causal mask: a head's mask decides where it may look, so each head needs a mask "
         "that also hides the tokens beyond its window", [window_hidden(num_tokens, num_tokens + 1)] * heads),
        ("head h gets windows[h]; here every head used the first window",
         [window_hidden(num_tokens, windows[0])] * heads),
        ("head h gets windows[h], in the order of windows", [window_hidden(num_tokens, w) for w in windows[::-1]]),
    ]


def lookback_output_check(inputs, on, d_in, d_out, context, windows, bias, x):
    what = f"{LOOKBACK}({d_in}, {d_out}, {context}, 0.0, windows={list(windows)}, qkv_bias={bias}) on {on}"
    heads = len(windows)
    states = [qkv_state(inputs, d_in, d_out, bias) for _ in range(heads)]
    p = Program()
    wrapper = p.call(G(LOOKBACK), d_in, d_out, context, 0.0, windows=list(windows), qkv_bias=bias)
    p.record(p.call(wrapper.attr("heads").attr("__len__")), "the number of heads")
    for h, state in enumerate(states):
        p.load(wrapper.attr("heads")[h], state)
    p.call(wrapper.attr("eval"))
    x_ref = p.tensor(x)
    p.record(p.call(wrapper, x_ref), "the output")
    p.record(x_ref, "its input after the call")
    out = heads + 1

    def judge(got, want):
        found = first_raised(got)
        if found and found[0] == 0:
            return raised_message(what, found[1], "one head per window, kept in self.heads")
        if got[0] != want[0]:
            return with_hint(f"{what}: self.heads holds {count_of(got[0])} heads, not len(windows)",
                             "one head per window, in the order of windows")
        if found:
            return raised_message(what, found[1], HEAD_LAYERS if found[0] <= heads else WINDOW_RULE)
        for h in range(heads):
            problem = compare(got[1 + h], want[1 + h], f"{what}: head {h}", EXACT)
            if problem:
                return with_hint(problem, HEAD_LAYERS)
        problem = shape_problem(got[out], want[out], f"{what}: the output",
                                "the heads' outputs side by side: (b, T, d_out * len(windows))")
        problem = problem or with_hint(compare(got[out + 1], want[out + 1], f"{what}: its input after the call",
                                               EXACT), "it changed its input: use out-of-place operations on x")
        if problem:
            return problem
        mine = tensor_of(got[out]).double()
        t = x.shape[1]
        x64 = x.double()

        def expected(hidden):
            return torch.cat([windowed_attention_64(state, x64, mask) for state, mask in zip(states, hidden)], dim=-1)

        right = expected([window_hidden(t, w) for w in windows])
        if torch.allclose(mine, right, atol=1e-5, rtol=1e-4):
            return None
        for hint, hidden in misreadings(t, windows):
            if torch.allclose(mine, expected(hidden), atol=1e-5, rtol=1e-4):
                return f"{what}: the output is not what the windows allow\n  likely mistake: {hint}"
        for h in range(heads):
            columns = slice(h * d_out, (h + 1) * d_out)
            if not torch.allclose(mine[..., columns], right[..., columns], atol=1e-5, rtol=1e-4):
                return with_hint(f"{what}: the output of head {h} (window {windows[h]}) has the wrong values",
                                 WINDOW_RULE + "; the heads' outputs side by side, in order")
        return None

    return Check(what, p, judge=judge)


def windows_error(windows):
    p = Program()
    p.call(G(LOOKBACK), 3, 2, 6, 0.0, windows=windows)
    return expect_value_error(f"{LOOKBACK}(3, 2, 6, 0.0, windows={windows})", p, "windows")


def lookback_wrapper(inputs):
    checks = [lookback_output_check(inputs, "the (2, 6, 3) batch", 3, 2, 6, [1, 2, 6], False, BATCH),
              lookback_output_check(inputs, "the first 4 tokens of the batch, (2, 4, 3)", 3, 2, 6, [1, 2, 6], False,
                                    BATCH[:, :4].contiguous())]
    for b, t, context, d_in, d_out, windows, bias in [(3, 7, 9, 4, 3, [3, 1, 5], True), (2, 8, 8, 5, 2, [2, 8], False),
                                                      (1, 5, 10, 3, 4, [4, 2, 2, 12], True),
                                                      (4, 6, 6, 2, 1, [5, 3], False), (2, 1, 4, 3, 2, [2], False)]:
        checks.append(lookback_output_check(inputs, f"a random ({b}, {t}, {d_in}) input", d_in, d_out, context,
                                            windows, bias, inputs.randn(b, t, d_in)))
    return checks + [windows_error(w) for w in ([], [2, 0], [-1], [1, 3, -2])]


def reach_check(inputs, d_in, d_out, context, windows, t):
    """Which tokens each head's output depends on (a token changed at a time), whatever the weights."""
    what = f"{LOOKBACK}({d_in}, {d_out}, {context}, 0.0, windows={windows}) on a random (2, {t}, {d_in}) input"
    x = inputs.randn(2, t, d_in)
    p = Program()
    p.seed(inputs.seed())
    wrapper = p.call(G(LOOKBACK), d_in, d_out, context, 0.0, windows=windows)
    p.call(wrapper.attr("eval"))
    p.record(p.call(wrapper, p.tensor(x)), "the output")
    for j in range(t):
        shifted = x.clone()
        shifted[:, j] = shifted[:, j] + 1.0
        p.record(p.call(wrapper, p.tensor(shifted)), f"the output with token {j} changed")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        for index in range(t + 1):
            problem = shape_problem(got[index], want[index], f"{what}: the output",
                                    "the heads' outputs side by side: (b, T, d_out * len(windows))")
            if problem:
                return problem
        base = tensor_of(got[0]).double()
        rows = [((tensor_of(got[1 + j]).double() - base).abs() > 1e-6).reshape(2, t, len(windows), d_out)
                .any(dim=-1).any(dim=0) for j in range(t)]
        seen = torch.stack(rows, dim=-1).permute(1, 0, 2)  # (heads, T, T): head, query, key
        right = [~window_hidden(t, w) for w in windows]
        if all(torch.equal(seen[h], right[h]) for h in range(len(windows))):
            return None
        for hint, hidden in misreadings(t, windows):
            if all(torch.equal(seen[h], ~hidden[h]) for h in range(len(windows))):
                return f"{what}: the tokens each head reads are not those its window allows\n  likely mistake: {hint}"
        h = next(h for h in range(len(windows)) if not torch.equal(seen[h], right[h]))
        wrong = (seen[h] != right[h]).nonzero().tolist()[:4]
        return with_hint(f"{what}: head {h} (window {windows[h]}) reads tokens it should not, or misses tokens it "
                         f"should read, e.g. (token, key) in {wrong}", WINDOW_RULE)

    return Check(what, p, judge=judge)


def lookback_registered_check(d_in, d_out, context, rate, windows, bias, x):
    what = f"{LOOKBACK}({d_in}, {d_out}, {context}, {rate}, windows={windows}, qkv_bias={bias})"
    p = Program()
    wrapper = p.call(G(LOOKBACK), d_in, d_out, context, rate, windows=windows, qkv_bias=bias)
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
        problem = compare(got[0], want[0], f"{what}: its registered parameters", EXACT) or (
            names != wanted and f"{what}: its registered parameters are {sorted(names)[:6]}, not {sorted(wanted)[:6]}")
        if problem:
            return with_hint(problem, "keep the heads where PyTorch registers them (as in Part 1), every head with "
                                      "its own layers; " + HEAD_LAYERS)
        outputs = []
        for g, w in zip(got[1:], want[1:]):
            problem = shape_problem(g, w, f"{what}: an output", "the heads' outputs side by side")
            if problem:
                return problem
            outputs.append(tensor_of(g).double())
        if not torch.equal(outputs[0], outputs[1]):
            return with_hint(f"{what}: in eval mode two outputs for the same input differ",
                             "eval() must reach every head's dropout: keep the heads registered")
        if torch.equal(outputs[2], outputs[3]):
            return with_hint(f"{what}: in training mode with dropout={rate} the output was the same twice",
                             "every head drops its attention weights with the wrapper's dropout probability")
        return None

    return Check(what, p, judge=judge)


def lookback_wrapper_reach(inputs):
    checks = [reach_check(inputs, 3, 2, 8, [3, 1, 5], 7)]
    for d_in, d_out, context, windows, t in [(4, 3, 9, [2, 6, 1], 8), (2, 2, 12, [4, 9], 10), (3, 1, 5, [1, 5, 3], 5)]:
        checks.append(reach_check(inputs, d_in, d_out, context, windows, t))
    checks.append(lookback_registered_check(3, 2, 6, 0.5, [2, 4], False, BATCH))
    for d_in, d_out, context, windows, bias in [(4, 3, 5, [1, 3, 5], True), (5, 2, 7, [6], False)]:
        checks.append(lookback_registered_check(d_in, d_out, context, 0.4, windows, bias,
                                                inputs.randn(30, context, d_in)))
    return checks


# Part 4 builds heads that differ by design (a window each), which the lesson did not do.
TRANSFER = {"test_lookback_wrapper", "test_lookback_wrapper_reach"}

CELLS = {
    "test_wrapper_output": floats_where_due(wrapper_output),
    "test_wrapper_heads": floats_where_due(wrapper_heads),
    "test_wrapper_arguments": floats_where_due(wrapper_arguments),
    "test_wrapper_with_output_width": floats_where_due(wrapper_with_output_width),
    "test_wrapper_with_output_width_arguments": floats_where_due(wrapper_with_output_width_arguments),
    "test_lookback_wrapper": floats_where_due(lookback_wrapper),
    "test_lookback_wrapper_reach": floats_where_due(lookback_wrapper_reach),
}
