"""Judges of step 05: inverted dropout, and CausalAttention with dropout on its attention weights.

Dropout is random, and its patterns for one seed differ between machines: its checks judge properties of the
student's own records (fraction dropped, value of the survivors, mean, same seed same pattern), never a pattern
against the reference's.
"""
import math
import re

import torch
import torch.nn as nn

from attention_course import data
from attention_grader.judging import (G, Check, NamedMistake, Program, call_check, compare, default_judge,
                                      expect_value_error, generator, raised_message)
from attention_grader.judges.common import (EXACT, first_raised, floats_where_due, forward_check, mask_buffer_check,
                                            matched_records, own_attention_check, qkv_state, shape_problem, tensor_of,
                                            with_hint, with_later_tokens_changed)
from attention_grader.judges.step04 import MODULE_MISTAKES as CAUSAL_MODULE_MISTAKES
from attention_grader.judges.step04 import MistakenCausal

BATCH = data.journey_batch()  # (2, 6, 3)
SWAPPED = "drop each entry with probability p, keep it with probability 1 - p: are the two swapped?"
RESCALE = ("divide every kept entry by 1 - p; multiplying by 1 - p or not scaling at all changes the average, and the "
           "mask must have the shape of x")
KEEP_MEAN = "inverted dropout keeps the average: kept entries are divided by 1 - p"
OWN_GENERATOR = "draw the random numbers from the generator you are given: torch.rand(x.shape, generator=generator)"
OUT_OF_PLACE = "build a new tensor (x * keep / (1 - p)); in-place operations such as x.mul_ or x[...] = 0 change x"


def far(value, expected, low, spread):
    """True when `value` is more than max(low, 6 standard deviations) from `expected` (a correct dropout is within
    that with overwhelming probability)."""
    return not abs(value - expected) <= max(low, 6 * spread)


# ---------------------------------------------------------------------------------------------------------------
# Parts 1 and 2: dropout(x, p, training=True, generator=None)
# ---------------------------------------------------------------------------------------------------------------

def input_tensor(p, x):
    """x in the notebook; a tensor of ones is sent as one entry and repeated there, to keep the plan small."""
    if bool((x == 1).all()) and x.dim() == 2:
        return p.call(p.tensor(torch.ones(1, 1, dtype=x.dtype)).attr("repeat"), *x.shape)
    return p.tensor(x)


def dropped_check(what, x, rate, seed):
    """dropout(x, rate, generator=Generator(seed)): each entry 0 or x / (1 - rate), about `rate` of them 0, the mean
    kept, x unchanged."""
    p = Program()
    x_ref = input_tensor(p, x)
    p.record(p.call(G("dropout"), x_ref, rate, generator=generator(seed)), "the result")
    p.record(x_ref, "its input after the call")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = shape_problem(got[0], want[0], f"{what}: the result", "return a tensor of the shape of x")
        problem = problem or with_hint(compare(got[1], want[1], f"{what}: its input after the call", EXACT),
                                       "dropout changed its input x: " + OUT_OF_PLACE)
        if problem:
            return problem
        out, x64 = tensor_of(got[0]).double(), x.double()
        fine = (out == 0) | torch.isclose(out, x64 / (1 - rate), rtol=1e-5, atol=1e-6)
        if not bool(fine.all()):
            problem = f"{what}: some entries of the result are neither 0 nor x / (1 - p)"
            kept = out != 0
            for factor, hint in ((1.0, "the kept entries are not scaled: divide every kept entry by 1 - p"),
                                 (1 - rate, "the kept entries are multiplied by 1 - p: divide them by 1 - p"),
                                 (1 / rate, "the kept entries are divided by p: divide them by 1 - p, the "
                                            "probability of keeping")):
                if bool(kept.any()) and torch.allclose(out[kept], x64[kept] * factor, rtol=1e-5, atol=1e-6):
                    return NamedMistake(with_hint(problem, hint))
            return with_hint(problem, "none of the usual mistakes gives these values: every entry is 0 or x / (1 - p)")
        zero = out == 0
        for dim in range(x64.dim() if x64.dim() > 1 else 0):
            if x64.shape[dim] > 1 and bool((zero == zero.narrow(dim, 0, 1)).all()) and bool(zero.any()):
                return NamedMistake(with_hint(f"{what}: every slice along dimension {dim} dropped the same entries",
                                              "the random numbers have fewer dimensions than x and are broadcast: "
                                              "draw one per entry, of the shape of x: torch.rand(x.shape, "
                                              "generator=generator)"))
        count = int((x64 != 0).sum())
        fraction = float(((out == 0) & (x64 != 0)).sum()) / count
        spread = math.sqrt(rate * (1 - rate) / count)
        if far(fraction, rate, 0.03, spread):
            problem = f"{what}: {fraction:.3f} of the entries were set to 0, far from p"
            if not far(fraction, 1 - rate, 0.03, spread):
                return NamedMistake(with_hint(problem, "drop and keep are swapped: about 1 - p of the entries were "
                                                       "dropped, so the mask keeps an "
                                                       "entry with probability p (rand < p kept, or bernoulli(p) used "
                                                       "as the mask of kept entries); keep it with probability 1 - p"))
            return with_hint(problem, "none of the usual mistakes drops this many: drop each entry with probability "
                                      "p, one random number per entry")
        if far(out.mean().item(), x64.mean().item(), 0.05,
               math.sqrt(rate / (1 - rate) * x64.pow(2).mean().item() / x64.numel())):
            return with_hint(f"{what}: the mean of the result is far from the mean of x", KEEP_MEAN)
        return None

    return Check(what, p, judge=judge)


def patterns_check(what, failure, x, rate, calls, same, hint):
    """Two calls of dropout(x, rate, ...) whose results must be equal (same=True) or must not be; `failure` says
    what went wrong."""
    p = Program()
    x_ref = input_tensor(p, x)
    for call in calls:
        call(p, x_ref)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        for g, w in zip(got, want):
            problem = shape_problem(g, w, f"{what}: a result", "return a tensor of the shape of x")
            if problem:
                return problem
        first, second = tensor_of(got[0]).double(), tensor_of(got[1]).double()
        if torch.equal(first, second) != same:
            return with_hint(f"{what}: {failure}", hint)
        return None

    return Check(what, p, judge=judge)


