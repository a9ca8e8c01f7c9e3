"""Submission bank for step 03: correct variants written another way, and common mistakes."""

SDPA = "scaled_dot_product_attention"
V1 = "self_attention_v1"
V2 = "self_attention_v2"
TRANSFER = "transfer_weights_v2_to_v1"
TEST_SDPA = "test_scaled_dot_product_attention"
TEST_V1 = "test_self_attention_v1"
TEST_V2 = "test_self_attention_v2"
TEST_TRANSFER = "test_transfer_weights_v2_to_v1"
BIASED = "transfer_biased_v2_to_v1"
TEST_BIASED = "test_transfer_biased_v2_to_v1"
TEST_BIASED_CASES = "test_transfer_biased_v2_to_v1_cases"


def sdpa(body):
    return "def scaled_dot_product_attention(queries, keys, values):\n" + body


def v1(init, forward):
    return ("class SelfAttention_v1(nn.Module):\n"
            "    def __init__(self, d_in, d_out):\n"
            "        super().__init__()\n" + init +
            "\n    def forward(self, x):\n" + forward)


def v2(init, forward):
    return ("class SelfAttention_v2(nn.Module):\n"
            "    def __init__(self, d_in, d_out, qkv_bias=False):\n"
            "        super().__init__()\n" + init +
            "\n    def forward(self, x):\n" + forward)


def transfer(body):
    return "def transfer_weights_v2_to_v1(sa_v2, sa_v1):\n" + body


def biased(body):
    return "def transfer_biased_v2_to_v1(sa_v2, sa_v1):\n" + body


# Part 5's size check, as a student might write it, in front of each variant that is about something else
SIZE_CHECK = ("    d_out, d_in = sa_v2.W_query.weight.shape\n"
              "    if any(tuple(getattr(sa_v1, n).shape) != (d_in + 1, d_out) for n in ('W_query', 'W_key', 'W_value')):\n"
              "        raise ValueError(f'sa_v1 needs ({d_in + 1}, {d_out}) matrices')\n")


V1_INIT = ("        self.W_query = nn.Parameter(torch.rand(d_in, d_out))\n"
           "        self.W_key = nn.Parameter(torch.rand(d_in, d_out))\n"
           "        self.W_value = nn.Parameter(torch.rand(d_in, d_out))\n")
V2_INIT = ("        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
           "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
           "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n")


def attention_tail(transpose="keys.transpose(-2, -1)", scale="keys.shape[-1] ** 0.5"):
    return (f"        attn_weights = torch.softmax(queries @ {transpose} / {scale}, dim=-1)\n"
            "        return attn_weights @ values\n")


V1_PROJECT = "        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value\n"
V2_PROJECT = "        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)\n"

