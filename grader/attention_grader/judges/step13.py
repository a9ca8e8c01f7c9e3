"""Judges of step 13: attention's backward by hand, FlashAttention's forward and backward, the forward in Triton.

Parts 1 and 3 use call_check with named mistakes, and judge "by hand" from what runs (by_hand_check: no autograd
graph, no saved-tensor hooks of its own, no library backward kernel; forwards_check: a few exponentials per query and
a few times the inputs' memory at most, which central differences exceed). Part 2 uses Ref.attr and grad=True as step
11's gradient_check does; grad_fn.saved_tensors is recorded as a tuple; its traced operations hold no library attention
kernel, and its backward builds no autograd graph (flash_engine_check). Part 4 is judged against SDPA computed here, in
float64; the kernel runs in Triton's interpreter (TRITON_INTERPRET=1, set by the course package and the grading
sandbox), and the launcher's traced operations show that it launched a kernel and computed no attention itself (only
copies read k's elements); the probe's launch records show that every element it returned holds a value its kernels
stored, computed rather than copied in, and that no load read more than 128 keys (on a T longer than that). When T_q < T_k the queries are the last T_q positions (the causal mask aligned bottom-right).
"""
import functools
import math
import re

import torch
import torch.nn.functional as F

from attention_course.probe import decode_tensor
from attention_grader.judges.common import first_raised, library_ops, with_hint, with_other_hint
from attention_grader.judging import (G, Check, Expect, NamedMistake, Program, as_data, call_check, compare,
                                      default_judge, describe, raised_message)

GENERIC = ("none of the usual mistakes gives these values: compare each line with P = softmax(S), "
           "S = scale * Q K^T (masked); d_v = P^T dO; dP = dO V^T; D = rowsum(dO * O); dS = P * (dP - D); "
           "d_q = scale * dS K; d_k = scale * dS^T Q")
D_FROM_DP = ("D is rowsum(dO * O) (equal to rowsum(P * dP)), not rowsum(dP): the softmax's Jacobian is diag(P) - P P^T, "
             "so each row subtracts the P-weighted average of dP")
D_OVER_QUERIES = ("D is one number per query, a sum over that query's keys (dim=-1): it was summed over the queries "
                  "(dim=-2) instead")
NO_D = "the softmax's Jacobian has a second term, -P P^T: dS = P * (dP - D) with D = rowsum(dO * O), not P * dP"
NO_SCALE = "S = scale * Q K^T, so d_q = scale * dS K and d_k = scale * dS^T Q: the scale is missing"
SCALE_TWICE = "the scale appears once in S, so once in d_q and d_k: it was applied twice"
SCALE_DIVIDES = ("scale is a multiplier, S = scale * Q K^T (1 / sqrt(head_dim) when None): a given scale divided the "
                 "scores instead")
NO_MASK = ("the scores were not masked: with causal the backward uses the same masked weights as the forward "
           "(masked scores are -inf, their P is 0)")
MASK_DIAGONAL = ("the mask also hid each query's own position (the diagonal): a query may attend to itself, only the "
                 "keys after it are masked")
MASK_AFTER = ("the masked weights were set to 0 after the softmax, so each row no longer sums to 1: mask the scores "
              "with -inf before the softmax")
SOFTMAX_DIM = "the softmax runs over each query's keys (dim=-1), not over the queries (dim=-2)"
D_V_TRANSPOSE = "O = P V, so d_v = P^T dO (the weights transposed), not P dO"
D_K_TRANSPOSE = "S = scale * Q K^T, so d_k = scale * dS^T Q with dS transposed (keys index its columns), not dS Q"
D_P_TRANSPOSE = "dP = dO V^T, of shape (T_q, T_k) like P: it was computed as V dO^T, the transposed matrix"
TOP_LEFT = ("with fewer queries than keys the mask is aligned top-left: the queries are the last T_q of the T_k "
            "positions, so query i is position T_k - T_q + i (bottom-right, as step 09's cache)")
NO_D_LSE = ("L = logsumexp(S) is an output too: dL/dS = P, so each row of dS gains P * d_lse: "
            "dS = P * (dP - D + d_lse)")
LSE_GENERIC = ("none of the usual mistakes gives these values: with L = logsumexp(S) an output too, dS is "
               "P * (dP - D) plus what d_lse sends through dL/dS; then d_q = scale * dS K and d_k = scale * dS^T Q")
LSE_UNWEIGHTED = ("d_lse reaches each score through dL/dS = P: dS gains P * d_lse, not d_lse itself added to every "
                  "score")
LSE_SIGN = "the sign of d_lse is flipped: L grows with each score (dL/dS = P > 0), so dS = P * (dP - D + d_lse)"
LSE_EXP = "dL/dS = exp(S - L) = P, the normalised weights, not exp(S): dS gains P * d_lse"
LSE_FLAT = ("d_lse (b, H, T) holds one number per query: give it a last dimension, d_lse[..., None], so that it "
            "scales that query's row of P; without it, it lines up with the keys")
MASK_SQUARE = ("the mask was built (T_q, T_q) from q's length alone: it is (T_q, T_k), one column per key, with the "
               "queries the last T_q positions")
LSE_UNSCALED = ("d_lse's share of dS goes through S = scale * Q K^T like the rest: it was added to d_q and d_k without "
                "the scale")


def mistaken_backward(q, k, v, d_out, scale=None, causal=False, d="o", scale_times=1, mask=True, transpose_v=True,
                      d_lse=None, bottom_right=True, divide=False, transpose_k=True, transpose_dp=True, softmax_dim=-1,
                      diagonal=0, mask_after=False, lse="p", lse_scaled=True, square_mask=False):
    multiplier = q.shape[-1] ** -0.5 if scale is None else 1 / scale if divide else scale
    s = torch.matmul(q, k.transpose(-2, -1)) * multiplier
    blocked = None
    if causal and mask:
        t_q, t_k = q.shape[-2], k.shape[-2]
        blocked = torch.ones(t_q, t_q if square_mask else t_k, dtype=torch.bool).triu(
            1 + (t_k - t_q) * bottom_right * (not square_mask) - diagonal)
        s = s if mask_after else s.masked_fill(blocked, float("-inf"))
    p = s.softmax(dim=softmax_dim)
    if mask_after and blocked is not None:
        p = p.masked_fill(blocked, 0.0)
    o = torch.matmul(p, v)
    d_p = d_out @ v.transpose(-2, -1) if transpose_dp else v @ d_out.transpose(-2, -1)
    row = {"o": lambda: (d_out * o).sum(-1, keepdim=True), "dp": lambda: d_p.sum(-1, keepdim=True),
           "pdp": lambda: (p * d_p).sum(-1, keepdim=True), "queries": lambda: (p * d_p).sum(-2, keepdim=True),
           "none": lambda: 0}[d]()
    factor = multiplier ** scale_times
    d_s = factor * p * (d_p - row)
    if d_lse is not None:
        weight = {"p": p, "flat": p, "one": torch.ones_like(p), "exp": s.exp(), "-p": -p}[lse]
        d_s = d_s + weight * (d_lse if lse == "flat" else d_lse[..., None]) * (factor if lse_scaled else 1)
    d_v = (p.transpose(-2, -1) if transpose_v else p) @ d_out
    return d_s @ k, (d_s.transpose(-2, -1) if transpose_k else d_s) @ q, d_v


