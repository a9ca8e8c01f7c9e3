"""Held-out mistakes for step 03, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 3 (SelfAttention_v1/v2, keys.T, attn_scores / keys.shape[-1] ** 0.5, the
exercise 3.1 weight transfer), nanoGPT (k.transpose(1, 2), math.sqrt of the head size), d2l (dividing by d, bmm),
CS336-style (einsum over "... q d, ... k d"), plain nn.Parameter / copy_ code. `fails` words name the actual
mistake; "correct" variants are other people's correct code, which must get full marks.
"""

_V1 = '''class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        {init}

    def forward(self, x):
        {forward}
'''
_V1_DEFAULTS = dict(
    init="self.W_query = nn.Parameter(torch.rand(d_in, d_out))\n"
         "        self.W_key = nn.Parameter(torch.rand(d_in, d_out))\n"
         "        self.W_value = nn.Parameter(torch.rand(d_in, d_out))",
    forward="keys = x @ self.W_key\n"
            "        queries = x @ self.W_query\n"
            "        values = x @ self.W_value\n"
            "        attn_scores = queries @ keys.transpose(-2, -1)\n"
            "        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)\n"
            "        return attn_weights @ values",
)


def _v1(**changes):
    return _V1.format(**{**_V1_DEFAULTS, **changes})


_V2 = '''class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias={bias})
        self.W_key = nn.Linear(d_in, d_out, bias={bias})
        self.W_value = nn.Linear(d_in, d_out, bias={bias})

    def forward(self, x):
        keys = {keys}
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_weights = torch.softmax(attn_scores / {scale} ** 0.5, dim=-1)
        return attn_weights @ values
'''
_V2_DEFAULTS = dict(bias="qkv_bias", keys="self.W_key(x)", scale="keys.shape[-1]")


def _v2(**changes):
    return _V2.format(**{**_V2_DEFAULTS, **changes})


_SDPA = '''def scaled_dot_product_attention(queries, keys, values):
    d_k = keys.shape[-1]
    attn_scores = {scores}
    attn_weights = {weights}
    return attn_weights @ values
'''
_SDPA_DEFAULTS = dict(scores="queries @ keys.transpose(-2, -1)",
                      weights="torch.softmax(attn_scores / d_k ** 0.5, dim=-1)")


def _sdpa(**changes):
    return _SDPA.format(**{**_SDPA_DEFAULTS, **changes})


_BIASED = '''def transfer_biased_v2_to_v1(sa_v2, sa_v1):
    for name in ("W_query", "W_key", "W_value"):
        layer, target = getattr(sa_v2, name), getattr(sa_v1, name)
        d_out, d_in = layer.weight.shape
        {check}
        {bias}
        with torch.no_grad():
            target.copy_({stack})
    return sa_v1
'''
_BIASED_DEFAULTS = dict(
    check="if tuple(target.shape) != (d_in + 1, d_out):\n"
          "            raise ValueError(f\"sa_v1.{name} is {tuple(target.shape)}, needs {(d_in + 1, d_out)}\")",
    bias="bias = layer.bias if layer.bias is not None else torch.zeros(d_out)",
    stack="torch.cat([layer.weight.T, bias[None, :]], dim=0)",
)


def _biased(**changes):
    return _BIASED.format(**{**_BIASED_DEFAULTS, **changes})


