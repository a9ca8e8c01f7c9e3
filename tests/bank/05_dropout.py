"""Submission bank for step 05: correct variants written another way, and common mistakes."""

# Lines of the answer key carried over from step 04's CausalSelfAttention (CausalAttention is it plus dropout).
SHARED_LINES = [
    "self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "attn_scores = queries @ keys.transpose(-2, -1)",
    "attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)",
    "return attn_weights @ values",
]

_CAUSAL_ATTENTION = '''class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        if num_tokens > self.mask.shape[0]:
            raise ValueError(f"too many tokens for context_length={self.mask.shape[0]}")
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        attn_scores = queries @ keys.transpose(-2, -1)
        MASK_LINE
        SOFTMAX_LINE
        DROPOUT_LINE
        return attn_weights @ values
'''


def _causal_attention(mask="attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float('-inf'))",
                      softmax="attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)",
                      dropout="attn_weights = self.dropout(attn_weights)", check=True):
    source = (_CAUSAL_ATTENTION.replace("MASK_LINE", mask).replace("SOFTMAX_LINE", softmax)
              .replace("DROPOUT_LINE", dropout))
    if not check:
        source = source.replace(
            "        if num_tokens > self.mask.shape[0]:\n"
            "            raise ValueError(f\"too many tokens for context_length={self.mask.shape[0]}\")\n", "")
    return source


_DROPOUT_HEAD = "def dropout(x, p, training=True, generator=None):\n"
_P_CHECK = ("    if not 0 <= p <= 1:\n"
            "        raise ValueError(f'p must be in [0, 1], got p={p}')\n")
_SWITCHES = ("    if not training or p == 0:\n"
             "        return x\n"
             "    if p == 1:\n"
             "        return torch.zeros_like(x)\n")
_DRAW = "    keep = torch.rand(x.shape, generator=generator) >= p\n"

_DROP_KEYS_HEAD = ("def drop_keys(attn_scores, p, training=True, generator=None):\n"
                   "    if not 0 <= p <= 1:\n"
                   "        raise ValueError(f'p must be in [0, 1], got p={p}')\n")
_KEY_DRAW = ("    shape = attn_scores.shape[:-2] + (1, attn_scores.shape[-1])\n"
             "    gone = torch.rand(shape, generator=generator) < p\n")


def _drop_keys(draw=_KEY_DRAW, hide="    attn_scores = attn_scores.masked_fill(gone, float('-inf'))\n",
               finish="    return torch.softmax(attn_scores, dim=-1).nan_to_num(nan=0.0)\n", switch=True):
    source = _DROP_KEYS_HEAD
    if switch:
        source += "    if training and p > 0:\n" + "".join("    " + line + "\n" for line in (draw + hide).splitlines())
    else:
        source += draw + hide
    return source + finish