VARIANTS = {
    # ---------------------------------------------------------------- correct, written another way
    "einsum": {
        "kind": "correct",
        "cells": {
            SDPA: sdpa("    scores = torch.einsum('...qd,...kd->...qk', queries, keys)\n"
                       "    weights = torch.softmax(scores / math.sqrt(keys.shape[-1]), dim=-1)\n"
                       "    return torch.einsum('...qk,...kv->...qv', weights, values)\n"),
            V1: v1(V1_INIT,
                   "        q = torch.einsum('...ti,io->...to', x, self.W_query)\n"
                   "        k = torch.einsum('...ti,io->...to', x, self.W_key)\n"
                   "        v = torch.einsum('...ti,io->...to', x, self.W_value)\n"
                   "        w = torch.einsum('...qd,...kd->...qk', q, k).div(k.shape[-1] ** 0.5).softmax(dim=-1)\n"
                   "        return torch.einsum('...qk,...kv->...qv', w, v)\n"),
        },
    },
    "functional_softmax_matmul_math_sqrt": {
        "kind": "correct",
        "cells": {
            SDPA: "import torch.nn.functional as F\n\n\n" + sdpa(
                "    d_k = keys.size(-1)\n"
                "    attn_scores = torch.matmul(queries, keys.mT)\n"
                "    attn_weights = F.softmax(attn_scores / math.sqrt(d_k), dim=attn_scores.dim() - 1)\n"
                "    return torch.matmul(attn_weights, values)\n"),
            V2: "import torch.nn.functional as F\n\n\n" + v2(
                V2_INIT,
                "        queries = self.W_query(x)\n"
                "        keys = self.W_key(x)\n"
                "        values = self.W_value(x)\n"
                "        scores = torch.matmul(queries, keys.transpose(-1, -2)) / math.sqrt(keys.size(-1))\n"
                "        return torch.matmul(F.softmax(scores, dim=-1), values)\n"),
        },
    },
    "scale_queries_before_product": {
        "kind": "correct",
        "cells": {SDPA: sdpa("    queries = queries / math.sqrt(keys.shape[-1])\n"
                             "    return torch.softmax(queries @ keys.mT, dim=-1) @ values\n")},
    },
    "scale_keys_before_product": {
        "kind": "correct",
        "cells": {SDPA: sdpa("    scaled_keys = keys * keys.shape[-1] ** -0.5\n"
                             "    return torch.softmax(queries @ scaled_keys.transpose(-2, -1), dim=-1) @ values\n")},
    },
    "layers_in_other_order_forward_calls_part1": {
        "kind": "correct",
        "cells": {
            V1: v1("        self.W_value = nn.Parameter(torch.rand(d_in, d_out))\n"
                   "        self.W_key = nn.Parameter(torch.rand(d_in, d_out))\n"
                   "        self.W_query = nn.Parameter(torch.rand(d_in, d_out))\n",
                   "        return scaled_dot_product_attention(x @ self.W_query, x @ self.W_key, x @ self.W_value)\n"),
            V2: v2("        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                   "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                   "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n",
                   "        return scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x))\n"),
        },
    },
    "helper_attributes_and_setattr": {
        "kind": "correct",
        "cells": {
            V1: v1("        self.d_in, self.d_out = d_in, d_out\n"
                   "        for name in ('W_query', 'W_key', 'W_value'):\n"
                   "            setattr(self, name, nn.Parameter(torch.rand(d_in, d_out)))\n",
                   "        weights = (self.W_query, self.W_key, self.W_value)\n"
                   "        queries, keys, values = (torch.matmul(x, w) for w in weights)\n"
                   + attention_tail(scale="math.sqrt(self.d_out)")),
            V2: v2("        self.scale = 1.0 / math.sqrt(d_out)\n"
                   "        layers = (nn.Linear(d_in, d_out, qkv_bias) for _ in range(3))\n"
                   "        self.W_query, self.W_key, self.W_value = layers\n",
                   "        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)\n"
                   "        attn_weights = (queries @ keys.transpose(-2, -1) * self.scale).softmax(-1)\n"
                   "        return attn_weights @ values\n"),
        },
    },
    "transfer_assigns_new_parameters": {  # the book's way with copies: new nn.Parameter objects on the same module
        "kind": "correct",
        "cells": {TRANSFER: transfer("    sa_v1.W_query = nn.Parameter(sa_v2.W_query.weight.T.clone())\n"
                                     "    sa_v1.W_key = nn.Parameter(sa_v2.W_key.weight.detach().T.clone())\n"
                                     "    sa_v1.W_value = nn.Parameter(sa_v2.W_value.weight.T.clone())\n")},
    },
    "transfer_load_state_dict": {
        "kind": "correct",
        "cells": {TRANSFER: transfer("    state = sa_v2.state_dict()\n"
                                     "    sa_v1.load_state_dict({name: state[name + '.weight'].T\n"
                                     "                           for name in ('W_query', 'W_key', 'W_value')})\n"
                                     "    return sa_v1\n")},
    },
    "transfer_data_attribute_loop": {
        "kind": "correct",
        "cells": {TRANSFER: transfer("    for name in ('W_query', 'W_key', 'W_value'):\n"
                                     "        weight = getattr(sa_v2, name).weight\n"
                                     "        getattr(sa_v1, name).data = weight.data.t().clone()\n"
                                     "    return sa_v1\n")},
    },
    # ---------------------------------------------------------------- common mistakes
    "no_scaling": {
        "kind": "mistake",
        "cells": {SDPA: sdpa("    return torch.softmax(queries @ keys.transpose(-2, -1), dim=-1) @ values\n")},
        "fails": {TEST_SDPA: "not scaled"},
    },
    "scale_by_d_k_not_its_root": {
        "kind": "mistake",
        "cells": {SDPA: sdpa("    scores = queries @ keys.transpose(-2, -1) / keys.shape[-1]\n"
                             "    return torch.softmax(scores, dim=-1) @ values\n")},
        "fails": {TEST_SDPA: "instead of its square root"},
    },
    "scale_by_values_width": {
        "kind": "mistake",
        "cells": {SDPA: sdpa("    scores = queries @ keys.transpose(-2, -1) / math.sqrt(values.shape[-1])\n"
                             "    return torch.softmax(scores, dim=-1) @ values\n")},
        "fails": {TEST_SDPA: "width of the values"},
    },
    "softmax_over_queries": {
        "kind": "mistake",
        "cells": {SDPA: sdpa("    scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])\n"
                             "    return torch.softmax(scores, dim=-2) @ values\n")},
        "fails": {TEST_SDPA: "softmax over the wrong dimension"},
    },
    "softmax_dim_0": {
        "kind": "mistake",
        "cells": {SDPA: sdpa("    scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])\n"
                             "    return torch.softmax(scores, dim=0) @ values\n")},
        "fails": {TEST_SDPA: "softmax over the wrong dimension"},
    },
    "dot_T_on_batches": {
        "kind": "mistake",
        "cells": {SDPA: sdpa("    scores = queries @ keys.T / math.sqrt(keys.shape[-1])\n"
                             "    return torch.softmax(scores, dim=-1) @ values\n")},
        "fails": {TEST_SDPA: "transpose(-2, -1)"},
    },
    "divides_queries_in_place": {
        "kind": "mistake",
        "cells": {SDPA: sdpa("    queries /= math.sqrt(keys.shape[-1])\n"
                             "    return torch.softmax(queries @ keys.transpose(-2, -1), dim=-1) @ values\n")},
        "fails": {TEST_SDPA: "out-of-place"},
    },
    "v1_scales_by_d_in": {
        "kind": "mistake",
        "cells": {V1: v1(V1_INIT, V1_PROJECT + attention_tail(scale="x.shape[-1] ** 0.5"))},
        "fails": {TEST_V1: "not by the input width d_in"},
    },
    "v2_scales_by_d_in": {
        "kind": "mistake",
        "cells": {V2: v2("        self.d_in = d_in\n" + V2_INIT,
                         V2_PROJECT + attention_tail(scale="math.sqrt(self.d_in)"))},
        "fails": {TEST_V2: "not by the input width d_in"},
    },
    "v1_dot_T_on_batches": {
        "kind": "mistake",
        "cells": {V1: v1(V1_INIT, V1_PROJECT + attention_tail(transpose="keys.T"))},
        "fails": {TEST_V1: "transpose(-2, -1)"},
    },
    "v1_forward_reads_global_inputs": {
        "kind": "mistake",
        "cells": {V1: v1(V1_INIT,
                         "        queries = inputs @ self.W_query\n"
                         "        keys, values = inputs @ self.W_key, inputs @ self.W_value\n"
                         + attention_tail())},
        "fails": {TEST_V1: "global `inputs`"},
    },
    "v2_forward_reads_global_inputs": {
        "kind": "mistake",
        "cells": {V2: v2(V2_INIT,
                         "        queries = self.W_query(inputs)\n"
                         "        keys, values = self.W_key(inputs), self.W_value(inputs)\n"
                         + attention_tail())},
        "fails": {TEST_V2: "global `inputs`"},
    },
    "v1_forward_reads_global_values": {
        # `values` of the Part 1 test cell equals inputs @ the lesson's W_value: the visible tests pass
        "kind": "mistake",
        "cells": {V1: v1(V1_INIT,
                         "        queries, keys = x @ self.W_query, x @ self.W_key\n" + attention_tail())},
        "fails": {TEST_V1: "notebook globals"},
    },
    "v2_forward_reads_global_values": {
        "kind": "mistake",
        "cells": {V2: v2(V2_INIT,
                         "        queries, keys = self.W_query(x), self.W_key(x)\n" + attention_tail())},
        "fails": {TEST_V2: "notebook globals"},
    },
    "v1_plain_tensors": {
        "kind": "mistake",
        "cells": {V1: v1("        self.W_query = torch.rand(d_in, d_out)\n"
                         "        self.W_key = torch.rand(d_in, d_out)\n"
                         "        self.W_value = torch.rand(d_in, d_out)\n",
                         V1_PROJECT + attention_tail())},
        "fails": {TEST_V1: "not registered"},
    },
    "v2_ignores_qkv_bias": {
        "kind": "mistake",
        "cells": {V2: v2("        self.W_query = nn.Linear(d_in, d_out, bias=False)\n"
                         "        self.W_key = nn.Linear(d_in, d_out, bias=False)\n"
                         "        self.W_value = nn.Linear(d_in, d_out, bias=False)\n",
                         V2_PROJECT + attention_tail())},
        "fails": {TEST_V2: "qkv_bias"},
    },
    "transfer_copies_without_transposing": {
        "kind": "mistake",
        "cells": {TRANSFER: transfer("    with torch.no_grad():\n"
                                     "        sa_v1.W_query.copy_(sa_v2.W_query.weight)\n"
                                     "        sa_v1.W_key.copy_(sa_v2.W_key.weight)\n"
                                     "        sa_v1.W_value.copy_(sa_v2.W_value.weight)\n"
                                     "    return sa_v1\n")},
        "fails": {TEST_TRANSFER: "transpose the weight"},
    },
    "transfer_assigns_without_transposing": {
        "kind": "mistake",
        "cells": {TRANSFER: transfer("    sa_v1.W_query = nn.Parameter(sa_v2.W_query.weight)\n"
                                     "    sa_v1.W_key = nn.Parameter(sa_v2.W_key.weight)\n"
                                     "    sa_v1.W_value = nn.Parameter(sa_v2.W_value.weight)\n"
                                     "    return sa_v1\n")},
        "fails": {TEST_TRANSFER: "transposed weight"},
    },
    "transfer_builds_a_new_module": {
        "kind": "mistake",
        "cells": {TRANSFER: transfer("    d_out, d_in = sa_v2.W_query.weight.shape\n"
                                     "    new = SelfAttention_v1(d_in, d_out)\n"
                                     "    with torch.no_grad():\n"
                                     "        new.W_query.copy_(sa_v2.W_query.weight.T)\n"
                                     "        new.W_key.copy_(sa_v2.W_key.weight.T)\n"
                                     "        new.W_value.copy_(sa_v2.W_value.weight.T)\n"
                                     "    return new\n")},
        "fails": {TEST_TRANSFER: "in place"},
    },
    # the book's way (Exercise 3.1): each nn.Parameter is a view of sa_v2's weight; Part 4 does not ask for copies
    "transfer_shares_storage_with_v2": {
        "kind": "correct",
        "cells": {TRANSFER: transfer("    sa_v1.W_query = nn.Parameter(sa_v2.W_query.weight.T)\n"
                                     "    sa_v1.W_key = nn.Parameter(sa_v2.W_key.weight.T)\n"
                                     "    sa_v1.W_value = nn.Parameter(sa_v2.W_value.weight.T)\n"
                                     "    return sa_v1\n")},
    },
    "transfer_without_no_grad": {
        "kind": "mistake",
        "cells": {TRANSFER: transfer("    sa_v1.W_query.copy_(sa_v2.W_query.weight.T)\n"
                                     "    sa_v1.W_key.copy_(sa_v2.W_key.weight.T)\n"
                                     "    sa_v1.W_value.copy_(sa_v2.W_value.weight.T)\n"
                                     "    return sa_v1\n")},
        "fails": {TEST_TRANSFER: "torch.no_grad()"},
    },
    # ---------------------------------------------------------------- Part 5: biases folded into the matrices
}