def mistake(hint, name, **wrong):
    return hint, {name: functools.partial(mistaken_backward, **wrong)}


# mistakes that give values whatever the shapes, then those that raise when T_q < T_k (a mistake that raises is
# matched by the kind of error alone, so these are not tried where the answer key's own shapes would make them raise)
BACKWARD_MISTAKES = (mistake(D_FROM_DP, "attention_backward", d="dp"), mistake(NO_D, "attention_backward", d="none"),
                     mistake(D_OVER_QUERIES, "attention_backward", d="queries"),
                     mistake(NO_SCALE, "attention_backward", scale_times=0),
                     mistake(SCALE_TWICE, "attention_backward", scale_times=2),
                     mistake(SCALE_DIVIDES, "attention_backward", divide=True),
                     mistake(NO_MASK, "attention_backward", mask=False),
                     mistake(MASK_DIAGONAL, "attention_backward", diagonal=1),
                     mistake(MASK_AFTER, "attention_backward", mask_after=True),
                     mistake(SOFTMAX_DIM, "attention_backward", softmax_dim=-2),
                     mistake(TOP_LEFT, "attention_backward", bottom_right=False))
SQUARE_ONLY_MISTAKES = (mistake(D_V_TRANSPOSE, "attention_backward", transpose_v=False),
                        mistake(D_K_TRANSPOSE, "attention_backward", transpose_k=False),
                        mistake(D_P_TRANSPOSE, "attention_backward", transpose_dp=False),
                        mistake(D_P_TRANSPOSE, "attention_backward", transpose_dp=False, d="pdp"))


RAISING_MISTAKES = ((MASK_SQUARE, functools.partial(mistaken_backward, square_mask=True)),
                    (D_V_TRANSPOSE, functools.partial(mistaken_backward, transpose_v=False)),
                    (D_K_TRANSPOSE, functools.partial(mistaken_backward, transpose_k=False)),
                    (D_P_TRANSPOSE, functools.partial(mistaken_backward, transpose_dp=False)),
                    (D_P_TRANSPOSE, functools.partial(mistaken_backward, transpose_dp=False, d="pdp")))
LSE_RAISING_MISTAKES = ((LSE_FLAT, lambda q, k, v, d_out, d_lse, scale=None, causal=False: mistaken_backward(
    q, k, v, d_out, scale, causal, d_lse=d_lse, lse="flat")),)


def error_key(record):
    """An error's kind and message, the order of the two operands a broadcast names left out."""
    text = str(record.get("message", ""))
    return (str(record.get("raised")), re.sub(r"\d+", "#", text).replace("tensor b", "tensor a"),
            sorted(re.findall(r"\d+", text)))


def named_failures(check, args=(), raising=()):
    """The check's judge, naming two mistakes its records show even when the visible tests failed first: a changed
    input, and an error that exactly one known mistake in `raising` (hint, function) raises on the same `args` (the
    same kind and message, up to the order of the operands). Several such mistakes: none is named."""
    def judge(got, want):
        problem = default_judge(check, got, want)
        if not problem or isinstance(problem, NamedMistake):
            return problem
        if "its input after the call" in problem.split("\n")[0]:
            return NamedMistake(problem)
        found = first_raised(got)
        hints = set()
        for hint, function in raising if found else ():
            try:
                function(*args)
            except Exception as error:  # noqa: BLE001 -- any error the mistake raises is compared with the student's
                if error_key({"raised": type(error).__name__, "message": str(error)}) == error_key(found[1]):
                    hints.add(hint)
        return NamedMistake(with_other_hint(problem, hints.pop())) if len(hints) == 1 else problem

    check.judge = judge
    return check


def lse_mistake(hint, **wrong):
    def mistaken(q, k, v, d_out, d_lse, scale=None, causal=False):
        return mistaken_backward(q, k, v, d_out, scale, causal, d_lse=None if wrong.get("lse") == "none" else d_lse,
                                 **{key: value for key, value in wrong.items() if key != "lse" or value != "none"})
    return hint, {"attention_lse_backward": mistaken}


LSE_MISTAKES = (lse_mistake(NO_D_LSE, lse="none"), lse_mistake(LSE_UNWEIGHTED, lse="one"),
                lse_mistake(LSE_SIGN, lse="-p"), lse_mistake(LSE_EXP, lse="exp"),
                lse_mistake(LSE_UNSCALED, lse_scaled=False), lse_mistake(D_FROM_DP, d="dp"),
                lse_mistake(NO_D, d="none"), lse_mistake(NO_SCALE, scale_times=0))


# ---------------------------------------------------------------------------------------------------------------
# "by hand", judged by what runs: the function is called once plainly, then again on tensors that do not require grad,
# under no_grad, with autograd's saved-tensor hooks set to refuse every tensor a graph would save (torch.device raises
# on a tensor), and with its aten operations traced. A backward by hand saves nothing; torch.autograd.grad,
# .backward(), torch.func.vjp and autograd.Function all build a graph (or refuse saved-tensor hooks) whatever name
# reached them; a library's backward kernel (torch.ops.aten._softmax_backward_data, ...) shows in the trace.
# ---------------------------------------------------------------------------------------------------------------

AUTOGRAD = ("the gradient is the exercise: compute it with tensor operations, as the formulas above do, not through "
            "autograd (torch.autograd.grad, .backward(), torch.func, an autograd.Function) or a library's backward")
def library_backward_ops(ops, extra=()):
    """The operations of a trace that are a library's attention, any backward kernel, or named in `extra`."""
    return sorted(set(library_ops(ops, extra)) | {str(op) for op in ops if "backward" in str(op)})


OWN_HOOKS = ("autograd's saved-tensor hooks were set inside it (they take over from any set around the call): "
             "a backward by hand saves nothing for autograd")
EXPONENTIALS = {"exp", "exp2", "expm1", "_softmax", "_log_softmax", "_safe_softmax", "logsumexp", "sigmoid", "pow",
                "tanh"}
