"""Judges of step 04: the causal mask, its two ways of use, and CausalSelfAttention.

Known mistakes are named by running them: the answer key with one of its functions (or its CausalSelfAttention)
replaced by a mistaken one written here, on the same hidden inputs; a check names one only when the student's records
are what it computes, and otherwise says that none of the usual mistakes gives them.
"""
import functools
import itertools

import torch
import torch.nn as nn

from attention_course import data
from attention_grader.judging import (G, Check, Expect, NamedMistake, Program, compare, expect_value_error,
                                     raised_message)
from attention_grader.judges.common import (ANY_VALUES, EXACT, first_raised, forward_check, linear_state,
                                            matched_records, own_attention_check, shape_problem, tensor_of, with_hint,
                                            with_later_tokens_changed)

BATCH = data.journey_batch()  # (2, 6, 3)
LAYERS = ("W_query", "W_key", "W_value")
REGISTER = ("register the mask in __init__ with self.register_buffer('mask', ...); a plain attribute (self.mask = "
            "...) does not move with module.to(device) and is not part of the module's state, and an nn.Parameter "
            "would be learned")


# ---------------------------------------------------------------------------------------------------------------
# The usual mistakes of each part, run as variants of the answer key on the same hidden inputs: a check names one
# only when the student's records are what it computes (matched_records, judges/common.py).
# ---------------------------------------------------------------------------------------------------------------

def later_keys(num_tokens):
    index = torch.arange(num_tokens)
    return index[None, :] > index[:, None]


NUMBER_MASK = ("the mask given to masked_fill holds numbers (a float tensor, from causal_mask or built here), and "
               "masked_fill takes only a bool mask: build it with dtype=torch.bool or from a comparison, or convert "
               "it with .bool()")
MASK_MISTAKES = (
    ("causal_mask returns numbers (a float tensor), not a bool tensor: build it with dtype=torch.bool or from a "
     "comparison", {"causal_mask": lambda t: later_keys(t).float()}),
    ("True also on the diagonal hides each token from itself: block only the keys after the query, j > i (the "
     "diagonal itself stays False)", {"causal_mask": lambda t: ~later_keys(t).T}),
    ("the mask is True on and below the diagonal, the lower triangle torch.tril(ones) gives: those are the entries a "
     "query may look at, and this step's mask is True where blocked, the keys after the query (j > i); True below "
     "the diagonal blocks the past instead", {"causal_mask": lambda t: ~later_keys(t)}),
    ("the mask is True strictly below the diagonal, the keys before the query: True below the diagonal blocks the "
     "past instead; block the keys after it, j > i", {"causal_mask": lambda t: later_keys(t).T}),
)
# a later part meets Part 1's mask through the judges' stand-in, in its dtype only
AFTER_PART_1 = ((NUMBER_MASK, {"causal_mask": lambda t: later_keys(t).float()}),)

IN_PLACE_1 = ("it writes into the tensor it was given, in place (masked_fill_, *=, /=): use masked_fill, not "
              "masked_fill_, and arithmetic that returns a new tensor")
IN_PLACE_2 = ("it writes into the scores it was given, in place (masked_fill_ or an indexed assignment): use "
              "masked_fill, not masked_fill_, which returns a new tensor")
BATCH_T = ("T is taken from attn_weights.shape[{dim}], a leading (batch) dimension of a batched input: the number of "
           "tokens is the last dimension, attn_weights.shape[-1]")


def _renormalized(how):
    def renormalized_causal_weights(attn_weights):
        mask = later_keys(attn_weights.shape[how if isinstance(how, int) else -1])
        mask = ~mask if how == "kept the future" else mask
        kept = attn_weights.masked_fill(mask, float("-inf") if how == "-inf" else 0.0)
        if how == "no division":
            return kept
        if how == "softmax":
            return torch.softmax(attn_weights.masked_fill(mask, float("-inf")), dim=-1)
        return kept / kept.sum(dim=-2 if how == "columns" else -1, keepdim=how != "keepdim")
    return {"renormalized_causal_weights": renormalized_causal_weights}