VARIANTS.update({
    "biased_slices_under_no_grad": {
        "kind": "correct",
        "cells": {BIASED: biased(
            "    for name in ('W_query', 'W_key', 'W_value'):\n"
            "        layer, matrix = getattr(sa_v2, name), getattr(sa_v1, name)\n"
            "        d_out, d_in = layer.weight.shape\n"
            "        if tuple(matrix.shape) != (d_in + 1, d_out):\n"
            "            raise ValueError(f'sa_v1.{name} is {tuple(matrix.shape)}, not ({d_in + 1}, {d_out})')\n"
            "    with torch.no_grad():\n"
            "        for name in ('W_query', 'W_key', 'W_value'):\n"
            "            layer, matrix = getattr(sa_v2, name), getattr(sa_v1, name)\n"
            "            matrix[:-1] = layer.weight.T\n"
            "            matrix[-1] = layer.bias if layer.bias is not None else 0.0\n"
            "    return sa_v1\n")},
    },
    "biased_new_parameters_vstack": {
        "kind": "correct",
        "cells": {BIASED: biased(
            SIZE_CHECK +
            "    for name in ['W_query', 'W_key', 'W_value']:\n"
            "        layer = getattr(sa_v2, name)\n"
            "        bias = torch.zeros(d_out) if layer.bias is None else layer.bias.detach()\n"
            "        setattr(sa_v1, name, nn.Parameter(torch.vstack([layer.weight.detach().t(), bias])))\n"
            "    return sa_v1\n")},
    },
    "biased_homogeneous_matrix_einsum": {  # the (d_in + 1, d_in + 1) affine matrix, applied to the identity's rows
        "kind": "correct",
        "cells": {BIASED: biased(
            SIZE_CHECK +
            "    eye = torch.eye(d_in + 1)\n"
            "    state = {}\n"
            "    for name in ('W_query', 'W_key', 'W_value'):\n"
            "        layer = getattr(sa_v2, name)\n"
            "        out = torch.einsum('ri,oi->ro', eye[:, :d_in], layer.weight.detach())\n"
            "        if layer.bias is not None:\n"
            "            out = out + eye[:, d_in:] * layer.bias.detach()\n"
            "        state[name] = out\n"
            "    sa_v1.load_state_dict(state)\n"
            "    return sa_v1\n")},
    },
    "biased_bias_in_first_row": {
        "kind": "mistake",
        "cells": {BIASED: biased(
            SIZE_CHECK +
            "    state = {}\n"
            "    for name in ('W_query', 'W_key', 'W_value'):\n"
            "        layer = getattr(sa_v2, name)\n"
            "        bias = layer.bias if layer.bias is not None else torch.zeros(d_out)\n"
            "        state[name] = torch.cat([bias[None, :], layer.weight.T])\n"
            "    sa_v1.load_state_dict(state)\n"
            "    return sa_v1\n")},
        "fails": {TEST_BIASED: "first d_in rows", TEST_BIASED_CASES: "first d_in rows"},
    },
    "biased_bias_dropped": {
        "kind": "mistake",
        "cells": {BIASED: biased(
            SIZE_CHECK +
            "    with torch.no_grad():\n"
            "        for name in ('W_query', 'W_key', 'W_value'):\n"
            "            getattr(sa_v1, name).zero_()\n"
            "            getattr(sa_v1, name)[:d_in].copy_(getattr(sa_v2, name).weight.T)\n"
            "    return sa_v1\n")},
        "fails": {TEST_BIASED: "does not depend on x"},
    },
    "biased_fails_without_bias": {
        "kind": "mistake",
        "cells": {BIASED: biased(
            SIZE_CHECK +
            "    with torch.no_grad():\n"
            "        for name in ('W_query', 'W_key', 'W_value'):\n"
            "            layer = getattr(sa_v2, name)\n"
            "            getattr(sa_v1, name).copy_(torch.cat([layer.weight.T, layer.bias[None, :]]))\n"
            "    return sa_v1\n")},
        "fails": {TEST_BIASED_CASES: ".bias is None"},
    },
    "biased_without_value_error": {
        "kind": "mistake",
        "cells": {BIASED: biased(
            "    state = {}\n"
            "    for name in ('W_query', 'W_key', 'W_value'):\n"
            "        layer = getattr(sa_v2, name)\n"
            "        bias = layer.bias if layer.bias is not None else torch.zeros(layer.out_features)\n"
            "        state[name] = torch.cat([layer.weight.T, bias[None, :]])\n"
            "    sa_v1.load_state_dict(state)\n"
            "    return sa_v1\n")},
        "fails": {TEST_BIASED_CASES: "raise ValueError"},
    },
    "biased_new_module": {
        "kind": "mistake",
        "cells": {BIASED: biased(
            SIZE_CHECK +
            "    new = nn.ParameterDict()\n"
            "    for name in ('W_query', 'W_key', 'W_value'):\n"
            "        layer = getattr(sa_v2, name)\n"
            "        bias = layer.bias if layer.bias is not None else torch.zeros(d_out)\n"
            "        new[name] = nn.Parameter(torch.cat([layer.weight.T, bias[None, :]]).detach())\n"
            "    return new\n")},
        "fails": {TEST_BIASED: "in place", TEST_BIASED_CASES: "unchanged"},
    },
})


