"""Submission bank for step 11: correct variants written another way, and common mistakes."""
from bank import edit as _edit


# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (they build the module without
# biases), so only the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
CHEATS_RIDE_ON = "qkv_bias_ignored"




_ROPE = (
    "def apply_rope(x, positions, base=10000.0):\n"
    "    head_dim = x.shape[-1]\n"
    "    if head_dim % 2:\n"
    "        raise ValueError(f'head_dim={head_dim} is odd')\n"
    "    half = head_dim // 2\n"
    "    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)\n"
    "    angles = positions.to(torch.float64)[:, None] * inv_freq\n"
    "    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)\n"
    "    x1, x2 = x[..., :half], x[..., half:]\n"
    "    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)\n"
)

# The answer key's class, written out so that mistakes can change one line of it.
_CLASS = (
    "class GroupedQueryAttention(nn.Module):\n"
    "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False,\n"
    "                 rope_base=10000.0):\n"
    "        super().__init__()\n"
    "        if d_out % num_heads:\n"
    "            raise ValueError(f'd_out ({d_out}) must be divisible by num_heads ({num_heads})')\n"
    "        if num_heads % num_kv_heads:\n"
    "            raise ValueError(f'num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})')\n"
    "        self.head_dim = d_out // num_heads\n"
    "        if self.head_dim % 2:\n"
    "            raise ValueError(f'head_dim ({self.head_dim}) must be even')\n"
    "        self.d_out, self.num_heads, self.num_kv_heads = d_out, num_heads, num_kv_heads\n"
    "        self.context_length, self.rope_base = context_length, rope_base\n"
    "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)\n"
    "        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)\n"
    "        self.out_proj = nn.Linear(d_out, d_out)\n"
    "        self.dropout = nn.Dropout(dropout)\n"
    "        self.cache_keys = self.cache_values = None\n"
    "\n"
    "    def reset_cache(self):\n"
    "        self.cache_keys = self.cache_values = None\n"
    "\n"
    "    def forward(self, x, use_cache=False, padding_mask=None):\n"
    "        b, t, _ = x.shape\n"
    "        if padding_mask is not None and (use_cache or padding_mask.shape != (b, t)):\n"
    "            raise ValueError('padding_mask needs use_cache=False and the shape (b, T)')\n"
    "        kept = self.cache_keys.shape[2] if use_cache and self.cache_keys is not None else 0\n"
    "        if kept + t > self.context_length:\n"
    "            raise ValueError(f'{kept + t} tokens exceed context_length={self.context_length}')\n"
    "        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        k = self.W_key(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)\n"
    "        v = self.W_value(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)\n"
    "        positions = torch.arange(kept, kept + t)\n"
    "        q = apply_rope(q, positions, self.rope_base)\n"
    "        k = apply_rope(k, positions, self.rope_base)\n"
    "        if use_cache:\n"
    "            if kept:\n"
    "                k = torch.cat([self.cache_keys, k], dim=2)\n"
    "                v = torch.cat([self.cache_values, v], dim=2)\n"
    "            self.cache_keys, self.cache_values = k, v\n"
    "        group = self.num_heads // self.num_kv_heads\n"
    "        k = k.repeat_interleave(group, dim=1)\n"
    "        v = v.repeat_interleave(group, dim=1)\n"
    "        blocked = torch.ones(t, k.shape[2], dtype=torch.bool).triu(k.shape[2] - t + 1)\n"
    "        if padding_mask is not None:\n"
    "            blocked = blocked | padding_mask[:, None, None, :]\n"
    "            blocked = blocked & ~blocked.all(-1, keepdim=True)\n"
    "        scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float('-inf'))\n"
    "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
    "        out = self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n"
    "        if padding_mask is not None:\n"
    "            out = torch.where(padding_mask[..., None], 0.0, out)\n"
    "        return out\n"
)

# Silences the visible checks (as a cheat of tests/bank/integrity.py does), so that the hidden checks' message shows.
_SILENCE_CHECKS = (
    "import attention_course.checks as _checks\n"
    "for _name in ('fail', 'expect', 'expect_tensor', 'expect_shape', 'expect_close', 'expect_value_error'):\n"
    "    setattr(_checks, _name, lambda *args, **kwargs: None)\n"
    "    globals()[_name] = lambda *args, **kwargs: None\n"
)