RENORMALIZED_MISTAKES = (
    ("each entry is divided by the sum of its column (a sum over dim=-2, the queries): divide it by the sum of its "
     "row, over the keys (dim=-1)", _renormalized("columns")),
    ("the row sums are taken without keepdim=True: a (..., T) tensor of sums lines up with the columns, so entry "
     "[i, j] is divided by the sum of row j (or, on a batch, does not broadcast); keep the summed dimension, "
     "sum(dim=-1, keepdim=True)", _renormalized("keepdim")),
    ("the entries above the diagonal are zeroed but nothing divides by the row sums, so the rows no longer sum to 1: "
     "divide each row by its sum (way 1 divides by the row sums)", _renormalized("no division")),
    ("the future is filled with -inf after softmax, so the row sums become -inf and the weights nan or 0: zero "
     "those weights (0.0), then divide each row by its sum", _renormalized("-inf")),
    ("the kept weights go through a softmax again, which reweights them: divide each row by its sum instead",
     _renormalized("softmax")),
    ("the entries on and below the diagonal are zeroed, keeping the future: zero only those above it (key j > "
     "query i)", _renormalized("kept the future")),
    (BATCH_T.format(dim=0), _renormalized(0)),
    (BATCH_T.format(dim=1), _renormalized(1)),
)


def _weights(how):
    def causal_attention_weights(attn_scores, d_k):
        mask = later_keys(attn_scores.shape[0 if how == "T0" else -1])
        mask = ~mask if how == "past" else mask
        scale = {"no scale": 1.0, "T": attn_scores.shape[-1] ** 0.5, "d_k": d_k, "times": d_k ** -0.5}.get(
            how, d_k ** 0.5)
        if how in ("after", "after zero"):
            weights = torch.softmax(attn_scores / scale, dim=-1)
            return weights.masked_fill(mask, float("-inf") if how == "after" else 0.0)
        masked = attn_scores.masked_fill(mask, 0.0 if how == "0" else float("-inf"))
        masked = attn_scores if how == "dropped" else masked
        return torch.softmax(masked / scale, dim={"dim 0": 0, "dim -2": -2}.get(how, -1))
    return {"causal_attention_weights": causal_attention_weights}


COLUMNS = ("the softmax runs down the columns (over dim 0 or over the queries, dim=-2), so the columns sum to 1: run "
           "it over the keys, dim=-1, so that each row sums to 1")
WEIGHTS_MISTAKES = (
    ("the future is filled with 0, not -inf: exp(0) is not 0, so the softmax still gives those keys weight; fill "
     "with float('-inf')", _weights("0")),
    ("the future is masked after the softmax, so the rows no longer sum to 1: way 2 masks before the softmax (fill "
     "the scores with -inf BEFORE softmax)", _weights("after")),
    ("the future is zeroed after the softmax, so the rows no longer sum to 1: way 2 masks before the softmax (fill "
     "the scores with -inf BEFORE softmax)", _weights("after zero")),
    ("the result of masked_fill is not used: masked_fill returns a new tensor, so keep the result of masked_fill "
     "(masked = attn_scores.masked_fill(...))", _weights("dropped")),
    ("the scores are divided by sqrt(T), the number of tokens (attn_scores.shape[-1]): divide them by sqrt(d_k), "
     "the argument", _weights("T")),
    ("the scores are not divided by sqrt(d_k) before the softmax", _weights("no scale")),
    ("the scores are divided by d_k itself: divide them by sqrt(d_k) (d_k ** 0.5)", _weights("d_k")),
    ("the scores are multiplied by sqrt(d_k): divide them by it", _weights("times")),
    (COLUMNS, _weights("dim 0")),
    (COLUMNS, _weights("dim -2")),
    ("the -inf fills the entries on and below the diagonal (the past and the token itself) and leaves the future "
     "open: fill those above it, key j > query i", _weights("past")),
    (BATCH_T.format(dim=0).replace("attn_weights", "attn_scores"), _weights("T0")),
)


class MistakenCausal(nn.Module):
    """The answer key's CausalSelfAttention with the usual mistake its class attributes name put in."""
    keys = "transpose"  # ".T": keys.T, all dimensions reversed
    mask_kind = "future"  # "future and diagonal", "allowed" (True where a query may look), "past"
    slice_mask = True
    tokens_from = 1  # 0: T = x.shape[0], the batch size
    keep_fill = True
    scale = "d_out"  # "d_in", "T", "none", "d_k"
    softmax_dim = -1
    number_mask = False  # a float mask given to masked_fill (the module's dtype aside)

    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        nn.Module.__init__(self)
        self.d_in = d_in
        self.W_query, self.W_key, self.W_value = (nn.Linear(d_in, d_out, bias=qkv_bias) for _ in range(3))
        future = later_keys(context_length)
        self.register_buffer("mask", {"future and diagonal": ~future.T, "allowed": ~future,
                                      "past": future.T}.get(self.mask_kind, future))

    def forward(self, x):
        num_tokens = x.shape[self.tokens_from]
        if x.shape[1] > self.mask.shape[0]:
            raise ValueError(f"the input has {x.shape[1]} tokens, more than context_length={self.mask.shape[0]}")
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ (keys.permute(2, 1, 0) if self.keys == ".T" else keys.transpose(-2, -1))
        mask = self.mask[:num_tokens, :num_tokens] if self.slice_mask else self.mask
        mask = mask.float() if self.number_mask else mask
        masked = scores.masked_fill(mask, float("-inf"))
        scale = {"d_out": keys.shape[-1], "d_in": self.d_in, "T": x.shape[1], "none": 1, "d_k": keys.shape[-1] ** 2}
        weights = torch.softmax((masked if self.keep_fill else scores) / scale[self.scale] ** 0.5,
                                dim=self.softmax_dim)
        return weights @ values


