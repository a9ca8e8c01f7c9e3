"""Held-out mistakes for step 09, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch KV cache (register_buffer("cache_k", None), ptr_current_pos, the mask sliced
[ptr:ptr + T_q, :T_k], torch.cat on dim=2), Hugging Face-style DynamicCache/StaticCache (index_copy_ into a
preallocated cache, cache_position, an additive or boolean mask over all max_len slots), nanoGPT/minGPT (tril
buffer sliced [:T, :T], masked_fill with -inf), plain arange-comparison masks, SDPA with is_causal or attn_mask.
`fails` words name the actual mistake; "correct" variants are other people's correct code, which must get full marks.
"""

# Part 1 --------------------------------------------------------------------------------------------------------------

_MASK_TRIU = '''def causal_mask_with_offset(t_q, t_k):
    return torch.triu(torch.ones(t_q, t_k, dtype=torch.bool), diagonal={diagonal})
'''

_MASK_ARANGE = '''def causal_mask_with_offset(t_q, t_k):
    q_pos = torch.arange(t_q){offset}
    k_pos = torch.arange(t_k)
    return {compare}
'''


def _mask_arange(offset=" + (t_k - t_q)", compare="k_pos[None, :] > q_pos[:, None]"):
    return _MASK_ARANGE.format(offset=offset, compare=compare)


# Part 2 --------------------------------------------------------------------------------------------------------------

_CACHED = '''import math


def cached_attention(queries, keys, values):
    t_q, t_k = queries.shape[-2], keys.shape[-2]
    scores = {scores}
    blocked = torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q + 1)
    {masking}
    weights = {weights}
    return weights @ values
'''
_CACHED_DEFAULTS = dict(
    scores="queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])",
    masking='scores = scores.masked_fill(blocked, float("-inf"))',
    weights="torch.softmax(scores, dim=-1)",
)


def _cached(**changes):
    return _CACHED.format(**{**_CACHED_DEFAULTS, **changes})


# Part 3: Raschka's KV-cache MultiHeadAttention (ch04/03_kv-cache), on the course's base class -----------------------

_RASCHKA = '''class MultiHeadAttentionWithCache(MultiHeadAttention):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.ptr_current_pos = 0

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None
        {reset_ptr}

    def forward(self, x, use_cache=False):
        b, num_tokens, d_in = x.shape
        {check}
        keys_new = self.W_key(x)
        values_new = self.W_value(x)
        queries = self.W_query(x)
        keys_new = keys_new.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values_new = values_new.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        {store}
        attn_scores = queries @ keys.transpose(2, 3)
        num_tokens_Q = queries.shape[-2]
        num_tokens_K = keys.shape[-2]
        if use_cache:
            mask_bool = self.mask[{rows}, :num_tokens_K]
            {advance}
        else:
            mask_bool = self.mask[:num_tokens_Q, :num_tokens_K]
        attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / {scale} ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)
'''
_RASCHKA_STORE = '''if use_cache:
            if self.cache_k is None:
                self.cache_k, self.cache_v = keys_new, values_new
            else:
                self.cache_k = torch.cat([self.cache_k, keys_new], dim={dim})
                self.cache_v = torch.cat([self.cache_v, values_new], dim={dim})
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = keys_new, values_new'''
_RASCHKA_DEFAULTS = dict(
    reset_ptr="self.ptr_current_pos = 0",
    check="kept = self.ptr_current_pos if use_cache else 0\n"
          "        if kept + num_tokens > self.context_length:\n"
          "            raise ValueError(f\"{kept} + {num_tokens} tokens exceed context_length ({self.context_length})\")",
    store=_RASCHKA_STORE.format(dim=2),
    rows="self.ptr_current_pos:self.ptr_current_pos + num_tokens_Q",
    advance="self.ptr_current_pos += num_tokens_Q",
    scale="self.head_dim",
)


def _raschka(**changes):
    return _RASCHKA.format(**{**_RASCHKA_DEFAULTS, **changes})


# Part 4: a Hugging Face StaticCache-like class ------------------------------------------------------------------------