_ROPE_INTERLEAVED = (
    "def apply_rope(x, positions, base=10000.0):\n"
    "    head_dim = x.shape[-1]\n"
    "    if head_dim % 2:\n"
    "        raise ValueError(f'head_dim={head_dim} is odd')\n"
    "    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=x.dtype) / head_dim)\n"
    "    angles = positions.to(x.dtype)[:, None] * inv_freq\n"
    "    cos, sin = angles.cos(), angles.sin()\n"
    "    even, odd = x[..., 0::2], x[..., 1::2]\n"
    "    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)\n"
)

VARIANTS = {
    # complex numbers: pair (x1, x2) as x1 + i x2, multiplied by e^(i angle); the module in a different style
    "complex_rope_expand_sdpa": {
        "kind": "correct",
        "cells": {
            "apply_rope":
                "def apply_rope(x, positions, base=10000.0):\n"
                "    d = x.size(-1)\n"
                "    if d % 2 == 1:\n"
                "        raise ValueError('RoPE needs an even head_dim, got ' + str(d))\n"
                "    freqs = torch.pow(base, -torch.arange(d // 2, dtype=torch.float64) * 2.0 / d)\n"
                "    theta = torch.outer(positions.double(), freqs)\n"
                "    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double())\n"
                "    z = z * torch.polar(torch.ones_like(theta), theta)\n"
                "    return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)\n",
            "grouped_query_attention":
                "class GroupedQueryAttention(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False,\n"
                "                 rope_base=10000.0):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads:\n"
                "            raise ValueError(f'num_heads={num_heads} does not divide d_out={d_out}')\n"
                "        if num_heads % num_kv_heads:\n"
                "            raise ValueError(f'num_kv_heads={num_kv_heads} does not divide num_heads')\n"
                "        if (d_out // num_heads) % 2:\n"
                "            raise ValueError('RoPE needs an even head_dim')\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.W_value = nn.Linear(d_in, d_out // num_heads * num_kv_heads, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out // num_heads * num_kv_heads, bias=qkv_bias)\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.h, self.kv, self.ctx, self.base, self.p = num_heads, num_kv_heads, context_length, rope_base, dropout\n"
                "        self.reset_cache()\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.k_cache, self.v_cache, self.pos = [], [], 0\n"
                "\n"
                "    def forward(self, x, use_cache=False, padding_mask=None):\n"
                "        b, t, _ = x.shape\n"
                "        if padding_mask is not None:\n"
                "            if use_cache:\n"
                "                raise ValueError('padding_mask cannot be used with the cache')\n"
                "            if list(padding_mask.shape) != [b, t]:\n"
                "                raise ValueError(f'padding_mask has shape {list(padding_mask.shape)}, not [{b}, {t}]')\n"
                "        start = self.pos if use_cache else 0\n"
                "        if start + t > self.ctx:\n"
                "            raise ValueError(f'context_length={self.ctx} exceeded')\n"
                "        q = self.W_query(x).reshape(b, t, self.h, -1).permute(0, 2, 1, 3)\n"
                "        k = self.W_key(x).reshape(b, t, self.kv, -1).permute(0, 2, 1, 3)\n"
                "        v = self.W_value(x).reshape(b, t, self.kv, -1).permute(0, 2, 1, 3)\n"
                "        pos = torch.arange(start, start + t)\n"
                "        q, k = apply_rope(q, pos, base=self.base), apply_rope(k, pos, base=self.base)\n"
                "        if use_cache:\n"
                "            self.k_cache.append(k)\n"
                "            self.v_cache.append(v)\n"
                "            self.pos += t\n"
                "            k, v = torch.cat(self.k_cache, 2), torch.cat(self.v_cache, 2)\n"
                "        g = self.h // self.kv\n"
                "        T = k.shape[2]\n"
                "        k = k[:, :, None].expand(b, self.kv, g, T, k.shape[-1]).reshape(b, self.h, T, -1)\n"
                "        v = v[:, :, None].expand(b, self.kv, g, T, v.shape[-1]).reshape(b, self.h, T, -1)\n"
                "        allowed = torch.ones(t, T, dtype=torch.bool).tril(T - t)\n"
                "        if padding_mask is not None:\n"
                "            allowed = allowed & ~padding_mask.view(b, 1, 1, T)\n"
                "        if padding_mask is None:\n"
                "            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,\n"
                "                                                 dropout_p=self.p if self.training else 0.0)\n"
                "        else:  # the lowest float instead of -inf: a row with no key left gets even weights, no nan\n"
                "            scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~allowed, torch.finfo(q.dtype).min)\n"
                "            out = F.dropout(scores.softmax(-1), self.p, self.training) @ v\n"
                "        out = self.out_proj(out.permute(0, 2, 1, 3).reshape(b, t, -1))\n"
                "        if padding_mask is not None:\n"
                "            out = out.masked_fill(padding_mask.unsqueeze(-1), 0)\n"
                "        return out\n",
            "padding_mask":
                "def padding_mask(lengths, num_tokens):\n"
                "    if lengths.min() < 0 or lengths.max() > num_tokens:\n"
                "        raise ValueError('every one of lengths must be in 0..num_tokens')\n"
                "    return lengths[:, None] <= torch.arange(num_tokens)[None, :]\n",
        },
    },
    # cos/sin precomputed once per module as buffers (the module never calls apply_rope), SDPA with enable_gqa
    "cos_sin_cache_enable_gqa": {
        "kind": "correct",
        "cells": {
            "apply_rope":
                "def rotate_half(x):\n"
                "    x1, x2 = x.chunk(2, dim=-1)\n"
                "    return torch.cat((-x2, x1), dim=-1)\n"
                "\n"
                "def apply_rope(x, positions, base=10000.0):\n"
                "    if x.shape[-1] % 2 != 0:\n"
                "        raise ValueError('the last dimension (head_dim) must be even')\n"
                "    inv_freq = 1.0 / (base ** (torch.arange(0, x.shape[-1], 2).float() / x.shape[-1]))\n"
                "    freqs = torch.einsum('t,f->tf', positions.float(), inv_freq)\n"
                "    emb = torch.cat((freqs, freqs), dim=-1)\n"
                "    return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)\n",
            "grouped_query_attention":
                "class GroupedQueryAttention(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False,\n"
                "                 rope_base=10000.0):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads != 0:\n"
                "            raise ValueError('d_out must be divisible by num_heads')\n"
                "        if num_heads % num_kv_heads != 0:\n"
                "            raise ValueError('num_heads must be a multiple of num_kv_heads')\n"
                "        hd = d_out // num_heads\n"
                "        if hd % 2 != 0:\n"
                "            raise ValueError(f'head_dim {hd} is odd')\n"
                "        self.num_heads, self.num_kv_heads, self.head_dim, self.context_length = num_heads, num_kv_heads, hd, context_length\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, num_kv_heads * hd, bias=qkv_bias)\n"
                "        self.W_value = nn.Linear(d_in, num_kv_heads * hd, bias=qkv_bias)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.dropout = dropout\n"
                "        inv_freq = 1.0 / (rope_base ** (torch.arange(0, hd, 2).float() / hd))\n"
                "        freqs = torch.outer(torch.arange(context_length).float(), inv_freq)\n"
                "        emb = torch.cat((freqs, freqs), dim=-1)\n"
                "        self.register_buffer('cos_cached', emb.cos(), persistent=False)\n"
                "        self.register_buffer('sin_cached', emb.sin(), persistent=False)\n"
                "        self.k_cache = self.v_cache = None\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.k_cache = self.v_cache = None\n"
                "\n"
                "    def rope(self, x, start, shift=None):\n"
                "        t = x.shape[-2]\n"
                "        pos = torch.arange(start, start + t)\n"
                "        if shift is not None:  # (B,) fillers before each sequence: its real tokens start at 0\n"
                "            pos = (pos[None, :] - shift[:, None]).clamp(min=0)[:, None]\n"
                "        cos = self.cos_cached[pos].to(x.dtype)\n"
                "        sin = self.sin_cached[pos].to(x.dtype)\n"
                "        return x * cos + rotate_half(x) * sin\n"
                "\n"
                "    def forward(self, x, use_cache=False, padding_mask=None):\n"
                "        B, T, _ = x.shape\n"
                "        if padding_mask is not None and use_cache:\n"
                "            raise ValueError('use_cache=True does not take a padding_mask')\n"
                "        if padding_mask is not None and padding_mask.shape != (B, T):\n"
                "            raise ValueError(f'padding_mask should be ({B}, {T})')\n"
                "        past = self.k_cache.shape[2] if (use_cache and self.k_cache is not None) else 0\n"
                "        if past + T > self.context_length:\n"
                "            raise ValueError(f'{past} + {T} tokens do not fit in context_length {self.context_length}')\n"
                "        q = self.W_query(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)\n"
                "        k = self.W_key(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)\n"
                "        v = self.W_value(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)\n"
                "        shift = None if padding_mask is None else padding_mask.cumprod(-1).sum(-1)\n"
                "        q, k = self.rope(q, past, shift), self.rope(k, past, shift)\n"
                "        if use_cache:\n"
                "            if self.k_cache is not None:\n"
                "                k = torch.cat((self.k_cache, k), dim=2)\n"
                "                v = torch.cat((self.v_cache, v), dim=2)\n"
                "            self.k_cache, self.v_cache = k, v\n"
                "        if padding_mask is None:\n"
                "            from torch.nn.attention.bias import causal_lower_right\n"
                "            mask = causal_lower_right(T, k.shape[2])\n"
                "            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,\n"
                "                                               dropout_p=self.dropout if self.training else 0.0,\n"
                "                                               enable_gqa=True)\n"
                "        else:  # a filler query sees itself: no row is fully blocked\n"
                "            keep = torch.ones(T, T, dtype=torch.bool).tril() & ~padding_mask[:, None, None, :]\n"
                "            mask = keep | (torch.eye(T, dtype=torch.bool) & padding_mask[:, None, :, None])\n"
                "            g = self.num_heads // self.num_kv_heads\n"
                "            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)\n"
                "            w = (q @ k.transpose(-2, -1) / self.head_dim ** 0.5).masked_fill(~mask, float('-inf'))\n"
                "            y = F.dropout(w.softmax(-1), self.dropout, self.training) @ v\n"
                "        y = self.out_proj(y.transpose(1, 2).contiguous().view(B, T, -1))\n"
                "        if padding_mask is not None:\n"
                "            y = torch.where(padding_mask.unsqueeze(-1), torch.zeros_like(y), y)\n"
                "        return y\n",
            "padding_mask":
                "def padding_mask(lengths, num_tokens):\n"
                "    mask = torch.zeros(len(lengths), num_tokens, dtype=torch.bool)\n"
                "    for row, length in enumerate(lengths.tolist()):\n"
                "        if not 0 <= length <= num_tokens:\n"
                "            raise ValueError(f'lengths[{row}] = {length} is outside 0..{num_tokens}')\n"
                "        mask[row, length:] = True\n"
                "    return mask\n",
        },
    },
    # queries grouped per key/value head and einsum against the shared keys; -1e9 instead of -inf
    "grouped_einsum": {
        "kind": "correct",
        "cells": {
            "apply_rope":
                "def apply_rope(x, positions, base=10000.0):\n"
                "    *_, T, D = x.shape\n"
                "    if D % 2:\n"
                "        raise ValueError(f'apply_rope: head_dim must be even, got {D}')\n"
                "    i = torch.arange(D // 2)\n"
                "    theta = positions[:, None] * torch.exp(-2 * i / D * math.log(base))\n"
                "    cos = torch.cos(theta).repeat(1, 2).to(x.dtype)\n"
                "    sin = torch.sin(theta).repeat(1, 2).to(x.dtype)\n"
                "    swapped = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)\n"
                "    return x * cos + swapped * sin\n",
            "grouped_query_attention": _edit(
                _CLASS,
                ("        group = self.num_heads // self.num_kv_heads\n"
                 "        k = k.repeat_interleave(group, dim=1)\n"
                 "        v = v.repeat_interleave(group, dim=1)\n"
                 "        blocked = torch.ones(t, k.shape[2], dtype=torch.bool).triu(k.shape[2] - t + 1)\n"
                 "        if padding_mask is not None:\n"
                 "            blocked = blocked | padding_mask[:, None, None, :]\n"
                 "            blocked = blocked & ~blocked.all(-1, keepdim=True)\n"
                 "        scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float('-inf'))\n"
                 "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
                 "        out = self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n"
                 "        if padding_mask is not None:\n"
                 "            out = torch.where(padding_mask[..., None], 0.0, out)\n"
                 "        return out\n",
                 "        n = k.shape[2]\n"
                 "        q = q.view(b, self.num_kv_heads, self.num_heads // self.num_kv_heads, t, self.head_dim)\n"
                 "        scores = torch.einsum('bkgqd,bknd->bkgqn', q, k) / math.sqrt(self.head_dim)\n"
                 "        future = torch.arange(n)[None, :] > torch.arange(n - t, n)[:, None]\n"
                 "        if padding_mask is not None:\n"
                 "            future = future | padding_mask.view(b, 1, 1, 1, n)\n"
                 "        scores = torch.where(future, torch.tensor(-1e9), scores)\n"
                 "        weights = self.dropout(scores.softmax(-1))\n"
                 "        out = torch.einsum('bkgqn,bknd->bkgqd', weights, v).reshape(b, self.num_heads, t, -1)\n"
                 "        out = self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_out))\n"
                 "        if padding_mask is not None:\n"
                 "            out = out * (~padding_mask).unsqueeze(-1)\n"
                 "        return out\n")),
        },
    },
    # Part 1's interleaved pairs cost Part 1's points only: the module computes the right attention with them.
    "rope_interleaved": {
        "kind": "mistake",
        "cells": {"apply_rope": _ROPE_INTERLEAVED},
        "fails": {"test_apply_rope": "interleaved"},
    },
    "rope_interleaved_unseen": {
        "kind": "mistake",
        "cells": {"apply_rope": _SILENCE_CHECKS + _ROPE_INTERLEAVED},
        "fails": {"test_apply_rope": "interleaved"},
    },
    "rope_without_factor_two": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_ROPE, ("torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim",
                                              "torch.arange(half, dtype=torch.float64) / head_dim"))},
        "fails": {"test_apply_rope": "factor 2"},
    },
    "rope_reversed_unseen": {
        "kind": "mistake",
        "cells": {"apply_rope": _SILENCE_CHECKS + _edit(_ROPE, (
            "[x1 * cos - x2 * sin, x1 * sin + x2 * cos]", "[x1 * cos + x2 * sin, x2 * cos - x1 * sin]"))},
        "fails": {"test_apply_rope": "wrong way"},
    },
    # the same mistake with the visible checks in place: they fail first, and the judge's named mistake comes first;
    # the grouped-query cell, graded on its own, checks its values only once apply_rope is right, and keeps its points
    "rope_reversed": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_ROPE, (
            "[x1 * cos - x2 * sin, x1 * sin + x2 * cos]", "[x1 * cos + x2 * sin, x2 * cos - x1 * sin]"))},
        "fails": {"test_apply_rope": "the rotation goes the wrong way"},
    },
    "rope_positions_ignored": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_ROPE, ("positions.to(torch.float64)[:, None]",
                                              "torch.arange(x.shape[-2], dtype=torch.float64)[:, None]"))},
        "fails": {"test_apply_rope": "positions need not start at 0"},
    },
    "rope_base_ignored_unseen": {
        "kind": "mistake",
        "cells": {"apply_rope": _SILENCE_CHECKS + _edit(_ROPE, ("1.0 / base **", "1.0 / 10000.0 **"))},
        "fails": {"test_apply_rope": "base argument"},
    },
    "rope_no_value_error": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_ROPE, ("    if head_dim % 2:\n        raise ValueError(f'head_dim={head_dim} is "
                                              "odd')\n", ""))},
        "fails": {"test_apply_rope": "instead of a ValueError"},
    },
    "padding_true_keeps": {
        "kind": "mistake",
        "cells": {"padding_mask": "def padding_mask(lengths, num_tokens):\n"
                                  "    if (lengths > num_tokens).any() or (lengths < 0).any():\n"
                                  "        raise ValueError('lengths out of range')\n"
                                  "    return torch.arange(num_tokens)[None, :] < lengths[:, None]\n"},
        "fails": {"test_padding_mask": "True means padding"},
    },
    "padding_off_by_one_unseen": {
        "kind": "mistake",
        "cells": {"padding_mask": _SILENCE_CHECKS + "def padding_mask(lengths, num_tokens):\n"
                                  "    if (lengths > num_tokens).any() or (lengths < 0).any():\n"
                                  "        raise ValueError('lengths out of range')\n"
                                  "    return torch.arange(num_tokens)[None, :] > lengths[:, None]\n"},
        "fails": {"test_padding_mask": "off by one"},
    },
    "padding_no_value_error": {
        "kind": "mistake",
        "cells": {"padding_mask": "def padding_mask(lengths, num_tokens):\n"
                                  "    return torch.arange(num_tokens)[None, :] >= lengths[:, None]\n"},
        "fails": {"test_padding_mask": "did not raise a ValueError"},
    },
    "gqa_positions_not_offset": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _edit(_CLASS, ("torch.arange(kept, kept + t)", "torch.arange(t)"))},
        "fails": {"test_grouped_query_attention": "offset the positions"},
    },
    "gqa_positions_not_offset_unseen": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(_CLASS, ("torch.arange(kept, kept + t)",
                                                                             "torch.arange(t)"))},
        "fails": {"test_grouped_query_attention": "offset the positions"},
    },
    "gqa_rope_on_values": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(_CLASS, (
            "        k = apply_rope(k, positions, self.rope_base)\n",
            "        k = apply_rope(k, positions, self.rope_base)\n        v = apply_rope(v, positions, self.rope_base)\n"))},
        "fails": {"test_grouped_query_attention": "never the values", "test_gqa_padding": "never the values"},
    },
    "gqa_heads_repeated_in_wrong_order": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, ("k.repeat_interleave(group, dim=1)", "k.repeat(1, group, 1, 1)"),
            ("v.repeat_interleave(group, dim=1)", "v.repeat(1, group, 1, 1)"))},
        "fails": {"test_grouped_query_attention": "repeat_interleave", "test_gqa_padding": "repeat_interleave"},
    },
    "gqa_is_causal_top_left": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, (".triu(k.shape[2] - t + 1)", ".triu(1)"))},
        "fails": {"test_grouped_query_attention": "top-left"},
    },
    "gqa_own_interleaved_rope": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _ROPE_INTERLEAVED.replace("apply_rope", "my_rope")
                  + "\n" + _edit(_CLASS, ("q = apply_rope(", "q = my_rope("), ("k = apply_rope(", "k = my_rope("))},
        "fails": {"test_grouped_query_attention": "interleaved", "test_gqa_padding": "interleaved"},
    },
    "rope_angles_in_bfloat16_unseen": {
        "kind": "mistake",
        "cells": {"apply_rope": _SILENCE_CHECKS + _edit(_ROPE, ("dtype=torch.float64) / head_dim", "dtype=x.dtype) / head_dim"),
                                                        ("positions.to(torch.float64)", "positions.to(x.dtype)"))},
        "fails": {"test_apply_rope": "bfloat16"},
    },
    "rope_angles_in_bfloat16": {
        "kind": "mistake",
        "cells": {"apply_rope": _edit(_ROPE, ("dtype=torch.float64) / head_dim", "dtype=x.dtype) / head_dim"),
                                      ("positions.to(torch.float64)", "positions.to(x.dtype)"))},
        "fails": {"test_apply_rope": "float32"},
    },
    # Part 4: the padding, one mistake at a time
    "pad_keys_not_blocked": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _edit(_CLASS, ("            blocked = blocked | padding_mask[:, None, None, :]\n",
                                                            ""))},
        "fails": {"test_gqa_padding": "block the padded keys"},
    },
    "pad_keys_not_blocked_unseen": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, ("            blocked = blocked | padding_mask[:, None, None, :]\n", ""))},
        "fails": {"test_gqa_padding": "attends to the fillers"},
    },
    "pad_queries_blocked_instead": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, ("padding_mask[:, None, None, :]", "padding_mask[:, None, :, None]"))},
        "fails": {"test_gqa_padding": "attends to the fillers"},
    },
    # the lesson's third way out (zero the filler rows with torch.where) is right in the forward pass only
    "pad_nan_rows_replaced_after": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _edit(_CLASS, ("            blocked = blocked & ~blocked.all(-1, keepdim=True)\n",
                                                            ""))},
        "fails": {"test_gqa_padding": "gradients"},
    },
    "pad_nan_rows_replaced_after_unseen": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, ("            blocked = blocked & ~blocked.all(-1, keepdim=True)\n", ""))},
        "fails": {"test_gqa_padding": "0 * nan"},
    },
    "pad_nan_rows_kept_unseen": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, ("            blocked = blocked & ~blocked.all(-1, keepdim=True)\n", ""),
            ("        if padding_mask is not None:\n            out = torch.where(padding_mask[..., None], 0.0, out)\n", ""))},
        "fails": {"test_gqa_padding": "softmax of a row of -inf"},
    },
    "pad_rows_not_zeroed_unseen": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, ("        if padding_mask is not None:\n            out = torch.where(padding_mask[..., None], 0.0, out)\n", ""))},
        "fails": {"test_gqa_padding": "must be zeros"},
    },
    "pad_rows_zeroed_before_out_proj": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _edit(
            _CLASS, ("        out = self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n",
                     "        context = (weights @ v).transpose(1, 2).reshape(b, t, self.d_out)\n"
                     "        if padding_mask is not None:\n"
                     "            context = context.masked_fill(padding_mask[..., None], 0.0)\n"
                     "        out = self.out_proj(context)\n"),
            ("        if padding_mask is not None:\n            out = torch.where(padding_mask[..., None], 0.0, out)\n", ""))},
        "fails": {"test_gqa_padding": "bias"},
    },
    "pad_rows_zeroed_before_out_proj_unseen": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _SILENCE_CHECKS + _edit(
            _CLASS, ("        out = self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n",
                     "        context = (weights @ v).transpose(1, 2).reshape(b, t, self.d_out)\n"
                     "        if padding_mask is not None:\n"
                     "            context = context.masked_fill(padding_mask[..., None], 0.0)\n"
                     "        out = self.out_proj(context)\n"),
            ("        if padding_mask is not None:\n            out = torch.where(padding_mask[..., None], 0.0, out)\n", ""))},
        "fails": {"test_gqa_padding": "zeroed before out_proj"},
    },
    "pad_no_value_error_with_cache": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _edit(_CLASS, ("(use_cache or padding_mask.shape != (b, t))",
                                                            "padding_mask.shape != (b, t)"))},
        "fails": {"test_gqa_padding": "did not raise a ValueError"},
    },
    "gqa_no_num_kv_heads_check": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _edit(_CLASS, (
            "        if num_heads % num_kv_heads:\n"
            "            raise ValueError(f'num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})')\n",
            ""))},
        "fails": {"test_grouped_query_attention_arguments": "did not raise a ValueError"},
    },
    "qkv_bias_ignored": {
        "kind": "mistake",
        "cells": {"grouped_query_attention": _edit(
            _CLASS, *((f"        self.{name} = nn.Linear(d_in, {width}, bias=qkv_bias)\n",
                       f"        self.{name} = nn.Linear(d_in, {width}, bias=False)\n")
                      for name, width in (("W_query", "d_out"), ("W_key", "num_kv_heads * self.head_dim"),
                                          ("W_value", "num_kv_heads * self.head_dim"))))},
        "fails": {"test_grouped_query_attention": "the parameters differ from the contract",
                  "test_gqa_padding": "the parameters differ from the contract"},
    },
}


