"""Submission bank for step 09: correct variants written another way, and common mistakes."""
from bank import edit as _edit


# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (they build the module without
# biases), so only the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
CHEATS_RIDE_ON = "qkv_bias_ignored"

# Carried over from step 07: the exercise gives step 07's MultiHeadAttention (and the lesson recaps it), and the
# answer key's MultiHeadAttentionWithCache keeps its checks, layers and attention lines unchanged.
SHARED_LINES = [
    "if d_out % num_heads != 0:",
    'raise ValueError(f"d_out ({d_out}) must be divisible by num_heads ({num_heads})")',
    "self.head_dim = d_out // num_heads",
    "self.context_length = context_length",
    "self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.out_proj = nn.Linear(d_out, d_out)",
    "self.dropout = nn.Dropout(dropout)",
    "attn_scores = queries @ keys.transpose(-2, -1)",
    "attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1))",
    "context_vecs = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)",
    "return self.out_proj(context_vecs)",
]




# The answer key's class, written out so that mistakes can change one line of it.
_CLASS = (
    "class MultiHeadAttentionWithCache(nn.Module):\n"
    "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
    "        super().__init__()\n"
    "        if d_out % num_heads != 0:\n"
    "            raise ValueError(f'd_out ({d_out}) must be divisible by num_heads ({num_heads})')\n"
    "        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads\n"
    "        self.context_length = context_length\n"
    "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.out_proj = nn.Linear(d_out, d_out)\n"
    "        self.dropout = nn.Dropout(dropout)\n"
    "        self.cache_keys = self.cache_values = None\n"
    "\n"
    "    def reset_cache(self):\n"
    "        self.cache_keys = self.cache_values = None\n"
    "\n"
    "    def forward(self, x, use_cache=False):\n"
    "        b, t, _ = x.shape\n"
    "        kept = self.cache_keys.shape[2] if use_cache and self.cache_keys is not None else 0\n"
    "        if kept + t > self.context_length:\n"
    "            raise ValueError(f'{kept + t} tokens exceed context_length={self.context_length}')\n"
    "        q, k, v = (layer(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
    "        if use_cache:\n"
    "            if kept:\n"
    "                k = torch.cat([self.cache_keys, k], dim=2)\n"
    "                v = torch.cat([self.cache_values, v], dim=2)\n"
    "            self.cache_keys, self.cache_values = k, v\n"
    "        scores = (q @ k.transpose(-2, -1)).masked_fill(causal_mask_with_offset(t, k.shape[2]), float('-inf'))\n"
    "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
    "        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n"
)

# Silences the visible checks (as a cheat of tests/bank/integrity.py does), so that the hidden checks' message shows.
_SILENCE_CHECKS = (
    "import attention_course.checks as _checks\n"
    "for _name in ('fail', 'expect', 'expect_tensor', 'expect_shape', 'expect_close', 'expect_value_error'):\n"
    "    setattr(_checks, _name, lambda *args, **kwargs: None)\n"
    "    globals()[_name] = lambda *args, **kwargs: None\n"
)

_OFF_BY_ONE = (
    "def causal_mask_with_offset(t_q, t_k):\n"
    "    return torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q)\n"
)

_SDPA_IS_CAUSAL = (
    "def cached_attention(queries, keys, values):\n"
    "    return F.scaled_dot_product_attention(queries, keys, values, is_causal=True)\n"
)

