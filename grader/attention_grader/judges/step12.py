"""Judges of step 12: cached multi-head attention, a pre-LayerNorm block, a tiny GPT and its cache, sampling, training.

Each part is graded on its own. The block's check also records the student's own attention on the inputs the block
gives it (computed here from the loaded weights), and accepts a block that computes the right thing from those
outputs; the model's check records the student's blocks one after the other on the embeddings computed here, and
accepts a model that is right given its blocks. The model's cache is judged on its own cell, against the answer key:
it builds on Parts 1 and 2 by its nature (README). `generate` and `train_step` run on the notebook's locked
`BigramModel`, not on the student's model; it counts the tokens it reads, which shows whether `generate` reads each
new token once through the cache. Sampling is judged by its statistics, not by the draws (any correct use
of the generator passes): tokens outside the top k, and frequencies that fit another temperature, are named.
"""
import math

import torch
import torch.nn.functional as F

from attention_grader.judging import (G, Check, NamedMistake, Program, _kind, compare, default_judge,
                                      expect_value_error, generator, raised_message)
from attention_grader.judges.common import (attention_state, first_raised, linear_state, random_chunks, strictly,
                                            tensor_of, with_other_hint)

MHA_PARAMETERS = ("W_query, W_key, W_value = nn.Linear(d_in, d_out, bias=qkv_bias), out_proj = nn.Linear(d_out, "
                  "d_out), as in steps 07 and 09")
MHA_VALUES = ("split heads, scores / sqrt(head_dim), causal mask, softmax over the keys, weighted sum of the values, "
              "merge the heads, out_proj")
SEES_FUTURE = ("the outputs at earlier positions changed when only later tokens changed: the attention sees the "
               "future (mask the scores above the diagonal before the softmax, and keep the result of masked_fill)")
BLOCK_PARAMETERS = ("norm1 and norm2 = nn.LayerNorm(d_model), att = MultiHeadAttentionWithCache(d_model, d_model, "
                    "context_length, dropout, num_heads), ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), "
                    "nn.GELU(), nn.Linear(4 * d_model, d_model))")
BLOCK_HINT = "x = x + dropout(att(norm1(x))), then x = x + dropout(ff(norm2(x)))"
POST_LN = ("this is a post-LayerNorm block (norm after the residual add, as in the 2017 Transformer); this course, "
           "like GPT-2, normalises inside each branch: x + att(norm1(x)), then x + ff(norm2(x))")
NORMED_RESIDUAL = ("the residual adds the normalised input (norm1(x) + att(norm1(x))): it must add the branch's own "
                   "input, x + att(norm1(x))")
NO_RESIDUAL = "a residual connection is missing: each branch's output is added to its input, x + att(norm1(x))"
GELU_TANH = ("the MLP uses GELU's tanh approximation (GPT-2's, nn.GELU(approximate='tanh')): the task asks for "
             "PyTorch's exact nn.GELU(), its default")
RELU = "the MLP's activation is ReLU: the task asks for nn.GELU() (the exact one, its default)"
NORM1_TWICE = ("the MLP branch reads norm1's output: each branch has its own LayerNorm, norm1 before attention and "
               "norm2 before the MLP")
GPT_PARAMETERS = ("tok_emb = nn.Embedding(vocab_size, d_model), pos_emb = nn.Embedding(context_length, d_model), "
                  "blocks (nn.ModuleList of TransformerBlock), final_norm = nn.LayerNorm(d_model), out_head = "
                  "nn.Linear(d_model, vocab_size, bias=False)")
GPT_HINT = "tok_emb(idx) + pos_emb(positions 0 .. T-1), every block in order, final_norm, out_head"
CACHE_HINT = ("with use_cache=True the new queries attend to the kept keys and values and the new ones (torch.cat "
              "along the tokens), with the mask aligned to the bottom-right corner; keep the result for the next call")
GPT_CACHE_HINT = ("with use_cache=True every block gets use_cache=True and the new tokens sit at the positions after the "
                  "cached ones: pos_emb(kept .. kept + T - 1); reset_cache() empties every block's cache")
GENERATE_HINT = ("run the model on idx[:, -model.context_length:], keep the logits of the last position, divide by "
                 "the temperature, keep the top_k largest, softmax, torch.multinomial, append")
TEMPERATURE_IGNORED = "the temperature is ignored: divide the logits by it before the softmax"
TEMPERATURE_INVERTED = "the logits are multiplied by the temperature: divide them by it"
TOP_K_IGNORED = "set every logit below the k-th largest of its row to -inf before the softmax (top_k was ignored)"
TOP_K_AT_LEAST_VOCAB = ("a top_k as large as the vocabulary or larger keeps every token, as top_k=None does (torch.topk "
                        "refuses a k above the row's size: keep at most as many as the row has)")
TRAIN_HINT = ("logits = model(inputs); loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()); "
              "optimizer.zero_grad(); loss.backward(); clip the gradients when max_grad_norm is given; "
              "optimizer.step(); return loss.item()")
CLIP_HINT = ("the gradients are not clipped, or clipped where it changes nothing: after loss.backward() and before "
             "optimizer.step(), torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)")


def kept_counted(check):
    """`check` (new tokens that fit on their own, after kept ones they do not fit with), naming the mistake when the
    call did not raise: the kept tokens were not counted."""
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        if problem and (not got or _kind(got[-1]) != "raised" or got[-1]["raised"] != "ValueError"):
            return NamedMistake(problem.split("\n  likely mistake: ")[0] + "\n  likely mistake: the kept tokens were "
                                "not counted: the new tokens fit on their own, but kept + new pass context_length; "
                                "check kept + new before you change the cache")
        return problem

    check.judge = judged
    return check


def changed_later(inputs, x, cut, vocab_size=None):
    changed = x.clone()
    if vocab_size is None:
        changed[:, cut:] += inputs.randn(*changed[:, cut:].shape)
    else:
        changed[:, cut:] = (changed[:, cut:] + 1 + inputs.randint(0, vocab_size - 1)) % vocab_size
    return changed


def built_right(check, got, want):
    """The module has the contract's parameters and took the weights (records 0 and 1): only then may its outputs be
    judged from the records of its own parts."""
    return all(len(got) > i and compare(got[i], want[i], "", check.program.expects[i]) is None for i in (0, 1))


def sees_future(got, first, second, cut):
    """True when the student's outputs before `cut` differ between the two inputs (records first, second)."""
    try:
        a, b = tensor_of(got[first]), tensor_of(got[second])
        return a.shape == b.shape and not torch.allclose(a[:, :cut], b[:, :cut], atol=1e-5)
    except (KeyError, TypeError, RuntimeError, IndexError):
        return False


# ---------------------------------------------------------------------------------------------------------------
# Part 1: MultiHeadAttentionWithCache
# ---------------------------------------------------------------------------------------------------------------

class _MistakenAttention(torch.nn.Module):
    """Causal multi-head attention with a KV cache, as the contract asks, except for the one mistake its subclass
    switches on: what a student's module computes with that mistake."""
    scale_by_d_out = split_without_transpose = top_left = cache_always = False

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        torch.nn.Module.__init__(self)
        if d_out % num_heads:
            raise ValueError("d_out must be divisible by num_heads")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.context_length = context_length
        self.W_query = torch.nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = torch.nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = torch.nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = torch.nn.Linear(d_out, d_out)
        self.dropout = torch.nn.Dropout(dropout)
        self.kept = None

    def reset_cache(self):
        self.kept = None

    def split(self, t, b, num_tokens):
        if self.split_without_transpose:
            return t.view(b, self.num_heads, num_tokens, self.head_dim)
        return t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, use_cache=False):
        b, num_tokens = x.shape[:2]
        writes = use_cache or self.cache_always
        kept = self.kept[0].shape[2] if writes and self.kept is not None else 0
        if kept + num_tokens > self.context_length:
            raise ValueError("the tokens do not fit context_length")
        queries, keys, values = (self.split(layer(x), b, num_tokens) for layer in (self.W_query, self.W_key,
                                                                                  self.W_value))
        if writes:
            if self.kept is not None:
                self.kept = (torch.cat([self.kept[0], keys], 2), torch.cat([self.kept[1], values], 2))
            else:
                self.kept = (keys, values)
            if use_cache:
                keys, values = self.kept
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(self.d_out if self.scale_by_d_out else self.head_dim)
        num_keys = keys.shape[2]
        hidden = torch.ones(num_tokens, num_keys, dtype=torch.bool).triu(1 if self.top_left else
                                                                         num_keys - num_tokens + 1)
        weights = self.dropout(torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1))
        context = weights @ values
        context = context if self.split_without_transpose else context.transpose(1, 2)
        return self.out_proj(context.reshape(b, num_tokens, self.d_out))


