"""Submission bank for step 04: correct variants written another way, and common mistakes."""
from bank import edit as _edit


# The cheats of tests/bank/integrity.py ride on a mistake that returns wrong values (and fails a visible test).
CHEATS_RIDE_ON = "scaling_forgotten"

# Lines of the answer key carried over from step 03 (its SelfAttention_v2 and scaled_dot_product_attention).
SHARED_LINES = [
    "self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)",
    "return attn_weights @ values",
]




# The answer key's module without solution markers: the mistakes below are small edits of it.
_MODULE = '''class CausalSelfAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        num_tokens = x.shape[1]
        if num_tokens > self.context_length:
            raise ValueError(f"{num_tokens} tokens, more than context_length={self.context_length}")
        queries = self.W_query(x)
        keys = self.W_key(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values
'''

_RENORMALIZED = '''def renormalized_causal_weights(attn_weights):
    num_tokens = attn_weights.shape[-1]
    kept = attn_weights.masked_fill(causal_mask(num_tokens), 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)
'''

_CAUSAL_WEIGHTS = '''def causal_attention_weights(attn_scores, d_k):
    num_tokens = attn_scores.shape[-1]
    masked = attn_scores.masked_fill(causal_mask(num_tokens), float("-inf"))
    return torch.softmax(masked / d_k**0.5, dim=-1)
'''

_MASK_FILL = 'attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))'
_REGISTER = 'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1))'
_CHECK = '''        if num_tokens > self.context_length:
            raise ValueError(f"{num_tokens} tokens, more than context_length={self.context_length}")
'''