# Part 4's shortcut: the combined mask handed to SDPA, whose kernel gives a fully blocked row zeros, forward and backward
VARIANTS["pad_through_sdpa"] = {
    "kind": "mistake",
    "cells": {"grouped_query_attention": _edit(
        _CLASS, ("        k = k.repeat_interleave(group, dim=1)\n"
                 "        v = v.repeat_interleave(group, dim=1)\n"
                 "        blocked = torch.ones(t, k.shape[2], dtype=torch.bool).triu(k.shape[2] - t + 1)\n"
                 "        if padding_mask is not None:\n"
                 "            blocked = blocked | padding_mask[:, None, None, :]\n"
                 "            blocked = blocked & ~blocked.all(-1, keepdim=True)\n"
                 "        scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float('-inf'))\n"
                 "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
                 "        out = self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n",
                 "        allowed = torch.ones(t, k.shape[2], dtype=torch.bool).tril(k.shape[2] - t)\n"
                 "        if padding_mask is not None:\n"
                 "            allowed = allowed & ~padding_mask[:, None, None, :]\n"
                 "        context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True,\n"
                 "                                                 dropout_p=self.dropout.p if self.training else 0.0)\n"
                 "        out = self.out_proj(context.transpose(1, 2).reshape(b, t, self.d_out))\n"))},
    "fails": {"test_gqa_padding": "attention kernel"},
}