class _ScaledByDOut(_MistakenAttention):
    scale_by_d_out = True


class _SplitWithoutTranspose(_MistakenAttention):
    split_without_transpose = True


class _TopLeftMask(_MistakenAttention):
    top_left = True


class _CacheAlways(_MistakenAttention):
    cache_always = True


MHA_MISTAKES = (
    ("the scores are divided by sqrt(d_out): each head's dot products have head_dim numbers, so divide by "
     "sqrt(head_dim)", {"MultiHeadAttentionWithCache": _ScaledByDOut}),
    ("the heads were split with view(b, num_heads, T, head_dim) straight from (b, T, d_out), which mixes tokens and "
     "heads: view(b, T, num_heads, head_dim).transpose(1, 2), and transpose(1, 2) back before merging",
     {"MultiHeadAttentionWithCache": _SplitWithoutTranspose}),
    ("the causal mask is aligned to the top-left corner: align it to the bottom-right corner, so that with kept tokens "
     "in the cache new query i sees keys 0 .. kept + i (the mask's last T rows, or triu with diagonal kept + 1)",
     {"MultiHeadAttentionWithCache": _TopLeftMask}),
    ("a call without the cache wrote its keys and values into the cache (or counted them): use_cache=False must "
     "neither read nor write the cache", {"MultiHeadAttentionWithCache": _CacheAlways}))


def mha_check(inputs, d_in, d_out, context, heads, b, num_tokens, bias):
    what = (f"MultiHeadAttentionWithCache({d_in}, {d_out}, {context}, 0.0, num_heads={heads}, qkv_bias={bias}) on a random "
            f"({b}, {num_tokens}, {d_in}) input")
    state, x = attention_state(inputs, d_in, d_out, bias), inputs.randn(b, num_tokens, d_in)
    cut = max(1, num_tokens // 2)
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), d_in, d_out, context, 0.0, heads, qkv_bias=bias)
    p.record(module, "its parameters", MHA_PARAMETERS, kind="parameters")
    p.load(module, state, hint=MHA_PARAMETERS)
    p.call(module.attr("eval"))
    p.record(p.call(module, p.tensor(x)), "the output", MHA_VALUES)
    p.record(p.call(module, p.tensor(changed_later(inputs, x, cut))), f"the output after tokens {cut}.. changed",
             MHA_VALUES)

    def judge(got, want):
        problem = default_judge(check, got, want)
        if problem and num_tokens > 1 and sees_future(got, 2, 3, cut):
            return with_other_hint(problem, SEES_FUTURE)
        return problem

    check = Check(what, p, judge=judge, mistakes=MHA_MISTAKES)
    return strictly(check)


def multi_head_attention(inputs):
    checks = [mha_check(inputs, *case) for case in [(6, 8, 5, 2, 2, 5, False), (4, 12, 8, 3, 1, 7, True),
                                                    (5, 6, 6, 1, 3, 4, False), (3, 16, 9, 4, 2, 9, False),
                                                    (7, 10, 4, 5, 2, 1, True)]]
    p = Program()
    p.call(G("MultiHeadAttentionWithCache"), 4, 9, 5, 0.0, 2)
    checks.append(expect_value_error("MultiHeadAttentionWithCache(4, 9, 5, 0.0, num_heads=2)", p, "d_out"))
    p = Program()
    p.call(p.call(G("MultiHeadAttentionWithCache"), 4, 8, 5, 0.0, 2), p.tensor(torch.zeros(1, 6, 4)))
    checks.append(expect_value_error("MultiHeadAttentionWithCache(4, 8, 5, 0.0, num_heads=2) on 6 tokens", p,
                                     "context_length"))
    checks += [mha_cache_check(inputs, *case) for case in [(5, 8, 7, 2, 7, 2, False), (4, 6, 5, 3, 5, 1, True),
                                                           (3, 12, 9, 4, 8, 2, False)]]
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), 3, 8, 6, 0.0, 2)
    p.call(module, p.tensor(torch.zeros(1, 4, 3)), use_cache=True)
    p.call(module, p.tensor(torch.zeros(1, 3, 3)), use_cache=True)
    checks.append(kept_counted(expect_value_error("MultiHeadAttentionWithCache(3, 8, 6, 0.0, num_heads=2): 3 new "
                                                  "tokens with use_cache=True after 4 cached ones", p,
                                                  "context_length")))
    return checks


def mha_cache_check(inputs, d_in, d_out, context, heads, num_tokens, b, bias):
    built = f"MultiHeadAttentionWithCache({d_in}, {d_out}, {context}, 0.0, num_heads={heads}, qkv_bias={bias})"
    x = inputs.randn(b, num_tokens, d_in)
    p = Program()
    module = p.call(G("MultiHeadAttentionWithCache"), d_in, d_out, context, 0.0, heads, qkv_bias=bias)
    p.record(module, "its parameters", MHA_PARAMETERS, kind="parameters")
    p.load(module, attention_state(inputs, d_in, d_out, bias), hint=MHA_PARAMETERS)
    p.call(module.attr("eval"))
    for chunks in ([1] * num_tokens, random_chunks(inputs, num_tokens)):
        p.call(module.attr("reset_cache"))
        for first, size in zip(torch.tensor([0] + chunks).cumsum(0).tolist(), chunks):
            if first == num_tokens // 2:  # a call without the cache, between cached ones
                p.record(p.call(module, p.tensor(x)), f"the output without the cache after {first} cached tokens",
                         "use_cache=False must neither read nor write the cache", atol=1e-5, rtol=1e-5)
            p.record(p.call(module, p.tensor(x[:, first:first + size]), use_cache=True),
                     f"the output of tokens {first}-{first + size - 1} with use_cache=True after {first} cached "
                     f"tokens (chunks {chunks})", CACHE_HINT, atol=1e-5, rtol=1e-5)
    return strictly(Check(f"{built} fed a random {tuple(x.shape)} input through its cache", p, mistakes=MHA_MISTAKES))


# ---------------------------------------------------------------------------------------------------------------
# Part 2: TransformerBlock
# ---------------------------------------------------------------------------------------------------------------

def norm_state(inputs, name, d):
    return {f"{name}.weight": 1.0 + inputs.randn(d, scale=0.3), f"{name}.bias": inputs.randn(d, scale=0.3)}


def block_state(inputs, d_model, prefix=""):
    state = {**norm_state(inputs, "norm1", d_model), **norm_state(inputs, "norm2", d_model),
             **{f"att.{k}": v for k, v in attention_state(inputs, d_model, d_model, False).items()},
             **linear_state(inputs, "ff.0", d_model, 4 * d_model), **linear_state(inputs, "ff.2", 4 * d_model,
                                                                                   d_model)}
    return {prefix + k: v for k, v in state.items()}


def layer_norm(x, state, name):
    return F.layer_norm(x.double(), x.shape[-1:], state[f"{name}.weight"].double(), state[f"{name}.bias"].double())


