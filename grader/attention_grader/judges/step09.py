"""Judges of step 09: the offset causal mask, attention of new queries against kept keys, a KV cache.

Known mistakes are recognised by running the answer key with its `causal_mask_with_offset` replaced by the mistaken
mask: the answer key's attention and module call it, so a student's module that aligns its mask the wrong way (by
hand, or through SDPA's is_causal=True) computes what the replaced answer key computes.
"""
import functools
import math

import torch
import torch.nn.functional as F

from attention_grader.judging import (G, Check, Expect, Inputs, NamedMistake, Program, call_check, compare,
                                      default_judge, expect_value_error, raised_message)
from attention_grader.judges.common import (ANY_VALUES, attention_state, by_running, dropout_check, first_raised,
                                            matched_records, random_chunks, same_raise, tensor_of, with_hint)

TOP_LEFT = ("the causal mask is aligned to the top-left corner, as if the new queries were the first T_q tokens (what "
            "SDPA's is_causal=True, or a causal mask cut to [:T_q, :T_k], gives when T_q != T_k): a new query i is "
            "token T_k - T_q + i and may see keys 0 .. T_k - T_q + i (the mask's diagonal ends in the bottom-right "
            "corner)")
OFF_BY_ONE = "the offset is off by one: query i may see keys 0 .. T_k - T_q + i, itself included, and no later key"
SEES_NEXT = ("the offset is off by one: each new query also sees the next token's key (the diagonal is one column too "
             "far right); query i may see keys 0 .. T_k - T_q + i, itself included, and no later key")
BLOCKS_ITSELF = ("the offset is off by one: each new query is blocked from its own key (>= where > belongs, or the "
                 "diagonal one column too far left); query i may see keys 0 .. T_k - T_q + i, itself included")
SIGN_FLIPPED = ("the offset has the wrong sign: the diagonal of the new queries' mask moves right by t_k - t_q "
                "(triu(diagonal=t_k - t_q + 1)), not left by it: query i may see keys 0 .. t_k - t_q + i")
SWAPPED = ("the mask came out (t_k, t_q): the keys run along the rows and the queries along the columns; compare the "
           "key positions as a row (k_pos[None, :]) with the query positions as a column (q_pos[:, None])")
CONVENTION = "True means blocked (step 04's convention), the opposite of SDPA's attn_mask"
CACHE_HINT = ("with use_cache=True the new queries attend to the kept keys and values and the new ones (torch.cat "
              "along the tokens, dim 2 of (b, num_heads, T, head_dim)), with the mask aligned to the bottom-right "
              "corner; keep the concatenated keys and values for the next call")
PARAMETERS = ("W_query, W_key, W_value = nn.Linear(d_in, d_out, bias=qkv_bias) and out_proj = nn.Linear(d_out, "
              "d_out), the names of step 7, so that trained weights load into it")


def top_left_mask(t_q, t_k):
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(1)


def mask_seeing_one_less(t_q, t_k):
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q)


def mask_seeing_one_more(t_q, t_k):
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q + 2)


def mask_sign_flipped(t_q, t_k):
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(t_q - t_k + 1)


MASK_MISTAKES = ((TOP_LEFT, {"causal_mask_with_offset": top_left_mask}),
                 (BLOCKS_ITSELF, {"causal_mask_with_offset": mask_seeing_one_less}),
                 (SEES_NEXT, {"causal_mask_with_offset": mask_seeing_one_more}))


def mask_check(t_q, t_k):
    what = f"causal_mask_with_offset({t_q}, {t_k})"
    p = Program()
    p.record(p.call(G("causal_mask_with_offset"), t_q, t_k), "the mask")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = compare(got[0], want[0], what, ANY_VALUES) if "tensor" not in got[0] else None
        if not problem and t_q != t_k and got[0]["tensor"]["shape"] == [t_k, t_q]:
            return NamedMistake(with_hint(compare(got[0], want[0], what, ANY_VALUES), SWAPPED))
        if problem or got[0]["tensor"]["shape"] != want[0]["tensor"]["shape"]:
            return with_hint(problem or compare(got[0], want[0], what, ANY_VALUES), "one row per new query (t_q), "
                             "one column per key (t_k)")
        if got[0]["tensor"]["dtype"] != "bool":
            return with_hint(f"{what} should be a bool tensor (True = blocked), got dtype "
                             f"{str(got[0]['tensor']['dtype'])[:20]}", "build it with dtype=torch.bool, or compare "
                             "positions with >")
        actual, expected = tensor_of(got[0]).bool(), tensor_of(want[0]).bool()
        if torch.equal(actual, expected):
            return None
        for mistake, hint in ((top_left_mask, TOP_LEFT), (mask_seeing_one_less, BLOCKS_ITSELF),
                              (mask_seeing_one_more, SEES_NEXT), (mask_sign_flipped, SIGN_FLIPPED)):
            if torch.equal(actual, mistake(t_q, t_k)):
                return NamedMistake(with_hint(f"{what} has the wrong entries ({int((actual != expected).sum())} "
                                              "differ)", hint))
        if torch.equal(actual, ~expected) and bool(expected.any()):  # t_q = 1: the right mask is all False
            return NamedMistake(with_hint(f"{what} is True exactly where attention is allowed", CONVENTION))
        return with_hint(f"{what} has the wrong entries ({int((actual != expected).sum())} differ)",
                         "True above the diagonal that ends in the bottom-right corner: j > t_k - t_q + i")

    return Check(what, p, judge=judge)


