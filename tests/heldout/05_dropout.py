"""Held-out mistakes for step 05, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 3 (CausalAttention with nn.Dropout after the softmax, masked_fill_ with
-torch.inf, a float triu buffer), nanoGPT (att = self.attn_dropout(att), T from x.size()), d2l (masked softmax,
dropout on the weights), CS336-style functional code (torch.rand(shape, generator=...) < keep), DropKey-style code
(a keep mask over keys, masked_fill before the softmax), plain bernoulli masks. `fails` words name the actual mistake;
"correct" variants are other people's correct code, which must get full marks.
"""

_DROPOUT = '''def dropout(x, p, training=True, generator=None):
    {check}
    if not training or p == 0:
        return x
    if p == 1:
        return torch.zeros_like(x)
    {draw}
    return {out}
'''
_DROPOUT_DEFAULTS = dict(
    check='if not 0 <= p <= 1:\n        raise ValueError(f"dropout probability p must be in [0, 1], got {p}")',
    draw="keep = torch.rand(x.shape, generator=generator) >= p",
    out="x * keep / (1 - p)",
)


def _dropout(**changes):
    return _DROPOUT.format(**{**_DROPOUT_DEFAULTS, **changes})


_CA = '''class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias={bias})
        self.W_key = nn.Linear(d_in, d_out, bias={bias})
        self.W_value = nn.Linear(d_in, d_out, bias={bias})
        self.dropout = nn.Dropout(dropout)
        {mask}

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        {check}
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = {values}
        attn_scores = {scores}
        attn_scores = attn_scores.masked_fill({sliced}, {fill})
        attn_weights = {weights}
        attn_weights = {drop}
        return {out}
'''
_CA_DEFAULTS = dict(
    bias="qkv_bias",
    mask='self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))',
    check='if num_tokens > self.mask.shape[0]:\n'
          '            raise ValueError(f"{num_tokens} tokens exceed context_length={self.mask.shape[0]}")',
    values="self.W_value(x)",
    scores="queries @ keys.transpose(1, 2)",
    sliced="self.mask.bool()[:num_tokens, :num_tokens]",
    fill="-torch.inf",
    weights="torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)",
    drop="self.dropout(attn_weights)",
    out="attn_weights @ values",
)


def _ca(**changes):
    return _CA.format(**{**_CA_DEFAULTS, **changes})


_DK = '''def drop_keys(attn_scores, p, training=True, generator=None):
    {check}
    if not training or p == 0:
        return torch.softmax(attn_scores, dim=-1)
    {draw}
    {weights}
    return weights
'''
_DK_DEFAULTS = dict(
    check='if not 0 <= p <= 1:\n        raise ValueError(f"p must be a probability in [0, 1], got {p}")',
    draw="dropped = torch.rand(attn_scores.shape[:-2] + (1, attn_scores.shape[-1]), generator=generator) < p",
    weights="weights = torch.softmax(attn_scores.masked_fill(dropped, -torch.inf), dim=-1)\n"
            "    weights = torch.nan_to_num(weights, nan=0.0)",
)


def _dk(**changes):
    return _DK.format(**{**_DK_DEFAULTS, **changes})


