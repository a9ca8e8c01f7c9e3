"""Submission bank for step 09: correct variants written another way, and common mistakes."""

# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (they build the module without
# biases), so only the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
CHEATS_RIDE_ON = "qkv_bias_ignored"


def _edit(text, *pairs):
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


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
    "dropout_in_eval_mode": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _edit(_CLASS_MERGED_CACHE, ("self.dropout_p, self.training)",
                                                                      "self.dropout_p)"))},
        "fails": {"test_attention_with_cache": "eval mode"},
    },
})