def feed_forward(x, state, activation=F.gelu):
    hidden = activation(x @ state["ff.0.weight"].double().T + state["ff.0.bias"].double())
    return hidden @ state["ff.2.weight"].double().T + state["ff.2.bias"].double()


def block_check(inputs, d_model, heads, context, b, num_tokens):
    what = f"TransformerBlock({d_model}, {heads}, {context}, 0.0) on a random ({b}, {num_tokens}, {d_model}) input"
    state, x = block_state(inputs, d_model), inputs.randn(b, num_tokens, d_model)
    cut = max(1, num_tokens // 2)
    p = Program()
    block = p.call(G("TransformerBlock"), d_model, heads, context, 0.0)
    p.record(block, "its parameters", BLOCK_PARAMETERS, kind="parameters")
    p.load(block, state, hint=BLOCK_PARAMETERS)
    p.call(block.attr("eval"))
    p.record(p.call(block, p.tensor(x)), "the output", BLOCK_HINT)
    p.record(p.call(block, p.tensor(changed_later(inputs, x, cut))), f"the output after tokens {cut}.. changed",
             BLOCK_HINT)
    # The student's own attention, on what a right block gives it and on what the mistakes give it.
    normed = layer_norm(x, state, "norm1")
    for label, value in (("att(norm1(x))", normed), ("att(x)", x.double())):
        p.record(p.call(block.attr("att"), p.tensor(value.float())), label, atol=float("inf"))

    def judge(got, want):
        problem = default_judge(check, got[:4], want[:4])
        if problem is None:
            return problem
        if not built_right(check, got, want):
            parameters = compare(got[0], want[0], f"{what}: its parameters", check.program.expects[0]) if got else None
            return NamedMistake(with_other_hint(parameters, BLOCK_PARAMETERS)) if parameters else problem
        if first_raised(got) or len(got) != 6:
            return problem
        try:
            out, att_normed, att_raw = tensor_of(got[2]), tensor_of(got[4]), tensor_of(got[5])
            xd = x.double()

            def pre(h, activation=F.gelu, norm="norm2"):
                return h + feed_forward(layer_norm(h, state, norm), state, activation)

            post_mid = layer_norm(xd + att_raw, state, "norm1")
            normed_mid = normed + att_normed
            candidates = [(None, pre(xd + att_normed)),
                          (POST_LN, layer_norm(post_mid + feed_forward(post_mid, state), state, "norm2")),
                          (NORMED_RESIDUAL, layer_norm(normed_mid, state, "norm2") + feed_forward(
                              layer_norm(normed_mid, state, "norm2"), state)),
                          (NO_RESIDUAL, xd + att_normed + feed_forward(layer_norm(att_normed, state, "norm2"), state)),
                          (NO_RESIDUAL, att_normed + feed_forward(layer_norm(att_normed, state, "norm2"), state)),
                          (NO_RESIDUAL, feed_forward(layer_norm(xd + att_normed, state, "norm2"), state)),
                          (GELU_TANH, pre(xd + att_normed, lambda h: F.gelu(h, approximate="tanh"))),
                          (RELU, pre(xd + att_normed, F.relu)),
                          (NORM1_TWICE, pre(xd + att_normed, norm="norm1"))]
            for hint, expected in candidates:
                if out.shape == expected.shape and torch.allclose(out, expected, atol=1e-4, rtol=1e-4):
                    if hint is None:
                        return None  # right, given the student's own attention (Part 1 is graded there)
                    return NamedMistake(with_other_hint(problem, hint))
        except (KeyError, TypeError, RuntimeError, IndexError):
            return problem
        if num_tokens > 1 and sees_future(got, 2, 3, cut):
            return with_other_hint(problem, SEES_FUTURE)
        return problem

    check = strictly(Check(what, p, judge=judge, mistakes=MHA_MISTAKES))
    return check


def transformer_block(inputs):
    return [block_check(inputs, *case) for case in [(8, 2, 6, 2, 6), (12, 3, 8, 1, 8), (6, 1, 5, 3, 4),
                                                    (16, 4, 10, 2, 9), (4, 2, 3, 2, 1)]]


# ---------------------------------------------------------------------------------------------------------------
# Part 3: TinyGPT
# ---------------------------------------------------------------------------------------------------------------

def gpt_state(inputs, vocab, d_model, layers, context):
    state = {"tok_emb.weight": inputs.randn(vocab, d_model), "pos_emb.weight": inputs.randn(context, d_model),
             **norm_state(inputs, "final_norm", d_model), "out_head.weight": inputs.randn(vocab, d_model, scale=0.5)}
    for layer in range(layers):
        state.update(block_state(inputs, d_model, f"blocks.{layer}."))
    return state


def gpt_check(inputs, vocab, d_model, layers, heads, context, b, num_tokens):
    built = f"TinyGPT({vocab}, {d_model}, {layers}, {heads}, {context}, 0.0)"
    what = f"{built} on random token ids ({b}, {num_tokens})"
    state = gpt_state(inputs, vocab, d_model, layers, context)
    idx = torch.tensor([[inputs.randint(0, vocab) for _ in range(num_tokens)] for _ in range(b)])
    cut = max(1, num_tokens // 2)
    changed = changed_later(inputs, idx, cut, vocab)
    p = Program()
    model = p.call(G("TinyGPT"), vocab, d_model, layers, heads, context, 0.0)
    p.record(model, "its parameters", GPT_PARAMETERS, kind="parameters")
    p.load(model, state, hint=GPT_PARAMETERS)
    p.call(model.attr("eval"))
    p.record(p.call(model, p.tensor(idx)), "the logits", GPT_HINT)
    p.record(p.call(model, p.tensor(changed)), f"the logits after the tokens at positions {cut}.. changed", GPT_HINT)
    # The student's own blocks, one after the other, on the embeddings of both inputs.
    for ids in (idx, changed):
        h = p.tensor((state["tok_emb.weight"][ids] + state["pos_emb.weight"][:num_tokens]).float())
        for layer in range(layers):
            h = p.call(model.attr("blocks")[layer], h)
            p.record(h, f"block {layer}", atol=float("inf"))

    def judge(got, want):
        problem = default_judge(check, got[:4], want[:4])
        if problem is None or not built_right(check, got, want):
            return problem
        if first_raised(got) or len(got) != 4 + 2 * layers:
            return problem
        try:
            right = True
            for record, ids, start in ((got[2], idx, 4), (got[3], changed, 4 + layers)):
                h = (state["tok_emb.weight"][ids] + state["pos_emb.weight"][:num_tokens]).double()
                if layers:
                    h = tensor_of(got[start + layers - 1])
                expected = layer_norm(h, state, "final_norm") @ state["out_head.weight"].double().T
                logits = tensor_of(record)
                right &= logits.shape == expected.shape and torch.allclose(logits, expected, atol=1e-4, rtol=1e-4)
                unnormed = h @ state["out_head.weight"].double().T
                skipped = logits.shape == unnormed.shape and torch.allclose(logits, unnormed, atol=1e-4, rtol=1e-4)
            if right:
                return None  # right, given the student's own blocks (Part 2 is graded there)
            if skipped:
                return NamedMistake(with_other_hint(problem, "final_norm is not applied: the last block's output goes "
                                                            "through final_norm, then out_head"))
        except (KeyError, TypeError, RuntimeError, IndexError):
            return problem
        if num_tokens > 1 and sees_future(got, 2, 3, cut):
            return with_other_hint(problem, SEES_FUTURE)
        return problem

    check = strictly(Check(what, p, judge=judge, mistakes=MHA_MISTAKES))
    return check


def fresh_loss_check(inputs, vocab, d_model, layers, heads, context, b):
    built = f"TinyGPT({vocab}, {d_model}, {layers}, {heads}, {context}, 0.0)"
    what = f"a freshly built {built}: its loss on random token ids ({b}, {context})"
    idx = torch.tensor([[inputs.randint(0, vocab) for _ in range(context)] for _ in range(b)])
    targets = torch.tensor([[inputs.randint(0, vocab) for _ in range(context)] for _ in range(b)])
    p = Program()
    p.seed(inputs.seed())
    model = p.call(G("TinyGPT"), vocab, d_model, layers, heads, context, 0.0)
    p.call(model.attr("eval"))
    p.record(p.call(model, p.tensor(idx)), "the logits", atol=float("inf"))

    def judge(got, want):
        found = first_raised(got)
        if found:
            return f"{what}: it raised {str(found[1]['raised'])[:80]}: {str(found[1]['message'])[:300]}"
        logits = tensor_of(got[0])
        if logits.shape != (b, context, vocab):
            return f"{what}: the logits have shape {tuple(logits.shape)}, expected {(b, context, vocab)}"
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
        if not math.isfinite(loss) or abs(loss - math.log(vocab)) > 0.6:
            return (f"{what} is {loss:.2f}, far from ln({vocab}) = {math.log(vocab):.2f}, the loss of a uniform "
                    "guess\n  likely mistake: a fresh model should be unsure; keep the layers' default "
                    "initialisation and the final LayerNorm before out_head")
        return None

    return Check(what, p, judge=judge)


def learns_check(inputs, vocab, d_model, layers, heads, context, b, steps=6):
    built = f"TinyGPT({vocab}, {d_model}, {layers}, {heads}, {context}, 0.0)"
    what = f"{steps} steps of AdamW(lr=0.01) on one fixed batch ({b}, {context}) for a freshly built {built}"
    idx = torch.tensor([[inputs.randint(0, vocab) for _ in range(context)] for _ in range(b)])
    targets = torch.roll(idx, -1, dims=1)
    p = Program()
    p.seed(inputs.seed())
    model = p.call(G("TinyGPT"), vocab, d_model, layers, heads, context, 0.0)
    optimizer = p.call(G("torch").attr("optim").attr("AdamW"), p.call(model.attr("parameters")), lr=0.01)
    ids, flat_targets = p.tensor(idx), p.tensor(targets.flatten())
    for _ in range(steps):
        logits = p.call(model, ids, grad=True)
        loss = p.call(G("F").attr("cross_entropy"), p.call(logits.attr("flatten"), 0, 1, grad=True), flat_targets,
                      grad=True)
        p.record(loss, "the loss", atol=float("inf"))
        p.call(optimizer.attr("zero_grad"))
        p.call(loss.attr("backward"), grad=True)
        p.call(optimizer.attr("step"))

    def judge(got, want):
        found = first_raised(got)
        if found:
            return f"{what}: it raised {str(found[1]['raised'])[:80]}: {str(found[1]['message'])[:300]}"
        losses = [tensor_of(r).item() for r in got]
        if len(losses) != steps or not all(map(math.isfinite, losses)) or losses[-1] > losses[0] - 0.2:
            return (f"{what}: the loss went {' -> '.join(f'{x:.3f}' for x in losses)}, expected it to fall by more "
                    "than 0.2\n  likely mistake: every layer must be a registered submodule (nn.ModuleList, not a "
                    "Python list) so that model.parameters() gives them to the optimizer")
        return None

    return Check(what, p, judge=judge)


def tiny_gpt(inputs):
    checks = [gpt_check(inputs, *case) for case in [(11, 8, 2, 2, 6, 2, 5), (7, 12, 1, 3, 8, 1, 8),
                                                    (13, 6, 0, 2, 5, 2, 5), (5, 16, 3, 4, 9, 2, 7),
                                                    (9, 4, 2, 1, 4, 3, 1)]]
    checks.append(fresh_loss_check(inputs, 40, 32, 2, 4, 16, 16))
    checks.append(learns_check(inputs, 17, 16, 2, 2, 12, 4))
    p = Program()
    p.call(p.call(G("TinyGPT"), 5, 8, 1, 2, 6, 0.0), p.tensor(torch.zeros(1, 7, dtype=torch.long)))
    checks.append(expect_value_error("TinyGPT(5, 8, 1, 2, 6, 0.0) on 7 tokens", p, "context_length"))
    return checks


def gpt_cache_check(inputs, vocab, d_model, layers, heads, context, b, num_tokens):
    built = f"TinyGPT({vocab}, {d_model}, {layers}, {heads}, {context}, 0.0)"
    what = (f"{built} fed random token ids {tuple((b, num_tokens))} through its cache (greedy generation with and "
            "without the cache agrees only if these logits equal the full pass's)")
    idx = torch.tensor([[inputs.randint(0, vocab) for _ in range(num_tokens)] for _ in range(b)])
    p = Program()
    model = p.call(G("TinyGPT"), vocab, d_model, layers, heads, context, 0.0)
    p.record(model, "its parameters", GPT_PARAMETERS, kind="parameters")
    p.load(model, gpt_state(inputs, vocab, d_model, layers, context), hint=GPT_PARAMETERS)
    p.call(model.attr("eval"))
    cut = max(1, num_tokens // 2)
    p.record(p.call(model, p.tensor(idx)), "the logits without the cache", atol=float("inf"))
    p.record(p.call(model, p.tensor(changed_later(inputs, idx, cut, vocab))), "the logits without the cache after the "
             f"tokens at positions {cut}.. changed", atol=float("inf"))
    pieces = []
    for chunks in ([1] * num_tokens, random_chunks(inputs, num_tokens)):
        p.call(model.attr("reset_cache"))
        for first, size in zip(torch.tensor([0] + chunks).cumsum(0).tolist(), chunks):
            p.record(p.call(model, p.tensor(idx[:, first:first + size]), use_cache=True),
                     f"the logits of tokens {first}-{first + size - 1} with use_cache=True after {first} cached tokens "
                     f"(chunks {chunks})", GPT_CACHE_HINT, atol=1e-4, rtol=1e-4)
            pieces.append((first, size))

    def judge(got, want):
        problem = default_judge(check, got, want)
        found = first_raised(got)
        if (problem and built_right(check, got, want) and found and found[0] == 4 + num_tokens
                and found[1].get("raised") == "ValueError"):
            return NamedMistake(raised_message(what, found[1], "reset_cache() did not zero the model's count of kept "
                                               "tokens: after it, the first call's tokens sit at positions 0 .. and "
                                               "the cache is empty, so they fit in context_length"))
        if problem is None or not built_right(check, got, want) or first_raised(got) or len(got) != 4 + len(pieces):
            return problem
        try:  # right, given the student's own blocks (Parts 1 and 2 are graded there), if it agrees with its full pass
            full = tensor_of(got[2])
            if all(torch.allclose(tensor_of(record), full[:, first:first + size], atol=1e-4, rtol=1e-4)
                   for record, (first, size) in zip(got[4:], pieces)):
                return None
        except (KeyError, TypeError, RuntimeError, IndexError):
            return problem
        if sees_future(got, 2, 3, cut):
            return with_other_hint(problem, "the model's full pass sees the future (see Part 1), and a cache, which "
                                            "has no later tokens to show, cannot agree with it")
        return problem

    check = strictly(Check(what, p, judge=judge, mistakes=MHA_MISTAKES + GPT_CACHE_MISTAKES))
    return check


class _Block(torch.nn.Module):
    """The contract's pre-LayerNorm block around a _MistakenAttention (or a subclass)."""

    def __init__(self, d_model, num_heads, context_length, attention):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d_model), torch.nn.LayerNorm(d_model)
        self.att = attention(d_model, d_model, context_length, 0.0, num_heads)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model), torch.nn.GELU(),
                                      torch.nn.Linear(4 * d_model, d_model))

    def forward(self, x, use_cache=False):
        x = x + self.att(self.norm1(x), use_cache=use_cache)
        return x + self.ff(self.norm2(x))