# Part 4 without its point: each sequence run on its own without its fillers (right values, no mask at all)
VARIANTS["pad_one_sequence_at_a_time"] = {
    "kind": "mistake",
    "cells": {"grouped_query_attention": _edit(
        _CLASS, ("    def forward(self, x, use_cache=False, padding_mask=None):\n"
                 "        b, t, _ = x.shape\n",
                 "    def forward(self, x, use_cache=False, padding_mask=None):\n"
                 "        b, t, _ = x.shape\n"
                 "        if padding_mask is not None and not use_cache and padding_mask.shape == (b, t):\n"
                 "            out = torch.zeros(b, t, self.d_out, dtype=x.dtype)\n"
                 "            for k in range(b):\n"
                 "                real = ~padding_mask[k]\n"
                 "                if real.any():\n"
                 "                    out[k, real] = self(x[k:k + 1, real])[0]\n"
                 "            return out\n"))},
    "fails": {"test_gqa_padding": "one at a time"},
}

# The SDPA shortcut run in a thread, out of the dispatch mode's sight: a watched call may start none
VARIANTS["pad_through_sdpa_in_a_thread"] = {
    "kind": "cheat",
    "cells": {"grouped_query_attention": (
        "import threading\n\n"
        "def _sdpa(*args, **kwargs):\n"
        "    box = []\n"
        "    worker = threading.Thread(target=lambda: box.append(F.scaled_dot_product_attention(*args, **kwargs)))\n"
        "    worker.start()\n"
        "    worker.join()\n"
        "    return box[0]\n\n"
        + VARIANTS["pad_through_sdpa"]["cells"]["grouped_query_attention"].replace(
            "F.scaled_dot_product_attention(", "_sdpa("))},
    "fails": {"test_gqa_padding": "started a thread"},
}

