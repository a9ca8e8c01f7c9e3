"""Judges of step 13: attention's backward by hand, and FlashAttention's forward and backward.

Parts 1 and 3 use call_check with named mistakes. Part 2 uses Ref.attr and grad=True as step 11's gradient_check
does; grad_fn.saved_tensors is recorded as a tuple.
"""
import functools

import torch

from attention_grader.judging import call_check

GENERIC = ("P = softmax(S), S = scale * Q K^T (masked); d_v = P^T dO; dP = dO V^T; D = rowsum(dO * O); "
           "dS = P * (dP - D); d_q = scale * dS K; d_k = scale * dS^T Q")
D_FROM_DP = ("D is rowsum(dO * O) (equal to rowsum(P * dP)), not rowsum(dP): the softmax's Jacobian is diag(P) - P P^T, "
             "so each row subtracts the P-weighted average of dP")
NO_D = "the softmax's Jacobian has a second term, -P P^T: dS = P * (dP - D) with D = rowsum(dO * O), not P * dP"
NO_SCALE = "S = scale * Q K^T, so d_q = scale * dS K and d_k = scale * dS^T Q: the scale is missing"
SCALE_TWICE = "the scale appears once in S, so once in d_q and d_k: it was applied twice"
NO_MASK = "the backward must use the same masked weights as the forward: masked scores are -inf, their P is 0"
D_V_TRANSPOSE = "O = P V, so d_v = P^T dO (the weights transposed), not P dO"
NO_D_LSE = ("L = logsumexp(S) is an output too: dL/dS = P, so each row of dS gains P * d_lse: "
            "dS = P * (dP - D + d_lse)")


def mistaken_backward(q, k, v, d_out, scale=None, causal=False, d="o", scale_times=1, mask=True, transpose_v=True,
                      d_lse=None):
    multiplier = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.matmul(q, k.transpose(-2, -1)) * multiplier
    if causal and mask:
        t_q, t_k = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(t_q, t_k, dtype=torch.bool).triu(1 + t_k - t_q), float("-inf"))
    p = s.softmax(dim=-1)
    o = torch.matmul(p, v)
    d_p = d_out @ v.transpose(-2, -1)
    row = {"o": (d_out * o).sum(-1, keepdim=True), "dp": d_p.sum(-1, keepdim=True), "none": 0}[d]
    if d_lse is not None:
        row = row - d_lse[..., None]
    d_s = p * (d_p - row)
    factor = multiplier ** scale_times
    d_v = (p.transpose(-2, -1) if transpose_v else p) @ d_out
    return factor * d_s @ k, factor * d_s.transpose(-2, -1) @ q, d_v


def mistake(hint, name, **wrong):
    return hint, {name: functools.partial(mistaken_backward, **wrong)}


BACKWARD_MISTAKES = (mistake(D_FROM_DP, "attention_backward", d="dp"), mistake(NO_D, "attention_backward", d="none"),
                     mistake(NO_SCALE, "attention_backward", scale_times=0),
                     mistake(SCALE_TWICE, "attention_backward", scale_times=2),
                     mistake(NO_MASK, "attention_backward", mask=False),
                     mistake(D_V_TRANSPOSE, "attention_backward", transpose_v=False))


def backward_checks(inputs, causal):
    checks = []
    for (b, h, t, d), scale in [((1, 1, 1, 3), None), ((1, 2, 5, 4), None), ((2, 3, 7, 8), None),
                                ((1, 2, 9, 4), 0.7), ((2, 1, 6, 16), 3.0)]:
        q, k, v, d_out = (inputs.randn(b, h, t, d) for _ in range(4))
        what = (f"attention_backward on random {(b, h, t, d)} inputs, scale={scale}"
                + (", causal=True" if causal else ""))
        check = call_check(what, "attention_backward", q, k, v, d_out, scale, causal, hint=GENERIC, atol=1e-4)
        check.mistakes = BACKWARD_MISTAKES
        checks.append(check)
    return checks


def attention_backward(inputs):
    return backward_checks(inputs, causal=False)


def attention_backward_causal(inputs):
    return backward_checks(inputs, causal=True)