class _MistakenGPT(torch.nn.Module):
    """TinyGPT as the contract asks, except for the one mistake its subclass switches on."""
    restart_positions = keep_count = False

    def __init__(self, vocab_size, d_model, num_layers, num_heads, context_length, dropout):
        torch.nn.Module.__init__(self)
        self.context_length, self.kept = context_length, 0
        self.tok_emb = torch.nn.Embedding(vocab_size, d_model)
        self.pos_emb = torch.nn.Embedding(context_length, d_model)
        self.blocks = torch.nn.ModuleList(_Block(d_model, num_heads, context_length, _MistakenAttention)
                                          for _ in range(num_layers))
        self.final_norm = torch.nn.LayerNorm(d_model)
        self.out_head = torch.nn.Linear(d_model, vocab_size, bias=False)

    def reset_cache(self):
        for layer in self.blocks:
            layer.att.reset_cache()
        self.kept = self.kept if self.keep_count else 0

    def forward(self, idx, use_cache=False):
        start = self.kept if use_cache else 0
        if start + idx.shape[1] > self.context_length:
            raise ValueError("the tokens do not fit context_length")
        self.kept = start + idx.shape[1] if use_cache else self.kept
        first = 0 if self.restart_positions else start
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(first, first + idx.shape[1]))
        for layer in self.blocks:
            x = layer(x, use_cache=use_cache)
        return self.out_head(self.final_norm(x))