LIBRARY_DROPOUT = ("a library's dropout (F.dropout, nn.Dropout) draws from PyTorch's global generator, whatever "
                   "seed was set around it: draw the random numbers yourself, from the generator you are given")


def own_draws_check(what, function, x, rate, seed):
    """function(x, rate, generator=Generator(seed)) makes every random draw with a generator: the one it is given
    (F.dropout and nn.Dropout draw from the global generator, seen in the traced operations)."""
    p = Program()
    p.call(G(function), p.tensor(x), rate, generator=generator(seed), trace=0, catch=True)

    def judge(got, _want):
        if len(got) < 2:
            found = first_raised(got)
            return raised_message(what, found[1]) if found else f"{what}: its operations were not recorded"
        trace, caught = (record if isinstance(record, dict) else {} for record in got[:2])
        if caught.get("caught") is not None:
            return None  # it raises anyway: the other checks say why
        ops, unseeded = (trace.get("trace") or {}).get("ops"), (trace.get("trace") or {}).get("unseeded")
        if not isinstance(ops, list) or not isinstance(unseeded, list):
            return f"{what}: its operations were not recorded"
        if unseeded:
            index = unseeded[0] if isinstance(unseeded[0], int) and 0 <= unseeded[0] < len(ops) else 0
            op = str(ops[index])[:40]
            if "dropout" in op:
                return NamedMistake(with_hint(f"{what}: it ran aten.{op} without the generator it was given",
                                              LIBRARY_DROPOUT))
            return NamedMistake(with_hint(f"{what}: it ran aten.{op} without the generator it was given",
                                          "the random numbers come from PyTorch's global generator: pass "
                                          "generator=generator to the function that draws them (torch.rand(shape, "
                                          "generator=generator), torch.bernoulli(probs, generator=generator); "
                                          "torch.rand_like takes no generator)"))
        return None

    return Check(what, p, judge=judge)


def seeded_call(seed, rate):
    def call(p, x_ref):
        p.record(p.call(G("dropout"), x_ref, rate, generator=generator(seed)), "a result")
    return call


def generator_checks(inputs):
    x, rate = torch.ones(60, 70), 0.4
    seed = inputs.seed()

    def same_generator(p, x_ref):
        g = p.tensor(generator(seed))
        for _ in range(2):
            p.record(p.call(G("dropout"), x_ref, rate, generator=g), "a result")

    def global_generator(p, x_ref):
        p.seed(seed)
        for _ in range(2):
            p.record(p.call(G("dropout"), x_ref, rate), "a result")

    what = "dropout(x, 0.4) on ones of shape (60, 70)"
    return [
        patterns_check(what, "two calls with generators seeded alike dropped different entries", x, rate,
                       [seeded_call(seed, rate)] * 2, True, OWN_GENERATOR),
        patterns_check(what, "generators with different seeds dropped the same entries", x, rate,
                       [seeded_call(seed, rate), seeded_call(seed + 1, rate)], False,
                       "draw the random numbers from the generator you are given, do not reseed inside dropout"),
        patterns_check(what, "two calls with the same generator dropped the same entries", x, rate,
                       [same_generator], False,
                       "draw fresh random numbers at every call; do not reseed inside dropout"),
        patterns_check(what, "two calls without a generator dropped the same entries", x, rate, [global_generator],
                       False, "with generator=None, use PyTorch's global generator (torch.rand(x.shape, "
                              "generator=None) does)"),
    ]


def dropout_training(inputs):
    ones = torch.ones(200, 200)
    # The records of a cell are limited (judging.RECORDS_LIMIT): the visible example's second call with the same
    # seed is left to generator_checks, on a smaller input.
    checks = [dropped_check("dropout(ones, 0.2, generator=...) for ones of shape (200, 200)", ones, 0.2, 0)]
    for index, rate in enumerate([0.1, 0.35, 0.5, 0.7]):
        dtype = torch.float64 if index % 2 else torch.float32
        checks.append(dropped_check(f"dropout(ones, {rate}, generator=...) for {dtype} ones of shape (80, 100)",
                                    torch.ones(80, 100, dtype=dtype), rate, inputs.seed()))
    for shape in [(3, 50, 40), (7, 9), (1000,)]:
        checks.append(dropped_check(f"dropout(x, 0.3, generator=...) on a random {shape} input",
                                    inputs.randn(*shape), 0.3, inputs.seed()))
    draws = own_draws_check("dropout(x, 0.3, generator=...) on a random (6, 7) input, its random draws", "dropout",
                            inputs.randn(6, 7), 0.3, inputs.seed())
    return checks + generator_checks(inputs) + [draws]


def p_value_error(what, rate, x=None, function="dropout", training=True):
    """function(x, rate) must raise ValueError naming p: the word p, or the word probability as PyTorch's own
    F.dropout says it. With training=False, the call with training=True comes first (what it raised kept), to tell
    a check placed after the training=False shortcut from no check at all."""
    p = Program()
    x_ref = p.tensor(torch.ones(3, 4) if x is None else x)
    if not training:
        p.call(G(function), x_ref, rate, catch=True)
        p.call(G(function), x_ref, rate, training=False)
    else:
        p.call(G(function), x_ref, rate)

    def judge(got, want):
        last = got[-1] if got else None
        if last is None or "raised" not in last:
            caught = got[0].get("caught") if not training and got and isinstance(got[0], dict) else None
            if isinstance(caught, dict) and caught.get("raised") == "ValueError":
                return NamedMistake(f"{what} did not raise a ValueError, though it does with training=True\n  likely "
                                    "mistake: the check of p comes after the `training=False` (or p == 0) shortcut: "
                                    "check p before anything else")
            return NamedMistake(f"{what} did not raise a ValueError\n  likely mistake: p={rate} is let through: raise "
                                "ValueError naming p whenever p < 0 or p > 1, before anything else")
        if last["raised"] == "NotImplementedError":
            return raised_message(what, last)
        if last["raised"] == "AssertionError":
            return NamedMistake(f"{what} raised AssertionError instead of a ValueError\n  likely mistake: assert "
                                "raises AssertionError (and python -O skips it): raise ValueError(...) naming p")
        if last["raised"] != "ValueError":
            return (f"{what} raised {str(last['raised'])[:80]} instead of a ValueError\n  likely mistake: p={rate} "
                    "reached the computation, which failed on it: check p first and raise ValueError naming it")
        if not re.search(r"(?<![A-Za-z0-9_])(p|probability)(?![A-Za-z0-9_])", str(last["message"])):
            return (f"{what} raised a ValueError whose message does not name `p`\n  likely mistake: say which "
                    "argument is wrong, e.g. raise ValueError(f\"p must be between 0 and 1, got p={p}\")")
        return None

    return Check(what, p, judge=judge)