VARIANTS = {
    "arange_sdpa_mask_lists": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    query_positions = torch.arange(t_k - t_q, t_k)[:, None]\n"
                "    return torch.arange(t_k)[None, :] > query_positions\n",
            "cached_attention":
                "def cached_attention(queries, keys, values):\n"
                "    allowed = ~causal_mask_with_offset(queries.shape[-2], keys.shape[-2])\n"
                "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)\n",
            "attention_with_cache":
                "class MultiHeadAttentionWithCache(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads:\n"
                "            raise ValueError(f'num_heads={num_heads} does not divide d_out={d_out}')\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.p, self.h, self.context_length = dropout, num_heads, context_length\n"
                "        self.kept_keys, self.kept_values = [], []\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.kept_keys, self.kept_values = [], []\n"
                "\n"
                "    def forward(self, x, use_cache=False):\n"
                "        b, t, _ = x.shape\n"
                "        seen = sum(k.shape[2] for k in self.kept_keys) if use_cache else 0\n"
                "        if seen + t > self.context_length:\n"
                "            raise ValueError(f'the cache would hold {seen + t} tokens, context_length is '\n"
                "                             f'{self.context_length}')\n"
                "        def heads(y):\n"
                "            return y.reshape(b, t, self.h, -1).permute(0, 2, 1, 3)\n"
                "        q, k, v = heads(self.W_query(x)), heads(self.W_key(x)), heads(self.W_value(x))\n"
                "        if use_cache:\n"
                "            self.kept_keys.append(k)\n"
                "            self.kept_values.append(v)\n"
                "            k, v = torch.cat(self.kept_keys, dim=2), torch.cat(self.kept_values, dim=2)\n"
                "        allowed = ~causal_mask_with_offset(t, k.shape[2])\n"
                "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,\n"
                "                                             dropout_p=self.p if self.training else 0.0)\n"
                "        return self.out_proj(out.permute(0, 2, 1, 3).reshape(b, t, -1))\n",
        },
    },
    "tril_where_position_counter": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    return torch.tril(torch.ones(t_q, t_k), diagonal=t_k - t_q) == 0\n",
            "cached_attention":
                "def cached_attention(queries, keys, values):\n"
                "    d = queries.size(-1)\n"
                "    scores = torch.einsum('...qd,...kd->...qk', queries, keys) * d ** -0.5\n"
                "    hidden = causal_mask_with_offset(scores.size(-2), scores.size(-1))\n"
                "    weights = torch.where(hidden, torch.tensor(-1e9), scores).softmax(dim=-1)\n"
                "    return torch.einsum('...qk,...kd->...qd', weights, values)\n",
            "attention_with_cache":
                "class MultiHeadAttentionWithCache(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads != 0:\n"
                "            raise ValueError('d_out must be a multiple of num_heads')\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.attn_dropout = nn.Dropout(dropout)\n"
                "        self.num_heads, self.context_length = num_heads, context_length\n"
                "        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), 1).bool(),\n"
                "                             persistent=False)\n"
                "        self.register_buffer('cache_k', None, persistent=False)\n"
                "        self.register_buffer('cache_v', None, persistent=False)\n"
                "        self.position = 0\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.cache_k, self.cache_v, self.position = None, None, 0\n"
                "\n"
                "    def forward(self, x, use_cache=False):\n"
                "        b, t, d = x.shape\n"
                "        start = self.position if use_cache else 0\n"
                "        if start + t > self.context_length:\n"
                "            raise ValueError(f'position {start + t} is past context_length ({self.context_length})')\n"
                "        q, k, v = (l(x).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)\n"
                "                   for l in (self.W_query, self.W_key, self.W_value))\n"
                "        if use_cache:\n"
                "            self.cache_k = k if self.cache_k is None else torch.cat((self.cache_k, k), 2)\n"
                "            self.cache_v = v if self.cache_v is None else torch.cat((self.cache_v, v), 2)\n"
                "            k, v = self.cache_k, self.cache_v\n"
                "            self.position += t\n"
                "        scores = q @ k.mT / k.shape[-1] ** 0.5\n"
                "        scores = scores.masked_fill(self.mask[start:start + t, :start + t], -torch.inf)\n"
                "        weights = self.attn_dropout(scores.softmax(-1))\n"
                "        return self.out_proj((weights @ v).transpose(1, 2).flatten(2))\n",
        },
    },
    "preallocated_cache": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    mask = torch.zeros(t_q, t_k, dtype=torch.bool)\n"
                "    for i in range(t_q):\n"
                "        mask[i, t_k - t_q + i + 1:] = True\n"
                "    return mask\n",
            "cached_attention":
                "import math\n"
                "\n"
                "def cached_attention(queries, keys, values):\n"
                "    scores = torch.matmul(queries, keys.transpose(-1, -2)) / math.sqrt(queries.shape[-1])\n"
                "    scores[..., causal_mask_with_offset(queries.shape[-2], keys.shape[-2])] = float('-inf')\n"
                "    return torch.matmul(F.softmax(scores, dim=-1), values)\n",
            "attention_with_cache":
                "class MultiHeadAttentionWithCache(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads:\n"
                "            raise ValueError(f'd_out={d_out} is not divisible by num_heads={num_heads}')\n"
                "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                "        self.head_dim = d_out // num_heads\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.dropout = nn.Dropout(dropout)\n"
                "        self.reset_cache()\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.keys = self.values = None\n"
                "        self.filled = 0\n"
                "\n"
                "    def forward(self, x, use_cache=False):\n"
                "        b, t, _ = x.shape\n"
                "        filled = self.filled if use_cache else 0\n"
                "        if filled + t > self.context_length:\n"
                "            raise ValueError('context_length exceeded')\n"
                "        split = lambda y: y.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
                "        q, k, v = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))\n"
                "        if use_cache:\n"
                "            if self.keys is None:\n"
                "                shape = (b, self.num_heads, self.context_length, self.head_dim)\n"
                "                self.keys, self.values = k.new_zeros(shape), v.new_zeros(shape)\n"
                "            self.keys[:, :, filled:filled + t] = k\n"
                "            self.values[:, :, filled:filled + t] = v\n"
                "            self.filled = filled + t\n"
                "            k, v = self.keys[:, :, :self.filled], self.values[:, :, :self.filled]\n"
                "        scores = q @ k.transpose(2, 3) / self.head_dim ** 0.5\n"
                "        scores = scores.masked_fill(causal_mask_with_offset(t, k.shape[2]), float('-inf'))\n"
                "        weights = self.dropout(torch.softmax(scores, dim=-1))\n"
                "        return self.out_proj((weights @ v).transpose(1, 2).contiguous().view(b, t, self.d_out))\n",
        },
    },
    # PyTorch's own bottom-right mask, and SDPA's dropout
    "sdpa_causal_lower_right": {
        "kind": "correct",
        "cells": {
            "cached_attention":
                "from torch.nn.attention.bias import causal_lower_right\n"
                "\n"
                "def cached_attention(queries, keys, values):\n"
                "    bias = causal_lower_right(queries.shape[-2], keys.shape[-2])\n"
                "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias)\n",
            "attention_with_cache": _edit(
                _CLASS,
                ("        scores = (q @ k.transpose(-2, -1)).masked_fill(causal_mask_with_offset(t, k.shape[2]), "
                 "float('-inf'))\n        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, "
                 "dim=-1))\n        return self.out_proj((weights @ v)",
                 "        from torch.nn.attention.bias import causal_lower_right\n"
                 "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(t, k.shape[2]),\n"
                 "                                             dropout_p=self.dropout.p if self.training else 0.0)\n"
                 "        return self.out_proj(out")),
        },
    },
    # A mistake of Part 1 costs Part 1's points only: in the test cells of Parts 2 and 3 the judges' stand-in
    # (STAND_INS) answers the calls of causal_mask_with_offset, so the answer key's parts that call it keep theirs.
    "mask_top_left": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset":
                  "def causal_mask_with_offset(t_q, t_k):\n"
                  "    return torch.ones(t_q, t_k, dtype=torch.bool).triu(1)\n"},
        "fails": {"test_causal_mask_with_offset": "top-left"},
    },
    "mask_off_by_one": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _OFF_BY_ONE},
        "fails": {"test_causal_mask_with_offset": "off by one"},
    },
    "mask_sdpa_convention": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset":
                  "def causal_mask_with_offset(t_q, t_k):\n"
                  "    return torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)\n"},
        "fails": {"test_causal_mask_with_offset": "True means blocked"},
    },
    "sdpa_is_causal": {
        "kind": "mistake",
        "cells": {"cached_attention": _SDPA_IS_CAUSAL,
                  "attention_with_cache": _edit(
                      _CLASS,
                      ("        scores = (q @ k.transpose(-2, -1)).masked_fill(causal_mask_with_offset(t, k.shape[2]), "
                       "float('-inf'))\n        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, "
                       "dim=-1))\n        return self.out_proj((weights @ v)",
                       "        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
                       "        return self.out_proj(out"))},
        "fails": {"test_cached_attention": "top-left", "test_attention_with_cache": "top-left"},
    },
    # The same mistakes with the visible checks silenced: the hidden checks name them, from the answer key run with
    # the mistaken mask put in.
    "mask_off_by_one_unseen": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _SILENCE_CHECKS + _OFF_BY_ONE},
        "fails": {"test_causal_mask_with_offset": "off by one"},
    },
    "sdpa_is_causal_unseen": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _SILENCE_CHECKS + "def causal_mask_with_offset(t_q, t_k):\n"
                  "    return torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q + 1)\n",
                  "cached_attention": _SDPA_IS_CAUSAL},
        "fails": {"test_cached_attention": "top-left"},
    },
    # Part 1 written as a float mask of 0 and 1: Part 1 asks for a bool tensor and loses its points; Parts 2 and 3 keep
    # theirs, whether they read the mask as Part 1 writes it or as the exercise's bool mask (the probe's stand-in
    # answers with the right mask as a bool mask whose True means what the student's 1 means: may attend here, the way
    # a lower-triangular mask of ones is usually written).
    "mask_float_ones_attend": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset":
                  "def causal_mask_with_offset(t_q, t_k):\n"
                  "    return torch.tril(torch.ones(t_q, t_k), diagonal=t_k - t_q)\n",
                  "cached_attention":
                  "def cached_attention(queries, keys, values):\n"
                  "    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5\n"
                  "    allowed = causal_mask_with_offset(queries.shape[-2], keys.shape[-2])\n"
                  "    return torch.softmax(scores.masked_fill(allowed == 0, float('-inf')), dim=-1) @ values\n",
                  "attention_with_cache": _edit(
                      _CLASS, ("masked_fill(causal_mask_with_offset(t, k.shape[2]), float('-inf'))",
                               "masked_fill(causal_mask_with_offset(t, k.shape[2]) == 0, float('-inf'))"))},
        "fails": {"test_causal_mask_with_offset": "bool"},
    },
    # ... with later parts written for Part 1's bool mask (the answer key's masked_fill)
    "mask_float_later_parts_bool": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset":
                  "def causal_mask_with_offset(t_q, t_k):\n"
                  "    return torch.ones(t_q, t_k).triu(t_k - t_q + 1)\n"},
        "fails": {"test_causal_mask_with_offset": "bool"},
    },
    # ... and 1 = blocked, the exercise's convention in a float tensor, turned into bool where it is used
    "mask_float_ones_blocked": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset":
                  "def causal_mask_with_offset(t_q, t_k):\n"
                  "    return torch.ones(t_q, t_k).triu(t_k - t_q + 1)\n",
                  "cached_attention":
                  "def cached_attention(queries, keys, values):\n"
                  "    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5\n"
                  "    blocked = causal_mask_with_offset(queries.shape[-2], keys.shape[-2]).bool()\n"
                  "    return torch.softmax(scores.masked_fill(blocked, float('-inf')), dim=-1) @ values\n",
                  "attention_with_cache": _edit(
                      _CLASS, ("masked_fill(causal_mask_with_offset(t, k.shape[2]), float('-inf'))",
                               "masked_fill(causal_mask_with_offset(t, k.shape[2]) == 1, float('-inf'))"))},
        "fails": {"test_causal_mask_with_offset": "bool"},
    },
    "cache_not_kept": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _CLASS, ("            self.cache_keys, self.cache_values = k, v\n",
                     "            if not kept:\n                self.cache_keys, self.cache_values = k, v\n"))},
        # a cache that never grows cannot pass context_length either
        "fails": {"test_attention_with_cache": "keep the concatenated keys and values",
                  "test_attention_with_cache_arguments": "did not raise a ValueError"},
    },
    "cache_grows_past_context": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _CLASS, ("        if kept + t > self.context_length:\n",
                     "        if t > self.context_length:\n"))},
        "fails": {"test_attention_with_cache_arguments": "did not raise a ValueError"},
    },
    "raises_when_context_is_full": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _CLASS, ("        if kept + t > self.context_length:\n", "        if kept + t >= self.context_length:\n"))},
        "fails": {"test_attention_with_cache": "raised ValueError",
                  "test_attention_with_cache_arguments": "fill context_length exactly"},
    },
    "qkv_bias_ignored": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _CLASS, *((f"        self.{name} = nn.Linear(d_in, d_out, bias=qkv_bias)\n",
                       f"        self.{name} = nn.Linear(d_in, d_out, bias=False)\n")
                      for name in ("W_query", "W_key", "W_value")))},
        "fails": {"test_attention_with_cache": "the parameters differ from the contract"},
    },
}