VARIANTS = {
    # ---------------------------------------------------------------- correct
    "arange_where_finfo_min": {
        "kind": "correct",
        "cells": {
            "causal_mask":
                "def causal_mask(num_tokens):\n"
                "    positions = torch.arange(num_tokens)\n"
                "    return positions[None, :] > positions[:, None]\n",
            "causal_attention_weights":
                "import math\n"
                "import torch.nn.functional as F\n\n\n"
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    scaled = attn_scores / math.sqrt(d_k)\n"
                "    hide = causal_mask(scaled.shape[-1])\n"
                "    return F.softmax(torch.where(hide, torch.finfo(scaled.dtype).min, scaled), dim=-1)\n",
            "causal_self_attention": _edit(
                _MODULE, (_MASK_FILL, "attn_scores = torch.where(self.mask[:num_tokens, :num_tokens], -1e9, attn_scores)")),
        },
    },
    "tril_keep_mask": {
        # the mask kept in the opposite convention (1 = may attend) and inverted where it is used
        "kind": "correct",
        "cells": {
            "causal_mask":
                "def causal_mask(num_tokens):\n"
                "    return ~torch.tril(torch.ones(num_tokens, num_tokens)).bool()\n",
            "renormalized_causal_weights":
                "def renormalized_causal_weights(attn_weights):\n"
                "    T = attn_weights.shape[-1]\n"
                "    keep = torch.tril(torch.ones(T, T))\n"
                "    kept = attn_weights * keep\n"
                "    return kept / kept.sum(dim=-1, keepdim=True)\n",
            "causal_attention_weights":
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    T = attn_scores.shape[-1]\n"
                "    keep = torch.tril(torch.ones(T, T))\n"
                "    return torch.softmax(attn_scores.masked_fill(keep == 0, float('-inf')) / d_k ** 0.5, dim=-1)\n",
            "causal_self_attention": _edit(
                _MODULE,
                (_REGISTER, 'self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length)))'),
                (_MASK_FILL, 'attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens] == 0, float("-inf"))')),
        },
    },
    "einsum_layers_reordered_large_negative": {
        # layers created value, key, query; extra attributes; einsum; -1e9 instead of -inf; a loop for way 1
        "kind": "correct",
        "cells": {
            "renormalized_causal_weights":
                "def renormalized_causal_weights(attn_weights):\n"
                "    out = attn_weights.clone()\n"
                "    T = out.shape[-1]\n"
                "    for i in range(T):\n"
                "        out[..., i, i + 1:] = 0.0\n"
                "        out[..., i, :] = out[..., i, :] / out[..., i, :].sum(dim=-1, keepdim=True)\n"
                "    return out\n",
            "causal_attention_weights":
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    T = attn_scores.shape[-1]\n"
                "    return torch.softmax(attn_scores.masked_fill(causal_mask(T), -1e9) * d_k ** -0.5, dim=-1)\n",
            "causal_self_attention":
                "class CausalSelfAttention(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.d_out = d_out\n"
                "        self.max_tokens = context_length\n"
                "        self.register_buffer('mask', causal_mask(context_length))\n\n"
                "    def forward(self, x):\n"
                "        b, T, _ = x.shape\n"
                "        if T > self.max_tokens:\n"
                "            raise ValueError(f'context_length is {self.max_tokens}, got {T} tokens')\n"
                "        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)\n"
                "        scores = torch.einsum('bid,bjd->bij', q, k).masked_fill(self.mask[:T, :T], -1e9)\n"
                "        weights = torch.softmax(scores / self.d_out ** 0.5, dim=-1)\n"
                "        return torch.einsum('bij,bjd->bid', weights, v)\n",
        },
    },
    "book_style_in_place": {
        # float triu buffer used with .bool() and masked_fill_ on the module's own scores, as in the book
        "kind": "correct",
        "cells": {
            "causal_self_attention": _edit(_MODULE, (
                _REGISTER, 'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))'), (
                _MASK_FILL, "attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)")),
        },
    },
    "where_clone_way_1_in_module": {
        # torch.where for way 1, clone + masked_fill_ for way 2, and the module applying way 1
        "kind": "correct",
        "cells": {
            "renormalized_causal_weights":
                "def renormalized_causal_weights(attn_weights):\n"
                "    hide = causal_mask(attn_weights.shape[-1])\n"
                "    kept = torch.where(hide, torch.zeros_like(attn_weights), attn_weights)\n"
                "    return kept / torch.sum(kept, dim=-1, keepdim=True)\n",
            "causal_attention_weights":
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    scores = attn_scores.clone()\n"
                "    scores.masked_fill_(causal_mask(scores.shape[-1]), -torch.inf)\n"
                "    return torch.softmax(scores / d_k ** 0.5, dim=-1)\n",
            "causal_self_attention":
                "class CausalSelfAttention(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        self.W_query = torch.nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = torch.nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_value = torch.nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1))\n\n"
                "    def forward(self, x):\n"
                "        b, num_tokens, d_in = x.shape\n"
                "        if num_tokens > self.mask.shape[0]:\n"
                "            raise ValueError(f'too many tokens: {num_tokens} > context_length ({self.mask.shape[0]})')\n"
                "        keys = self.W_key(x)\n"
                "        queries = self.W_query(x)\n"
                "        values = self.W_value(x)\n"
                "        attn_scores = queries @ keys.mT\n"
                "        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)\n"
                "        hide = self.mask.bool()[:num_tokens, :num_tokens]\n"
                "        attn_weights = attn_weights.masked_fill(hide, 0.0)\n"
                "        attn_weights = attn_weights / attn_weights.sum(dim=-1, keepdim=True)\n"
                "        return attn_weights @ values\n",
        },
    },
    "additive_mask_persistent_false": {
        # an additive 0 / -inf mask, a non-persistent buffer, F.softmax, bmm with reshape
        "kind": "correct",
        "cells": {
            "causal_mask":
                "def causal_mask(num_tokens):\n"
                "    return torch.ones(num_tokens, num_tokens).triu(1).bool()\n",
            "causal_attention_weights":
                "import torch.nn.functional as F\n\n\n"
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    T = attn_scores.shape[-1]\n"
                "    additive = torch.zeros(T, T).masked_fill(causal_mask(T), float('-inf'))\n"
                "    return F.softmax(attn_scores / d_k ** 0.5 + additive, dim=-1)\n",
            "causal_self_attention":
                "import torch.nn.functional as F\n\n\n"
                "class CausalSelfAttention(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        self.context_length = context_length\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.register_buffer('mask', causal_mask(context_length), persistent=False)\n\n"
                "    def forward(self, x):\n"
                "        if x.shape[1] > self.context_length:\n"
                "            raise ValueError('input longer than context_length')\n"
                "        b, T, _ = x.shape\n"
                "        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)\n"
                "        scores = torch.bmm(q.reshape(b, T, -1), k.permute(0, 2, 1))\n"
                "        additive = torch.zeros(T, T, dtype=scores.dtype).masked_fill(self.mask[:T, :T], float('-inf'))\n"
                "        weights = F.softmax(scores / k.shape[-1] ** 0.5 + additive, dim=-1)\n"
                "        return torch.bmm(weights, v)\n",
        },
    },
    # ---------------------------------------------------------------- mistakes: the mask itself
    "causal_mask_tril_hides_past": {
        "kind": "mistake",
        "cells": {
            "causal_mask":
                "def causal_mask(num_tokens):\n"
                "    return torch.tril(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=-1)\n",
        },
        # only Part 1 loses its points: in the later parts' test cells the judges' stand-in (STAND_INS) answers
        # the calls of causal_mask, so the answer key's parts built on it keep theirs
        "fails": {"test_causal_mask": "True below the diagonal blocks the past"},
    },
    "module_mask_tril_as_hide_mask": {
        "kind": "mistake",
        "cells": {
            "causal_self_attention": _edit(
                _MODULE, (_REGISTER, 'self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length, dtype=torch.bool)))')),
        },
        "fails": {"test_causal_self_attention": "ABOVE the diagonal"},
    },
    "module_mask_diagonal_0": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, ("diagonal=1", "diagonal=0"))},
        "fails": {"test_causal_self_attention": "ABOVE the diagonal"},
    },
    # ---------------------------------------------------------------- mistakes: way 1 and way 2
    "renormalized_T_from_dim_1": {
        # T read from dimension 1: right for (T, T) and (b, T, T), wrong with two leading dimensions
        "kind": "mistake",
        "cells": {"renormalized_causal_weights": _edit(_RENORMALIZED, ("attn_weights.shape[-1]", "attn_weights.shape[1]"))},
        "fails": {"test_renormalized_causal_weights": "attn_weights.shape[-1]",
                  "test_two_ways_agree": "both must give the same weights"},
    },
    "renormalisation_forgotten": {
        "kind": "mistake",
        "cells": {
            "renormalized_causal_weights":
                "def renormalized_causal_weights(attn_weights):\n"
                "    return attn_weights.masked_fill(causal_mask(attn_weights.shape[-1]), 0.0)\n",
        },
        "fails": {"test_renormalized_causal_weights": "divide each row by its sum",
                  "test_two_ways_agree": "divides by the row sums"},
    },
    "minus_inf_after_softmax": {
        "kind": "mistake",
        "cells": {"renormalized_causal_weights": _edit(_RENORMALIZED, ("0.0)", "float('-inf'))"))},
        "fails": {"test_renormalized_causal_weights": "-inf after softmax",
                  "test_two_ways_agree": "both must give the same weights"},
    },
    "renormalized_in_place_on_input": {
        "kind": "mistake",
        "cells": {
            "renormalized_causal_weights":
                "def renormalized_causal_weights(attn_weights):\n"
                "    attn_weights.masked_fill_(causal_mask(attn_weights.shape[-1]), 0.0)\n"
                "    attn_weights /= attn_weights.sum(dim=-1, keepdim=True)\n"
                "    return attn_weights\n",
        },
        "fails": {"test_renormalized_causal_weights": "not masked_fill_"},
    },
    "softmax_then_minus_inf": {
        "kind": "mistake",
        "cells": {
            "causal_attention_weights":
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    attn_weights = torch.softmax(attn_scores / d_k**0.5, dim=-1)\n"
                "    return attn_weights.masked_fill(causal_mask(attn_scores.shape[-1]), float('-inf'))\n",
        },
        "fails": {"test_causal_attention_weights": "-inf BEFORE softmax",
                  "test_two_ways_agree": "masks before the softmax"},
    },
    "masked_fill_result_dropped_way_2": {
        "kind": "mistake",
        "cells": {
            "causal_attention_weights":
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float('-inf'))\n"
                "    return torch.softmax(attn_scores / d_k**0.5, dim=-1)\n",
        },
        "fails": {"test_causal_attention_weights": "keep the result of masked_fill",
                  "test_two_ways_agree": "both must give the same weights"},
    },
    "scaling_forgotten": {
        "kind": "mistake",
        "cells": {"causal_attention_weights": _edit(_CAUSAL_WEIGHTS, ("masked / d_k**0.5", "masked"))},
        "fails": {"test_causal_attention_weights": "sqrt(4)",
                  "test_two_ways_agree": "sqrt(d_k)"},
    },
    "way_2_in_place_on_input": {
        "kind": "mistake",
        "cells": {
            "causal_attention_weights":
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    attn_scores.masked_fill_(causal_mask(attn_scores.shape[-1]), float('-inf'))\n"
                "    return torch.softmax(attn_scores / d_k**0.5, dim=-1)\n",
        },
        "fails": {"test_causal_attention_weights": "not masked_fill_"},
    },
    # ---------------------------------------------------------------- mistakes: the module
    "masked_fill_result_dropped_module": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, (_MASK_FILL, _MASK_FILL.replace("attn_scores = ", "", 1)))},
        "fails": {"test_causal_self_attention": "keep the result of masked_fill"},
    },
    "mask_not_sliced": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, ("self.mask[:num_tokens, :num_tokens]", "self.mask"))},
        "fails": {"test_causal_self_attention": "slice the mask"},
    },
    "transpose_T_on_batch": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, ("keys.transpose(-2, -1)", "keys.T"))},
        "fails": {"test_causal_self_attention": "not keys.T"},
    },
    "forward_reads_notebook_batch": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, ("num_tokens = x.shape[1]", "num_tokens = batch.shape[1]"))},
        # the length check reads the notebook's 6-token batch too, so a 7-token context lets 8 tokens through
        "fails": {"test_causal_self_attention": "not a notebook variable",
                  "test_causal_self_attention_too_long": "instead of a ValueError"},
    },
    "forward_reads_notebook_d_k": {
        "kind": "mistake",
        # d_k = 2 is a variable of the notebook (set by the Part 3 tests): right only when d_out == 2
        "cells": {"causal_self_attention": _edit(_MODULE, ("keys.shape[-1] ** 0.5", "d_k ** 0.5"))},
        "fails": {"test_causal_self_attention": "the module's attributes"},
    },
    "qkv_bias_ignored": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, *[(f"self.{n} = nn.Linear(d_in, d_out, bias=qkv_bias)",
                                                             f"self.{n} = nn.Linear(d_in, d_out)")
                                                            for n in ("W_query", "W_key", "W_value")])},
        "fails": {"test_causal_self_attention": "bias=qkv_bias"},
    },
    "mask_fixed_size_six": {
        # the mask built for the example's 6 tokens, not for context_length: the visible tests use exactly 6
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, (_REGISTER, _REGISTER.replace("context_length, context_length", "6, 6")))},
        "fails": {"test_causal_self_attention": "self.mask[:T, :T]",
                  "test_causal_self_attention_mask_buffer": "for context_length tokens"},
    },
    "mask_plain_attribute": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, (
            _REGISTER,
            "self.mask = torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1)"))},
        "fails": {"test_causal_self_attention_mask_buffer": "register_buffer"},
    },
    "mask_as_parameter": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(
            _MODULE,
            (_REGISTER, "self.mask = nn.Parameter(torch.triu(torch.ones(context_length, context_length), diagonal=1))"),
            ("self.mask[:num_tokens, :num_tokens]", "self.mask.bool()[:num_tokens, :num_tokens]"))},
        "fails": {"test_causal_self_attention_mask_buffer": "register_buffer"},
    },
    "assert_instead_of_value_error": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, (
            _CHECK, '        assert num_tokens <= self.context_length, "too many tokens for context_length"\n'))},
        "fails": {"test_causal_self_attention_too_long": "should raise ValueError"},
    },
    "no_length_check": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, (_CHECK, ""))},
        "fails": {"test_causal_self_attention_too_long": "should raise ValueError"},
    },
    "value_error_without_the_name": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, (
            'raise ValueError(f"{num_tokens} tokens, more than context_length={self.context_length}")',
            'raise ValueError("the input is too long")'))},
        "fails": {"test_causal_self_attention_too_long": "name context_length"},
    },
}


