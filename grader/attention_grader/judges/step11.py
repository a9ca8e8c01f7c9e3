"""Judges of step 11: rotary position embedding, padding masks, grouped-query attention with RoPE and a KV cache.

Known mistakes of apply_rope and of the module's positions are named by running the answer key with its
`apply_rope` replaced by the mistaken rotation. Grouped-query attention is graded on its own: the module calls the
student's apply_rope on tensors, which no stand-in table can answer, so each module check also records the student's
apply_rope on the module's own queries and keys (computed here from the loaded weights) at every call's positions,
and a module that computes the right attention from those rotations keeps its points whatever Part 1 gave. Mistakes
of the module that no replaced helper can reproduce (RoPE on the values, key/value heads in the wrong order, the
top-left mask) are named by computing them here from the same records. What the cache holds is judged by the bytes
the module keeps between cached calls, whatever its attributes are called; Part 4's training step is watched operation
by operation, forward and backward, so that a switch on torch.is_grad_enabled() cannot hand the masking to a library.
"""
import math
import re

import torch

from attention_course.probe import decode_tensor

from attention_grader.judging import (G, Check, NamedMistake, Program, _kind, call_check, compare, default_judge,
                                      expect_value_error, raised_message)
from attention_grader.judges.common import (ANY_VALUES, ATTENTION_SOFTMAX, dropout_check, first_raised, library_ops,
                                            linear_state, random_chunks, shape_problem, strictly, tensor_of,
                                            with_hint, with_other_hint)

INTERLEAVED = ("the pairs are interleaved (x[2i], x[2i + 1]), the RoFormer paper's convention; this course uses "
               "rotate-half pairs (x[i], x[i + head_dim/2]), as Hugging Face's Llama does")
FREQUENCIES = "the angle of pair i is p * base ** (-2 * i / head_dim): the exponent has a factor 2"
REVERSED = "the rotation goes the wrong way: the first half is x1 * cos - x2 * sin, the second x1 * sin + x2 * cos"
POSITIONS_IGNORED = "rotate row t by positions[t], not by t: the positions need not start at 0"
BASE_IGNORED = "use the base argument, not always 10000"
ROPE_HINT = "pair i is (x[i], x[i + head_dim/2]) rotated by p * base ** (-2 * i / head_dim)"

NOT_OFFSET = ("the new tokens are rotated at positions 0, 1, ... instead of kept, kept + 1, ...: with a cache, offset "
              "the positions by the number of kept tokens")
ROPE_ON_VALUES = "RoPE rotates queries and keys only, never the values"
WRONG_ORDER = ("query head h reads key/value head h // (num_heads // num_kv_heads), so consecutive query heads share "
               "one (repeat_interleave, or enable_gqa=True); repeat() or expand on the wrong dimension gives h % "
               "num_kv_heads")
TOP_LEFT = ("the causal mask is aligned to the top-left corner, as SDPA's is_causal=True does when T_q != T_k: with a "
            "cache, new query i may see keys 0 .. kept + i")
NO_ROPE = "apply RoPE to the queries and the keys, after the heads are split"
GQA_HINT = ("split heads, RoPE on queries and keys at positions kept, kept + 1, ..., query head h reads key/value head "
            "h // (num_heads // num_kv_heads), scores / sqrt(head_dim), causal mask, softmax, merge, out_proj")
PARAMETERS = ("W_query = nn.Linear(d_in, d_out, bias=qkv_bias), W_key and W_value = nn.Linear(d_in, num_kv_heads * "
              "head_dim, bias=qkv_bias), out_proj = nn.Linear(d_out, d_out)")
CACHE_HINT = ("with use_cache=True the new tokens attend to the kept keys and values and their own (torch.cat along "
              "the tokens), rotated at positions kept, kept + 1, ...; keep the concatenated keys and values")


# ---------------------------------------------------------------------------------------------------------------
# mistaken rotations (the answer key is run with one of these as its apply_rope)
# ---------------------------------------------------------------------------------------------------------------