VARIANTS = {
    "bernoulli_mask": {
        "kind": "correct",
        "cells": {
            "dropout":
                _DROPOUT_HEAD + _P_CHECK + _SWITCHES +
                "    mask = torch.bernoulli(torch.full_like(x, 1 - p), generator=generator)\n"
                "    return mask * x * (1.0 / (1 - p))\n",
        },
    },
    "where_keep_below_one_minus_p": {
        "kind": "correct",
        "cells": {
            "dropout":
                _DROPOUT_HEAD +
                "    if p < 0 or p > 1:\n"
                "        raise ValueError('the dropout probability p must lie in [0, 1]')\n"
                "    if not training:\n"
                "        return x.clone()\n"
                "    keep = torch.rand(x.shape, generator=generator) < 1 - p\n"
                "    scale = 1 / (1 - p) if p < 1 else 0.0\n"
                "    return torch.where(keep, x * scale, torch.zeros_like(x))\n",
        },
    },
    "functional_dropout_without_generator": {
        # F.dropout cannot take a generator: use it when none is given, draw a mask from the generator otherwise.
        "kind": "correct",
        "cells": {
            "dropout":
                _DROPOUT_HEAD +
                "    import torch.nn.functional as F\n"
                "    if generator is None:\n"
                "        return F.dropout(x, p, training=training)\n"
                + _P_CHECK + _SWITCHES + _DRAW +
                "    return x * keep / (1 - p)\n",
        },
    },
    "attention_reordered_einsum_functional": {
        # layers created value-first, einsum, a large negative number instead of -inf, a float mask buffer,
        # F.dropout reading self.training, reshape of the mask slice: all correct.
        "kind": "correct",
        "cells": {
            "causal_attention":
                "class CausalAttention(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.dropout = nn.Dropout(dropout)\n"
                "        self.context_length = context_length\n"
                "        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1))\n"
                "\n"
                "    def forward(self, x):\n"
                "        T = x.size(1)\n"
                "        if T > self.context_length:\n"
                "            raise ValueError(f'got {T} tokens but context_length is {self.context_length}')\n"
                "        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)\n"
                "        s = torch.einsum('btd,bsd->bts', q, k) / k.shape[-1] ** 0.5\n"
                "        s = torch.where(self.mask[:T, :T].bool(), torch.full_like(s, -1e9), s)\n"
                "        w = torch.nn.functional.softmax(s, dim=-1)\n"
                "        w = torch.nn.functional.dropout(w, self.dropout.p, training=self.training)\n"
                "        return torch.einsum('bts,bsd->btd', w, v)\n",
        },
    },
    "attention_uses_own_dropout": {
        "kind": "correct",
        "cells": {"causal_attention": _causal_attention(
            dropout="attn_weights = dropout(attn_weights, self.dropout.p, training=self.training)")},
    },
    "dropout_ignores_training": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK +
                  "    if p == 0:\n        return x\n    if p == 1:\n        return torch.zeros_like(x)\n"
                  + _DRAW + "    return x * keep / (1 - p)\n"},
        "fails": {"test_dropout_special_cases": "training=False"},
    },
    "no_rescaling": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK + _SWITCHES + _DRAW + "    return x * keep\n"},
        "fails": {"test_dropout_training": "divide every kept entry by 1 - p"},
    },
    "scaled_by_keep_probability": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK + _SWITCHES + _DRAW + "    return x * keep * (1 - p)\n"},
        "fails": {"test_dropout_training": "divide every kept entry by 1 - p"},
    },
    "drops_with_probability_one_minus_p": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK + _SWITCHES +
                  "    keep = torch.rand(x.shape, generator=generator) < p\n"
                  "    return x * keep / (1 - p)\n"},
        "fails": {"test_dropout_training": "are the two swapped"},
    },
    "generator_ignored": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK + _SWITCHES +
                  "    keep = torch.rand(x.shape) >= p\n"
                  "    return x * keep / (1 - p)\n"},
        "fails": {"test_dropout_training": "generator=generator"},
    },
    "p_one_divides_by_zero": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK +
                  "    if not training or p == 0:\n        return x\n" + _DRAW + "    return x * keep / (1 - p)\n"},
        "fails": {"test_dropout_special_cases": "p = 1 drops every entry"},
    },
    "dropout_in_place": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK + _SWITCHES + _DRAW + "    return x.mul_(keep / (1 - p))\n"},
        "fails": {"test_dropout_training": "changed its input"},
    },
    "global_calls_reseeded": {
        # the visible tests always pass a generator: only the hidden calls without one see the fixed pattern
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK + _SWITCHES +
                  "    if generator is None:\n"
                  "        generator = torch.Generator().manual_seed(0)\n" + _DRAW +
                  "    return x * keep / (1 - p)\n"},
        "fails": {"test_dropout_training": "PyTorch's global generator"},
    },
    "no_value_error_for_p": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + _SWITCHES + _DRAW + "    return x * keep / (1 - p)\n"},
        "fails": {"test_dropout_arguments": "did not raise a ValueError"},
    },
    "assert_instead_of_value_error": {
        "kind": "mistake",
        "cells": {"dropout": _DROPOUT_HEAD + "    assert 0 <= p <= 1, 'p must be in [0, 1]'\n" + _SWITCHES + _DRAW +
                  "    return x * keep / (1 - p)\n"},
        "fails": {"test_dropout_arguments": "instead of a ValueError"},
    },
    "attention_dropout_on_scores": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(
            mask="attn_scores = self.dropout(attn_scores)\n"
                 "        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float('-inf'))",
            dropout="pass")},
        "fails": {"test_causal_attention_dropout": "after softmax"},
    },
    "attention_dropout_on_values": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(dropout="values = self.dropout(values)")},
        "fails": {"test_causal_attention_dropout": "not on the values"},
    },
    "attention_without_dropout": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(dropout="pass")},
        "fails": {"test_causal_attention_dropout": "after softmax"},
    },
    "attention_dropout_rate_fixed": {
        # right for Part 4's visible dropout=0.5 only; Part 3's visible module (dropout=0.0, training mode) drops too
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention().replace("nn.Dropout(dropout)", "nn.Dropout(0.5)")},
        "fails": {"test_causal_attention": "its own value vector",
                  "test_causal_attention_dropout": "the probability the module was given"},
    },
    "attention_qkv_bias_ignored": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention().replace("bias=qkv_bias", "bias=False")},
        "fails": {"test_causal_attention": "bias=qkv_bias"},
    },
    "attention_mask_plain_attribute": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention().replace(
            'self.register_buffer("mask", torch.triu(', "self.mask = (torch.triu(")},
        "fails": {"test_causal_attention": "register_buffer"},
    },
    "attention_mask_not_sliced": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(
            mask="attn_scores = attn_scores.masked_fill(self.mask, float('-inf'))")},
        "fails": {"test_causal_attention": "self.mask[:T, :T]"},
    },
    "attention_no_length_check": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(check=False)},
        "fails": {"test_causal_attention_arguments": "context_length"},
    },
    "attention_masked_fill_result_dropped": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(
            mask="attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float('-inf'))")},
        "fails": {"test_causal_attention": "the result of masked_fill is not used"},
    },
    "attention_not_scaled": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(softmax="attn_weights = torch.softmax(attn_scores, dim=-1)")},
        "fails": {"test_causal_attention": "not divided by sqrt(d_k)"},
    },
    # A mistake of Part 3's attention alone: Part 4 (dropout in the right place) keeps its points, its checks measure
    # dropout against the module's own eval-mode output, not against a right Part 3.
    "attention_softmax_over_queries": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention(
            softmax="attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-2)")},
        "fails": {"test_causal_attention": "the softmax runs over the queries"},
    },
    # Part 4 feeds inputs that fill the context, so that a mask used unsliced still runs there: a length check that
    # refuses a full context fails both (no one context length keeps both mistakes out of Part 4).
    "attention_refuses_full_context": {
        "kind": "mistake",
        "cells": {"causal_attention": _causal_attention().replace("if num_tokens > self.mask.shape[0]:",
                                                                  "if num_tokens >= self.mask.shape[0]:")},
        "fails": {"test_causal_attention": "refuses a full context",
                  "test_causal_attention_dropout": "refuses a full context"},
    },
    "drop_keys_renormalised_after_softmax": {
        # the softmax over the kept keys equals the full softmax times the kept keys, renormalised: correct
        "kind": "correct",
        "cells": {"drop_keys":
            "def drop_keys(attn_scores, p, training=True, generator=None):\n"
            "    if p < 0 or p > 1:\n"
            "        raise ValueError(f'the probability p={p} is not in [0, 1]')\n"
            "    weights = torch.softmax(attn_scores, dim=-1)\n"
            "    if not training or p == 0:\n"
            "        return weights\n"
            "    *lead, t_q, t_k = attn_scores.shape\n"
            "    keep = torch.bernoulli(torch.full((*lead, 1, t_k), 1.0 - p), generator=generator)\n"
            "    weights = weights * keep\n"
            "    total = weights.sum(dim=-1, keepdim=True)\n"
            "    return torch.where(total > 0, weights / torch.where(total > 0, total, torch.ones_like(total)), 0.0)\n"},
    },
    "drop_keys_large_negative_and_visible": {
        # a large negative number instead of -inf, empty rows zeroed by what each query can still see: correct
        "kind": "correct",
        "cells": {"drop_keys":
            "import torch.nn.functional as F\n\n\n"
            "def drop_keys(attn_scores, p, training=True, generator=None):\n"
            "    if not (0.0 <= p <= 1.0):\n"
            "        raise ValueError('p must be a probability in [0, 1]')\n"
            "    visible = torch.isfinite(attn_scores)\n"
            "    if training and p > 0:\n"
            "        u = torch.rand(*attn_scores.shape[:-2], 1, attn_scores.size(-1), generator=generator)\n"
            "        visible = visible & (u >= p)\n"
            "    low = torch.finfo(attn_scores.dtype).min\n"
            "    weights = F.softmax(torch.where(visible, attn_scores, low), dim=-1)\n"
            "    return weights * visible\n"},
    },
    "drop_keys_per_weight": {
        "kind": "mistake",
        "cells": {"drop_keys": _drop_keys(draw="    gone = torch.rand(attn_scores.shape, generator=generator) < p\n")},
        "fails": {"test_drop_keys": "whole keys", "test_drop_keys_statistics": "whole keys"},
    },
    "drop_keys_lesson_dropout_after_softmax": {
        "kind": "mistake",
        "cells": {"drop_keys": _DROP_KEYS_HEAD +
                  "    return dropout(torch.softmax(attn_scores, dim=-1), p, training=training, generator=generator)\n"},
        "fails": {"test_drop_keys": "before the softmax", "test_drop_keys_statistics": "whole keys"},
    },
    "drop_keys_rescaled": {
        "kind": "mistake",
        "cells": {"drop_keys": _drop_keys(finish="    weights = torch.softmax(attn_scores, dim=-1).nan_to_num(nan=0.0)\n"
                                                 "    return weights / (1 - p) if training and p < 1 else weights\n")},
        "fails": {"test_drop_keys": "no division by 1 - p"},
    },
    "drop_keys_nan_rows": {
        "kind": "mistake",
        "cells": {"drop_keys": _drop_keys(finish="    return torch.softmax(attn_scores, dim=-1)\n")},
        "fails": {"test_drop_keys": "nan", "test_drop_keys_statistics": "nan"},
    },
    "drop_keys_score_zeroed": {
        "kind": "mistake",
        "cells": {"drop_keys": _drop_keys(hide="    attn_scores = attn_scores.masked_fill(gone, 0.0)\n")},
        "fails": {"test_drop_keys": "a score of 0", "test_drop_keys_statistics": "a score of 0"},
    },
    # one draw of 6 keys for the whole batch drops none of them 0.7^6 = 12% of the time, so whether test_drop_keys
    # also fails depends on the student's hidden draws: at most its points
    "drop_keys_mask_shared_by_batch": {
        "kind": "mistake", "at_most": True,
        "cells": {"drop_keys": _drop_keys(draw="    gone = torch.rand(attn_scores.shape[-1], generator=generator) < p\n")},
        "fails": {"test_drop_keys_statistics": "shared by the whole batch"},
    },
    "drop_keys_ignores_training": {
        "kind": "mistake",
        "cells": {"drop_keys": _drop_keys(switch=False)},
        "fails": {"test_drop_keys": "training=False"},
    },
    "drop_keys_keeps_with_probability_p": {
        "kind": "mistake",
        "cells": {"drop_keys": _drop_keys(draw=_KEY_DRAW.replace("< p", ">= p"))},
        "fails": {"test_drop_keys": "p = 1 drops every key", "test_drop_keys_statistics": "swapped"},
    },
}


