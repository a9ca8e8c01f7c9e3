"""Held-out mistakes for step 08, written from the released exercise only (issue 46).

Styles: nanoGPT's CausalSelfAttention (a fused c_attn split with .split(n_embd, dim=2), view + transpose(1, 2),
math.sqrt(k.size(-1)), a tril mask sliced [:T, :T], y.transpose(1, 2).contiguous().view(B, T, C), dropout_p=
self.dropout if self.training else 0 around SDPA), Raschka's MHACombinedQKV and MHAPyTorchScaledDotProduct (view to
(b, T, 3, H, hd), permute, unbind), Hugging Face-style padding masks (attention_mask[:, None, None, :]).
`fails` words name the actual mistake.
"""

_COMBINED = '''import math


class MultiHeadAttentionCombinedQKV(AttentionBase):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads)
        self.qkv = nn.Linear(d_in, 3 * d_out, bias={bias})
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        self.check_length(x)
        B, T, C = x.size()
        {qkv}
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt({scale}))
        att = att.masked_fill({mask}, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = {dropout}
        y = att @ v
        y = {merge}
        return self.out_proj(y)
'''
_NANOGPT_SPLIT = ('q, k, v = self.qkv(x).split(self.d_out, dim=2)\n'
                  '        k = k.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)\n'
                  '        q = q.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)\n'
                  '        v = v.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)')
_COMBINED_DEFAULTS = dict(
    bias="qkv_bias",
    qkv=_NANOGPT_SPLIT,
    scale="k.size(-1)",
    mask="self.mask[:T, :T]",
    dropout="self.dropout(att)",
    merge="y.transpose(1, 2).contiguous().view(B, T, self.d_out)",
)


def _combined(**changes):
    return _COMBINED.format(**{**_COMBINED_DEFAULTS, **changes})


_FROM_SPLIT = '''def combined_from_split(mha):
    d_out, d_in = mha.W_query.weight.shape
    has_bias = mha.W_query.bias is not None
    combined = MultiHeadAttentionCombinedQKV(d_in, d_out, mha.context_length, {dropout}, mha.num_heads,
                                             qkv_bias=has_bias)
    with torch.no_grad():
        combined.qkv.weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight], dim={dim}))
        {bias}
        {out_proj}
    return combined
'''
_FROM_SPLIT_DEFAULTS = dict(
    dropout="mha.dropout.p",
    dim="0",
    bias="if has_bias:\n"
         "            combined.qkv.bias.copy_(torch.cat([mha.W_query.bias, mha.W_key.bias, mha.W_value.bias]))",
    out_proj="combined.out_proj.weight.copy_(mha.out_proj.weight)\n"
             "        combined.out_proj.bias.copy_(mha.out_proj.bias)",
)


def _from_split(**changes):
    return _FROM_SPLIT.format(**{**_FROM_SPLIT_DEFAULTS, **changes})


_SDPA = '''class MultiHeadAttentionSDPA(MultiHeadAttention):
    def forward(self, x):
        {check}
        b, num_tokens, _ = x.shape
        q = self.split_heads(self.W_query(x))
        k = self.split_heads(self.W_key(x))
        v = self.split_heads(self.W_value(x))
        {prescale}
        use_dropout = {dropout_p}
        context_vec = F.scaled_dot_product_attention(q, k, v, {mask}dropout_p=use_dropout)
        context_vec = {merge}
        return self.out_proj(context_vec)
'''
_SDPA_DEFAULTS = dict(
    check="self.check_length(x)",
    prescale="",
    dropout_p="0.0 if not self.training else self.dropout.p",
    mask="is_causal=True, ",
    merge="context_vec.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)",
)


def _sdpa(**changes):
    return _SDPA.format(**{**_SDPA_DEFAULTS, **changes})


_PADDED = '''def padded_sdpa_attention(queries, keys, values, is_padding, causal=True):
    b, h, T, d = queries.shape
    if not torch.is_tensor(is_padding) or is_padding.dtype != torch.bool or is_padding.shape != (b, T):
        raise ValueError(f"is_padding must be a bool tensor of shape {{(b, T)}}")
    attn_mask = {keys}
    if causal:
        attn_mask = attn_mask {combine} torch.tril(torch.ones(T, T, dtype=torch.bool))
    {lonely}
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=attn_mask)
'''
_PADDED_DEFAULTS = dict(
    keys="~is_padding[:, None, None, :]",
    combine="&",
    lonely="nobody = ~attn_mask.any(dim=-1, keepdim=True)\n"
           "    attn_mask = attn_mask | (nobody & torch.eye(T, dtype=torch.bool))",
)