class _PositionsRestart(_MistakenGPT):
    restart_positions = True


GPT_CACHE_MISTAKES = (
    ("with use_cache=True the new tokens were placed at positions 0, 1, ... again: they sit at the positions after "
     "the cached ones, pos_emb(kept .. kept + T - 1), with kept counted by the model itself (its blocks may keep no "
     "count)",
     {"TinyGPT": _PositionsRestart}),)


def tiny_gpt_cache(inputs):
    checks = [gpt_cache_check(inputs, *case) for case in [(11, 8, 2, 2, 6, 2, 6), (7, 12, 1, 3, 8, 1, 7),
                                                          (9, 8, 3, 4, 9, 2, 5)]]
    p = Program()
    model = p.call(G("TinyGPT"), 5, 8, 1, 2, 6, 0.0)
    p.call(model, p.tensor(torch.zeros(1, 4, dtype=torch.long)), use_cache=True)
    p.call(model, p.tensor(torch.zeros(1, 3, dtype=torch.long)), use_cache=True)
    checks.append(kept_counted(expect_value_error("TinyGPT(5, 8, 1, 2, 6, 0.0): 3 new tokens with use_cache=True "
                                                  "after 4 cached ones", p, "context_length")))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 4: generate
# ---------------------------------------------------------------------------------------------------------------

def bigram(p, inputs, vocab, context, scale=1.5):
    """A BigramModel(vocab, context) with random logits, in eval mode; returns (module ref, its logits table)."""
    table = inputs.randn(vocab, vocab, scale=scale)
    model = p.call(G("BigramModel"), vocab, context)
    p.load(model, {"logits.weight": table}, hint="BigramModel is the notebook's (do not redefine it)")
    return model, table


def _generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, *, reset=True, refill=True,
              position=-1, kth_as_row=False):
    """generate as the task asks, except for the one mistake its keyword arguments switch on."""
    if reset:
        model.reset_cache()
    context = model.context_length
    new, filled = idx[:, -context:], 0
    for _ in range(max_new_tokens):
        if refill and filled + new.shape[1] > context:
            model.reset_cache()
            new, filled = idx[:, -context:], 0
        logits = model(new, use_cache=True)[:, position, :] / temperature
        filled += new.shape[1]
        if top_k is not None:
            kept = torch.topk(logits, min(top_k, logits.shape[-1])).values
            kth = kept[:, -1] if kth_as_row else kept[:, [-1]]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        drawn = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
        idx, new = torch.cat([idx, drawn], dim=1), drawn
    return idx


def _mistaken_generate(**mistake):
    def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        return _generate(model, idx, max_new_tokens, temperature, top_k, generator, **mistake)
    return generate


GENERATE_MISTAKES = (
    ("the cache was not emptied first: a second call found the first call's tokens in the model's cache; call "
     "model.reset_cache() before reading the prompt", {"generate": _mistaken_generate(reset=False)}),
    ("when the cache is full nothing empties it, so the model refuses the next token: when the kept tokens plus the "
     "new one would pass context_length, reset_cache() and read the last context_length tokens again",
     {"generate": _mistaken_generate(refill=False)}),
    ("the logits of the first position were kept: the next token follows the last position, logits[:, -1, :]",
     {"generate": _mistaken_generate(position=0)}),
    ("the k-th largest logits, v[:, -1], have shape (b,) and line up with the vocabulary, not with the rows: keep a "
     "column, v[:, [-1]] (b, 1), so that each row is compared with its own k-th logit",
     {"generate": _mistaken_generate(kth_as_row=True)}))


def reuse_check(inputs, vocab, context, b, prompt_length, new):
    """generate twice on the same model: the second call starts from an empty cache, as the first."""
    what = (f"generate(BigramModel({vocab}, context_length={context}), idx, {new}, top_k=1) called twice on the same "
            f"model, random ids ({b}, {prompt_length})")
    p = Program()
    model, _ = bigram(p, inputs, vocab, context)
    idx = p.tensor(torch.tensor([[inputs.randint(0, vocab) for _ in range(prompt_length)] for _ in range(b)]))
    for call in ("first", "second"):
        p.record(p.call(G("generate"), model, idx, new, top_k=1), f"the ids of the {call} call", GENERATE_HINT)
    return strictly(Check(what, p, mistakes=GENERATE_MISTAKES))


def greedy_check(inputs, vocab, context, b, prompt_length, new):
    what = (f"generate(BigramModel({vocab}, context_length={context}), idx, {new}, top_k=1) on random ids "
            f"({b}, {prompt_length})")
    p = Program()
    model, table = bigram(p, inputs, vocab, context)
    idx = torch.tensor([[inputs.randint(0, vocab) for _ in range(prompt_length)] for _ in range(b)])
    p.record(p.call(G("generate"), model, p.tensor(idx), new, top_k=1), "the ids", GENERATE_HINT)
    p.record(model.attr("tokens_read"), "the tokens the model read", atol=float("inf"))

    def judge(got, want):
        problem = default_judge(check, got[:2], want[:2])
        if problem:
            return problem
        read, least = int(got[2].get("int", -1)) if len(got) > 2 else -1, int(want[2]["int"])
        if read != least:
            return (f"{what} made the model read {read} tokens; through the cache it reads {least}: the prompt (its "
                    "last context_length tokens) once, then each drawn token but the last once, and the latest window "
                    "again only when the cache is full\n  likely mistake: after the first call, run model(last_token, "
                    "use_cache=True) on the token drawn last only, and not after the last draw; call reset_cache() "
                    "before the prompt and when the cache is full")
        return None

    check = Check(what, p, judge=judge, mistakes=GENERATE_MISTAKES)
    return strictly(check)


