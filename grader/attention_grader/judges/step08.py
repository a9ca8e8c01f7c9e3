"""Judges of step 08: fused QKV projection, SDPA's mask convention, attention on SDPA.

Known mistakes are named by running them: the answer key with its module replaced by step 07's MistakenAttention
(the mistakes of a multi-head module, shared), or its padded_sdpa_attention by a mistaken one written here; a check
names one only when the student's records are what it computes (step07.matched_records).
"""
import functools
import re

import torch
import torch.nn.functional as F

from attention_course import data
from attention_grader.judging import (G, Check, Expect, NamedMistake, Program, call_check, compare, default_judge,
                                     expect_value_error, raised_message)
from attention_grader.judges.common import (ANY_VALUES, CLASS, attention_state, built_like_check, dropout_check,
                                            first_raised, forward_check, linear_state, matched_records, returns_check,
                                            sdpa_use_check, tensor_of, with_hint, with_later_tokens_changed)
from attention_grader.judges.step07 import mistaken, module_mistakes

BATCH = data.journey_batch()  # (2, 6, 3)
CONFIGS = [(5, 6, 3, 9, 7, 2, False), (4, 8, 2, 5, 5, 3, True), (7, 4, 4, 12, 1, 1, False), (3, 10, 5, 8, 6, 2, True)]

NONE_RAISES = ("none of the usual mistakes raises this: print the shape of each tensor after each step, and compare "
               "the sizes the message names with those the line above says they come from")
NONE_GIVES = ("none of the usual mistakes gives these values: compare each step with step 07's forward on a small "
              "input, printing shapes and a few numbers")
NONE_CAUSAL = ("a token sees later tokens, and none of the usual mistakes gives these values: check what masks the "
               "future, and that no reshape mixes numbers of different tokens")
COMBINED_HINTS = dict(
    parameters_hint="qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias) and out_proj = nn.Linear(d_out, d_out)",
    runs_hint=NONE_RAISES, value_hint=NONE_GIVES, causal_hint=NONE_CAUSAL,
    again_hint="dropout still acts in eval mode: F.dropout(x, p) drops whatever the mode unless given "
               "training=self.training; use nn.Dropout so that model.eval() turns it off")
MASK_CONVENTION = ("SDPA reads a bool attn_mask as True = may attend, the opposite of step 04's causal_mask (True = "
                   "blocked)")
SDPA_HINTS = dict(
    parameters_hint="W_query, W_key, W_value = nn.Linear(d_in, d_out, bias=qkv_bias) and out_proj = "
                    "nn.Linear(d_out, d_out), the names of step 7, so that trained weights load into it",
    runs_hint=NONE_RAISES, value_hint=NONE_GIVES, causal_hint=NONE_CAUSAL,
    again_hint="SDPA applies dropout_p even in eval mode: pass dropout_p=self.dropout.p if self.training else 0.0")
BOTH_MASKS = ("SDPA refuses an attn_mask together with is_causal=True (some of its kernels, e.g. with dropout, raise): "
              "pass is_causal=True alone for a causal mask, or one attn_mask that holds everything")
FUSED = "MultiHeadAttentionCombinedQKV"
# the usual mistakes of a multi-head module (step 07's table), on the fused layout and on SDPA, and those of each
COMBINED_MISTAKES = module_mistakes(FUSED, ["scale", "mask", "scores", "heads", "out_proj"], fused=True) + (
    ("the fused output is cut per head as (num_heads, 3, head_dim), queries, keys and values interleaved head by "
     "head: the contract has all queries in the first d_out columns, then the keys, then the values (view as (b, T, "
     "3, num_heads, head_dim), or .split(d_out, dim=-1))", {FUSED: mistaken(fused=True, qkv_order="per_head")}),
    ("the qkv output is read as keys, queries, values: the contract puts the queries in its first d_out columns, "
     "then the keys, then the values", {FUSED: mistaken(fused=True, qkv_order="kqv")}),
    ("the qkv output is cut along dim 0, the batch: cut it along the last dimension, .split(d_out, dim=-1)",
     {FUSED: mistaken(fused=True, qkv_order="batch")}),
    ("qkv never has a bias: pass bias=qkv_bias to nn.Linear", {FUSED: mistaken(fused=True, bias=False)}),
)