def _module(**changes):
    return {"CausalSelfAttention": type("MistakenCausal", (MistakenCausal,), changes)}


MODULE_MISTAKES = (
    (NUMBER_MASK, _module(number_mask=True)),
    ("keys.T reverses all three dimensions of (b, T, d_out): swap only the last two, keys.transpose(-2, -1) (or "
     "keys.mT), not keys.T", _module(keys=".T")),
    ("the whole (context_length, context_length) mask is used: slice the mask to the number of tokens of x, "
     "self.mask[:T, :T] (inputs may be shorter than context_length)", _module(slice_mask=False)),
    ("T is taken from x.shape[0], the batch size: the number of tokens is x.shape[1], and the mask is cut to it, "
     "self.mask[:T, :T]", _module(tokens_from=0)),
    ("the result of masked_fill is not used: masked_fill returns a new tensor, so keep the result of masked_fill "
     "(attn_scores = attn_scores.masked_fill(...)) or use masked_fill_", _module(keep_fill=False)),
    ("the scores are divided by sqrt(d_in), the width of the input: divide them by sqrt(d_k), the width of the keys "
     "(keys.shape[-1], which is d_out)", _module(scale="d_in")),
    ("the scores are divided by sqrt(T), the number of tokens: divide them by sqrt(d_k), the width of the keys "
     "(keys.shape[-1])", _module(scale="T")),
    ("the scores are not divided by sqrt(d_k) (keys.shape[-1]) before the softmax", _module(scale="none")),
    ("the scores are divided by d_k itself: divide them by sqrt(d_k) (keys.shape[-1] ** 0.5)", _module(scale="d_k")),
    ("the softmax runs over the queries (dim=1 or dim=-2 of the (b, T, T) scores), so the columns sum to 1: run it "
     "over the keys, dim=-1", _module(softmax_dim=-2)),
    ("the softmax runs over the batch (dim=0): run it over the keys, dim=-1", _module(softmax_dim=0)),
    ("the mask blocks the diagonal too, which hides each token from itself (the first token then sees nothing): "
     "block only the entries ABOVE the diagonal, key j > query i", _module(mask_kind="future and diagonal")),
    ("the mask blocks the entries on and below the diagonal, the lower triangle torch.tril(ones) gives, which are "
     "those a query may look at: a tril mask marks what is allowed (fill where it is 0), while this step's mask is "
     "True ABOVE the diagonal, where blocked", _module(mask_kind="allowed")),
    ("the mask blocks the entries below the diagonal, the past: block those ABOVE the diagonal, key j > query i",
     _module(mask_kind="past")),
)


def keeps_input_check(what, function, x, *args, hint, input_hint, mistakes, atol=1e-5):
    """function(x, *args) compared with the reference, and x unchanged by the call."""
    p = Program()
    x_ref = p.tensor(x)
    p.record(p.call(G(function), x_ref, *args), "the result", hint, atol=atol, rtol=atol)
    p.record(x_ref, "its input after the call", input_hint, atol=0, rtol=0)
    return matched_records(Check(what, p, mistakes=mistakes))


# ---------------------------------------------------------------------------------------------------------------
# Parts 1 to 3: the mask, way 1, way 2
# ---------------------------------------------------------------------------------------------------------------

def causal_mask(inputs):
    p = Program()
    p.record(p.call(G("causal_mask"), 4), "the result", MASK_VALUES)
    checks = [Check("causal_mask(4)", p)]
    for num_tokens in (1, 2, 5, 9, inputs.randint(3, 17)):
        p = Program()
        p.record(p.call(G("causal_mask"), num_tokens), "the result", MASK_VALUES)
        checks.append(Check(f"causal_mask({num_tokens})", p))
    for check in checks:
        check.mistakes = MASK_MISTAKES
        matched_records(check)
    return checks


MASK_VALUES = ("none of the usual mistakes gives this mask: compare it entry by entry with the rule, a (T, T) bool "
               "tensor True exactly where the key index j is greater than the query index i")


RENORMALIZED_IN_PLACE = IN_PLACE_1
RENORMALIZED_VALUES = ("none of the usual mistakes gives these values: compare row by row with the task, row i keeping "
                       "its weights on keys 0 to i, each divided by the sum of the kept weights of row i")