def allowed_rate_check(what, function, x, rate, hint, **kwargs):
    """call_check of function(x, rate, **kwargs), naming a check of p that rejects p = 0 or p = 1."""
    check = call_check(what, function, x, rate, hint=hint, **kwargs)

    def judge(got, want):
        found = first_raised(got)
        if found and found[1]["raised"] == "ValueError" and rate in (0.0, 1.0):
            return NamedMistake(raised_message(what, found[1], f"the check of p rejects p = {rate:g}, which the task "
                                               "allows: p may be any number in [0, 1], both ends included (raise "
                                               "only when p < 0 or p > 1)"))
        return default_judge(check, got, want)

    check.judge = judge
    return check


def dropout_special_cases(inputs):
    journey = data.journey_inputs()
    off = "with training=False dropout is switched off: return x unchanged"
    nothing = "p = 0 drops nothing, and dividing by 1 - 0 = 1 changes nothing: return x unchanged"
    zeros = "p = 1 drops every entry: return zeros (torch.zeros_like(x)) instead of dividing by 1 - p = 0"
    checks = [allowed_rate_check("dropout(inputs, 0.5, training=False) on the journey sentence", "dropout", journey,
                                 0.5, off, training=False),
              allowed_rate_check("dropout(inputs, 0.0) on the journey sentence", "dropout", journey, 0.0, nothing),
              allowed_rate_check("dropout(inputs, 1.0) on the journey sentence", "dropout", journey, 1.0, zeros)]
    for shape in [(4, 5), (2, 3, 7), (11,)]:
        x = inputs.randn(*shape).double()
        for rate in (0.25, 0.9, 1.0):
            checks.append(allowed_rate_check(f"dropout(x, {rate}, training=False) on a random {shape} input",
                                             "dropout", x, rate, off, training=False))
        checks.append(allowed_rate_check(f"dropout(x, 0.0) on a random {shape} input", "dropout", x, 0.0, nothing))
        checks.append(allowed_rate_check(f"dropout(x, 1.0) on a random {shape} input", "dropout", x, 1.0, zeros))
    return checks


def dropout_arguments(inputs):
    journey = data.journey_inputs()
    return ([p_value_error("dropout(inputs, 1.5)", 1.5, journey), p_value_error("dropout(inputs, -0.1)", -0.1, journey)]
            + [p_value_error(f"dropout(x, {rate}) on a (3, 4) input", rate) for rate in (1.01, 2, -0.5, -1e-3)]
            + [p_value_error(f"dropout(x, {rate}, training=False) on a (3, 4) input", rate, training=False)
               for rate in (1.5, -0.2)])


# ---------------------------------------------------------------------------------------------------------------
# Part 3: CausalAttention
# ---------------------------------------------------------------------------------------------------------------

CA_HINTS = dict(
    parameters_hint="create self.W_query, self.W_key and self.W_value with nn.Linear(d_in, d_out, bias=qkv_bias)",
    runs_hint="none of the usual mistakes raises this: compare the sizes the message names with where the line above "
              "says they come from; the mask is built for context_length tokens and cut to the T of x, "
              "self.mask[:T, :T], and only T > context_length raises",
    value_hint="none of the usual mistakes gives these values: compare each step with the task on a small input "
               "(scores, the future set to -inf, the scale sqrt(d_out), a softmax over the keys, @ values; dropout "
               "is off in eval mode)",
    again_hint="eval mode must be deterministic: self.dropout = nn.Dropout(dropout) is switched off by eval()",
    causal_hint="earlier tokens see later ones, and none of the usual mistakes gives these values: the masked scores "
                "must be what goes into the softmax, True in the mask where key j > query i")


class MistakenCausalAttention(MistakenCausal):
    """Step 04's CausalSelfAttention with a usual mistake put in (MistakenCausal), plus this step's dropout layer,
    which eval() switches off; `fill` is the value the masked scores get."""
    fill = float("-inf")

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, qkv_bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if self.fill == float("-inf"):
            return super().forward(x)
        tokens = x.shape[1]
        if tokens > len(self.mask):
            raise ValueError("more tokens than context_length")
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = (queries @ keys.transpose(-2, -1)).masked_fill(self.mask[:tokens, :tokens], self.fill)
        return torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1) @ values


def _attention(changes):
    """A mistake of step 04's module table, or attributes of MistakenCausalAttention, as a replacement of
    CausalAttention."""
    mistaken = next(iter(changes.values())) if isinstance(changes, dict) else None
    attributes = {k: v for k, v in vars(mistaken).items() if not k.startswith("__")} if mistaken else {}
    return {"CausalAttention": type("MistakenCausalAttention", (MistakenCausalAttention,), attributes)}


CA_MISTAKES = tuple((hint, _attention(changes)) for hint, changes in CAUSAL_MODULE_MISTAKES) + (
    ("the masked scores are set to 0, not -inf: a score of 0 still gets a positive weight after the softmax (e ** 0 = "
     "1), so the future is still seen; fill with float('-inf')",
     {"CausalAttention": type("MistakenCausalAttention", (MistakenCausalAttention,), {"fill": 0.0})}),
)