def top_k_check(inputs, vocab, context, b, new, k, temperature):
    what = (f"generate(BigramModel({vocab}, context_length={context}), idx, {new}, temperature={temperature}, "
            f"top_k={k}, generator=...) on random ids ({b}, 2)")
    p = Program()
    model, table = bigram(p, inputs, vocab, context)
    idx = torch.tensor([[inputs.randint(0, vocab) for _ in range(2)] for _ in range(b)])
    p.record(p.call(G("generate"), model, p.tensor(idx), new, temperature=temperature, top_k=k,
                    generator=generator(inputs.seed())), "the ids", atol=float("inf"))

    def judge(got, want):
        found = first_raised(got)
        if found:
            return f"{what} raised {str(found[1]['raised'])[:80]}: {str(found[1]['message'])[:300]}"
        ids = tensor_of(got[1])
        if tuple(ids.shape) != (b, 2 + new):
            return f"{what}: the ids have shape {tuple(ids.shape)}, expected {(b, 2 + new)}"
        ids = ids.long()
        if not torch.equal(ids[:, :2], idx):
            return f"{what}: the first 2 ids are not the prompt\n  likely mistake: return the prompt and the new ids"
        if bool(((ids < 0) | (ids >= vocab)).any()):
            return f"{what}: some ids are not in the vocabulary 0 .. {vocab - 1}"
        allowed = torch.topk(table, k, dim=-1).indices  # (vocab, k): the k most likely after each token
        outside = sum(int(after not in allowed[before]) for row in ids.tolist() for before, after in
                      zip(row[1:], row[2:]))
        if outside:
            return (f"{what}: {outside} of the {b * new} drawn tokens are not among the {k} most likely after the "
                    f"token before them\n  likely mistake: {TOP_K_IGNORED}")
        return None

    return Check(what, p, judge=judge)


def temperature_check(inputs, vocab, per_token, temperature, top_k=None):
    """The frequencies of the drawn tokens fit softmax(logits / temperature); with a top_k at least the vocabulary's
    size (which keeps every token), the same frequencies as without top_k."""
    b = vocab * per_token
    keep = {} if top_k is None else {"top_k": top_k}
    what = (f"the frequencies of {b} tokens drawn by generate(BigramModel({vocab}, 4), idx, 1, "
            f"temperature={temperature}{''.join(f', {k}={v}' for k, v in keep.items())}, generator=...), {per_token} "
            "after each token")
    p = Program()
    model, table = bigram(p, inputs, vocab, 4)
    idx = torch.arange(vocab).repeat(per_token)[:, None]
    p.record(p.call(G("generate"), model, p.tensor(idx), 1, temperature=temperature,
                    generator=generator(inputs.seed()), **keep), "the ids", atol=float("inf"))

    def log_likelihood(counts, scale):
        return float((counts * torch.log_softmax(table.double() * scale, -1)).sum())

    def judge(got, want):
        found = first_raised(got)
        if found:
            return (f"{what}: generate raised {str(found[1]['raised'])[:80]}: {str(found[1]['message'])[:300]}"
                    + ("" if top_k is None else f"\n  likely mistake: {TOP_K_AT_LEAST_VOCAB}"))
        ids = tensor_of(got[1])
        if tuple(ids.shape) != (b, 2):
            return f"{what}: the ids have shape {tuple(ids.shape)}, expected {(b, 2)}"
        ids = ids.long()
        if not torch.equal(ids[:, :1], idx) or bool(((ids < 0) | (ids >= vocab)).any()):
            return f"{what}: the ids do not start with the prompt or are not in the vocabulary"
        counts = torch.zeros(vocab, vocab, dtype=torch.float64)
        counts.index_put_((ids[:, 0], ids[:, 1]), torch.ones(b, dtype=torch.float64), accumulate=True)
        right = log_likelihood(counts, 1 / temperature)
        best = float((counts * torch.log(counts.clamp(min=1) / counts.sum(-1, keepdim=True))).sum())
        other, scale, hint = max((log_likelihood(counts, scale), scale, hint) for scale, hint in
                                 ((1.0, TEMPERATURE_IGNORED), (temperature, TEMPERATURE_INVERTED)))
        if torch.equal(ids[:, 1], table.argmax(-1)[ids[:, 0]]):
            return NamedMistake(f"{what}: every draw is the most likely token\n  likely mistake: the token was picked "
                                "with argmax instead of drawn: torch.multinomial(probs, 1, generator=generator)")
        if other > right:
            return NamedMistake(f"{what} fit another temperature\n  likely mistake: {hint}")
        if 2 * (best - right) > 4 * vocab * (vocab - 1) + 60:  # far beyond a chi-square's spread
            if top_k is not None:
                return f"{what} are far from softmax(logits / temperature)\n  likely mistake: {TOP_K_AT_LEAST_VOCAB}"
            return (f"{what} are far from softmax(logits / temperature)\n  likely mistake: draw with "
                    "torch.multinomial(softmax(logits[:, -1] / temperature), 1, generator=generator)")
        return None

    return Check(what, p, judge=judge)


def generate_checks(inputs):
    checks = [greedy_check(inputs, *case) for case in [(5, 4, 3, 2, 6), (9, 3, 2, 1, 7), (4, 6, 1, 3, 2),
                                                        (12, 2, 4, 2, 5), (6, 16, 2, 3, 8)]]
    checks += [top_k_check(inputs, 8, 3, 60, 4, 2, 1.5), top_k_check(inputs, 6, 4, 40, 3, 3, 1.0),
               top_k_check(inputs, 10, 2, 30, 3, 1, 0.7)]
    checks += [reuse_check(inputs, 5, 4, 2, 2, 3), reuse_check(inputs, 7, 6, 3, 4, 2)]
    checks += [temperature_check(inputs, 4, 1500, 0.5), temperature_check(inputs, 5, 1200, 2.0),
               temperature_check(inputs, 5, 1200, 1.5, top_k=8)]
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 5: train_step
# ---------------------------------------------------------------------------------------------------------------

def train_check(inputs, vocab, b, num_tokens, steps, lr, optimizer="AdamW", clip=None):
    clipped = "" if clip is None else f", max_grad_norm={clip}"
    what = (f"{steps} calls of train_step(model, optimizer, inputs, targets{clipped}) with a BigramModel({vocab}, "
            f"{num_tokens}), {optimizer}(lr={lr}) and random ids ({b}, {num_tokens})")
    p = Program()
    model, _ = bigram(p, inputs, vocab, num_tokens, scale=1.0)
    step_rule = p.call(G("torch").attr("optim").attr(optimizer), p.call(model.attr("parameters")), lr=lr)
    ids = torch.tensor([[inputs.randint(0, vocab) for _ in range(num_tokens + 1)] for _ in range(b)])
    x, y = p.tensor(ids[:, :-1]), p.tensor(ids[:, 1:])
    for step in range(steps):
        p.record(p.call(G("train_step"), model, step_rule, x, y, grad=True, **({} if clip is None else
                                                                              {"max_grad_norm": clip})),
                 f"the loss returned by call {step + 1}", TRAIN_HINT, atol=1e-4, rtol=1e-4)
    p.record(model, "the weights after the steps", TRAIN_HINT, kind="state", atol=1e-4, rtol=1e-4)
    mistakes = [(("the loss is not the mean over all b * T positions: F.cross_entropy(logits.flatten(0, 1), "
                  "targets.flatten()) averages them"), {"train_step": summed_loss}),
                ("the old gradients are not cleared: call optimizer.zero_grad() before loss.backward()",
                 {"train_step": no_zero_grad})]
    mistakes.append((UNFLATTENED, {"train_step": unflattened}))
    if clip is not None:
        mistakes.append((CLIP_HINT, {"train_step": unclipped}))
        mistakes.append((CLIP_VALUE, {"train_step": clipped_by_value}))
    return strictly(Check(what, p, mistakes=tuple(mistakes)))


UNFLATTENED = ("F.cross_entropy got the (b, T, vocab_size) logits as they are: it reads dimension 1 as the classes; "
               "flatten them to (b * T, vocab_size) and the targets to (b * T,)")
CLIP_VALUE = ("each gradient number was clamped to +-max_grad_norm (clip_grad_value_): scale all the gradients "
              "together so that their norm is at most max_grad_norm (clip_grad_norm_)")


def mean_loss(model, inputs, targets):
    """The contract's loss: cross-entropy over every position of every sequence, averaged."""
    return F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())


def unflattened(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):
    return optimize(model, optimizer, F.cross_entropy(model(inputs), targets), clear=True, max_grad_norm=max_grad_norm)


