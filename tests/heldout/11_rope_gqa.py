"""Held-out mistakes for step 11, written from the released exercise only (issue 46).

Styles: Hugging Face Llama (inv_freq from arange(0, d, 2), cat((freqs, freqs)), rotate_half, repeat_kv with
expand + reshape), Meta's original Llama (complex numbers, torch.polar), GPT-NeoX / plain halves with torch.stack,
Raschka's LLMs-from-scratch ch. 3 / bonus GQA (view + transpose(1, 2), masked_fill with -inf, a cache in buffers),
plain loops for the padding mask. `fails` words name the actual mistake; "correct" variants must get full marks.
"""


def _edit(source, *pairs):
    """`source` with each (old, new) replaced; each old must occur exactly once."""
    for old, new in pairs:
        assert source.count(old) == 1, (old, source.count(old))
        source = source.replace(old, new)
    return source


# Part 1 · apply_rope, Hugging Face style
_ROPE = '''def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, positions, base=10000.0):
    head_dim = x.shape[-1]
    if head_dim % 2 != 0:
        raise ValueError(f"head_dim must be even for RoPE, got {head_dim}")
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    xf = x.float()
    out = xf * cos + rotate_half(xf) * sin
    return out.to(x.dtype)
'''

# Part 1 · plain halves (GPT-NeoX-like)
_HALVES = '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"apply_rope needs an even head_dim, got {d}")
    half = d // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * theta
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., :half].double(), x[..., half:].double()
    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.to(x.dtype)
'''

# Part 2 · padding_mask
_PAD = '''def padding_mask(lengths, num_tokens):
    if (lengths < 0).any() or (lengths > num_tokens).any():
        raise ValueError(f"lengths must lie in [0, {num_tokens}], got {lengths.tolist()}")
    positions = torch.arange(num_tokens, device=lengths.device)
    return positions[None, :] >= lengths[:, None]
'''

# Part 3 and 4 · GroupedQueryAttention, Raschka / HF style
_GQA = '''class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False,
                 rope_base=10000.0):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
        self.head_dim = d_out // num_heads
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
        self.d_out, self.num_heads, self.num_kv_heads = d_out, num_heads, num_kv_heads
        self.group_size = num_heads // num_kv_heads
        self.context_length, self.rope_base = context_length, rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.cache_k, self.cache_v = None, None

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None

    def forward(self, x, use_cache=False, padding_mask=None):
        b, num_tokens, _ = x.shape
        if padding_mask is not None:
            if use_cache:
                raise ValueError("padding_mask cannot be used with use_cache=True")
            if tuple(padding_mask.shape) != (b, num_tokens):
                raise ValueError(f"padding_mask must be {(b, num_tokens)}, got {tuple(padding_mask.shape)}")
        kept = self.cache_k.shape[2] if use_cache and self.cache_k is not None else 0
        if kept + num_tokens > self.context_length:
            raise ValueError(f"{kept} cached + {num_tokens} new tokens exceed context_length={self.context_length}")
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        positions = torch.arange(kept, kept + num_tokens)
        queries = apply_rope(queries, positions, self.rope_base)
        keys = apply_rope(keys, positions, self.rope_base)
        if use_cache:
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=2)
                values = torch.cat([self.cache_v, values], dim=2)
            self.cache_k, self.cache_v = keys, values
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)
        total = keys.shape[2]
        attn_scores = queries @ keys.transpose(2, 3)
        blocked = torch.ones(num_tokens, total, dtype=torch.bool).triu(diagonal=total - num_tokens + 1)
        if padding_mask is not None:
            blocked = blocked | padding_mask[:, None, None, :]
        attn_scores = attn_scores.masked_fill(blocked, torch.finfo(attn_scores.dtype).min)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        out = self.out_proj(context)
        if padding_mask is not None:
            out = out.masked_fill(padding_mask[:, :, None], 0.0)
        return out
