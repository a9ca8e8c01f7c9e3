"""Held-out mistakes for step 06, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 3 (MultiHeadAttentionWrapper with an nn.ModuleList comprehension and
torch.cat(..., dim=-1)), nanoGPT/minGPT (heads appended in a loop, n_embd // n_head), d2l (num_hiddens split among
heads), the ALiBi paper's reference code and its ports (a bias -m * (i - j) added to the scores, slopes per head,
arange distances), multiplicative ALiBi written from the task text. `fails` words name the actual mistake; "correct"
variants are other people's correct code, which must get full marks.
"""

_MHA = '''class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        {check}
        self.heads = {heads}

    def forward(self, x):
        return {out}
'''
_MHA_DEFAULTS = dict(
    check='if num_heads < 1:\n            raise ValueError(f"num_heads must be at least 1, got {num_heads}")',
    heads="nn.ModuleList(\n"
          "            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])",
    out="torch.cat([head(x) for head in self.heads], dim=-1)",
)


def _mha(**changes):
    return _MHA.format(**{**_MHA_DEFAULTS, **changes})


_WIDTH = '''def wrapper_with_output_width(d_in, context_length, width, num_heads, dropout=0.0, qkv_bias=False):
    {check}
    return MultiHeadAttentionWrapper({args})
'''
_WIDTH_DEFAULTS = dict(
    check='if num_heads < 1 or width % num_heads != 0:\n'
          '        raise ValueError(f"width={width} cannot be shared equally by num_heads={num_heads}")',
    args="d_in, width // num_heads, context_length, dropout, num_heads, qkv_bias=qkv_bias",
)


def _width(**changes):
    return _WIDTH.format(**{**_WIDTH_DEFAULTS, **changes})


_ALIBI = '''class ALiBiHead(nn.Module):
    def __init__(self, d_in, d_out, dropout, slope, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        {slope}

    def forward(self, x):
        b, T, _ = x.shape
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        pos = torch.arange(T, device=x.device)
        distance = {distance}
        attn_scores = {scores}
        attn_scores = {biased}
        {masking}
        attn_weights = torch.softmax(attn_scores, dim=-1)
        attn_weights = {drop}
        return attn_weights @ values


class ALiBiWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):
        super().__init__()
        {check}
        self.heads = nn.ModuleList([ALiBiHead(d_in, d_out, dropout, {slope_arg}, qkv_bias)
                                    for h in range(len(slopes))])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
'''
_ALIBI_DEFAULTS = dict(
    slope="self.slope = float(slope)",
    distance="pos[:, None] - pos[None, :]",
    scores="queries @ keys.transpose(1, 2) / keys.shape[-1] ** 0.5",
    biased="attn_scores - self.slope * distance",
    masking="attn_scores = attn_scores.masked_fill(pos[None, :] > pos[:, None], -torch.inf)",
    drop="self.dropout(attn_weights)",
    check='if len(slopes) == 0 or any(m < 0 for m in slopes):\n'
          '            raise ValueError(f"slopes must be a non-empty list of numbers >= 0, got {slopes}")',
    slope_arg="slopes[h]",
)


def _alibi(**changes):
    return _ALIBI.format(**{**_ALIBI_DEFAULTS, **changes})


VARIANTS = {
    # Part 1 and 2: MultiHeadAttentionWrapper
    "mha_plain_list": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            heads="[CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]")},
        "fails": {"test_wrapper_heads": "ModuleList"},
        "not_named": ["same module", "copy", "dim="],
    },
    "mha_list_times_num_heads": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            heads="nn.ModuleList([CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)] * num_heads)")},
        "fails": {"test_wrapper_heads": "same module"},
        "not_named": ["Python list", "deepcopy"],
    },
    "mha_one_head_reused": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": '''class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {num_heads}")
        head = CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
        self.heads = nn.ModuleList()
        for _ in range(num_heads):
            self.heads.append(head)

    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)