def clipped_by_value(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):
    optimizer.zero_grad()
    loss = mean_loss(model, inputs, targets)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_value_(model.parameters(), max_grad_norm)
    optimizer.step()
    return float(loss)


def summed_loss(model, optimizer, inputs, targets, max_grad_norm=None):
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), reduction="sum")
    return optimize(model, optimizer, loss, clear=True, max_grad_norm=max_grad_norm)


def no_zero_grad(model, optimizer, inputs, targets, max_grad_norm=None):
    loss = mean_loss(model, inputs, targets)
    return optimize(model, optimizer, loss, clear=False, max_grad_norm=max_grad_norm)


def unclipped(model, optimizer, inputs, targets, max_grad_norm=None):
    return optimize(model, optimizer, mean_loss(model, inputs, targets), clear=True)


def optimize(model, optimizer, loss, clear, max_grad_norm=None):
    """One optimizer step on `loss`, as a mistaken train_step does: old gradients cleared first only when `clear`,
    clipped when max_grad_norm is given."""
    for action in ([optimizer.zero_grad] if clear else []) + [loss.backward]:
        action()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_grad_norm)
    optimizer.step()
    return float(loss)


def clip_together_check(inputs, vocab=5, d=3, b=2, num_tokens=4, clip=0.05):
    """train_step with max_grad_norm on a model with two parameters (an embedding, then a linear layer): one
    SGD(lr=1) step moves them by the clipped gradient, all parameters' gradients clipped together."""
    what = (f"train_step(model, SGD(lr=1.0), inputs, targets, max_grad_norm={clip}) with model = nn.Sequential("
            f"nn.Embedding({vocab}, {d}), nn.Linear({d}, {vocab}, bias=False)) and random ids ({b}, {num_tokens})")
    p = Program()
    nn_ = G("torch").attr("nn")
    model = p.call(nn_.attr("Sequential"), p.call(nn_.attr("Embedding"), vocab, d),
                   p.call(nn_.attr("Linear"), d, vocab, bias=False))
    p.load(model, {"0.weight": inputs.randn(vocab, d), "1.weight": inputs.randn(vocab, d)})
    step_rule = p.call(G("torch").attr("optim").attr("SGD"), p.call(model.attr("parameters")), lr=1.0)
    ids = torch.tensor([[inputs.randint(0, vocab) for _ in range(num_tokens + 1)] for _ in range(b)])
    p.call(G("train_step"), model, step_rule, p.tensor(ids[:, :-1]), p.tensor(ids[:, 1:]), grad=True,
           max_grad_norm=clip)
    p.record(model, "the weights after the step", TRAIN_HINT, kind="state", atol=1e-5, rtol=1e-5)
    return strictly(Check(what, p, mistakes=((CLIP_EACH, {"train_step": clipped_each}),
                                             (CLIP_HINT, {"train_step": unclipped}),
                                             (CLIP_VALUE, {"train_step": clipped_by_value}))))


CLIP_EACH = ("each parameter's gradient was clipped on its own: clip all parameters' gradients together, as one "
             "vector, clip_grad_norm_(model.parameters(), max_grad_norm)")


def clipped_each(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):
    optimizer.zero_grad()
    loss = mean_loss(model, inputs, targets)
    loss.backward()
    for parameter in model.parameters():
        torch.nn.utils.clip_grad_norm_(parameter, max_grad_norm)
    optimizer.step()
    return float(loss)


def train_step_checks(inputs):
    return [clip_together_check(inputs)] + [train_check(inputs, *case) for case in [(5, 2, 6, 3, 0.1), (8, 1, 4, 4, 0.05), (3, 3, 5, 2, 0.2),
                                                    (6, 2, 5, 2, 1.0, "SGD", 0.05), (4, 3, 6, 3, 0.1, "AdamW", 0.5)]]


# ---------------------------------------------------------------------------------------------------------------
# Part 6: train_step with micro_batch_size (transfer: the lesson trains on whole batches; here the batch's mean loss
# is split into slices whose gradients must add up to the whole batch's, with one clipping and one step)
# ---------------------------------------------------------------------------------------------------------------

UNWEIGHTED = ("the slices' gradients were added unweighted: each slice's cross-entropy is a mean over its own "
              "positions, so weight it by its share of the batch (its sequences / b) before backward")
EQUAL_WEIGHTS = ("each slice was weighted 1 / (number of slices): the last slice is smaller, so weight each by its "
                 "number of sequences / b")
ZERO_GRAD_PER_SLICE = ("the gradients were cleared before every slice, so only the last slice's remain: clear them "
                       "once, before the first slice")
STEP_PER_SLICE = "the optimizer stepped after every slice: accumulate all the slices' gradients, then step once"
CLIP_PER_SLICE = ("each slice's gradients were clipped on their own: clip once, the whole batch's gradients, after "
                  "the last slice")
LAST_LOSS = "the loss returned is one slice's: return the whole batch's mean, the slices' losses weighted by their size"
NOT_CLEARED = ("the old gradients are not cleared, so the previous call's gradients add to this one's: clear them once "
               "per call, before the first slice")
NOT_CLIPPED = ("the gradients are not clipped, or clipped where it changes nothing: clip the accumulated gradients "
               "after the last slice and before the step")
ACCUMULATION_HINT = ("every slice adds (its mean loss x its sequences / b) to the gradients; clear them once before, "
                     "clip and step once after")


def _slices(inputs, size):
    return [(start, min(start + size, inputs.shape[0])) for start in range(0, inputs.shape[0], size)]


def _accumulate(model, optimizer, inputs, targets, max_grad_norm, micro_batch_size, *, weight="share",
                clear_each=False, step_each=False, clip_each=False, last_loss=False, clear=True, clip=True,
                loss_weight="share", reduction="mean"):
    """A train_step with micro-batches, right (the defaults) or with one known mistake."""
    b = inputs.shape[0]
    spans = _slices(inputs, micro_batch_size or b)
    if clear:
        optimizer.zero_grad()
    total, part = 0.0, None
    for start, end in spans:
        if clear_each:
            optimizer.zero_grad()
        part = F.cross_entropy(model(inputs[start:end]).flatten(0, 1), targets[start:end].flatten(),
                               reduction=reduction)
        scales = {"share": (end - start) / b, "none": 1.0, "equal": 1 / len(spans)}
        (part * scales[weight]).backward()
        total += float(part) * scales[loss_weight]
        if clip_each and max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_grad_norm)
        if step_each:
            optimizer.step()
            optimizer.zero_grad()
    if max_grad_norm is not None and clip and not clip_each:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_grad_norm)
    if not step_each:
        optimizer.step()
    return float(part) if last_loss else total


def _mistaken(**mistake):
    def train_step(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):
        return _accumulate(model, optimizer, inputs, targets, max_grad_norm, micro_batch_size, **mistake)
    return train_step


ACCUMULATION_MISTAKES = ((UNWEIGHTED, {"train_step": _mistaken(weight="none")}),
                         (UNWEIGHTED, {"train_step": _mistaken(weight="none", loss_weight="none")}),
                         (EQUAL_WEIGHTS, {"train_step": _mistaken(weight="equal")}),
                         (EQUAL_WEIGHTS, {"train_step": _mistaken(weight="equal", loss_weight="equal")}),
                         (ZERO_GRAD_PER_SLICE, {"train_step": _mistaken(clear_each=True)}),
                         (STEP_PER_SLICE, {"train_step": _mistaken(step_each=True)}),
                         (CLIP_PER_SLICE, {"train_step": _mistaken(clip_each=True)}),
                         (LAST_LOSS, {"train_step": _mistaken(last_loss=True)}),
                         (NOT_CLEARED, {"train_step": _mistaken(clear=False)}),
                         (NOT_CLIPPED, {"train_step": _mistaken(clip=False)}),
                         (UNFLATTENED, {"train_step": unflattened}),
                         (CLIP_VALUE, {"train_step": clipped_by_value}),
                         (("the loss is not the mean over all b * T positions: F.cross_entropy(logits.flatten(0, 1), "
                           "targets.flatten()) averages them"), {"train_step": _mistaken(reduction="sum")}))