def renormalized_causal_weights(inputs):
    uniform = torch.full((3, 3), 1 / 3)
    hint, mistakes = RENORMALIZED_VALUES, AFTER_PART_1 + RENORMALIZED_MISTAKES
    checks = [
        keeps_input_check("renormalized_causal_weights of a uniform (3, 3) row", "renormalized_causal_weights",
                          uniform, input_hint=RENORMALIZED_IN_PLACE, hint=hint, mistakes=mistakes),
        keeps_input_check("renormalized_causal_weights on a (2, 3, 3) batch", "renormalized_causal_weights",
                          torch.stack((uniform, uniform)), hint=hint, input_hint=RENORMALIZED_IN_PLACE,
                          mistakes=mistakes),
    ]
    for shape in [(5, 5), (1, 1), (2, 4, 4), (3, 2, 6, 6), (1, 7, 7), (4, 3, 3)]:
        weights = torch.softmax(inputs.randn(*shape, scale=2.0), dim=-1)
        checks.append(keeps_input_check(
            f"renormalized_causal_weights on random {shape} weights", "renormalized_causal_weights", weights,
            input_hint=RENORMALIZED_IN_PLACE, hint=hint, mistakes=mistakes))
    return checks


WAY_2_IN_PLACE = IN_PLACE_2
WEIGHTS_VALUES = ("none of the usual mistakes gives these values: compare row by row with the task, row i a softmax "
                  "of its scores on keys 0 to i divided by sqrt(d_k), 0 on the later keys")


def causal_attention_weights(inputs):
    scores = torch.tensor([[0.0, 50.0, 50.0], [0.0, 0.0, 50.0], [1.0, 2.0, 3.0]])
    hint, mistakes = WEIGHTS_VALUES, AFTER_PART_1 + WEIGHTS_MISTAKES
    checks = [
        keeps_input_check("causal_attention_weights(attn_scores, d_k=4) on the (3, 3) scores of the example",
                          "causal_attention_weights", scores, 4, input_hint=WAY_2_IN_PLACE, hint=hint,
                          mistakes=mistakes),
        keeps_input_check("causal_attention_weights on a (2, 3, 3) batch with d_k=4", "causal_attention_weights",
                          torch.stack((scores, scores)), 4, input_hint=WAY_2_IN_PLACE, hint=hint, mistakes=mistakes),
    ]
    for shape, d_k in [((5, 5), 3), ((1, 1), 2), ((2, 4, 4), 16), ((3, 2, 6, 6), 7), ((1, 8, 8), 1),
                       ((2, 5, 5), inputs.randint(2, 40))]:
        checks.append(keeps_input_check(
            f"causal_attention_weights on random {shape} scores with d_k={d_k}", "causal_attention_weights",
            inputs.randn(*shape, scale=3.0), d_k, input_hint=WAY_2_IN_PLACE, hint=hint, mistakes=mistakes))
    p = Program()
    call = p.call(G("causal_attention_weights"), p.tensor(inputs.randn(2, 5, 5)), 4, trace=0)
    return checks + [own_attention_check("causal_attention_weights on random (2, 5, 5) scores with d_k=4, watched "
                                         "operation by operation", p, call, OWN_MASKING)]


OWN_MASKING = ("this exercise asks you to block the future yourself (the mask, -inf, softmax); "
               "torch.nn.functional.scaled_dot_product_attention with is_causal=True does it for you (step 08 uses "
               "it)")


AGREE = ("both must give the same weights, and none of the usual mistakes gives these values: compare the two ways "
         "row by row on the example, and each with its own task")


WAY_HINTS = ("the two ways agree, but both are wrong alike: compare way 1 with its task (the weights on keys 0 to i, "
             "each divided by their sum)", "the two ways agree, but both are wrong alike: compare way 2 with its task "
             "(a softmax of the scores on keys 0 to i divided by sqrt(d_k), 0 on the later keys)")
AGREE_MISTAKES = tuple((f"both must give the same weights: {hint}", changes) for hint, changes in
                       AFTER_PART_1 + RENORMALIZED_MISTAKES + WEIGHTS_MISTAKES)