def bias_named(check):
    """`check`, whose message names a qkv bias that qkv_bias does not ask for, read from the parameters the module
    has (an extra bias gets random numbers, so running the mistake cannot reproduce its outputs)."""
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        if problem and got and "parameters" in got[0] and "parameters" in want[0]:
            names = {str(entry[0]) for entry in got[0]["parameters"]}
            if names - {str(entry[0]) for entry in want[0]["parameters"]} == {"qkv.bias"}:
                return NamedMistake(problem.split("\n  likely mistake: ")[0] + "\n  likely mistake: qkv has a bias "
                                    "although qkv_bias=False: pass bias=qkv_bias to nn.Linear")
        return problem

    check.judge = judged
    return check
SDPA_MISTAKES = module_mistakes("MultiHeadAttentionSDPA", ["heads", "out_proj"], sdpa="causal") + tuple(
    (hint, {"MultiHeadAttentionSDPA": mistaken(**changes)}) for hint, changes in (
        ("SDPA is called without is_causal=True (or a mask): every token sees the future", dict(sdpa="none")),
        ("the mask passed as attn_mask is True where attention is blocked (step 04's convention): " + MASK_CONVENTION
         + "; pass is_causal=True", dict(sdpa="blocked")),
        ("the queries are divided by sqrt(head_dim) and SDPA divides the scores again: do not scale yourself",
         dict(sdpa="causal", scale="twice"))))