def attention_lse_backward(inputs):
    """Transfer: the lesson differentiates O only; here L = logsumexp(S) is an output too, with its own gradient."""
    checks = []
    for (b, h, t, d), causal in [((1, 1, 4, 3), False), ((2, 2, 7, 4), True), ((1, 3, 9, 8), False),
                                 ((2, 1, 5, 16), True)]:
        q, k, v, d_out = (inputs.randn(b, h, t, d) for _ in range(4))
        d_lse = inputs.randn(b, h, t)
        check = call_check(f"attention_lse_backward on random {(b, h, t, d)} inputs, causal={causal}",
                           "attention_lse_backward", q, k, v, d_out, d_lse, None, causal, hint=NO_D_LSE, atol=1e-4)
        check.mistakes = ((NO_D_LSE, {"attention_lse_backward": lambda q, k, v, d_out, d_lse, scale=None,
                                      causal=False: mistaken_backward(q, k, v, d_out, scale, causal)}),)
        checks.append(check)
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 2: FlashAttention as a torch.autograd.Function (the probe records grad_fn.saved_tensors as
# {'tuple': [{'tensor': {...}}]})
# ---------------------------------------------------------------------------------------------------------------
from attention_grader.judging import G, Check, Program, compare, Expect, raised_message  # noqa: E402
from attention_grader.judges.common import first_raised, with_hint  # noqa: E402

SAVED_WEIGHTS = ("a (T, T) tensor is saved for the backward: save the output and the log-sum-exp L = m + log(l), "
                 "shape (b, H, T), and recompute each tile's weights as exp(s - L) in the backward")
NO_L = "save the log-sum-exp L (b, H, T) with ctx.save_for_backward: the backward recomputes the weights from it"
RECOMPUTE = ("each tile's weights are exp(scale * q_i k_j^T - L_i) (masked like the forward): subtracting L "
             "normalises them, no second pass over the row")
LAST_TILE = "the last tile may be shorter than block_q or block_k: range(0, T, block) with x[..., i:i + block] covers all"


def flash_forward_check(inputs, shape, causal, block_q, block_k):
    what = f"FlashAttention.apply on random {shape} inputs, causal={causal}, block_q={block_q}, block_k={block_k}"
    p = Program()
    q = p.call(p.tensor(inputs.randn(*shape)).attr("requires_grad_"), grad=True)
    k, v = (p.tensor(inputs.randn(*shape)) for _ in range(2))
    out = p.call(G("FlashAttention").attr("apply"), q, k, v, causal, block_q, block_k, grad=True)
    p.record(out, "the output", RECOMPUTE)
    p.record(out.attr("grad_fn").attr("saved_tensors"), "the tensors it saved")
    b, h, t, _ = shape

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = compare(got[0], want[0], f"{what}: the output", Expect("", atol=1e-4, rtol=1e-4))
        if problem:
            return with_hint(problem, LAST_TILE)
        saved = got[1].get("tuple") if isinstance(got[1], dict) else None
        shapes = ([tuple(x["tensor"].get("shape", ())) for x in saved
                   if isinstance(x, dict) and isinstance(x.get("tensor"), dict)] if isinstance(saved, list) else None)
        if shapes is None:
            return f"{what}: the tensors it saved were not recorded"
        if t > 1 and any(len(s) >= 2 and s[-2:] == (t, t) for s in shapes):
            return f"{what}: " + SAVED_WEIGHTS
        if shapes.count((b, h, t)) != 1:
            return f"{what}: " + NO_L
        return None

    return Check(what, p, judge=judge)


def flash_backward_check(inputs, shape, causal, block_q, block_k):
    what = (f"FlashAttention.apply(...).backward(d_out) on random {shape} inputs, causal={causal}, "
            f"block_q={block_q}, block_k={block_k}")
    p = Program()
    leaves = [p.call(p.tensor(inputs.randn(*shape)).attr("requires_grad_"), grad=True) for _ in range(3)]
    out = p.call(G("FlashAttention").attr("apply"), *leaves, causal, block_q, block_k, grad=True)
    p.call(out.attr("backward"), p.tensor(inputs.randn(*shape)), grad=True)
    for name, leaf in zip(("d_q", "d_k", "d_v"), leaves):
        p.record(leaf.attr("grad"), name, RECOMPUTE)
    return Check(what, p)


FLASH_CASES = [((1, 2, 10, 4), False, 4, 3), ((1, 1, 1, 4), False, 1, 1), ((2, 1, 9, 8), True, 2, 4),
               ((1, 2, 16, 4), True, 16, 16), ((2, 2, 7, 4), True, 32, 5), ((1, 1, 13, 16), False, 5, 1)]


def flash_attention_forward(inputs):
    return [flash_forward_check(inputs, *case) for case in FLASH_CASES]


def flash_attention_backward(inputs):
    return [flash_backward_check(inputs, *case) for case in FLASH_CASES]


CELLS = {
    "test_attention_backward": attention_backward,                # 3 points
    "test_attention_backward_causal": attention_backward_causal,  # 1 point
    "test_flash_attention_forward": flash_attention_forward,      # 2 points
    "test_flash_attention_backward": flash_attention_backward,    # 2 points
    "test_attention_lse_backward": attention_lse_backward,        # 6 points
}

# The lesson never differentiates the log-sum-exp as an output: 6 / 14 = 43% of the points.
TRANSFER = {"test_attention_lse_backward"}
