"""Judges of step 09: the offset causal mask, attention of new queries against kept keys, a KV cache.

Known mistakes are recognised by running the answer key with its `causal_mask_with_offset` replaced by the mistaken
mask: the answer key's attention and module call it, so a student's module that aligns its mask the wrong way (by
hand, or through SDPA's is_causal=True) computes what the replaced answer key computes.
"""
import torch

from attention_grader.judging import G, Check, Program, call_check, compare, expect_value_error, raised_message
from attention_grader.judges.step07 import (ANY_VALUES, attention_state, dropout_check, first_raised, tensor_of,
                                            with_hint)

TOP_LEFT = ("the causal mask is aligned to the top-left corner, as SDPA's is_causal=True does when T_q != T_k: a new "
            "query i is token T_k - T_q + i and may see keys 0 .. T_k - T_q + i (the mask's diagonal ends in the "
            "bottom-right corner)")
OFF_BY_ONE = "the offset is off by one: query i may see keys 0 .. T_k - T_q + i, itself included, and no later key"
CONVENTION = "True means blocked (step 4's convention), the opposite of SDPA's attn_mask"
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


MASK_MISTAKES = ((TOP_LEFT, {"causal_mask_with_offset": top_left_mask}),
                 (OFF_BY_ONE, {"causal_mask_with_offset": mask_seeing_one_less}),
                 (OFF_BY_ONE, {"causal_mask_with_offset": mask_seeing_one_more}))


def mask_check(t_q, t_k):
    what = f"causal_mask_with_offset({t_q}, {t_k})"
    p = Program()
    p.record(p.call(G("causal_mask_with_offset"), t_q, t_k), "the mask")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = compare(got[0], want[0], what, ANY_VALUES) if "tensor" not in got[0] else None
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
        for mistake, hint in ((top_left_mask, TOP_LEFT), (mask_seeing_one_less, OFF_BY_ONE),
                              (mask_seeing_one_more, OFF_BY_ONE)):
            if torch.equal(actual, mistake(t_q, t_k)):
                return with_hint(f"{what} has the wrong entries ({int((actual != expected).sum())} differ)", hint)
        if torch.equal(actual, ~expected):
            return with_hint(f"{what} is True exactly where attention is allowed", CONVENTION)
        return with_hint(f"{what} has the wrong entries ({int((actual != expected).sum())} differ)",
                         "True above the diagonal that ends in the bottom-right corner: j > t_k - t_q + i")

    return Check(what, p, judge=judge)


def causal_mask_with_offset(inputs):
    sizes = [(2, 5), (1, 1), (1, 7), (3, 3), (4, 9), (6, 10), (5, 6)]
    t_q = inputs.randint(1, 8)
    sizes.append((t_q, t_q + inputs.randint(0, 9)))
    return [mask_check(t_q, t_k) for t_q, t_k in sizes]


def cached_attention(inputs):
    hint = ("scores / sqrt(head_dim), the causal mask with the offset T_k - T_q (Part 1), softmax over the keys, "
            "then @ values")
    checks = []
    for leading, t_q, t_k, head_dim in [((1, 2), 1, 6, 4), ((2, 3), 2, 7, 5), ((3,), 4, 4, 3), ((2, 2), 1, 1, 6),
                                        ((1, 4), 3, 9, 8), ((), 2, 5, 4), ((2, 1, 2), 5, 8, 2)]:
        queries, keys, values = (inputs.randn(*leading, t, head_dim) for t in (t_q, t_k, t_k))
        check = call_check(f"cached_attention with random {tuple(queries.shape)} queries and {tuple(keys.shape)} keys "
                           "and values", "cached_attention", queries, keys, values, hint=hint, atol=1e-5, rtol=1e-5)
        check.mistakes = MASK_MISTAKES
        checks.append(check)
    return checks