FORWARDS = ("the gradient is worked out, not measured: one pass over the scores gives P, dP, D and dS for every "
            "query at once, where central differences evaluate the forward twice per input element")


def by_hand_check(inputs, name, shape, causal):
    d_lse = [inputs.randn(*shape[:-1])] if name == "attention_lse_backward" else []
    what = f"{name} on random {shape} inputs, causal={causal}, with autograd unable to save a tensor"
    p = Program()

    def fresh_args():  # each call its own inputs: a function that remembers its answers cannot replay them
        lse = [p.tensor(inputs.randn(*x.shape)) for x in d_lse]
        return [p.tensor(inputs.randn(*shape)) for _ in range(4)] + lse + [None, causal]

    p.call(G(name), *fresh_args(), catch=True)
    graph = G("torch").attr("autograd").attr("graph")
    hooks = p.call(graph.attr("saved_tensors_hooks"), G("torch").attr("device"), G("torch").attr("device"))
    p.call(hooks.attr("__enter__"))
    watched_args = fresh_args()
    watched = p.call(G(name), *watched_args, trace=0, catch=True)
    p.call(hooks.attr("__exit__"), None, None, None)
    # saved-tensor hooks the function sets itself would take over from the ones above: here setting them raises
    disabled = p.call(graph.attr("disable_saved_tensors_hooks"), OWN_HOOKS)
    p.call(disabled.attr("__enter__"))
    p.call(G(name), *fresh_args(), catch=True)
    p.call(disabled.attr("__exit__"), None, None, None)
    p.record(watched, "the gradients it returned while watched")
    p.record(p.call(G(name), *watched_args), "the gradients it returns for the same inputs unwatched")

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        plain, trace, hooked, own = (record if isinstance(record, dict) else {} for record in got[:4])
        if plain.get("caught") is not None:
            return None  # it raises anyway: the other checks say why
        used = library_backward_ops((trace.get("trace") or {}).get("ops") or ())
        if used:
            return with_hint(f"{what}: it ran aten.{used[0]}, a library's kernel", AUTOGRAD)
        for caught in (hooked.get("caught"), own.get("caught")):
            if caught is not None:
                return with_hint(f"{what}: it built an autograd graph (here it raised {caught.get('raised')}: "
                                 f"{caught.get('message', '')[:200]}; called plainly it did not)", AUTOGRAD)
        if len(got) < 6 or compare(got[4], got[5], "", Expect("", atol=1e-6, rtol=1e-6)):
            return with_hint(f"{what}: watched, it returned other gradients than unwatched on the same inputs",
                             AUTOGRAD)
        return None

    return Check(what, p, judge=judge)


def forwards_check(inputs, name, causal):
    """Few queries, a long head_dim: a backward worked out runs the softmax's exponentials a few times per query at
    most, and holds a few tensors the inputs' size; central differences evaluate the forward twice per input element,
    one by one (many exponentials) or all at once (a batch of perturbed copies, many times the inputs' size)."""
    shape = (1, 1, 2, 64)
    d_lse = [inputs.randn(*shape[:-1])] if name == "attention_lse_backward" else []
    what = f"{name} on random {shape} inputs, causal={causal}, the operations it ran and the memory it took"
    tensors = [inputs.randn(*shape) for _ in range(4)] + d_lse
    given = sum(x.numel() * 8 for x in tensors)  # the inputs' bytes, were they float64
    most_exponentials = 4 * shape[0] * shape[1] * shape[2] + 16
    p = Program()
    p.call(G(name), *(p.tensor(x) for x in tensors), None, causal, measure=True, trace=0, catch=True)

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        memory, trace, caught = (record if isinstance(record, dict) else {} for record in got[:3])
        if caught.get("caught") is not None:
            return None  # it raises anyway: the other checks say why
        ops = (trace.get("trace") or {}).get("ops")
        peak = (memory.get("memory") or {}).get("peak_bytes")
        if not isinstance(ops, list) or not isinstance(peak, int):
            return f"{what}: the operations it ran or its memory were not recorded"
        exponentials = sum(op in EXPONENTIALS for op in ops)
        if exponentials > most_exponentials:
            return with_hint(f"{what}: it ran {exponentials}{'+' if len(ops) >= 4000 else ''} exponentials "
                             f"(exp, softmax, ...) for {shape[2]} queries, more than {most_exponentials}", FORWARDS)
        if peak > 8 * given:
            return with_hint(f"{what}: it held {peak:,} bytes at once, more than 8 times its inputs' {given:,} "
                             "(in float64)", FORWARDS)
        return None

    return Check(what, p, judge=judge)


def backward_checks(inputs, causal):
    checks = [by_hand_check(inputs, "attention_backward", (1, 2, 6, 4), causal),
              forwards_check(inputs, "attention_backward", causal)]
    for (b, h, t, d), scale in [((1, 1, 1, 3), None), ((1, 2, 5, 4), None), ((2, 3, 7, 8), None),
                                ((1, 2, 9, 4), 0.7), ((2, 1, 6, 16), 3.0)]:
        q, k, v, d_out = (inputs.randn(b, h, t, d) for _ in range(4))
        what = (f"attention_backward on random {(b, h, t, d)} inputs, scale={scale}"
                + (", causal=True" if causal else ""))
        check = call_check(what, "attention_backward", q, k, v, d_out, scale, causal, hint=GENERIC, atol=1e-4)
        check.mistakes = BACKWARD_MISTAKES + SQUARE_ONLY_MISTAKES
        named_failures(check)
        checks.append(check)
    if causal:  # fewer queries than keys: the queries are the last positions (bottom-right)
        q, d_out = inputs.randn(2, 2, 3, 4), inputs.randn(2, 2, 3, 4)
        k, v = inputs.randn(2, 2, 8, 4), inputs.randn(2, 2, 8, 4)
        check = call_check("attention_backward on random q (2, 2, 3, 4) and k, v (2, 2, 8, 4), causal=True",
                           "attention_backward", q, k, v, d_out, None, True, hint=GENERIC, atol=1e-4)
        check.mistakes = BACKWARD_MISTAKES
        named_failures(check, (q, k, v, d_out, None, True), RAISING_MISTAKES)
        checks.append(check)
    return checks


def attention_backward(inputs):
    return backward_checks(inputs, causal=False)


def attention_backward_causal(inputs):
    return backward_checks(inputs, causal=True)


