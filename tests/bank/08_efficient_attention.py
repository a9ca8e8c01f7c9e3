"""Submission bank for step 08: correct variants written another way, and common mistakes."""

# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (their input is as long as
# context_length), so only the hidden checks can take its points, and a cheat that skips or silences them must not
# keep them.
CHEATS_RIDE_ON = "combined_mask_not_sliced"

# Carried over from step 07: the exercise gives step 07's MultiHeadAttention (and the lesson recaps it), and the
# answer keys of Parts 1 and 4 keep its checks, layers and attention lines unchanged; `with torch.no_grad():` is
# step 03's.
SHARED_LINES = [
    "with torch.no_grad():",
    "if d_out % num_heads != 0:",
    'raise ValueError(f"d_out ({d_out}) must be divisible by num_heads ({num_heads})")',
    "self.head_dim = d_out // num_heads",
    "self.context_length = context_length",
    "if num_tokens > self.context_length:",
    'raise ValueError(f"{num_tokens} tokens exceed context_length ({self.context_length})")',
    "self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.out_proj = nn.Linear(d_out, d_out)",
    "self.dropout = nn.Dropout(dropout)",
    'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))',
    "attn_scores = queries @ keys.transpose(-2, -1)",
    'attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))',
    "attn_weights = self.dropout(torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1))",
    "context_vecs = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)",
    "return self.out_proj(context_vecs)",
    # AttentionBase, given in the notebook's locked cell: its length check, called as step 07's class calls it
    "self.check_length(x)",
]

_PADDED_FLOAT_MASK = (
    "def padded_sdpa_attention(queries, keys, values, is_padding, causal=True):\n"
    "    b, h, t, d = queries.shape\n"
    "    if is_padding.shape != (b, t) or is_padding.dtype is not torch.bool:\n"
    "        raise ValueError('is_padding must be a (b, T) bool tensor')\n"
    "    blocked = is_padding[:, None, None, :].expand(b, 1, t, t)\n"
    "    if causal:\n"
    "        blocked = blocked | torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)\n"
    "    lonely = blocked.all(dim=-1, keepdim=True)\n"
    "    blocked = blocked & ~(lonely & torch.eye(t, dtype=torch.bool))\n"
    "    bias = torch.zeros(b, 1, t, t, dtype=queries.dtype).masked_fill(blocked, float('-inf'))\n"
    "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias)\n"
)

_PADDED_WHERE = (
    "from torch.nn.functional import scaled_dot_product_attention as sdpa\n"
    "\n"
    "def padded_sdpa_attention(queries, keys, values, is_padding, causal=True):\n"
    "    if not torch.is_tensor(is_padding) or is_padding.dtype != torch.bool or is_padding.dim() != 2 \\\n"
    "            or is_padding.shape[0] != queries.shape[0] or is_padding.shape[1] != queries.shape[2]:\n"
    "        raise ValueError(f'bad is_padding: {getattr(is_padding, \"shape\", None)}')\n"
    "    t = queries.shape[2]\n"
    "    real = torch.logical_not(is_padding).unsqueeze(1).unsqueeze(1).repeat(1, 1, t, 1)  # (b, 1, T, T)\n"
    "    if causal:\n"
    "        real = torch.logical_and(real, torch.arange(t)[None, :] <= torch.arange(t)[:, None])\n"
    "    diagonal = torch.eye(t, dtype=torch.bool).expand_as(real)\n"
    "    mask = torch.where(real.any(dim=3, keepdim=True), real, diagonal)\n"
    "    bias = torch.where(mask, 0.0, -1e9).to(queries.dtype)  # a large negative number instead of -inf\n"
    "    return sdpa(queries, keys, values, attn_mask=bias)\n"
)

_PADDED_KEY = (
    "def padded_sdpa_attention(queries, keys, values, is_padding, causal=True):\n"
    "    b, _, num_tokens, _ = queries.shape\n"
    "    if is_padding.dtype != torch.bool or tuple(is_padding.shape) != (b, num_tokens):\n"
    "        raise ValueError('is_padding must be a bool tensor of shape (b, T)')\n"
    "    allowed = ~is_padding.view(b, 1, 1, num_tokens)\n"
    "    if causal:\n"
    "        allowed = allowed & torch.ones(num_tokens, num_tokens, dtype=torch.bool).tril()\n"
    "    no_key = ~allowed.any(dim=-1, keepdim=True)\n"
    "    allowed = allowed | (no_key & torch.eye(num_tokens, dtype=torch.bool))\n"
    "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)\n"
)