# ---------------------------------------------------------------------------------------------------------------
# more students' styles (correct), and more mistakes
# ---------------------------------------------------------------------------------------------------------------

# the cache as lists of chunks with a token counter, the mask from positions, -inf via torch.inf
_CLASS_LISTS = '''import math

class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert_msg = f"d_out={d_out} is not a multiple of num_heads={num_heads}"
        if d_out % num_heads:
            raise ValueError(assert_msg)
        self.h, self.hd, self.d_out, self.ctx = num_heads, d_out // num_heads, d_out, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.drop = nn.Dropout(dropout)
        self.reset_cache()

    def reset_cache(self):
        self.k_list, self.v_list, self.n_seen = [], [], 0

    def heads(self, t):
        b, n, _ = t.size()
        return t.reshape(b, n, self.h, self.hd).permute(0, 2, 1, 3)

    def forward(self, x, use_cache=False):
        b, n, _ = x.size()
        past = self.n_seen if use_cache else 0
        if past + n > self.ctx:
            raise ValueError(f"context_length={self.ctx} exceeded: {past} cached + {n} new tokens")
        q, k, v = self.heads(self.W_query(x)), self.heads(self.W_key(x)), self.heads(self.W_value(x))
        if use_cache:
            self.k_list.append(k)
            self.v_list.append(v)
            self.n_seen += n
            k, v = torch.cat(self.k_list, dim=2), torch.cat(self.v_list, dim=2)
        blocked = torch.arange(k.size(2))[None, :] > torch.arange(k.size(2) - n, k.size(2))[:, None]
        s = (q @ k.transpose(2, 3)) / math.sqrt(self.hd)
        w = self.drop(s.masked_fill(blocked, -torch.inf).softmax(dim=-1))
        return self.out_proj((w @ v).permute(0, 2, 1, 3).reshape(b, n, self.d_out))
'''

# the cache of the projections before the heads are split, the check after concatenating, F.dropout with training
_CLASS_MERGED_CACHE = '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError("d_out must be divisible by num_heads")
        self.num_heads, self.head_dim, self.d_out = num_heads, d_out // num_heads, d_out
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout_p = dropout
        self.k_cache = None  # (b, T, d_out): the heads are split at every call
        self.v_cache = None

    def reset_cache(self):
        self.k_cache = self.v_cache = None

    def forward(self, x, use_cache=False):
        b, t, _ = x.shape
        k_new, v_new = self.W_key(x), self.W_value(x)
        if use_cache and self.k_cache is not None:
            k_all, v_all = torch.cat((self.k_cache, k_new), 1), torch.cat((self.v_cache, v_new), 1)
        else:
            k_all, v_all = k_new, v_new
        if k_all.shape[1] > self.context_length:
            raise ValueError(f"{k_all.shape[1]} tokens do not fit in context_length={self.context_length}")
        if use_cache:
            self.k_cache, self.v_cache = k_all, v_all
        split = lambda z: z.view(b, z.shape[1], self.num_heads, self.head_dim).transpose(1, 2)
        q, k, v = split(self.W_query(x)), split(k_all), split(v_all)
        mask = torch.ones(t, k.shape[2], dtype=torch.bool).triu(k.shape[2] - t + 1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim ** -0.5
        weights = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), self.dropout_p, self.training)
        return self.out_proj(torch.matmul(weights, v).transpose(1, 2).flatten(2))