def agree_check(what, scores, d_k):
    """The student's way 1 on softmax(scores / sqrt(d_k)) must equal the student's way 2 on scores, way 2's rows must
    sum to 1, and each way must give the reference's weights (two ways wrong in the same way agree too)."""
    p = Program()
    p.record(p.call(G("renormalized_causal_weights"), p.tensor(torch.softmax(scores / d_k ** 0.5, dim=-1))), "way 1")
    p.record(p.call(G("causal_attention_weights"), p.tensor(scores), d_k), "way 2")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(f"{what}: way {found[0] + 1}", found[1], AGREE)
        for index in (0, 1):
            problem = shape_problem(got[index], want[index], f"{what}: way {index + 1}", AGREE)
            if problem:
                return problem
        way_1, way_2 = tensor_of(got[0]), tensor_of(got[1])
        for index, way in enumerate((way_1, way_2)):
            if not bool(torch.isfinite(way).all()):
                return with_hint(f"{what}: way {index + 1} contains nan or inf", AGREE)
        if not torch.allclose(way_1, way_2, atol=1e-5, rtol=1e-5):
            largest = (way_1 - way_2).abs().max().item()
            return with_hint(f"{what}: way 1 and way 2 differ (largest difference {largest:.3g})", AGREE)
        if not torch.allclose(way_2.sum(dim=-1), torch.ones(way_2.shape[:-1], dtype=way_2.dtype), atol=1e-4):
            return with_hint(f"{what}: the rows of way 2 do not sum to 1", "every row of the weights must sum to 1")
        for index, hint in enumerate(WAY_HINTS):  # two ways wrong alike (no mask at all) agree: each against the key
            problem = compare(got[index], want[index], f"{what}: way {index + 1}", Expect("", atol=1e-5, rtol=1e-5))
            if problem:
                return with_hint(problem, hint)
        return None

    return matched_records(Check(what, p, judge=judge, mistakes=AGREE_MISTAKES))


def two_ways_agree(inputs):
    scores = 3 * torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(0))
    checks = [agree_check("way 1 against way 2 on the (2, 5, 5) scores of the example with d_k=2", scores, 2)]
    for shape, d_k in [((4, 4), 5), ((3, 6, 6), 2), ((2, 2, 3, 3), 9), ((1, 7, 7), inputs.randint(1, 30))]:
        checks.append(agree_check(f"way 1 against way 2 on random {shape} scores with d_k={d_k}",
                                  inputs.randn(*shape, scale=4.0), d_k))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 4: CausalSelfAttention
# ---------------------------------------------------------------------------------------------------------------

CSA_HINTS = dict(
    parameters_hint="create self.W_query, self.W_key and self.W_value with nn.Linear(d_in, d_out, bias=qkv_bias)",
    runs_hint="none of the usual mistakes raises this: compare the sizes the message names with where the line above "
              "says they come from; every size in forward must come from x and the module's attributes, not a "
              "notebook variable, and the mask is built for context_length tokens and cut to the T of x, "
              "self.mask[:T, :T]",
    value_hint="none of the usual mistakes gives these values: compare each step with the task on a small input "
               "(scores, the future set to -inf, the scale, a softmax over the keys, @ values); every number must "
               "come from x and the module's attributes",
    again_hint="forward must give the same output for the same input",
    causal_hint="earlier tokens see later ones, and none of the usual mistakes gives these values: the masked scores "
                "must be what goes into the softmax, True in the mask where key j > query i")


def qkv_state(inputs, d_in, d_out, bias):
    state = {}
    for name in LAYERS:
        state.update(linear_state(inputs, name, d_in, d_out, bias))
    return state


def layers_only(records):
    """The records with the parameters record narrowed to the three projections: a mask kept as a parameter costs
    the points of the buffer cell, not of this one."""
    first = records[0] if records else None
    if not isinstance(first, dict) or not isinstance(first.get("parameters"), list):
        return records
    kept = [entry for entry in first["parameters"] if str(entry[0]).split(".")[0] in LAYERS]
    return [{"parameters": kept}] + list(records[1:])


def module_check(what, args, state, x, **kwargs):
    check = forward_check(what, "CausalSelfAttention", args, state, x, **kwargs, **CSA_HINTS)
    judge = check.judge
    check.judge = lambda got, want: judge(layers_only(got), want)
    check.mistakes = MODULE_MISTAKES
    return matched_records(check)


def layers_check(what, args, kwargs=None):
    """W_query, W_key and W_value of CausalSelfAttention(*args) are nn.Linear modules."""
    p = Program()
    module = p.call(G("CausalSelfAttention"), *args, **(kwargs or {}))
    for name in LAYERS:
        p.record(module.attr(name).attr("__class__").attr("__name__"), f"module.{name}")
    hint = CSA_HINTS["parameters_hint"]

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], hint)
        for name, g, w in zip(LAYERS, got, want):
            if g != w:
                return with_hint(f"{what}: module.{name} should be an nn.{w['str']}, got a {str(g.get('str'))[:60]}",
                                 hint)
        return None

    return Check(what, p, judge=judge)