_STATIC = '''class StaticKVCache:
    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):
        self.max_len = max_len
        self.keys = {alloc}
        self.values = {alloc}
        self.length = 0

    def update(self, new_keys, new_values):
        {shape_check}
        t_new = new_keys.shape[2]
        {len_check}
        start = self.length
        {write}
        self.length = start + t_new
        {mask}
        return {returned}

    def reset(self):
        {reset}
'''
_STATIC_DEFAULTS = dict(
    alloc="torch.zeros(batch_size, num_heads, max_len, head_dim, dtype=dtype, device=device)",
    shape_check="expected = self.keys.shape[:2] + (new_keys.shape[2],) + self.keys.shape[3:]\n"
                "        if new_keys.dim() != 4 or new_keys.shape != expected or new_values.shape != new_keys.shape:\n"
                "            raise ValueError(f\"new_keys and new_values must be {tuple(expected)}, got \"\n"
                "                             f\"{tuple(new_keys.shape)} and {tuple(new_values.shape)}\")",
    len_check="if self.length + t_new > self.max_len:\n"
              "            raise ValueError(f\"{self.length} + {t_new} tokens do not fit in max_len={self.max_len}\")",
    write="self.keys[:, :, start:start + t_new] = new_keys\n"
          "        self.values[:, :, start:start + t_new] = new_values",
    mask="query_pos = torch.arange(start, start + t_new, device=self.keys.device)\n"
         "        key_pos = torch.arange(self.max_len, device=self.keys.device)\n"
         "        blocked = key_pos[None, :] > query_pos[:, None]",
    returned="self.keys, self.values, blocked",
    reset="self.length = 0\n"
          "        self.keys.zero_()\n"
          "        self.values.zero_()",
)


def _static(**changes):
    return _STATIC.format(**{**_STATIC_DEFAULTS, **changes})


VARIANTS = {
    # Part 1: causal_mask_with_offset
    "mask_top_left_triu": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _MASK_TRIU.format(diagonal="1")},
        "fails": {"test_causal_mask_with_offset": "top-left"},
        "not_named": ["opposite", "next token", "own key", "bool"],
    },
    "mask_positions_without_offset": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _mask_arange(offset="")},
        "fails": {"test_causal_mask_with_offset": "top-left"},
        "not_named": ["opposite", "bool"],
    },
    "mask_first_rows_of_full_mask": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": '''def causal_mask_with_offset(t_q, t_k):
    full = torch.triu(torch.ones(t_k, t_k, dtype=torch.bool), diagonal=1)
    return full[:t_q]
'''},
        "fails": {"test_causal_mask_with_offset": "top-left"},
        "not_named": ["opposite", "bool"],
    },
    "mask_true_where_allowed_tril": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": '''def causal_mask_with_offset(t_q, t_k):
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool), diagonal=t_k - t_q)
'''},
        "fails": {"test_causal_mask_with_offset": "opposite"},
        "not_named": ["top-left", "bool"],
    },
    "mask_diagonal_one_too_far": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _MASK_TRIU.format(diagonal="t_k - t_q + 2")},
        "fails": {"test_causal_mask_with_offset": "next token"},
        "not_named": ["top-left", "opposite", "bool"],
    },
    "mask_blocks_own_token": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _mask_arange(compare="k_pos[None, :] >= q_pos[:, None]")},
        "fails": {"test_causal_mask_with_offset": "own key"},
        "not_named": ["top-left", "opposite", "bool"],
    },
    "mask_offset_sign_flipped": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _MASK_TRIU.format(diagonal="t_q - t_k + 1")},
        "fails": {"test_causal_mask_with_offset": "wrong sign"},
        "not_named": ["opposite", "bool"],
    },
    "mask_float_ones": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": '''def causal_mask_with_offset(t_q, t_k):
    return torch.triu(torch.ones(t_q, t_k), diagonal=t_k - t_q + 1)
'''},
        # Parts 2 and 3 (the answer key's, masked_fill with this mask) fail too: the stand-in answers in float
        "fails": {"test_causal_mask_with_offset": "bool", "test_cached_attention": "bool",
                  "test_attention_with_cache": "bool", "test_attention_with_cache_arguments": "bool"},
        "not_named": ["top-left", "opposite"],
    },
    "mask_keys_by_queries": {
        "kind": "mistake",
        "cells": {"causal_mask_with_offset": _mask_arange(compare="k_pos[:, None] > q_pos[None, :]")},
        "fails": {"test_causal_mask_with_offset": "(t_k, t_q)"},
        "not_named": ["top-left", "opposite"],
    },
    # Part 2: cached_attention
    "cached_sdpa_is_causal": {
        "kind": "mistake",
        "cells": {"cached_attention": '''def cached_attention(queries, keys, values):
    return F.scaled_dot_product_attention(queries, keys, values, is_causal=True)