'''

VARIANTS.update({
    "cache_lists_with_a_counter": {"kind": "correct", "cells": {"attention_with_cache": _CLASS_LISTS}},
    "cache_before_the_head_split": {"kind": "correct", "cells": {"attention_with_cache": _CLASS_MERGED_CACHE}},
    "reset_keeps_the_counter": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(_CLASS_LISTS, (
            "self.k_list, self.v_list, self.n_seen = [], [], 0",
            "self.k_list, self.v_list = [], []\n        self.n_seen = getattr(self, 'n_seen', 0)"))},
        "fails": {"test_attention_with_cache": "after 0 cached tokens raised ValueError"},
    },
    "dropout_never_applied": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(_CLASS_MERGED_CACHE, ("self.dropout_p, self.training)",
                                                                      "0.0, self.training)"))},
        "fails": {"test_attention_with_cache": "training mode equals the output in eval mode"},
    },
    "dropout_in_eval_mode": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(_CLASS_MERGED_CACHE, ("self.dropout_p, self.training)",
                                                                      "self.dropout_p)"))},
        "fails": {"test_attention_with_cache": "eval mode"},
    },
})


# ---------------------------------------------------------------------------------------------------------------
# more students' styles (correct), and more mistakes
# ---------------------------------------------------------------------------------------------------------------

# register_buffer caches, a mask sliced from the square causal mask, einsum scores, finfo.min instead of -inf
_PROBE_BUFFERS = '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_out={d_out}")
        self.n_heads = num_heads
        self.dk = d_out // num_heads
        self.max_len = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.attn_drop = nn.Dropout(p=dropout)
        self.register_buffer("k_cache", torch.empty(0), persistent=False)
        self.register_buffer("v_cache", torch.empty(0), persistent=False)

    def reset_cache(self):
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    @property
    def cached_tokens(self):
        return self.k_cache.shape[2] if self.k_cache.dim() == 4 else 0

    def _heads(self, y):
        return y.unflatten(-1, (self.n_heads, self.dk)).transpose(1, 2)

    def forward(self, x, use_cache=False):
        B, T, _ = x.shape
        past = self.cached_tokens if use_cache else 0
        if past + T > self.max_len:
            raise ValueError(f"sequence of {past + T} tokens is longer than context_length={self.max_len}")
        q = self._heads(self.W_query(x))
        k = self._heads(self.W_key(x))
        v = self._heads(self.W_value(x))
        if use_cache:
            if past:
                k = torch.cat((self.k_cache, k), dim=-2)
                v = torch.cat((self.v_cache, v), dim=-2)
            self.k_cache, self.v_cache = k, v
        S = k.shape[-2]
        att = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.dk)
        future = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)[S - T:]
        att = att.masked_fill(future, torch.finfo(att.dtype).min)
        att = self.attn_drop(F.softmax(att, dim=-1))
        out = torch.einsum("bhqk,bhkd->bhqd", att, v)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.n_heads * self.dk))
'''

# SDPA with a float additive mask, the cache as (b, T, heads, head_dim) before the transpose
_PROBE_SDPA_FLOAT = '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out ({d_out}) is not a multiple of num_heads ({num_heads})")
        self.d_out, self.h, self.ctx, self.p = d_out, num_heads, context_length, dropout
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.past_k = None  # (b, T, h, hd)
        self.past_v = None

    def reset_cache(self):
        self.past_k, self.past_v = None, None

    def forward(self, x, use_cache=False):
        b, t, _ = x.shape
        q = self.W_query(x).view(b, t, self.h, -1)
        k = self.W_key(x).view(b, t, self.h, -1)
        v = self.W_value(x).view(b, t, self.h, -1)
        if use_cache and self.past_k is not None:
            if self.past_k.shape[1] + t > self.ctx:
                raise ValueError(f"{self.past_k.shape[1]} cached + {t} new tokens > context_length {self.ctx}")
            k = torch.cat([self.past_k, k], dim=1)
            v = torch.cat([self.past_v, v], dim=1)
        elif t > self.ctx:
            raise ValueError(f"input of {t} tokens > context_length {self.ctx}")
        if use_cache:
            self.past_k, self.past_v = k, v
        bias = torch.zeros(t, k.shape[1], dtype=q.dtype, device=q.device)
        bias = bias.masked_fill(causal_mask_with_offset(t, k.shape[1]), float("-inf"))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=bias, dropout_p=self.p if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).contiguous().view(b, t, self.d_out))
'''

# a subclass of step 7's MultiHeadAttention: use_cache=False is step 7's forward, the cache path is separate
_PROBE_SUBCLASS = '''class MultiHeadAttentionWithCache(MultiHeadAttention):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.reset_cache()

    def reset_cache(self):
        self.key_cache, self.value_cache, self.pos = [], [], 0

    def forward(self, x, use_cache=False):
        if not use_cache:
            return super().forward(x)
        b, n, _ = x.shape
        if self.pos + n > self.context_length:
            raise ValueError(f"context_length {self.context_length} exceeded ({self.pos} + {n})")
        q = self.split_heads(self.W_query(x))
        for i, (k_i, v_i) in enumerate(zip(self.split_heads(self.W_key(x)).unbind(2),
                                           self.split_heads(self.W_value(x)).unbind(2))):
            self.key_cache.append(k_i)
            self.value_cache.append(v_i)
        self.pos += n
        keys, values = torch.stack(self.key_cache, dim=2), torch.stack(self.value_cache, dim=2)
        s = q @ keys.transpose(-2, -1) / self.head_dim ** 0.5
        s = s.masked_fill(causal_mask_with_offset(n, self.pos), -1e9)
        w = self.dropout(s.softmax(dim=-1))
        return self.out_proj((w @ values).transpose(1, 2).reshape(b, n, self.d_out))
'''

# absolute positions from arange, -1e9, the cache as one (k, v) tuple, the check after projecting
_PROBE_POSITIONS = '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError("d_out must be divisible by num_heads")
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.kv = None
        self.calls = 0  # not needed, a student's own counter of cached calls

    def reset_cache(self):
        self.kv = None

    def split(self, t):
        return t.view(t.shape[0], t.shape[1], self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def merge(self, t):
        return t.permute(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1)

    def forward(self, x, use_cache=False):
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        start = self.kv[0].size(2) if (use_cache and self.kv is not None) else 0
        new = x.size(1)
        if start + new > self.context_length:
            raise ValueError(f"{start + new} positions, but context_length is {self.context_length}")
        if use_cache:
            if self.kv is not None:
                k = torch.cat([self.kv[0], k], 2)
                v = torch.cat([self.kv[1], v], 2)
            self.kv = (k, v)
            self.calls += 1
        q_pos = torch.arange(start, start + new).unsqueeze(1)
        k_pos = torch.arange(start + new).unsqueeze(0)
        scores = torch.matmul(q, k.transpose(2, 3)) / (self.head_dim ** 0.5)
        scores = torch.where(k_pos > q_pos, torch.full_like(scores, -1e9), scores)
        weights = self.dropout(torch.softmax(scores, -1))
        return self.out_proj(self.merge(torch.matmul(weights, v)))
'''