def full_context_raise(what, record, tokens, context, batch):
    """A message naming why CausalAttention raised ValueError on `tokens` <= context_length tokens, where its words
    leave no doubt (the batch size taken for the number of tokens, or a full context refused); None otherwise."""
    if record.get("raised") != "ValueError" or tokens > context:
        return None
    numbers = [int(n) for n in re.findall(r"\d+", str(record.get("message")))]
    if batch != tokens and batch > context and batch in numbers:
        return NamedMistake(raised_message(what, record, f"the number of tokens is taken from x.shape[0], the batch "
                                           f"size ({batch} here): T is x.shape[1]"))
    if tokens == context and tokens in numbers and batch not in numbers:
        return NamedMistake(raised_message(what, record, "T == context_length tokens fit: raise only when T > "
                                           "context_length (a check with >= refuses a full context)"))
    return None


def ca_forward_check(what, cls, args, state, x, **kwargs):
    """forward_check of CausalAttention, naming a usual mistake of step 04's module by running it."""
    check = matched_records(forward_check(what, cls, args, state, x, **kwargs, **CA_HINTS))
    check.mistakes = CA_MISTAKES
    judge = check.judge

    def judged(got, want):
        found = first_raised(got)
        if found and not first_raised(want):
            named = full_context_raise(what, found[1], x.shape[1], args[2], x.shape[0])
            if named:
                return named
        return judge(got, want)

    check.judge = judged
    return check


def too_long_check(what, args, x):
    """CausalAttention(*args) on x, which has more tokens than context_length: ValueError naming context_length."""
    p = Program()
    module = p.call(G("CausalAttention"), *args)
    p.call(module, p.tensor(x))
    return expect_value_error(what, p, "context_length")


def layers_check(what, args):
    """The three projections of CausalAttention(*args) are nn.Linear modules."""
    p = Program()
    module = p.call(G("CausalAttention"), *args)
    names = ("W_query", "W_key", "W_value")
    for name in names:
        p.record(module.attr(name).attr("__class__").attr("__name__"), f"ca.{name}")
    hint = "create self.W_query, self.W_key and self.W_value with nn.Linear(d_in, d_out, bias=qkv_bias)"

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], hint)
        for name, g, w in zip(names, got, want):
            if g != w:
                return with_hint(f"{what}: ca.{name} should be an nn.{w['str']}, got a {str(g.get('str'))[:60]}",
                                 hint)
        return None

    return Check(what, p, judge=judge)


def causal_attention(inputs):
    ca = "CausalAttention"
    changed = BATCH.clone()
    changed[:, 3:] += 1.0
    state = qkv_state(inputs, 3, 2, False)
    checks = [
        layers_check("CausalAttention(3, 2, 6, 0.0)", (3, 2, 6, 0.0)),
        mask_buffer_check("CausalAttention(3, 2, 6, 0.0)", ca, (3, 2, 6, 0.0),
                          "self.register_buffer(\"mask\", torch.triu(...)) keeps the mask with the module "
                          "(state_dict, .to(device))"),
        ca_forward_check("CausalAttention(3, 2, 6, 0.0) on the (2, 6, 3) batch", ca, (3, 2, 6, 0.0), state, BATCH,
                         cut=3, changed=changed),
        ca_forward_check("CausalAttention(3, 2, 6, 0.0) on the first 4 tokens of the batch, (2, 4, 3)", ca,
                         (3, 2, 6, 0.0), state, BATCH[:, :4].contiguous()),
    ]
    for b, t, context, d_in, d_out, bias, rate in [(1, 1, 4, 3, 2, False, 0.0), (3, 5, 8, 4, 3, True, 0.3),
                                                   (2, 7, 7, 5, 6, False, 0.5), (4, 3, 10, 2, 5, True, 0.1),
                                                   (2, 6, 6, 3, 2, False, 0.0)]:
        built = f"CausalAttention({d_in}, {d_out}, {context}, {rate}, qkv_bias={bias})"
        x = inputs.randn(b, t, d_in)
        cut = t // 2 if t > 1 else None
        checks.append(ca_forward_check(
            f"{built} in eval mode on a random ({b}, {t}, {d_in}) input", ca, (d_in, d_out, context, rate),
            qkv_state(inputs, d_in, d_out, bias), x, kwargs={"qkv_bias": bias}, cut=cut,
            changed=with_later_tokens_changed(inputs, x, cut) if cut else None))
    return checks + [own_ca_check(inputs, "eval")]


OWN_ATTENTION = ("this part asks for attention's steps written out, the mask and the dropout of the weights in their "
                 "places; torch.nn.functional.scaled_dot_product_attention does them for you (step 08 uses it)")


def own_ca_check(inputs, mode):
    """CausalAttention in `mode`, traced: none of PyTorch's attention kernels may run."""
    p = Program()
    module = p.call(G("CausalAttention"), 4, 3, 8, 0.5)
    p.load(module, qkv_state(inputs, 4, 3, False))
    p.call(module.attr(mode))
    call = p.call(module, p.tensor(inputs.randn(2, 6, 4)), trace=0)
    return own_attention_check(f"CausalAttention(4, 3, 8, 0.5) in {mode} mode on a random (2, 6, 4) input, watched "
                               "operation by operation", p, call, OWN_ATTENTION)


def causal_attention_arguments(inputs):
    checks = [too_long_check("CausalAttention(3, 2, 6, 0.0) on 7 tokens, (1, 7, 3)", (3, 2, 6, 0.0),
                             torch.zeros(1, 7, 3))]
    for context, d_in, d_out, rate in [(4, 3, 2, 0.0), (8, 4, 3, 0.3), (7, 5, 6, 0.5), (10, 2, 5, 0.1)]:
        checks.append(too_long_check(f"CausalAttention({d_in}, {d_out}, {context}, {rate}) on {context + 1} tokens, "
                                     f"(1, {context + 1}, {d_in})", (d_in, d_out, context, rate),
                                     torch.zeros(1, context + 1, d_in)))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 4: dropout in the right place