def causal_self_attention(inputs):
    changed = BATCH.clone()
    changed[:, 5] += 1.0
    state = qkv_state(inputs, 3, 2, False)
    built = "CausalSelfAttention(3, 2, context_length=6)"
    checks = [
        layers_check(built, (3, 2), {"context_length": 6}),
        module_check(f"{built} on the (2, 6, 3) batch", (3, 2, 6), state, BATCH, cut=5, changed=changed),
        module_check(f"{built} on the first 4 tokens of the batch, (2, 4, 3)", (3, 2, 6), state,
                     BATCH[:, :4].contiguous()),
    ]
    # no d_in or T of 2, the notebook's d_k: a forward that reads it is not told it divides by sqrt(d_in) or sqrt(T)
    for b, t, d_in, d_out, context, bias in [(2, 5, 4, 3, 7, False), (1, 1, 3, 2, 4, True), (3, 6, 5, 4, 6, True),
                                             (2, 3, 4, 5, 9, False), (4, 7, 3, 6, 8, True)]:
        built = f"CausalSelfAttention({d_in}, {d_out}, {context}, qkv_bias={bias})"
        x = inputs.randn(b, t, d_in)
        cut = t // 2 if t > 1 else None
        checks.append(layers_check(built, (d_in, d_out, context), {"qkv_bias": bias}))
        checks.append(module_check(f"{built} on a random ({b}, {t}, {d_in}) input", (d_in, d_out, context),
                                   qkv_state(inputs, d_in, d_out, bias), x, kwargs={"qkv_bias": bias}, cut=cut,
                                   changed=with_later_tokens_changed(inputs, x, cut) if cut else None))
    p = Program()
    module = p.call(G("CausalSelfAttention"), 4, 3, 8)
    p.load(module, qkv_state(inputs, 4, 3, False))
    call = p.call(module, p.tensor(inputs.randn(2, 6, 4)), trace=0)
    return checks + [own_attention_check("CausalSelfAttention(4, 3, 8) on a random (2, 6, 4) input, watched operation "
                                         "by operation", p, call, OWN_MASKING)]


def buffer_check(what, args, kwargs=None):
    """CausalSelfAttention(*args) keeps a (context_length, context_length) buffer named mask, and no parameters
    besides the three projections."""
    context = args[2] if len(args) > 2 else kwargs["context_length"]
    p = Program()
    module = p.call(G("CausalSelfAttention"), *args, **(kwargs or {}))
    p.record(module, "its buffers", kind="buffers")
    p.record(module, "its parameters", kind="parameters")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], REGISTER)
        shapes = {str(entry[0]): list(entry[1]) for entry in got[0]["buffers"]}
        if "mask" not in shapes:
            return with_hint(f"{what} has no buffer named `mask` (buffers: {sorted(shapes)[:8]})", REGISTER)
        if shapes["mask"] != [context, context]:
            return with_hint(f"{what}: the mask buffer has shape {tuple(shapes['mask'])}, expected "
                             f"({context}, {context})",
                             "build the mask once for context_length tokens; slice it in forward, not in __init__")
        extra = [str(entry[0]) for entry in got[1]["parameters"] if str(entry[0]).split(".")[0] not in LAYERS]
        if extra:
            return with_hint(f"{what} has parameters besides the three projections: {', '.join(extra[:6])}",
                             "the mask is fixed, not learned: register it as a buffer, not as an nn.Parameter")
        return None

    return Check(what, p, judge=judge)


def causal_self_attention_mask_buffer(inputs):
    checks = [buffer_check("CausalSelfAttention(3, 2, context_length=6)", (3, 2), {"context_length": 6})]
    for context, d_in, d_out, bias in [(4, 3, 5, False), (9, 2, 2, True), (1, 4, 3, False),
                                       (inputs.randint(2, 12), 3, 4, True)]:
        checks.append(buffer_check(f"CausalSelfAttention({d_in}, {d_out}, {context}, qkv_bias={bias})",
                                   (d_in, d_out, context), {"qkv_bias": bias}))
    return checks


def too_long_check(what, args, x):
    p = Program()
    module = p.call(G("CausalSelfAttention"), *args)
    p.call(module, p.tensor(x))
    return expect_value_error(what, p, "context_length")


def causal_self_attention_too_long(inputs):
    checks = [too_long_check("CausalSelfAttention(3, 2, context_length=4) on the (2, 6, 3) batch", (3, 2, 4), BATCH)]
    for context, b, t, d_in in [(1, 1, 2, 3), (5, 3, 9, 2), (7, 2, 8, 4), (6, 2, 7, 3)]:
        checks.append(too_long_check(f"CausalSelfAttention({d_in}, 3, {context}) on a random ({b}, {t}, {d_in}) "
                                     "input", (d_in, 3, context), inputs.randn(b, t, d_in)))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Parts 5 and 6 (transfer): packed documents, a sliding window