'''},
        "fails": {"test_wrapper_heads": "same module"},
        "not_named": ["Python list", "deepcopy"],
    },
    "mha_deepcopy_of_one_head": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": '''import copy


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {num_heads}")
        head = CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
        self.heads = nn.ModuleList([copy.deepcopy(head) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)
'''},
        "fails": {"test_wrapper_heads": "copy"},
        "not_named": ["plain list", "same module"],
    },
    "mha_cat_over_tokens": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(out="torch.cat([head(x) for head in self.heads], dim=1)")},
        "fails": {"test_wrapper_output": "dim"},
        "not_named": ["ModuleList", "order"],
    },
    "mha_cat_over_batch": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(out="torch.cat([head(x) for head in self.heads])")},
        "fails": {"test_wrapper_output": "dim"},
        "not_named": ["ModuleList", "order"],
    },
    "mha_stack_last": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(out="torch.stack([head(x) for head in self.heads], dim=-1)")},
        "fails": {"test_wrapper_output": "torch.stack"},
        "not_named": ["ModuleList", "reverse order"],
    },
    "mha_stack_then_flatten_interleaves": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            out="torch.stack([head(x) for head in self.heads], dim=-1).flatten(start_dim=-2)")},
        "fails": {"test_wrapper_output": "interleaved"},
        "not_named": ["ModuleList", "dim=1", "reverse order"],
    },
    "mha_reversed_heads": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(out="torch.cat([head(x) for head in reversed(self.heads)], dim=-1)")},
        "fails": {"test_wrapper_output": "reverse order"},
        "not_named": ["ModuleList", "dim=1", "interleaved"],
    },
    "mha_heads_summed": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(out="sum(head(x) for head in self.heads)")},
        "fails": {"test_wrapper_output": "added"},
        "not_named": ["ModuleList", "reverse order", "dim=1"],
    },
    "mha_head_width_split": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            heads="nn.ModuleList([CausalAttention(d_in, d_out // num_heads, context_length, dropout, qkv_bias)\n"
                  "                                    for _ in range(num_heads)])")},
        "fails": {
            "test_wrapper_output": "d_out // num_heads",
            "test_wrapper_heads": "d_out // num_heads",
            "test_wrapper_with_output_width": "Part 1",
        },
        "not_named": ["ModuleList", "reverse order", "Python list"],
    },
    "mha_arguments_swapped": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            heads="nn.ModuleList(\n"
                  "            [CausalAttention(d_in, d_out, dropout, context_length, qkv_bias) for _ in range(num_heads)])")},
        "fails": {
            "test_wrapper_output": "context_length reached the dropout",
            "test_wrapper_heads": "context_length reached the dropout",
            "test_wrapper_with_output_width": "context_length reached the dropout",
        },
        "not_named": ["ModuleList", "reverse order"],
    },
    "mha_dropout_not_passed": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            heads="nn.ModuleList(\n"
                  "            [CausalAttention(d_in, d_out, context_length, 0.0, qkv_bias) for _ in range(num_heads)])")},
        "fails": {"test_wrapper_heads": "dropout"},
        "not_named": ["ModuleList", "same module"],
    },
    "mha_qkv_bias_not_passed": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            heads="nn.ModuleList(\n"
                  "            [CausalAttention(d_in, d_out, context_length, dropout) for _ in range(num_heads)])")},
        "fails": {"test_wrapper_output": "qkv_bias", "test_wrapper_heads": "qkv_bias"},
        "not_named": ["ModuleList", "same module"],
    },
    "mha_no_num_heads_check": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(check="pass")},
        "fails": {"test_wrapper_arguments": "ValueError"},
        "not_named": ["ModuleList", "same module"],
    },
    "mha_check_lets_zero_through": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _mha(
            check='if num_heads < 0:\n            raise ValueError(f"num_heads must be >= 0, got {num_heads}")')},
        "fails": {"test_wrapper_arguments": "num_heads < 1"},
        "not_named": ["ModuleList", "assert"],
    },
    # Part 3: wrapper_with_output_width
    "width_not_divided": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width": _width(
            args="d_in, width, context_length, dropout, num_heads, qkv_bias=qkv_bias")},
        "fails": {"test_wrapper_with_output_width": "width // num_heads"},
        "not_named": ["not divisible", "float"],
    },
    "width_no_divisibility_check": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width": _width(
            check='if num_heads < 1:\n        raise ValueError(f"num_heads must be at least 1, got {num_heads}")')},
        "fails": {"test_wrapper_with_output_width_arguments": "not divisible"},
        "not_named": ["width // num_heads", "float"],
    },
    "width_true_division": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width": _width(
            args="d_in, width / num_heads, context_length, dropout, num_heads, qkv_bias=qkv_bias")},
        "fails": {"test_wrapper_with_output_width": "//"},
        "not_named": ["not divisible"],
    },
    "width_divisibility_checked_first": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width": _width(
            check='if width % num_heads != 0 or num_heads < 1:\n'
                  '        raise ValueError(f"width={width} cannot be shared equally by num_heads={num_heads}")')},
        "fails": {"test_wrapper_with_output_width_arguments": "ZeroDivisionError"},
        "not_named": ["width // num_heads", "float"],
    },
    "width_arguments_swapped": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width": _width(
            args="d_in, width // num_heads, dropout, context_length, num_heads, qkv_bias=qkv_bias")},
        "fails": {"test_wrapper_with_output_width": "context_length reached the dropout"},
        "not_named": ["not divisible", "float"],
    },
    "width_qkv_bias_dropped": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width": _width(
            args="d_in, width // num_heads, context_length, dropout, num_heads")},
        "fails": {"test_wrapper_with_output_width": "qkv_bias"},
        "not_named": ["divisible", "float"],
    },
    # Part 4: ALiBiWrapper
    "alibi_sign_flipped": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(biased="attn_scores + self.slope * distance")},
        "fails": {"test_alibi_wrapper": "sign"},
        "not_named": ["context_length", "normalised again", "order of slopes"],
    },
    "alibi_distance_j_minus_i": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(distance="pos[None, :] - pos[:, None]")},
        "fails": {"test_alibi_wrapper": "sign"},
        "not_named": ["context_length", "normalised again", "order of slopes"],
    },
    "alibi_bias_before_scaling": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(scores="queries @ keys.transpose(1, 2)",
                                          biased="(attn_scores - self.slope * distance) / keys.shape[-1] ** 0.5")},
        "fails": {"test_alibi_wrapper": "sqrt(d_out)"},
        "not_named": ["context_length", "order of slopes", "farther keys gained"],
    },
    "alibi_scores_times_factor": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(biased="attn_scores * torch.exp(-self.slope * distance)")},
        "fails": {"test_alibi_wrapper": "multiplied the scores"},
        "not_named": ["context_length", "order of slopes", "farther keys gained"],
    },
    "alibi_not_renormalised": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(
            biased="attn_scores",
            drop="self.dropout(attn_weights * torch.exp(-self.slope * distance.clamp_min(0)))")},
        "fails": {"test_alibi_wrapper": "normalised again"},
        "not_named": ["context_length", "order of slopes", "farther keys gained"],
    },
    "alibi_slopes_reversed": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(slope_arg="slopes[len(slopes) - 1 - h]")},
        "fails": {"test_alibi_wrapper": "order of slopes"},
        "not_named": ["context_length", "farther keys gained", "normalised again"],
    },
    "alibi_first_slope_everywhere": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(slope_arg="slopes[0]")},
        "fails": {"test_alibi_wrapper": "slopes[h]"},
        "not_named": ["context_length", "farther keys gained", "normalised again"],
    },
    "alibi_learned_slope": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(slope="self.slope = nn.Parameter(torch.tensor(float(slope)))")},
        "fails": {"test_alibi_wrapper": "parameter"},
        "not_named": ["context_length", "farther keys gained", "normalised again"],
    },
    "alibi_no_causal_mask": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(masking="pass")},
        "fails": {"test_alibi_wrapper": "future"},
        "not_named": ["context_length", "farther keys gained", "normalised again"],
    },
    "alibi_no_dropout": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(drop="attn_weights")},
        "fails": {"test_alibi_wrapper": "dropout"},
        "not_named": ["context_length", "farther keys gained", "normalised again"],
    },
    "alibi_no_negative_check": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(
            check='if not slopes:\n            raise ValueError("slopes must not be empty")')},
        "fails": {"test_alibi_wrapper": "negative"},
        "not_named": ["context_length", "farther keys gained", "normalised again"],
    },
    "alibi_min_of_empty": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(
            check='if min(slopes) < 0:\n            raise ValueError(f"negative slope in {slopes}")')},
        "fails": {"test_alibi_wrapper": "empty"},
        "not_named": ["context_length", "farther keys gained", "normalised again"],
    },
    "alibi_subclass_keeps_mask_buffer": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": '''class ALiBiHead(CausalAttention):
    def __init__(self, d_in, d_out, context_length, dropout, slope, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.slope = slope

    def forward(self, x):
        b, T, _ = x.shape
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = q @ k.transpose(1, 2) / k.shape[-1] ** 0.5
        i = torch.arange(T)
        scores = scores - self.slope * (i[:, None] - i[None, :])
        scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))
        return self.dropout(torch.softmax(scores, dim=-1)) @ v


class ALiBiWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):
        super().__init__()
        if len(slopes) == 0 or min(slopes) < 0:
            raise ValueError(f"slopes must be non-empty and >= 0, got {slopes}")
        self.heads = nn.ModuleList(ALiBiHead(d_in, d_out, context_length, dropout, m, qkv_bias) for m in slopes)

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
'''},
        "fails": {"test_alibi_wrapper": "context_length"},
        "not_named": ["order of slopes", "farther keys gained", "normalised again"],
    },
    # Correct code in other styles: must get full marks
    "correct_raschka_style": {
        "kind": "correct",
        "cells": {
            "multihead_wrapper": _mha(),
            "wrapper_with_output_width": _width(),
            "alibi_wrapper": _alibi(),
        },
    },
    "correct_loop_style": {
        "kind": "correct",
        "cells": {
            "multihead_wrapper": '''class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
        self.heads = nn.ModuleList()
        for _ in range(num_heads):
            self.heads.append(CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=qkv_bias))

    def forward(self, x):
        outs = []
        for head in self.heads:
            outs.append(head(x))
        return torch.cat(outs, dim=2)
''',
            "wrapper_with_output_width": '''def wrapper_with_output_width(d_in, context_length, width, num_heads, dropout=0.0, qkv_bias=False):
    if num_heads < 1:
        raise ValueError(f"num_heads must be at least 1, got {num_heads}")
    head_size, rest = divmod(width, num_heads)
    if rest:
        raise ValueError(f"width {width} is not divisible by num_heads {num_heads}")
    return MultiHeadAttentionWrapper(d_in=d_in, d_out=head_size, context_length=context_length, dropout=dropout,
                                     num_heads=num_heads, qkv_bias=qkv_bias)