def attention_lse_backward(inputs):
    """The lesson differentiates O only; here L = logsumexp(S) is an output too, with its own gradient."""
    checks = [by_hand_check(inputs, "attention_lse_backward", (2, 1, 5, 4), True),
              forwards_check(inputs, "attention_lse_backward", False)]
    for (b, h, t, d), causal in [((1, 1, 4, 3), False), ((2, 2, 7, 4), True), ((1, 3, 9, 8), False),
                                 ((2, 1, 5, 16), True)]:
        q, k, v, d_out = (inputs.randn(b, h, t, d) for _ in range(4))
        d_lse = inputs.randn(b, h, t)
        check = call_check(f"attention_lse_backward on random {(b, h, t, d)} inputs, causal={causal}",
                           "attention_lse_backward", q, k, v, d_out, d_lse, None, causal, hint=LSE_GENERIC,
                           atol=1e-4)
        check.mistakes = LSE_MISTAKES
        named_failures(check, (q, k, v, d_out, d_lse, None, causal), LSE_RAISING_MISTAKES)
        checks.append(check)
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 2: FlashAttention as a torch.autograd.Function (the probe records grad_fn.saved_tensors as
# {'tuple': [{'tensor': {...}}]})
# ---------------------------------------------------------------------------------------------------------------

SAVED_WEIGHTS = ("a (T, T) tensor is saved for the backward: save the output and the log-sum-exp L = m + log(l), "
                 "shape (b, H, T), and recompute each tile's weights as exp(s - L) in the backward")
NO_L = "save the log-sum-exp L (b, H, T) with ctx.save_for_backward: the backward recomputes the weights from it"
RECOMPUTE = ("each tile's weights are exp(scale * q_i k_j^T - L_i) (masked like the forward): subtracting L "
             "normalises them, no second pass over the row")
LAST_TILE = "the last tile may be shorter than block_q or block_k: range(0, T, block) with x[..., i:i + block] covers all"

FLASH_FORWARD_GENERIC = ("none of the usual mistakes gives this output: per key tile, m_new = max(m, rowmax(s)); "
                         "rescale the running sum and output by exp(m - m_new); add exp(s - m_new) and its product with "
                         "the tile's values; cover every tile (the last may be shorter); divide by the sum at the "
                         "end")
FLASH_BACKWARD_GENERIC = ("none of the usual mistakes gives these gradients: per tile, P is the forward's weights "
                          "rebuilt from the saved L, exp(scale * q_i k_j^T - L_i), masked as the forward masked them; "
                          "d_v_j += P^T dO_i; dS = P * (dO_i v_j^T - D_i) with D = rowsum(dO * O) over the whole row; "
                          "d_q_i += scale * dS k_j; d_k_j += scale * dS^T q_i")
FLASH_NOT_RESCALED = ("when the running maximum grows, the output kept so far was weighted by exp(s - m_old): multiply "
                      "it by exp(m_old - m_new), as the running sum is")
FLASH_SUM_NOT_RESCALED = ("when the running maximum grows, the running sum was not multiplied by exp(m_old - m_new), "
                          "as the output kept so far is")
FLASH_LSE_NO_LOG = "the saved L is m + l: the log-sum-exp is m + log(l), so the weights exp(s - L) come out wrong"
FLASH_BACKWARD_UNMASKED = ("the backward's tiles were not masked: with causal, each tile's recomputed weights must be "
                           "masked as the forward masked them (keys after their query get score -inf, so P = 0)")
FLASH_NOT_FROM_L = ("the backward's weights exp(scale * q_i k_j^T) were not normalised: they are the forward's weights "
                    "rebuilt from the saved L, exp(scale * q_i k_j^T - L_i)")
FLASH_TILE_D = ("D = rowsum(dO * O) is one number per query over its whole row of keys: it was summed within one key "
                "tile (rowsum(dP * P) of the tile) instead")
FLASH_OVERWRITE = ("d_k and d_v of a key tile sum the shares of every query tile: add them (+=), an assignment keeps "
                   "only the last query tile's share")
FLASH_GRADIENT_COUNT = ("backward returns one gradient per argument of forward, in order: d_q, d_k, d_v and None for "
                        "causal, block_q and block_k")


def mistaken_flash(rescale=True, rescale_sum=True, last_tile=True, bottom_right=True, log_l=True, backward_mask=True,
                   tile_d=False, backward_scale=True, accumulate=True, subtract_l=True):
    """A FlashAttention (autograd.Function) with one known mistake, to name it by running it."""

    def scores(q, k, causal, mask=True):
        t_q, t_k = q.shape[-2], k.shape[-2]
        s = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        if causal and mask:
            blocked = torch.ones(t_q, t_k, dtype=torch.bool).triu(1 + (t_k - t_q) * bottom_right)
            s = s.masked_fill(blocked, float("-inf"))
        return s

    class Mistaken(torch.autograd.Function):
        @staticmethod
        # the answer key's forward with the mistake put in
        def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
            s, t_k = scores(q, k, causal), k.shape[-2]
            m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype)
            l, acc = torch.zeros_like(m), torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
            for j in range(0, t_k if last_tile else t_k - block_k + 1, block_k):
                m_new = torch.maximum(m, s[..., j:j + block_k].amax(-1))
                p = torch.exp(s[..., j:j + block_k] - m_new[..., None])
                alpha = torch.exp(m - m_new)
                l = (alpha * l if rescale_sum else l) + p.sum(-1)
                acc = (alpha[..., None] * acc if rescale else acc) + p @ v[..., j:j + block_k, :]
                m = m_new
            out = acc / l[..., None]
            ctx.save_for_backward(q, k, v, out, m + (torch.log(l) if log_l else l))
            ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
            return out

        @staticmethod
        def backward(ctx, grad):
            q, k, v, out, lse = ctx.saved_tensors
            scale = q.shape[-1] ** -0.5 if backward_scale else 1.0
            p = torch.exp(scores(q, k, ctx.causal, backward_mask) - (lse[..., None] if subtract_l else 0))
            d_p = grad @ v.transpose(-2, -1)
            if tile_d:
                row = torch.cat([(p * d_p)[..., j:j + ctx.block_k].sum(-1, keepdim=True).expand(
                    *p.shape[:-1], min(ctx.block_k, p.shape[-1] - j)) for j in range(0, p.shape[-1], ctx.block_k)], -1)
            else:
                row = (grad * out).sum(-1, keepdim=True)
            d_s = p * (d_p - row) * scale
            if not accumulate:  # each key tile keeps the share of the last query tile only
                last = (q.shape[-2] - 1) // ctx.block_q * ctx.block_q
                p, d_s_k, q_k, grad_k = p[..., last:, :], d_s[..., last:, :], q[..., last:, :], grad[..., last:, :]
            else:
                d_s_k, q_k, grad_k = d_s, q, grad
            return (d_s @ k, d_s_k.transpose(-2, -1) @ q_k, p.transpose(-2, -1) @ grad_k, None, None, None)

    return Mistaken