# ---------------------------------------------------------------------------------------------------------------

INVERTED = ("True means blocked (this step's convention); a mask that is True where the query may look is the "
            "opposite")


def mask_judge(what, expected_of, mistakes, shape_hint, rule, input_kept=False):
    """A judge for a bool mask: its shape, dtype and entries against the reference, the likely mistake found by
    comparing the student's entries with each wrong mask of `mistakes` ((mask, hint) pairs, built here)."""

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], shape_hint if "size" in str(found[1].get("message", "")) else "")
        if "tensor" not in got[0] or got[0]["tensor"]["shape"] != want[0]["tensor"]["shape"]:
            return with_hint(compare(got[0], want[0], what, ANY_VALUES) or f"{what} has the wrong shape", shape_hint)
        if got[0]["tensor"]["dtype"] != "bool":
            return with_hint(f"{what} should be a bool tensor (True = blocked), got dtype "
                             f"{str(got[0]['tensor']['dtype'])[:20]}", "build the mask from comparisons, which give "
                                                                       "bool tensors, and combine them with | or &")
        actual, expected = tensor_of(got[0]).bool(), expected_of()
        if not torch.equal(actual, expected):
            problem = f"{what} has the wrong entries ({int((actual != expected).sum())} differ)"
            for wrong, hint in [(~expected, INVERTED)] + mistakes:
                if torch.equal(actual, wrong.expand_as(actual)):
                    return NamedMistake(with_hint(problem, hint))
            return with_hint(problem, f"none of the usual mistakes gives this mask: {rule}")
        if input_kept:
            return with_hint(compare(got[1], want[1], f"{what}: document_ids after the call", EXACT),
                             "it changed document_ids: use out-of-place operations")
        return None

    return judge


PACKED_FRONT = ("the two copies of the ids get their new axes at the front (dims 0 and 1), which compares along the "
                "first dimension and fits a single row only: compare the ids along the last dimension only, "
                "document_ids.unsqueeze(-1) != document_ids.unsqueeze(-2), so that leading batch dimensions are kept")


def _packed_front(document_ids):
    if not isinstance(document_ids, torch.Tensor) or document_ids.dim() == 0 or document_ids.is_floating_point():
        raise ValueError("document_ids must be an integer tensor of shape (..., T)")
    return (document_ids[:, None] != document_ids[None, :]) | later_keys(document_ids.shape[-1])


def packed_check(ids):
    what = f"packed_causal_mask on document_ids of shape {tuple(ids.shape)}"
    p = Program()
    ids_ref = p.tensor(ids)
    p.record(p.call(G("packed_causal_mask"), ids_ref), "the mask")
    p.record(ids_ref, "document_ids after the call")
    later = later_keys(ids.shape[-1])
    other = ids.unsqueeze(-1) != ids.unsqueeze(-2)
    earlier = later.transpose(-2, -1)
    mistakes = [
        (other, "a token must not see the later tokens of its own document either: block the keys after the query "
                "as well as the other documents"),
        (later.expand_as(other), "the tokens of other documents must be blocked too: compare the document id of the "
                                 "query with that of the key"),
        (later & other, "a key is blocked when it comes after the query OR belongs to another document: the two "
                        "conditions are joined with & (and), which blocks only keys that are both; join them with | "
                        "(or)"),
        (earlier | other, "the future is the keys AFTER the query (key index j > query index i); this blocks the "
                          "past"),
        (later | ~other, "block the keys of OTHER documents (ids that differ), not those of the query's own"),
    ]
    judge = mask_judge(what, lambda: later | other, mistakes,
                       "the mask is (..., T, T): keep the leading dimensions of document_ids and compare the ids "
                       "along the last dimension only (one copy as a column, one as a row)",
                       "compare it entry by entry with the rule, True where key j > query i or the two ids differ",
                       input_kept=True)
    front = ((PACKED_FRONT, {"packed_causal_mask": _packed_front}),)
    return matched_records(Check(what, p, judge=judge, mistakes=front))


def random_documents(inputs, shape):
    """(..., T) ids of packed documents: consecutive runs of arbitrary labels, a new run with probability 1/3.
    A label never comes back later in its row: the task promises that a document's tokens are consecutive."""
    ids = torch.empty(shape, dtype=torch.long).view(-1, shape[-1])
    for row in ids:
        used = [inputs.randint(0, 50)]
        for t in range(shape[-1]):
            if t and inputs.randint(0, 3) == 0:
                used.append(next(label for label in itertools.count(inputs.randint(0, 100)) if label not in used))
            row[t] = used[-1]
    return ids.view(shape)