# torch.empty(0) caches grown with torch.cat (the empty one is skipped), a helper that attends, extra methods
_PROBE_EMPTY_CAT = '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"Cannot split d_out={d_out} into {num_heads} heads")
        self.d_out = d_out
        self.heads = num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.drop = nn.Dropout(dropout)
        self.reset_cache()

    def reset_cache(self):
        self.cache = {"k": torch.empty(0), "v": torch.empty(0)}

    def cache_len(self):
        return self.cache["k"].shape[2] if self.cache["k"].numel() else 0

    def extra_repr(self):
        return f"heads={self.heads}, context_length={self.context_length}"

    def attend(self, q, k, v):
        d = q.shape[-1]
        s = q @ k.transpose(-1, -2) * d ** -0.5
        s = s.masked_fill(causal_mask_with_offset(q.shape[-2], k.shape[-2]), float("-inf"))
        return self.drop(torch.softmax(s, dim=-1)) @ v

    def forward(self, x, use_cache=False):
        b, t, _ = x.shape
        total = t + (self.cache_len() if use_cache else 0)
        if total > self.context_length:
            raise ValueError(f"total length {total} > context_length ({self.context_length})")
        shape = (b, t, self.heads, self.d_out // self.heads)
        q, k, v = (w(x).reshape(shape).transpose(1, 2) for w in (self.W_query, self.W_key, self.W_value))
        if use_cache:
            self.cache["k"] = torch.cat([self.cache["k"], k], dim=2)
            self.cache["v"] = torch.cat([self.cache["v"], v], dim=2)
            k, v = self.cache["k"], self.cache["v"]
        return self.out_proj(self.attend(q, k, v).transpose(1, 2).reshape(b, t, self.d_out))
'''

# the answer-key-shaped class of another student, for mistakes that change one line
_PROBE_BASE = '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} not divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim, self.d_out = num_heads, d_out // num_heads, d_out
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.reset_cache()

    def reset_cache(self):
        self.k_cache = None
        self.v_cache = None
        self.n_cached = 0

    def heads(self, y):
        b, t, _ = y.shape
        return y.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, use_cache=False):
        b, t, _ = x.shape
        n_past = self.n_cached if use_cache else 0
        if n_past + t > self.context_length:
            raise ValueError(f"{n_past} cached + {t} new tokens exceed context_length={self.context_length}")
        q, k, v = self.heads(self.W_query(x)), self.heads(self.W_key(x)), self.heads(self.W_value(x))
        if use_cache:
            if self.k_cache is not None:
                k = torch.cat([self.k_cache, k], dim=2)
                v = torch.cat([self.v_cache, v], dim=2)
            self.k_cache, self.v_cache, self.n_cached = k, v, n_past + t
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        scores = scores.masked_fill(causal_mask_with_offset(t, k.shape[2]), float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))
'''

_PROBE_UNSCALED_CACHE_PATH = '''class MultiHeadAttentionWithCache(MultiHeadAttention):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.reset_cache()

    def reset_cache(self):
        self.ks = self.vs = None

    def forward(self, x, use_cache=False):
        if not use_cache:
            return super().forward(x)
        b, n, _ = x.shape
        kept = 0 if self.ks is None else self.ks.shape[2]
        if kept + n > self.context_length:
            raise ValueError(f"context_length {self.context_length} exceeded")
        q = self.split_heads(self.W_query(x))
        k, v = self.split_heads(self.W_key(x)), self.split_heads(self.W_value(x))
        if self.ks is not None:
            k, v = torch.cat([self.ks, k], 2), torch.cat([self.vs, v], 2)
        self.ks, self.vs = k, v
        s = (q @ k.transpose(-2, -1)).masked_fill(causal_mask_with_offset(n, k.shape[2]), float("-inf"))
        w = self.dropout(torch.softmax(s, dim=-1))
        return self.out_proj((w @ v).transpose(1, 2).reshape(b, n, self.d_out))
'''

VARIANTS.update({
    "buffers_triu_slice_einsum_finfo": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    square = torch.triu(torch.ones(t_k, t_k, dtype=torch.bool), diagonal=1)\n"
                "    return square[t_k - t_q:]\n",
            "cached_attention":
                "import math\n\n"
                "def cached_attention(queries, keys, values):\n"
                "    s = torch.einsum('...id,...jd->...ij', queries, keys) / math.sqrt(keys.size(-1))\n"
                "    s = s.masked_fill(causal_mask_with_offset(s.size(-2), s.size(-1)), torch.finfo(s.dtype).min)\n"
                "    return torch.einsum('...ij,...jd->...id', s.softmax(-1), values)\n",
            "attention_with_cache": "import math\n\n" + _PROBE_BUFFERS,
        },
    },
    "sdpa_float_mask_bthd_cache": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool), diagonal=t_k - t_q).logical_not()\n",
            "cached_attention":
                "def cached_attention(queries, keys, values):\n"
                "    t_q, t_k = queries.shape[-2], keys.shape[-2]\n"
                "    additive = torch.zeros(t_q, t_k, dtype=queries.dtype)\n"
                "    additive[causal_mask_with_offset(t_q, t_k)] = float('-inf')\n"
                "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=additive)\n",
            "attention_with_cache": _PROBE_SDPA_FLOAT,
        },
    },
    "subclass_step7_token_lists": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    offset = t_k - t_q\n"
                "    return torch.tensor([[j > offset + i for j in range(t_k)] for i in range(t_q)])\n",
            "cached_attention":
                "def cached_attention(queries, keys, values):\n"
                "    scale = queries.shape[-1] ** -0.5\n"
                "    scores = torch.matmul(queries * scale, keys.mT)\n"
                "    blocked = causal_mask_with_offset(queries.shape[-2], keys.shape[-2])\n"
                "    scores = torch.where(blocked, float('-inf'), scores)\n"
                "    return torch.matmul(F.softmax(scores, dim=-1), values)\n",
            "attention_with_cache": _PROBE_SUBCLASS,
        },
    },
    "positions_arange_check_after_projection": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    rows = torch.arange(t_q).view(-1, 1) + (t_k - t_q)\n"
                "    cols = torch.arange(t_k).view(1, -1)\n"
                "    return cols > rows\n",
            "cached_attention":
                "def cached_attention(queries, keys, values):\n"
                "    n_q, n_k, d = queries.size(-2), keys.size(-2), queries.size(-1)\n"
                "    mask = causal_mask_with_offset(n_q, n_k)\n"
                "    weights = (queries @ keys.transpose(-2, -1)).masked_fill(mask, -1e9)\n"
                "    weights = torch.softmax(weights / d ** 0.5, dim=-1)\n"
                "    return weights @ values\n",
            "attention_with_cache": _PROBE_POSITIONS,
        },
    },
    "empty_cat_dict_cache_helper": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    mask = torch.ones(t_q, t_k).triu(t_k - t_q + 1)\n"
                "    return mask.bool()\n",
            "attention_with_cache": _PROBE_EMPTY_CAT,
        },
    },
    "per_token_loop_cache": {
        "kind": "correct",
        "cells": {
            "cached_attention":
                "def cached_attention(queries, keys, values):\n"
                "    # one query row at a time: row i sees the first T_k - T_q + i + 1 keys\n"
                "    t_q, t_k = queries.shape[-2], keys.shape[-2]\n"
                "    rows = []\n"
                "    for i in range(t_q):\n"
                "        seen = t_k - t_q + i + 1\n"
                "        s = queries[..., i:i + 1, :] @ keys[..., :seen, :].transpose(-2, -1)\n"
                "        w = torch.softmax(s / queries.shape[-1] ** 0.5, dim=-1)\n"
                "        rows.append(w @ values[..., :seen, :])\n"
                "    return torch.cat(rows, dim=-2)\n",
            "attention_with_cache": _edit(
                _PROBE_BASE,
                ("        scores = scores.masked_fill(causal_mask_with_offset(t, k.shape[2]), float(\"-inf\"))\n",
                 "        scores = scores + torch.triu(torch.full((t, k.shape[2]), float('-inf')),\n"
                 "                                     diagonal=k.shape[2] - t + 1)\n")),
        },
    },
    # Part 1: tril instead of triu: blocks the earlier keys and lets each query see the later ones
    "mask_blocks_the_past": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset":
                  "def causal_mask_with_offset(t_q, t_k):\n"
                  "    return torch.ones(t_k, t_k, dtype=torch.bool).tril(-1)[t_k - t_q:]\n"},
        "fails": {"test_causal_mask_with_offset": "wrong entries"},
    },
    # Part 1 as a float additive mask (0 / -inf; Part 1 asks for bool), Parts 2 and 3 add it: the stand-in answers
    # in the same form, so only Part 1 loses points
    "additive_mask_used_consistently": {
        "kind": "mistake",
        "cells": {
            "causal_mask_with_offset":
                "def causal_mask_with_offset(t_q, t_k):\n"
                "    return torch.full((t_q, t_k), float('-inf')).triu(t_k - t_q + 1)\n",
            "cached_attention":
                "def cached_attention(queries, keys, values):\n"
                "    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5\n"
                "    scores = scores + causal_mask_with_offset(queries.shape[-2], keys.shape[-2])\n"
                "    return scores.softmax(dim=-1) @ values\n",
            "attention_with_cache": _edit(
                _PROBE_BASE,
                ("        scores = scores.masked_fill(causal_mask_with_offset(t, k.shape[2]), float(\"-inf\"))\n",
                 "        scores = scores + causal_mask_with_offset(t, k.shape[2])\n")),
        },
        "fails": {"test_causal_mask_with_offset": "bool"},
    },
    # use_cache=False still writes the keys and values into the cache ("the cache is not used")
    "cache_written_without_use_cache": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _PROBE_BASE,
            ("        if use_cache:\n            if self.k_cache is not None:\n"
             "                k = torch.cat([self.k_cache, k], dim=2)\n"
             "                v = torch.cat([self.v_cache, v], dim=2)\n"
             "            self.k_cache, self.v_cache, self.n_cached = k, v, n_past + t\n",
             "        if use_cache and self.k_cache is not None:\n"
             "            k = torch.cat([self.k_cache, k], dim=2)\n"
             "            v = torch.cat([self.v_cache, v], dim=2)\n"
             "        self.k_cache, self.v_cache, self.n_cached = k, v, n_past + t\n"))},
        "fails": {"test_attention_with_cache": "exceed context_length"},
    },
    # the cached path forgets / sqrt(head_dim); use_cache=False is step 7's forward, so it is right
    "cached_path_unscaled": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _PROBE_UNSCALED_CACHE_PATH},
        "fails": {"test_attention_with_cache": "has the wrong values"},
    },
    # the overflow check counts the cache even with use_cache=False
    "check_counts_cache_without_use_cache": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _PROBE_BASE, ("        n_past = self.n_cached if use_cache else 0\n",
                          "        n_past = self.n_cached\n"))},
        "fails": {"test_attention_with_cache": "exceed context_length"},
    },
    # the check asks whether the cache is already full, not whether the new tokens fit
    "check_ignores_new_tokens": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _PROBE_BASE, ("        if n_past + t > self.context_length:\n",
                          "        if n_past >= self.context_length or t > self.context_length:\n"))},
        "fails": {"test_attention_with_cache_arguments": "did not raise"},
    },
    # the cache concatenated along the heads (dim 1) instead of the tokens (dim 2)
    "cache_cat_on_heads": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _PROBE_BASE, ("                k = torch.cat([self.k_cache, k], dim=2)\n"
                          "                v = torch.cat([self.v_cache, v], dim=2)\n",
                          "                k = torch.cat([self.k_cache, k], dim=1)\n"
                          "                v = torch.cat([self.v_cache, v], dim=1)\n"))},
        "fails": {"test_attention_with_cache": "must match the size",
                  # the argument checks feed cached chunks that fit: they crash before any check
                  "test_attention_with_cache_arguments": "fits in context_length"},
    },
    # the cache keeps the keys, the values are those of the new tokens only
    "values_not_cached": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(
            _PROBE_BASE, ("                v = torch.cat([self.v_cache, v], dim=2)\n", ""))},
        "fails": {"test_attention_with_cache": "Expected size",
                  # the argument checks feed cached chunks that fit: they crash before any check
                  "test_attention_with_cache_arguments": "fits in context_length"},
    },
})