# The library's dropout on the weights in place of the student's own: one draw per weight, after the softmax.
VARIANTS.update({
    "drop_keys_library_dropout": {
        "kind": "mistake",
        "cells": {"drop_keys": _DROP_KEYS_HEAD +
                  "    return torch.nn.functional.dropout(torch.softmax(attn_scores, dim=-1), p, training=training)\n"},
        "fails": {"test_drop_keys": "", "test_drop_keys_statistics": ""},
    },
})

# A library's dropout run inside fork_rng, reseeded from the generator: reproducible, and every statistic right, but
# not the student's own draws (judged from the traced operations: a draw without the generator).
_FORKED = ("    seed = int(torch.randint(2 ** 62, (1,), generator=generator))\n"
           "    with torch.random.fork_rng():\n"
           "        torch.manual_seed(seed)\n")
VARIANTS.update({
    "dropout_library_in_fork_rng": {
        "kind": "cheat",
        "cells": {"dropout": _DROPOUT_HEAD + _P_CHECK + _FORKED +
                  "        return torch.nn.functional.dropout(x, p, training=training)\n"},
        "fails": {"test_dropout_training": "without the generator it was given"},
    },
    "drop_keys_library_mask_in_fork_rng": {
        "kind": "cheat",
        "cells": {"drop_keys": _DROP_KEYS_HEAD +
                  "    if training and p > 0:\n"
                  "        ones = torch.ones(attn_scores.shape[:-2] + (1, attn_scores.shape[-1]))\n"
                  "    " + _FORKED.replace("\n    ", "\n        ") +
                  "            kept = torch.nn.functional.dropout(ones, p) != 0\n"
                  "        attn_scores = attn_scores.masked_fill(~kept, float('-inf'))\n"
                  "    return torch.softmax(attn_scores, dim=-1).nan_to_num(nan=0.0)\n"},
        "fails": {"test_drop_keys": "without the generator it was given"},
    },
})

