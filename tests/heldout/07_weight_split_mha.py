"""Held-out mistakes for step 07, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 3 (view to (b, T, num_heads, head_dim), transpose(1, 2), keys.transpose(2, 3),
masked_fill_ with a float buffer, contiguous().view back), nanoGPT (assert, F.dropout, a mask sliced with [:T, :T]),
einops-like unflatten/flatten, weight surgery with torch.cat and load_state_dict. `fails` words name the actual
mistake.
"""

_MHA = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        {check}
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = {head_dim}
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        if num_tokens > self.mask.shape[0]:
            raise ValueError(f"{{num_tokens}} tokens exceed context_length={{self.mask.shape[0]}}")
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = {scores}
        mask_bool = {mask}
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / {scale} ** 0.5, dim=-1)
        attn_weights = {dropout}
        context_vec = {context}
        return {out}
'''
_DEFAULTS = dict(
    check='if num_heads < 1 or d_out % num_heads != 0:\n'
          '            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")',
    head_dim="d_out // num_heads",
    scores="queries @ keys.transpose(2, 3)",
    mask="self.mask.bool()[:num_tokens, :num_tokens]",
    scale="keys.shape[-1]",
    dropout="self.dropout(attn_weights)",
    context="(attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)",
    out="self.out_proj(context_vec)",
)


def _mha(**changes):
    return _MHA.format(**{**_DEFAULTS, **changes})


_WRAPPER_TO_SPLIT = '''def wrapper_to_split(wrapper):
    heads = wrapper.heads
    num_heads = len(heads)
    d_in = heads[0].W_query.in_features
    head_dim = heads[0].W_query.out_features
    qkv_bias = heads[0].W_query.bias is not None
    mha = MultiHeadAttention(d_in, num_heads * head_dim, heads[0].mask.shape[0], {dropout}, num_heads,
                             qkv_bias={bias})
    mha = mha.to({to})
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            big = getattr(mha, name)
            big.weight.copy_(torch.cat([getattr(head, name).weight for head in heads], dim={dim}))
            {copy_bias}
        {out_proj}
    return mha
'''
_W2S = dict(
    dropout="heads[0].dropout.p", bias="qkv_bias", to="heads[0].W_query.weight",
    dim="0",
    copy_bias="if qkv_bias:\n"
              "                big.bias.copy_(torch.cat([getattr(head, name).bias for head in heads]))",
    out_proj="mha.out_proj.weight.copy_(torch.eye(num_heads * head_dim))\n"
             "        mha.out_proj.bias.zero_()",
)


def _w2s(**changes):
    return _WRAPPER_TO_SPLIT.format(**{**_W2S, **changes})


_SPLIT_TO_WRAPPER = '''def split_to_wrapper(mha, num_heads):
    d_out, d_in = mha.W_query.weight.shape
    if num_heads < 1 or d_out % num_heads != 0:
        raise ValueError(f"num_heads={{num_heads}} must divide d_out={{d_out}}")
    hd = d_out // num_heads
    bias = mha.W_query.bias is not None
    W = mha.out_proj.weight.detach()
    c = mha.out_proj.bias.detach()
    source = []
    for g in range(num_heads):
        rows = W[g * hd:(g + 1) * hd]
        used = [h for h in range(num_heads) if rows[:, h * hd:(h + 1) * hd].abs().sum() > 0]
        {refuse}
        source.append(used[0] if used else g)
    if not bias and c.abs().sum() > 0:
        raise ValueError("out_proj has a bias but the heads have none")
    wrapper = MultiHeadAttentionWrapper(d_in, hd, mha.mask.shape[0], mha.dropout.p, num_heads, qkv_bias=bias)
    with torch.no_grad():
        for g, (head, h) in enumerate(zip(wrapper.heads, source)):
            r = slice(h * hd, (h + 1) * hd)
            B = W[g * hd:(g + 1) * hd, r]
            head.W_query.weight.copy_(mha.W_query.weight[r])
            head.W_key.weight.copy_(mha.W_key.weight[r])
            head.W_value.weight.copy_({value_weight})
            if bias:
                head.W_query.bias.copy_(mha.W_query.bias[r])
                head.W_key.bias.copy_(mha.W_key.bias[r])
                head.W_value.bias.copy_({value_bias})
    return wrapper