def _padded(**changes):
    return _PADDED.format(**{**_PADDED_DEFAULTS, **changes})


VARIANTS = {
    # Part 1: the fused projection (nanoGPT's CausalSelfAttention on the course's base class)
    "combined_per_head_interleaved": {
        "kind": "mistake",
        "cells": {"combined_qkv": _combined(qkv=(
            'qkv = self.qkv(x).view(B, T, self.num_heads, 3, self.head_dim).permute(3, 0, 2, 1, 4)\n'
            '        q, k, v = qkv[0], qkv[1], qkv[2]'))},
        "fails": {"test_combined_qkv": "interleav"},
        "not_named": ["sqrt(d_out)", "contiguous"],
    },
    "combined_scale_by_C_d_in": {
        "kind": "mistake",
        "cells": {"combined_qkv": _combined(scale="C")},
        "fails": {"test_combined_qkv": "d_in"},
        "not_named": ["keys first", "contiguous"],
    },
    "combined_mask_not_cut_to_T": {
        "kind": "mistake",
        "cells": {"combined_qkv": _combined(mask="self.mask")},
        "fails": {"test_combined_qkv": "slice"},
        "not_named": ["keys first", "sqrt(head_dim)"],
    },
    "combined_view_without_transpose_back": {
        "kind": "mistake",
        "cells": {"combined_qkv": _combined(merge="y.contiguous().view(B, T, self.d_out)")},
        "fails": {"test_combined_qkv": "transpose"},
        "not_named": ["keys first", "sqrt(head_dim)"],
    },
    "combined_bias_always": {
        "kind": "mistake",
        "cells": {"combined_qkv": _combined(bias="True")},
        "fails": {"test_combined_qkv": "qkv_bias", "test_combined_from_split": "qkv_bias"},
        "not_named": ["keys first", "sqrt(head_dim)"],
    },
    "combined_chunk_of_batch": {
        "kind": "mistake",
        "cells": {"combined_qkv": _combined(qkv=(
            'q, k, v = self.qkv(x).chunk(3, dim=0)\n'
            '        q, k, v = (t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))'))},
        "fails": {"test_combined_qkv": "dim"},
        "not_named": ["keys first", "sqrt(head_dim)"],
    },
    # Part 2: from three weights to one
    "from_split_side_by_side": {
        "kind": "mistake",
        "cells": {"combined_from_split": _from_split(dim="1")},
        "fails": {"test_combined_from_split": "dim=0"},
        "not_named": ["out_proj", "dropout"],
    },
    "from_split_out_proj_not_copied": {
        "kind": "mistake",
        "cells": {"combined_from_split": _from_split(out_proj="pass")},
        "fails": {"test_combined_from_split": "out_proj"},
        "not_named": ["dim=0", "dropout"],
    },
    "from_split_bias_not_copied": {
        "kind": "mistake",
        "cells": {"combined_from_split": _from_split(bias="pass")},
        "fails": {"test_combined_from_split": "bias"},
        "not_named": ["dim=0", "out_proj"],
    },
    "from_split_dropout_lost": {
        "kind": "mistake",
        "cells": {"combined_from_split": _from_split(dropout="0.0")},
        "fails": {"test_combined_from_split": "dropout"},
        "not_named": ["dim=0", "out_proj"],
    },
    # Part 3: SDPA's mask convention
    "mask_step04_convention": {
        "kind": "mistake",
        "cells": {"sdpa_causal_bool_mask": '''def sdpa_causal_bool_mask(num_tokens):
    return torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
'''},
        "fails": {"test_sdpa_causal_bool_mask": "blocked"},
        "not_named": ["float", "diagonal is False"],
    },
    "mask_float_ones": {
        "kind": "mistake",
        "cells": {"sdpa_causal_bool_mask": '''def sdpa_causal_bool_mask(num_tokens):
    return torch.tril(torch.ones(num_tokens, num_tokens))
'''},
        "fails": {"test_sdpa_causal_bool_mask": "bool"},
        "not_named": ["exactly where attention is blocked"],
    },
    "mask_without_diagonal": {
        "kind": "mistake",
        "cells": {"sdpa_causal_bool_mask": '''def sdpa_causal_bool_mask(num_tokens):
    i = torch.arange(num_tokens)
    return i[None, :] < i[:, None]
'''},
        "fails": {"test_sdpa_causal_bool_mask": "diagonal"},
        "not_named": ["float", "exactly where attention is blocked"],
    },
    # Part 4: the module on SDPA
    "sdpa_dropout_in_eval": {
        "kind": "mistake",
        "cells": {"sdpa_attention": _sdpa(dropout_p="self.dropout.p")},
        "fails": {"test_sdpa_attention": "training"},
        "not_named": ["is_causal", "sqrt(head_dim)"],
    },
    "sdpa_is_causal_and_mask": {
        "kind": "mistake",
        "cells": {"sdpa_attention": _sdpa(mask="attn_mask=~self.mask[:num_tokens, :num_tokens], is_causal=True, ")},
        "fails": {"test_sdpa_attention": "is_causal"},
        "not_named": ["dropout_p", "sqrt(head_dim)"],
    },
    "sdpa_blocked_mask_passed": {
        "kind": "mistake",
        "cells": {"sdpa_attention": _sdpa(mask="attn_mask=self.mask[:num_tokens, :num_tokens], ")},
        "fails": {"test_sdpa_attention": "blocked"},
        "not_named": ["dropout_p", "sqrt(head_dim)"],
    },
    "sdpa_queries_scaled_twice": {
        "kind": "mistake",
        "cells": {"sdpa_attention": _sdpa(prescale="q = q / self.head_dim ** 0.5")},
        "fails": {"test_sdpa_attention": "scale"},
        "not_named": ["dropout_p", "is_causal"],
    },
    "sdpa_view_without_transpose_back": {
        "kind": "mistake",
        "cells": {"sdpa_attention": _sdpa(merge="context_vec.contiguous().view(b, num_tokens, self.d_out)")},
        "fails": {"test_sdpa_attention": "transpose"},
        "not_named": ["dropout_p", "is_causal"],
    },
    "sdpa_no_length_check": {
        "kind": "mistake",
        "cells": {"sdpa_attention": _sdpa(check="pass")},
        "fails": {"test_sdpa_attention": "context_length"},
        "not_named": ["dropout_p", "is_causal"],
    },
    # Part 5: padded batches
    "padded_mask_true_at_padding": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": '''def padded_sdpa_attention(queries, keys, values, is_padding, causal=True):
    b, h, T, d = queries.shape
    if not torch.is_tensor(is_padding) or is_padding.dtype != torch.bool or is_padding.shape != (b, T):
        raise ValueError(f"is_padding must be a bool tensor of shape {(b, T)}")
    blocked = is_padding[:, None, None, :]
    if causal:
        blocked = blocked | torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    lonely = blocked.all(dim=-1, keepdim=True)
    blocked = blocked & ~(lonely & torch.eye(T, dtype=torch.bool))
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=blocked)
'''},
        "fails": {"test_padded_sdpa_attention": "~is_padding", "test_padded_sdpa_attention_left": "~is_padding"},
        "not_named": ["itself", "(b, 1, 1, T)"],
    },
    "padded_mask_b_1_T": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded(keys="~is_padding[:, None, :]")},
        "fails": {"test_padded_sdpa_attention": "(b, 1, 1, T)", "test_padded_sdpa_attention_left": "(b, 1, 1, T)"},
        "not_named": ["itself"],
    },
    "padded_no_argument_check": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": '''def padded_sdpa_attention(queries, keys, values, is_padding, causal=True):
    T = queries.shape[-2]
    attn_mask = ~is_padding[:, None, None, :]
    if causal:
        attn_mask = attn_mask & torch.ones(T, T, dtype=torch.bool).tril()
    nobody = ~attn_mask.any(dim=-1, keepdim=True)
    attn_mask = attn_mask | (nobody & torch.eye(T, dtype=torch.bool))
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=attn_mask)
'''},
        "fails": {"test_padded_sdpa_attention": "is_padding"},
        "not_named": ["itself", "(b, 1, 1, T)"],
    },
    "padded_nan_to_zero": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded(lonely="pass").replace(
            "    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=attn_mask)\n",
            "    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=attn_mask)\n"
            "    return torch.nan_to_num(out)\n")},
        "fails": {"test_padded_sdpa_attention_left": "itself"},
        "not_named": ["~is_padding", "(b, 1, 1, T)"],
    },
    "padded_padding_or_future": {
        "kind": "mistake",
        "cells": {"padded_sdpa_attention": _padded(combine="|")},
        "fails": {"test_padded_sdpa_attention": "both", "test_padded_sdpa_attention_left": "both"},
        "not_named": ["itself", "(b, 1, 1, T)"],
    },
}