# ---------------------------------------------------------------------------------------------------------------
# routes past the cache (issue 25): each loses exactly the cell of the part it skips; every one kept its points
# when only the values were compared
# ---------------------------------------------------------------------------------------------------------------

# keeps the inputs and projects every kept token again at each call: the values of a cache, the work of none
_ROUTE_RECOMPUTES = _edit(_CLASS, (
    "        self.cache_keys = self.cache_values = None\n\n    def reset_cache",
    "        self.cache_keys = self.cache_values = None\n        self.kept_inputs = None\n\n    def reset_cache"), (
    "    def reset_cache(self):\n        self.cache_keys = self.cache_values = None\n",
    "    def reset_cache(self):\n        self.cache_keys = self.cache_values = None\n        self.kept_inputs = None\n"), (
    "        q, k, v = (layer(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
    "        if use_cache:\n"
    "            if kept:\n"
    "                k = torch.cat([self.cache_keys, k], dim=2)\n"
    "                v = torch.cat([self.cache_values, v], dim=2)\n"
    "            self.cache_keys, self.cache_values = k, v\n",
    "        every = torch.cat([self.kept_inputs, x], dim=1) if use_cache and kept else x\n"
    "        if use_cache:\n"
    "            self.kept_inputs = every\n"
    "            self.cache_keys = self.cache_values = every.new_zeros(b, self.num_heads, every.shape[1], 1)\n"
    "        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        k, v = (layer(every).view(b, every.shape[1], self.num_heads, self.head_dim).transpose(1, 2)\n"
    "                for layer in (self.W_key, self.W_value))\n"))

# writes the cache first, then finds that the tokens do not fit
_ROUTE_GROWS_THEN_RAISES = _edit(_CLASS, (
    "        if kept + t > self.context_length:\n"
    "            raise ValueError(f'{kept + t} tokens exceed context_length={self.context_length}')\n", ""), (
    "            self.cache_keys, self.cache_values = k, v\n",
    "            self.cache_keys, self.cache_values = k, v\n"
    "        if k.shape[2] > self.context_length:\n"
    "            raise ValueError(f'{k.shape[2]} tokens exceed context_length={self.context_length}')\n"))