def _rotated(x, angles, pairs_interleaved=False, direction=1.0):
    cos, sin = angles.cos(), direction * angles.sin()
    if pairs_interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def _angles(x, positions, base, exponent_factor=2.0):
    head_dim = x.shape[-1]
    if head_dim % 2:
        raise ValueError("head_dim must be even")
    exponents = torch.arange(head_dim // 2, dtype=x.dtype) * exponent_factor / head_dim
    return torch.as_tensor(positions).to(x.dtype).unsqueeze(-1) * base ** -exponents


def interleaved_rope(x, positions, base=10000.0):
    return _rotated(x, _angles(x, positions, base), pairs_interleaved=True)


def rope_without_factor_two(x, positions, base=10000.0):
    return _rotated(x, _angles(x, positions, base, exponent_factor=1.0))


def reversed_rope(x, positions, base=10000.0):
    return _rotated(x, _angles(x, positions, base), direction=-1.0)


def rope_ignoring_positions(x, positions, base=10000.0):
    return _rotated(x, _angles(x, torch.arange(x.shape[-2]), base))


def rope_ignoring_base(x, positions, base=10000.0):
    return _rotated(x, _angles(x, positions, 10000.0))


def no_rope(x, positions, base=10000.0):
    return x


def rope_one_rate(x, positions, base=10000.0):
    return _rotated(x, _angles(x, positions, base, exponent_factor=0.0))


def rope_overwriting_first_half(x, positions, base=10000.0):
    angles = _angles(x, positions, base)
    cos, sin, half = angles.cos(), angles.sin(), x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    x[..., :half] = first * cos - second * sin  # `first` is a view of x: it now holds the rotated numbers
    x[..., half:] = first * sin + second * cos
    return x


def rope_angles_transposed(x, positions, base=10000.0):
    return _rotated(x, _angles(x, positions, base).transpose(-2, -1))


ONE_RATE = ("every pair turns by the same angle, one radian per position: the exponent -2 * i / head_dim came out 0 "
            "(integer division, arange(0, head_dim, 2) // head_dim, or the index i left out); compute it in floats")
OVERWRITTEN = ("the first half was written into x before the second half was computed from it: x[..., :half] is a "
               "view of x, so x1 * sin + x2 * cos read the rotated numbers; compute both halves from the original x "
               "into a new tensor (torch.cat), without writing into x")
ANGLES_TRANSPOSED = ("the table of angles is (head_dim/2, T) where (T, head_dim/2) belongs: row t holds positions[t] "
                     "times the frequencies, torch.outer(positions, freqs), not torch.outer(freqs, positions)")
ROPE_MISTAKES = ((INTERLEAVED, {"apply_rope": interleaved_rope}),
                 (FREQUENCIES, {"apply_rope": rope_without_factor_two}),
                 (REVERSED, {"apply_rope": reversed_rope}),
                 (POSITIONS_IGNORED, {"apply_rope": rope_ignoring_positions}),
                 (BASE_IGNORED, {"apply_rope": rope_ignoring_base}),
                 (ONE_RATE, {"apply_rope": rope_one_rate}),
                 (OVERWRITTEN, {"apply_rope": rope_overwriting_first_half}),
                 (ANGLES_TRANSPOSED, {"apply_rope": rope_angles_transposed}))


# ---------------------------------------------------------------------------------------------------------------
# Part 1: apply_rope
# ---------------------------------------------------------------------------------------------------------------

def random_positions(inputs, num_tokens):
    kind = inputs.randint(0, 3)
    if kind == 0:
        return torch.arange(num_tokens)
    if kind == 1:
        start = inputs.randint(1, 200)
        return torch.arange(start, start + num_tokens)
    return torch.tensor([inputs.randint(0, 300) for _ in range(num_tokens)])


def overwrite_named(check, x, positions, base):
    """`check`, naming two mistakes that the answer key cannot run alike: the halves written into x one after the
    other (run in the answer key it changes x in float64, never exactly the student's float32 x), computed here; and
    a head_dim read from another dimension, read from the ValueError's numbers."""
    judge = check.judge or (lambda got, want: default_judge(check, got, want))

    def judged(got, want):
        problem = judge(got, want)
        found = first_raised(got)
        if problem and found and found[1].get("raised") == "ValueError" and x.shape[-1] % 2 == 0:
            said = [int(n) for n in re.findall(r"\d+", str(found[1].get("message")))]
            dims = [k for k in range(x.dim() - 1) if x.shape[k] in said and x.shape[k] != x.shape[-1]]
            if len(dims) == 1 and x.shape[-1] not in said:
                return NamedMistake(raised_message(check.what, found[1], f"head_dim was read from x.shape[{dims[0]}] "
                                                   f"= {x.shape[dims[0]]}, a dimension counted from the front: "
                                                   "head_dim is the last dimension, x.shape[-1]"))
        if problem and not isinstance(problem, NamedMistake) and got and _kind(got[0]) == "tensor":
            try:
                result = tensor_of(got[0])
                expected = rope_overwriting_first_half(x.double().clone(), positions, base)
                if result.shape == expected.shape and torch.allclose(result, expected, atol=1e-4, rtol=1e-4):
                    return NamedMistake(with_other_hint(problem, OVERWRITTEN))
            except (RuntimeError, ValueError, IndexError):
                return problem
        return problem

    check.judge = judged
    return check


def apply_rope(inputs):
    checks = []
    cases = [((1,), 1, 4, None), ((2, 3), 5, 8, None), ((), 6, 2, 10.0), ((4,), 3, 6, 500.0), ((2, 1, 2), 7, 10, None),
             ((3, 2), 4, 16, 100.0), ((1, 2), 9, 12, 10000.0)]
    cases.append(((inputs.randint(1, 4),), inputs.randint(1, 10), 2 * inputs.randint(1, 9), None))
    for leading, num_tokens, head_dim, base in cases:
        x = inputs.randn(*leading, num_tokens, head_dim)
        positions = random_positions(inputs, num_tokens)
        kwargs = {} if base is None else {"base": base}
        written = "" if base is None else f", base={base}"
        check = call_check(f"apply_rope on a random {tuple(x.shape)} tensor at {num_tokens} positions{written}",
                           "apply_rope", x, positions, hint=ROPE_HINT, atol=1e-4, rtol=1e-4, **kwargs)
        check.mistakes = ROPE_MISTAKES
        checks.append(strictly(overwrite_named(check, x, positions, 10000.0 if base is None else base)))
    for shape in [(3, 5), (2, 4, 7), (1, 1)]:
        p = Program()
        p.call(G("apply_rope"), p.tensor(torch.zeros(shape)), p.tensor(torch.arange(shape[-2])))
        checks.append(expect_value_error(f"apply_rope on a {shape} tensor (head_dim {shape[-1]})", p, "head_dim"))
    checks.append(bfloat16_check(inputs))
    return checks


BFLOAT16 = ("an angle of thousands of radians in bfloat16 (8 significant bits) is off by whole radians: compute the "
            "angles, cos and sin in float32 (or float64) and cast the result to x's dtype at the end")


def bfloat16_check(inputs):
    """In bfloat16 at positions up to 4,096: within a few hundredths of the float64 rotation of the same numbers."""
    num_tokens, head_dim = 24, 2 * inputs.randint(8, 33)
    x = inputs.randn(2, 2, num_tokens, head_dim).to(torch.bfloat16)
    positions = torch.tensor(sorted(inputs.randint(1000, 4097) for _ in range(num_tokens)))
    what = f"apply_rope on a random bfloat16 {tuple(x.shape)} tensor at positions between 1,000 and 4,096"
    p = Program()
    p.record(p.call(G("apply_rope"), p.tensor(x), p.tensor(positions)), "the result")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = shape_problem(got[0], want[0], f"{what}: the result", "return a tensor of x's shape")
        if problem:
            return problem
        if got[0]["tensor"]["dtype"] != "bfloat16":
            return with_hint(f"{what}: the result has dtype {str(got[0]['tensor']['dtype'])[:20]}, expected "
                             "bfloat16", "compute in float32 if you like, but return x's dtype")
        actual, expected = tensor_of(got[0]), tensor_of(want[0])
        if not torch.isfinite(actual).all():
            return with_hint(f"{what}: the result contains nan or inf", BFLOAT16)
        largest = (actual - expected).abs().max().item()
        if not torch.allclose(actual, expected, atol=0.05, rtol=0.02):
            return with_hint(f"{what}: the result is off by up to {largest:.3g} (allowed: 0.05 + 2% of the exact "
                             "value)", BFLOAT16)
        return None

    return Check(what, p, judge=judge)


# ---------------------------------------------------------------------------------------------------------------
# Part 2: padding_mask
# ---------------------------------------------------------------------------------------------------------------

TRANSPOSED_MASK = ("the mask is (num_tokens, b), one row per position: compare positions[None, :] with "
                   "lengths[:, None] for one row per sequence")
MASK_NUMBERS = ("the mask holds numbers, not bools: keep the bool tensor a comparison gives (no .float(), .int() or "
                "torch.where(..., 1, 0)), or convert with .bool()")


def mask_check(lengths, num_tokens):
    what = f"padding_mask(torch.tensor({lengths}), {num_tokens})"
    p = Program()
    p.record(p.call(G("padding_mask"), p.tensor(torch.tensor(lengths)), num_tokens), "the mask")

    def judge(got, want):
        found = first_raised(got)
        if found:
            allowed = [words for edge, words in ((num_tokens, "a length equal to num_tokens (no padding)"),
                                                 (0, "a length of 0 (all padding)")) if edge in lengths]
            if found[1].get("raised") == "ValueError" and allowed and all(0 <= n <= num_tokens for n in lengths):
                return NamedMistake(raised_message(what, found[1], f"{' and '.join(allowed)} is allowed: raise only "
                                                                   "when a length is below 0 or above num_tokens"))
            return raised_message(what, found[1])
        if "tensor" not in got[0] or got[0]["tensor"]["shape"] != want[0]["tensor"]["shape"]:
            if "tensor" in got[0] and tuple(got[0]["tensor"]["shape"]) == (num_tokens, len(lengths)) != (
                    len(lengths), num_tokens):
                return NamedMistake(with_hint(compare(got[0], want[0], what, ANY_VALUES) or f"{what} has the wrong "
                                              "shape", TRANSPOSED_MASK))
            return with_hint(compare(got[0], want[0], what, ANY_VALUES) or f"{what} has the wrong shape",
                             "one row per sequence, one column per position")
        if got[0]["tensor"]["dtype"] != "bool":
            return with_hint(f"{what} should be a bool tensor (True = padding), got dtype "
                             f"{str(got[0]['tensor']['dtype'])[:20]}", MASK_NUMBERS)
        actual, expected = tensor_of(got[0]).bool(), tensor_of(want[0]).bool()
        if torch.equal(actual, expected):
            return None
        problem = f"{what} has the wrong entries ({int((actual != expected).sum())} differ)"
        positions, ends = torch.arange(num_tokens), torch.tensor(lengths)[:, None]
        for wrong, hint in ((~expected, "True means padding, blocked (step 04's convention): True = keep is SDPA's "
                                        "attn_mask convention"),
                            (positions > ends, "off by one: position lengths[k] is the first padded one (>=, not >)"),
                            (positions < num_tokens - ends, "the padding goes at the end (right padding): the real "
                                                            "tokens come first")):
            if torch.equal(actual, wrong):
                return NamedMistake(with_hint(problem, hint))
        return with_hint(problem, "True at position j of sequence k when j >= lengths[k]")

    return Check(what, p, judge=judge)


def padding_mask(inputs):
    cases = [([3, 1, 4], 4), ([0, 2], 2), ([5], 7), ([1, 1, 1], 1), ([2, 6, 0, 3], 6)]
    num_tokens = inputs.randint(1, 12)
    cases.append(([inputs.randint(0, num_tokens + 1) for _ in range(inputs.randint(1, 6))], num_tokens))
    checks = [mask_check(lengths, num_tokens) for lengths, num_tokens in cases]
    for lengths, num_tokens in [([2, 5], 4), ([3, -1], 3), ([9], 8)]:
        p = Program()
        p.call(G("padding_mask"), p.tensor(torch.tensor(lengths)), num_tokens)
        checks.append(expect_value_error(f"padding_mask(torch.tensor({lengths}), {num_tokens})", p, "lengths"))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 3: GroupedQueryAttention
# ---------------------------------------------------------------------------------------------------------------

def gqa_state(inputs, d_in, d_out, kv_width, bias):
    state = linear_state(inputs, "W_query", d_in, d_out, bias)
    state.update(linear_state(inputs, "W_key", d_in, kv_width, bias))
    state.update(linear_state(inputs, "W_value", d_in, kv_width, bias))
    state.update(linear_state(inputs, "out_proj", d_out, d_out))
    return state


def heads_of(x, state, name, num_heads):
    """x @ W^T + b split into (b, num_heads, T, head_dim), in float64."""
    weight = state[f"{name}.weight"].double()
    projected = x.double() @ weight.T + (state[f"{name}.bias"].double() if f"{name}.bias" in state else 0.0)
    b, num_tokens, width = projected.shape
    return projected.view(b, num_tokens, num_heads, width // num_heads).transpose(1, 2)


HEAD_DIM_MISREAD = ("a ValueError about head_dim gave {n}, the number of {which} heads, where head_dim is {head_dim}: "
                    "head_dim was read from x.shape[1], the heads of (b, heads, T, head_dim), in apply_rope or the "
                    "module; head_dim is the last dimension, x.shape[-1]")


def head_dim_misread(what, found, heads, kv_heads, head_dim):
    """A NamedMistake when a forward pass raised a ValueError about head_dim whose numbers hold a number of heads
    and not head_dim (read from the error's numbers; the constructor had accepted head_dim)."""
    if not found or found[1].get("raised") != "ValueError":
        return None
    message = str(found[1].get("message"))
    said = [int(n) for n in re.findall(r"\d+", message)]
    if "head_dim" not in message.replace(" ", "_") or head_dim in said:
        return None
    for n, which in ((heads, "query"), (kv_heads, "key/value")):
        if n in said and n != head_dim:
            return NamedMistake(raised_message(what, found[1], HEAD_DIM_MISREAD.format(n=n, which=which,
                                                                                        head_dim=head_dim)))
    return None


def attention_from(rotated, values_of, calls, state, num_heads, *, kv_order="grouped", mask="bottom_right",
                   rotate_values=False, scale_width=None):
    """The module's outputs, call by call, computed here from rotated queries and keys (rotated[(start, size)] =
    (queries, keys, values rotated)): how the student's module should attend given the student's own apply_rope."""
    outputs, kept_keys, kept_values = [], None, None
    for start, size, use_cache, reset in calls:
        if reset:
            kept_keys = kept_values = None
        queries, keys, rotated_values = rotated[(start, size)]
        values = rotated_values if rotate_values else values_of[(start, size)]
        if use_cache:
            if kept_keys is not None:
                keys, values = torch.cat([kept_keys, keys], 2), torch.cat([kept_values, values], 2)
            kept_keys, kept_values = keys, values
        group = num_heads // keys.shape[1]
        reads = [h // group if kv_order == "grouped" else h % keys.shape[1] for h in range(num_heads)]
        keys, values = keys[:, reads], values[:, reads]
        scores = queries @ keys.transpose(-2, -1) / (scale_width or queries.shape[-1]) ** 0.5
        num_keys = keys.shape[2]
        offset = num_keys - size if mask == "bottom_right" else 0
        hidden = torch.arange(num_keys)[None, :] > torch.arange(size)[:, None] + offset
        weights = scores.masked_fill(hidden, float("-inf")).softmax(-1)
        merged = (weights @ values).transpose(1, 2).flatten(2)
        outputs.append(merged @ state["out_proj.weight"].double().T + state["out_proj.bias"].double())
    return outputs


SCALED_D_OUT = ("the scores are divided by sqrt(d_out): each head's dot products have head_dim numbers, so divide by "
                "sqrt(head_dim)")
ROPE_BEFORE_SPLIT = ("RoPE rotated the whole projection (d_out numbers, pairs (i, i + d_out/2) across heads) before the "
                     "heads were split: split the heads first, then rotate each head's head_dim numbers")


def rotated_whole(x, state, name, num_heads, positions, base):
    """x's projection rotated as one vector (head_dim = its whole width) by the course's rotation, then split into
    (b, num_heads, T, head_dim): RoPE applied before the heads are split."""
    projected = heads_of(x, state, name, 1)[:, 0]
    turned = _rotated(projected, _angles(projected, positions, base))
    b, num_tokens, width = turned.shape
    return turned.view(b, num_tokens, num_heads, width // num_heads).transpose(1, 2)


def gqa_check(inputs, d_in, d_out, heads, kv_heads, context, num_tokens, b, bias, base, mode="eval"):
    cls = "GroupedQueryAttention"
    dropout = 0.5 if mode == "eval" else 0.0
    head_dim = d_out // heads
    built = (f"{cls}({d_in}, {d_out}, {context}, {dropout}, num_heads={heads}, num_kv_heads={kv_heads}, "
             f"qkv_bias={bias}, rope_base={base}) in {mode} mode")
    state = gqa_state(inputs, d_in, d_out, kv_heads * head_dim, bias)
    x = inputs.randn(b, num_tokens, d_in)
    p = Program()
    module = p.call(G(cls), d_in, d_out, context, dropout, heads, kv_heads, qkv_bias=bias, rope_base=base)
    p.record(module, "its parameters", PARAMETERS, kind="parameters")
    p.load(module, state, hint=PARAMETERS)
    p.call(module.attr(mode))
    calls = []  # (start, size, use_cache, reset before) of every recorded module call

    def output(start, size, label, hint, use_cache=False, reset=False):
        chunk = x[:, start:start + size]
        p.record(p.call(module, p.tensor(chunk), use_cache=True) if use_cache else p.call(module, p.tensor(chunk)),
                 label, hint, atol=1e-5, rtol=1e-5)
        calls.append((start, size, use_cache, reset))

    output(0, num_tokens, f"the output on a random {tuple(x.shape)} input without the cache", GQA_HINT)
    for chunks in ([1] * num_tokens, random_chunks(inputs, num_tokens), [num_tokens]):
        p.call(module.attr("reset_cache"))
        first_call = True
        for start, size in zip(torch.tensor([0] + chunks).cumsum(0).tolist(), chunks):
            if size == 1 and start == num_tokens // 2:  # a call without the cache, between cached ones
                output(0, num_tokens, f"the output without the cache after {start} cached tokens",
                       "use_cache=False must neither read nor write the cache")
            output(start, size, f"the output of tokens {start}-{start + size - 1} with use_cache=True after {start} "
                   f"cached tokens (chunks {chunks})", CACHE_HINT, use_cache=True, reset=first_call)
            first_call = False
    output(0, num_tokens, "the output without the cache after cached calls", "use_cache=False must not read the "
           "cache")
    num_outputs = len(calls)
    # The student's own rotation of the module's queries, keys and values at every call's positions.
    queries, keys, values = (heads_of(x, state, name, n) for name, n in (("W_query", heads), ("W_key", kv_heads),
                                                                        ("W_value", kv_heads)))
    spans = sorted({(start, size) for start, size, _, _ in calls})
    for start, size in spans:
        positions = p.tensor(torch.arange(start, start + size))
        for projected in (queries, keys, values):
            rotated = p.call(G("apply_rope"), p.tensor(projected[:, :, start:start + size].float()), positions,
                             base=base)
            p.record(rotated, "apply_rope of the module's projections", atol=float("inf"))
    values_of = {(start, size): values[:, :, start:start + size] for start, size in spans}

    def judge(got, want):
        module_records = 2 + num_outputs
        problem = default_judge(check, got[:module_records], want[:module_records])
        if problem is None:
            return None
        rotations = got[module_records:]
        misread = head_dim_misread(f"{built} on a random {tuple(x.shape)} input", first_raised(got[:module_records]),
                                   heads, kv_heads, head_dim)
        if misread:
            return misread
        usable = (first_raised(got[:module_records]) is None and len(rotations) == 3 * len(spans)
                  and all(_kind(r) == "tensor" for r in rotations)
                  and compare(got[0], want[0], "", ANY_VALUES) is None)
        if not usable:
            return problem
        try:
            rotated = {span: tuple(tensor_of(rotations[3 * i + j]) for j in range(3)) for i, span in enumerate(spans)}
            outputs = [tensor_of(r) for r in got[2:module_records]]

            def computes(**variant):
                expected = attention_from(rotated, values_of, calls, state, heads, **variant)
                return all(o.shape == e.shape and torch.allclose(o, e, atol=1e-4, rtol=1e-4)
                           for o, e in zip(outputs, expected))

            if computes():
                return None  # right, given the student's own apply_rope (Part 1 is graded there)
            for variant, hint in (({"rotate_values": True}, ROPE_ON_VALUES), ({"kv_order": "repeated"}, WRONG_ORDER),
                                  ({"mask": "top_left"}, TOP_LEFT), ({"scale_width": d_out}, SCALED_D_OUT)):
                if computes(**variant):
                    return NamedMistake(with_other_hint(problem, hint))
            if head_dim != d_out:  # RoPE on the whole projection, with the course's rotation
                whole = {(start, size): (rotated_whole(x[:, start:start + size], state, "W_query", heads,
                                                       torch.arange(start, start + size), base),
                                         rotated_whole(x[:, start:start + size], state, "W_key", kv_heads,
                                                       torch.arange(start, start + size), base), None)
                         for start, size in spans}
                expected = attention_from(whole, values_of, calls, state, heads)
                if all(o.shape == e.shape and torch.allclose(o, e, atol=1e-4, rtol=1e-4)
                       for o, e in zip(outputs, expected)):
                    return NamedMistake(with_other_hint(problem, ROPE_BEFORE_SPLIT))
        except (RuntimeError, ValueError, IndexError, KeyError):
            return problem
        return problem

    check = Check(f"{built} on a random {tuple(x.shape)} input", p, judge=judge,
                  mistakes=((NOT_OFFSET, {"apply_rope": rope_ignoring_positions}),
                            (INTERLEAVED, {"apply_rope": interleaved_rope}),
                            (REVERSED, {"apply_rope": reversed_rope}),
                            (FREQUENCIES, {"apply_rope": rope_without_factor_two}),
                            (NO_ROPE, {"apply_rope": no_rope}),
                            (OVERWRITTEN, {"apply_rope": rope_overwriting_first_half}),
                            (ANGLES_TRANSPOSED, {"apply_rope": rope_angles_transposed})))
    return strictly(check)


CACHE_REPEATED = ("the key/value heads were repeated to num_heads before they were cached: keep the num_kv_heads heads "
                  "in the cache, (b, num_kv_heads, T, head_dim), and let each group of query heads read its shared head "
                  "only when the scores are computed (repeat_interleave after the cache, or group the queries)")


def _bytes(spec, itemsize=None):
    dtype = getattr(torch, str(spec.get("dtype")), None) if isinstance(spec, dict) else None
    if itemsize is None and not isinstance(dtype, torch.dtype):
        return 0
    return math.prod(spec.get("shape") or []) * (itemsize or torch.empty((), dtype=dtype).element_size())


def cache_memory_check(inputs, d_in=5, heads=8, kv_heads=1, head_dim=8, b=3, chunks=(6, 4)):
    """What the module keeps between cached calls: num_kv_heads heads of keys and values are GQA's whole saving at
    inference, num_heads / num_kv_heads times less than num_heads'. Judged two ways, whatever the attributes are
    called: the bytes each cached call left alive besides its output (measured in the kernel), and the tensors
    reachable from the module's attributes (lists and dicts followed) after each call."""
    cls, d_out, context = "GroupedQueryAttention", heads * head_dim, sum(chunks)
    what = (f"{cls}({d_in}, {d_out}, {context}, 0.0, num_heads={heads}, num_kv_heads={kv_heads}) in eval mode, fed "
            f"random (b={b}) chunks of {list(chunks)} tokens with use_cache=True after reset_cache(): the memory it "
            "kept between calls")
    state = gqa_state(inputs, d_in, d_out, kv_heads * head_dim, False)
    xs = [inputs.randn(b, size, d_in) for size in chunks]
    leaves = G("torch").attr("utils").attr("_pytree").attr("tree_leaves")
    p = Program()
    measured, watched = (p.call(G(cls), d_in, d_out, context, 0.0, heads, kv_heads) for _ in range(2))
    for module in (measured, watched):
        p.load(module, state, hint=PARAMETERS)
        p.call(module.attr("eval"))
        p.call(module.attr("reset_cache"))
    p.record(watched, "its parameters", kind="parameters")
    for x in xs:
        p.record(p.call(watched, p.tensor(x), use_cache=True), "the output", atol=float("inf"))
        p.record(p.call(leaves, watched.attr("__dict__")), "the values of its attributes", atol=float("inf"))
        p.record(watched, "its buffers", kind="buffers")
    watched_records = len(p.expects)
    for x in xs:  # the kernel's measure may refuse a thread or a tensor subclass (SDPA's CausalBias): then not used
        p.record(p.call(measured, p.tensor(x), use_cache=True, measure=True, catch=True), "the output",
                 atol=float("inf"))

    def judge(got, _reference):
        found = first_raised(got[:watched_records])
        if found:
            return raised_message(what, found[1], CACHE_HINT)
        measured_records = got[watched_records:]
        if first_raised(measured_records) or any(r.get("caught") for r in measured_records if isinstance(r, dict)):
            measured_records = []
        try:
            params = next(r["parameters"] for r in got if isinstance(r, dict) and "parameters" in r)
            memories = [r["memory"] for r in measured_records if isinstance(r.get("memory"), dict)]
            measured_outputs = [r["tensor"] for r in measured_records if isinstance(r.get("tensor"), dict)]
            attributes = [r["list"] for r in got if isinstance(r, dict) and isinstance(r.get("list"), list)]
            buffers = [r["buffers"] for r in got if isinstance(r, dict) and isinstance(r.get("buffers"), list)]
            top_params = sum(math.prod(shape) * 4 for name, shape, *_ in params if "." not in str(name))
        except (StopIteration, TypeError, ValueError, KeyError, AttributeError):
            return f"{what}: the memory it kept was not recorded"
        if not len(attributes) == len(buffers) == len(chunks):
            return f"{what}: the memory it kept was not recorded"
        if len(memories) != len(chunks) or len(measured_outputs) != len(chunks):
            memories = measured_outputs = [None] * len(chunks)
        seen = 0
        for size, memory, output, values, listed in zip(chunks, memories, measured_outputs, attributes, buffers):
            seen += size
            itemsize = 4
            found = []
            held = memory.get("retained_bytes") if memory else None
            if isinstance(held, int) and not isinstance(held, bool):  # what the call made and left alive, less its output
                itemsize = torch.empty((), dtype=getattr(torch, str(output.get("dtype")), torch.float32)).element_size()
                found.append(held - _bytes(output))
            kept = sum(_bytes(v.get("tensor")) for v in values if isinstance(v, dict) and "tensor" in v)
            kept += sum(math.prod(shape) * 4 for name, shape, *_ in listed if "." in str(name))
            found.append(kept - top_params)  # the tensors reachable from its attributes, besides its parameters
            right, repeated = (2 * b * n * seen * head_dim * itemsize for n in (kv_heads, heads))
            held = max(found)
            if held >= 0.85 * repeated:
                return NamedMistake(with_hint(
                    f"{what}: after {seen} tokens it kept {held:,} bytes: the keys and values of {seen} tokens take "
                    f"{right:,} bytes with num_kv_heads={kv_heads} head, {repeated:,} bytes with num_heads={heads} "
                    "heads", CACHE_REPEATED))
        return None

    return Check(what, p, judge=judge)


def grouped_query_attention(inputs):
    checks = []
    for d_in, d_out, heads, kv_heads, context, num_tokens, b, bias, base in [
            (6, 8, 4, 2, 8, 7, 2, False, 10000.0), (5, 12, 6, 3, 9, 7, 2, True, 10000.0),
            (4, 8, 2, 2, 6, 6, 1, False, 10000.0), (7, 12, 3, 1, 10, 8, 2, True, 500.0),
            (3, 16, 4, 1, 8, 6, 3, False, 10000.0), (6, 24, 6, 2, 7, 7, 2, False, 100.0),
            (5, 32, 8, 4, 9, 5, 1, True, 10000.0)]:
        checks.append(gqa_check(inputs, d_in, d_out, heads, kv_heads, context, num_tokens, b, bias, base))
    checks.append(gqa_check(inputs, 4, 12, 3, 1, 8, 7, 2, False, 10000.0, mode="train"))
    checks.append(dropout_check("GroupedQueryAttention(4, 8, 6, 0.5, 4, 2) on a random (3, 6, 4) input",
                                "GroupedQueryAttention", (4, 8, 6, 0.5, 4, 2), gqa_state(inputs, 4, 8, 4, False),
                                inputs.randn(3, 6, 4), inputs.seed(), "apply self.dropout to the attention weights, "
                                "as in step 7"))
    checks.append(cache_memory_check(inputs))
    return checks


def value_error_check(what, args, words, x=None, chunks=None):
    """The constructor (or a forward pass on x, or cached chunks) must raise a ValueError naming one of `words`."""
    p = Program()
    # apply_rope alone on each chunk's keys (shape and positions), its error caught: why a chunk that fits fails
    head_dim, kv_heads = args[1] // args[4], args[5]
    spans = list(zip(torch.tensor([0] + list(chunks or [])).cumsum(0).tolist(), chunks or []))
    probes = [(torch.randn(1, kv_heads, size, head_dim, generator=torch.Generator().manual_seed(size)),
               torch.arange(start, start + size)) for start, size in spans] if head_dim % 2 == 0 else []
    for keys, positions in probes:
        p.record(p.call(G("apply_rope"), p.tensor(keys), p.tensor(positions), catch=True), "apply_rope's result",
                 atol=float("inf"))
    module = p.call(G("GroupedQueryAttention"), *args)
    if x is not None:
        p.call(module, p.tensor(x))
    for index, size in enumerate(chunks or []):
        result = p.call(module, p.tensor(torch.zeros(1, size, args[0])), use_cache=True)
        if index < len(chunks) - 1:
            p.record(result, "a chunk that fits")
    check = expect_value_error(what, p, words[0])
    raises = check.judge

    def judge(got, want):
        rotated, got, want = got[:2 * len(probes)], got[2 * len(probes):], want[2 * len(probes):]
        early = next((i for i, record in enumerate(got[:len(chunks or [1]) - 1]) if "raised" in record), None)
        if chunks and early is not None:
            misread = head_dim_misread(f"{what}: chunk {early + 1}, which fits in context_length", (early, got[early]),
                                       args[4], kv_heads, head_dim)
            if misread:
                return misread
            broken = rope_broken(rotated, probes)
            if broken:
                return NamedMistake(raised_message(f"{what}: chunk {early + 1}, which fits in context_length",
                                                   got[early], broken))
            return raised_message(f"{what}: chunk {early + 1}, which fits in context_length", got[early],
                                  "the kept and new tokens may fill context_length exactly; raise only when they "
                                  "would pass it")
        last = got[-1] if got else {"const": None}
        if ("raised" in last and last["raised"] == "ValueError" and
                any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(w)}(?![A-Za-z0-9_])", str(last["message"]))
                    for w in words)):
            return None
        if chunks and "raised" not in last:
            return NamedMistake(f"{what} did not raise a ValueError\n  likely mistake: the kept tokens were not "
                                "counted: every chunk fits on its own, but kept + new tokens pass context_length; "
                                "check kept + new before you change the cache")
        return raises(got, want)

    check.judge = judge
    return check


def rope_broken(records, probes):
    """Why a module cannot run on the student's apply_rope: its records on the probes (caught error, result) that
    raise or change the shape, named by the mistaken rotation that does the same; "" when apply_rope runs right."""
    for index, (x, positions) in enumerate(probes):
        caught, result = records[2 * index:2 * index + 2] if len(records) >= 2 * index + 2 else (None, None)
        if not isinstance(caught, dict) or not isinstance(result, dict):
            return ""
        error = caught.get("caught")
        shape = result["tensor"]["shape"] if isinstance(result.get("tensor"), dict) else None
        if error is None and shape == list(x.shape):
            continue
        for hint, replacements in ROPE_MISTAKES:
            try:
                expected = next(iter(replacements.values()))(x.double().clone(), positions)
            except (RuntimeError, ValueError, IndexError):
                continue  # an error of the same type would not say which mistake
            if error is None and shape == list(expected.shape) and torch.allclose(
                    tensor_of(result), expected, atol=1e-4, rtol=1e-4):
                return (f"apply_rope on a {tuple(x.shape)} tensor at positions {positions.tolist()} returns shape "
                        f"{tuple(shape)}, and the module cannot go on with it: {hint}")
        what = (f"raises {str(error.get('raised'))[:40]}" if isinstance(error, dict)
                else f"returns shape {tuple(shape or ())}")
        return (f"apply_rope on a {tuple(x.shape)} tensor at positions {positions.tolist()} {what}, not a tensor of "
                "x's shape: the module cannot go on with it (Part 1's checks show why)")
    return ""


def grouped_query_attention_arguments(inputs):
    return [value_error_check("GroupedQueryAttention(4, 6, 5, 0.0, num_heads=4, num_kv_heads=2)",
                              (4, 6, 5, 0.0, 4, 2), ["d_out"]),
            value_error_check("GroupedQueryAttention(3, 10, 6, 0.0, num_heads=4, num_kv_heads=2)",
                              (3, 10, 6, 0.0, 4, 2), ["d_out"]),
            value_error_check("GroupedQueryAttention(4, 16, 5, 0.0, num_heads=4, num_kv_heads=3)",
                              (4, 16, 5, 0.0, 4, 3), ["num_kv_heads", "num_heads"]),
            value_error_check("GroupedQueryAttention(5, 24, 5, 0.0, num_heads=6, num_kv_heads=4)",
                              (5, 24, 5, 0.0, 6, 4), ["num_kv_heads", "num_heads"]),
            value_error_check("GroupedQueryAttention(4, 6, 5, 0.0, num_heads=2, num_kv_heads=1), head_dim 3",
                              (4, 6, 5, 0.0, 2, 1), ["head_dim", "d_out", "num_heads"]),
            value_error_check("GroupedQueryAttention(3, 20, 5, 0.0, num_heads=4, num_kv_heads=4), head_dim 5",
                              (3, 20, 5, 0.0, 4, 4), ["head_dim", "d_out", "num_heads"]),
            value_error_check("a forward pass with 7 tokens through GroupedQueryAttention(3, 8, 6, 0.0, 4, 2)",
                              (3, 8, 6, 0.0, 4, 2), ["context_length"], x=torch.zeros(1, 7, 3)),
            value_error_check("GroupedQueryAttention(3, 8, 6, 0.0, 4, 2) fed chunks of [4, 3] tokens with "
                              "use_cache=True", (3, 8, 6, 0.0, 4, 2), ["context_length"], chunks=[4, 3]),
            value_error_check("GroupedQueryAttention(5, 8, 5, 0.0, 4, 1) fed chunks of [1, 1, 1, 1, 1, 1] tokens with "
                              "use_cache=True", (5, 8, 5, 0.0, 4, 1), ["context_length"], chunks=[1] * 6),
            value_error_check("GroupedQueryAttention(4, 8, 4, 0.0, 2, 2) fed chunks of [2, 1, 2] tokens with "
                              "use_cache=True", (4, 8, 4, 0.0, 2, 2), ["context_length"], chunks=[2, 1, 2])]


# ---------------------------------------------------------------------------------------------------------------
# Part 4: a left-padded batch (transfer: the lesson shows the padding mask and the nan of a fully blocked row on bare
# scores; here they go into grouped-query attention with RoPE, through the backward pass too)
# ---------------------------------------------------------------------------------------------------------------

KEYS_NOT_BLOCKED = ("a real token attends to the fillers: block the padded keys (the columns of the scores) for every "
                    "query of their sequence, in every head")
PAD_NAN = ("a filler query of a left-padded row sees no key: softmax of a row of -inf is nan; no row may reach "
           "softmax fully blocked (or its output must not come from it)")
PAD_NOT_ZERO = "the output rows of padded positions must be zeros, all d_out numbers"
PAD_BIAS = ("the padded rows equal out_proj's bias: they were zeroed before out_proj; the output rows themselves must "
            "be zero")
PAD_GRADS = ("a fully blocked row gives nan weights in the forward pass, and backward multiplies by them even where "
             "the row's output was replaced afterwards (0 * nan = nan): no row may reach softmax fully blocked")
PAD_HINT = ("block the padded keys for every query of their sequence, keep every row finite, zero the padded output "
            "rows; RoPE scores depend only on distances, so the real tokens need no other positions")
PAD_ARGUMENT = "padding_mask"
PAD_NOT_CAUSAL = ("with a padding_mask the causal mask was dropped: a key is blocked when it is padding or after the "
                  "query (combine both masks with |)")
MASK_AXES = ("the batch size ({b}) met the number of heads ({heads}) in dimension 1 of the scores (b, num_heads, T, T): "
             "the (b, T) padding mask needs axes for the heads and the queries, padding_mask[:, None, None, :]")


def padded_lengths(inputs, b, num_tokens, where):
    """The padding of a batch: `where` is "left", "right" or "none"; one sequence of a left batch may be all padding."""
    if where == "none":
        return torch.zeros(b, num_tokens, dtype=torch.bool)
    lengths = [inputs.randint(1, num_tokens + 1) for _ in range(b)]
    lengths[0] = inputs.randint(1, num_tokens)  # at least one filler
    if where == "left" and b > 2:
        lengths[-1] = 0
    positions, ends = torch.arange(num_tokens)[None, :], torch.tensor(lengths)[:, None]
    return positions >= ends if where == "right" else positions < num_tokens - ends


def padded_attention(rotated, values, state, num_heads, pad, *, block_keys=True, kv_order="grouped",
                     rotate_values=False, causal=True, scale_width=None):
    """The module's output on a padded batch, computed here from the student's own rotations (queries, keys,
    values rotated at positions 0 .. T-1): fillers' keys blocked, filler rows zero."""
    queries, keys, rotated_values = rotated
    values = rotated_values if rotate_values else values
    group = num_heads // keys.shape[1]
    reads = [h // group if kv_order == "grouped" else h % keys.shape[1] for h in range(num_heads)]
    keys, values = keys[:, reads], values[:, reads]
    num_tokens = queries.shape[2]
    scores = queries @ keys.transpose(-2, -1) / (scale_width or queries.shape[-1]) ** 0.5
    hidden = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1 if causal else num_tokens)
    if block_keys:
        hidden = hidden | pad[:, None, None, :]
    hidden = hidden & ~hidden.all(-1, keepdim=True)
    weights = scores.masked_fill(hidden, float("-inf")).softmax(-1)
    merged = (weights @ values).transpose(1, 2).flatten(2)
    out = merged @ state["out_proj.weight"].double().T + state["out_proj.bias"].double()
    return out.masked_fill(pad[..., None], 0.0)


def padded_check(inputs, d_in, d_out, heads, kv_heads, num_tokens, b, bias, base, where):
    cls = "GroupedQueryAttention"
    head_dim = d_out // heads
    context = num_tokens + inputs.randint(0, 3)
    built = (f"{cls}({d_in}, {d_out}, {context}, 0.5, num_heads={heads}, num_kv_heads={kv_heads}, qkv_bias={bias}, "
             f"rope_base={base}) in eval mode")
    state = gqa_state(inputs, d_in, d_out, kv_heads * head_dim, bias)
    x = inputs.randn(b, num_tokens, d_in)
    pad = padded_lengths(inputs, b, num_tokens, where)
    padding = {"left": "left-padded", "right": "right-padded", "none": "unpadded"}[where]
    what = f"{built} on a random {padding} batch {tuple(x.shape)} with padding_mask"
    p = Program()
    module = p.call(G(cls), d_in, d_out, context, 0.5, heads, kv_heads, qkv_bias=bias, rope_base=base)
    p.record(module, "its parameters", PARAMETERS, kind="parameters")
    p.load(module, state, hint=PARAMETERS)
    p.call(module.attr("eval"))
    p.record(p.call(module, p.tensor(x), padding_mask=p.tensor(pad)), "the output", PAD_HINT, atol=1e-5, rtol=1e-5)
    queries, keys, values = (heads_of(x, state, name, n) for name, n in (("W_query", heads), ("W_key", kv_heads),
                                                                        ("W_value", kv_heads)))
    positions = p.tensor(torch.arange(num_tokens))
    for projected in (queries, keys, values):
        p.record(p.call(G("apply_rope"), p.tensor(projected.float()), positions, base=base),
                 "apply_rope of the module's projections", atol=float("inf"))
    bias_row = state["out_proj.bias"].double()

    def judge(got, want):
        problem = default_judge(check, got[:3], want[:3])
        if problem is None:
            return None
        found = first_raised(got[:3])
        misread = head_dim_misread(what, found, heads, kv_heads, head_dim)
        if misread:
            return misread
        if found and b != heads and re.search(rf"size of tensor a \(({b}|{heads})\) must match the size of tensor b "
                                              rf"\(({b}|{heads})\) at non-singleton dimension 1\b",
                                              str(found[1].get("message"))):
            return NamedMistake(raised_message(what, found[1], MASK_AXES.format(b=b, heads=heads)))
        if found or len(got) < 3 or _kind(got[2]) != "tensor" or compare(got[0], want[0], "", ANY_VALUES):
            return problem
        out = tensor_of(got[2])
        if tuple(out.shape) != (b, num_tokens, d_out):
            return problem
        if not torch.isfinite(out).all():
            return NamedMistake(with_other_hint(f"{what}: the output contains nan or inf", PAD_NAN))
        if pad.any() and not torch.equal(out[pad], torch.zeros_like(out[pad])):
            if torch.allclose(out[pad], bias_row.expand_as(out[pad]), atol=1e-5):
                return NamedMistake(with_other_hint(f"{what}: the output rows of padded positions are not zero",
                                                    PAD_BIAS))
            return NamedMistake(with_other_hint(f"{what}: the output rows of padded positions are not zero",
                                                PAD_NOT_ZERO))
        rotations = got[3:]
        if len(rotations) != 3 or not all(_kind(r) == "tensor" for r in rotations):
            return problem
        try:
            rotated = tuple(tensor_of(r) for r in rotations)
            if not all(r.shape == t.shape for r, t in zip(rotated, (queries, keys, values))):
                return problem

            def computes(**variant):
                expected = padded_attention(rotated, values, state, heads, pad, **variant)
                return torch.allclose(out, expected, atol=1e-4, rtol=1e-4)

            if computes():
                return None  # right, given the student's own apply_rope (Part 1 is graded there)
            for variant, hint in (({"block_keys": False}, KEYS_NOT_BLOCKED), ({"rotate_values": True}, ROPE_ON_VALUES),
                                  ({"kv_order": "repeated"}, WRONG_ORDER), ({"causal": False}, PAD_NOT_CAUSAL),
                                  ({"scale_width": d_out}, SCALED_D_OUT)):
                if computes(**variant):
                    return NamedMistake(with_other_hint(problem, hint))
            if head_dim != d_out:  # RoPE on the whole projection, with the course's rotation
                positions = torch.arange(num_tokens)
                whole = (rotated_whole(x, state, "W_query", heads, positions, base),
                         rotated_whole(x, state, "W_key", kv_heads, positions, base), None)
                expected = padded_attention(whole, values, state, heads, pad)
                if torch.allclose(out, expected, atol=1e-4, rtol=1e-4):
                    return NamedMistake(with_other_hint(problem, ROPE_BEFORE_SPLIT))
        except (RuntimeError, ValueError, IndexError, KeyError):
            return problem
        return problem

    check = Check(what, p, judge=judge, mistakes=((INTERLEAVED, {"apply_rope": interleaved_rope}),
                                                  (REVERSED, {"apply_rope": reversed_rope}),
                                                  (NO_ROPE, {"apply_rope": no_rope}),
                                                  (OVERWRITTEN, {"apply_rope": rope_overwriting_first_half}),
                                                  (ANGLES_TRANSPOSED, {"apply_rope": rope_angles_transposed})))
    return strictly(check)


def gradient_check(inputs, d_in, d_out, heads, kv_heads, num_tokens, b):
    """A training step on a left-padded batch (one sequence all padding): every gradient finite."""
    cls = "GroupedQueryAttention"
    state = gqa_state(inputs, d_in, d_out, kv_heads * (d_out // heads), True)
    x = inputs.randn(b, num_tokens, d_in)
    pad = padded_lengths(inputs, b, num_tokens, "left")
    what = (f"{cls}({d_in}, {d_out}, {num_tokens}, 0.0, {heads}, {kv_heads}, qkv_bias=True) in train mode: "
            f"backward of the output's sum on a random left-padded batch {tuple(x.shape)}")
    p = Program()
    module = p.call(G(cls), d_in, d_out, num_tokens, 0.0, heads, kv_heads, qkv_bias=True)
    p.load(module, state, hint=PARAMETERS)
    p.call(module.attr("train"))
    out = p.call(module, p.tensor(x), padding_mask=p.tensor(pad), grad=True, trace=0)
    p.call(p.call(out.attr("sum"), grad=True).attr("backward"), p.tensor(torch.tensor(1.0)), grad=True, trace=0)
    p.record(module, "its gradients", kind="grads")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], PAD_HINT)
        traces = [r["trace"] for r in got if isinstance(r, dict) and isinstance(r.get("trace"), dict)]
        if len(traces) != 2 or not all(isinstance(t.get("ops"), list) for t in traces):
            return f"{what}: its operations were not recorded"
        for trace, part in zip(traces, ("forward", "backward")):
            used = library_ops(trace["ops"], ATTENTION_SOFTMAX)
            if used:
                return with_hint(f"{what}: its {part} pass ran aten.{used[0][:60]}, a library's attention kernel",
                                 OWN_MASKING)
        grads = next((r["grads"] for r in got if isinstance(r, dict) and isinstance(r.get("grads"), dict)), None)
        if grads is None:
            return f"{what}: stopped before its gradients"
        wanted = next(r["grads"] for r in want if isinstance(r, dict) and isinstance(r.get("grads"), dict))
        missing = sorted(name for name in wanted if grads.get(name) is None)
        if missing:
            return with_hint(f"{what}: no gradient reached {', '.join(map(str, missing[:4]))}",
                             "the output must come from the layers W_query, W_key, W_value and out_proj")
        broken = sorted(name for name, grad in grads.items()
                        if grad is not None and not torch.isfinite(decode_tensor(grad, torch.float64)).all())
        if broken:
            return with_hint(f"{what}: the gradients of {', '.join(map(str, broken[:4]))} hold nan or inf", PAD_GRADS)
        return None

    return Check(what, p, judge=judge)


OWN_MASKING = ("with a padding_mask, compute the scores, the masking and the weights with your own operations (softmax "
               "itself is fine): a library attention kernel decides for you what a fully blocked row gives, which is "
               "this part's point")


def padded_module(inputs, d_in, d_out, heads, kv_heads, num_tokens, b):
    """A program holding a GroupedQueryAttention with random weights in eval mode, and a random left-padded batch."""
    state = gqa_state(inputs, d_in, d_out, kv_heads * (d_out // heads), False)
    x = inputs.randn(b, num_tokens, d_in)
    pad = padded_lengths(inputs, b, num_tokens, "left")
    p = Program()
    module = p.call(G("GroupedQueryAttention"), d_in, d_out, num_tokens, 0.0, heads, kv_heads)
    p.load(module, state, hint=PARAMETERS)
    p.call(module.attr("eval"))
    return p, module, x, pad


def own_masking_check(inputs, d_in, d_out, heads, kv_heads, num_tokens, b):
    """The forward pass on a left-padded batch (one sequence all padding), its operations recorded in the kernel: no
    library attention kernel among them (a teaching check: a student who replaces the probe could forge the trace)."""
    p, module, x, pad = padded_module(inputs, d_in, d_out, heads, kv_heads, num_tokens, b)
    what = (f"GroupedQueryAttention({d_in}, {d_out}, {num_tokens}, 0.0, {heads}, {kv_heads}) on a random left-padded "
            f"batch {tuple(x.shape)} with padding_mask, watched operation by operation")
    p.record(p.call(module, p.tensor(x), padding_mask=p.tensor(pad), trace=0), "the output", PAD_HINT, atol=1e-5,
             rtol=1e-5)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], PAD_HINT)
        trace = got[1].get("trace") if len(got) > 2 and isinstance(got[1], dict) else None
        if not isinstance(trace, dict) or not isinstance(trace.get("ops"), list):
            return f"{what}: its operations were not recorded"
        used = library_ops(trace["ops"], ATTENTION_SOFTMAX)
        if used:
            return with_hint(f"{what}: it ran aten.{used[0][:60]}, a library's attention kernel", OWN_MASKING)
        return None  # the values are judged by the other checks of this cell

    return Check(what, p, judge=judge)


# The operations that do attention's work: a loop over the sequences of a batch runs them once per sequence.
ATTENTION_WORK = {"mm", "bmm", "addmm", "baddbmm", "dot", "mv", "addmv", "_softmax", "_safe_softmax",
                  "_masked_softmax", "_log_softmax", "exp"}
ONE_PASS = ("a padded batch goes through attention in one computation, as an unpadded one does: block the padded keys "
            "of every sequence with one mask instead of attending to each sequence on its own")


def one_pass_check(inputs, d_in, d_out, heads, kv_heads, num_tokens):
    """The forward pass on a left-padded batch of 2 sequences, then on the same 2 repeated 3 times: the matrix
    products and softmaxes it runs must not grow with the number of sequences."""
    p, module, x, pad = padded_module(inputs, d_in, d_out, heads, kv_heads, num_tokens, 2)
    what = (f"GroupedQueryAttention({d_in}, {d_out}, {num_tokens}, 0.0, {heads}, {kv_heads}) on a left-padded batch "
            f"of 2 sequences {tuple(x.shape)} and on the same 2 repeated 3 times, its operations counted")
    for times in (1, 3):
        p.record(p.call(module, p.tensor(x.repeat(times, 1, 1)), padding_mask=p.tensor(pad.repeat(times, 1)),
                        trace=0), f"the output on {2 * times} sequences", PAD_HINT, atol=1e-5, rtol=1e-5)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], PAD_HINT)
        traces = [r["trace"] for r in got if isinstance(r, dict) and isinstance(r.get("trace"), dict)]
        if len(traces) != 2 or not all(isinstance(t.get("ops"), list) for t in traces):
            return f"{what}: its operations were not recorded"
        two, six = (sum(str(op) in ATTENTION_WORK for op in t["ops"]) for t in traces)
        if six > two:
            return with_hint(f"{what}: it ran {two} matrix products, softmaxes and exponentials for 2 sequences and "
                             f"{six} for 6: it attends to the sequences one at a time", ONE_PASS)
        return None  # the values are judged by the other checks of this cell

    return Check(what, p, judge=judge)