# GQA without its saving: the key/value heads repeated to num_heads before they are cached (right values, a cache
# num_heads / num_kv_heads times larger)
VARIANTS["gqa_cache_holds_repeated_heads"] = {
    "kind": "mistake",
    "cells": {"grouped_query_attention": _edit(
        _CLASS, ("        if use_cache:\n"
                 "            if kept:\n",
                 "        group = self.num_heads // self.num_kv_heads\n"
                 "        k = k.repeat_interleave(group, dim=1)\n"
                 "        v = v.repeat_interleave(group, dim=1)\n"
                 "        if use_cache:\n"
                 "            if kept:\n"),
        ("        group = self.num_heads // self.num_kv_heads\n"
         "        k = k.repeat_interleave(group, dim=1)\n"
         "        v = v.repeat_interleave(group, dim=1)\n"
         "        blocked", "        blocked"))},
    "fails": {"test_grouped_query_attention": "num_kv_heads"},
}

# Part 4's shortcut behind a switch: SDPA masks when gradients are on (no nan to understand), numpy computes the
# attention when they are off, where no aten operation shows
VARIANTS["pad_sdpa_with_grad_numpy_without"] = {
    "kind": "mistake",
    "cells": {"grouped_query_attention": _edit(
        _CLASS, ("        scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float('-inf'))\n"
                 "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
                 "        out = self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n",
                 "        if padding_mask is None:\n"
                 "            scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float('-inf'))\n"
                 "            weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
                 "            context = weights @ v\n"
                 "        elif torch.is_grad_enabled():\n"
                 "            allowed = ~(torch.ones(t, t, dtype=torch.bool).triu(1) | padding_mask[:, None, None, :])\n"
                 "            context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,\n"
                 "                                                     dropout_p=self.dropout.p if self.training else 0.0)\n"
                 "        else:\n"
                 "            import numpy as np\n"
                 "            qn, kn, vn = q.double().numpy(), k.double().numpy(), v.double().numpy()\n"
                 "            s = qn @ kn.swapaxes(-1, -2) / np.sqrt(self.head_dim)\n"
                 "            s = np.where(blocked.numpy(), -np.inf, s)\n"
                 "            s = np.exp(s - s.max(-1, keepdims=True))\n"
                 "            context = torch.from_numpy(s / s.sum(-1, keepdims=True) @ vn).to(q.dtype)\n"
                 "        out = self.out_proj(context.transpose(1, 2).reshape(b, t, self.d_out))\n"))},
    "fails": {"test_gqa_padding": "attention kernel"},
}