_ROUTE_UNSCALED_DROPOUT = _edit(_CLASS, (
    "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n",
    "        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)\n"
    "        if self.training:\n"
    "            weights = weights * (torch.rand_like(weights) >= self.dropout.p)\n"))

_ROUTE_GAUSSIAN_NOISE = _edit(_CLASS, (
    "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n",
    "        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)\n"
    "        if self.training:\n"
    "            weights = weights * (1 + self.dropout.p * torch.randn_like(weights))\n"))

VARIANTS.update({
    "route_recomputes_kept_tokens": {"kind": "mistake", "cells": {"attention_with_cache": _ROUTE_RECOMPUTES},
                                     "fails": {"test_attention_with_cache": "not the inputs"}},
    # issue 35: the same recomputation through F.linear, which a forward pre-hook on W_key never sees
    "route_recomputes_kept_tokens_with_f_linear": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _ROUTE_RECOMPUTES.replace(
            "k, v = (layer(every).view(", "k, v = (F.linear(every, layer.weight, layer.bias).view(")},
        "fails": {"test_attention_with_cache": "not the inputs"}},
    # issue 45: the new tokens projected with one fused F.linear (the layers' weights, never the layers themselves)
    "cache_projects_with_one_fused_f_linear": {
        "kind": "correct",
        "cells": {"attention_with_cache": _edit(_CLASS, (
            "        q, k, v = (layer(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
            "                   for layer in (self.W_query, self.W_key, self.W_value))\n",
            "        layers = (self.W_query, self.W_key, self.W_value)\n"
            "        weight = torch.cat([layer.weight for layer in layers])\n"
            "        bias = None if self.W_query.bias is None else torch.cat([layer.bias for layer in layers])\n"
            "        q, k, v = (part.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
            "                   for part in F.linear(x, weight, bias).split(self.d_out, dim=-1))\n"))}},
    "route_grows_the_cache_then_raises": {"kind": "mistake",
                                          "cells": {"attention_with_cache": _ROUTE_GROWS_THEN_RAISES},
                                          "fails": {"test_attention_with_cache_arguments": "before"}},
    "route_dropout_without_scale": {"kind": "mistake", "cells": {"attention_with_cache": _ROUTE_UNSCALED_DROPOUT},
                                    "fails": {"test_attention_with_cache": "1 / (1 - p)"}},
    "route_gaussian_noise_for_dropout": {"kind": "mistake", "cells": {"attention_with_cache": _ROUTE_GAUSSIAN_NOISE},
                                         "fails": {"test_attention_with_cache": "zero"}},
})


# ------------------------------------------------------------------ Part 4: StaticKVCache
_STATIC_KEY = (
    "class StaticKVCache:\n"
    "    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):\n"
    "        shape = (batch_size, num_heads, max_len, head_dim)\n"
    "        self.keys = torch.zeros(shape, dtype=dtype, device=device)\n"
    "        self.values = torch.zeros(shape, dtype=dtype, device=device)\n"
    "        self.length = 0\n"
    "\n"
    "    def update(self, new_keys, new_values):\n"
    "        b, heads, max_len, head_dim = self.keys.shape\n"
    "        t_new = new_keys.shape[2] if new_keys.dim() == 4 else -1\n"
    "        for tensor in (new_keys, new_values):\n"
    "            if tuple(tensor.shape) != (b, heads, t_new, head_dim):\n"
    "                raise ValueError('new_keys and new_values must be (batch_size, num_heads, T_new, head_dim)')\n"
    "        end = self.length + t_new\n"
    "        if end > max_len:\n"
    "            raise ValueError(f'{self.length} + {t_new} tokens do not fit max_len={max_len}')\n"
    "        self.keys[:, :, self.length:end] = new_keys\n"
    "        self.values[:, :, self.length:end] = new_values\n"
    "        blocked = torch.arange(max_len) > torch.arange(self.length, end)[:, None]\n"
    "        self.length = end\n"
    "        return self.keys, self.values, blocked\n"
    "\n"
    "    def reset(self):\n"
    "        self.length = 0\n"
)


def _static_with(old, new):
    assert old in _STATIC_KEY, old
    return _STATIC_KEY.replace(old, new)