def padding_argument_check(what, call_kwargs, mask_shape):
    p = Program()
    module = p.call(G("GroupedQueryAttention"), 3, 8, 6, 0.0, 4, 2)
    p.call(module, p.tensor(torch.zeros(2, 4, 3)), padding_mask=p.tensor(torch.zeros(mask_shape, dtype=torch.bool)),
           **call_kwargs)
    return expect_value_error(what, p, PAD_ARGUMENT)


def gqa_padding(inputs):
    checks = [padded_check(inputs, *case) for case in [
        (6, 8, 4, 2, 7, 3, False, 10000.0, "left"), (5, 12, 6, 3, 6, 2, True, 10000.0, "left"),
        (4, 8, 2, 2, 5, 3, False, 500.0, "left"), (7, 12, 3, 1, 8, 4, True, 10000.0, "left"),
        (3, 16, 4, 1, 6, 2, False, 100.0, "right"), (5, 16, 8, 4, 7, 3, True, 10000.0, "right"),
        (6, 8, 4, 2, 5, 2, False, 10000.0, "none")]]
    checks.append(gradient_check(inputs, 5, 8, 4, 2, 6, 3))
    checks.append(gradient_check(inputs, 4, 12, 6, 3, 5, 4))
    checks.append(own_masking_check(inputs, 6, 8, 4, 2, 6, 3))
    checks.append(one_pass_check(inputs, 6, 8, 4, 2, 6))
    checks.append(padding_argument_check("GroupedQueryAttention(3, 8, 6, 0.0, 4, 2) on (2, 4, 3) with use_cache=True "
                                         "and a padding_mask", {"use_cache": True}, (2, 4)))
    checks.append(padding_argument_check("GroupedQueryAttention(3, 8, 6, 0.0, 4, 2) on (2, 4, 3) with a (2, 3) "
                                         "padding_mask", {}, (2, 3)))
    checks.append(padding_argument_check("GroupedQueryAttention(3, 8, 6, 0.0, 4, 2) on (2, 4, 3) with a (4,) "
                                         "padding_mask", {}, (4,)))
    return checks


CELLS = {
    "test_apply_rope": apply_rope,
    "test_padding_mask": padding_mask,
    "test_grouped_query_attention": grouped_query_attention,
    "test_grouped_query_attention_arguments": grouped_query_attention_arguments,
    "test_gqa_padding": gqa_padding,
}

# Part 4 applies the lesson's padding mask and its fully blocked rows to grouped-query attention with RoPE (which
# positions the real tokens of a left-padded row need, and a backward pass the lesson never takes).
TRANSFER = {"test_gqa_padding"}