def idle(body):
    return "def drop_idle_biases(sa_v2):\n" + body


IDLE = "drop_idle_biases"
TEST_IDLE = "test_drop_idle_biases"

VARIANTS.update({
    # Part 5 written as the lesson's transfer, mechanically: the transposed weight alone
    "biased_lesson_transfer": {
        "kind": "mistake",
        "cells": {BIASED: biased(
            "    for name in ('W_query', 'W_key', 'W_value'):\n"
            "        getattr(sa_v1, name).detach().copy_(getattr(sa_v2, name).weight.T)\n"
            "    return sa_v1\n")},
        "fails": {TEST_BIASED: "transfer_biased_v2_to_v1", TEST_BIASED_CASES: "transfer_biased_v2_to_v1"},
    },
    # ---------------------------------------------------------------- Part 6: which biases make a difference
    "idle_key_bias_none": {
        "kind": "correct",
        "cells": {IDLE: idle("    sa_v2.W_key.bias = None  # q_i . b_key is shared by a whole row of scores\n"
                             "    return sa_v2\n")},
    },
    "idle_init_zeros_by_name": {
        "kind": "correct",
        "cells": {IDLE: idle("    for name, layer in sa_v2.named_children():\n"
                             "        if name == 'W_key' and layer.bias is not None:\n"
                             "            nn.init.zeros_(layer.bias)\n"
                             "    return sa_v2\n")},
    },
    # the lesson's module has no biases: zero them all
    "idle_all_biases_zeroed": {
        "kind": "mistake",
        "cells": {IDLE: idle("    with torch.no_grad():\n"
                             "        for layer in (sa_v2.W_query, sa_v2.W_key, sa_v2.W_value):\n"
                             "            if layer.bias is not None:\n"
                             "                layer.bias.zero_()\n"
                             "    return sa_v2\n")},
        "fails": {TEST_IDLE: "context vectors"},
    },
    # both biases of the scores dropped at once
    "idle_query_and_key_zeroed": {
        "kind": "mistake",
        "cells": {IDLE: idle("    for layer in (sa_v2.W_query, sa_v2.W_key):\n"
                             "        layer.bias = None\n"
                             "    return sa_v2\n")},
        "fails": {TEST_IDLE: "context vectors"},
    },
    "idle_nothing_dropped": {
        "kind": "mistake",
        "cells": {IDLE: idle("    return sa_v2\n")},
        "fails": {TEST_IDLE: "left every bias"},
    },
    "idle_crashes_without_bias": {
        "kind": "mistake",
        "cells": {IDLE: idle("    with torch.no_grad():\n"
                             "        sa_v2.W_key.bias.zero_()\n"
                             "    return sa_v2\n")},
        "fails": {TEST_IDLE: "bias=False"},
    },
})