FLASH_FORWARD_MISTAKES = ((FLASH_NOT_RESCALED, {"FlashAttention": mistaken_flash(rescale=False)}),
                          (FLASH_SUM_NOT_RESCALED, {"FlashAttention": mistaken_flash(rescale_sum=False)}),
                          (LAST_TILE, {"FlashAttention": mistaken_flash(last_tile=False)}),
                          (TOP_LEFT, {"FlashAttention": mistaken_flash(bottom_right=False)}))
FLASH_BACKWARD_MISTAKES = FLASH_FORWARD_MISTAKES + (
    (FLASH_LSE_NO_LOG, {"FlashAttention": mistaken_flash(log_l=False)}),
    (FLASH_BACKWARD_UNMASKED, {"FlashAttention": mistaken_flash(backward_mask=False)}),
    (FLASH_NOT_FROM_L, {"FlashAttention": mistaken_flash(subtract_l=False)}),
    (FLASH_TILE_D, {"FlashAttention": mistaken_flash(tile_d=True)}),
    (NO_SCALE, {"FlashAttention": mistaken_flash(backward_scale=False)}),
    (FLASH_OVERWRITE, {"FlashAttention": mistaken_flash(accumulate=False)}))


def key_shape(shape, t_k):
    return shape if t_k is None else (*shape[:2], t_k, shape[3])


def flash_forward_check(inputs, shape, causal, block_q, block_k, t_k=None):
    keys = "" if t_k is None else f" (k, v {key_shape(shape, t_k)})"
    what = (f"FlashAttention.apply on random {shape}{keys} inputs, causal={causal}, block_q={block_q}, "
            f"block_k={block_k}")
    p = Program()
    q_data = inputs.randn(*shape)
    k_data, v_data = (inputs.randn(*key_shape(shape, t_k)) for _ in range(2))
    q = p.call(p.tensor(q_data).attr("requires_grad_"), grad=True)
    k, v = p.tensor(k_data), p.tensor(v_data)
    out = p.call(G("FlashAttention").attr("apply"), q, k, v, causal, block_q, block_k, grad=True)
    p.record(out, "the output", RECOMPUTE)
    p.record(out.attr("grad_fn").attr("saved_tensors"), "the tensors it saved")
    b, h, t, _ = shape
    given = [x.double() for x in (q_data, k_data, v_data)]

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = compare(got[0], want[0], f"{what}: the output", Expect("", atol=1e-4, rtol=1e-4))
        if problem:
            return with_hint(problem, FLASH_FORWARD_GENERIC)
        saved = got[1].get("tuple") if isinstance(got[1], dict) else None
        tensors = ([x["tensor"] for x in saved if isinstance(x, dict) and isinstance(x.get("tensor"), dict)]
                   if isinstance(saved, list) else None)
        if tensors is None:
            return f"{what}: the tensors it saved were not recorded"
        output = decode_tensor(want[0]["tensor"], torch.float64)
        known = given + [output]  # q, k, v and O have (T, T) trailing sizes when head_dim == T: they are not weights

        def weights_like(spec):
            size = tuple(spec.get("shape", ()))
            if len(size) < 2 or size[-2:] != (t, key_shape(shape, t_k)[2]) or t == 1:
                return False
            value = decode_tensor(spec, torch.float64)
            return not any(x.shape == value.shape and torch.allclose(x, value, atol=1e-3, rtol=1e-3) for x in known)

        if any(weights_like(spec) for spec in tensors):
            return f"{what}: " + SAVED_WEIGHTS
        if [tuple(spec.get("shape", ())) for spec in tensors].count((b, h, t)) != 1:
            return f"{what}: " + NO_L
        return None

    return Check(what, p, judge=judge, mistakes=FLASH_FORWARD_MISTAKES)


def flash_backward_check(inputs, shape, causal, block_q, block_k, t_k=None):
    keys = "" if t_k is None else f" (k, v {key_shape(shape, t_k)})"
    what = (f"FlashAttention.apply(...).backward(d_out) on random {shape}{keys} inputs, causal={causal}, "
            f"block_q={block_q}, block_k={block_k}")
    p = Program()
    leaves = [p.call(p.tensor(inputs.randn(*size)).attr("requires_grad_"), grad=True)
              for size in (shape, key_shape(shape, t_k), key_shape(shape, t_k))]
    out = p.call(G("FlashAttention").attr("apply"), *leaves, causal, block_q, block_k, grad=True)
    p.call(out.attr("backward"), p.tensor(inputs.randn(*shape)), grad=True)
    for name, leaf in zip(("d_q", "d_k", "d_v"), leaves):
        p.record(leaf.attr("grad"), name, FLASH_BACKWARD_GENERIC)
    check = Check(what, p, mistakes=FLASH_BACKWARD_MISTAKES)

    def judge(got, want):
        found = first_raised(got)
        if found and "incorrect number of gradients" in str(found[1].get("message")):
            return NamedMistake(raised_message(what, found[1], FLASH_GRADIENT_COUNT).split("\n  likely mistake: ")[0]
                                + f"\n  likely mistake: {FLASH_GRADIENT_COUNT}")
        return default_judge(check, got, want)

    check.judge = judge
    return check


FLASH_LIBRARY = ("write the tiles yourself: a running maximum and sum in the forward, each tile's weights recomputed "
                 "from L in the backward; PyTorch's attention kernels (scaled_dot_product_attention, its flash and "
                 "memory-efficient kernels, through torch.ops too) and autograd's backward kernels are what it is "
                 "compared with")


def flash_library_check(inputs, shape, causal, block_q, block_k, part):
    """The forward (part="forward") or the backward, traced: no library attention or backward kernel ran."""
    call = "FlashAttention.apply" if part == "forward" else "FlashAttention.apply(...).backward(d_out)"
    what = (f"{call} on random {shape} inputs, causal={causal}, block_q={block_q}, block_k={block_k}, the "
            "operations it ran")
    p = Program()
    leaves = [p.call(p.tensor(inputs.randn(*shape)).attr("requires_grad_"), grad=True) for _ in range(3)]
    out = p.call(G("FlashAttention").attr("apply"), *leaves, causal, block_q, block_k, grad=True,
                 trace=0 if part == "forward" else None)
    if part == "backward":
        p.call(out.attr("backward"), p.tensor(inputs.randn(*shape)), grad=True, trace=0)

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        ops = (got[0].get("trace") or {}).get("ops") if got and isinstance(got[0], dict) else None
        if not isinstance(ops, list):
            return f"{what}: the operations of its {part} were not recorded"
        used = library_backward_ops(ops)
        if used:
            return with_hint(f"{what}: its {part} ran aten.{used[0]}, a library's kernel", FLASH_LIBRARY)
        return None

    return Check(what, p, judge=judge)


