"""Judges of step 07: multi-head attention with weight splits (the module checks they use live in common.py).

Known mistakes are named by running them: the answer key with its split_heads, merge_heads or MultiHeadAttention
replaced by a mistaken one written here (MODULE_MISTAKES, shared with step 08); a check names one only when the
student's records are what it computes.
"""
import functools
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_course import data
from attention_grader.judging import G, Check, NamedMistake, Program, call_check, expect_value_error
from attention_grader.judges.common import (CLASS, attention_state, built_like_check, dropout_check, first_raised,
                                            forward_check, linear_state, mask_buffer_check, matched_records,
                                            returns_check, with_later_tokens_changed)

BATCH = torch.stack((data.journey_in_pairs(), data.journey_in_pairs()))  # (2, 3, 6)

SPLIT_HINT = ("none of the usual mistakes gives these values: head h must hold columns h*head_dim:(h+1)*head_dim of "
              "every token, the heads in front of the tokens")
MERGE_HINT = ("none of the usual mistakes gives these values: head h must go to columns h*head_dim:(h+1)*head_dim of "
              "every token, and each row must hold one token")
MHA_PARAMETERS = ("one nn.Linear(d_in, d_out, bias=qkv_bias) each for W_query, W_key and W_value, shared by all "
                  "heads, and out_proj = nn.Linear(d_out, d_out) with a bias")
MHA_RUNS = ("none of the usual mistakes raises this: print the shape of each tensor after each step, and compare "
            "the sizes the message names with those the line above says they come from")
MHA_VALUES = ("none of the usual mistakes gives these values: compare each step with the task (project, split into "
              "heads, scores, mask, scale, softmax over the keys, dropout, weighted sum, merge, out_proj) on a small "
              "input, printing shapes and a few numbers")
MHA_CAUSAL = ("earlier tokens see a later one, and none of the usual mistakes gives these values: the masked scores "
              "must be what goes into the softmax, and no step may mix numbers of different tokens")
MHA_EVAL = ("dropout still acts in eval mode: F.dropout(x, p) drops whatever the mode unless given "
            "training=self.training, and so does a mask made by hand; use self.dropout (an nn.Dropout module), "
            "which mha.eval() switches off")
STACK_HINT = ("head h's weights (and biases) go to rows h*head_dim:(h+1)*head_dim: stack them along dim 0 (the "
              "output rows) with torch.cat([...], dim=0)")
BIAS_HINT = ("pass qkv_bias=(the heads' layers have biases) to MultiHeadAttention, and stack the heads' biases like "
             "their weights, along dim 0")
IDENTITY_HINT = "out_proj must be the identity: weight torch.eye(d_out), bias zero"


# ---------------------------------------------------------------------------------------------------------------
# the usual mistakes of a multi-head attention module, run as variants of the answer key (steps 07 and 08)
# ---------------------------------------------------------------------------------------------------------------