# Issue 25: both ways wrong in the same way (no mask at all) agree with each other; Part 3 checks each against the
# reference too (it kept its point before).
VARIANTS.update({
    "route_both_ways_without_a_mask": {
        "kind": "mistake",
        "cells": {
            "renormalized_causal_weights":
                "def renormalized_causal_weights(attn_weights):\n"
                "    return attn_weights / attn_weights.sum(dim=-1, keepdim=True)\n",
            "causal_attention_weights":
                "def causal_attention_weights(attn_scores, d_k):\n"
                "    return torch.softmax(attn_scores / d_k ** 0.5, dim=-1)\n",
        },
        "fails": {"test_renormalized_causal_weights": "", "test_causal_attention_weights": "",
                  "test_two_ways_agree": "way 1"},
    },
})


# Parts 5 and 6 (transfer): the packed mask and the sliding window.
_PACKED = '''def packed_causal_mask(document_ids):
    if not isinstance(document_ids, torch.Tensor) or document_ids.dim() == 0 or document_ids.is_floating_point():
        raise ValueError("document_ids must be an integer tensor of shape (..., T)")
    positions = torch.arange(document_ids.shape[-1])
    later_key = positions[None, :] > positions[:, None]
    other_document = document_ids.unsqueeze(-1) != document_ids.unsqueeze(-2)
    return later_key | other_document
'''
_WINDOW = '''def sliding_window_causal_mask(num_tokens, window):
    if window < 1:
        raise ValueError(f"window must be at least 1, got window={window}")
    positions = torch.arange(num_tokens)
    distance = positions[:, None] - positions[None, :]
    return (distance < 0) | (distance >= window)
'''
VARIANTS.update({
    "packed_same_document_and_tril": {
        # the allowed pairs built first (same document AND not in the future), then inverted
        "kind": "correct",
        "cells": {
            "packed_causal_mask":
                "def packed_causal_mask(document_ids):\n"
                "    if not torch.is_tensor(document_ids) or document_ids.ndim < 1 or torch.is_floating_point(document_ids):\n"
                "        raise ValueError(f'document_ids must hold integers, got {document_ids!r}')\n"
                "    T = document_ids.shape[-1]\n"
                "    same = document_ids[..., :, None] == document_ids[..., None, :]\n"
                "    return ~(same & torch.tril(torch.ones(T, T, dtype=torch.bool)))\n",
        },
    },
    "packed_segments_from_boundaries": {
        # documents numbered by counting the boundaries (cumsum), and Part 1's causal_mask reused
        "kind": "correct",
        "cells": {
            "packed_causal_mask":
                "def packed_causal_mask(document_ids):\n"
                "    if not isinstance(document_ids, torch.Tensor) or document_ids.dim() < 1 \\\n"
                "            or document_ids.dtype.is_floating_point:\n"
                "        raise ValueError('document_ids: expected an integer tensor (..., T)')\n"
                "    starts = torch.ones(document_ids.shape, dtype=torch.long)\n"
                "    starts[..., 1:] = (document_ids[..., 1:] != document_ids[..., :-1]).long()\n"
                "    segment = starts.cumsum(dim=-1)\n"
                "    return causal_mask(document_ids.shape[-1]) | (segment.unsqueeze(-1) != segment.unsqueeze(-2))\n",
        },
    },
    "packed_documents_only": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": _edit(_PACKED, ("return later_key | other_document", "return other_document"))},
        "fails": {"test_packed_causal_mask": "OR belongs to another document"},
    },
    "packed_and_instead_of_or": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": _edit(_PACKED, ("later_key | other_document", "later_key & other_document"))},
        "fails": {"test_packed_causal_mask": "OR belongs to another document"},
    },
    "packed_causal_only": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": _edit(_PACKED, ("return later_key | other_document",
                                                        "return later_key.expand(*document_ids.shape, -1)"))},
        "fails": {"test_packed_causal_mask": "another document"},
    },
    "packed_one_row_only": {
        # right for one row; on a batch the two copies of the ids broadcast to the wrong shape
        "kind": "mistake",
        "cells": {"packed_causal_mask": _edit(_PACKED, (
            "document_ids.unsqueeze(-1) != document_ids.unsqueeze(-2)", "document_ids[:, None] != document_ids[None, :]"))},
        "fails": {"test_packed_causal_mask": "along the last dimension"},
    },
    "packed_no_value_error": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": _edit(_PACKED, (
            '    if not isinstance(document_ids, torch.Tensor) or document_ids.dim() == 0 or document_ids.is_floating_point():\n'
            '        raise ValueError("document_ids must be an integer tensor of shape (..., T)")\n', ""))},
        "fails": {"test_packed_causal_mask": "check document_ids first"},
    },
    "window_loop": {
        "kind": "correct",
        "cells": {
            "sliding_window_causal_mask":
                "def sliding_window_causal_mask(num_tokens, window):\n"
                "    if window < 1:\n"
                "        raise ValueError('window must be >= 1')\n"
                "    mask = torch.ones(num_tokens, num_tokens, dtype=torch.bool)\n"
                "    for i in range(num_tokens):\n"
                "        mask[i, max(0, i - window + 1):i + 1] = False\n"
                "    return mask\n",
        },
    },
    "window_two_triangles": {
        "kind": "correct",
        "cells": {
            "sliding_window_causal_mask":
                "def sliding_window_causal_mask(num_tokens, window):\n"
                "    if not window >= 1:\n"
                "        raise ValueError(f'{window=} is not a window')\n"
                "    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool)\n"
                "    return torch.triu(ones, diagonal=1) | torch.tril(ones, diagonal=-window)\n",
        },
    },
    "window_off_by_one": {
        "kind": "mistake",
        "cells": {"sliding_window_causal_mask": _edit(_WINDOW, ("distance >= window", "distance > window"))},
        "fails": {"test_sliding_window_causal_mask": "one of its window"},
    },
    "window_both_sides": {
        "kind": "mistake",
        "cells": {"sliding_window_causal_mask": _edit(_WINDOW, ("(distance < 0) | (distance >= window)",
                                                                "distance.abs() >= window"))},
        "fails": {"test_sliding_window_causal_mask": "itself and the token before it"},
    },
    "window_no_value_error": {
        "kind": "mistake",
        "cells": {"sliding_window_causal_mask": _edit(_WINDOW, (
            '    if window < 1:\n        raise ValueError(f"window must be at least 1, got window={window}")\n', ""))},
        "fails": {"test_sliding_window_causal_mask": "check window first"},
    },
})