def causal_mask_with_offset(inputs):
    sizes = [(2, 5), (1, 1), (1, 7), (3, 3), (4, 9), (6, 10), (5, 6)]
    t_q = inputs.randint(1, 8)
    sizes.append((t_q, t_q + inputs.randint(0, 9)))
    return [mask_check(t_q, t_k) for t_q, t_k in sizes]


def _right_blocked(t_q, t_k):
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q + 1)


def mistaken_cached(queries, keys, values, scale="sqrt", fill=float("-inf"), after_softmax=False, dim=-1,
                    sdpa_mask=False, dot_t=False):
    """cached_attention with one mistake put in."""
    t_q, t_k, d = queries.shape[-2], keys.shape[-2], queries.shape[-1]
    blocked = _right_blocked(t_q, t_k)
    if sdpa_mask:  # Part 1's mask (True = blocked) given to SDPA, which reads True as "may attend"
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=blocked)
    scores = queries @ (keys.T if dot_t else keys.transpose(-2, -1))
    scores = scores / {"sqrt": d ** 0.5, "d": d, "none": 1}[scale]
    if after_softmax:
        return torch.softmax(scores, dim=-1).masked_fill(blocked, 0.0) @ values
    return torch.softmax(scores.masked_fill(blocked, fill), dim=dim) @ values


def cached_mistake(hint, **wrong):
    return hint, {"cached_attention": functools.partial(mistaken_cached, **wrong)}


CACHED_MISTAKES = (
    cached_mistake(CONVENTION + ": F.scaled_dot_product_attention got Part 1's mask (True = blocked) as attn_mask, "
                   "so each query attends exactly to the keys it must not see; pass ~mask", sdpa_mask=True),
    cached_mistake("the scores are divided by head_dim: divide them by sqrt(head_dim)", scale="d"),
    cached_mistake("the scores are not scaled: divide them by sqrt(head_dim) before the softmax", scale="none"),
    cached_mistake("the blocked scores are set to 0 instead of -inf: exp(0) = 1, so the blocked keys still get weight; "
                   "masked_fill them with float('-inf') before the softmax", fill=0.0),
    cached_mistake("the mask is applied after the softmax: zeroing weights leaves rows that no longer sum to 1; put "
                   "-inf in the blocked scores before the softmax", after_softmax=True),
    cached_mistake("the softmax runs over the queries (dim=-2): each query's weights over the keys must sum to 1, so "
                   "take it over the last dimension", dim=-2),
    cached_mistake("keys.T reverses every dimension of a batched tensor (and is deprecated beyond 2-D): use "
                   "keys.transpose(-2, -1) to swap the last two only", dot_t=True),
)


def cached_attention(inputs):
    hint = ("scores / sqrt(head_dim), the causal mask with the offset T_k - T_q (Part 1), softmax over the keys, "
            "then @ values")
    checks = []
    for leading, t_q, t_k, head_dim in [((1, 2), 1, 6, 4), ((2, 3), 2, 7, 5), ((3,), 4, 4, 3), ((2, 2), 1, 1, 6),
                                        ((1, 4), 3, 9, 8), ((), 2, 5, 4), ((2, 1, 2), 5, 8, 2)]:
        queries, keys, values = (inputs.randn(*leading, t, head_dim) for t in (t_q, t_k, t_k))
        check = call_check(f"cached_attention with random {tuple(queries.shape)} queries and {tuple(keys.shape)} keys "
                           "and values", "cached_attention", queries, keys, values, hint=hint, atol=1e-5, rtol=1e-5)
        checks.append(by_running(check, MASK_MISTAKES + CACHED_MISTAKES))
    return checks


