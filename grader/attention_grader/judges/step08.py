"""Judges of step 08: fused QKV projection, SDPA's mask convention, attention on SDPA."""

import torch

from attention_course import data
from attention_grader.judging import (G, Check, Expect, Program, call_check, compare, default_judge,
                                     expect_value_error, raised_message, require_call)
from attention_grader.judges.common import (ANY_VALUES, CLASS, attention_state, built_like_check, dropout_check,
                                            first_raised, forward_check, linear_state, returns_check, tensor_of,
                                            with_hint, with_later_tokens_changed)

BATCH = data.journey_batch()  # (2, 6, 3)
CONFIGS = [(5, 6, 3, 9, 7, 2, False), (4, 8, 2, 5, 5, 3, True), (7, 4, 4, 12, 1, 1, False), (3, 10, 5, 8, 6, 2, True)]

COMBINED_HINTS = dict(
    parameters_hint="qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias) and out_proj = nn.Linear(d_out, d_out)",
    runs_hint="inputs may be shorter than context_length: slice the mask to the actual number of tokens; a view "
              "after a transpose needs .contiguous() first (or use reshape)",
    value_hint="split the qkv output in the order queries, keys, values (not keys first), and divide the scores by "
               "sqrt(head_dim) before the softmax",
    again_hint="eval mode must be deterministic: use nn.Dropout so that model.eval() turns it off",
    causal_hint="a token must not see later tokens: mask the scores above the diagonal with -inf")
MASK_CONVENTION = ("SDPA reads a bool attn_mask as True = may attend, the opposite of step 04's causal_mask (True = "
                   "blocked)")
SDPA_HINTS = dict(
    parameters_hint="W_query, W_key, W_value = nn.Linear(d_in, d_out, bias=qkv_bias) and out_proj = "
                    "nn.Linear(d_out, d_out), the names of step 7, so that trained weights load into it",
    runs_hint="SDPA takes (b, num_heads, T, head_dim) queries, keys and values; build any mask for the actual "
              "number of tokens",
    value_hint="do not scale by sqrt(head_dim) yourself: SDPA does it already",
    again_hint="SDPA applies dropout_p even in eval mode: pass dropout_p=self.dropout.p if self.training else 0.0",
    causal_hint="the future leaks: pass is_causal=True, or a bool attn_mask that is True on and below the diagonal; "
                + MASK_CONVENTION)


def require_sdpa(what, grade_id, hint):
    return require_call(what, grade_id, "scaled_dot_product_attention", hint)


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
    checks = [returns_check(what, p)]

    p, mha, combined = build()
    checks.append(built_like_check(
        what, p, combined, "MultiHeadAttentionCombinedQKV", (d_in, d_out, context, dropout, heads, bias),
        fused_state(inputs, d_in, d_out, bias), inputs.randn(2, context, d_in), inputs.seed(),
        "create the module with mha's d_in, d_out, context_length, dropout rate (mha.dropout.p), num_heads and "
        "qkv_bias"))
    return checks


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
            return with_hint(f"{what} is True exactly where attention is blocked", where + ": " + MASK_CONVENTION)
        if not torch.equal(actual, expected):
            return with_hint(f"{what} has the wrong entries ({int((actual != expected).sum())} differ)", where)
        return with_hint(compare(got[1], want[1], f"{what}: SDPA's output with attn_mask=mask",
                                 Expect("", atol=1e-5)),
                         "do not change F")

    return Check(what, p, judge=judge)


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
        require_sdpa("MultiHeadAttentionSDPA", "sdpa_attention",
                     "replace the scores, mask, softmax, dropout and weighted sum by one "
                     "F.scaled_dot_product_attention call"),
        forward_check("MultiHeadAttentionSDPA(3, 4, 6, 0.5, num_heads=2) in eval mode on the (2, 6, 3) batch", cls,
                      (3, 4, 6, 0.5, 2), attention_state(inputs, 3, 4, False), BATCH, cut=3, changed=changed,
                      **SDPA_HINTS),
    ]
    for d_in, d_out, heads, context, tokens, b, bias in CONFIGS:
        checks += module_checks(inputs, cls, SDPA_HINTS, d_in, d_out, heads, context, tokens, b, bias)
    # 1000 copies of the batch in one call: each copy gets its own dropout pattern.
    checks.append(dropout_check("MultiHeadAttentionSDPA(4, 8, 6, 0.5, num_heads=2) on a random (2, 6, 4) input", cls,
                                (4, 8, 6, 0.5, 2), attention_state(inputs, 4, 8, False), inputs.randn(2, 6, 4),
                                inputs.seed(), "pass dropout_p=self.dropout.p while training", copies=1000,
                                mean_hint="dropout must keep the expected output: let SDPA apply it (dropout_p), do "
                                          "not rescale yourself"))
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
    return check


def padding_of(lengths, t, left):
    """(b, T) bool, True at padding: sentence s has lengths[s] real tokens, at the end (left) or the start."""
    positions = torch.arange(t)
    return torch.stack([positions < t - n if left else positions >= n for n in lengths])


def padded_sdpa_attention(inputs):
    checks = [require_sdpa("padded_sdpa_attention", "padded_sdpa_attention",
                           "one call of F.scaled_dot_product_attention with the attn_mask you build")]
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
    checks = [require_sdpa("padded_sdpa_attention", "padded_sdpa_attention",
                           "one call of F.scaled_dot_product_attention with the attn_mask you build")]
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