def _padded_with(old, new):
    assert old in _PADDED_KEY, old
    return _PADDED_KEY.replace(old, new)


# Part 1's class with a correct __init__ and a forward that computes the wrong thing or crashes: Part 2 builds one
# (combined_from_split must return a MultiHeadAttentionCombinedQKV), but is judged on the weights it copies and the
# sizes it passes, so it keeps its points.
_COMBINED_INIT = (
    "class MultiHeadAttentionCombinedQKV(nn.Module):\n"
    "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
    "        super().__init__()\n"
    "        if d_out % num_heads != 0:\n"
    "            raise ValueError('d_out must be divisible by num_heads')\n"
    "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
    "        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)\n"
    "        self.out_proj = nn.Linear(d_out, d_out)\n"
    "        self.dropout = nn.Dropout(dropout)\n"
    "        self.register_buffer('mask', torch.ones(context_length, context_length).triu(1).bool())\n"
    "\n"
)

_COMBINED_FROM_SPLIT_LOAD = (
    "def combined_from_split(mha):\n"
    "    bias = mha.W_query.bias is not None\n"
    "    fused = MultiHeadAttentionCombinedQKV(mha.W_query.in_features, mha.d_out, mha.context_length,\n"
    "                                          mha.dropout.p, mha.num_heads, qkv_bias=bias)\n"
    "    state = {'out_proj.weight': mha.out_proj.weight.detach().clone(),\n"
    "             'out_proj.bias': mha.out_proj.bias.detach().clone(),\n"
    "             'qkv.weight': torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]).detach()}\n"
    "    if bias:\n"
    "        state['qkv.bias'] = torch.cat([mha.W_query.bias, mha.W_key.bias, mha.W_value.bias]).detach()\n"
    "    fused.load_state_dict(state, strict=False)\n"
    "    return fused\n"
)

# Silences the visible checks (as a cheat of tests/bank/integrity.py does), so that the hidden checks' message shows.
_SILENCE_CHECKS = (
    "import attention_course.checks as _checks\n"
    "for _name in ('fail', 'expect', 'expect_tensor', 'expect_shape', 'expect_close', 'expect_value_error'):\n"
    "    setattr(_checks, _name, lambda *args, **kwargs: None)\n"
    "    globals()[_name] = lambda *args, **kwargs: None\n"
)

_SDPA_INVERTED_MASK = (
    "class MultiHeadAttentionSDPA(nn.Module):\n"
    "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
    "        super().__init__()\n"
    "        if d_out % num_heads != 0:\n"
    "            raise ValueError('d_out must be divisible by num_heads')\n"
    "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
    "        self.dropout_p = dropout\n"
    "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.out_proj = nn.Linear(d_out, d_out)\n"
    "        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length,\n"
    "                                                         dtype=torch.bool), 1))\n"
    "\n"
    "    def forward(self, x):\n"
    "        b, t, _ = x.shape\n"
    "        if t > self.context_length:\n"
    "            raise ValueError('more tokens than context_length')\n"
    "        q, k, v = (layer(x).view(b, t, self.num_heads, -1).transpose(1, 2)\n"
    "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
    "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:t, :t],\n"
    "                                             dropout_p=self.dropout_p if self.training else 0.0)\n"
    "        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_out))\n"
)