def _cut_heads(x, num_heads, how="right"):
    """(b, T, d_out) -> (b, num_heads, T, head_dim), the right way or a usual wrong one."""
    b, num_tokens, d_out = x.shape
    if how == "heads_first":
        return x.reshape(b, num_heads, num_tokens, d_out // num_heads)
    if how == "interleaved":
        return x.reshape(b, num_tokens, d_out // num_heads, num_heads).permute(0, 3, 1, 2)
    if how == "not_moved":
        return x.reshape(b, num_tokens, num_heads, d_out // num_heads)
    return x.reshape(b, num_tokens, num_heads, d_out // num_heads).transpose(1, 2)


def _glue_heads(x, how="right"):
    """(b, num_heads, T, head_dim) -> (b, T, num_heads * head_dim), the right way or a usual wrong one."""
    b, num_heads, num_tokens, head_dim = x.shape
    if how == "not_moved":
        return x.reshape(b, num_tokens, num_heads * head_dim)
    if how == "along_tokens":
        return torch.cat(x.unbind(1), dim=1)
    if how == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(b, num_tokens, num_heads * head_dim)
    return x.transpose(1, 2).reshape(b, num_tokens, num_heads * head_dim)


def _checked_split(how):
    def split_heads(x, num_heads):
        if num_heads < 1 or x.shape[-1] % num_heads:
            raise ValueError(f"num_heads={num_heads}")
        return _cut_heads(x, num_heads, how)
    return split_heads


SPLIT_HEADS_FIRST = ("the heads are cut (in split_heads or in forward) by viewing (b, T, d_out) straight as (b, "
                     "num_heads, T, head_dim), which puts numbers of other tokens into a head: view as (b, T, "
                     "num_heads, head_dim), then transpose(1, 2)")
SPLIT_INTERLEAVED = ("head h gets every num_heads-th column (in split_heads or in forward): the last dimension is cut "
                     "as (head_dim, num_heads), interleaved; cut it as (num_heads, head_dim), so that head h holds "
                     "columns h*head_dim:(h+1)*head_dim")
SPLIT_NOT_MOVED = ("the last dimension is cut into heads (in split_heads or in forward), but the heads are not moved "
                   "in front of the tokens: after view(b, T, num_heads, head_dim), transpose(1, 2)")
MERGE_NOT_MOVED = ("the heads are flattened (in merge_heads or in forward) straight from (b, num_heads, T, head_dim) "
                   "to (b, T, d_out), without transpose(1, 2) first, which puts numbers of other tokens into a row")
MERGE_ALONG_TOKENS = ("the heads are concatenated (in merge_heads or in forward) along the tokens (dim 1 or -2): put "
                      "them side by side along the last dimension (transpose(1, 2), then reshape to (b, T, d_out))")
MERGE_INTERLEAVED = ("the heads' columns are interleaved (in merge_heads or in forward): head_dim is flattened before "
                     "num_heads; transpose(1, 2), then flatten (num_heads, head_dim), so that head h lands in columns "
                     "h*head_dim:(h+1)*head_dim")

SPLIT_MISTAKES = tuple((hint, {"split_heads": _checked_split(how)}) for hint, how in (
    (SPLIT_HEADS_FIRST, "heads_first"), (SPLIT_INTERLEAVED, "interleaved"), (SPLIT_NOT_MOVED, "not_moved")))
MERGE_MISTAKES = tuple((hint, {"merge_heads": functools.partial(_glue_heads, how=how)}) for hint, how in (
    (MERGE_NOT_MOVED, "not_moved"), (MERGE_ALONG_TOKENS, "along_tokens"), (MERGE_INTERLEAVED, "interleaved")))


class MistakenAttention(nn.Module):
    """Causal multi-head attention as the contract of steps 07 and 08 has it (separate W_query, W_key, W_value, or
    one fused `qkv`; attention by hand or through SDPA), with the usual mistake its class attributes name put in."""
    fused = False  # one qkv layer (step 08, Part 1)
    qkv_order = "qkv"  # "kqv": keys first; "per_head": cut as (num_heads, 3, head_dim); "batch": chunks of dim 0
    bias = None  # None: bias=qkv_bias; True or False: always
    head_dim_of = "d_out"
    split = "right"
    merge = "right"
    scale = "head_dim"  # "d_out", "d_in", "none"; with sdpa: "twice" scales the queries too
    keys = "transpose"  # ".T": keys.T, all dimensions reversed
    slice_mask = True
    keep_fill = True
    softmax_dim = -1
    apply_out_proj = True
    sdpa = None  # None: by hand; "causal", "none" (no mask), "blocked" (step 04's mask as attn_mask)

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        nn.Module.__init__(self)
        if num_heads < 1 or d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.d_in, self.d_out, self.num_heads, self.context_length = d_in, d_out, num_heads, context_length
        self.head_dim = (d_in if self.head_dim_of == "d_in" else d_out) // num_heads
        bias = qkv_bias if self.bias is None else self.bias
        if self.fused:
            self.qkv = nn.Linear(d_in, 3 * d_out, bias=bias)
        else:
            self.W_query, self.W_key, self.W_value = (nn.Linear(d_in, d_out, bias=bias) for _ in range(3))
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))
        self.dropout = nn.Dropout(dropout)

    def heads(self, x):
        b, num_tokens, _ = x.shape
        if not self.fused:
            parts = [layer(x) for layer in (self.W_query, self.W_key, self.W_value)]
        elif self.qkv_order == "per_head":
            qkv = self.qkv(x).view(b, num_tokens, self.num_heads, 3, self.head_dim)
            return list(qkv.permute(3, 0, 2, 1, 4).unbind(0))
        elif self.qkv_order == "batch":
            queries, keys, values = self.qkv(x).chunk(3, dim=0)
            parts = [queries, keys, values]
        else:
            parts = self.qkv(x).split(self.d_out, dim=-1)
            if self.qkv_order == "kqv":
                parts = (parts[1], parts[0], parts[2])
        if self.split == "right":
            return [part.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2) for part in parts]
        return [_cut_heads(part, self.num_heads, self.split) for part in parts]

    def forward(self, x):
        num_tokens = x.shape[1]
        if num_tokens > self.context_length:
            raise ValueError(f"{num_tokens} tokens exceed context_length={self.context_length}")
        queries, keys, values = self.heads(x)
        scale = {"head_dim": self.head_dim, "d_out": self.d_out, "d_in": self.d_in}.get(self.scale, 1)
        if self.sdpa:
            if self.scale == "twice":
                queries = queries / self.head_dim ** 0.5
            mask = dict(causal={"is_causal": True}, none={},
                        blocked={"attn_mask": self.mask[:num_tokens, :num_tokens]})[self.sdpa]
            p = self.dropout.p if self.training else 0.0
            context = F.scaled_dot_product_attention(queries, keys, values, dropout_p=p, **mask)
        else:
            scores = queries @ (keys.permute(3, 2, 1, 0) if self.keys == ".T" else keys.transpose(-2, -1))
            mask = self.mask[:num_tokens, :num_tokens] if self.slice_mask else self.mask
            masked = scores.masked_fill(mask, float("-inf"))
            weights = torch.softmax((masked if self.keep_fill else scores) / scale ** 0.5, dim=self.softmax_dim)
            context = self.dropout(weights) @ values
        merged = _glue_heads(context, self.merge)
        return self.out_proj(merged) if self.apply_out_proj else merged


def mistaken(**changes):
    return type("MistakenAttention", (MistakenAttention,), changes)


# (hint, the mistake's class attributes): the usual mistakes of a multi-head module, by the part of it they touch
MODULE_MISTAKES = {
    "scale": [
        ("the scores are divided by sqrt(d_out), the width of all heads together: divide by sqrt(head_dim), the "
         "width of one head", dict(scale="d_out")),
        ("the scores are divided by sqrt(d_in), the width of the input: divide by sqrt(head_dim), the width of one "
         "head", dict(scale="d_in")),
        ("the scores are not divided by sqrt(head_dim) before the softmax", dict(scale="none")),
    ],
    "sizes": [
        ("head_dim is computed from d_in: it is d_out // num_heads, the width of one head of the output",
         dict(head_dim_of="d_in")),
    ],
    "mask": [
        ("the whole (context_length, context_length) mask is used: slice it to the number of tokens, "
         "self.mask[:T, :T] (inputs may be shorter than context_length)", dict(slice_mask=False)),
        ("the result of masked_fill is not kept: masked_fill returns a new tensor (attn_scores = "
         "attn_scores.masked_fill(...))", dict(keep_fill=False)),
    ],
    "scores": [
        ("keys.T reverses all four dimensions of (b, num_heads, T, head_dim): swap only the last two, "
         "keys.transpose(-2, -1) (or keys.mT)", dict(keys=".T")),
        ("the softmax runs over the queries (dim=-2): run it over the keys, dim=-1", dict(softmax_dim=-2)),
        ("the softmax runs over the heads (dim=1): run it over the keys, dim=-1", dict(softmax_dim=1)),
    ],
    "heads": [(hint, dict(split=how)) for hint, how in ((SPLIT_HEADS_FIRST, "heads_first"),
                                                      (SPLIT_INTERLEAVED, "interleaved"))]
             + [(hint, dict(merge=how)) for hint, how in ((MERGE_NOT_MOVED, "not_moved"),
                                                         (MERGE_INTERLEAVED, "interleaved"))],
    "out_proj": [
        ("out_proj is not applied: the merged heads go through self.out_proj before they are returned",
         dict(apply_out_proj=False)),
    ],
}


def module_mistakes(name, kinds, **base):
    """Check.mistakes for the module class `name`: each mistake of MODULE_MISTAKES[kind] on top of `base`."""
    return tuple((hint, {name: mistaken(**base, **changes)}) for kind in kinds
                 for hint, changes in MODULE_MISTAKES[kind])


# ---------------------------------------------------------------------------------------------------------------
# the test cells
# ---------------------------------------------------------------------------------------------------------------

def value_error_check(what, function, args, argument):
    p = Program()
    p.call(G(function), *[p.tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    return expect_value_error(what, p, argument)


def split_heads(inputs):
    x = torch.arange(2 * 3 * 6, dtype=torch.float32).reshape(2, 3, 6)
    checks = [call_check("split_heads(x, 2) for x = arange(36) of shape (2, 3, 6)", "split_heads", x, 2,
                         hint=SPLIT_HINT),
              value_error_check("split_heads on a (1, 2, 5) tensor with num_heads=2", "split_heads",
                                (torch.zeros(1, 2, 5), 2), "num_heads")]
    for b, t, d, h in [(3, 4, 15, 5), (1, 1, 3, 1), (2, 5, 12, 4), (4, 2, 6, 3), (2, 3, 7, 7)]:
        checks.append(call_check(f"split_heads on a random ({b}, {t}, {d}) tensor with num_heads={h}", "split_heads",
                                 inputs.randn(b, t, d), h, hint=SPLIT_HINT))
    checks[0].mistakes = SPLIT_MISTAKES
    for check in checks[2:]:
        check.mistakes = SPLIT_MISTAKES
    for shape, h in [((2, 3, 7), 2), ((1, 4, 10), 4), ((3, 1, 6), 4)]:
        checks.append(value_error_check(f"split_heads on a {shape} tensor with num_heads={h}", "split_heads",
                                        (torch.zeros(shape), h), "num_heads"))
    return checks


def merge_heads(inputs):
    heads = torch.randn(2, 2, 3, 4, generator=torch.Generator().manual_seed(0))
    checks = [call_check("merge_heads(heads) for heads of shape (2, 2, 3, 4)", "merge_heads", heads,
                         hint=MERGE_HINT)]
    for b, h, t, hd in [(3, 5, 4, 3), (1, 1, 1, 2), (2, 4, 5, 1), (4, 3, 2, 5), (2, 2, 6, 3)]:
        checks.append(call_check(f"merge_heads on a random ({b}, {h}, {t}, {hd}) tensor", "merge_heads",
                                 inputs.randn(b, h, t, hd), hint=MERGE_HINT))
    for check in checks:
        check.mistakes = MERGE_MISTAKES + MERGE_VIEW
        matched_records(check)
    return checks


def fixed_weights(d_in, d_out, seed=0, scale=0.5):
    """The weights of the notebook's load_fixed_weights(module, seed) for a module without qkv biases."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, fan_in in (("W_query", d_in), ("W_key", d_in), ("W_value", d_in), ("out_proj", d_out)):
        state[f"{name}.weight"] = scale * torch.randn(d_out, fan_in, generator=generator)
    state["out_proj.bias"] = scale * torch.randn(d_out, generator=generator)
    return state


def multi_head_attention(inputs):
    mha = "MultiHeadAttention"
    changed = BATCH.clone()
    changed[:, 2] += 1.0
    hints = dict(parameters_hint=MHA_PARAMETERS, runs_hint=MHA_RUNS, value_hint=MHA_VALUES, causal_hint=MHA_CAUSAL)
    checks = [
        mask_buffer_check("MultiHeadAttention(6, 6, 3, 0.0, num_heads=2)", mha, (6, 6, 3, 0.0, 2),
                          "self.register_buffer(\"mask\", torch.triu(...)) keeps the mask with the module "
                          "(state_dict, .to(device))"),
        forward_check("MultiHeadAttention(6, 6, 3, 0.0, num_heads=2) with the weights of load_fixed_weights(mha, "
                      "seed=0) on the (2, 3, 6) batch", mha, (6, 6, 3, 0.0, 2), fixed_weights(6, 6), BATCH, cut=2,
                      changed=changed, **hints),
    ]
    for b, t, context, d_in, d_out, heads, bias in [
            (2, 4, 6, 5, 6, 2, False), (1, 5, 5, 3, 15, 5, True), (3, 3, 7, 4, 3, 1, False),
            (2, 1, 4, 6, 10, 5, False), (4, 6, 8, 7, 12, 4, True), (1, 7, 9, 2, 9, 3, False)]:
        x = inputs.randn(b, t, d_in)
        cut = inputs.randint(1, t) if t > 1 else None
        checks.append(forward_check(
            f"MultiHeadAttention({d_in}, {d_out}, {context}, 0.0, num_heads={heads}, qkv_bias={bias}) on a random "
            f"({b}, {t}, {d_in}) input", mha, (d_in, d_out, context, 0.0, heads), attention_state(inputs, d_in, d_out,
                                                                                               bias),
            x, kwargs={"qkv_bias": bias}, cut=cut, changed=with_later_tokens_changed(inputs, x, cut) if cut else None,
            **hints))
    # Dropout: off in eval mode (deterministic, equal to the reference), on in training mode.
    state, x = attention_state(inputs, 5, 8, False), inputs.randn(3, 6, 5)
    checks.append(forward_check(
        "MultiHeadAttention(5, 8, 6, 0.5, num_heads=2) in eval mode on a random (3, 6, 5) input", mha,
        (5, 8, 6, 0.5, 2), state, x, parameters_hint=MHA_PARAMETERS, runs_hint=MHA_RUNS,
        value_hint="in eval mode dropout must do nothing: use nn.Dropout, not a hand-made mask",
        again_hint=MHA_EVAL))
    for check in checks[1:-1]:
        check.mistakes = MHA_MISTAKES
        matched_records(check)
    checks.append(dropout_check("MultiHeadAttention(5, 8, 6, 0.5, num_heads=2) on a random (3, 6, 5) input", mha,
                                (5, 8, 6, 0.5, 2), state, x, inputs.seed(),
                                "apply self.dropout to the attention weights"))
    return checks


MERGE_VIEW = (("the heads are merged (in merge_heads or in forward) with .view() after transpose(1, 2), which leaves "
               "the tensor non-contiguous: call .contiguous() before .view(), or use .reshape()",
               {"merge_heads": lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)}),)
# Part 3 runs the answer key's MultiHeadAttention with a mistaken split_heads or merge_heads (a student who wrote the
# split inline makes the same mistake in forward), or a mistaken MultiHeadAttention
MHA_MISTAKES = SPLIT_MISTAKES + MERGE_MISTAKES + MERGE_VIEW + module_mistakes(
    "MultiHeadAttention", ["scale", "sizes", "mask", "scores", "out_proj"])


def multi_head_attention_arguments(inputs):
    checks = [
        value_error_check("MultiHeadAttention(6, 5, 4, 0.0, num_heads=2)", "MultiHeadAttention", (6, 5, 4, 0.0, 2),
                          "d_out"),
    ]
    for d_in, d_out, context, heads in [(8, 10, 6, 4), (3, 9, 2, 2), (4, 7, 5, 3)]:
        checks.append(value_error_check(f"MultiHeadAttention({d_in}, {d_out}, {context}, 0.0, num_heads={heads})",
                                        "MultiHeadAttention", (d_in, d_out, context, 0.0, heads), "d_out"))
    # (d_in, d_out, context_length, num_heads, b): the visible example first
    for d_in, d_out, context, heads, b in [(6, 6, 4, 2, 1), (3, 4, 2, 2, 2), (5, 6, 1, 3, 1), (2, 8, 6, 4, 3)]:
        p = Program()
        module = p.call(G("MultiHeadAttention"), d_in, d_out, context, 0.0, heads)
        p.call(module, p.tensor(torch.zeros(b, context + 1, d_in)))
        checks.append(expect_value_error(f"a forward pass with {context + 1} tokens through MultiHeadAttention("
                                         f"{d_in}, {d_out}, {context}, 0.0, num_heads={heads})", p, "context_length"))
    return checks


def wrapper_to_split_checks(inputs, d_in, head_dim, context, heads, bias, dropout, seed=None):
    """The weights wrapper_to_split copies, and the sizes and dropout rate of the MultiHeadAttention it builds."""
    d_out = heads * head_dim
    what = (f"wrapper_to_split(MultiHeadAttentionWrapper({d_in}, {head_dim}, {context}, {dropout}, "
            f"num_heads={heads}, qkv_bias={bias}))")
    wrapper_state = {}
    for h in range(heads):
        for name in ("W_query", "W_key", "W_value"):
            wrapper_state.update(linear_state(inputs, f"heads.{h}.{name}", d_in, head_dim, bias))

    def build():
        p = Program()
        if seed is not None:
            p.seed(seed)
        wrapper = p.call(G("MultiHeadAttentionWrapper"), d_in, head_dim, context, dropout, num_heads=heads,
                         qkv_bias=bias)
        if seed is None:
            p.load(wrapper, wrapper_state)
        p.call(wrapper.attr("eval"))
        return p, wrapper, p.call(G("wrapper_to_split"), wrapper)

    p, wrapper, mha = build()
    p.record(mha.attr("__class__").attr("__name__"), CLASS, STACK_HINT)
    for name in ("W_query", "W_key", "W_value"):
        p.record(mha.attr(name).attr("weight"), f"mha.{name}.weight", STACK_HINT)
        p.record(mha.attr(name).attr("bias"), f"mha.{name}.bias", BIAS_HINT)
    p.record(mha.attr("out_proj").attr("weight"), "mha.out_proj.weight", IDENTITY_HINT)
    p.record(mha.attr("out_proj").attr("bias"), "mha.out_proj.bias", IDENTITY_HINT)
    p.record(wrapper, "the wrapper after the call", "copy the wrapper's weights, do not modify them", kind="state")
    checks = [side_by_side_named(returns_check(what, p), heads, d_in, head_dim)]

    p, wrapper, mha = build()
    checks.append(built_like_check(
        what, p, mha, "MultiHeadAttention", (d_in, d_out, context, dropout, heads, bias),
        attention_state(inputs, d_in, d_out, bias), inputs.randn(2, context, d_in), inputs.seed(),
        "build MultiHeadAttention(d_in, num_heads * head_dim, context_length, dropout, num_heads, qkv_bias) with the "
        "wrapper's sizes: the mask's size, dropout.p, and whether its layers have biases"))
    return checks


SIDE_BY_SIDE = ("the heads' (head_dim, d_in) weights are put side by side (dim=1), which makes a (head_dim, num_heads "
                "* d_in) tensor: nn.Linear keeps its weight as (out_features, in_features), so head h's weights go to "
                "rows h*head_dim:(h+1)*head_dim, torch.cat(..., dim=0)")


def side_by_side_named(check, heads, d_in, head_dim):
    """`check`, whose message names SIDE_BY_SIDE when wrapper_to_split raised on a size of num_heads * d_in: a tensor
    of that width meets the (d_out, d_in) weights only when the heads' weights were put side by side."""
    judge = check.judge

    def judged(got, want):
        problem, found = judge(got, want), first_raised(got)
        if problem and found and heads > 1 and heads * d_in not in (d_in, head_dim, heads * head_dim) and \
                str(heads * d_in) in re.findall(r"\d+", str(found[1]["message"])):
            return NamedMistake(problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {SIDE_BY_SIDE}")
        return problem

    check.judge = judged
    return check


def dtype_check(d_in, head_dim, context, heads):
    """A float64 wrapper gives a float64 module (the reference runs in float64, the student's kernel in float32 by
    default: the number of bytes per number tells them apart)."""
    p = Program()
    wrapper = p.call(p.call(G("MultiHeadAttentionWrapper"), d_in, head_dim, context, 0.0, num_heads=heads,
                            qkv_bias=True).attr("double"))
    mha = p.call(G("wrapper_to_split"), wrapper)
    for name in ("W_query", "out_proj"):
        p.record(p.call(mha.attr(name).attr("weight").attr("element_size")), f"bytes per number of mha.{name}.weight",
                 "build the MultiHeadAttention with the wrapper's dtype (and device), and give out_proj that dtype too")
    return Check(f"wrapper_to_split(MultiHeadAttentionWrapper({d_in}, {head_dim}, {context}, 0.0, num_heads={heads}, "
                 "qkv_bias=True).double())", p)


def wrapper_to_split(inputs):
    checks = wrapper_to_split_checks(inputs, 6, 3, 3, 2, False, 0.0, seed=123)
    checks.append(dtype_check(4, 2, 5, 3))
    for d_in, head_dim, context, heads, bias, dropout in [(5, 3, 6, 2, False, 0.0), (4, 1, 4, 5, True, 0.0),
                                                          (7, 4, 5, 1, False, 0.0), (3, 2, 8, 3, True, 0.0),
                                                          (6, 3, 5, 4, False, 0.3)]:
        checks += wrapper_to_split_checks(inputs, d_in, head_dim, context, heads, bias, dropout)
    return checks


FOLD_HINT = ("output block g of out_proj reads one head h through a head_dim x head_dim block B (not always h = g): "
             "wrapper head g gets head h's query and key rows, and B applied after the weighted sum, which is B on "
             "every value (W_value weight B @ rows, bias B @ bias); attention weights sum to 1, so out_proj's bias of "
             "block g can join that value bias")
REFUSE_HINT = ("no wrapper exists exactly when a block of head_dim output numbers of out_proj reads two heads or more, "
               "or out_proj has a bias and the layers have none (a head without biases outputs 0 for a 0 input): "
               "raise ValueError naming out_proj then, and only then")
ACCEPT_HINT = ("a wrapper exists here: each block of head_dim outputs of out_proj reads at most one head, maybe not its "
               "own, and a bias of out_proj can join the value bias when the layers have biases")
SIZES_HINT = ("build MultiHeadAttentionWrapper(d_in, d_out // num_heads, context_length, dropout, num_heads, qkv_bias) "
              "from mha's sizes: the mask's size, dropout.p, and whether W_query has a bias")


NO_REFUSAL = ("a wrapper head's outputs read only its own context numbers, and a head without biases outputs 0 for a 0 "
              "input: where an output block of out_proj reads two heads or more, or out_proj adds a bias the heads "
              "cannot, raise ValueError naming out_proj")


class _CausalAttention(nn.Module):
    """The notebook's CausalAttention (a locked cell), for the mistakes of Part 5."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        nn.Module.__init__(self)
        for name in ("W_query", "W_key", "W_value"):
            setattr(self, name, nn.Linear(d_in, d_out, bias=qkv_bias))
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

    def forward(self, x):
        num_tokens = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        attn_scores = (queries @ keys.transpose(-2, -1)).masked_fill(self.mask[:num_tokens, :num_tokens], -torch.inf)
        return self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)) @ values


class _Wrapper(nn.Module):
    """The notebook's MultiHeadAttentionWrapper (a locked cell), for the mistakes of Part 5."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        nn.Module.__init__(self)
        self.heads = nn.ModuleList([_CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                                    for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)


_Wrapper.__name__ = "MultiHeadAttentionWrapper"


def mistaken_split_to_wrapper(mha, num_heads, transposed=False, out_bias=True):
    """split_to_wrapper with out_proj's block applied transposed, or its bias left out (the answer key's arithmetic,
    written again here: a replacement cannot call the function it replaces)."""
    width, d_in = mha.W_query.weight.shape
    size = width // num_heads
    biased = mha.W_query.bias is not None
    out_weight, out_bias_all = mha.out_proj.weight.detach(), mha.out_proj.bias.detach()
    tiles = out_weight.reshape(num_heads, size, num_heads, size).transpose(1, 2)  # tiles[g, h]: head h -> block g
    reads = tiles.flatten(2).abs().amax(dim=-1) > 0
    if (reads.sum(dim=1) > 1).any() or not biased and (out_bias_all != 0).any():
        raise ValueError("out_proj")
    wrapper = _Wrapper(d_in, size, mha.mask.shape[0], mha.dropout.p, num_heads, biased).to(out_weight.dtype)
    layers = {name: getattr(mha, name) for name in ("W_query", "W_key", "W_value")}
    with torch.no_grad():
        for out_block, target in enumerate(wrapper.heads):
            source = int(reads[out_block].to(torch.int64).argmax())
            span = slice(source * size, (source + 1) * size)
            tile = tiles[out_block, source].T if transposed else tiles[out_block, source]
            extra = out_bias_all[out_block * size:(out_block + 1) * size] if out_bias else 0
            for name, layer in layers.items():
                weight = layer.weight[span] if name != "W_value" else tile @ layer.weight[span]
                getattr(target, name).weight.copy_(weight)
                if biased:
                    bias = layer.bias[span] if name != "W_value" else tile @ layer.bias[span] + extra
                    getattr(target, name).bias.copy_(bias)
    return wrapper


BACK_MISTAKES = (
    ("out_proj's block B is applied transposed: it acts after the weighted sum as B @ context, so the value layer "
     "gets B @ W_value rows (not B.T @ ...)", {"split_to_wrapper": functools.partial(mistaken_split_to_wrapper,
                                                                                 transposed=True)}),
    ("out_proj's bias is left out: attention weights sum to 1, so a number added to every value of a head is added "
     "to its output; add out_proj's bias of block g to that head's value bias",
     {"split_to_wrapper": functools.partial(mistaken_split_to_wrapper, out_bias=False)}),
)


def routed_out_proj(inputs, d_out, heads, sources):
    """An out_proj weight whose output block g reads only head sources[g] (None: no head) through a random block."""
    head_dim = d_out // heads
    weight = torch.zeros(d_out, d_out)
    for g, h in enumerate(sources):
        if h is not None:
            weight[g * head_dim:(g + 1) * head_dim, h * head_dim:(h + 1) * head_dim] = inputs.randn(head_dim, head_dim,
                                                                                                    scale=0.5)
    return weight


def stand_in_mha(p, d_in, d_out, context, dropout, bias, state):
    """A module with MultiHeadAttention's contract attributes (W_query, W_key, W_value, out_proj, mask, dropout)
    built in the kernel from torch.nn alone, so that Part 5 is judged without the student's Part 3."""
    nn_ = G("nn")
    layers = [[name, p.call(nn_.attr("Linear"), d_in, d_out, bias=bias)] for name in ("W_query", "W_key", "W_value")]
    layers += [["out_proj", p.call(nn_.attr("Linear"), d_out, d_out)], ["dropout", p.call(nn_.attr("Dropout"), dropout)]]
    mha = p.call(nn_.attr("ModuleDict"), [tuple(pair) for pair in layers])
    p.call(mha.attr("register_buffer"), "mask",
           p.tensor(torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)))
    p.load(mha, state)
    p.call(mha.attr("eval"))
    return mha


def split_to_wrapper_checks(inputs, d_in, d_out, context, heads, bias, dropout, sources, out_bias):
    routes = ", ".join(f"{g}<-{'none' if h is None else h}" for g, h in enumerate(sources))
    what = (f"split_to_wrapper(mha, {heads}) for a module with MultiHeadAttention's attributes ({d_in} -> {d_out}, "
            f"context_length={context}, dropout={dropout}, qkv_bias={bias}) whose out_proj's output blocks read the "
            f"heads {routes}" + (", with a bias" if out_bias else ", without a bias"))
    state = attention_state(inputs, d_in, d_out, bias)
    state["out_proj.weight"] = routed_out_proj(inputs, d_out, heads, sources)
    state["out_proj.bias"] = inputs.randn(d_out, scale=0.5) if out_bias else torch.zeros(d_out)
    p = Program()
    mha = stand_in_mha(p, d_in, d_out, context, dropout, bias, state)
    wrapper = p.call(G("split_to_wrapper"), mha, heads)
    p.record(wrapper.attr("__class__").attr("__name__"), CLASS, "return a MultiHeadAttentionWrapper (the class given "
             "above), built with your sizes")
    p.call(wrapper.attr("eval"))
    t = inputs.randint(1, context + 1)
    p.record(p.call(wrapper, p.tensor(inputs.randn(2, t, d_in))), f"the wrapper's output on a random (2, {t}, {d_in}) "
             "input, against the module's", FOLD_HINT)
    p.record(p.call(wrapper.attr("heads").attr("__len__")), "the number of heads", SIZES_HINT)
    p.record(wrapper.attr("heads")[0].attr("mask").attr("shape"), "the shape of a head's mask", SIZES_HINT)
    p.record(wrapper.attr("heads")[0].attr("dropout").attr("p"), "a head's dropout probability", SIZES_HINT)
    p.record(wrapper.attr("heads")[heads - 1].attr("W_key").attr("bias"), "the last head's W_key.bias", SIZES_HINT)
    p.record(mha, "the module after the call", "read mha's weights, do not write to them", kind="state")
    check = with_raised_hint(returns_check(what, p), ACCEPT_HINT)
    check.mistakes = BACK_MISTAKES
    checks = [check]

    refusals = []
    if heads > 1:  # one head: any out_proj is one block
        head_dim = d_out // heads
        two_heads = routed_out_proj(inputs, d_out, heads, range(heads))
        two_heads[:head_dim, head_dim:2 * head_dim] = inputs.randn(head_dim, head_dim, scale=0.5)
        refusals += [("out_proj's first output block reads heads 0 and 1", two_heads, torch.zeros(d_out)),
                     ("out_proj mixes the heads", inputs.randn(d_out, d_out, scale=0.5), torch.zeros(d_out))]
    if not bias:
        refusals.append(("the layers have no biases and out_proj has one", routed_out_proj(inputs, d_out, heads, sources),
                         inputs.randn(d_out, scale=0.5)))
    for reason, weight, refused_bias in refusals:
        refused = dict(state, **{"out_proj.weight": weight, "out_proj.bias": refused_bias})
        p = Program()
        p.call(G("split_to_wrapper"), stand_in_mha(p, d_in, d_out, context, dropout, bias, refused), heads)
        checks.append(with_expect_hint(expect_value_error(
            f"split_to_wrapper(mha, {heads}) for a module ({d_in} -> {d_out}) where {reason}", p, "out_proj"),
            REFUSE_HINT, reason))
    return checks


def with_raised_hint(check, hint):
    """The check's message, with `hint` as the likely mistake where the student's function raised."""
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        if problem and first_raised(got):
            return problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {hint}"
        return problem

    check.judge = judged
    return check


def with_expect_hint(check, hint, reason=None):
    """`check` with `hint` as its likely mistake; where the function returned although `reason` leaves no wrapper,
    a message that names what it did."""
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        if problem and reason and got and "raised" not in got[-1]:
            return NamedMistake(f"{check.what}: it returned a wrapper, but {reason}, and no wrapper computes that"
                                f"\n  likely mistake: {NO_REFUSAL}")
        return problem and problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {hint}"

    check.judge = judged
    return check


def split_to_wrapper(inputs):
    checks = []
    # (d_in, d_out, context_length, num_heads, qkv_bias, dropout, the head each output block reads, out_proj's bias)
    for d_in, d_out, context, heads, bias, dropout, sources, out_bias in [
            (6, 6, 3, 2, True, 0.0, [0, 1], False), (5, 12, 6, 3, False, 0.0, [0, 1, 2], False),
            (6, 6, 4, 2, True, 0.0, [1, 0], True), (4, 8, 5, 4, True, 0.25, [3, 3, None, 0], True),
            (3, 5, 4, 1, False, 0.0, [0], False), (7, 10, 7, 5, True, 0.1, [0, 1, 2, 3, 4], True),
            (4, 6, 5, 3, False, 0.0, [2, 0, 0], False)]:
        checks += split_to_wrapper_checks(inputs, d_in, d_out, context, heads, bias, dropout, sources, out_bias)
    for d_out, heads in [(6, 4), (10, 3)]:
        p = Program()
        state = attention_state(inputs, 4, d_out, False)
        p.call(G("split_to_wrapper"), stand_in_mha(p, 4, d_out, 5, 0.0, False, state), heads)
        checks.append(expect_value_error(f"split_to_wrapper(mha, {heads}) for d_out={d_out}", p, "num_heads"))
    return checks


def _count(total):
    return lambda: total


WIDTH, CONTEXT = 768, 1024
# the usual miscounts, as what they return
COUNT_MISTAKES = (
    ("the query, key and value projections are counted without biases: GPT-2's have one (qkv_bias=True)",
     {"gpt2_small_attention_params": _count(4 * WIDTH * WIDTH + WIDTH)}),
    ("no bias is counted: every one of the four layers has a bias of 768", {"gpt2_small_attention_params":
                                                                           _count(4 * WIDTH * WIDTH)}),
    ("out_proj is counted without its bias", {"gpt2_small_attention_params": _count(4 * WIDTH * WIDTH + 3 * WIDTH)}),
    ("the (1024, 1024) causal mask is counted: it is a buffer, not a parameter (sum over parameters(), not "
     "state_dict())", {"gpt2_small_attention_params": _count(4 * (WIDTH * WIDTH + WIDTH) + CONTEXT * CONTEXT)}),
    ("out_proj is not counted: the layer has four projections, query, key, value and out_proj",
     {"gpt2_small_attention_params": _count(3 * (WIDTH * WIDTH + WIDTH))}),
)


def gpt2_small_attention_params(inputs):
    check = call_check("gpt2_small_attention_params()", "gpt2_small_attention_params", atol=0, rtol=0,
                       hint="none of the usual miscounts gives this number: count the weights and biases of the "
                            "query, key, value and output projections; return a Python int")
    check.mistakes = COUNT_MISTAKES
    return [check]


# Parts 4 and 5 ask for what the lesson did not work through: the conversion stated as a requirement, and its reverse
TRANSFER = {"test_wrapper_to_split", "test_split_to_wrapper"}

CELLS = {
    "test_split_heads": split_heads,
    "test_merge_heads": merge_heads,
    "test_multi_head_attention": multi_head_attention,
    "test_multi_head_attention_arguments": multi_head_attention_arguments,
    "test_wrapper_to_split": wrapper_to_split,
    "test_split_to_wrapper": split_to_wrapper,
    "test_gpt2_small_attention_params": gpt2_small_attention_params,
}