ENGINE = ("the backward is written by hand, tile by tile: it runs no autograd itself (torch.autograd.grad or "
          ".backward() over the recomputed forward keeps every tile's graph alive, all (T, T) of it)")


def flash_engine_check(inputs, shape, causal, block_q, block_k):
    """The backward, run twice: with autograd unable to save a tensor, and with saved-tensor hooks of its own refused.
    The forward saved what it saves before either; a backward by hand builds no graph of its own."""
    what = (f"FlashAttention.apply(...).backward(d_out) on random {shape} inputs, causal={causal}, block_q={block_q}, "
            f"block_k={block_k}, with autograd unable to save a tensor in the backward")
    p = Program()
    graph = G("torch").attr("autograd").attr("graph")
    d_out = p.tensor(inputs.randn(*shape))
    data = [inputs.randn(*shape) for _ in range(3)]
    torch_device = G("torch").attr("device")
    for context, args in (("saved_tensors_hooks", (torch_device, torch_device)),
                          ("disable_saved_tensors_hooks", (OWN_HOOKS,))):
        leaves = [p.call(p.tensor(x).attr("requires_grad_"), grad=True) for x in data]
        out = p.call(G("FlashAttention").attr("apply"), *leaves, causal, block_q, block_k, grad=True)
        hooks = p.call(graph.attr(context), *args)
        p.call(hooks.attr("__enter__"))
        p.call(out.attr("backward"), d_out, grad=True, catch=True)
        p.call(hooks.attr("__exit__"), None, None, None)

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        for record in got[:2]:
            caught = record.get("caught") if isinstance(record, dict) else None
            if caught is not None:
                return with_hint(f"{what}: it raised {caught.get('raised')}: {caught.get('message', '')[:200]}: "
                                 "its backward built an autograd graph", ENGINE)
        return None

    return Check(what, p, judge=judge)


FLASH_CASES = [((1, 2, 10, 4), False, 4, 3), ((1, 1, 1, 4), False, 1, 1), ((2, 1, 9, 8), True, 2, 4),
               ((1, 2, 16, 4), True, 16, 16), ((2, 2, 7, 4), True, 32, 5), ((1, 1, 13, 16), False, 5, 1),
               ((1, 2, 8, 8), True, 4, 4),  # head_dim == T: q, k, v and O end in (T, T) too
               ((1, 2, 5, 4), True, 2, 3, 11)]  # fewer queries than keys: the queries are the last positions


BF16_LIMIT = 0.004  # relative RMS error: rounding the result to bfloat16 gives about 0.002
BF16_ACCUMULATION = ("bfloat16 keeps 8 significant bits, and sums over many tiles lose the small terms: convert each "
                     "tile to float32 (.float()), keep the running maximum, sum, output and the gradients' sums in "
                     "float32, and cast only the results back to the inputs' dtype")
TT_IN_BACKWARD = ("the backward built a (T, T) tensor: recompute the weights tile by tile from L, as the forward "
                  "computes them, rather than the whole matrix (Part 1's attention_backward does that)")