# The lesson's causal mask carried over as it is, and a library's causal mask in its place: neither knows documents
# or windows, so both fail the transfer parts.
VARIANTS.update({
    "packed_library_causal_mask": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": _edit(_PACKED, (
            "    return later_key | other_document\n",
            "    causal = nn.Transformer.generate_square_subsequent_mask(document_ids.shape[-1]).isinf()\n"
            "    return causal.expand(*document_ids.shape, -1)\n"))},
        "fails": {"test_packed_causal_mask": "another document"},
    },
    "window_lesson_causal_mask": {
        "kind": "mistake",
        "cells": {"sliding_window_causal_mask": _edit(_WINDOW, ("return (distance < 0) | (distance >= window)",
                                                                "return distance < 0"))},
        "fails": {"test_sliding_window_causal_mask": ""},
    },
    "window_library_causal_mask": {
        "kind": "mistake",
        "cells": {"sliding_window_causal_mask": _edit(_WINDOW, (
            "return (distance < 0) | (distance >= window)",
            "return nn.Transformer.generate_square_subsequent_mask(num_tokens).isinf()"))},
        "fails": {"test_sliding_window_causal_mask": ""},
    },
})

PROOF = {
    "test_packed_causal_mask": {"lesson": ["packed_causal_only"], "shortcut": ["packed_library_causal_mask"],
                                "correct": ["packed_same_document_and_tril", "packed_segments_from_boundaries"]},
    "test_sliding_window_causal_mask": {"lesson": ["window_lesson_causal_mask"],
                                        "shortcut": ["window_library_causal_mask"],
                                        "correct": ["window_loop", "window_two_triangles"]},
}