# Rule 3: each transfer part (tests/test_leaks.py) has the lesson's code adapted, the library shortcut, and two correct
# solutions in other styles.
PROOF = {
    TEST_BIASED: {"lesson": ["biased_lesson_transfer"], "shortcut": ["biased_bias_dropped"],
                  "correct": ["biased_slices_under_no_grad", "biased_new_parameters_vstack",
                              "biased_homogeneous_matrix_einsum"]},
    TEST_BIASED_CASES: {"lesson": ["biased_lesson_transfer"], "shortcut": ["biased_fails_without_bias"],
                        "correct": ["biased_slices_under_no_grad", "biased_new_parameters_vstack",
                                    "biased_homogeneous_matrix_einsum"]},
    TEST_IDLE: {"lesson": ["idle_all_biases_zeroed"], "shortcut": ["idle_query_and_key_zeroed"],
                "correct": ["idle_key_bias_none", "idle_init_zeros_by_name"]},
}


# PyTorch's own attention in the part that asks for attention written out: refused from the traced operations.
VARIANTS["sdpa_library_call"] = {
    "kind": "mistake",
    "cells": {"scaled_dot_product_attention":
              "def scaled_dot_product_attention(queries, keys, values):\n"
              "    return torch.nn.functional.scaled_dot_product_attention(queries, keys, values)\n"},
    "fails": {"test_scaled_dot_product_attention": "a library's attention kernel"},
}