# ---------------------------------------------------------------------------------------------------------------

def values_all_ones_state(inputs, d_in, d_out):
    """Random queries and keys; W_value reads only the first coordinate of each embedding, which the inputs set to
    1, so every value vector is all ones and each context vector holds its row sum of attention weights."""
    state = qkv_state(inputs, d_in, d_out, False)
    state["W_value.weight"] = torch.zeros(d_out, d_in)
    state["W_value.weight"][:, 0] = 1.0
    return state


def first_coordinate_one(x):
    x[..., 0] = 1.0
    return x


def placement_check(inputs, t, d_in, d_out, rate, num_sentences, num_single):
    """CausalAttention(d_in, d_out, t, rate) with all value vectors ones, each context vector holding its row sum of
    attention weights: in training mode, rows that differ from eval mode's on the same input, equal entries within
    each context vector, the mean of eval mode's; and with one token, a single weight that is 0 (about `rate` of the
    time) or eval mode's divided by 1 - rate; eval mode deterministic. Measured against the module's own eval mode, so
    that a mistake of Part 3's attention (a wrong scale, dimension or mask) costs Part 3's points only. The inputs
    fill the context (a mask used unsliced still runs); a length check that refuses a full context fails here too."""
    built = f"CausalAttention({d_in}, {d_out}, {t}, {rate})"
    what = f"{built} with every value vector all ones"
    one_token = f"CausalAttention({d_in}, {d_out}, 1, {rate}) in training mode on {num_single} one-token sentences"
    state = values_all_ones_state(inputs, d_in, d_out)
    p = Program()
    module = p.call(G("CausalAttention"), d_in, d_out, t, rate)
    p.load(module, state)
    p.call(module.attr("eval"))
    x_eval = p.tensor(first_coordinate_one(inputs.randn(4, t, d_in)))
    x_train = p.tensor(first_coordinate_one(inputs.randn(num_sentences, t, d_in)))
    p.record(p.call(module, x_eval), "the output in eval mode")
    p.record(p.call(module, x_eval), "a second output in eval mode")
    p.record(p.call(module, x_train), "the output in eval mode on the input of training mode")
    single = p.call(G("CausalAttention"), d_in, d_out, 1, rate)
    p.load(single, state)
    p.call(single.attr("eval"))
    x_single = p.tensor(first_coordinate_one(inputs.randn(num_single, 1, d_in)))
    p.record(p.call(single, x_single), "the output on one-token sentences in eval mode")
    p.call(module.attr("train"))
    p.call(single.attr("train"))
    p.seed(inputs.seed())
    p.record(p.call(module, x_train), "the output in training mode")
    p.record(p.call(single, x_single), "the output on one-token sentences in training mode")
    p.record(p.call(module, x_eval), "the output in training mode on the input of eval mode")
    eval_off = "module.eval() must switch dropout off: self.dropout = nn.Dropout(dropout) reads self.training"
    batches = {3: num_sentences, 5: num_single, 6: num_sentences, 7: num_single}

    def judge(got, want):
        found = first_raised(got)
        if found:
            tokens = 1 if found[0] in (5, 7) else t
            return (full_context_raise(what, found[1], tokens, tokens, batches.get(found[0], 4))
                    or raised_message(what, found[1]))
        problem = compare(got[0], want[0], what, EXACT) or compare(got[4], want[4], what, EXACT)
        for index, name in ((1, f"{what} in eval mode"), (2, f"{what} in eval mode"), (3, f"{what} in eval mode"),
                            (5, f"{one_token[:-len(' in training mode')]} in eval mode"),
                            (6, f"{what} in training mode"), (7, one_token), (8, f"{what} in training mode")):
            problem = problem or shape_problem(got[index], want[index], name, "")
        if problem:
            return problem
        if not torch.equal(tensor_of(got[1]).double().nan_to_num(), tensor_of(got[2]).double().nan_to_num()):
            return NamedMistake(with_hint(f"{what} in eval mode gave different outputs for the same input",
                                          "something still drops in eval mode: " + eval_off))
        sums, eval_sums = tensor_of(got[6]).double(), tensor_of(got[3]).double()
        lost = ~eval_sums.isfinite().all(dim=-1)  # (sentences, tokens): rows of weights that are not numbers
        if bool(lost.any()):
            problem = f"{what} in eval mode: some outputs are nan or infinite"
            if bool(lost[:, 0].all()) and not bool(lost[:, 1:].any()):
                return NamedMistake(with_hint(problem + ", the first token's in every sentence", "the mask blocks the "
                                              "diagonal too: the first token's only key is itself, so its row of "
                                              "scores is all -inf and the softmax gives nan; block only the keys "
                                              "after the query"))
            return with_hint(problem, "print the attention weights in eval mode: a row whose every key is blocked is "
                                      "a softmax over nothing (nan)")
        if not (sums - eval_sums).abs().nan_to_num(nan=math.inf).max().item() > 1e-4:
            problem = (f"{what} in training mode: every row sum of attention weights is what eval mode gives, as if "
                       "nothing was dropped")
            if torch.equal(tensor_of(got[8]).double(), tensor_of(got[1]).double()):
                return NamedMistake(with_hint(problem + "; its output in training mode is the one of eval mode",
                                              "nothing is dropped in training mode: forward never applies "
                                              "self.dropout; apply it to the attention weights, after softmax"))
            return NamedMistake(with_hint(problem + ", though its output in training mode differs from eval mode's",
                                          "dropout acts before the softmax (on the scores, the queries or the keys), "
                                          "and the softmax renormalises it away: apply self.dropout to the attention "
                                          "weights, after softmax"))
        if not torch.allclose(sums, sums[..., :1].expand_as(sums), atol=1e-5, rtol=1e-5):
            problem = (f"{what} in training mode: the entries of a context vector differ, though each is the sum of "
                       "the same attention weights")
            scaled = torch.isclose(sums, eval_sums / (1 - rate), rtol=1e-5, atol=1e-6)
            if bool(((sums == 0) | scaled).all()):
                return NamedMistake(with_hint(problem, "the context vectors are dropped (each entry 0 or 1 / (1 - p) "
                                                       "times its row sum): dropout belongs on the attention "
                                                       "weights, before they multiply the values"))
            return with_hint(problem, "dropout belongs on the attention weights, not on the values or on the context "
                                      "vectors")
        spread = eval_sums.abs().max().item() * math.sqrt(rate / (1 - rate) / (num_sentences * t))
        if far(sums.mean().item(), eval_sums.mean().item(), 0.1, spread):
            return with_hint(f"{what} in training mode: the mean row sum of the attention weights is far from eval "
                             "mode's", "inverted dropout keeps the average of every weight: after softmax, scaled "
                                       "by 1 / (1 - p)")
        weights, eval_weights = tensor_of(got[7]).double()[:, 0, 0], tensor_of(got[5]).double()[:, 0, 0]
        dropped = weights == 0
        kept, eval_kept = weights[~dropped], eval_weights[~dropped]
        given_rate = "self.dropout = nn.Dropout(dropout): drop with the probability the module was given"
        if not torch.allclose(kept, eval_kept / (1 - rate), rtol=1e-5, atol=1e-6):
            ratio = kept / eval_kept
            one_value = len(kept) > 0 and torch.allclose(ratio, ratio[:1].expand_as(ratio), rtol=1e-5, atol=1e-6)
            return with_hint(f"{one_token}: the single attention weight should be dropped (0) or kept and divided by "
                             "1 - p", given_rate if one_value else "apply dropout to the attention weights after "
                                                                   "softmax, not to the scores before it")
        fraction = dropped.double().mean().item()
        if far(fraction, rate, 0.08, math.sqrt(rate * (1 - rate) / num_single)):
            return with_hint(f"{one_token}: {fraction:.3f} of the weights were dropped, far from p", given_rate)
        return None

    return Check(what, p, judge=judge)