# PyTorch's own causal attention where the exercise asks for the mask: refused from the traced operations.
VARIANTS.update({
    "module_library_is_causal": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _MODULE.replace(
            '''        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values
''', '''        return torch.nn.functional.scaled_dot_product_attention(queries, keys, values, is_causal=True)
''')},
        "fails": {"test_causal_self_attention": "a library's attention kernel"},
    },
    "weights_library_is_causal": {
        # the scores as queries against identity keys and values: SDPA hands back the causal weights themselves
        "kind": "mistake",
        "cells": {"causal_attention_weights":
                  "def causal_attention_weights(attn_scores, d_k):\n"
                  "    eye = torch.eye(attn_scores.shape[-1], dtype=attn_scores.dtype).expand(attn_scores.shape)\n"
                  "    return torch.nn.functional.scaled_dot_product_attention(attn_scores, eye, eye, is_causal=True,\n"
                  "                                                            scale=d_k ** -0.5)\n"},
        "fails": {"test_causal_attention_weights": "a library's attention kernel"},
    },
})


# Issue 46: mistakes named by running them (the answer key with the mistake put in, on the same hidden inputs), in
# styles the bank had not.
VARIANTS.update({
    "causal_mask_float_comparison": {
        "kind": "mistake",
        "cells": {"causal_mask": "def causal_mask(num_tokens):\n"
                                 "    positions = torch.arange(num_tokens)\n"
                                 "    return (positions[None, :] > positions[:, None]).float()\n"},
        # only Part 1 loses its points: the stand-in answers the later parts' calls with the right mask as a bool mask
        # whose True means what the student's 1 means (blocked here), so the answer key's masked_fill takes it
        "fails": {"test_causal_mask": "bool"},
    },
    "renormalized_divides_by_column_sums": {
        "kind": "mistake",
        "cells": {"renormalized_causal_weights": "def renormalized_causal_weights(attn_weights):\n"
                                                 "    kept = attn_weights * torch.tril(torch.ones_like(attn_weights))\n"
                                                 "    return kept / kept.sum(-2, keepdim=True)\n"},
        "fails": {"test_renormalized_causal_weights": "sum of its column", "test_two_ways_agree": "sum of its column"},
    },
    "way_2_divides_by_d_k": {
        "kind": "mistake",
        "cells": {"causal_attention_weights": _edit(_CAUSAL_WEIGHTS, ("masked / d_k**0.5", "masked / d_k"))},
        "fails": {"test_causal_attention_weights": "divided by d_k itself",
                  "test_two_ways_agree": "divided by d_k itself"},
    },
    "way_2_softmax_over_queries": {
        "kind": "mistake",
        "cells": {"causal_attention_weights": _edit(_CAUSAL_WEIGHTS, ("dim=-1", "dim=-2"))},
        "fails": {"test_causal_attention_weights": "runs down the columns",
                  "test_two_ways_agree": "runs down the columns"},
    },
    "module_divides_by_sqrt_d_in": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, ("keys.shape[-1] ** 0.5", "x.shape[-1] ** 0.5"))},
        "fails": {"test_causal_self_attention": "sqrt(d_in)"},
    },
    "module_softmax_over_queries": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _edit(_MODULE, ("dim=-1)", "dim=1)"))},
        "fails": {"test_causal_self_attention": "softmax runs over the queries"},
    },
})