VARIANTS = {
    # Part 1: scaled_dot_product_attention
    "sdpa_divided_by_d_k": {
        "kind": "mistake",
        "cells": {"scaled_dot_product_attention": _sdpa(weights="torch.softmax(attn_scores / d_k, dim=-1)")},
        "fails": {"test_scaled_dot_product_attention": "square root"},
        "not_named": [".T", "in place", "d_v", "after the softmax"],
    },
    "sdpa_scaled_by_value_width": {
        "kind": "mistake",
        "cells": {"scaled_dot_product_attention": '''def scaled_dot_product_attention(queries, keys, values):
    d = values.size(-1)
    scores = torch.matmul(queries, keys.transpose(-2, -1)) / math.sqrt(d)
    return torch.matmul(torch.softmax(scores, dim=-1), values)
'''},
        "fails": {"test_scaled_dot_product_attention": "d_v"},
        "not_named": [".T", "in place", "after the softmax"],
    },
    "sdpa_keys_dot_T": {
        "kind": "mistake",
        "cells": {"scaled_dot_product_attention": _sdpa(scores="queries @ keys.T")},
        "fails": {"test_scaled_dot_product_attention": ".T"},
        "not_named": ["square root", "in place", "d_v"],
    },
    "sdpa_nanogpt_transpose_1_2": {
        "kind": "mistake",
        "cells": {"scaled_dot_product_attention": '''def scaled_dot_product_attention(queries, keys, values):
    att = (queries @ keys.transpose(1, 2)) * (1.0 / math.sqrt(keys.size(-1)))
    att = torch.softmax(att, dim=-1)
    return att @ values
'''},
        "fails": {"test_scaled_dot_product_attention": "last two"},
        "not_named": ["square root", "in place", "d_v"],
    },
    "sdpa_divides_the_weights": {
        "kind": "mistake",
        "cells": {"scaled_dot_product_attention": _sdpa(
            weights="torch.softmax(attn_scores, dim=-1) / d_k ** 0.5")},
        "fails": {"test_scaled_dot_product_attention": "after the softmax"},
        "not_named": [".T", "in place", "d_v"],
    },
    "sdpa_queries_scaled_in_place": {
        "kind": "mistake",
        "cells": {"scaled_dot_product_attention": '''def scaled_dot_product_attention(queries, keys, values):
    queries /= math.sqrt(keys.shape[-1])
    scores = queries @ keys.transpose(-2, -1)
    return torch.softmax(scores, dim=-1) @ values
'''},
        "fails": {"test_scaled_dot_product_attention": "in place"},
        "not_named": [".T", "square root", "d_v"],
    },
    # Part 2: SelfAttention_v1
    "v1_randn_weights": {
        "kind": "mistake",
        "cells": {"self_attention_v1": _v1(init="self.W_query = nn.Parameter(torch.randn(d_in, d_out))\n"
                                                "        self.W_key = nn.Parameter(torch.randn(d_in, d_out))\n"
                                                "        self.W_value = nn.Parameter(torch.randn(d_in, d_out))")},
        "fails": {"test_self_attention_v1": "uniform"},
        "not_named": ["nn.Parameter", "(d_in, d_out)", ".T"],
    },
    "v1_plain_tensors": {
        "kind": "mistake",
        "cells": {"self_attention_v1": _v1(init="self.W_query = torch.rand(d_in, d_out, requires_grad=True)\n"
                                                "        self.W_key = torch.rand(d_in, d_out, requires_grad=True)\n"
                                                "        self.W_value = torch.rand(d_in, d_out, requires_grad=True)")},
        "fails": {"test_self_attention_v1": "nn.Parameter"},
        "not_named": ["uniform", ".T"],
    },
    "v1_linear_layout": {
        "kind": "mistake",
        "cells": {"self_attention_v1": _v1(
            init="self.W_query = nn.Parameter(torch.rand(d_out, d_in))\n"
                 "        self.W_key = nn.Parameter(torch.rand(d_out, d_in))\n"
                 "        self.W_value = nn.Parameter(torch.rand(d_out, d_in))",
            forward="queries = x @ self.W_query.T\n"
                    "        keys = x @ self.W_key.T\n"
                    "        values = x @ self.W_value.T\n"
                    "        w = torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1)\n"
                    "        return w @ values")},
        "fails": {"test_self_attention_v1": "(d_in, d_out)", "test_transfer_weights_v2_to_v1": "(d_in, d_out)"},
        "not_named": ["uniform", "nn.Parameter"],
    },
    # Part 3: SelfAttention_v2
    "v2_weight_not_transposed": {
        "kind": "mistake",
        "cells": {"self_attention_v2": _v2(keys="x @ self.W_key.weight + (self.W_key.bias "
                                                "if self.W_key.bias is not None else 0)")},
        "fails": {"test_self_attention_v2": "(d_out, d_in)"},
        "not_named": ["qkv_bias", "sqrt(d_in"],
    },
    "v2_bias_always_on": {
        "kind": "mistake",
        "cells": {"self_attention_v2": _v2(bias="True")},
        "fails": {"test_self_attention_v2": "qkv_bias"},
        "not_named": ["(d_out, d_in)", "d_in"],
    },
    "v2_scaled_by_d_in": {
        "kind": "mistake",
        "cells": {"self_attention_v2": _v2(scale="x.shape[-1]")},
        "fails": {"test_self_attention_v2": "d_in"},
        "not_named": ["qkv_bias", "(d_out, d_in)"],
    },
    # Part 4: transfer_weights_v2_to_v1
    "transfer_raschka_no_transpose": {
        "kind": "mistake",
        "cells": {"transfer_weights_v2_to_v1": '''def transfer_weights_v2_to_v1(sa_v2, sa_v1):
    sa_v1.W_query = torch.nn.Parameter(sa_v2.W_query.weight)
    sa_v1.W_key = torch.nn.Parameter(sa_v2.W_key.weight)
    sa_v1.W_value = torch.nn.Parameter(sa_v2.W_value.weight)
    return sa_v1
'''},
        "fails": {"test_transfer_weights_v2_to_v1": "transpose"},
        "not_named": ["no_grad"],
    },
    "transfer_copy_without_no_grad": {
        "kind": "mistake",
        "cells": {"transfer_weights_v2_to_v1": '''def transfer_weights_v2_to_v1(sa_v2, sa_v1):
    for name in ("W_query", "W_key", "W_value"):
        getattr(sa_v1, name).copy_(getattr(sa_v2, name).weight.T)
    return sa_v1
'''},
        "fails": {"test_transfer_weights_v2_to_v1": "no_grad"},
        "not_named": ["transpose"],
    },
    # Part 5: transfer_biased_v2_to_v1
    "biased_bias_row_first": {
        "kind": "mistake",
        "cells": {"transfer_biased_v2_to_v1": _biased(stack="torch.cat([bias[None, :], layer.weight.T], dim=0)")},
        "fails": {"test_transfer_biased_v2_to_v1": "last row", "test_transfer_biased_v2_to_v1_cases": "last row"},
        "not_named": ["None", "ValueError", "transpose"],
    },
    "biased_assumes_a_bias": {
        "kind": "mistake",
        "cells": {"transfer_biased_v2_to_v1": _biased(bias="bias = layer.bias")},
        "fails": {"test_transfer_biased_v2_to_v1_cases": "None"},
        "not_named": ["last row", "ValueError"],
    },
    "biased_no_size_check": {
        "kind": "mistake",
        "cells": {"transfer_biased_v2_to_v1": _biased(check="pass")},
        "fails": {"test_transfer_biased_v2_to_v1_cases": "ValueError"},
        "not_named": ["last row", "None"],
    },
    # Part 6: drop_idle_biases
    "drop_query_bias": {
        "kind": "mistake",
        "cells": {"drop_idle_biases": '''def drop_idle_biases(sa_v2):
    if sa_v2.W_query.bias is not None:
        with torch.no_grad():
            sa_v2.W_query.bias.zero_()
    return sa_v2
'''},
        "fails": {"test_drop_idle_biases": "query"},
        "not_named": ["value bias", "None"],
    },
    "drop_key_and_value_biases": {
        "kind": "mistake",
        "cells": {"drop_idle_biases": '''def drop_idle_biases(sa_v2):
    for layer in (sa_v2.W_key, sa_v2.W_value):
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)
    return sa_v2
'''},
        "fails": {"test_drop_idle_biases": "value"},
        "not_named": ["query bias", "None"],
    },
    # Correct code in other styles: must get full marks
    "correct_raschka_style": {
        "kind": "correct",
        "cells": {
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(queries, keys, values):
    attn_scores = queries @ keys.transpose(-2, -1)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values
''',
            "self_attention_v1": _v1(),
            "self_attention_v2": _v2(),
            "transfer_weights_v2_to_v1": '''def transfer_weights_v2_to_v1(sa_v2, sa_v1):
    sa_v1.W_query = torch.nn.Parameter(sa_v2.W_query.weight.T.clone())
    sa_v1.W_key = torch.nn.Parameter(sa_v2.W_key.weight.T.clone())
    sa_v1.W_value = torch.nn.Parameter(sa_v2.W_value.weight.T.clone())
    return sa_v1
''',
            "transfer_biased_v2_to_v1": _biased(),
            "drop_idle_biases": '''def drop_idle_biases(sa_v2):
    # q_i . (k_j + b_k) = q_i . k_j + q_i . b_k: the second term is the same for every key j
    if sa_v2.W_key.bias is not None:
        with torch.no_grad():
            sa_v2.W_key.bias.zero_()
    return sa_v2
''',
        },
    },
    "correct_einsum_style": {
        "kind": "correct",
        "cells": {
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(queries, keys, values):
    scale = 1.0 / math.sqrt(keys.size(-1))
    scores = torch.einsum("...qd,...kd->...qk", queries, keys) * scale
    scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = scores.exp()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return torch.einsum("...qk,...kv->...qv", weights, values)
''',
            "self_attention_v1": '''class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        for name in ("W_query", "W_key", "W_value"):
            self.register_parameter(name, nn.Parameter(torch.rand(d_in, d_out)))

    def forward(self, x):
        q = torch.matmul(x, self.W_query)
        k = torch.matmul(x, self.W_key)
        v = torch.matmul(x, self.W_value)
        return scaled_dot_product_attention(q, k, v)
''',
            "self_attention_v2": '''class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query, self.W_key, self.W_value = (nn.Linear(d_in, d_out, bias=qkv_bias) for _ in range(3))

    def forward(self, x):
        return scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x))
''',
            "transfer_weights_v2_to_v1": '''def transfer_weights_v2_to_v1(sa_v2, sa_v1):
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(sa_v1, name).copy_(getattr(sa_v2, name).weight.t())
    return sa_v1
''',
            "transfer_biased_v2_to_v1": '''def transfer_biased_v2_to_v1(sa_v2, sa_v1):
    for name in ("W_query", "W_key", "W_value"):
        layer, matrix = getattr(sa_v2, name), getattr(sa_v1, name)
        if matrix.shape != (layer.in_features + 1, layer.out_features):
            raise ValueError(f"sa_v1.{name} has shape {tuple(matrix.shape)}")
        bias = layer.bias if layer.bias is not None else layer.weight.new_zeros(layer.out_features)
        matrix.data = torch.vstack([layer.weight.detach().T, bias.detach()]).clone()
    return sa_v1
''',
            "drop_idle_biases": '''def drop_idle_biases(sa_v2):
    bias = sa_v2.W_key.bias
    if bias is not None:
        bias.data.zero_()
    return sa_v2
''',
        },
    },
}