def both_masks_named(check):
    """`check`, whose message names BOTH_MASKS where the module raised SDPA's error about attn_mask and is_causal."""
    judge = check.judge

    def judged(got, want):
        problem, found = judge(got, want), first_raised(got)
        if problem and found and "attn_mask should not be set when is_causal" in str(found[1]["message"]):
            return NamedMistake(problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {BOTH_MASKS}")
        return problem

    check.judge = judged
    return check


def module_on_sdpa_check(inputs, hint):
    what = ("MultiHeadAttentionSDPA(3, 4, 6, 0.5, num_heads=2) in eval mode on the (2, 6, 3) batch, watched operation "
            "by operation")
    p = Program()
    module = p.call(G("MultiHeadAttentionSDPA"), 3, 4, 6, 0.5, 2)
    p.load(module, attention_state(inputs, 3, 4, False))
    p.call(module.attr("eval"))
    return sdpa_use_check(what, p, p.call(module, p.tensor(BATCH), trace=0), hint)


def padded_on_sdpa_check(inputs, left):
    b, heads, t, hd = 3, 2, 5, 4
    what = (f"padded_sdpa_attention on random ({b}, {heads}, {t}, {hd}) heads, {'left' if left else 'right'} padding, "
            "watched operation by operation")
    p = Program()
    q, k, v = (p.tensor(inputs.randn(b, heads, t, hd)) for _ in range(3))
    call = p.call(G("padded_sdpa_attention"), q, k, v, p.tensor(padding_of([t, 2, 4], t, left)), trace=0)
    return sdpa_use_check(what, p, call, "one call of F.scaled_dot_product_attention with the attn_mask you build")


def fused_state(inputs, d_in, d_out, qkv_bias):
    state = linear_state(inputs, "qkv", d_in, 3 * d_out, qkv_bias)
    state.update(linear_state(inputs, "out_proj", d_out, d_out))
    return state


def module_checks(inputs, cls, hints, d_in, d_out, heads, context, tokens, b, bias):
    """The hidden forward checks of Parts 1 and 4: eval mode with dropout 0.5 (loaded weights), and training mode
    with dropout 0.0."""
    state = (fused_state if cls == "MultiHeadAttentionCombinedQKV" else attention_state)(inputs, d_in, d_out, bias)
    x = inputs.randn(b, tokens, d_in)
    built = f"{cls}({d_in}, {d_out}, {context}, dropout, {heads}, qkv_bias={bias})"
    changed = with_later_tokens_changed(inputs, x, 2) if tokens > 2 else None
    return [
        forward_check(f"{built} in eval mode on a random {tuple(x.shape)} input", cls, (d_in, d_out, context, 0.5,
                      heads), state, x, kwargs={"qkv_bias": bias}, cut=2, changed=changed, **hints),
        forward_check(f"{built} with dropout 0.0 in training mode on a random {tuple(x.shape)} input", cls,
                      (d_in, d_out, context, 0.0, heads), state, x, kwargs={"qkv_bias": bias}, mode="train",
                      **{**hints, "again_hint": "with dropout 0.0 training mode must compute the same as eval mode"}),
    ]


def value_error_check(what, cls, args, argument, x=None):
    p = Program()
    module = p.call(G(cls), *args)
    if x is not None:
        p.call(module, p.tensor(x))
    return expect_value_error(what, p, argument)


def combined_qkv(inputs):
    cls = "MultiHeadAttentionCombinedQKV"
    changed = BATCH.clone()
    changed[:, 3:] += 1.0
    checks = [
        forward_check("MultiHeadAttentionCombinedQKV(3, 4, 6, 0.0, num_heads=2) on the (2, 6, 3) batch", cls,
                      (3, 4, 6, 0.0, 2), fused_state(inputs, 3, 4, False), BATCH, cut=3, changed=changed,
                      **COMBINED_HINTS),
    ]
    for d_in, d_out, heads, context, tokens, b, bias in CONFIGS:
        checks += module_checks(inputs, cls, COMBINED_HINTS, d_in, d_out, heads, context, tokens, b, bias)
    for check in checks:
        check.mistakes = COMBINED_MISTAKES
        bias_named(matched_records(check))
    checks.append(dropout_check("MultiHeadAttentionCombinedQKV(4, 8, 6, 0.5, num_heads=2) on a random (2, 6, 4) input",
                                cls, (4, 8, 6, 0.5, 2), fused_state(inputs, 4, 8, False), inputs.randn(2, 6, 4),
                                inputs.seed(), "apply dropout (nn.Dropout) to the attention weights"))
    return checks + argument_checks(cls)


def argument_checks(cls):
    """Bad arguments of Parts 1 and 4: d_out not divisible by num_heads, more tokens than context_length."""
    return [value_error_check(f"{cls}(4, 6, 5, 0.0, num_heads=4)", cls, (4, 6, 5, 0.0, 4), "d_out"),
            value_error_check(f"{cls}(3, 9, 6, 0.0, num_heads=2)", cls, (3, 9, 6, 0.0, 2), "d_out"),
            value_error_check(f"a forward pass with 7 tokens through {cls}(3, 4, 6, 0.5, num_heads=2)", cls,
                              (3, 4, 6, 0.5, 2), "context_length", torch.zeros(1, 7, 3)),
            value_error_check(f"a forward pass with 4 tokens through {cls}(4, 8, 3, 0.0, num_heads=2)", cls,
                              (4, 8, 3, 0.0, 2), "context_length", torch.zeros(1, 4, 4))]


def combined_from_split_checks(inputs, d_in, d_out, heads, context, bias, dropout, seed=None):
    """The weights combined_from_split copies, and the sizes and dropout rate of the module it builds. Its input is
    the notebook's provided MultiHeadAttention, so that a bug of Part 1's class does not cost these points."""
    what = f"combined_from_split(MultiHeadAttention({d_in}, {d_out}, {context}, {dropout}, {heads}, qkv_bias={bias}))"
    state = attention_state(inputs, d_in, d_out, bias)

    def build():
        p = Program()
        if seed is not None:
            p.seed(seed)
        mha = p.call(G("MultiHeadAttention"), d_in, d_out, context, dropout, heads, qkv_bias=bias)
        if seed is None:
            p.load(mha, state)
        return p, mha, p.call(G("combined_from_split"), mha)

    stack = ("queries first, then keys, then values: stack the three (d_out, d_in) weights on top of each other with "
             "torch.cat(..., dim=0), not side by side")
    p, mha, combined = build()
    p.record(combined.attr("__class__").attr("__name__"), CLASS, stack)
    p.record(combined.attr("qkv").attr("weight"), "combined.qkv.weight", stack)
    p.record(combined.attr("qkv").attr("bias"), "combined.qkv.bias",
             "the biases are fused like the weights; create the module with qkv_bias=mha.W_query.bias is not None")
    p.record(combined.attr("out_proj").attr("weight"), "combined.out_proj.weight",
             "copy out_proj too (weight and bias)")
    p.record(combined.attr("out_proj").attr("bias"), "combined.out_proj.bias", "copy out_proj's bias too")
    p.record(mha, "mha after the call", "copy the weights into the new module; do not modify mha", kind="state")
    checks = [side_by_side_named(returns_check(what, p), d_in, d_out)]

    p, mha, combined = build()
    checks.append(built_like_check(
        what, p, combined, "MultiHeadAttentionCombinedQKV", (d_in, d_out, context, dropout, heads, bias),
        fused_state(inputs, d_in, d_out, bias), inputs.randn(2, context, d_in), inputs.seed(),
        "create the module with mha's d_in, d_out, context_length, dropout rate (mha.dropout.p), num_heads and "
        "qkv_bias"))
    return checks


SIDE_BY_SIDE = ("the three (d_out, d_in) weights are put side by side (dim=1), which makes a (d_out, 3 * d_in) tensor: "
                "nn.Linear keeps its weight as (out_features, in_features), so stack them along dim 0, "
                "torch.cat(..., dim=0), queries first")


def side_by_side_named(check, d_in, d_out):
    """`check`, whose message names SIDE_BY_SIDE when combined_from_split raised on a size of 3 * d_in: a tensor of
    that width meets qkv's (3 * d_out, d_in) weight only when the three weights were put side by side."""
    judge = check.judge

    def judged(got, want):
        problem, found = judge(got, want), first_raised(got)
        if problem and found and 3 * d_in not in (d_in, d_out, 3 * d_out) and \
                str(3 * d_in) in re.findall(r"\d+", str(found[1]["message"])):
            return NamedMistake(problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {SIDE_BY_SIDE}")
        return problem

    check.judge = judged
    return check


def combined_from_split(inputs):
    checks = combined_from_split_checks(inputs, 3, 4, 2, 6, True, 0.0, seed=123)
    for d_in, d_out, heads, context, bias, dropout in [(5, 6, 3, 9, False, 0.1), (4, 8, 2, 5, True, 0.0),
                                                       (7, 4, 4, 12, True, 0.3)]:
        checks += combined_from_split_checks(inputs, d_in, d_out, heads, context, bias, dropout)
    return checks


def mask_check(what, num_tokens, q, k, v):
    """sdpa_causal_bool_mask(num_tokens), and SDPA's output with it as attn_mask."""
    p = Program()
    mask = p.call(G("sdpa_causal_bool_mask"), num_tokens)
    p.record(mask, "the mask")
    sdpa = G("F").attr("scaled_dot_product_attention")
    p.record(p.call(sdpa, p.tensor(q), p.tensor(k), p.tensor(v), attn_mask=mask), "SDPA's output with attn_mask=mask")
    where = "True on and below the diagonal (a token may attend to itself and the past)"

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = compare(got[0], want[0], what, ANY_VALUES) if "tensor" not in got[0] else None
        if problem:
            return problem
        if got[0]["tensor"]["dtype"] != "bool":
            return with_hint(f"{what} should be a bool tensor (True = may attend), got dtype "
                             f"{str(got[0]['tensor']['dtype'])[:20]}", "a float mask is added to the scores "
                             "instead; build it with dtype=torch.bool or compare with >=")
        if got[0]["tensor"]["shape"] != want[0]["tensor"]["shape"]:
            return compare(got[0], want[0], what, ANY_VALUES)
        actual, expected = tensor_of(got[0]), tensor_of(want[0])
        if torch.equal(actual, ~expected):
            return NamedMistake(with_hint(f"{what} is True exactly where attention is blocked",
                                          where + ": " + MASK_CONVENTION))
        ones = torch.ones_like(expected)
        for wrong, hint in ((ones.tril(-1), NO_DIAGONAL), (ones.triu(), FUTURE)):
            if torch.equal(actual, wrong) and not torch.equal(wrong, expected):
                return NamedMistake(with_hint(f"{what} has the wrong entries ({int((actual != expected).sum())} "
                                              "differ)", hint))
        if not torch.equal(actual, expected):
            return with_hint(f"{what} has the wrong entries ({int((actual != expected).sum())} differ)", where)
        return with_hint(compare(got[1], want[1], f"{what}: SDPA's output with attn_mask=mask",
                                 Expect("", atol=1e-5)),
                         "do not change F")

    return Check(what, p, judge=judge)


NO_DIAGONAL = ("the diagonal is False: a token may attend to itself too, so the mask is True on and below the "
               "diagonal (the first row, with no True, gives SDPA no key at all)")
FUTURE = ("the mask is True on and above the diagonal, which lets each token see the future and not the past: query i "
          "may see keys 0..i, True on and below the diagonal")


def sdpa_causal_bool_mask(inputs):
    g = torch.Generator().manual_seed(0)
    checks = [mask_check("sdpa_causal_bool_mask(4)", 4, *(torch.randn(1, 2, 4, 3, generator=g) for _ in range(3)))]
    for num_tokens in [1, 2, 5, 9]:
        checks.append(mask_check(f"sdpa_causal_bool_mask({num_tokens})", num_tokens,
                                 *(inputs.randn(2, 3, num_tokens, 4) for _ in range(3))))
    return checks


def sdpa_attention(inputs):
    cls = "MultiHeadAttentionSDPA"
    changed = BATCH.clone()
    changed[:, 3:] += 1.0
    checks = [
        module_on_sdpa_check(inputs, "replace the scores, mask, softmax, dropout and weighted sum by one "
                                     "F.scaled_dot_product_attention call"),
        forward_check("MultiHeadAttentionSDPA(3, 4, 6, 0.5, num_heads=2) in eval mode on the (2, 6, 3) batch", cls,
                      (3, 4, 6, 0.5, 2), attention_state(inputs, 3, 4, False), BATCH, cut=3, changed=changed,
                      **SDPA_HINTS),
    ]
    for d_in, d_out, heads, context, tokens, b, bias in CONFIGS:
        checks += module_checks(inputs, cls, SDPA_HINTS, d_in, d_out, heads, context, tokens, b, bias)
    for check in checks[1:]:
        check.mistakes = SDPA_MISTAKES
        both_masks_named(matched_records(check))
    # 1000 copies of the batch in one call: each copy gets its own dropout pattern.
    checks.append(both_masks_named(dropout_check(
        "MultiHeadAttentionSDPA(4, 8, 6, 0.5, num_heads=2) on a random (2, 6, 4) input", cls, (4, 8, 6, 0.5, 2),
        attention_state(inputs, 4, 8, False), inputs.randn(2, 6, 4), inputs.seed(),
        "pass dropout_p=self.dropout.p while training", copies=1000,
        mean_hint="dropout must keep the expected output: let SDPA apply it (dropout_p), do not rescale yourself")))
    return checks + argument_checks(cls)


PAD_HINT = ("SDPA reads a bool attn_mask as True = may attend, the opposite of is_padding: the keys' mask is "
            "~is_padding, shaped (b, 1, 1, T) so that it reaches every head and every query of its own sentence")
PAD_CAUSAL_HINT = PAD_HINT + "; with causal=True it must also be False above the diagonal (both conditions at once)"
SELF_HINT = ("a query that may see no key attends to itself alone: allow the diagonal in the rows of the mask that "
             "have no True, so that its output is its own value (not nan, not zeros)")


def padded_check(inputs, b, heads, t, hd, is_padding, causal, kind):
    """padded_sdpa_attention on random heads; the judge tells rows of real queries from rows with no allowed key."""
    q, k, v = (inputs.randn(b, heads, t, hd) for _ in range(3))
    what = f"padded_sdpa_attention on random ({b}, {heads}, {t}, {hd}) heads, {kind}, causal={causal}"
    check = call_check(what, "padded_sdpa_attention", q, k, v, is_padding, causal=causal, atol=1e-5, rtol=1e-5)
    allowed = ~is_padding[:, None, :]
    if causal:
        allowed = allowed & torch.ones(t, t, dtype=torch.bool).tril()
    empty = ~allowed.expand(b, t, t).any(dim=-1)  # (b, T): queries with no key they may attend to

    def judge(got, want):
        problem = default_judge(check, got, want)
        if not problem or not got or "tensor" not in got[0] or got[0]["tensor"]["shape"] != want[0]["tensor"]["shape"]:
            return problem
        actual, expected = tensor_of(got[0]), tensor_of(want[0])
        wrong = ((actual - expected).abs().nan_to_num(nan=float("inf")) > 1e-5 + 1e-5 * expected.abs()).any(dim=-1)
        wrong = wrong.any(dim=1)  # (b, T): query rows that differ in some head
        if (wrong & ~empty).any():
            return with_hint(problem, PAD_CAUSAL_HINT if causal else PAD_HINT)
        if (wrong & empty).any():
            return with_hint(problem.replace("has the wrong values", "has the wrong values in rows with no allowed key"),
                             SELF_HINT)
        return problem

    check.judge = judge
    check.mistakes = PADDED_MISTAKES
    return matched_records(check)


def mistaken_padded(queries, keys, values, is_padding, causal=True, blocked=False, keys_shape=(1, 1), either=False,
                    itself=True):
    """The answer key's padded_sdpa_attention with a usual mistake: the mask in the blocked convention, the padding
    shaped (b, 1, T), padding and future combined with |, or the rows with no allowed key left as they are."""
    b, _, num_tokens, _ = queries.shape
    if is_padding.dtype != torch.bool or tuple(is_padding.shape) != (b, num_tokens):
        raise ValueError("is_padding")
    allowed = ~is_padding.view(b, *keys_shape, num_tokens)
    if causal:
        future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).tril()
        allowed = (allowed | future) if either else (allowed & future)
    if itself:
        allowed = allowed | (~allowed.any(dim=-1, keepdim=True) & torch.eye(num_tokens, dtype=torch.bool))
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=~allowed if blocked else allowed)
    return out if itself else out.nan_to_num()