def random_chunks(inputs, num_tokens):
    """Sizes of consecutive chunks that add up to num_tokens."""
    sizes = []
    while sum(sizes) < num_tokens:
        sizes.append(min(inputs.randint(1, 4), num_tokens - sum(sizes)))
    return sizes


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
    for chunks in ([1] * num_tokens, random_chunks(inputs, num_tokens), [num_tokens]):
        p.call(module.attr("reset_cache"))
        for first, size in zip(torch.tensor([0] + chunks).cumsum(0).tolist(), chunks):
            if size == 1 and first == num_tokens // 2:  # a call without the cache, between cached ones
                p.record(p.call(module, p.tensor(x)), f"the output without the cache after {first} cached tokens",
                         "use_cache=False must neither read nor write the cache", atol=1e-5, rtol=1e-5)
            p.record(p.call(module, p.tensor(x[:, first:first + size]), use_cache=True),
                     f"the output of tokens {first}-{first + size - 1} with use_cache=True after {first} cached "
                     f"tokens (chunks {chunks})", CACHE_HINT, atol=1e-5, rtol=1e-5)
    p.record(p.call(module, p.tensor(x)), "the output without the cache after cached calls",
             "use_cache=False must not read the cache", atol=1e-5, rtol=1e-5)
    return Check(f"{built} on a random {tuple(x.shape)} input", p, mistakes=MASK_MISTAKES)


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
    return checks


def value_error_check(what, args, argument, x=None):
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), *args)
    if x is not None:
        p.call(module, p.tensor(x))
    return expect_value_error(what, p, argument)


def overflow_check(context, chunks, d_in=3):
    """Chunks with use_cache=True: all but the last fit in context_length (each must run), the last one passes it."""
    what = (f"MultiHeadAttentionWithCache({d_in}, 4, {context}, 0.0, 2) fed chunks of {chunks} tokens with "
            "use_cache=True")
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), d_in, 4, context, 0.0, 2)
    for size in chunks[:-1]:
        p.record(p.call(module, p.tensor(torch.zeros(1, size, d_in)), use_cache=True), "a chunk that fits")
    p.call(module, p.tensor(torch.zeros(1, chunks[-1], d_in)), use_cache=True)
    check = expect_value_error(what, p, "context_length")
    raises = check.judge

    def judge(got, want):
        early = next((index for index, record in enumerate(got[:len(chunks) - 1]) if "raised" in record), None)
        if early is not None:
            return raised_message(f"{what}: chunk {early + 1}, which fits in context_length", got[early],
                                  "the kept and new tokens may fill context_length exactly; raise only when they "
                                  "would pass it")
        return raises(got, want)

    check.judge = judge
    return check


def attention_with_cache_arguments(inputs):
    return [value_error_check("MultiHeadAttentionWithCache(4, 6, 5, 0.0, num_heads=4)", (4, 6, 5, 0.0, 4), "d_out"),
            value_error_check("MultiHeadAttentionWithCache(3, 9, 6, 0.0, num_heads=2)", (3, 9, 6, 0.0, 2), "d_out"),
            value_error_check("a forward pass with 7 tokens through MultiHeadAttentionWithCache(3, 4, 6, 0.0, 2)",
                              (3, 4, 6, 0.0, 2), "context_length", torch.zeros(1, 7, 3)),
            overflow_check(6, [4, 3]),
            overflow_check(5, [1, 1, 1, 1, 1, 1]),
            overflow_check(8, [3, 5, 1], d_in=5),
            overflow_check(4, [2, 1, 2])]


def right_masks():
    """Part 1's masks for every size the checks and the visible tests use: in Parts 2 and 3 a student's own
    causal_mask_with_offset answers with these, so that a mistake of Part 1 costs Part 1's points only."""
    return "causal_mask_with_offset", [((t_q, t_k), torch.arange(t_k) > torch.arange(t_k - t_q, t_k)[:, None])
                                       for t_k in range(1, 17) for t_q in range(1, t_k + 1)]


STAND_INS = {"test_cached_attention": right_masks, "test_attention_with_cache": right_masks,
             "test_attention_with_cache_arguments": right_masks}

CELLS = {
    "test_causal_mask_with_offset": causal_mask_with_offset,
    "test_cached_attention": cached_attention,
    "test_attention_with_cache": attention_with_cache,
    "test_attention_with_cache_arguments": attention_with_cache_arguments,
}