# The same switch with torch on both sides: SDPA with gradients, the task's own masking without
VARIANTS["pad_sdpa_with_grad_only"] = {
    "kind": "mistake",
    "cells": {"grouped_query_attention": _edit(
        _CLASS, ("        scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float('-inf'))\n"
                 "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
                 "        out = self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n",
                 "        if padding_mask is not None and torch.is_grad_enabled():\n"
                 "            allowed = ~(torch.ones(t, t, dtype=torch.bool).triu(1) | padding_mask[:, None, None, :])\n"
                 "            context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,\n"
                 "                                                     dropout_p=self.dropout.p if self.training else 0.0)\n"
                 "        else:\n"
                 "            scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float('-inf'))\n"
                 "            context = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1)) @ v\n"
                 "        out = self.out_proj(context.transpose(1, 2).reshape(b, t, self.d_out))\n"))},
    "fails": {"test_gqa_padding": "attention kernel"},
}


# Part 4 is the transfer part: the lesson's way out (a fully blocked row's output replaced afterwards) and the SDPA
# shortcut fail it; a large negative fill with a filler seeing nothing, and a filler seeing itself, both pass
PROOF = {"test_gqa_padding": {"lesson": ["pad_nan_rows_replaced_after"],
                              "shortcut": ["pad_through_sdpa", "pad_sdpa_with_grad_only",
                                           "pad_sdpa_with_grad_numpy_without"],
                              "correct": ["grouped_einsum", "cos_sin_cache_enable_gqa", "complex_rope_expand_sdpa"]}}