''',
            "alibi_wrapper": '''class ALiBiWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):
        super().__init__()
        slopes = [float(m) for m in slopes]
        if not slopes or min(slopes) < 0:
            raise ValueError(f"slopes must be a non-empty list of slopes >= 0, got {slopes}")
        self.register_buffer("slopes", torch.tensor(slopes), persistent=False)
        self.heads = nn.ModuleList()
        for _ in slopes:
            head = nn.Module()
            head.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            head.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            head.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            head.dropout = nn.Dropout(dropout)
            self.heads.append(head)

    def forward(self, x):
        T = x.shape[1]
        i = torch.arange(T, device=x.device)
        distance = (i[:, None] - i[None, :]).clamp_min(0)
        visible = i[None, :] <= i[:, None]
        outs = []
        for h, head in enumerate(self.heads):
            q, k, v = head.W_query(x), head.W_key(x), head.W_value(x)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
            w = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)
            w = w * torch.exp(-self.slopes[h] * distance) * visible
            w = w / w.sum(dim=-1, keepdim=True)
            outs.append(head.dropout(w) @ v)
        return torch.cat(outs, dim=-1)
''',
        },
    },
    "correct_einsum_style": {
        "kind": "correct",
        "cells": {
            "multihead_wrapper": '''class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"need num_heads >= 1, got num_heads={num_heads}")
        self.heads = nn.ModuleList(CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
                                   for _ in range(num_heads))

    def forward(self, x):
        return torch.concat(tuple(map(lambda head: head(x), self.heads)), dim=x.dim() - 1)
''',
            "wrapper_with_output_width": '''def wrapper_with_output_width(d_in, context_length, width, num_heads, dropout=0.0, qkv_bias=False):
    if num_heads < 1 or width % num_heads:
        raise ValueError(f"num_heads={num_heads} must be >= 1 and divide width={width}")
    return MultiHeadAttentionWrapper(d_in, width // num_heads, context_length, dropout, num_heads, qkv_bias)
''',
            "alibi_wrapper": '''class ALiBiHead(CausalAttention):
    def __init__(self, d_in, d_out, context_length, dropout, slope, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.slope = slope

    def forward(self, x):
        T = x.shape[-2]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        s = torch.einsum("bqd,bkd->bqk", q, k) / k.shape[-1] ** 0.5
        rel = torch.arange(T)[None, :] - torch.arange(T)[:, None]  # j - i, <= 0 for the past
        s = s + self.slope * rel
        s = s.masked_fill(rel > 0, float("-inf"))
        return torch.einsum("bqk,bkd->bqd", self.dropout(s.softmax(dim=-1)), v)


class ALiBiWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):
        super().__init__()
        if len(slopes) == 0 or any(m < 0 for m in slopes):
            raise ValueError(f"slopes must be non-empty and >= 0, got {list(slopes)}")
        self.heads = nn.ModuleList(ALiBiHead(d_in, d_out, context_length, dropout, m, qkv_bias) for m in slopes)

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
''',
        },
    },
}