def causal_attention_dropout(inputs):
    checks = [placement_check(inputs, 6, 3, 2, 0.5, 400, 400)]
    for t, d_in, d_out, rate in [(5, 4, 3, 0.25), (8, 2, 5, 0.6), (3, 6, 1, 0.1)]:
        checks.append(placement_check(inputs, t, d_in, d_out, rate, 1000, 2000))
    return checks + [own_ca_check(inputs, "train")]


# ---------------------------------------------------------------------------------------------------------------
# Part 5 (transfer): drop_keys(attn_scores, p, training=True, generator=None)
# ---------------------------------------------------------------------------------------------------------------

NO_NAN = ("a row whose every visible key was dropped is a softmax over nothing (0 / 0 = nan): such a row must be all "
          "zeros")
HIDDEN_KEY = ("a dropped key must vanish from the softmax like a masked one (a score of -inf); a score of 0 still gets "
              "a positive weight, and the -inf of the mask must stay -inf")
BEFORE_SOFTMAX = ("drop keys before the softmax, so that it spreads each row over the keys left and the row sums to 1; "
                  "dropping weights after the softmax (the lesson's dropout) leaves rows that do not")
PER_WEIGHT = ("single weights were dropped, one random draw per weight (a mask of the shape of the scores), the "
              "lesson's dropout: drop whole keys, one draw per key of each sequence shared by all of its queries (a "
              "mask of shape (..., 1, T_k))")
PER_QUERY = ("whole queries were dropped (a mask of shape (..., T_q, 1)): drop whole keys, one draw per key of each "
             "sequence shared by all of its queries (a mask of shape (..., 1, T_k))")


def partial_keys_problem(what, kept, visible):
    """The message for weights whose dropped keys differ between the queries of a sequence: naming whole queries
    dropped, or single weights."""
    problem = f"{what}: a key was dropped for some queries of a sequence but kept for others"
    row_all_or_nothing = ((kept == visible) | ~kept.any(dim=-1, keepdim=True)).all()
    if bool(row_all_or_nothing):
        return NamedMistake(with_hint(problem, PER_QUERY))
    return NamedMistake(with_hint(problem, PER_WEIGHT))


def keys_counted_wrong(what, record, scores):
    """A message naming a mask sized with T_q where T_k belongs (or the other way), read from a broadcast error
    between the two sizes; None otherwise."""
    t_q, t_k = scores.shape[-2], scores.shape[-1]
    found = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)",
                      str(record.get("message")))
    if t_q == t_k or not found or {int(found[1]), int(found[2])} != {t_q, t_k}:
        return None
    return NamedMistake(raised_message(what, record, f"a size T_q = attn_scores.shape[-2] ({t_q}) met T_k = "
                                       f"attn_scores.shape[-1] ({t_k}): the keys are counted along the last "
                                       "dimension, one draw per key, a mask of shape (..., 1, T_k)"))


NO_RESCALING = ("no division by 1 - p here: the softmax over the keys left already sums to 1, so every row keeps the "
                "sum it had; dividing makes rows sum to 1 / (1 - p)")


def causal_scores(inputs, *leading, t):
    scores = inputs.randn(*leading, t, t, scale=1.5)
    return scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))