VARIANTS = {
    # Part 1 and 2: dropout
    "dropout_not_rescaled": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(out="x * keep")},
        "fails": {"test_dropout_training": "1 - p"},
        "not_named": ["in-place", "from the generator you are given", "the wrong way"],
    },
    "dropout_multiplies_by_keep_prob": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(out="x * keep * (1 - p)")},
        "fails": {"test_dropout_training": "divide"},
        "not_named": ["in-place", "from the generator you are given"],
    },
    "dropout_divides_by_p": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(out="x * keep / p")},
        "fails": {"test_dropout_training": "1 - p"},
        "not_named": ["in-place", "from the generator you are given"],
    },
    "dropout_keeps_with_probability_p": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(draw="keep = torch.rand(x.shape, generator=generator) < p")},
        "fails": {"test_dropout_training": "keep"},
        "not_named": ["in-place", "from the generator you are given"],
    },
    "dropout_bernoulli_of_p": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(draw="keep = torch.bernoulli(torch.full(x.shape, p), generator=generator)")},
        "fails": {"test_dropout_training": "keep"},
        "not_named": ["in-place", "from the generator you are given"],
    },
    "dropout_ignores_generator": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(draw="keep = torch.rand(x.shape) >= p")},
        "fails": {"test_dropout_training": "generator=generator"},
        "not_named": ["in place", "1 - p"],
    },
    "dropout_rand_like": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(draw="keep = (torch.rand_like(x) > p).float()")},
        "fails": {"test_dropout_training": "generator=generator"},
        "not_named": ["in place", "1 - p"],
    },
    "dropout_in_place": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(out="x.mul_(keep).div_(1 - p)")},
        "fails": {"test_dropout_training": "in-place"},
        "not_named": ["from the generator you are given", "divide every kept"],
    },
    "dropout_masked_fill_in_place": {
        "kind": "mistake",
        "cells": {"dropout": '''def dropout(x, p, training=True, generator=None):
    if p < 0 or p > 1:
        raise ValueError(f"p={p} is not a probability")
    if not training or p == 0:
        return x
    if p == 1:
        return torch.zeros_like(x)
    drop = torch.rand(x.shape, generator=generator) < p
    x[drop] = 0
    x /= 1 - p
    return x
'''},
        "fails": {"test_dropout_training": "in-place"},
        "not_named": ["from the generator you are given", "the wrong way"],
    },
    "dropout_one_draw_per_column": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(draw="keep = torch.rand(x.shape[-1], generator=generator) >= p")},
        "fails": {"test_dropout_training": "one per entry"},
        "not_named": ["in-place", "swapped", "1 - p of the entries"],
    },
    "dropout_ignores_training": {
        "kind": "mistake",
        "cells": {"dropout": '''def dropout(x, p, training=True, generator=None):
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if p == 1:
        return torch.zeros_like(x)
    mask = (torch.rand(x.shape, generator=generator) > p).to(x.dtype)
    return mask * x / (1 - p)
'''},
        "fails": {"test_dropout_special_cases": "training"},
        "not_named": ["in place", "nan"],
    },
    "dropout_p_one_gives_nan": {
        "kind": "mistake",
        "cells": {"dropout": '''def dropout(x, p, training=True, generator=None):
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if not training:
        return x
    mask = (torch.rand(x.shape, generator=generator) >= p).to(x.dtype)
    return mask * x / (1 - p)
'''},
        "fails": {"test_dropout_special_cases": "p = 1"},
        "not_named": ["in-place", "training=False"],
    },
    "dropout_no_argument_check": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(check="pass")},
        "fails": {"test_dropout_arguments": "ValueError"},
        "not_named": ["assert", "divide every kept"],
    },
    "dropout_assert_instead_of_raise": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(check='assert 0 <= p <= 1, f"p must be in [0, 1], got {p}"')},
        "fails": {"test_dropout_arguments": "assert"},
        "not_named": ["divide every kept", "shortcut"],
    },
    "dropout_open_interval_check": {
        "kind": "mistake",
        "cells": {"dropout": _dropout(
            check='if not 0 < p < 1:\n        raise ValueError(f"p must be in (0, 1), got {p}")')},
        "fails": {"test_dropout_special_cases": "both ends"},
        "not_named": ["training=False", "in-place"],
    },
    "dropout_check_after_shortcut": {
        "kind": "mistake",
        "cells": {"dropout": '''def dropout(x, p, training=True, generator=None):
    if not training or p == 0:
        return x
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if p == 1:
        return torch.zeros_like(x)
    return x * (torch.rand(x.shape, generator=generator) >= p) / (1 - p)
'''},
        "fails": {"test_dropout_arguments": "shortcut"},
        "not_named": ["assert", "divide every kept"],
    },
    # Part 3 and 4: CausalAttention
    "ca_dropout_on_scores": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(
            scores="self.dropout(queries @ keys.transpose(1, 2))", drop="attn_weights")},
        "fails": {"test_causal_attention_dropout": "before the softmax"},
        "not_named": ["on the values", "context vectors are dropped", "never applies"],
    },
    "ca_dropout_on_context": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(drop="attn_weights", out="self.dropout(attn_weights @ values)")},
        "fails": {"test_causal_attention_dropout": "context vector"},
        "not_named": ["before the softmax", "diagonal"],
    },
    "ca_dropout_on_values": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(values="self.dropout(self.W_value(x))", drop="attn_weights")},
        "fails": {"test_causal_attention_dropout": "values"},
        "not_named": ["before the softmax", "diagonal"],
    },
    "ca_dropout_never_applied": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(drop="attn_weights")},
        "fails": {"test_causal_attention_dropout": "never applies"},
        "not_named": ["before the softmax", "on the values"],
    },
    "ca_functional_dropout_always_on": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(drop="torch.nn.functional.dropout(attn_weights, self.dropout.p)")},
        "fails": {"test_causal_attention": "eval", "test_causal_attention_dropout": "eval"},
        "not_named": ["before the softmax", "on the values"],
    },
    "ca_mask_not_sliced": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(sliced="self.mask.bool()")},
        "fails": {"test_causal_attention": "slice"},
        "not_named": ["diagonal", "dropout"],
    },
    "ca_mask_hides_diagonal": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(
            mask='self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length)))')},
        "fails": {"test_causal_attention": "diagonal", "test_causal_attention_dropout": "diagonal"},
        "not_named": ["drops in eval mode", "after softmax", "slice"],
    },
    "ca_mask_tril": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(
            mask='self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length), -1))')},
        "fails": {"test_causal_attention": "the past"},
        "not_named": ["dropout", "slice"],
    },
    "ca_mask_filled_with_zero": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(fill="0.0")},
        "fails": {"test_causal_attention": "-inf"},
        "not_named": ["dropout", "diagonal"],
    },
    "ca_mask_plain_attribute": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(
            mask="self.mask = torch.triu(torch.ones(context_length, context_length), diagonal=1)")},
        "fails": {"test_causal_attention": "register_buffer"},
        "not_named": ["dropout", "diagonal"],
    },
    "ca_scaled_by_d_in": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(weights="torch.softmax(attn_scores / d_in ** 0.5, dim=-1)")},
        "fails": {"test_causal_attention": "d_in"},
        "not_named": ["dropout", "diagonal"],
    },
    "ca_softmax_over_queries": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(weights="torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=1)")},
        "fails": {"test_causal_attention": "over the queries"},  # Part 4 measures dropout against eval mode: kept
        "not_named": ["drops in eval mode", "after softmax", "slice"],
    },
    "ca_tokens_from_shape_0": {
        "kind": "mistake",
        "cells": {"causal_attention": '''import math


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))
        self.context_length = context_length

    def forward(self, x):
        T = x.shape[0]
        if T > self.context_length:
            raise ValueError(f"sequence of {T} tokens is longer than context_length={self.context_length}")
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        att = self.dropout(torch.softmax(att, dim=-1))
        return att @ v
'''},
        "fails": {
            "test_causal_attention": "shape[0]",
            "test_causal_attention_arguments": "shape[0]",
            "test_causal_attention_dropout": "shape[0]",
        },
        "not_named": ["dropout", "diagonal", "refuses a full context"],
    },
    "ca_bias_always_on": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(bias="True")},
        "fails": {"test_causal_attention": "qkv_bias", "test_causal_attention_dropout": "qkv_bias"},
        "not_named": ["drops in eval mode", "after softmax", "slice"],
    },
    "ca_no_context_length_check": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(check="pass")},
        "fails": {"test_causal_attention_arguments": "context_length"},
        "not_named": ["dropout", "diagonal"],
    },
    "ca_check_rejects_full_context": {
        "kind": "mistake",
        "cells": {"causal_attention": _ca(
            check='if num_tokens >= self.mask.shape[0]:\n'
                  '            raise ValueError(f"{num_tokens} tokens exceed context_length={self.mask.shape[0]}")')},
        "fails": {"test_causal_attention": "T > context_length", "test_causal_attention_dropout": "T > context_length"},
        "not_named": ["dropout", "diagonal"],
    },
    # Part 5: drop_keys
    "dk_one_draw_per_weight": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(draw="dropped = torch.rand(attn_scores.shape, generator=generator) < p")},
        "fails": {"test_drop_keys": "per weight", "test_drop_keys_statistics": "per weight"},
        "not_named": ["softmax over nothing", "masked_fill_", "no division by 1 - p"],
    },
    "dk_same_keys_for_every_sequence": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(draw="dropped = torch.rand(attn_scores.shape[-1], generator=generator) < p")},
        "fails": {"test_drop_keys_statistics": "sequence"},
        "not_named": ["softmax over nothing", "masked_fill_", "one per weight"],
    },
    "dk_same_keys_for_every_head": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            draw="shape = [attn_scores.shape[0]] + [1] * (attn_scores.dim() - 2) + [attn_scores.shape[-1]]\n"
                 "    dropped = torch.rand(shape, generator=generator) < p")},
        "fails": {"test_drop_keys_statistics": "head"},
        "not_named": ["softmax over nothing", "masked_fill_", "one per weight"],
    },
    "dk_drops_queries": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            draw="dropped = torch.rand(attn_scores.shape[:-1] + (1,), generator=generator) < p")},
        "fails": {"test_drop_keys": "whole queries", "test_drop_keys_statistics": "whole queries"},
        "not_named": ["softmax over nothing", "masked_fill_", "no division by 1 - p"],
    },
    "dk_zeroes_scores": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            weights="weights = torch.softmax(attn_scores.masked_fill(dropped, 0.0), dim=-1)")},
        "fails": {"test_drop_keys": "score of 0", "test_drop_keys_statistics": "score of 0"},
        "not_named": ["in-place", "1 - p"],
    },
    "dk_nan_rows": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            weights="weights = torch.softmax(attn_scores.masked_fill(dropped, -torch.inf), dim=-1)")},
        "fails": {"test_drop_keys": "softmax over nothing", "test_drop_keys_statistics": "softmax over nothing"},
        "not_named": ["masked_fill_", "no division by 1 - p", "one per weight"],
    },
    "dk_inverted_dropout_after_softmax": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            weights="weights = torch.softmax(attn_scores, dim=-1).masked_fill(dropped, 0.0) / (1 - p)")},
        "fails": {"test_drop_keys": "after the softmax"},
        "not_named": ["masked_fill_", "one per weight", "softmax over nothing"],
    },
    "dk_renormalised_then_scaled": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            weights="weights = torch.softmax(attn_scores.masked_fill(dropped, -torch.inf), dim=-1)\n"
                    "    weights = torch.nan_to_num(weights, nan=0.0) / (1 - p)")},
        "fails": {"test_drop_keys": "no division by 1 - p"},
        "not_named": ["masked_fill_", "one per weight", "softmax over nothing"],
    },
    "dk_scores_filled_in_place": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            weights="weights = torch.softmax(attn_scores.masked_fill_(dropped, -torch.inf), dim=-1)\n"
                    "    weights = torch.nan_to_num(weights, nan=0.0)")},
        "fails": {"test_drop_keys": "masked_fill_"},
        "not_named": ["1 - p", "one per weight"],
    },
    "dk_ignores_generator": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            draw="dropped = torch.rand(attn_scores.shape[:-2] + (1, attn_scores.shape[-1])) < p")},
        "fails": {"test_drop_keys": "generator=generator", "test_drop_keys_statistics": "generator"},
        "not_named": ["masked_fill_", "one per weight", "softmax over nothing"],
    },
    "dk_keeps_with_probability_p": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            draw="dropped = torch.rand(attn_scores.shape[:-2] + (1, attn_scores.shape[-1]), generator=generator) > p")},
        "fails": {
            "test_drop_keys": "keeps a key with probability p",
            "test_drop_keys_statistics": "keeps a key with probability p",
        },
        "not_named": ["masked_fill_", "one per weight", "softmax over nothing"],
    },
    "dk_ignores_training": {
        "kind": "mistake",
        "cells": {"drop_keys": '''def drop_keys(attn_scores, p, training=True, generator=None):
    if not 0 <= p <= 1:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    T_k = attn_scores.size(-1)
    keep = torch.rand(*attn_scores.shape[:-2], 1, T_k, generator=generator) >= p
    scores = attn_scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)
'''},
        "fails": {"test_drop_keys": "training"},
        "not_named": ["masked_fill_", "one per weight", "softmax over nothing"],
    },
    "dk_keys_counted_from_queries": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(
            draw="dropped = torch.rand(attn_scores.shape[:-2] + (1, attn_scores.shape[-2]), generator=generator) < p")},
        "fails": {"test_drop_keys": "T_k", "test_drop_keys_statistics": "T_k"},
        "not_named": ["masked_fill_", "softmax over nothing"],
    },
    "dk_no_argument_check": {
        "kind": "mistake",
        "cells": {"drop_keys": _dk(check="pass")},
        "fails": {"test_drop_keys": "ValueError"},
        "not_named": ["masked_fill_", "one per weight", "softmax over nothing"],
    },
    # Correct code in other styles: must get full marks
    "correct_raschka_style": {
        "kind": "correct",
        "cells": {
            "dropout": '''def dropout(x, p, training=True, generator=None):
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got p={p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return torch.zeros_like(x)
    mask = torch.bernoulli(torch.full(x.shape, 1 - p), generator=generator)
    return x * mask / (1 - p)
''',
            "causal_attention": _ca(),
            "drop_keys": _dk(),
        },
    },
    "correct_nanogpt_style": {
        "kind": "correct",
        "cells": {
            "dropout": '''def dropout(x, p, training=True, generator=None):
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"p must be a probability in [0, 1], got p={p!r}")
    if not training or p == 0:
        return x
    keep_prob = 1.0 - p
    keep = torch.rand(x.shape, generator=generator) < keep_prob
    return torch.where(keep, x / max(keep_prob, 1e-12), torch.zeros_like(x))
''',
            "causal_attention": '''import math


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(diagonal=1))

    def forward(self, x):
        B, T, C = x.size()
        if T > self.mask.size(0):
            raise ValueError(f"cannot forward sequence of length {T}, context_length is only {self.mask.size(0)}")
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        att = torch.softmax(att, dim=-1)
        att = self.dropout(att)
        return att @ v
''',
            "drop_keys": '''def drop_keys(attn_scores, p, training=True, generator=None):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got p={p}")
    weights = torch.softmax(attn_scores, dim=-1)
    if not training or p == 0:
        return weights
    *lead, T_q, T_k = attn_scores.shape
    keep = torch.bernoulli(torch.full((*lead, 1, T_k), 1.0 - p), generator=generator)
    weights = weights * keep
    total = weights.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, weights / total.clamp_min(1e-30), torch.zeros_like(weights))
''',
        },
    },
    "correct_d2l_style": {
        "kind": "correct",
        "cells": {
            "dropout": '''def dropout(x, p, training=True, generator=None):
    if not isinstance(p, (int, float)) or p < 0 or p > 1:
        raise ValueError(f"invalid dropout probability p={p}")
    if not training or p == 0:
        return x
    if p == 1:
        return torch.zeros_like(x)
    mask = (torch.rand(x.shape, generator=generator) > p).float()
    return mask * x / (1.0 - p)
''',
            "causal_attention": '''import math


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.arange(context_length)[None, :] > torch.arange(context_length)[:, None])

    def masked_softmax(self, X, mask):
        X = X.masked_fill(mask, -1e6)
        return nn.functional.softmax(X, dim=-1)

    def forward(self, x):
        num_steps = x.shape[1]
        if num_steps > self.mask.shape[-1]:
            raise ValueError(f"{num_steps} steps do not fit context_length {self.mask.shape[-1]}")
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = self.masked_softmax(scores, self.mask[:num_steps, :num_steps])
        return torch.bmm(self.dropout(self.attention_weights), values)
''',
            "drop_keys": '''def drop_keys(attn_scores, p, training=True, generator=None):
    if p < 0 or p > 1:
        raise ValueError(f"drop_keys: p={p} is not a probability")
    if not training or p == 0:
        return attn_scores.softmax(dim=-1)
    key_shape = list(attn_scores.shape)
    key_shape[-2] = 1
    dropped = torch.rand(key_shape, generator=generator) < p
    scores = torch.where(dropped, torch.full_like(attn_scores, -torch.inf), attn_scores)
    row_max = scores.amax(dim=-1, keepdim=True)
    e = torch.where(scores.isfinite(), (scores - row_max.nan_to_num(0.0, neginf=0.0)).exp(), torch.zeros_like(scores))
    s = e.sum(dim=-1, keepdim=True)
    return torch.where(s > 0, e / s.clamp_min(1e-30), torch.zeros_like(e))
''',
        },
    },
}