def packed_causal_mask(inputs):
    cases = [torch.tensor([0, 0, 1, 1, 1]), torch.tensor([[4, 4, 4, 4], [4, 4, 9, 9]]), torch.tensor([7]),
             torch.tensor([7, 7, 3, 3, 3, 8]), torch.tensor([0, 1, 2, 3]), torch.zeros(6, dtype=torch.long),
             torch.tensor([[1, 1, 2], [5, 6, 6]], dtype=torch.int32)]
    for shape in [(inputs.randint(5, 13),), (3, inputs.randint(4, 11)), (2, 2, inputs.randint(3, 9))]:
        cases.append(random_documents(inputs, shape))
    checks = [packed_check(ids) for ids in cases]
    for bad, described in [(torch.tensor([0.0, 0.0, 1.0]), "float ids"), (torch.tensor(3), "a 0-dimensional tensor"),
                           (torch.tensor([[1.0, 2.0]], dtype=torch.float64), "float64 ids")]:
        p = Program()
        p.call(G("packed_causal_mask"), p.tensor(bad))
        checks.append(expect_value_error(f"packed_causal_mask on {described}", p, "document_ids"))
    return checks


def window_check(num_tokens, window):
    what = f"sliding_window_causal_mask({num_tokens}, window={window})"
    p = Program()
    p.record(p.call(G("sliding_window_causal_mask"), num_tokens, window), "the mask")
    index = torch.arange(num_tokens)
    distance = index[:, None] - index[None, :]
    mistakes = [
        ((distance < 0) | (distance > window), f"off by one: the query itself counts as one of its {window} tokens, "
                                               f"so it sees keys i - window + 1 to i (block j <= i - window)"),
        ((distance < 0) | (distance >= window - 1), "off by one: each query sees exactly `window` keys, itself "
                                                    "included"),
        (distance.abs() >= window, "the window looks back only: block every key after the query too"),
        (distance < 0, "the window is ignored: also block the keys `window` or more positions back"),
        ((distance > 0) | (distance <= -window), "the future is the keys AFTER the query (j > i); this blocks the "
                                                 "past"),
    ]
    judge = mask_judge(what, lambda: (distance < 0) | (distance >= window), mistakes,
                       "one row per query and one column per key: (num_tokens, num_tokens)",
                       "compare it entry by entry with the rule, True where key j > query i or j <= i - window")
    return Check(what, p, judge=judge)


def sliding_window_causal_mask(inputs):
    cases = [(5, 2), (4, 10), (1, 1), (6, 1), (7, 3), (8, 8), (9, 4)]
    num_tokens = inputs.randint(5, 16)
    cases += [(num_tokens, inputs.randint(2, num_tokens)), (inputs.randint(2, 6), inputs.randint(6, 12))]
    checks = [window_check(t, w) for t, w in cases]
    for num_tokens, window in [(4, 0), (6, -2)]:
        p = Program()
        p.call(G("sliding_window_causal_mask"), num_tokens, window)
        checks.append(expect_value_error(f"sliding_window_causal_mask({num_tokens}, window={window})", p, "window"))
    return checks


def right_masks(largest):
    """Part 1's masks for every size up to `largest`: in the later parts a student's own causal_mask answers with
    these, so that a mistake of Part 1 costs Part 1's points only."""
    return "causal_mask", [((t,), torch.arange(t) > torch.arange(t)[:, None]) for t in range(1, largest + 1)]


STAND_INS = {"test_renormalized_causal_weights": functools.partial(right_masks, 40),
             "test_causal_attention_weights": functools.partial(right_masks, 40),
             "test_two_ways_agree": functools.partial(right_masks, 40),
             "test_causal_self_attention": functools.partial(right_masks, 16),
             "test_causal_self_attention_mask_buffer": functools.partial(right_masks, 16),
             "test_causal_self_attention_too_long": functools.partial(right_masks, 16),
             "test_packed_causal_mask": functools.partial(right_masks, 16),
             "test_sliding_window_causal_mask": functools.partial(right_masks, 16)}

# Parts 5 and 6 ask for masks the lesson does not build, from their rule alone.
TRANSFER = {"test_packed_causal_mask", "test_sliding_window_causal_mask"}

CELLS = {
    "test_causal_mask": causal_mask,
    "test_renormalized_causal_weights": renormalized_causal_weights,
    "test_causal_attention_weights": causal_attention_weights,
    "test_two_ways_agree": two_ways_agree,
    "test_causal_self_attention": causal_self_attention,
    "test_causal_self_attention_mask_buffer": causal_self_attention_mask_buffer,
    "test_causal_self_attention_too_long": causal_self_attention_too_long,
    "test_packed_causal_mask": packed_causal_mask,
    "test_sliding_window_causal_mask": sliding_window_causal_mask,
}