VARIANTS = {
    "padded_float_mask": {"kind": "correct", "cells": {"padded_sdpa_attention": _PADDED_FLOAT_MASK}},
    # the shortcut: SDPA's own causal flag, and no padding mask at all
    "padded_is_causal_only": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": (
            "def padded_sdpa_attention(queries, keys, values, is_padding, causal=True):\n"
            "    b, _, t, _ = queries.shape\n"
            "    if not isinstance(is_padding, torch.Tensor) or is_padding.dtype != torch.bool \\\n"
            "            or tuple(is_padding.shape) != (b, t):\n"
            "        raise ValueError('is_padding must be a (b, T) bool tensor')\n"
            "    return F.scaled_dot_product_attention(queries, keys, values, is_causal=causal)\n")},
        "fails": {"test_padded_sdpa_attention": "block padding keys", "test_padded_sdpa_attention_left": "padding"},
    },
    "padded_where_large_negative": {"kind": "correct", "cells": {"padded_sdpa_attention": _PADDED_WHERE}},
    "padded_mask_not_inverted": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded_with("allowed = ~is_padding.view(", "allowed = is_padding.view(")},
        "fails": {"test_padded_sdpa_attention": "True = may attend",
                  "test_padded_sdpa_attention_left": "skip the padding keys"},
    },
    "padded_causal_ignored": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded_with("    if causal:\n", "    if False:\n")},
        "fails": {"test_padded_sdpa_attention": "the future", "test_padded_sdpa_attention_left": "the future"},
    },
    "padded_mask_on_queries": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded_with("~is_padding.view(b, 1, 1, num_tokens)",
                                                        "~is_padding.view(b, 1, num_tokens, 1)")},
        "fails": {"test_padded_sdpa_attention": "may attend", "test_padded_sdpa_attention_left": "skip the padding keys"},
    },
    "padded_empty_rows_left_alone": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded_with(
            "    allowed = allowed | (no_key & torch.eye(num_tokens, dtype=torch.bool))\n", "")},
        "fails": {"test_padded_sdpa_attention_left": "itself alone"},
    },
    "padded_by_hand_softmax": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded_with(
            "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)\n",
            "    scores = (queries @ keys.mT / queries.shape[-1] ** 0.5).masked_fill(~allowed, float('-inf'))\n"
            "    return torch.softmax(scores, dim=-1) @ values\n")},
        "fails": {"test_padded_sdpa_attention": "scaled_dot_product_attention",
                  "test_padded_sdpa_attention_left": "scaled_dot_product_attention"},
    },
    "padded_throwaway_sdpa_call": {  # SDPA called for show, the mask and softmax written out: what runs decides
        "kind": "cheat",
        "cells": {"padded_sdpa_attention": _padded_with(
            "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)\n",
            "    F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)\n"
            "    scores = (queries @ keys.mT / queries.shape[-1] ** 0.5).masked_fill(~allowed, float('-inf'))\n"
            "    return torch.softmax(scores, dim=-1) @ values\n")},
        "fails": {"test_padded_sdpa_attention": "besides F.scaled_dot_product_attention",
                  "test_padded_sdpa_attention_left": "besides F.scaled_dot_product_attention"},
    },
    "sdpa_throwaway_call": {
        "kind": "cheat",
        "cells": {"sdpa_attention":
                  "class MultiHeadAttentionSDPA(MultiHeadAttention):\n"
                  "    def forward(self, x):\n"
                  "        self.check_length(x)\n"
                  "        q, k, v = (self.split_heads(layer(x)) for layer in (self.W_query, self.W_key, self.W_value))\n"
                  "        F.scaled_dot_product_attention(q, k, v, is_causal=True)  # for show\n"
                  "        t = x.shape[1]\n"
                  "        future = torch.ones(t, t, dtype=torch.bool).triu(1)\n"
                  "        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(future, float('-inf'))\n"
                  "        weights = self.dropout(torch.softmax(scores, dim=-1))\n"
                  "        return self.out_proj(self.merge_heads(weights @ v))\n"},
        "fails": {"test_sdpa_attention": "besides F.scaled_dot_product_attention"},
    },
    "sdpa_under_another_name": {  # SDPA reached under another name: what runs is judged, not what is spelled
        "kind": "correct",
        "cells": {"sdpa_attention":
                  "class MultiHeadAttentionSDPA(MultiHeadAttention):\n"
                  "    def forward(self, x):\n"
                  "        self.check_length(x)\n"
                  "        q, k, v = (self.split_heads(layer(x)) for layer in (self.W_query, self.W_key, self.W_value))\n"
                  "        attend = getattr(torch.nn.functional, 'scaled_dot_product_attention')\n"
                  "        out = attend(q, k, v, dropout_p=self.dropout.p if self.training else 0.0, is_causal=True)\n"
                  "        return self.out_proj(self.merge_heads(out))\n"},
    },
    "chunk_where_tril_mask": {
        "kind": "correct",
        "cells": {
            "combined_qkv":
                "class MultiHeadAttentionCombinedQKV(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads:\n"
                "            raise ValueError('d_out must be a multiple of num_heads')\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)\n"
                "        self.attn_dropout = nn.Dropout(dropout)\n"
                "        self.heads, self.context_length = num_heads, context_length\n"
                "\n"
                "    def forward(self, x):\n"
                "        b, t, _ = x.shape\n"
                "        if t > self.context_length:\n"
                "            raise ValueError('input longer than context_length')\n"
                "        q, k, v = (z.reshape(b, t, self.heads, -1).permute(0, 2, 1, 3)\n"
                "                   for z in self.qkv(x).chunk(3, dim=-1))\n"
                "        allowed = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()\n"
                "        scores = torch.where(allowed, q @ k.mT / q.shape[-1] ** 0.5, torch.tensor(-1e9))\n"
                "        weights = self.attn_dropout(F.softmax(scores, dim=-1))\n"
                "        return self.out_proj((weights @ v).permute(0, 2, 1, 3).reshape(b, t, -1))\n",
            "combined_from_split":
                "def combined_from_split(mha):\n"
                "    has_bias = mha.W_query.bias is not None\n"
                "    new = MultiHeadAttentionCombinedQKV(mha.W_query.in_features, mha.d_out, mha.context_length,\n"
                "                                        mha.dropout.p, mha.num_heads, qkv_bias=has_bias)\n"
                "    parts = [mha.W_query, mha.W_key, mha.W_value]\n"
                "    state = {'qkv.weight': torch.cat([p.weight.detach() for p in parts])}\n"
                "    if has_bias:\n"
                "        state['qkv.bias'] = torch.cat([p.bias.detach() for p in parts])\n"
                "    state.update({'out_proj.' + k: v for k, v in mha.out_proj.state_dict().items()})\n"
                "    new.load_state_dict(state, strict=False)\n"
                "    return new\n",
            "sdpa_causal_bool_mask":
                "def sdpa_causal_bool_mask(num_tokens):\n"
                "    positions = torch.arange(num_tokens)\n"
                "    return positions[:, None] >= positions[None, :]\n",
            "sdpa_attention":
                "class MultiHeadAttentionSDPA(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads != 0:\n"
                "            raise ValueError(f'num_heads={num_heads} does not divide d_out={d_out}')\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.dropout = nn.Dropout(dropout)\n"
                "        self.num_heads, self.context_length = num_heads, context_length\n"
                "\n"
                "    def forward(self, x):\n"
                "        b, t, d = x.shape\n"
                "        if t > self.context_length:\n"
                "            raise ValueError(f'{t} tokens but context_length is {self.context_length}')\n"
                "        def heads(y):\n"
                "            return y.reshape(b, t, self.num_heads, -1).permute(0, 2, 1, 3)\n"
                "        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))\n"
                "        out = F.scaled_dot_product_attention(heads(self.W_query(x)), heads(self.W_key(x)),\n"
                "                                             heads(self.W_value(x)), attn_mask=mask,\n"
                "                                             dropout_p=self.dropout.p if self.training else 0.0)\n"
                "        return self.out_proj(out.permute(0, 2, 1, 3).reshape(b, t, -1))\n",
        },
    },
    "split_einsum_imported_sdpa": {
        "kind": "correct",
        "cells": {
            "combined_qkv":
                "class MultiHeadAttentionCombinedQKV(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads != 0:\n"
                "            raise ValueError(f'd_out={d_out} is not divisible by num_heads={num_heads}')\n"
                "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                "        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.dropout = nn.Dropout(dropout)\n"
                "        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), 1),\n"
                "                             persistent=False)\n"
                "\n"
                "    def forward(self, x):\n"
                "        b, t, _ = x.shape\n"
                "        if t > self.context_length:\n"
                "            raise ValueError(f'sequence of {t} tokens is longer than context_length')\n"
                "        q, k, v = self.qkv(x).split(self.d_out, dim=-1)\n"
                "        q, k, v = (z.view(b, t, self.num_heads, -1) for z in (q, k, v))\n"
                "        scores = torch.einsum('bqhd,bkhd->bhqk', q, k) / q.shape[-1] ** 0.5\n"
                "        scores = scores.masked_fill(self.mask[:t, :t].bool(), -torch.inf)\n"
                "        weights = self.dropout(scores.softmax(dim=-1))\n"
                "        return self.out_proj(torch.einsum('bhqk,bkhd->bqhd', weights, v).reshape(b, t, self.d_out))\n",
            "combined_from_split":
                "import copy\n"
                "\n"
                "def combined_from_split(mha):\n"
                "    d_in = mha.W_query.weight.shape[1]\n"
                "    bias = mha.W_query.bias is not None\n"
                "    fused = MultiHeadAttentionCombinedQKV(d_in, mha.d_out, mha.context_length, mha.dropout.p,\n"
                "                                          mha.num_heads, bias)\n"
                "    fused.qkv.weight = nn.Parameter(torch.vstack([mha.W_query.weight, mha.W_key.weight,\n"
                "                                                   mha.W_value.weight]).detach().clone())\n"
                "    if bias:\n"
                "        fused.qkv.bias = nn.Parameter(torch.hstack([mha.W_query.bias, mha.W_key.bias,\n"
                "                                                     mha.W_value.bias]).detach().clone())\n"
                "    fused.out_proj = copy.deepcopy(mha.out_proj)\n"
                "    return fused\n",
            "sdpa_causal_bool_mask":
                "def sdpa_causal_bool_mask(num_tokens):\n"
                "    return torch.tril(torch.ones(num_tokens, num_tokens)).bool()\n",
            "sdpa_attention":
                "from torch.nn.functional import scaled_dot_product_attention\n"
                "\n"
                "class MultiHeadAttentionSDPA(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads:\n"
                "            raise ValueError('d_out must be divisible by num_heads')\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.p, self.h, self.context_length = dropout, num_heads, context_length\n"
                "\n"
                "    def forward(self, x):\n"
                "        b, t, _ = x.shape\n"
                "        if t > self.context_length:\n"
                "            raise ValueError('too many tokens for context_length')\n"
                "        q, k, v = (layer(x).unflatten(-1, (self.h, -1)).transpose(1, 2)\n"
                "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
                "        out = scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0,\n"
                "                                           is_causal=True, scale=q.shape[-1] ** -0.5)\n"
                "        return self.out_proj(out.transpose(1, 2).flatten(2))\n",
        },
    },
    "qkv_split_keys_first": {
        "kind": "mistake",
        "cells": {"combined_qkv":
                  "class MultiHeadAttentionCombinedQKV(nn.Module):\n"
                  "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                  "        super().__init__()\n"
                  "        if d_out % num_heads != 0:\n"
                  "            raise ValueError('d_out must be divisible by num_heads')\n"
                  "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                  "        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)\n"
                  "        self.out_proj = nn.Linear(d_out, d_out)\n"
                  "        self.dropout = nn.Dropout(dropout)\n"
                  "        self.register_buffer('mask', torch.ones(context_length, context_length).triu(1).bool())\n"
                  "\n"
                  "    def forward(self, x):\n"
                  "        b, t, _ = x.shape\n"
                  "        if t > self.context_length:\n"
                  "            raise ValueError('more tokens than context_length')\n"
                  "        k, q, v = (z.view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                  "                   for z in self.qkv(x).chunk(3, dim=-1))\n"
                  "        scores = (q @ k.mT / q.shape[-1] ** 0.5).masked_fill(self.mask[:t, :t], float('-inf'))\n"
                  "        weights = self.dropout(torch.softmax(scores, dim=-1))\n"
                  "        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n"},
        "fails": {"test_combined_qkv": "read as keys, queries, values"},
    },
    "fused_weights_cat_dim1": {
        "kind": "mistake",
        "cells": {"combined_from_split":
                  "def combined_from_split(mha):\n"
                  "    combined = MultiHeadAttentionCombinedQKV(mha.W_query.in_features, mha.d_out, mha.context_length,\n"
                  "                                             mha.dropout.p, mha.num_heads,\n"
                  "                                             qkv_bias=mha.W_query.bias is not None)\n"
                  "    layers = (mha.W_query, mha.W_key, mha.W_value)\n"
                  "    with torch.no_grad():\n"
                  "        combined.qkv.weight.copy_(torch.cat([layer.weight for layer in layers], dim=1))\n"
                  "        if combined.qkv.bias is not None:\n"
                  "            combined.qkv.bias.copy_(torch.cat([layer.bias for layer in layers]))\n"
                  "        combined.out_proj.load_state_dict(mha.out_proj.state_dict())\n"
                  "    return combined\n"},
        "fails": {"test_combined_from_split": "3 * d_out rows"},
    },
    "fused_weights_side_by_side_parameter": {
        "kind": "mistake",
        "cells": {"combined_from_split":
                  "def combined_from_split(mha):\n"
                  "    combined = MultiHeadAttentionCombinedQKV(mha.W_query.in_features, mha.d_out, mha.context_length,\n"
                  "                                             mha.dropout.p, mha.num_heads,\n"
                  "                                             qkv_bias=mha.W_query.bias is not None)\n"
                  "    layers = (mha.W_query, mha.W_key, mha.W_value)\n"
                  "    combined.qkv.weight = nn.Parameter(torch.cat([l.weight.detach() for l in layers], dim=-1))\n"
                  "    if combined.qkv.bias is not None:\n"
                  "        combined.qkv.bias = nn.Parameter(torch.cat([l.bias.detach() for l in layers]))\n"
                  "    combined.out_proj.load_state_dict(mha.out_proj.state_dict())\n"
                  "    return combined\n"},
        "fails": {"test_combined_from_split": "not side by side"},
    },
    "mask_in_blocked_convention": {
        "kind": "mistake",
        "cells": {"sdpa_causal_bool_mask":
                  "def sdpa_causal_bool_mask(num_tokens):\n"
                  "    return torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)\n"},
        "fails": {"test_sdpa_causal_bool_mask": "opposite of step 04"},
    },
    # Step 4's mask (True = blocked) passed to SDPA, which reads True as "may attend".
    "sdpa_inverted_bool_mask": {
        "kind": "mistake",
        "cells": {"sdpa_attention": _SDPA_INVERTED_MASK},
        "fails": {"test_sdpa_attention": "True where attention is blocked"},
    },
    # The same with the visible checks silenced: the hidden checks name the convention too.
    "sdpa_inverted_bool_mask_checks_silenced": {
        "kind": "cheat",
        "cells": {"sdpa_attention": _SILENCE_CHECKS + _SDPA_INVERTED_MASK},
        "fails": {"test_sdpa_attention": "True = may attend"},
    },
    "sdpa_is_causal_forgotten": {
        "kind": "mistake",
        "cells": {"sdpa_attention":
                  "class MultiHeadAttentionSDPA(nn.Module):\n"
                  "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                  "        super().__init__()\n"
                  "        if d_out % num_heads != 0:\n"
                  "            raise ValueError('d_out must be divisible by num_heads')\n"
                  "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                  "        self.dropout_p = dropout\n"
                  "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.out_proj = nn.Linear(d_out, d_out)\n"
                  "\n"
                  "    def forward(self, x):\n"
                  "        b, t, _ = x.shape\n"
                  "        if t > self.context_length:\n"
                  "            raise ValueError('more tokens than context_length')\n"
                  "        q, k, v = (layer(x).view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                  "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
                  "        out = F.scaled_dot_product_attention(q, k, v,\n"
                  "                                             dropout_p=self.dropout_p if self.training else 0.0)\n"
                  "        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_out))\n"},
        "fails": {"test_sdpa_attention": "future leaks"},
    },
    "sdpa_dropout_in_eval": {
        "kind": "mistake",
        "cells": {"sdpa_attention":
                  "class MultiHeadAttentionSDPA(nn.Module):\n"
                  "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                  "        super().__init__()\n"
                  "        if d_out % num_heads != 0:\n"
                  "            raise ValueError('d_out must be divisible by num_heads')\n"
                  "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                  "        self.dropout_p = dropout\n"
                  "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.out_proj = nn.Linear(d_out, d_out)\n"
                  "\n"
                  "    def forward(self, x):\n"
                  "        b, t, _ = x.shape\n"
                  "        if t > self.context_length:\n"
                  "            raise ValueError('more tokens than context_length')\n"
                  "        q, k, v = (layer(x).view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                  "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
                  "        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout_p, is_causal=True)\n"
                  "        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_out))\n"},
        "fails": {"test_sdpa_attention": "even in eval mode"},
    },
    "sdpa_scaled_twice": {
        "kind": "mistake",
        "cells": {"sdpa_attention":
                  "class MultiHeadAttentionSDPA(nn.Module):\n"
                  "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                  "        super().__init__()\n"
                  "        if d_out % num_heads != 0:\n"
                  "            raise ValueError('d_out must be divisible by num_heads')\n"
                  "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                  "        self.head_dim = d_out // num_heads\n"
                  "        self.dropout_p = dropout\n"
                  "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.out_proj = nn.Linear(d_out, d_out)\n"
                  "\n"
                  "    def forward(self, x):\n"
                  "        b, t, _ = x.shape\n"
                  "        if t > self.context_length:\n"
                  "            raise ValueError('more tokens than context_length')\n"
                  "        q, k, v = (layer(x).view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                  "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
                  "        q = q / self.head_dim ** 0.5\n"
                  "        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,\n"
                  "                                             dropout_p=self.dropout_p if self.training else 0.0)\n"
                  "        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_out))\n"},
        "fails": {"test_sdpa_attention": "SDPA divides the scores again"},
    },
    "sdpa_without_context_length_check": {
        "kind": "mistake",
        "cells": {"sdpa_attention":
                  "class MultiHeadAttentionSDPA(nn.Module):\n"
                  "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                  "        super().__init__()\n"
                  "        if d_out % num_heads != 0:\n"
                  "            raise ValueError('d_out must be divisible by num_heads')\n"
                  "        self.d_out, self.num_heads = d_out, num_heads\n"
                  "        self.dropout_p = dropout\n"
                  "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                  "        self.out_proj = nn.Linear(d_out, d_out)\n"
                  "\n"
                  "    def forward(self, x):\n"
                  "        b, t, _ = x.shape\n"
                  "        q, k, v = (layer(x).view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                  "                   for layer in (self.W_query, self.W_key, self.W_value))\n"
                  "        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,\n"
                  "                                             dropout_p=self.dropout_p if self.training else 0.0)\n"
                  "        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_out))\n"},
        "fails": {"test_sdpa_attention": "context_length"},
    },
    "sdpa_manual_attention": {
        "kind": "mistake",
        "cells": {"sdpa_attention":
                  "class MultiHeadAttentionSDPA(MultiHeadAttention):\n"
                  "    pass\n"},
        "fails": {"test_sdpa_attention": "one F.scaled_dot_product_attention call"},
    },
    "combined_mask_not_sliced": {
        "kind": "mistake",
        "cells": {"combined_qkv":
                  "class MultiHeadAttentionCombinedQKV(nn.Module):\n"
                  "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                  "        super().__init__()\n"
                  "        if d_out % num_heads != 0:\n"
                  "            raise ValueError('d_out must be divisible by num_heads')\n"
                  "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                  "        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)\n"
                  "        self.out_proj = nn.Linear(d_out, d_out)\n"
                  "        self.dropout = nn.Dropout(dropout)\n"
                  "        self.register_buffer('mask', torch.ones(context_length, context_length).triu(1).bool())\n"
                  "\n"
                  "    def forward(self, x):\n"
                  "        b, t, _ = x.shape\n"
                  "        if t > self.context_length:\n"
                  "            raise ValueError('more tokens than context_length')\n"
                  "        q, k, v = (z.view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                  "                   for z in self.qkv(x).chunk(3, dim=-1))\n"
                  "        scores = (q @ k.mT / q.shape[-1] ** 0.5).masked_fill(self.mask, float('-inf'))\n"
                  "        weights = self.dropout(torch.softmax(scores, dim=-1))\n"
                  "        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n"},
        "fails": {"test_combined_qkv": "slice it to the number of tokens"},
    },
    "part1_wrong_part2_right": {
        "kind": "mistake",
        "cells": {
            "combined_qkv": _COMBINED_INIT +
                "    def forward(self, x):\n"
                "        b, t, _ = x.shape\n"
                "        if t > self.context_length:\n"
                "            raise ValueError('more tokens than context_length')\n"
                "        k, q, v = (z.view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                "                   for z in self.qkv(x).chunk(3, dim=-1))\n"
                "        scores = (q @ k.mT).masked_fill(self.mask[:t, :t], float('-inf'))\n"
                "        weights = self.dropout(torch.softmax(scores, dim=-1))\n"
                "        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n",
            "combined_from_split": _COMBINED_FROM_SPLIT_LOAD,
        },
        "fails": {"test_combined_qkv": "compare each step with step 07's forward"},
    },
    "part1_crashes_part2_right": {
        "kind": "mistake",
        "cells": {
            "combined_qkv": _COMBINED_INIT +
                "    def forward(self, x):\n"
                "        b, t, _ = x.shape\n"
                "        if t > self.context_length:\n"
                "            raise ValueError('more tokens than context_length')\n"
                "        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)\n"
                "        scores = (q @ k.mT / q.shape[-1] ** 0.5).masked_fill(self.mask[:t, :t], float('-inf'))\n"
                "        weights = self.dropout(torch.softmax(scores, dim=-1))\n"
                "        return self.out_proj((weights @ v).transpose(1, 2).view(b, t, self.d_out))\n",
            "combined_from_split": _COMBINED_FROM_SPLIT_LOAD,
        },
        "fails": {"test_combined_qkv": "view size is not compatible"},
    },
    # The visible example has dropout 0.0: only the hidden checks see it.
    "fused_dropout_dropped": {
        "kind": "mistake",
        "cells": {"combined_from_split": _COMBINED_FROM_SPLIT_LOAD.replace("mha.dropout.p, mha.num_heads",
                                                                          "0.0, mha.num_heads")},
        "fails": {"test_combined_from_split": "dropout rate"},
    },
    "mask_float_dtype": {
        "kind": "mistake",
        "cells": {"sdpa_causal_bool_mask":
                  "def sdpa_causal_bool_mask(num_tokens):\n"
                  "    return torch.tril(torch.ones(num_tokens, num_tokens))\n"},
        "fails": {"test_sdpa_causal_bool_mask": "bool tensor"},
    },
    "combined_ignores_qkv_bias": {
        "kind": "mistake",
        "cells": {"combined_qkv":
                  "class MultiHeadAttentionCombinedQKV(nn.Module):\n"
                  "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                  "        super().__init__()\n"
                  "        if d_out % num_heads != 0:\n"
                  "            raise ValueError('d_out must be divisible by num_heads')\n"
                  "        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length\n"
                  "        self.qkv = nn.Linear(d_in, 3 * d_out, bias=False)\n"
                  "        self.out_proj = nn.Linear(d_out, d_out)\n"
                  "        self.dropout = nn.Dropout(dropout)\n"
                  "        self.register_buffer('mask', torch.ones(context_length, context_length).triu(1).bool())\n"
                  "\n"
                  "    def forward(self, x):\n"
                  "        b, t, _ = x.shape\n"
                  "        if t > self.context_length:\n"
                  "            raise ValueError('more tokens than context_length')\n"
                  "        q, k, v = (z.view(b, t, self.num_heads, -1).transpose(1, 2)\n"
                  "                   for z in self.qkv(x).chunk(3, dim=-1))\n"
                  "        scores = (q @ k.mT / q.shape[-1] ** 0.5).masked_fill(self.mask[:t, :t], float('-inf'))\n"
                  "        weights = self.dropout(torch.softmax(scores, dim=-1))\n"
                  "        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, self.d_out))\n"},
        # combined_from_split cannot copy biases into a layer that has none, so Part 2 fails too.
        "fails": {"test_combined_qkv": "bias=qkv_bias", "test_combined_from_split": "has no bias"},
    },
}

# Rule 3 of the course: every transfer part fails the lesson's code adapted mechanically and the shortcut, and passes
# two correct solutions in other styles.
PROOF = {
    "test_padded_sdpa_attention": {"lesson": ["padded_mask_not_inverted"], "shortcut": ["padded_is_causal_only"],
                                   "correct": ["padded_float_mask", "padded_where_large_negative"]},
    "test_padded_sdpa_attention_left": {"lesson": ["padded_empty_rows_left_alone"],
                                        "shortcut": ["padded_is_causal_only"],
                                        "correct": ["padded_float_mask", "padded_where_large_negative"]},
}