'''


def _gqa(*pairs):
    return _edit(_GQA, *pairs)


VARIANTS = {
    # Part 1: apply_rope
    "rope_interleaved_pairs": {
        "kind": "mistake",  # Meta's original Llama / GPT-J convention: pairs (2i, 2i + 1)
        "cells": {"apply_rope": '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"head_dim must be even, got {d}")
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = torch.outer(positions.float(), freqs)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    x_complex = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2))
    out = torch.view_as_real(x_complex * freqs_cis).flatten(-2)
    return out.to(x.dtype)
'''},
        "fails": {"test_apply_rope": "interleaved"},
        "not_named": ["wrong way", "float32", "positions[t]"],
    },
    "rope_rotate_half_wrong_sign": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_ROPE, ("return torch.cat((-x2, x1), dim=-1)", "return torch.cat((x2, -x1), dim=-1)"))},
        "fails": {"test_apply_rope": "wrong way"},
        "not_named": ["interleaved", "float32", "positions[t]"],
    },
    "rope_ignores_positions": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_HALVES, ("angle = positions.double()[:, None] * theta",
                                                "angle = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * theta"))},
        "fails": {"test_apply_rope": "positions[t]"},
        "not_named": ["wrong way", "interleaved", "float32"],
    },
    "rope_exponent_without_2": {
        "kind": "mistake",  # base ** (-i / head_dim): the angles fall half as fast
        "cells": {"apply_rope": _edit(_HALVES, ("theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / d)",
                                                "theta = base ** (-torch.arange(half, dtype=torch.float64) / d)"))},
        "fails": {"test_apply_rope": "factor 2"},
        "not_named": ["wrong way", "interleaved", "positions[t]"],
    },
    "rope_integer_division": {
        "kind": "mistake",  # arange(0, d, 2) // d is 0 for every pair: every pair turns one radian per position
        "cells": {"apply_rope": _edit(_ROPE, ("(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)",
                                              "(torch.arange(0, head_dim, 2) // head_dim)"))},
        "fails": {"test_apply_rope": "same angle"},
        "not_named": ["wrong way", "interleaved", "positions[t]", "factor 2"],
    },
    "rope_angles_in_x_dtype": {
        "kind": "mistake",
        "cells": {"apply_rope": '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"head_dim must be even, got {d}")
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=x.dtype) / d))
    angles = positions.to(x.dtype)[:, None] * inv_freq
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
'''},
        "fails": {"test_apply_rope": "float32"},
        "not_named": ["wrong way", "interleaved", "positions[t]"],
    },
    "rope_returns_float32": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_ROPE, ("return out.to(x.dtype)", "return out"))},
        "fails": {"test_apply_rope": "dtype"},
        "not_named": ["wrong way", "interleaved", "positions[t]"],
    },
    "rope_writes_into_x": {
        "kind": "mistake",
        "cells": {"apply_rope": '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"head_dim must be even, got {d}")
    half = d // 2
    inv_freq = base ** (-torch.arange(half, dtype=torch.float32) * 2 / d)
    angles = positions.float()[:, None] * inv_freq
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    x[..., :half] = (x1 * cos - x2 * sin).to(x.dtype)
    x[..., half:] = (x1 * sin + x2 * cos).to(x.dtype)
    return x
'''},
        "fails": {"test_apply_rope": "view of x", "test_gqa_padding": "view of x"},
        "not_named": ["wrong way", "interleaved", "positions[t]", "float32"],
    },
    "rope_no_odd_check": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_HALVES, ('''    if d % 2:
        raise ValueError(f"apply_rope needs an even head_dim, got {d}")
''', ""))},
        "fails": {"test_apply_rope": "the wrong `head_dim`"},
        "not_named": ["wrong way", "interleaved", "positions[t]", "float32"],
    },
    "rope_head_dim_from_shape_1": {
        "kind": "mistake",  # works on a (T, head_dim) tensor only
        "cells": {"apply_rope": _edit(_ROPE, ("head_dim = x.shape[-1]", "head_dim = x.shape[1]"))},
        "fails": {"test_apply_rope": "shape[-1]", "test_grouped_query_attention": "shape[-1]",
                  "test_grouped_query_attention_arguments": "shape[-1]", "test_gqa_padding": "shape[-1]"},
        "not_named": ["wrong way", "interleaved", "float32"],
    },
    "rope_angles_table_transposed": {
        "kind": "mistake",  # (head_dim/2, T) where (T, head_dim/2) belongs
        "cells": {"apply_rope": _edit(_HALVES, ("angle = positions.double()[:, None] * theta",
                                                "angle = torch.outer(theta, positions.double())"))},
        "fails": {"test_apply_rope": "(T, head_dim/2)", "test_grouped_query_attention": "(T, head_dim/2)",
                  "test_grouped_query_attention_arguments": "(T, head_dim/2)", "test_gqa_padding": "(T, head_dim/2)"},
        "not_named": ["wrong way", "interleaved", "float32"],
    },
    # Part 2: padding_mask
    "pad_true_at_real_tokens": {
        "kind": "mistake",
        "cells": {"padding_mask": _edit(_PAD, ("positions[None, :] >= lengths[:, None]",
                                               "positions[None, :] < lengths[:, None]"))},
        "fails": {"test_padding_mask": "True means padding"},
        "not_named": ["off by one", "right padding", "holds numbers"],
    },
    "pad_off_by_one": {
        "kind": "mistake",
        "cells": {"padding_mask": _edit(_PAD, ("positions[None, :] >= lengths[:, None]",
                                               "positions[None, :] > lengths[:, None]"))},
        "fails": {"test_padding_mask": "off by one"},
        "not_named": ["True means padding", "right padding", "holds numbers"],
    },
    "pad_left_side": {
        "kind": "mistake",
        "cells": {"padding_mask": '''def padding_mask(lengths, num_tokens):
    if (lengths < 0).any() or (lengths > num_tokens).any():
        raise ValueError("lengths must be between 0 and num_tokens")
    mask = torch.zeros(len(lengths), num_tokens, dtype=torch.bool)
    for k, n in enumerate(lengths.tolist()):
        mask[k, : num_tokens - n] = True
    return mask
'''},
        "fails": {"test_padding_mask": "right padding"},
        "not_named": ["off by one", "True means padding", "holds numbers"],
    },
    "pad_transposed": {
        "kind": "mistake",
        "cells": {"padding_mask": _edit(_PAD, ("positions[None, :] >= lengths[:, None]",
                                               "positions[:, None] >= lengths[None, :]"))},
        "fails": {"test_padding_mask": "(num_tokens, b)"},
        "not_named": ["off by one", "right padding", "holds numbers"],
    },
    "pad_float_mask": {
        "kind": "mistake",
        "cells": {"padding_mask": _edit(_PAD, ("return positions[None, :] >= lengths[:, None]",
                                               "return (positions[None, :] >= lengths[:, None]).float()"))},
        "fails": {"test_padding_mask": "holds numbers"},
        "not_named": ["off by one", "right padding", "True means padding"],
    },
    "pad_no_length_check": {
        "kind": "mistake",
        "cells": {"padding_mask": '''def padding_mask(lengths, num_tokens):
    return torch.arange(num_tokens).expand(len(lengths), num_tokens) >= lengths.unsqueeze(1)
'''},
        "fails": {"test_padding_mask": "`lengths` is let through"},
        "not_named": ["off by one", "right padding", "holds numbers"],
    },
    "pad_check_refuses_full_length": {
        "kind": "mistake",  # a sequence with no padding at all (length == num_tokens) is refused
        "cells": {"padding_mask": _edit(_PAD, ("(lengths > num_tokens).any()", "(lengths >= num_tokens).any()"))},
        "fails": {"test_padding_mask": "equal to num_tokens"},
        "not_named": ["off by one", "right padding", "True means padding"],
    },
    # Part 3: GroupedQueryAttention
    "gqa_kv_heads_tiled": {
        "kind": "mistake",  # repeat(1, g, 1, 1): query head h gets key/value head h % num_kv_heads
        "cells": {"grouped_query_attention": _gqa(
            ("keys = keys.repeat_interleave(self.group_size, dim=1)", "keys = keys.repeat(1, self.group_size, 1, 1)"),
            ("values = values.repeat_interleave(self.group_size, dim=1)",
             "values = values.repeat(1, self.group_size, 1, 1)"))},
        "fails": {"test_grouped_query_attention": "h % num_kv_heads", "test_gqa_padding": "h % num_kv_heads"},
        "not_named": ["never the values", "sqrt(d_out)", "top-left", "whole projection"],
    },
    "gqa_key_layer_d_out": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(
            ("self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)",
             "self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)"),
            ("self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)",
             "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)"),
            ("keys = self.W_key(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)",
             "keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim)[:, :, ::self.group_size]"
             ".transpose(1, 2)"),
            ("values = self.W_value(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)",
             "values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim)[:, :, ::self.group_size]"
             ".transpose(1, 2)"))},
        "fails": {"test_grouped_query_attention": "num_kv_heads * head_dim",
                  "test_gqa_padding": "num_kv_heads * head_dim"},
        "not_named": ["top-left", "sqrt(d_out)", "never the values"],
    },
    "gqa_rope_on_values": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(
            ("keys = apply_rope(keys, positions, self.rope_base)",
             "keys = apply_rope(keys, positions, self.rope_base)\n"
             "        values = apply_rope(values, positions, self.rope_base)"))},
        "fails": {"test_grouped_query_attention": "never the values", "test_gqa_padding": "never the values"},
        "not_named": ["h % num_kv_heads", "sqrt(d_out)", "top-left", "whole projection"],
    },
    "gqa_rope_before_head_split": {
        "kind": "mistake",  # rotates the whole d_out vector as one head: pairs (i, i + d_out/2) cross heads
        "cells": {"grouped_query_attention": _gqa(
            ("queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)",
             "queries = apply_rope(self.W_query(x), torch.arange(kept, kept + num_tokens), self.rope_base)\n"
             "        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)"),
            ("keys = self.W_key(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)",
             "keys = apply_rope(self.W_key(x), torch.arange(kept, kept + num_tokens), self.rope_base)\n"
             "        keys = keys.view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)"),
            ("        queries = apply_rope(queries, positions, self.rope_base)\n"
             "        keys = apply_rope(keys, positions, self.rope_base)\n", ""))},
        "fails": {"test_grouped_query_attention": "whole projection", "test_gqa_padding": "whole projection"},
        "not_named": ["h % num_kv_heads", "never the values", "sqrt(d_out)", "top-left"],
    },
    "gqa_scaled_by_d_out": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(("attn_scores / self.head_dim ** 0.5", "attn_scores / self.d_out ** 0.5"))},
        "fails": {"test_grouped_query_attention": "sqrt(d_out)", "test_gqa_padding": "sqrt(d_out)"},
        "not_named": ["h % num_kv_heads", "never the values", "top-left", "whole projection"],
    },
    "gqa_cache_rotated_from_zero": {
        "kind": "mistake",  # new tokens rotated at 0, 1, ... whatever the cache holds
        "cells": {"grouped_query_attention": _gqa(("positions = torch.arange(kept, kept + num_tokens)",
                                                   "positions = torch.arange(num_tokens)"))},
        "fails": {"test_grouped_query_attention": "kept, kept + 1"},
        "not_named": ["never the values", "top-left", "h % num_kv_heads", "sqrt(d_out)"],
    },
    "gqa_mask_top_left": {
        "kind": "mistake",  # the nanoGPT buffer sliced [:T, :T_all]: top-left alignment with a cache
        "cells": {"grouped_query_attention": _gqa(("triu(diagonal=total - num_tokens + 1)", "triu(diagonal=1)"))},
        "fails": {"test_grouped_query_attention": "top-left"},
        "not_named": ["never the values", "h % num_kv_heads", "sqrt(d_out)", "instead of kept"],
    },
    "gqa_cache_holds_repeated_heads": {
        "kind": "mistake",  # repeat before caching: the cache holds num_heads heads
        "cells": {"grouped_query_attention": _gqa(
            ("        if use_cache:\n            if self.cache_k is not None:",
             "        keys = keys.repeat_interleave(self.group_size, dim=1)\n"
             "        values = values.repeat_interleave(self.group_size, dim=1)\n"
             "        if use_cache:\n            if self.cache_k is not None:"),
            ("        keys = keys.repeat_interleave(self.group_size, dim=1)\n"
             "        values = values.repeat_interleave(self.group_size, dim=1)\n"
             "        total", "        total"))},
        "fails": {"test_grouped_query_attention": "num_kv_heads"},
        "not_named": ["never the values", "top-left", "sqrt(d_out)"],
    },
    "gqa_context_check_new_tokens_only": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(("if kept + num_tokens > self.context_length:",
                                                   "if num_tokens > self.context_length:"))},
        "fails": {"test_grouped_query_attention_arguments": "not counted"},
        "not_named": ["`num_kv_heads` is let through", "`head_dim` is let through"],
    },
    "gqa_no_group_check": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(('''        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
''', ""))},
        "fails": {"test_grouped_query_attention_arguments": "`num_kv_heads` is let through"},
        "not_named": ["`head_dim` is let through", "`context_length` is let through", "not counted"],
    },
    "gqa_no_even_head_dim_check": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(('''        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
''', ""))},
        "fails": {"test_grouped_query_attention_arguments": "`head_dim` is let through"},
        "not_named": ["`num_kv_heads` is let through", "`context_length` is let through", "not counted"],
    },
    # Part 4: padding
    "padded_minus_inf_nan": {
        "kind": "mistake",  # a left filler query sees no key: its softmax row is nan
        "cells": {"grouped_query_attention": _gqa(("torch.finfo(attn_scores.dtype).min", "float(\"-inf\")"))},
        "fails": {"test_gqa_padding": "nan"},
        "not_named": ["before out_proj", "causal mask was dropped", "one at a time"],
    },
    "padded_rows_not_zeroed": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(("""        if padding_mask is not None:
            out = out.masked_fill(padding_mask[:, :, None], 0.0)
""", ""))},
        "fails": {"test_gqa_padding": "must be zero"},
        "not_named": ["nan", "before out_proj", "causal mask was dropped"],
    },
    "padded_zeroed_before_out_proj": {
        "kind": "mistake",  # out_proj's bias comes back at the padded rows
        "cells": {"grouped_query_attention": _gqa(
            ("        out = self.out_proj(context)\n"
             "        if padding_mask is not None:\n"
             "            out = out.masked_fill(padding_mask[:, :, None], 0.0)\n",
             "        if padding_mask is not None:\n"
             "            context = context.masked_fill(padding_mask[:, :, None], 0.0)\n"
             "        out = self.out_proj(context)\n"))},
        "fails": {"test_gqa_padding": "before out_proj"},
        "not_named": ["nan", "causal mask was dropped"],
    },
    "padded_mask_replaces_causal": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(("blocked = blocked | padding_mask[:, None, None, :]",
                                                   "blocked = padding_mask[:, None, None, :]"))},
        "fails": {"test_gqa_padding": "causal"},
        "not_named": ["nan", "before out_proj", "h % num_kv_heads"],
    },
    "padded_mask_on_queries": {
        "kind": "mistake",  # blocks the filler rows (queries) instead of the filler columns (keys)
        "cells": {"grouped_query_attention": _gqa(("blocked = blocked | padding_mask[:, None, None, :]",
                                                   "blocked = blocked | padding_mask[:, None, :, None]"))},
        "fails": {"test_gqa_padding": "padded keys"},
        "not_named": ["nan", "before out_proj", "causal mask was dropped"],
    },
    "padded_mask_missing_head_axis": {
        "kind": "mistake",  # (b, 1, T) against (b, h, T, T) scores
        "cells": {"grouped_query_attention": _gqa(("blocked = blocked | padding_mask[:, None, None, :]",
                                                   "blocked = blocked | padding_mask[:, None, :]"))},
        "fails": {"test_gqa_padding": "padding_mask[:, None, None, :]"},
        "not_named": ["nan", "before out_proj", "causal mask was dropped"],
    },
    "padded_no_mask_checks": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(('''        if padding_mask is not None:
            if use_cache:
                raise ValueError("padding_mask cannot be used with use_cache=True")
            if tuple(padding_mask.shape) != (b, num_tokens):
                raise ValueError(f"padding_mask must be {(b, num_tokens)}, got {tuple(padding_mask.shape)}")
''', ""))},
        "fails": {"test_gqa_padding": "`padding_mask` is let through"},
        "not_named": ["nan", "before out_proj"],
    },
    "padded_one_sequence_at_a_time": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(
            ("    def forward(self, x, use_cache=False, padding_mask=None):\n        b, num_tokens, _ = x.shape\n",
             "    def forward(self, x, use_cache=False, padding_mask=None):\n        b, num_tokens, _ = x.shape\n"
             "        if padding_mask is not None and b > 1 and not use_cache and padding_mask.shape == (b, num_tokens):\n"
             "            return torch.cat([self.forward(x[k:k + 1], padding_mask=padding_mask[k:k + 1])\n"
             "                              for k in range(b)])\n"))},
        "fails": {"test_gqa_padding": "one at a time"},
        "not_named": ["nan", "before out_proj", "causal mask was dropped"],
    },
    "padded_library_attention": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _gqa(
            ("        attn_scores = queries @ keys.transpose(2, 3)\n", ""),
            ("        attn_scores = attn_scores.masked_fill(blocked, torch.finfo(attn_scores.dtype).min)\n"
             "        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)\n"
             "        attn_weights = self.dropout(attn_weights)\n"
             "        context = (attn_weights @ values)",
             "        allowed = ~blocked\n"
             "        allowed = allowed | ~allowed.any(-1, keepdim=True)\n"
             "        context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed,\n"
             "                                                 dropout_p=self.dropout.p if self.training else 0.0)\n"
             "        context = context"))},
        "fails": {"test_gqa_padding": "library's attention kernel"},
        "not_named": ["nan", "before out_proj", "causal mask was dropped"],
    },
    # Correct code in other styles: must get full marks
    "correct_nan_to_num_after_softmax": {
        "kind": "correct",  # the nan rows of the weights replaced by 0; masked_fill's backward zeroes their gradients
        "cells": {"grouped_query_attention": _gqa(
            ("torch.finfo(attn_scores.dtype).min", "float(\"-inf\")"),
            ("attn_weights = self.dropout(attn_weights)",
             "attn_weights = torch.nan_to_num(attn_weights, nan=0.0)\n"
             "        attn_weights = self.dropout(attn_weights)"))},
    },
    "correct_hf_llama_style": {
        "kind": "correct",
        "cells": {
            "apply_rope": _ROPE,
            "padding_mask": '''def padding_mask(lengths, num_tokens):
    lengths = torch.as_tensor(lengths)
    if lengths.min() < 0 or lengths.max() > num_tokens:
        raise ValueError(f"every one of lengths must be in 0..{num_tokens}")
    return ~(torch.arange(num_tokens).unsqueeze(0) < lengths.unsqueeze(1))
''',
            # left fillers rotated at their padded positions: RoPE only sees distances, so nothing changes
            "grouped_query_attention": '''def repeat_kv(hidden, n_rep):
    b, n_kv, T, d = hidden.shape
    if n_rep == 1:
        return hidden
    return hidden[:, :, None, :, :].expand(b, n_kv, n_rep, T, d).reshape(b, n_kv * n_rep, T, d)


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False,
                 rope_base=10000.0):
        super().__init__()
        if d_out % num_heads:
            raise ValueError("d_out must be a multiple of num_heads")
        if num_heads % num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        head_dim = d_out // num_heads
        if head_dim % 2:
            raise ValueError(f"head_dim = {head_dim} is odd; RoPE needs it even")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.context_length, self.rope_base = context_length, rope_base
        self.W_query = nn.Linear(d_in, num_heads * head_dim, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.attn_dropout = nn.Dropout(dropout)
        self.reset_cache()

    def reset_cache(self):
        self.k_cache = self.v_cache = None

    def forward(self, x, use_cache=False, padding_mask=None):
        bsz, q_len, _ = x.size()
        if padding_mask is not None and (use_cache or padding_mask.shape != (bsz, q_len)):
            raise ValueError("padding_mask must be (b, T) and cannot be combined with use_cache")
        past = self.k_cache.size(2) if (use_cache and self.k_cache is not None) else 0
        if past + q_len > self.context_length:
            raise ValueError(f"past {past} + {q_len} tokens > context_length {self.context_length}")
        q = self.W_query(x).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        k = self.W_key(x).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        pos = torch.arange(past, past + q_len)
        q, k = apply_rope(q, pos, self.rope_base), apply_rope(k, pos, self.rope_base)
        if use_cache:
            if self.k_cache is not None:
                k, v = torch.cat((self.k_cache, k), dim=-2), torch.cat((self.v_cache, v), dim=-2)
            self.k_cache, self.v_cache = k, v
        n_rep = self.num_heads // self.num_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        kv_len = k.size(2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
        if padding_mask is not None:
            allowed = allowed & ~padding_mask[:, None, None, :]
            # a query that may see nothing (a filler at the start) looks at itself; its output is zeroed below
            allowed = allowed | (~allowed.any(-1, keepdim=True) & torch.eye(q_len, dtype=torch.bool))
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = self.attn_dropout(F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype))
        out = torch.matmul(probs, v).transpose(1, 2).reshape(bsz, q_len, -1)
        out = self.out_proj(out)
        if padding_mask is not None:
            out = torch.where(padding_mask[..., None], torch.zeros_like(out), out)
        return out
''',
        },
    },
    "correct_plain_halves_style": {
        "kind": "correct",
        "cells": {
            "apply_rope": _HALVES,
            "padding_mask": '''def padding_mask(lengths, num_tokens):
    rows = []
    for n in lengths.tolist():
        if not 0 <= n <= num_tokens:
            raise ValueError(f"lengths holds {n}, outside 0..num_tokens={num_tokens}")
        rows.append([j >= n for j in range(num_tokens)])
    return torch.tensor(rows, dtype=torch.bool).reshape(len(rows), num_tokens)
''',
            # real tokens rotated at their own positions 0, 1, ... (a cumulative count of real tokens)
            "grouped_query_attention": _gqa(("positions = torch.arange(kept, kept + num_tokens)",
                                             "positions = torch.arange(kept, kept + num_tokens)\n"
                                             "        if padding_mask is not None:\n"
                                             "            positions = ((~padding_mask).long().cumsum(-1) - 1).clamp(min=0)"
                                             "[:, None, :]"),
                                            ("queries = apply_rope(queries, positions, self.rope_base)\n"
                                             "        keys = apply_rope(keys, positions, self.rope_base)",
                                             "queries = self._rope(queries, positions)\n"
                                             "        keys = self._rope(keys, positions)"),
                                            ("    def reset_cache(self):",
                                             "    def _rope(self, t, positions):\n"
                                             "        if positions.dim() == 1:\n"
                                             "            return apply_rope(t, positions, self.rope_base)\n"
                                             "        return torch.stack([apply_rope(t[k], positions[k, 0], self.rope_base)\n"
                                             "                            for k in range(t.shape[0])])\n\n"
                                             "    def reset_cache(self):")),
        },
    },
}