def accumulation_check(inputs, vocab, b, num_tokens, micro, lr, optimizer="SGD", clip=None, steps=1):
    """train_step with micro_batch_size on a BigramModel: the model reads at most `micro` sequences a call, each once;
    the losses and the weights after `steps` calls are the whole batch's."""
    clipped = "" if clip is None else f", max_grad_norm={clip}"
    what = (f"{steps} call(s) of train_step(model, optimizer, inputs, targets{clipped}, micro_batch_size={micro}) "
            f"with a BigramModel({vocab}, {num_tokens}), {optimizer}(lr={lr}) and random ids ({b}, {num_tokens})")
    p = Program()
    model, _ = bigram(p, inputs, vocab, num_tokens, scale=1.0)
    step_rule = p.call(G("torch").attr("optim").attr(optimizer), p.call(model.attr("parameters")), lr=lr)
    ids = torch.tensor([[inputs.randint(0, vocab) for _ in range(num_tokens + 1)] for _ in range(b)])
    x, y = p.tensor(ids[:, :-1]), p.tensor(ids[:, 1:])
    kwargs = {"micro_batch_size": micro, **({} if clip is None else {"max_grad_norm": clip})}
    for step in range(steps):
        p.record(p.call(G("train_step"), model, step_rule, x, y, grad=True, inputs_of={"model": model}, **kwargs),
                 f"the loss returned by call {step + 1}", ACCUMULATION_HINT, atol=1e-4, rtol=1e-4)
    p.record(model, "the weights after the steps", ACCUMULATION_HINT, kind="state", atol=1e-4, rtol=1e-4)

    def judge(got, want):
        # records: loaded, then per call (what the model read, the loss), then the state
        for index in range(steps):
            seen = got[1 + 2 * index] if len(got) > 1 + 2 * index else None
            if seen is None or "raised" in seen:
                break
            if _kind(seen) != "inputs_of":
                return f"{what}: the records of this check are malformed"
            shapes = seen["inputs_of"].get("model") or []
            sizes = [shape[0] if isinstance(shape, list) and shape else None for shape in shapes]
            if (not sizes or any(not isinstance(n, int) or n > micro or n < 1 for n in sizes)
                    or sum(sizes) != b):
                return NamedMistake(f"{what}: call {index + 1} ran the model on batches of {sizes[:12]} sequences\n"
                                    "  likely mistake: slice the batch along its first dimension, at most "
                                    "micro_batch_size sequences per call, each sequence once")
        flat_got = [r for i, r in enumerate(got) if not (i % 2 == 1 and i < 1 + 2 * steps and _kind(r) == "inputs_of")]
        flat_want = [r for i, r in enumerate(want) if not (i % 2 == 1 and i < 1 + 2 * steps and _kind(r) == "inputs_of")]
        return default_judge(check_without_shapes, flat_got, flat_want)

    check = strictly(Check(what, p, judge=judge, mistakes=ACCUMULATION_MISTAKES))
    check_without_shapes = Check(what, Program())
    check_without_shapes.program.expects = [e for e in p.expects if e.label != "the inputs its layers saw"]
    return check


ONE_BACKWARD = ("every slice's graph stays alive until one backward at the end (a sum of the slices' losses), so "
                "the memory grows with the batch as without micro-batches: call backward on each slice's share as "
                "soon as it is computed, so that its activations are freed before the next slice runs")


def accumulation_memory_check(inputs, vocab=8, num_tokens=16, sizes=(4, 16), clip=None):
    """What accumulation is for, judged from what runs: with micro_batch_size=1 the memory a call holds at its peak
    does not grow with the batch (each slice's graph is freed by its backward before the next slice's forward)."""
    clipped = {} if clip is None else {"max_grad_norm": clip}
    what = (f"train_step(model, AdamW, inputs, targets{'' if clip is None else f', max_grad_norm={clip}'}, "
            f"micro_batch_size=1) with a BigramModel({vocab}, {num_tokens}) on random ids of {sizes[0]} and of "
            f"{sizes[1]} sequences of {num_tokens} tokens")
    p = Program()
    for b in sizes:
        model, _ = bigram(p, inputs, vocab, num_tokens, scale=1.0)
        step_rule = p.call(G("torch").attr("optim").attr("AdamW"), p.call(model.attr("parameters")), lr=0.01)
        ids = torch.tensor([[inputs.randint(0, vocab) for _ in range(num_tokens + 1)] for _ in range(b)])
        p.call(G("train_step"), model, step_rule, p.tensor(ids[:, :-1]), p.tensor(ids[:, 1:]), grad=True,
               measure=True, micro_batch_size=1, **clipped)

    def judge(got, _reference):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        peaks = [r["memory"].get("peak_bytes") for r in got
                 if isinstance(r, dict) and isinstance(r.get("memory"), dict)]
        if len(peaks) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in peaks):
            return f"{what}: the memory of its calls was not recorded"
        if peaks[1] > 1.5 * peaks[0]:
            return (f"{what}: at its peak the call held {peaks[0]:,} bytes on {sizes[0]} sequences and "
                    f"{peaks[1]:,} bytes on {sizes[1]}, {peaks[1] / peaks[0]:.1f} times as much\n  likely mistake: "
                    + ONE_BACKWARD)
        return None

    return Check(what, p, judge=judge)


def micro_value_error_check():
    p = Program()
    model = p.call(G("BigramModel"), 4, 5)
    step_rule = p.call(G("torch").attr("optim").attr("SGD"), p.call(model.attr("parameters")), lr=0.1)
    ids = p.tensor(torch.zeros(3, 4, dtype=torch.long))
    p.call(G("train_step"), model, step_rule, ids, ids, grad=True, micro_batch_size=0)
    return expect_value_error("train_step(model, optimizer, inputs, targets, micro_batch_size=0)", p,
                              "micro_batch_size")


def accumulation_checks(inputs):
    checks = [accumulation_check(inputs, *case) for case in [
        (5, 6, 4, 2, 1.0), (6, 7, 3, 3, 1.0), (4, 5, 5, 1, 0.5), (7, 4, 6, 4, 1.0), (5, 8, 3, 8, 1.0),
        (6, 5, 4, 3, 0.05, "AdamW", None, 3), (4, 3, 5, 5, 1.0)]]
    checks.append(micro_value_error_check())
    checks.append(accumulation_memory_check(inputs))
    return checks


def accumulation_clipped_checks(inputs):
    return [accumulation_check(inputs, *case) for case in [
        (5, 7, 4, 3, 1.0, "SGD", 0.05), (6, 5, 5, 2, 1.0, "SGD", 0.02), (4, 6, 3, 4, 1.0, "SGD", 0.1),
        (5, 9, 4, 2, 0.05, "AdamW", 0.5, 2), (7, 4, 6, 5, 1.0, "SGD", 1e-3)]] + [
        accumulation_memory_check(inputs, clip=0.5)]


CELLS = {
    "test_multi_head_attention": multi_head_attention,
    "test_transformer_block": transformer_block,
    "test_tiny_gpt": tiny_gpt,
    "test_tiny_gpt_cache": tiny_gpt_cache,
    "test_generate": generate_checks,
    "test_train_step": train_step_checks,
    "test_train_step_accumulation": accumulation_checks,
    "test_train_step_accumulation_clipped": accumulation_clipped_checks,
}

# Part 6 splits the lesson's whole-batch training step into micro-batches that must give the same step (weights of
# unequal slices, one clear, one clip, one step): a case the lesson does not work through.
TRANSFER = {"test_train_step_accumulation", "test_train_step_accumulation_clipped"}