class MistakenCache(torch.nn.Module):
    """The answer key's MultiHeadAttentionWithCache with one mistake put in: the cache concatenated along `cat_dim`,
    the scores divided by the square root of `scale_by` ("head_dim", "d_out")."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, cat_dim=2,
                 scale_by="head_dim"):
        super().__init__()
        if num_heads < 1 or d_out % num_heads:
            raise ValueError("num_heads must divide d_out")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.context_length, self.cat_dim, self.scale_by = context_length, cat_dim, scale_by
        self.W_query = torch.nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = torch.nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = torch.nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = torch.nn.Linear(d_out, d_out)
        self.dropout = torch.nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))
        self.kept_keys = self.kept_values = None

    def reset_cache(self):
        self.kept_keys = self.kept_values = None

    def forward(self, inputs, use_cache=False):
        batch, new, _ = inputs.shape
        kept = self.kept_keys.shape[2] if use_cache and self.kept_keys is not None else 0
        if kept + new > self.context_length:
            raise ValueError("context_length exceeded")
        queries, keys, values = (w(inputs).view(batch, new, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))
        if use_cache:
            if self.kept_keys is not None:
                keys = torch.cat([self.kept_keys, keys], dim=self.cat_dim)
                values = torch.cat([self.kept_values, values], dim=self.cat_dim)
            self.kept_keys, self.kept_values = keys, values
        scores = queries @ keys.transpose(-2, -1)
        scores = scores.masked_fill(_right_blocked(new, keys.shape[2]), float("-inf"))
        scale = self.head_dim if self.scale_by == "head_dim" else self.d_out
        weights = self.dropout(torch.softmax(scores / scale ** 0.5, dim=-1))
        context = weights @ values
        return self.out_proj(context.transpose(1, 2).reshape(batch, new, self.d_out))


CACHE_MISTAKES = MASK_MISTAKES + (
    ("the kept keys and values are concatenated along the heads (dim 1 of (b, num_heads, T, head_dim)): the new "
     "tokens' keys and values go after the kept ones along the tokens, torch.cat(..., dim=2)",
     {"MultiHeadAttentionWithCache": functools.partial(MistakenCache, cat_dim=1)}),
    ("the scores are divided by sqrt(d_out): each head's scores are divided by sqrt(head_dim), head_dim = d_out // "
     "num_heads", {"MultiHeadAttentionWithCache": functools.partial(MistakenCache, scale_by="d_out")}),
)
RESET_HINT = ("reset_cache() did not forget everything: after it, a call raised ValueError as if the earlier tokens "
              "were still kept; reset the kept keys and values and any count of kept tokens (a position) with them")


PLAIN_WROTE = ("the call without the cache changed the cache: every cached call before it was right, and the first "
               "one after it is wrong; use_cache=False must neither read nor write the kept keys and values (or a "
               "count of them)")


def first_wrong(check, got, want):
    """The index of the first record of `got` that differs from `want` (or raised), None when all agree."""
    for index, (w, expect) in enumerate(zip(want, check.program.expects)):
        if index >= len(got) or "raised" in got[index] or "raised" in w:
            return index
        if compare(got[index], w, expect.label, Expect("", atol=1e-5, rtol=1e-5)):
            return index
    return None


def cache_state_mistakes(check, later, after_plain):
    """`check`, naming a ValueError raised by a cached call of a sequence started by reset_cache() (record indices
    `later`) when the tokens fit: what reset_cache() left behind still counts as kept; and a first wrong record that
    is the cached call right after a call without the cache (index `after_plain`): that call changed the cache."""
    judge = check.judge or (lambda got, want: default_judge(check, got, want))

    def judged(got, want):
        if first_raised(want):
            return judge(got, want)
        found = first_raised(got)
        if found and found[0] in later and found[1].get("raised") == "ValueError":
            return NamedMistake(raised_message(check.what, found[1], RESET_HINT))
        problem = judge(got, want)
        if problem and after_plain is not None and first_wrong(check, got, want) == after_plain:
            head = problem.split("\n  likely mistake: ")[0]
            return NamedMistake(with_hint(head, PLAIN_WROTE))
        return problem

    check.judge = judged
    return check


def cache_check(inputs, d_in, d_out, heads, context, num_tokens, b, bias, mode="eval"):
    cls = "MultiHeadAttentionWithCache"
    dropout = 0.5 if mode == "eval" else 0.0
    built = f"{cls}({d_in}, {d_out}, {context}, {dropout}, {heads}, qkv_bias={bias}) in {mode} mode"
    x = inputs.randn(b, num_tokens, d_in)
    p = Program()
    module = p.call(G(cls), d_in, d_out, context, dropout, heads, qkv_bias=bias)
    p.record(module, "its parameters", PARAMETERS, kind="parameters")
    p.load(module, attention_state(inputs, d_in, d_out, bias), hint=PARAMETERS)
    p.call(module.attr(mode))
    p.record(p.call(module, p.tensor(x)), f"the output on a random {tuple(x.shape)} input without the cache",
             "without the cache it is step 7's computation: project, split heads, mask, softmax, merge, out_proj",
             atol=1e-5, rtol=1e-5)
    later, after_plain = set(), None
    for sequence, chunks in enumerate(([1] * num_tokens, random_chunks(inputs, num_tokens), [num_tokens])):
        p.call(module.attr("reset_cache"))
        for first, size in zip(torch.tensor([0] + chunks).cumsum(0).tolist(), chunks):
            if size == 1 and first == num_tokens // 2:  # a call without the cache, between cached ones
                p.record(p.call(module, p.tensor(x)), f"the output without the cache after {first} cached tokens",
                         "use_cache=False must neither read nor write the cache", atol=1e-5, rtol=1e-5)
                after_plain = len(p.expects) if sequence == 0 else after_plain
            if sequence:
                later.add(len(p.expects))
            p.record(p.call(module, p.tensor(x[:, first:first + size]), use_cache=True),
                     f"the output of tokens {first}-{first + size - 1} with use_cache=True after {first} cached "
                     f"tokens (chunks {chunks})", CACHE_HINT, atol=1e-5, rtol=1e-5)
    p.record(p.call(module, p.tensor(x)), "the output without the cache after cached calls",
             "use_cache=False must not read the cache", atol=1e-5, rtol=1e-5)
    check = matched_records(Check(f"{built} on a random {tuple(x.shape)} input", p, mistakes=CACHE_MISTAKES))
    return cache_state_mistakes(check, later, after_plain)


NEW_ONLY = ("a cached call projects only the new tokens: run W_key and W_value on x (the new tokens), concatenate "
            "their keys and values to the cached ones, and keep the result; projecting the kept tokens again is the "
            "work the cache exists to save")


def projections_check(inputs, chunks, d_in=4, d_out=6, heads=2, b=2):
    """Cached calls of a module in eval mode, watched in the kernel: the inputs W_key and W_value see must be the new
    tokens only (a teaching check: a student who replaces the probe could forge it)."""
    context = sum(chunks)
    what = (f"MultiHeadAttentionWithCache({d_in}, {d_out}, {context}, 0.0, {heads}) fed chunks of {chunks} tokens "
            "with use_cache=True, watching what W_key and W_value receive")
    x = inputs.randn(b, context, d_in)
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), d_in, d_out, context, 0.0, heads)
    p.call(module.attr("eval"))
    firsts = torch.tensor([0] + chunks).cumsum(0).tolist()
    for first, size in zip(firsts, chunks):
        p.record(p.call(module, p.tensor(x[:, first:first + size]), use_cache=True,
                        inputs_of={"W_key": module.attr("W_key"), "W_value": module.attr("W_value")}),
                 "the output", CACHE_HINT, atol=1e-5, rtol=1e-5)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], CACHE_HINT)
        for index, (first, size) in enumerate(zip(firsts, chunks)):
            seen = got[2 * index].get("inputs_of") if isinstance(got[2 * index], dict) else None
            if not isinstance(seen, dict):
                return f"{what}: what the layers received was not recorded"
            for layer in ("W_key", "W_value"):
                shapes = seen.get(layer)
                if not isinstance(shapes, list):
                    return f"{what}: what self.{layer} received was not recorded"
                # a layer never called is no evidence of work done again: a fused F.linear with its weight is fine
                # (a cache that keeps inputs and projects them again is kept_keys_check's to find)
                for shape in shapes:
                    tokens = (math.prod(shape[:-1]) // b if isinstance(shape, list) and shape and all(
                        isinstance(n, int) for n in shape) else None)
                    if tokens != size:
                        return with_hint(f"{what}: with {first} tokens cached, the call with {size} new tokens gives "
                                         f"self.{layer} an input of shape {tuple(shape) if isinstance(shape, list) else shape}"
                                         f" ({tokens} tokens per sequence, not only the {size} new ones)", NEW_ONLY)
        return None

    return Check(what, p, judge=judge, mistakes=MASK_MISTAKES)


DROPOUT_SCALE = ("nn.Dropout zeroes each weight with probability p and multiplies the survivors by 1 / (1 - p), so "
                 "that the output keeps its expected value: apply self.dropout (an nn.Dropout) to the attention weights")


def dropout_distribution_check(seed, p_drop=0.5, b=16, num_tokens=6, heads=2):
    """Dropout's scale and distribution, seen through the output: with zero queries every visible key gets the
    weight 1 / (i + 1), and with one-hot values and an identity out_proj the output holds the dropped weights
    themselves. In training mode each must be 0 or 1 / ((i + 1)(1 - p)), about a fraction p of them 0."""
    d_in, head_dim = num_tokens, num_tokens
    d_out = heads * head_dim
    what = (f"MultiHeadAttentionWithCache({d_in}, {d_out}, {num_tokens}, {p_drop}, {heads}) in training mode, with "
            "weights that make its output the attention weights after dropout")
    state = {"W_query.weight": torch.zeros(d_out, d_in), "W_key.weight": torch.zeros(d_out, d_in),
             "W_value.weight": torch.eye(num_tokens).repeat(heads, 1), "out_proj.weight": torch.eye(d_out),
             "out_proj.bias": torch.zeros(d_out)}
    x = torch.eye(num_tokens).expand(b, num_tokens, num_tokens).contiguous()
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), d_in, d_out, num_tokens, p_drop, heads)
    p.load(module, state)
    p.call(module.attr("train"))
    p.seed(seed)
    x_ref = p.tensor(x)
    p.record(p.call(module, x_ref), "the output without the cache")
    cut = num_tokens // 2
    for first, last in ((0, cut), (cut, num_tokens)):
        p.record(p.call(module, p.tensor(x[:, first:last]), use_cache=True), f"the output of tokens {first}-{last - 1}"
                 " with use_cache=True")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = compare(got[0], want[0], f"{what}: the weights", ANY_VALUES)
        if problem:
            return with_hint(problem, PARAMETERS)
        rows = []
        for record, want_record, first in ((got[1], want[1], 0), (got[2], want[2], 0), (got[3], want[3], cut)):
            problem = compare(record, want_record, what, ANY_VALUES) if "tensor" not in record else None
            if problem or record["tensor"]["shape"] != want_record["tensor"]["shape"]:
                return problem or compare(record, want_record, what, ANY_VALUES)
            out = tensor_of(record)
            rows += [(first + i, out[:, i].reshape(b, heads, head_dim)) for i in range(out.shape[1])]
        visible, future = [], []
        for position, dropped in rows:
            visible.append((dropped[..., :position + 1] * (position + 1)).flatten())  # 0 or 1 / (1 - p) each
            future.append(dropped[..., position + 1:].flatten())
        visible, future = torch.cat(visible), torch.cat(future)
        if future.numel() and future.abs().max() > 1e-5:
            return with_hint(f"{what}: a token gets weight from a later token", CACHE_HINT)
        zeroed = visible.abs() < 1e-5
        fraction = zeroed.double().mean().item()
        survivors = visible[~zeroed]
        if abs(fraction - p_drop) > 0.1:
            return with_hint(f"{what}: {fraction:.0%} of the attention weights are zero in training mode, expected "
                             f"about p = {p_drop:.0%} (dropout zeroes each weight with probability p)", DROPOUT_SCALE)
        if survivors.numel() and not torch.allclose(survivors, torch.full_like(survivors, 1 / (1 - p_drop)),
                                                    atol=1e-4, rtol=1e-4):
            scale = survivors.median().item()
            return with_hint(f"{what}: the weights that survive dropout are multiplied by {scale:.3g}, not by "
                             f"1 / (1 - p) = {1 / (1 - p_drop):.3g}", DROPOUT_SCALE)
        return None

    return Check(what, p, judge=judge)


def attention_with_cache(inputs):
    checks = []
    for d_in, d_out, heads, context, num_tokens, b, bias in [(3, 4, 2, 6, 6, 2, False), (5, 6, 3, 9, 7, 2, True),
                                                              (4, 8, 2, 5, 5, 3, False), (7, 4, 4, 12, 9, 1, True),
                                                              (3, 10, 5, 8, 6, 2, False)]:
        checks.append(cache_check(inputs, d_in, d_out, heads, context, num_tokens, b, bias))
    checks.append(cache_check(inputs, 4, 6, 2, 8, 7, 2, False, mode="train"))
    checks.append(dropout_check("MultiHeadAttentionWithCache(4, 8, 6, 0.5, 2) on a random (3, 6, 4) input",
                                "MultiHeadAttentionWithCache", (4, 8, 6, 0.5, 2), attention_state(inputs, 4, 8, False),
                                inputs.randn(3, 6, 4), inputs.seed(), "apply self.dropout to the attention weights, as "
                                "in step 7"))
    # kept keys first: a cache of inputs is told so, however it projects them again (self.W_key, F.linear, ...)
    checks += [kept_keys_check(inputs, [2, 1, 2]), kept_keys_check(inputs, [1, 3], d_in=3, d_out=4, b=1),
               projections_check(inputs, [3, 1, 2]), projections_check(inputs, [1, 1, 4], d_in=3, d_out=4, b=1),
               dropout_distribution_check(inputs.seed())]
    return checks


KEPT_HINT = ("keep the keys and values themselves (what W_key and W_value computed), not the inputs: a cached call "
             "projects only the new tokens, and a kept token's key and value are never computed again, so they stay "
             "what the layers gave when the token came")


def kept_keys_check(inputs, chunks, d_in=4, d_out=6, heads=2, b=2):
    """Cached calls, then new weights loaded, then one more cached token: a KV cache keeps the kept tokens' keys and
    values of the old weights, a cache that projects kept inputs again (however it calls the layers: self.W_key(...),
    F.linear with W_key.weight, ...) gives them the new weights, and another output."""
    context = sum(chunks) + 1
    what = (f"MultiHeadAttentionWithCache({d_in}, {d_out}, {context}, 0.0, {heads}) fed chunks of {chunks} tokens "
            "with use_cache=True, then given new weights (load_state_dict) and one more token")
    x = inputs.randn(b, context, d_in)
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), d_in, d_out, context, 0.0, heads)
    p.load(module, attention_state(inputs, d_in, d_out, False), hint=PARAMETERS)
    p.call(module.attr("eval"))
    first = 0
    for size in chunks:
        p.call(module, p.tensor(x[:, first:first + size]), use_cache=True)
        first += size
    p.load(module, attention_state(inputs, d_in, d_out, False), label="the new weights", hint=PARAMETERS)
    p.record(p.call(module, p.tensor(x[:, first:first + 1]), use_cache=True),
             "the output of the next token, whose query meets the keys kept under the old weights", KEPT_HINT,
             atol=1e-5, rtol=1e-5)
    return Check(what, p, mistakes=MASK_MISTAKES)


def value_error_check(what, args, argument, x=None):
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), *args)
    if x is not None:
        p.call(module, p.tensor(x))
    return expect_value_error(what, p, argument)


def overflow_check(context, chunks, d_in=3):
    """Chunks with use_cache=True: all but the last fit in context_length (each must run), the last one passes it and
    must be refused with a ValueError before the cache changes: one more token, which fits, runs next."""
    what = (f"MultiHeadAttentionWithCache({d_in}, 4, {context}, 0.0, 2) fed chunks of {chunks} tokens with "
            "use_cache=True")
    kept = sum(chunks[:-1])
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), d_in, 4, context, 0.0, 2)
    p.load(module, attention_state(Inputs(context), d_in, 4, False), hint=PARAMETERS)
    p.call(module.attr("eval"))
    x = torch.linspace(-1, 1, (context + chunks[-1]) * d_in).reshape(1, context + chunks[-1], d_in)
    for first, size in zip(torch.tensor([0] + chunks[:-1]).cumsum(0).tolist(), chunks[:-1]):
        p.record(p.call(module, p.tensor(x[:, first:first + size]), use_cache=True), "a chunk that fits")
    p.call(module, p.tensor(x[:, kept:kept + chunks[-1]]), use_cache=True, catch=True)
    if context - kept >= 2:  # one more token still fits, unless the refused call grew the cache
        p.call(module, p.tensor(x[:, kept:kept + 1]), use_cache=True)
    refused = len(chunks)  # after the loaded weights and the chunks that fit

    def judge(got, want):
        if first_raised(want):  # a known mistake run in the answer key raised: the student's code must raise alike
            return None if same_raise(got, want) else f"{what}: raised differently"
        if got and "raised" in got[0]:
            return raised_message(what, got[0])
        early = next((index for index, record in enumerate(got[1:refused], 1) if "raised" in record), None)
        if early is not None:
            return raised_message(f"{what}: chunk {early}, which fits in context_length", got[early],
                                  "the kept and new tokens may fill context_length exactly; raise only when they "
                                  "would pass it" if got[early]["raised"] == "ValueError" else "")
        caught = got[refused].get("caught", False) if len(got) > refused and isinstance(got[refused], dict) else False
        if caught is False:
            return f"{what}: what the last chunk raised was not recorded"
        cache_works = all(not compare(got[index], want[index], "a chunk that fits", Expect("", atol=1e-5, rtol=1e-5))
                          for index in range(1, refused))
        if (cache_works and chunks[-1] <= context
                and not (isinstance(caught, dict) and caught.get("raised") == "ValueError")):
            return NamedMistake(with_hint(
                f"{what}: the last chunk ({chunks[-1]} new tokens after {kept} kept, {kept + chunks[-1]} in all) did "
                "not raise a ValueError", KEPT_NOT_COUNTED))
        problem = raises([*got[1:refused], *([caught] if caught else [])], want)
        if problem or len(got) <= refused + 1 or got[refused + 1].get("raised") != "ValueError":
            return problem  # another error of the cache is the cached-attention cell's to judge
        return with_hint(f"{what}: after the refused chunk, one more token (which fits with the {kept} kept) was "
                         "refused too: the refused call changed the cache", "check that the tokens fit before you "
                         "write the cache: a refused call must leave the cache as it was")

    raises = expect_value_error(what, p, "context_length").judge
    return Check(what, p, judge=judge, mistakes=CACHE_MISTAKES[len(MASK_MISTAKES):])


KEPT_NOT_COUNTED = ("the kept tokens are not counted: with use_cache=True the check must compare the kept tokens plus "
                    "the new ones with context_length, although x alone (the new tokens) fits")


def attention_with_cache_arguments(inputs):
    return [value_error_check("MultiHeadAttentionWithCache(4, 6, 5, 0.0, num_heads=4)", (4, 6, 5, 0.0, 4), "d_out"),
            value_error_check("MultiHeadAttentionWithCache(3, 9, 6, 0.0, num_heads=2)", (3, 9, 6, 0.0, 2), "d_out"),
            value_error_check("a forward pass with 7 tokens through MultiHeadAttentionWithCache(3, 4, 6, 0.0, 2)",
                              (3, 4, 6, 0.0, 2), "context_length", torch.zeros(1, 7, 3)),
            overflow_check(6, [4, 3]),
            overflow_check(5, [1, 1, 1, 1, 1, 1]),
            overflow_check(8, [3, 5, 1], d_in=5),
            overflow_check(4, [2, 1, 2])]


RETURN_HINT = ("update writes the new keys and values at slots length .. length + T_new - 1 and returns self.keys and "
               "self.values, all max_len slots, the same shapes at every call")
MASK_HINT = ("new query i is token length + i (length before the update): it may see the slots up to its own, and no "
             "later slot, written or empty; True = blocked")
BOTTOM_RIGHT = ("this is Part 1's mask for t_k = max_len: aligned to the last slot, it treats the new tokens as the "
                "last max_len slots, so they see the empty slots after them; new query i is token length + i and may "
                "see slots 0 .. length + i only")
NOT_CAUSAL = ("the mask blocks only the empty slots: a new query must not see the new tokens after it either (slots "
              "0 .. length + i only)")
TOP_LEFT_SLOTS = "new query i is token length + i, not token i: it also sees every slot stored before the update"
FIT_HINT = "check that the new tokens fit before you write anything: a refused update must leave the cache as it was"
IN_PLACE_HINT = ("allocate keys and values of max_len tokens once in __init__ and write new tokens into a slice of them "
                 "(slice assignment writes in place); torch.cat or a new tensor allocates again")
VIEW_HINT = "return self.keys and self.values themselves (all max_len slots), not copies (clone, cat) or new tensors"


def slot_masks(start, size, max_len):
    """The right mask of `size` new tokens after `start` stored ones, and the usual wrong ones with their hints."""
    slots, tokens = torch.arange(max_len), torch.arange(start, start + size)[:, None]
    right = slots > tokens
    return right, ((slots > torch.arange(max_len - size, max_len)[:, None], BOTTOM_RIGHT),
                   (slots >= start + size, NOT_CAUSAL), (slots > torch.arange(size)[:, None], TOP_LEFT_SLOTS),
                   (slots > tokens - 1, OFF_BY_ONE), (slots > tokens + 1, OFF_BY_ONE), (~right, CONVENTION))


def record_update(p, returned, start, size, max_len, masks):
    """What one update returns: the shapes of keys and values, the stored slots, and the mask (recorded last)."""
    end = start + size
    for position, name in enumerate(("keys", "values")):
        p.record(returned[position].attr("shape"), f"the shape of the {name} update returns after {end} tokens",
                 RETURN_HINT)
    for position, name in enumerate(("keys", "values")):
        p.record(p.call(returned[position].attr("narrow"), 2, 0, end), f"slots 0-{end - 1} of the {name} update "
                 f"returns after {end} tokens", RETURN_HINT)
    masks[len(p.expects)] = (start, size, max_len)
    p.record(returned[2], f"the mask update returns for tokens {start}-{end - 1} (max_len={max_len})", MASK_HINT)


def with_mask_mistakes(check, masks):
    """The default judge; where the first wrong record is a mask, the message names the mistake that gives it."""
    def judge(got, want):
        problem = default_judge(check, got, want)
        if problem is None:
            return None
        for index, (start, size, max_len) in sorted(masks.items()):
            label = check.program.expects[index].label
            if f": {label}" not in problem or index >= len(got) or "tensor" not in got[index]:
                continue
            actual = tensor_of(got[index])
            right, mistakes = slot_masks(start, size, max_len)
            if tuple(actual.shape) != tuple(right.shape):
                return problem
            for mistake, hint in mistakes:
                if torch.equal(actual.bool(), mistake):
                    return NamedMistake(with_hint(f"{check.what}: {label} has the wrong entries "
                                                  f"({int((actual.bool() != right).sum())} differ)", hint))
        return problem

    check.judge = judge
    return check


def chunk_sequence_check(inputs, b, heads, max_len, head_dim, chunks, again):
    """StaticKVCache fed `chunks`, then reset and fed `again`: what each update returns, and `length`."""
    what = f"StaticKVCache({b}, {heads}, {max_len}, {head_dim}) fed chunks of {chunks}, then reset() and {again}"
    p = Program()
    cache = p.call(G("StaticKVCache"), b, heads, max_len, head_dim)
    p.record(cache.attr("length"), "a new cache's length", "length counts the tokens stored: 0 at the start")
    masks = {}
    for sequence in (chunks, again):
        keys, values = inputs.randn(b, heads, sum(sequence), head_dim), inputs.randn(b, heads, sum(sequence), head_dim)
        start = 0
        for size in sequence:
            returned = p.call(cache.attr("update"), p.tensor(keys[:, :, start:start + size]),
                              p.tensor(values[:, :, start:start + size]))
            record_update(p, returned, start, size, max_len, masks)
            start += size
            p.record(cache.attr("length"), f"length after {start} tokens", "length counts the tokens stored")
        p.call(cache.attr("reset"))
    return with_mask_mistakes(Check(what, p), masks)


def refused_update_check(inputs, b, heads, max_len, head_dim, kept, extra):
    """An update that does not fit raises ValueError naming max_len and changes nothing: one that fits runs next."""
    what = f"StaticKVCache({b}, {heads}, {max_len}, {head_dim}) with {kept} tokens stored, updated with {extra} more"
    p = Program()
    cache = p.call(G("StaticKVCache"), b, heads, max_len, head_dim)
    p.call(cache.attr("update"), p.tensor(inputs.randn(b, heads, kept, head_dim)),
           p.tensor(inputs.randn(b, heads, kept, head_dim)))
    p.call(cache.attr("update"), p.tensor(inputs.randn(b, heads, extra, head_dim)),
           p.tensor(inputs.randn(b, heads, extra, head_dim)), catch=True)
    p.record(cache.attr("length"), "length after the refused update", FIT_HINT)
    returned = p.call(cache.attr("update"), p.tensor(inputs.randn(b, heads, 1, head_dim)),
                      p.tensor(inputs.randn(b, heads, 1, head_dim)))
    p.record(p.call(returned[0].attr("narrow"), 2, 0, kept + 1), "the keys one more token's update returns", FIT_HINT)
    p.record(returned[2], "the mask one more token's update returns", FIT_HINT)
    raises = expect_value_error(what, p, "max_len").judge

    def judge(got, want):
        if got and "raised" in got[0]:
            return raised_message(f"{what}: the update that fits", got[0])
        caught = got[0].get("caught", False) if got and isinstance(got[0], dict) else False
        if caught is False:
            return f"{what}: what the update raised was not recorded"
        problem = raises([caught] if caught else [], want)
        if problem:
            return problem
        for index, label in ((1, "length after the refused update"), (2, "the keys one more token's update returns"),
                             (3, "the mask one more token's update returns")):
            if len(got) <= index:
                return f"{what}: stopped before {label}"
            if "raised" in got[index]:
                return raised_message(f"{what}: {label}", got[index], FIT_HINT)
            problem = compare(got[index], want[index], f"{what}: {label}", Expect(label))
            if problem:
                return with_hint(problem, FIT_HINT)
        return None

    return Check(what, p, judge=judge)


def bad_shape_check(b, heads, max_len, head_dim, key_shape, value_shape, why):
    p = Program()
    cache = p.call(G("StaticKVCache"), b, heads, max_len, head_dim)
    p.call(cache.attr("update"), p.tensor(torch.zeros(key_shape)), p.tensor(torch.zeros(value_shape)))
    return expect_value_error(f"StaticKVCache({b}, {heads}, {max_len}, {head_dim}).update with {why}", p, "new_keys")


def static_kv_cache(inputs):
    checks = [chunk_sequence_check(inputs, 2, 3, 7, 4, [3, 1, 2, 1], [2, 2])]
    for b, heads, max_len, head_dim in [(1, 2, 9, 3), (3, 1, 6, 5), (2, 4, 12, 2), (1, 1, 5, 8)]:
        chunks = random_chunks(inputs, inputs.randint(max_len // 2, max_len + 1))
        again = random_chunks(inputs, inputs.randint(1, max_len + 1))
        checks.append(chunk_sequence_check(inputs, b, heads, max_len, head_dim, chunks, again))
    full = [1] * 5
    checks.append(chunk_sequence_check(inputs, 1, 2, 5, 3, full, [5]))  # filling max_len exactly is allowed
    checks.append(refused_update_check(inputs, 2, 3, 7, 4, 5, 3))
    checks.append(refused_update_check(inputs, 1, 2, 6, 3, 3, 4))
    checks.append(refused_update_check(inputs, 3, 1, 4, 2, 2, 3))
    checks.append(bad_shape_check(2, 3, 7, 4, (2, 2, 1, 4), (2, 2, 1, 4), "keys and values of 2 heads in a cache of 3"))
    checks.append(bad_shape_check(2, 3, 7, 4, (2, 3, 1, 5), (2, 3, 1, 5), "a head_dim of 5 in a cache of 4"))
    checks.append(bad_shape_check(2, 3, 7, 4, (1, 3, 1, 4), (1, 3, 1, 4), "a batch of 1 in a cache of 2"))
    checks.append(bad_shape_check(2, 3, 7, 4, (2, 3, 2, 4), (2, 3, 1, 4), "2 new keys and 1 new value"))
    return checks


def memory_check(inputs, b, heads, max_len, head_dim, chunks):
    """The addresses of keys and values never change, and update returns views of them."""
    what = f"StaticKVCache({b}, {heads}, {max_len}, {head_dim}) fed chunks of {chunks}, reset() and one more chunk"
    p = Program()
    cache = p.call(G("StaticKVCache"), b, heads, max_len, head_dim)
    p.record(cache.attr("keys").attr("shape"), "the shape of cache.keys", IN_PLACE_HINT)
    p.record(cache.attr("values").attr("shape"), "the shape of cache.values", IN_PLACE_HINT)

    def addresses(label):
        for name in ("keys", "values"):
            p.record(p.call(cache.attr(name).attr("data_ptr")), f"{label}: the address of cache.{name}")

    addresses("a new cache")
    labels = []
    for index, size in enumerate(chunks + [1]):
        if index == len(chunks):
            p.call(cache.attr("reset"))
        returned = p.call(cache.attr("update"), p.tensor(inputs.randn(b, heads, size, head_dim)),
                          p.tensor(inputs.randn(b, heads, size, head_dim)))
        label = f"update number {index + 1}" + (" (after reset)" if index == len(chunks) else "")
        labels.append(label)
        addresses(label)
        for position, name in enumerate(("keys", "values")):
            p.record(p.call(p.call(returned[position].attr("untyped_storage")).attr("data_ptr")),
                     f"{label}: the memory of the returned {name}")
            p.record(p.call(p.call(cache.attr(name).attr("untyped_storage")).attr("data_ptr")),
                     f"{label}: the memory of cache.{name}")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        for index in (0, 1):
            problem = compare(got[index], want[index], f"{what}: {('the shape of cache.keys', 'the shape of cache.values')[index]}",
                              Expect(""))
            if problem:
                return with_hint(problem, IN_PLACE_HINT)
        first = got[2:4]
        position = 4
        for label in labels:
            if got[position:position + 2] != first:
                return with_hint(f"{what}: after {label}, cache.keys or cache.values is another tensor",
                                 IN_PLACE_HINT)
            returned_keys, cache_keys, returned_values, cache_values = got[position + 2:position + 6]
            if returned_keys != cache_keys or returned_values != cache_values:
                return with_hint(f"{what}: the keys or values returned by {label} are not cache.keys and "
                                 "cache.values", VIEW_HINT)
            position += 6
        return None

    return Check(what, p, judge=judge)


def static_kv_cache_memory(inputs):
    checks = [memory_check(inputs, 1, 2, 6, 3, [1, 1, 1, 1])]
    for b, heads, max_len, head_dim in [(2, 3, 8, 4), (3, 1, 5, 2), (1, 4, 10, 6)]:
        chunks = random_chunks(inputs, inputs.randint(2, max_len))
        checks.append(memory_check(inputs, b, heads, max_len, head_dim, chunks))
    p = Program()
    cache = p.call(G("StaticKVCache"), 2, 2, 4, 3, dtype=torch.float64)
    for name in ("keys", "values"):
        p.record(p.call(cache.attr(name).attr("element_size")), f"bytes per number of cache.{name}",
                 "allocate keys and values with the dtype (and device) given to __init__")
    checks.append(Check("StaticKVCache(2, 2, 4, 3, dtype=torch.float64)", p))
    return checks


def right_masks():
    """Part 1's masks for every size the checks and the visible tests use: in Parts 2 and 3 a student's own
    causal_mask_with_offset answers with these, so that a mistake of Part 1 costs Part 1's points only."""
    return "causal_mask_with_offset", [((t_q, t_k), torch.arange(t_k) > torch.arange(t_k - t_q, t_k)[:, None])
                                       for t_k in range(1, 17) for t_q in range(1, t_k + 1)]


STAND_INS = {"test_cached_attention": right_masks, "test_attention_with_cache": right_masks,
             "test_attention_with_cache_arguments": right_masks}

# Part 4 asks for a cache the lesson did not build: preallocated, written in place, used by attention at fixed shapes
# behind a mask whose offset is the number of tokens stored, not the bottom-right corner of Part 1
TRANSFER = {"test_static_kv_cache", "test_static_kv_cache_memory"}

CELLS = {
    "test_causal_mask_with_offset": causal_mask_with_offset,
    "test_cached_attention": cached_attention,
    "test_attention_with_cache": attention_with_cache,
    "test_attention_with_cache_arguments": attention_with_cache_arguments,
    "test_static_kv_cache": static_kv_cache,
    "test_static_kv_cache_memory": static_kv_cache_memory,
}