def relative_rms(got, want):
    return ((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt()).item()


def bfloat16_check(inputs, shape, causal, block_q, block_k, backward=True):
    call = "FlashAttention.apply(...).backward(d_out)" if backward else "FlashAttention.apply"
    what = f"{call} on random bfloat16 {shape} inputs, causal={causal}, block_q={block_q}, block_k={block_k}"
    q, k, v, d_out = (inputs.randn(*shape).bfloat16() for _ in range(4))
    exact = [x.double().requires_grad_() for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*exact, is_causal=causal)
    out.backward(d_out.double())
    want = [out.detach()] + [x.grad for x in exact] * backward
    p = Program()
    leaves = [p.call(p.tensor(x).attr("requires_grad_"), grad=True) for x in (q, k, v)]
    result = p.call(G("FlashAttention").attr("apply"), *leaves, causal, block_q, block_k, grad=True)
    p.record(result, "the output")
    if backward:
        p.call(result.attr("backward"), p.tensor(d_out), grad=True)
        for name, leaf in zip(("d_q", "d_k", "d_v"), leaves):
            p.record(leaf.attr("grad"), name)

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        for record, expected, name in zip(got, want, ("the output", "d_q", "d_k", "d_v")):
            spec = record.get("tensor") if isinstance(record, dict) else None
            if spec is None:
                return f"{what}: {name} is {describe(record)}, not a tensor"
            tensor = decode_tensor(spec, torch.float64)
            if tensor.shape != expected.shape:
                return f"{what}: {name} has shape {tuple(tensor.shape)}, expected {tuple(expected.shape)}"
            error = relative_rms(tensor, expected)
            if not error <= BF16_LIMIT:  # NaN fails too
                return with_hint(f"{what}: {name} differs from the exact result (float64) by {error:.2%} "
                                 f"(relative RMS), more than the {BF16_LIMIT:.1%} that rounding the result to bfloat16 "
                                 "explains", BF16_ACCUMULATION)
        return None

    return Check(what, p, judge=judge)


def flash_memory_check(inputs, num_tokens, causal, part):
    """Nothing of size (T, T) in the forward (part="forward") or in the backward (part="backward") alone."""
    call = "FlashAttention.apply" if part == "forward" else "FlashAttention.apply(...).backward(d_out)"
    what = f"{call} on random (1, 2, {num_tokens}, 8) inputs, causal={causal}, block_q=16, block_k=16"
    limit = num_tokens * num_tokens // 2
    p = Program()
    leaves = [p.call(p.tensor(inputs.randn(1, 2, num_tokens, 8)).attr("requires_grad_"), grad=True) for _ in range(3)]
    out = p.call(G("FlashAttention").attr("apply"), *leaves, causal, 16, 16, grad=True, measure=part == "forward")
    if part == "backward":
        p.call(out.attr("backward"), p.tensor(inputs.randn(1, 2, num_tokens, 8)), grad=True, measure=True)

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        memory = got[0].get("memory") if isinstance(got[0], dict) else None
        largest = memory.get("largest_numel") if isinstance(memory, dict) else None
        if not isinstance(largest, int) or isinstance(largest, bool):
            return f"{what}: the memory of its {part} was not recorded"
        if largest >= limit:
            return with_hint(f"{what}: its {part} made a tensor of {largest:,} entries, as large as the (T, T) = "
                             f"({num_tokens}, {num_tokens}) weights of one head",
                             RECOMPUTE if part == "forward" else TT_IN_BACKWARD)
        return None

    return Check(what, p, judge=judge)


KEPT_WEIGHTS = ("the forward keeps the weights alive for the backward (on ctx or elsewhere), as much memory as the "
                "(T, T) matrices: save only what the backward needs, O and L = m + log(l), and recompute each tile's "
                "weights from L")


def flash_retained_check(inputs, causal, num_tokens=256):
    """What FlashAttention's forward leaves alive for the backward (saved or not): far less than the (T, T)
    weights."""
    what = (f"FlashAttention.apply on random (1, 2, {num_tokens}, 8) inputs, causal={causal}, block_q=16, block_k=16: "
            "the memory it left alive after returning")
    weights_bytes = 2 * num_tokens * num_tokens * 4  # both heads' (T, T) weights in float32
    p = Program()
    leaves = [p.call(p.tensor(inputs.randn(1, 2, num_tokens, 8)).attr("requires_grad_"), grad=True) for _ in range(3)]
    out = p.call(G("FlashAttention").attr("apply"), *leaves, causal, 16, 16, grad=True, measure=True)
    p.record(out.attr("grad_fn").attr("saved_tensors"), "the tensors it saved")

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        memory = got[0].get("memory") if isinstance(got[0], dict) else None
        kept = memory.get("retained_bytes") if isinstance(memory, dict) else None
        saved = got[1].get("tuple") if len(got) > 1 and isinstance(got[1], dict) else None
        if not isinstance(kept, int) or isinstance(kept, bool) or not isinstance(saved, list):
            return f"{what}: the memory it left alive was not recorded"
        # what save_for_backward holds is the forward's part to judge: here, only what is kept besides it
        for record in saved:
            spec = record.get("tensor") if isinstance(record, dict) else None
            if isinstance(spec, dict) and isinstance(getattr(torch, str(spec.get("dtype")), None), torch.dtype):
                itemsize = torch.empty((), dtype=getattr(torch, spec["dtype"])).element_size()
                kept -= math.prod(spec.get("shape") or []) * itemsize
        if kept >= weights_bytes // 2:
            return with_hint(f"{what}: besides what it saved for the backward, {kept:,} bytes it made were still "
                             f"alive, as many as half of both heads' (T, T) weights ({weights_bytes:,} bytes in "
                             "float32)", KEPT_WEIGHTS)
        return None

    return Check(what, p, judge=judge)


def flash_attention_forward(inputs):
    return ([flash_library_check(inputs, (1, 2, 9, 4), True, 4, 4, "forward")] +
            [flash_forward_check(inputs, *case) for case in FLASH_CASES] +
            [bfloat16_check(inputs, (1, 2, 64, 16), False, 16, 16, backward=False)] +
            [flash_memory_check(inputs, 64, causal, "forward") for causal in (False, True)])


def flash_attention_backward(inputs):
    return ([flash_engine_check(inputs, (1, 2, 7, 4), True, 4, 2),
             flash_library_check(inputs, (2, 1, 7, 4), True, 3, 2, "backward")] +
            [flash_backward_check(inputs, *case) for case in FLASH_CASES] +
            [bfloat16_check(inputs, (1, 2, 64, 16), False, 16, 16), bfloat16_check(inputs, (2, 1, 48, 8), True, 16, 8)] +
            [flash_memory_check(inputs, 64, causal, "backward") for causal in (False, True)] +
            [flash_retained_check(inputs, causal) for causal in (False, True)])


# ---------------------------------------------------------------------------------------------------------------
# Part 4: the forward as a Triton kernel
# ---------------------------------------------------------------------------------------------------------------

TRITON_HINT = ("each program holds BLOCK_Q queries of one (sequence, head): mask the loads past T (other=0.0), give "
               "the scores past T or in the future -inf, rescale the running output and sum by exp(m - m_new) when "
               "the maximum grows, divide by the sum once at the end")


TRITON_NO_SCALE = "the scores are not multiplied by scale = 1 / sqrt(head_dim) before the softmax"
TRITON_NO_CAUSAL = ("when causal, a key after its query must get no weight: give those scores -inf, comparing the "
                    "key's position with the query's (rows[:, None] and cols[None, :] in the kernel)")
TRITON_DIAGONAL = ("when causal, a query attends to itself as well: keep the keys at or before its position, not only "
                   "the ones strictly before it (the first query is then left with no key, and its row is nan)")
TRITON_PADDED_KEYS = ("the keys past T that a block's masked load filled with zeros got weight: their scores are 0, "
                      "not -inf; mask the scores of keys past T as well as the loads")

TRITON_NOT_RESCALED = ("when the running maximum grows, the output kept so far was weighted by exp(s - m_old): multiply "
                       "it by exp(m_old - m_new), as the running sum is")


def unrescaled_attention(q, k, v, causal, block_k):
    """What a kernel computes when it rescales the running sum but not the running output as the maximum grows."""
    t = q.shape[-2]
    s = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype)
    l, acc = torch.zeros_like(m), torch.zeros_like(q)
    for j in range(0, t, block_k):
        m_new = torch.maximum(m, s[..., j:j + block_k].amax(-1))
        p = torch.exp(s[..., j:j + block_k] - m_new[..., None])
        l = l * torch.exp(m - m_new) + p.sum(-1)
        acc, m = acc + p @ v[..., j:j + block_k, :], m_new
    return acc / l[..., None]


def padded_keys_attention(q, k, v, block_k):
    """What a kernel computes when the zero-filled keys past T in the last block of block_k keys keep score 0."""
    pad = -q.shape[-2] % block_k
    k, v = (F.pad(x, (0, 0, 0, pad)) for x in (k, v))
    return F.scaled_dot_product_attention(q, k, v)


# What the launcher runs, traced: Triton's interpreter runs the kernel in numpy, which PyTorch does not see, so attention
# computed by PyTorch in the launcher shows as its operations. The probe records each launch in the interpreter (the
# most elements of k one load read, the elements stored into each argument) and how many elements of the result hold a
# value a kernel stored, or a value a kernel loaded from memory no kernel wrote and stored unchanged (a copy).
LAUNCHER_REFUSED = {"_softmax", "_log_softmax", "_safe_softmax", "logsumexp", "exp", "exp2", "mm", "bmm", "baddbmm",
                    "addmm", "addbmm", "matmul", "dot", "mv"}
NOT_LAUNCHED = "the kernel never ran: launch it on its grid, kernel[grid](...), and return what it stored"
NOT_STORED = ("return what the kernel stored (the tensor it wrote, or a view of it): the scores, the softmax and the "
              "weighted sum are computed in the kernel, not before or after the launch")
PART_STORED = ("every element of the output is stored by the kernel: each block of queries of each (sequence, head) "
               "needs its program on the grid, and the store's mask keeps only what lies past T or head_dim out")
COPIED = ("the kernel stored values it loaded, unchanged: the output was computed before the launch; the kernel must "
          "compute it from q, k and v")