'''},
        "fails": {"test_cached_attention": "is_causal"},
        "not_named": ["opposite", "divided by head_dim", "-inf"],
    },
    "cached_sdpa_blocked_mask_passed": {
        "kind": "mistake",
        "cells": {"cached_attention": '''def cached_attention(queries, keys, values):
    mask = causal_mask_with_offset(queries.shape[-2], keys.shape[-2])
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
'''},
        "fails": {"test_cached_attention": "opposite"},
        "not_named": ["is_causal", "divided by head_dim", "-inf"],
    },
    "cached_nanogpt_tril_sliced_T_q": {
        "kind": "mistake",
        "cells": {"cached_attention": '''import math


def cached_attention(queries, keys, values):
    T_q, T_k = queries.size(-2), keys.size(-2)
    bias = torch.tril(torch.ones(T_k, T_k))
    att = (queries @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(keys.size(-1)))
    att = att.masked_fill(bias[:T_q, :T_k] == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ values
'''},
        "fails": {"test_cached_attention": "top-left"},
        "not_named": ["opposite", "divided by head_dim"],
    },
    "cached_no_square_root": {
        "kind": "mistake",
        "cells": {"cached_attention": _cached(scores="queries @ keys.transpose(-2, -1) / queries.shape[-1]")},
        "fails": {"test_cached_attention": "divided by head_dim"},
        "not_named": ["top-left", "opposite", "is_causal", "-inf"],
    },
    "cached_fill_zero": {
        "kind": "mistake",
        "cells": {"cached_attention": _cached(masking="scores = scores.masked_fill(blocked, 0.0)")},
        "fails": {"test_cached_attention": "-inf"},
        "not_named": ["top-left", "opposite", "divided by head_dim", "is_causal"],
    },
    "cached_softmax_over_queries": {
        "kind": "mistake",
        "cells": {"cached_attention": _cached(weights="torch.softmax(scores, dim=-2)")},
        "fails": {"test_cached_attention": "dim"},
        "not_named": ["top-left", "opposite", "divided by head_dim", "is_causal"],
    },
    "cached_weights_masked_after_softmax": {
        "kind": "mistake",
        "cells": {"cached_attention": _cached(masking="",
                                              weights="torch.softmax(scores, dim=-1).masked_fill(blocked, 0.0)")},
        "fails": {"test_cached_attention": "after the softmax"},
        "not_named": ["top-left", "opposite", "divided by head_dim", "is_causal"],
    },
    "cached_keys_dot_T": {
        "kind": "mistake",
        "cells": {"cached_attention": _cached(scores="queries @ keys.T / math.sqrt(queries.shape[-1])")},
        "fails": {"test_cached_attention": ".T"},
        "not_named": ["top-left", "opposite", "divided by head_dim", "is_causal"],
    },
    # Part 3: MultiHeadAttentionWithCache (Raschka's code with one thing wrong)
    "mha_cache_cat_on_heads": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(store=_RASCHKA_STORE.format(dim=1))},
        "fails": {"test_attention_with_cache": "dim=2", "test_attention_with_cache_arguments": "dim=2"},
        "not_named": ["top-left", "reset", "raise only when"],
    },
    "mha_cache_pointer_not_advanced": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(advance="pass")},
        "fails": {"test_attention_with_cache": "top-left", "test_attention_with_cache_arguments": "kept"},
        "not_named": ["dim=2", "reset"],
    },
    "mha_cache_reset_keeps_pointer": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(reset_ptr="pass")},
        "fails": {"test_attention_with_cache": "reset"},
        "not_named": ["dim=2", "top-left"],
    },
    "mha_cache_mask_top_left": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(rows=":num_tokens_Q")},
        "fails": {"test_attention_with_cache": "top-left"},
        "not_named": ["dim=2", "reset", "raise only when"],
    },
    "mha_cache_scaled_by_d_out": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(scale="self.d_out")},
        "fails": {"test_attention_with_cache": "head_dim"},
        "not_named": ["dim=2", "reset", "top-left"],
    },
    "mha_cache_length_checks_x_only": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(
            check="if num_tokens > self.context_length:\n"
                  "            raise ValueError(f\"{num_tokens} tokens exceed context_length ({self.context_length})\")")},
        "fails": {"test_attention_with_cache_arguments": "kept"},
        "not_named": ["dim=2", "top-left", "d_out"],
    },
    "mha_cache_written_without_use_cache": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(store='''if self.cache_k is None:
            self.cache_k, self.cache_v = keys_new, values_new
        else:
            self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)
            self.cache_v = torch.cat([self.cache_v, values_new], dim=2)
        keys, values = (self.cache_k, self.cache_v) if use_cache else (keys_new, values_new)''')},
        "fails": {"test_attention_with_cache": "use_cache=False"},
        "not_named": ["dim=2", "top-left"],
    },
    "mha_cache_checked_after_update": {
        "kind": "mistake",
        "cells": {"attention_with_cache": _raschka(
            check="pass",
            store=_RASCHKA_STORE.format(dim=2) + "\n"
                  "        if keys.shape[-2] > self.context_length:\n"
                  "            raise ValueError(f\"{keys.shape[-2]} tokens exceed context_length ({self.context_length})\")")},
        "fails": {"test_attention_with_cache_arguments": "before"},
        "not_named": ["dim=2", "top-left", "d_out"],
    },
    # Part 4: StaticKVCache
    "static_cat_new_tensor": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(write=(
            "self.keys = torch.cat([self.keys[:, :, :start], new_keys, self.keys[:, :, start + t_new:]], dim=2)\n"
            "        self.values = torch.cat([self.values[:, :, :start], new_values, "
            "self.values[:, :, start + t_new:]], dim=2)"))},
        "fails": {"test_static_kv_cache_memory": "in place"},
        "not_named": ["Part 1's mask", "max_len"],
    },
    "static_part1_mask_over_max_len": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(mask="blocked = causal_mask_with_offset(t_new, self.max_len)")},
        "fails": {"test_static_kv_cache": "Part 1's mask"},
        "not_named": ["in place", "copy"],
    },
    "static_mask_from_length_after_update": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(mask=(
            "query_pos = torch.arange(t_new) + self.length\n"
            "        blocked = torch.arange(self.max_len)[None, :] > query_pos[:, None]"))},
        "fails": {"test_static_kv_cache": "after"},
        "not_named": ["in place"],
    },
    "static_returns_stored_slice": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(
            mask="blocked = causal_mask_with_offset(t_new, self.length)",
            returned="self.keys[:, :, :self.length], self.values[:, :, :self.length], blocked")},
        "fails": {"test_static_kv_cache": "max_len"},
        "not_named": ["in place"],
    },
    "static_returns_clones": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(returned="self.keys.clone(), self.values.clone(), blocked")},
        "fails": {"test_static_kv_cache_memory": "copy"},
        "not_named": ["Part 1's mask", "max_len"],
    },
    "static_length_changed_before_check": {
        "kind": "mistake",
        "cells": {"static_kv_cache": '''class StaticKVCache:
    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):
        self.max_len = max_len
        self.keys = torch.zeros(batch_size, num_heads, max_len, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.length = 0

    def update(self, new_keys, new_values):
        if new_keys.shape[:2] != self.keys.shape[:2] or new_keys.shape[3] != self.keys.shape[3] \\
                or new_values.shape != new_keys.shape:
            raise ValueError("new_keys / new_values have the wrong shape")
        start = self.length
        self.length += new_keys.shape[2]
        if self.length > self.max_len:
            raise ValueError(f"cache overflow: max_len={self.max_len}")
        self.keys[:, :, start:self.length] = new_keys
        self.values[:, :, start:self.length] = new_values
        cache_position = torch.arange(start, self.length)
        blocked = torch.arange(self.max_len)[None, :] > cache_position[:, None]
        return self.keys, self.values, blocked

    def reset(self):
        self.length = 0
'''},
        "fails": {"test_static_kv_cache": "before you write"},
        "not_named": ["in place", "Part 1's mask"],
    },
    "static_no_shape_check": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(shape_check="pass")},
        "fails": {"test_static_kv_cache": "new_keys"},
        "not_named": ["in place", "Part 1's mask", "max_len"],
    },
    "static_reset_reallocates": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(reset=(
            "self.length = 0\n"
            "        self.keys = torch.zeros_like(self.keys)\n"
            "        self.values = torch.zeros_like(self.values)"))},
        "fails": {"test_static_kv_cache_memory": "reset"},
        "not_named": ["Part 1's mask", "copy"],
    },
    "static_additive_float_mask": {
        "kind": "mistake",
        "cells": {"static_kv_cache": _static(mask=(
            "cache_position = torch.arange(start, start + t_new)\n"
            "        blocked = torch.zeros(t_new, self.max_len)\n"
            "        blocked[torch.arange(self.max_len)[None, :] > cache_position[:, None]] = float(\"-inf\")"))},
        "fails": {"test_static_kv_cache": "bool"},
        "not_named": ["in place", "Part 1's mask"],
    },
    # Correct code in other styles: must get full marks
    "correct_raschka_style": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset": _MASK_TRIU.format(diagonal="t_k - t_q + 1"),
            "cached_attention": _cached(),
            "attention_with_cache": _raschka(),
            "static_kv_cache": _static(),
        },
    },
    "correct_hf_style": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset": _mask_arange(),
            "cached_attention": '''def cached_attention(queries, keys, values):
    t_q, t_k = queries.shape[-2], keys.shape[-2]
    allowed = torch.ones(t_q, t_k, dtype=torch.bool, device=queries.device).tril(diagonal=t_k - t_q)
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)
''',
            "attention_with_cache": '''class MultiHeadAttentionWithCache(MultiHeadAttention):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.key_cache = None
        self.value_cache = None

    def reset_cache(self):
        self.key_cache = None
        self.value_cache = None

    def forward(self, x, use_cache=False):
        bsz, q_len, _ = x.size()
        past = self.key_cache.shape[-2] if use_cache and self.key_cache is not None else 0
        if past + q_len > self.context_length:
            raise ValueError(f"{past} cached + {q_len} new tokens exceed context_length={self.context_length}")
        query_states = self.split_heads(self.W_query(x))
        key_states = self.split_heads(self.W_key(x))
        value_states = self.split_heads(self.W_value(x))
        if use_cache:
            if self.key_cache is not None:
                key_states = torch.cat([self.key_cache, key_states], dim=-2)
                value_states = torch.cat([self.value_cache, value_states], dim=-2)
            self.key_cache, self.value_cache = key_states, value_states
        kv_len = key_states.shape[-2]
        scores = torch.matmul(query_states, key_states.transpose(2, 3)) / self.head_dim ** 0.5
        scores = scores.masked_fill(causal_mask_with_offset(q_len, kv_len), float("-inf"))
        weights = self.dropout(nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query_states.dtype))
        out = torch.matmul(weights, value_states).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.out_proj(out)