VARIANTS.update({
    "static_copy_narrow_tril": {
        "kind": "correct",
        "cells": {"static_kv_cache": (
            "class StaticKVCache:\n"
            "    \"\"\"copy_ into narrow() views, torch.empty filled with 0, a tril mask, sizes checked one by one.\"\"\"\n"
            "    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):\n"
            "        self.max_len = max_len\n"
            "        self.keys = torch.empty(batch_size, num_heads, max_len, head_dim, dtype=dtype, device=device)\n"
            "        self.values = torch.empty_like(self.keys)\n"
            "        self.keys.fill_(0.0)\n"
            "        self.values.fill_(0.0)\n"
            "        self.length = 0\n"
            "\n"
            "    def update(self, new_keys, new_values):\n"
            "        if new_keys.shape != new_values.shape or new_keys.ndim != 4 \\\n"
            "                or new_keys.shape[:2] != self.keys.shape[:2] or new_keys.shape[3] != self.keys.shape[3]:\n"
            "            raise ValueError(f'new_keys {tuple(new_keys.shape)} / new_values do not fit the cache')\n"
            "        n = new_keys.size(2)\n"
            "        if self.length + n > self.max_len:\n"
            "            raise ValueError('cache full: max_len reached')\n"
            "        self.keys.narrow(2, self.length, n).copy_(new_keys)\n"
            "        self.values.narrow(2, self.length, n).copy_(new_values)\n"
            "        allowed = torch.ones(n, self.max_len, dtype=torch.bool, device=self.keys.device).tril(self.length)\n"
            "        self.length += n\n"
            "        return self.keys, self.values, ~allowed\n"
            "\n"
            "    def reset(self):\n"
            "        self.length = 0\n")},
    },
    "static_index_copy_module": {
        "kind": "correct",
        "cells": {"static_kv_cache": (
            "class StaticKVCache(nn.Module):\n"
            "    \"\"\"An nn.Module with buffers, slots written with index_copy_, the mask from positions.\"\"\"\n"
            "    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):\n"
            "        super().__init__()\n"
            "        self.register_buffer('keys', torch.zeros(batch_size, num_heads, max_len, head_dim, dtype=dtype,\n"
            "                                                 device=device), persistent=False)\n"
            "        self.register_buffer('values', torch.zeros_like(self.keys), persistent=False)\n"
            "        self.length = 0\n"
            "\n"
            "    def update(self, new_keys, new_values):\n"
            "        b, h, cap, d = self.keys.shape\n"
            "        for t in (new_keys, new_values):\n"
            "            if t.dim() != 4 or (t.shape[0], t.shape[1], t.shape[3]) != (b, h, d) \\\n"
            "                    or t.shape[2] != new_keys.shape[2]:\n"
            "                raise ValueError('bad shape of new_keys or new_values')\n"
            "        if self.length + new_keys.shape[2] > cap:\n"
            "            raise ValueError(f'only max_len={cap} tokens fit')\n"
            "        where = torch.arange(self.length, self.length + new_keys.shape[2], device=self.keys.device)\n"
            "        self.keys.index_copy_(2, where, new_keys.to(self.keys.dtype))\n"
            "        self.values.index_copy_(2, where, new_values.to(self.values.dtype))\n"
            "        self.length += new_keys.shape[2]\n"
            "        position = torch.arange(cap, device=self.keys.device)\n"
            "        return self.keys, self.values, position.unsqueeze(0) > where.unsqueeze(1)\n"
            "\n"
            "    def reset(self):\n"
            "        self.length = 0\n")},
    },
    # the lesson's (and Part 3's) growing cache, adapted: tensors of a new shape at every call, Part 1's mask
    "static_grows_like_part_3": {
        "kind": "mistake",
        "cells": {"static_kv_cache": (
            "class StaticKVCache:\n"
            "    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):\n"
            "        self.max_len = max_len\n"
            "        self.keys = torch.zeros(batch_size, num_heads, 0, head_dim, dtype=dtype, device=device)\n"
            "        self.values = torch.zeros_like(self.keys)\n"
            "        self.length = 0\n"
            "\n"
            "    def update(self, new_keys, new_values):\n"
            "        b, h, _, d = self.keys.shape\n"
            "        if new_keys.dim() != 4 or new_keys.shape != new_values.shape or \\\n"
            "                (new_keys.shape[0], new_keys.shape[1], new_keys.shape[3]) != (b, h, d):\n"
            "            raise ValueError('new_keys has the wrong shape')\n"
            "        if self.length + new_keys.shape[2] > self.max_len:\n"
            "            raise ValueError('max_len reached')\n"
            "        self.keys = torch.cat([self.keys, new_keys], dim=2)\n"
            "        self.values = torch.cat([self.values, new_values], dim=2)\n"
            "        self.length = self.keys.shape[2]\n"
            "        return self.keys, self.values, causal_mask_with_offset(new_keys.shape[2], self.length)\n"
            "\n"
            "    def reset(self):\n"
            "        self.keys, self.values = self.keys[:, :, :0], self.values[:, :, :0]\n"
            "        self.length = 0\n")},
        "fails": {"test_static_kv_cache": "max_len slots", "test_static_kv_cache_memory": "max_len tokens at once"},
    },
    # Part 1's mask for (T_new, max_len), as it comes: aligned to the last slot, it shows the empty slots
    "static_mask_bottom_right": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "        blocked = torch.arange(max_len) > torch.arange(self.length, end)[:, None]\n",
            "        blocked = causal_mask_with_offset(t_new, max_len)\n")},
        "fails": {"test_static_kv_cache": "length + i"},
    },
    "static_mask_empty_slots_only": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "        blocked = torch.arange(max_len) > torch.arange(self.length, end)[:, None]\n",
            "        blocked = (torch.arange(max_len) >= end).expand(t_new, max_len)\n")},
        "fails": {"test_static_kv_cache": "length + i"},
    },
    "static_mask_from_slot_zero": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "        blocked = torch.arange(max_len) > torch.arange(self.length, end)[:, None]\n",
            "        blocked = torch.arange(max_len) > torch.arange(t_new)[:, None]\n")},
        "fails": {"test_static_kv_cache": "length + i"},
    },
    "static_rebuilt_with_cat": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "        self.keys[:, :, self.length:end] = new_keys\n"
            "        self.values[:, :, self.length:end] = new_values\n",
            "        self.keys = torch.cat([self.keys[:, :, :self.length], new_keys, self.keys[:, :, end:]], dim=2)\n"
            "        self.values = torch.cat([self.values[:, :, :self.length], new_values, self.values[:, :, end:]], dim=2)\n")},
        "fails": {"test_static_kv_cache_memory": "another tensor"},
    },
    "static_returns_copies": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with("return self.keys, self.values, blocked",
                                                  "return self.keys.clone(), self.values.clone(), blocked")},
        "fails": {"test_static_kv_cache_memory": "not a copy"},
    },
    "static_returns_stored_slots": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with("return self.keys, self.values, blocked",
                                                  "return self.keys[:, :, :end], self.values[:, :, :end], "
                                                  "blocked[:, :end]")},
        "fails": {"test_static_kv_cache": "max_len slots"},
    },
    "static_writes_at_the_start": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "        self.keys[:, :, self.length:end] = new_keys\n"
            "        self.values[:, :, self.length:end] = new_values\n",
            "        self.keys[:, :, :t_new] = new_keys\n"
            "        self.values[:, :, :t_new] = new_values\n")},
        "fails": {"test_static_kv_cache": "next free slots"},
    },
    "static_writes_before_checking": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "        if end > max_len:\n"
            "            raise ValueError(f'{self.length} + {t_new} tokens do not fit max_len={max_len}')\n"
            "        self.keys[:, :, self.length:end] = new_keys\n"
            "        self.values[:, :, self.length:end] = new_values\n"
            "        blocked = torch.arange(max_len) > torch.arange(self.length, end)[:, None]\n"
            "        self.length = end\n",
            "        start, self.length = self.length, end\n"
            "        if end > max_len:\n"
            "            raise ValueError(f'{start} + {t_new} tokens do not fit max_len={max_len}')\n"
            "        self.keys[:, :, start:end] = new_keys\n"
            "        self.values[:, :, start:end] = new_values\n"
            "        blocked = torch.arange(max_len) > torch.arange(start, end)[:, None]\n")},
        "fails": {"test_static_kv_cache": "before you write anything"},
    },
    "static_no_overflow_check": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "        if end > max_len:\n"
            "            raise ValueError(f'{self.length} + {t_new} tokens do not fit max_len={max_len}')\n", "")},
        "fails": {"test_static_kv_cache": "max_len"},
    },
    "static_reset_reallocates": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with(
            "    def reset(self):\n        self.length = 0\n",
            "    def reset(self):\n        self.length = 0\n"
            "        self.keys, self.values = torch.zeros_like(self.keys), torch.zeros_like(self.values)\n")},
        "fails": {"test_static_kv_cache_memory": "new memory"},
    },
    "static_dtype_ignored": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static_with("torch.zeros(shape, dtype=dtype, device=device)",
                                                  "torch.zeros(shape, device=device)")},
        "fails": {"test_static_kv_cache_memory": "dtype"},
    },
})

# Rule 3 of the course: every transfer part fails the lesson's code adapted mechanically and the shortcut, and passes
# two correct solutions in other styles.
PROOF = {
    "test_static_kv_cache": {"lesson": ["static_grows_like_part_3"], "shortcut": ["static_mask_bottom_right"],
                             "correct": ["static_copy_narrow_tril", "static_index_copy_module"]},
    "test_static_kv_cache_memory": {"lesson": ["static_grows_like_part_3"], "shortcut": ["static_rebuilt_with_cat"],
                                    "correct": ["static_copy_narrow_tril", "static_index_copy_module"]},
}