PADDED_MISTAKES = tuple((hint, {"padded_sdpa_attention": functools.partial(mistaken_padded, **changes)})
                        for hint, changes in (
    ("the mask passed is True where attention is blocked (is_padding's convention, and step 04's): SDPA reads True as "
     "may attend, so build it from ~is_padding", dict(blocked=True)),
    ("the padding mask is shaped (b, 1, T): SDPA lines a mask up with its (b, num_heads, T, T) scores from the right, "
     "so the sentences meet the heads; shape it (b, 1, 1, T)", dict(keys_shape=(1,))),
    ("padding and future are combined with |, so a key is allowed when either allows it: it must be a real token and "
     "not in the future, both conditions at once (&)", dict(either=True)),
    ("the rows with no allowed key are left as they are (SDPA gives zeros or nan there): a query that may see no key "
     "attends to itself alone, so allow the diagonal in those rows", dict(itself=False)),
))


def padding_of(lengths, t, left):
    """(b, T) bool, True at padding: sentence s has lengths[s] real tokens, at the end (left) or the start."""
    positions = torch.arange(t)
    return torch.stack([positions < t - n if left else positions >= n for n in lengths])


def padded_sdpa_attention(inputs):
    checks = [padded_on_sdpa_check(inputs, left=False)]
    for b, heads, t, hd, causal in [(2, 2, 5, 3, True), (3, 1, 6, 4, False), (1, 3, 4, 2, True),
                                    (4, 2, 7, 5, False), (2, 4, 3, 8, True)]:
        lengths = [t] + [inputs.randint(1, t + 1) for _ in range(b - 1)]
        checks.append(padded_check(inputs, b, heads, t, hd, padding_of(lengths, t, left=False), causal,
                                   "right padding"))
    q = torch.zeros(2, 2, 5, 3)
    for what, padding in (("is_padding of shape (2, 4)", torch.zeros(2, 4, dtype=torch.bool)),
                          ("is_padding of shape (5, 2)", torch.zeros(5, 2, dtype=torch.bool)),
                          ("a float is_padding", torch.zeros(2, 5))):
        p = Program()
        p.call(G("padded_sdpa_attention"), p.tensor(q), p.tensor(q), p.tensor(q), p.tensor(padding))
        checks.append(expect_value_error(f"padded_sdpa_attention on (2, 2, 5, 3) heads with {what}", p, "is_padding"))
    return checks