'''
_S2W = dict(
    refuse='if len(used) > 1:\n'
           '            raise ValueError(f"out_proj block {g} reads heads {used}: no wrapper")',
    value_weight="B @ mha.W_value.weight[r]",
    value_bias="B @ mha.W_value.bias[r] + c[g * hd:(g + 1) * hd]",
)


def _s2w(**changes):
    return _SPLIT_TO_WRAPPER.format(**{**_S2W, **changes})


VARIANTS = {
    # Part 1: split_heads
    "split_view_heads_before_tokens": {
        "kind": "mistake",
        "cells": {"split_heads": '''def split_heads(x, num_heads):
    b, num_tokens, d_out = x.shape
    if num_heads < 1 or d_out % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide d_out={d_out}")
    return x.view(b, num_heads, num_tokens, d_out // num_heads)
'''},
        "fails": {"test_split_heads": "transpose", "test_multi_head_attention": "split_heads"},
        "not_named": ["contiguous", "sqrt(d_out)", "interleaved"],
    },
    "split_heads_interleaved": {
        "kind": "mistake",
        "cells": {"split_heads": '''def split_heads(x, num_heads):
    b, t, d = x.shape
    if num_heads < 1 or d % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide {d}")
    return x.reshape(b, t, d // num_heads, num_heads).permute(0, 3, 1, 2)
'''},
        "fails": {"test_split_heads": "interleav", "test_multi_head_attention": "split_heads"},
        "not_named": ["contiguous", "sqrt(d_out)", "straight as (b, num_heads"],
    },
    "split_assert": {
        "kind": "mistake",
        "cells": {"split_heads": '''def split_heads(x, num_heads):
    B, T, C = x.size()
    assert C % num_heads == 0, "num_heads must divide the embedding size"
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)
'''},
        "fails": {"test_split_heads": "assert"},
        "not_named": ["transpose", "contiguous"],
    },
    # Part 2: merge_heads
    "merge_view_after_transpose": {
        "kind": "mistake",
        "cells": {"merge_heads": '''def merge_heads(x):
    b, h, t, hd = x.shape
    return x.transpose(1, 2).view(b, t, h * hd)
'''},
        "fails": {"test_merge_heads": "contiguous", "test_multi_head_attention": "contiguous"},
        "not_named": ["sqrt(d_out)", "without transpose"],
    },
    "merge_no_transpose_back": {
        "kind": "mistake",
        "cells": {"merge_heads": '''def merge_heads(x):
    b, num_heads, num_tokens, head_dim = x.shape
    return x.reshape(b, num_tokens, num_heads * head_dim)
'''},
        "fails": {"test_merge_heads": "transpose", "test_multi_head_attention": "merge_heads"},
        "not_named": ["contiguous", "sqrt(d_out)"],
    },
    "merge_cat_along_tokens": {
        "kind": "mistake",
        "cells": {"merge_heads": '''def merge_heads(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=1)
'''},
        "fails": {"test_merge_heads": "dim", "test_multi_head_attention": "merge_heads"},
        "not_named": ["contiguous"],
    },
    # Part 3: MultiHeadAttention (Raschka's class, adapted to the contract)
    "mha_scale_by_d_out": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(scale="self.d_out")},
        "fails": {"test_multi_head_attention": "d_out"},
        "not_named": ["out_proj is not applied", "contiguous", "masked_fill is not kept"],
    },
    "mha_head_dim_from_d_in": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(head_dim="d_in // num_heads")},
        "fails": {"test_multi_head_attention": "d_in"},
        "not_named": ["contiguous", "sqrt(d_out)"],
    },
    "mha_mask_not_cut_to_T": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(mask="self.mask.bool()")},
        "fails": {"test_multi_head_attention": "slice"},
        "not_named": ["contiguous", "sqrt(d_out)"],
    },
    "mha_keys_dot_T": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(scores="queries @ keys.T")},
        "fails": {"test_multi_head_attention": ".T"},
        "not_named": ["contiguous", "sqrt(d_out)"],
    },
    "mha_out_proj_not_applied": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(out="context_vec")},
        "fails": {"test_multi_head_attention": "out_proj"},
        "not_named": ["contiguous", "sqrt(d_out)"],
    },
    "mha_functional_dropout": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(
            dropout="torch.nn.functional.dropout(attn_weights, p=self.dropout.p)")},
        "fails": {"test_multi_head_attention": "training"},
        "not_named": ["sqrt(d_out)", "masked_fill"],
    },
    "mha_merge_view_without_transpose": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(context="(attn_weights @ values).contiguous().view(b, num_tokens, "
                                                       "self.d_out)")},
        "fails": {"test_multi_head_attention": "transpose"},
        "not_named": ["sqrt(d_out)", "masked_fill"],
    },
    "mha_assert_instead_of_value_error": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha(check='assert d_out % num_heads == 0, "d_out must be divisible by '
                                                     'num_heads"')},
        "fails": {"test_multi_head_attention_arguments": "assert"},
        "not_named": ["context_length"],
    },
    # Part 4: wrapper_to_split
    "w2s_weights_side_by_side": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _w2s(dim="1")},
        "fails": {"test_wrapper_to_split": "dim=0"},
        "not_named": ["identity", "dtype"],
    },
    "w2s_out_proj_left_random": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _w2s(out_proj="pass")},
        "fails": {"test_wrapper_to_split": "identity"},
        "not_named": ["dim=0", "dtype"],
    },
    "w2s_no_qkv_bias": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _w2s(bias="False", copy_bias="pass")},
        "fails": {"test_wrapper_to_split": "bias"},
        "not_named": ["dim=0", "identity"],
    },
    "w2s_float32_always": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _w2s(to="heads[0].W_query.weight.device")},
        "fails": {"test_wrapper_to_split": "dtype"},
        "not_named": ["dim=0", "identity"],
    },
    # Part 5: split_to_wrapper
    "s2w_never_refuses": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _s2w(refuse="pass")},
        "fails": {"test_split_to_wrapper": "two heads"},
        "not_named": ["num_heads"],
    },
    "s2w_block_transposed": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _s2w(value_weight="B.T @ mha.W_value.weight[r]",
                                           value_bias="B.T @ mha.W_value.bias[r] + c[g * hd:(g + 1) * hd]")},
        "fails": {"test_split_to_wrapper": "transpose"},
        "not_named": ["num_heads", "refuse"],
    },
    "s2w_out_bias_dropped": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _s2w(value_bias="B @ mha.W_value.bias[r]")},
        "fails": {"test_split_to_wrapper": "bias"},
        "not_named": ["num_heads", "two heads"],
    },
    # Part 6: counting
    "gpt2_counts_the_mask": {
        "kind": "mistake",
        "cells": {"gpt2_small_attention_params": '''def gpt2_small_attention_params():
    attn = nn.ModuleDict({"c_attn": nn.Linear(768, 3 * 768), "c_proj": nn.Linear(768, 768)})
    attn.register_buffer("bias", torch.tril(torch.ones(1024, 1024)))
    return sum(t.numel() for t in attn.state_dict().values())
'''},
        "fails": {"test_gpt2_small_attention_params": "buffer"},
        "not_named": ["Python int", "without biases"],
    },
    "gpt2_raschka_no_qkv_bias": {
        "kind": "mistake",
        "cells": {"gpt2_small_attention_params": '''def gpt2_small_attention_params():
    d = 768
    qkv = 3 * d * d
    out_proj = d * d + d
    return qkv + out_proj
'''},
        "fails": {"test_gpt2_small_attention_params": "bias"},
        "not_named": ["buffer"],
    },
}