def key_structure_problem(what, out, scores, rate):
    """The problem of drop_keys' result `out` in training mode on `scores` (None if it is right): no nan, hidden keys
    stay hidden, whole keys dropped for every query, rows a softmax over the keys left."""
    if bool(out.isnan().any()):
        rows = out.isnan().any(dim=-1)
        if bool((out.isnan().all(dim=-1) == rows).all()):
            return NamedMistake(with_hint(f"{what}: whole rows of the weights are nan", NO_NAN))
        return with_hint(f"{what}: the weights hold nan", NO_NAN)
    visible = scores.isfinite()
    if bool((out[~visible] != 0).any()):
        return with_hint(f"{what}: a key the mask hides (score -inf) got a weight", HIDDEN_KEY)
    kept = visible & (out != 0)
    kept_key = kept.any(dim=-2, keepdim=True)
    whole = bool((kept == (visible & kept_key)).all())
    sums = out.sum(dim=-1)
    rows_ok = ((sums - 1).abs() <= 1e-5) | (sums.abs() <= 1e-12)
    plain = torch.softmax(scores, dim=-1) * kept_key
    reference = torch.softmax(scores.masked_fill(~kept_key, float("-inf")), dim=-1).nan_to_num(nan=0.0)
    if not bool(rows_ok.all()) and whole and rate < 1:
        for candidate, hint in (
                (plain, "the weights were dropped after the softmax, which leaves rows that do not sum to 1: drop "
                        "keys before the softmax (a score of -inf), so that it spreads each row over the keys left"),
                (plain / (1 - rate), "the weights were dropped after the softmax and divided by 1 - p, inverted "
                                     "dropout's way, which keeps the average but leaves rows that do not sum to 1: "
                                     "drop keys before the softmax (a score of -inf), without any division"),
                (reference / (1 - rate), NO_RESCALING)):
            if torch.allclose(out, candidate, atol=1e-5, rtol=1e-4):
                return NamedMistake(with_hint(f"{what}: rows should sum to 1, or 0 where every key they see was "
                                              f"dropped; got sums such as {sums[~rows_ok][:3].tolist()}", hint))
    if not bool(rows_ok.all()):
        nonzero = sums[sums.abs() > 1e-12]
        bad = sums[~rows_ok][:3].tolist()
        problem = f"{what}: rows should sum to 1, or 0 where every key they see was dropped; got sums such as {bad}"
        if whole and rate < 1 and torch.allclose(nonzero, torch.full_like(nonzero, 1 / (1 - rate)), atol=1e-4):
            return with_hint(problem, NO_RESCALING)
        return with_hint(problem, BEFORE_SOFTMAX if not whole else HIDDEN_KEY)
    if not whole:
        return partial_keys_problem(what, kept, visible)
    if bool(kept_key.all()):
        return with_hint(f"{what}: no key was dropped in training mode", "in training mode with p > 0, drop each key "
                                                                        "with probability p")
    if not torch.allclose(out, reference, atol=1e-5, rtol=1e-4):
        return with_hint(f"{what}: the weights of the keys a row still sees are not the softmax of their scores",
                         HIDDEN_KEY)
    return None


def keys_dropped_check(what, scores, rate, seed):
    """drop_keys(scores, rate, generator=Generator(seed)) in training mode: judged by its structure, whatever keys
    the student's random numbers dropped."""
    p = Program()
    s = p.tensor(scores)
    p.record(p.call(G("drop_keys"), s, rate, generator=generator(seed)), "the weights")
    p.record(s, "its input after the call")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return keys_counted_wrong(what, found[1], scores) or raised_message(what, found[1])
        problem = shape_problem(got[0], want[0], f"{what}: the weights", "return weights of the shape of the scores")
        problem = problem or with_hint(compare(got[1], want[1], f"{what}: its input after the call", EXACT),
                                       "drop_keys changed its input attn_scores: build new tensors (masked_fill, "
                                       "torch.where), not masked_fill_ or item assignment")
        return problem or key_structure_problem(what, tensor_of(got[0]), scores.double(), rate)

    return Check(what, p, judge=judge)


def all_dropped_check(what, scores, hint):
    """drop_keys(scores, 1.0): all zeros; naming the usual ways to get something else by what they give."""
    check = allowed_rate_check(what, "drop_keys", scores, 1.0, hint)
    judge = check.judge

    def named(got, want):
        problem = judge(got, want)
        found = first_raised(got)
        if problem and found:
            return keys_counted_wrong(what, found[1], scores) or problem
        if not problem or isinstance(problem, NamedMistake) or "tensor" not in got[0]:
            return problem
        out, s = tensor_of(got[0]).double(), scores.double()
        head = problem.split("\n  likely mistake: ")[0]
        if bool(out.isnan().all()):
            return head + ("\n  likely mistake: every weight is nan: with every key dropped, a softmax over a row of "
                           "-inf gives 0 / 0 = nan, and so does a division by 1 - p = 0; the weights must be all zeros")
        zeroed = torch.softmax(s.masked_fill(s.isfinite(), 0.0), dim=-1)
        if out.shape == s.shape and torch.allclose(out, zeroed, atol=1e-5):
            return NamedMistake(head + f"\n  likely mistake: {HIDDEN_KEY}")
        if out.shape == s.shape and torch.allclose(out, torch.softmax(s, dim=-1), atol=1e-5):
            return NamedMistake(head + "\n  likely mistake: nothing was dropped with p = 1: every key is dropped "
                                "with probability p, here all of them")
        return head + "\n  likely mistake: none of the usual mistakes gives these values: " + hint

    check.judge = named
    return check


def drop_keys(inputs):
    checks = []
    off = "with training=False nothing is dropped: return the softmax of the scores over the keys"
    nothing = "p = 0 drops no key: return the softmax of the scores"
    everything = "p = 1 drops every key, so every row lost all its keys: the weights are all zeros"
    for leading, t, rate in [((300,), 5, 0.5), ((60, 4), 6, 0.3), ((200,), 3, 0.8)]:
        checks.append(keys_dropped_check(f"drop_keys(scores, {rate}) in training mode on causal scores of shape "
                                         f"{leading + (t, t)}", causal_scores(inputs, *leading, t=t), rate,
                                         inputs.seed()))
    checks.append(keys_dropped_check("drop_keys(scores, 0.4) in training mode on scores of shape (100, 3, 9)",
                                     inputs.randn(100, 3, 9), 0.4, inputs.seed()))
    for shape in [(3, 4), (2, 5, 7), (2, 3, 4, 4)]:
        scores = inputs.randn(*shape)
        if shape[-1] == shape[-2]:
            scores = scores.masked_fill(torch.ones(shape[-1], shape[-1], dtype=torch.bool).triu(1), float("-inf"))
        for rate in (0.5, 1.0):
            checks.append(allowed_rate_check(f"drop_keys(scores, {rate}, training=False) on scores of shape {shape}",
                                             "drop_keys", scores, rate, off, training=False))
        checks.append(allowed_rate_check(f"drop_keys(scores, 0.0) on scores of shape {shape}", "drop_keys", scores,
                                         0.0, nothing))
        checks.append(all_dropped_check(f"drop_keys(scores, 1.0) on scores of shape {shape}", scores, everything))
    checks += [p_value_error(f"drop_keys(scores, {rate}) on scores of shape (3, 4)", rate, function="drop_keys")
               for rate in (1.2, -0.1, 3)]
    checks.append(own_draws_check("drop_keys(scores, 0.5, generator=...) on random scores of shape (2, 4, 5), its "
                                  "random draws", "drop_keys", inputs.randn(2, 4, 5), 0.5, inputs.seed()))
    return checks