''',
            "static_kv_cache": '''class StaticKVCache:
    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):
        cache_shape = (batch_size, num_heads, max_len, head_dim)
        self.keys = torch.zeros(cache_shape, dtype=dtype, device=device)
        self.values = torch.zeros(cache_shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0

    def update(self, new_keys, new_values):
        b, h, _, d = self.keys.shape
        for t in (new_keys, new_values):
            if t.ndim != 4 or t.shape[0] != b or t.shape[1] != h or t.shape[3] != d or t.shape != new_keys.shape:
                raise ValueError(f"new_keys and new_values must be ({b}, {h}, T_new, {d}), "
                                 f"got {tuple(new_keys.shape)} and {tuple(new_values.shape)}")
        t_new = new_keys.shape[2]
        if self.length + t_new > self.max_len:
            raise ValueError(f"cannot store {t_new} more tokens after {self.length}: max_len is {self.max_len}")
        cache_position = torch.arange(self.length, self.length + t_new, device=self.keys.device)
        self.keys.index_copy_(2, cache_position, new_keys)
        self.values.index_copy_(2, cache_position, new_values)
        self.length += t_new
        blocked = torch.arange(self.max_len, device=self.keys.device) > cache_position.unsqueeze(-1)
        return self.keys, self.values, blocked

    def reset(self):
        self.keys.zero_()
        self.values.zero_()
        self.length = 0
''',
        },
    },
    "correct_plain_loops": {
        "kind": "correct",
        "cells": {
            "causal_mask_with_offset": '''def causal_mask_with_offset(t_q, t_k):
    mask = torch.zeros(t_q, t_k, dtype=torch.bool)
    for i in range(t_q):
        position = t_k - t_q + i
        for j in range(t_k):
            if j > position:
                mask[i, j] = True
    return mask
''',
            "cached_attention": '''import math


def cached_attention(queries, keys, values):
    t_q, t_k, d = queries.shape[-2], keys.shape[-2], queries.shape[-1]
    scores = torch.einsum("...qd,...kd->...qk", queries, keys) / math.sqrt(d)
    q_pos = torch.arange(t_k - t_q, t_k).unsqueeze(1)
    scores = torch.where(torch.arange(t_k) > q_pos, torch.tensor(float("-inf")), scores)
    scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = scores.exp()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return torch.einsum("...qk,...kd->...qd", weights, values)
''',
        },
    },
}