def padded_sdpa_attention_left(inputs):
    checks = [padded_on_sdpa_check(inputs, left=True)]
    for b, heads, t, hd in [(3, 2, 5, 3), (2, 1, 6, 4), (4, 3, 4, 2), (2, 2, 8, 5)]:
        lengths = [inputs.randint(1, t), 0] + [inputs.randint(0, t + 1) for _ in range(b - 2)]
        checks.append(padded_check(inputs, b, heads, t, hd, padding_of(lengths, t, left=True), True, "left padding"))
    for b, heads, t, hd in [(3, 2, 4, 3), (2, 3, 6, 2)]:
        lengths = [0] + [inputs.randint(1, t + 1) for _ in range(b - 1)]
        checks.append(padded_check(inputs, b, heads, t, hd, padding_of(lengths, t, left=False), False,
                                   "right padding with a sentence of padding only"))
    return checks


# Part 5 applies the lesson's mask convention to what the lesson did not work through: padded batches, right and left
TRANSFER = {"test_padded_sdpa_attention", "test_padded_sdpa_attention_left"}

CELLS = {
    "test_combined_qkv": combined_qkv,
    "test_combined_from_split": combined_from_split,
    "test_sdpa_causal_bool_mask": sdpa_causal_bool_mask,
    "test_sdpa_attention": sdpa_attention,
    "test_padded_sdpa_attention": padded_sdpa_attention,
    "test_padded_sdpa_attention_left": padded_sdpa_attention_left,
}