def keys_statistics_check(what, scores, rate, seed):
    """drop_keys on finite scores (every key visible to every query): whole keys, about `rate` of them dropped, each
    sequence (each index of the leading dimensions) with keys of its own."""
    p = Program()
    p.record(p.call(G("drop_keys"), p.tensor(scores), rate, generator=generator(seed)), "the weights")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return keys_counted_wrong(what, found[1], scores) or raised_message(what, found[1])
        problem = shape_problem(got[0], want[0], f"{what}: the weights",
                                "return weights of the shape of the scores; T_q and T_k may differ")
        if problem:
            return problem
        out = tensor_of(got[0])
        if bool(out.isnan().any()):
            return with_hint(f"{what}: the weights hold nan", NO_NAN)
        zero = out == 0
        dropped = zero.all(dim=-2)
        if not bool((zero == dropped.unsqueeze(-2)).all()):
            return partial_keys_problem(what, ~zero, torch.ones_like(zero))
        if not bool(dropped.any()):
            return with_hint(f"{what}: no key was dropped (every key kept a weight for some query)", HIDDEN_KEY)
        sequences = dropped.reshape(-1, dropped.shape[-1])
        if bool((sequences == sequences[:1]).all()):
            return with_hint(f"{what}: every sequence dropped the same keys",
                             "a mask of one draw per key, shared by the whole batch, is another kind of dropout: "
                             "every index of the leading dimensions is a sequence that draws its own keys")
        if dropped.dim() >= 3 and bool((dropped == dropped[..., :1, :]).all()):
            return with_hint(f"{what}: all heads of a sequence dropped the same keys",
                             "every index of the leading dimensions (batch and heads) is a sequence that draws its "
                             "own keys: draw over all leading dimensions")
        fraction = dropped.double().mean().item()
        spread = math.sqrt(rate * (1 - rate) / dropped.numel())
        if far(fraction, rate, 0.03, spread) and not far(fraction, 1 - rate, 0.03, spread):
            return NamedMistake(with_hint(f"{what}: {fraction:.3f} of the keys were dropped, far from p",
                                          "drop and keep are swapped: about 1 - p of the keys were dropped, so the "
                                          "mask keeps a key with probability p (rand > p dropped, or bernoulli(p) "
                                          "used as the mask of kept keys); drop it with probability p"))
        if far(fraction, rate, 0.03, spread):
            return with_hint(f"{what}: {fraction:.3f} of the keys were dropped, far from p",
                             "drop each key with probability p and keep it with probability 1 - p (are the two "
                             "swapped?); one draw per key, over the last dimension of the scores")
        return None

    return Check(what, p, judge=judge)


def drop_keys_statistics(inputs):
    checks = []
    for shape, rate in [((400, 3, 2, 8), 0.3), ((2000, 1, 6), 0.1), ((300, 4, 5, 3), 0.6), ((1500, 4, 4), 0.5)]:
        checks.append(keys_statistics_check(f"drop_keys(scores, {rate}) on scores of shape {shape}",
                                            inputs.randn(*shape), rate, inputs.seed()))
    x, rate, seed = inputs.randn(50, 3, 10), 0.4, inputs.seed()

    def seeded(seed):
        def call(p, x_ref):
            p.record(p.call(G("drop_keys"), x_ref, rate, generator=generator(seed)), "a result")
        return call

    def same_generator(p, x_ref):
        g = p.tensor(generator(seed))
        for _ in range(2):
            p.record(p.call(G("drop_keys"), x_ref, rate, generator=g), "a result")

    def global_generator(p, x_ref):
        p.seed(seed)
        for _ in range(2):
            p.record(p.call(G("drop_keys"), x_ref, rate), "a result")

    what = "drop_keys(scores, 0.4) on scores of shape (50, 3, 10)"
    return checks + [
        patterns_check(what, "two calls with generators seeded alike dropped different keys", x, rate,
                       [seeded(seed)] * 2, True, "draw the random numbers from the generator you are given"),
        patterns_check(what, "generators with different seeds dropped the same keys", x, rate,
                       [seeded(seed), seeded(seed + 1)], False,
                       "draw the random numbers from the generator you are given, do not reseed inside drop_keys"),
        patterns_check(what, "two calls with the same generator dropped the same keys", x, rate, [same_generator],
                       False, "draw fresh random numbers at every call; do not reseed inside drop_keys"),
        patterns_check(what, "two calls without a generator dropped the same keys", x, rate, [global_generator],
                       False, "with generator=None, use PyTorch's global generator"),
    ]


# Part 5 drops what the lesson did not drop (whole keys, before the softmax), from its rule alone.
TRANSFER = {"test_drop_keys", "test_drop_keys_statistics"}

CELLS = {
    "test_dropout_training": floats_where_due(dropout_training),
    "test_dropout_special_cases": floats_where_due(dropout_special_cases),
    "test_dropout_arguments": floats_where_due(dropout_arguments),
    "test_causal_attention": floats_where_due(causal_attention),
    "test_causal_attention_arguments": floats_where_due(causal_attention_arguments),
    "test_causal_attention_dropout": floats_where_due(causal_attention_dropout),
    "test_drop_keys": floats_where_due(drop_keys),
    "test_drop_keys_statistics": floats_where_due(drop_keys_statistics),
}