PROOF = {
    cell: {"lesson": ["drop_keys_lesson_dropout_after_softmax"], "shortcut": ["drop_keys_library_dropout"],
           "correct": ["drop_keys_renormalised_after_softmax", "drop_keys_large_negative_and_visible"]}
    for cell in ("test_drop_keys", "test_drop_keys_statistics")
}


# PyTorch's own attention, its dropout included, where the part asks where the dropout goes: refused from the traced
# operations.
VARIANTS["causal_attention_library_sdpa"] = {
    "kind": "mistake",
    "cells": {"causal_attention": _causal_attention(
        mask="p = self.dropout.p if self.training else 0.0",
        softmax="context = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, is_causal=True, "
                "dropout_p=p)",
        dropout="return context")},
    "fails": {"test_causal_attention": "a library's attention kernel",
              "test_causal_attention_dropout": "a library's attention kernel"},
}


# The library's dropout and attention run in a thread, where the trace does not see them: a watched call may start
# none (attention_course/memory.py)
VARIANTS["library_in_a_thread"] = {
    "kind": "cheat",
    "cells": {"dropout": 'import threading\nimport torch.nn.functional as F\ndef _off_thread(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\ndef dropout(x, p, training=True, generator=None):\n    if not 0 <= p <= 1:\n        raise ValueError(f"the probability p must be in [0, 1], got p={p}")\n    if not training or p == 0:\n        return x\n    seed = int(torch.randint(2 ** 62, (1,), generator=generator))\n    def work():\n        with torch.random.fork_rng():\n            torch.manual_seed(seed)\n            return F.dropout(x, p, training=True)\n    return _off_thread(work)\n',
              "causal_attention": 'import threading\nimport torch.nn.functional as F\ndef _off_thread(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\nclass CausalAttention(nn.Module):\n    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):\n        super().__init__()\n        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n        self.dropout = nn.Dropout(dropout)\n        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))\n\n    def forward(self, x):\n        T = x.shape[1]\n        if T > self.mask.shape[0]:\n            raise ValueError(f"{T} tokens exceed context_length={self.mask.shape[0]}")\n        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)\n        p = self.dropout.p if self.training else 0.0\n        allowed = ~self.mask[:T, :T]\n        return _off_thread(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p))\n',
              "drop_keys": 'import threading\nimport torch.nn.functional as F\ndef _off_thread(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\ndef drop_keys(attn_scores, p, training=True, generator=None):\n    if not 0 <= p <= 1:\n        raise ValueError(f"the probability p must be in [0, 1], got p={p}")\n    if training and p > 0:\n        ones = torch.ones(attn_scores.shape[:-2] + (1, attn_scores.shape[-1]))\n        seed = int(torch.randint(2 ** 62, (1,), generator=generator))\n        def work():\n            with torch.random.fork_rng():\n                torch.manual_seed(seed)\n                return F.dropout(ones, p) != 0\n        kept = _off_thread(work)\n        attn_scores = attn_scores.masked_fill(~kept, float("-inf"))\n    return torch.softmax(attn_scores, dim=-1).nan_to_num(nan=0.0)\n'},
    "fails": {cell: "started a thread" for cell in ("test_dropout_training", "test_causal_attention",
                                                  "test_causal_attention_dropout", "test_drop_keys")},
}