MOST_KEYS = 128  # the task: a program holds at most this many keys at a time, whatever T is
WHOLE_ROW = (f"walk over the keys in blocks of BLOCK_K (at most {MOST_KEYS}), keeping a running maximum, sum and "
             "output per query: no program holds a whole row of keys")
IN_THE_LAUNCHER = ("the launcher computes attention with PyTorch: the scores, the softmax and the weighted sum belong "
                   "in the kernel, which the launcher only prepares for (contiguous float32 tensors, an output) and "
                   "launches")


# The traced call watches k: a launcher that only prepares for the kernel copies k at most (to float32, contiguous,
# padded); an operation that computes with k's elements in PyTorch reads them.
COPIES = {"_to_copy", "clone", "constant_pad_nd", "lift_fresh_copy", "alias", "detach", "copy_", "set_", "view",
          "_unsafe_view", "reshape", "as_strided", "expand", "permute", "transpose", "t", "slice", "select", "unsqueeze",
          "squeeze", "split", "unbind", "contiguous"}


def launch_problem(what, record, head_dim):
    trace = (record.get("trace") or {}) if isinstance(record, dict) else {}
    ops, reads, launches = trace.get("ops"), trace.get("reads"), trace.get("launches")
    if not isinstance(ops, list) or not isinstance(reads, list) or not isinstance(launches, list):
        return f"{what}: the operations it ran or the kernels it launched were not recorded"
    used = library_backward_ops(ops, LAUNCHER_REFUSED)
    if used:
        return with_hint(f"{what}: the launcher ran aten.{used[0]}", IN_THE_LAUNCHER)
    computed = sorted({str(ops[read[0]]) for read in reads if isinstance(read, list) and read
                       and isinstance(read[0], int) and 0 <= read[0] < len(ops)} - COPIES)
    if computed:
        return with_hint(f"{what}: the launcher ran aten.{computed[0]} on k's elements", IN_THE_LAUNCHER)
    if not launches:
        return with_hint(f"{what}: no Triton kernel was launched", NOT_LAUNCHED)
    kernels = ", ".join(sorted({str(launch.get("kernel")) for launch in launches if isinstance(launch, dict)}))
    returned = trace.get("returned") if isinstance(trace.get("returned"), dict) else {}
    elements, stored, copied = (returned.get(key) for key in ("elements", "stored", "copied"))
    if all(isinstance(n, int) for n in (elements, stored, copied)):  # else no float tensor came: the values say so
        if stored < elements:
            return with_hint(f"{what}: {elements - stored:,} of the {elements:,} elements it returned hold no value "
                             f"a kernel it launched ({kernels}) stored", PART_STORED if stored else NOT_STORED)
        if elements >= 32 and 2 * copied > elements:
            return with_hint(f"{what}: {copied:,} of the {elements:,} elements it returned are values a kernel "
                             f"({kernels}) loaded from memory no kernel had written and stored unchanged", COPIED)
    tensors = [t for launch in launches if isinstance(launch, dict) for t in launch.get("tensors") or []
               if isinstance(t, dict) and t.get("watched") and isinstance(t.get("most_read"), int)]
    most = max((t["most_read"] for t in tensors), default=0)
    if most == 0:
        return with_hint(f"{what}: no kernel it launched ({kernels}) read k", COPIED)
    if most > MOST_KEYS * head_dim:
        return with_hint(f"{what}: one load in a kernel ({kernels}) read {most:,} elements of k at once, "
                         f"{-(-most // head_dim)} keys of head_dim {head_dim}, more than the {MOST_KEYS} keys a "
                         "program may hold", WHOLE_ROW)
    return None


def triton_check(inputs, shape, causal):
    what = f"flash_attention_forward_triton on random {shape} inputs, causal={causal}"
    q, k, v = (inputs.randn(*shape).double() for _ in range(3))
    want = as_data(F.scaled_dot_product_attention(q, k, v, is_causal=causal).float())
    mistakes = [(TRITON_NO_SCALE, F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1.0))]
    mistakes += [(TRITON_NOT_RESCALED, unrescaled_attention(q, k, v, causal, block)) for block in (16, 32, 64)]
    if causal:
        mistakes.append((TRITON_NO_CAUSAL, F.scaled_dot_product_attention(q, k, v)))
        if shape[-2] > 1:  # with one token, every way of making nan would match
            past = torch.ones(shape[-2], shape[-2], dtype=torch.bool).triu()
            scores = (q @ k.transpose(-2, -1) * shape[-1] ** -0.5).masked_fill(past, float("-inf"))
            mistakes.append((TRITON_DIAGONAL, torch.softmax(scores, dim=-1) @ v))
    elif shape[-2] % 16:
        mistakes += [(TRITON_PADDED_KEYS, padded_keys_attention(q, k, v, block)) for block in (16, 32, 64, 128)]
    p = Program()
    out = p.call(G("flash_attention_forward_triton"), p.tensor(q.float()), p.tensor(k.float()), p.tensor(v.float()),
                 causal, trace=1)
    p.record(out, "the output", TRITON_HINT)
    close = Expect("", atol=1e-4, rtol=1e-4)

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = launch_problem(what, got[0], shape[-1])
        if problem:
            return problem
        got = got[1:]
        problem = compare(got[0], want, f"{what}: the output", close)
        if problem is None:
            return None
        for hint, output in mistakes:
            if compare(got[0], as_data(output.float()), "", close) is None:
                return NamedMistake(with_hint(problem, hint))
        return with_hint(problem, TRITON_HINT)

    return Check(what, p, judge=judge)


# the last case is longer than the keys a program may hold (MOST_KEYS)
TRITON_CASES = [((1, 1, 1, 3), True), ((2, 1, 17, 8), True), ((1, 2, 33, 16), False), ((2, 2, 20, 5), True),
                ((1, 1, 130, 16), False)]


def flash_attention_forward_triton(inputs):
    return [triton_check(inputs, shape, causal) for shape, causal in TRITON_CASES]


CELLS = {
    "test_attention_backward": attention_backward,                # 3 points
    "test_attention_backward_causal": attention_backward_causal,  # 1 point
    "test_flash_attention_forward": flash_attention_forward,      # 2 points
    "test_flash_attention_backward": flash_attention_backward,    # 6 points
    "test_attention_lse_backward": attention_lse_backward,        # 2 points
    "test_flash_attention_forward_triton": flash_attention_forward_triton,  # 4 points
}

# The lesson draws the backward's tile order but never writes it (it recomputes the whole matrix through autograd), and
# its Triton kernel holds whole rows with no running maximum: (6 + 4) / 18 = 56% of the points.
TRANSFER = {"test_flash_attention_backward", "test_flash_attention_forward_triton"}
