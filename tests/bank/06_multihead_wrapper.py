"""Submission bank for step 06: correct variants written another way, and common mistakes."""

_HEAD = ("class MultiHeadAttentionWrapper(nn.Module):\n"
         "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
         "        super().__init__()\n")
_CHECK = ("        if num_heads < 1:\n"
          "            raise ValueError(f'num_heads must be positive, got {num_heads}')\n")
_HEADS = ("        self.heads = nn.ModuleList(\n"
          "            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])\n")
_FORWARD = ("\n    def forward(self, x):\n"
            "        return torch.cat([head(x) for head in self.heads], dim=-1)\n")


def _wrapper(check=_CHECK, heads=_HEADS, forward=_FORWARD):
    return _HEAD + check + heads + forward


# ALiBi heads as CausalAttention subclasses, the bias built from T in forward: the mistakes below edit one line.
_ALIBI = """class ALiBiHead(CausalAttention):
    def __init__(self, d_in, d_out, context_length, dropout, slope, qkv_bias):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
        self.slope = slope

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        i = torch.arange(T).view(T, 1)
        j = torch.arange(T).view(1, T)
        distance = (i - j).float()
        scores = SCORES
        scores = scores.masked_fill(j > i, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        return self.dropout(w) @ v


class ALiBiWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):
        super().__init__()
CHECK
        self.heads = nn.ModuleList([ALiBiHead(d_in, d_out, context_length, dropout, HEAD_SLOPE, qkv_bias)
                                    for h, s in enumerate(slopes)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
"""
_SLOPES_CHECK = ("        if len(slopes) == 0 or min(slopes) < 0:\n"
                 "            raise ValueError(f'slopes must hold one slope >= 0 per head, got {slopes}')")
_RIGHT = "q @ k.transpose(1, 2) / k.shape[-1] ** 0.5 - self.slope * distance"


def _alibi(scores=_RIGHT, check=_SLOPES_CHECK, head_slope="s"):
    return _ALIBI.replace("SCORES", scores).replace("CHECK", check).replace("HEAD_SLOPE", head_slope)


VARIANTS = {
    "loop_append": {
        "kind": "correct",
        "cells": {
            "multihead_wrapper": _wrapper(
                check="        if not num_heads >= 1:\n"
                      "            raise ValueError('need at least one head (num_heads >= 1)')\n",
                heads="        self.heads = nn.ModuleList()\n"
                      "        for _ in range(num_heads):\n"
                      "            self.heads.append(CausalAttention(d_in, d_out, context_length, dropout,"
                      " qkv_bias=qkv_bias))\n",
                forward="\n    def forward(self, x):\n"
                        "        outputs = []\n"
                        "        for head in self.heads:\n"
                        "            outputs.append(head(x))\n"
                        "        return torch.cat(outputs, dim=2)\n"),
        },
    },
    "stack_and_reshape": {
        "kind": "correct",
        "cells": {
            "multihead_wrapper": _wrapper(
                forward="\n    def forward(self, x):\n"
                        "        stacked = torch.stack([head(x) for head in self.heads], dim=-2)  # (b, T, H, d_out)\n"
                        "        return stacked.reshape(*stacked.shape[:-2], -1)\n"),
            "wrapper_with_output_width":
                "def wrapper_with_output_width(d_in, context_length, width, num_heads, dropout=0.0, qkv_bias=False):\n"
                "    if num_heads < 1:\n"
                "        raise ValueError(f'{num_heads=} must be at least 1')\n"
                "    d_out, rest = divmod(width, num_heads)\n"
                "    if rest:\n"
                "        raise ValueError(f'{num_heads=} does not divide {width=}')\n"
                "    return MultiHeadAttentionWrapper(d_in=d_in, d_out=d_out, context_length=context_length,\n"
                "                                     dropout=dropout, num_heads=num_heads, qkv_bias=qkv_bias)\n",
        },
    },
    "heads_in_python_list": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(
            heads="        self.heads = [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)"
                  " for _ in range(num_heads)]\n")},
        "fails": {"test_wrapper_heads": "nn.ModuleList"},
    },
    "one_head_shared": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(
            heads="        head = CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)\n"
                  "        self.heads = nn.ModuleList([head] * num_heads)\n")},
        "fails": {"test_wrapper_heads": "one head repeated"},
    },
    "heads_deep_copied": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(
            heads="        import copy\n"
                  "        head = CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)\n"
                  "        self.heads = nn.ModuleList([copy.deepcopy(head) for _ in range(num_heads)])\n")},
        "fails": {"test_wrapper_heads": "identical weights"},
    },
    "concatenated_along_tokens": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(
            forward="\n    def forward(self, x):\n"
                    "        return torch.cat([head(x) for head in self.heads], dim=1)\n")},
        "fails": {"test_wrapper_output": "last dimension"},
    },
    "stacked_and_interleaved": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(
            forward="\n    def forward(self, x):\n"
                    "        stacked = torch.stack([head(x) for head in self.heads], dim=-1)  # (b, T, d_out, H)\n"
                    "        return stacked.reshape(*stacked.shape[:-2], -1)\n")},
        "fails": {"test_wrapper_output": "the first d_out columns are the output of self.heads[0]"},
    },
    "dropout_not_passed_to_heads": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(
            heads="        self.heads = nn.ModuleList(\n"
                  "            [CausalAttention(d_in, d_out, context_length, 0.0, qkv_bias) for _ in range(num_heads)])\n")},
        "fails": {"test_wrapper_heads": "the wrapper's dropout probability"},
    },
    "qkv_bias_not_passed": {
        # the visible tests never ask for biases; the registered parameters of Part 2 include them
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(
            heads="        self.heads = nn.ModuleList(\n"
                  "            [CausalAttention(d_in, d_out, context_length, dropout) for _ in range(num_heads)])\n")},
        "fails": {"test_wrapper_output": "pass qkv_bias on", "test_wrapper_heads": "pass qkv_bias on"},
    },
    "no_value_error_for_num_heads": {
        "kind": "mistake",
        "cells": {"multihead_wrapper": _wrapper(check="")},
        "fails": {"test_wrapper_arguments": "did not raise a ValueError"},
    },
    "width_used_as_d_out": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width":
                  "def wrapper_with_output_width(d_in, context_length, width, num_heads, dropout=0.0, qkv_bias=False):\n"
                  "    if num_heads < 1 or width % num_heads:\n"
                  "        raise ValueError(f'width={width} is not a multiple of num_heads={num_heads}')\n"
                  "    return MultiHeadAttentionWrapper(d_in, width, context_length, dropout, num_heads, qkv_bias)\n"},
        "fails": {"test_wrapper_with_output_width": "the output width is d_out * num_heads"},
    },
    "width_not_checked": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width":
                  "def wrapper_with_output_width(d_in, context_length, width, num_heads, dropout=0.0, qkv_bias=False):\n"
                  "    return MultiHeadAttentionWrapper(d_in, width // num_heads, context_length, dropout, num_heads,\n"
                  "                                     qkv_bias)\n"},
        "fails": {"test_wrapper_with_output_width_arguments": "did not raise a ValueError"},
    },
    "width_options_not_passed": {
        "kind": "mistake",
        "cells": {"wrapper_with_output_width":
                  "def wrapper_with_output_width(d_in, context_length, width, num_heads, dropout=0.0, qkv_bias=False):\n"
                  "    if num_heads < 1 or width % num_heads != 0:\n"
                  "        raise ValueError(f'width={width} is not a multiple of num_heads={num_heads}')\n"
                  "    return MultiHeadAttentionWrapper(d_in, width // num_heads, context_length, 0.0, num_heads)\n"},
        "fails": {"test_wrapper_with_output_width": "pass d_in, context_length, dropout and qkv_bias on"},
    },
    "alibi_subclass_masked_fill": {
        "kind": "correct",
        "cells": {"alibi_wrapper": _alibi()},
    },
    "alibi_sdpa_float_mask": {
        # heads of its own, the bias and the hidden future as one float mask given to PyTorch's attention
        "kind": "correct",
        "cells": {"alibi_wrapper":
            "import torch.nn.functional as F\n"
            "\n"
            "\n"
            "class ALiBiWrapper(nn.Module):\n"
            "    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):\n"
            "        super().__init__()\n"
            "        if not len(slopes) or any(s < 0 for s in slopes):\n"
            "            raise ValueError('slopes: one non-negative slope per head')\n"
            "        self.register_buffer('slopes', torch.tensor(slopes, dtype=torch.float32).view(-1, 1, 1))\n"
            "        self.p = dropout\n"
            "        self.heads = nn.ModuleList()\n"
            "        for _ in slopes:\n"
            "            head = nn.Module()\n"
            "            head.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
            "            head.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
            "            head.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
            "            self.heads.append(head)\n"
            "\n"
            "    def forward(self, x):\n"
            "        T = x.shape[-2]\n"
            "        pos = torch.arange(T, device=x.device)\n"
            "        rel = (pos[None, :] - pos[:, None]).to(x.dtype)  # j - i, <= 0 in the past\n"
            "        bias = (self.slopes.to(x.dtype) * rel).masked_fill(rel > 0, float('-inf'))  # (H, T, T)\n"
            "        outs = [F.scaled_dot_product_attention(h.W_query(x), h.W_key(x), h.W_value(x), attn_mask=bias[n],\n"
            "                                               dropout_p=self.p if self.training else 0.0)\n"
            "                for n, h in enumerate(self.heads)]\n"
            "        return torch.cat(outs, dim=-1)\n"},
    },
    "alibi_multiply_and_renormalise": {
        # the task's own words: plain causal weights times exp(-m (i - j)), each row divided by its sum
        "kind": "correct",
        "cells": {"alibi_wrapper":
            "class ALiBiWrapper(nn.Module):\n"
            "    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):\n"
            "        super().__init__()\n"
            "        slopes = list(slopes)\n"
            "        if not slopes or min(slopes) < 0:\n"
            "            raise ValueError(f'bad slopes={slopes}')\n"
            "        self.slopes = slopes\n"
            "        self.heads = nn.ModuleList(CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)\n"
            "                                   for _ in slopes)\n"
            "\n"
            "    def forward(self, x):\n"
            "        b, T, _ = x.shape\n"
            "        gap = torch.arange(T).unsqueeze(1) - torch.arange(T).unsqueeze(0)\n"
            "        future = gap < 0\n"
            "        results = []\n"
            "        for m, head in zip(self.slopes, self.heads):\n"
            "            q, k, v = head.W_query(x), head.W_key(x), head.W_value(x)\n"
            "            s = torch.einsum('bid,bjd->bij', q, k) / math.sqrt(k.shape[-1])\n"
            "            w = torch.softmax(s.masked_fill(future, -torch.inf), dim=-1)\n"
            "            w = w * torch.exp(-m * gap.clamp(min=0).to(w.dtype))\n"
            "            w = w / w.sum(-1, keepdim=True)\n"
            "            results.append(head.dropout(w) @ v)\n"
            "        return torch.cat(results, dim=-1)\n"},
    },
    "alibi_key_position": {
        # per row, -m (i - j) and +m j differ by a constant, which the softmax ignores
        "kind": "correct",
        "cells": {"alibi_wrapper": _alibi(scores="q @ k.transpose(1, 2) / k.shape[-1] ** 0.5 + self.slope * j")},
    },
    "alibi_lesson_heads": {
        # the lesson's wrapper with the slopes taken and never used
        "kind": "mistake",
        "cells": {"alibi_wrapper":
            "class ALiBiWrapper(nn.Module):\n"
            "    def __init__(self, d_in, d_out, context_length, dropout, slopes, qkv_bias=False):\n"
            "        super().__init__()\n"
            "        if not slopes or min(slopes) < 0:\n"
            "            raise ValueError(f'slopes={slopes}')\n"
            "        self.heads = nn.ModuleList([CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)\n"
            "                                    for _ in slopes])\n"
            "\n"
            "    def forward(self, x):\n"
            "        return torch.cat([head(x) for head in self.heads], dim=-1)\n"},
        "fails": {"test_alibi_wrapper": "ignored its slope"},
    },
    "alibi_library_causal": {
        # PyTorch's causal attention in every head: it knows no distance
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(scores="q @ k.transpose(1, 2) / k.shape[-1] ** 0.5").replace(
            "        return self.dropout(w) @ v\n",
            "        return torch.nn.functional.scaled_dot_product_attention(\n"
            "            q, k, v, is_causal=True, dropout_p=self.dropout.p if self.training else 0.0)\n")},
        "fails": {"test_alibi_wrapper": "ignored its slope"},
    },
    "alibi_penalty_scaled": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(scores="(q @ k.transpose(1, 2) - self.slope * distance) / k.shape[-1] ** 0.5")},
        "fails": {"test_alibi_wrapper": "divided by sqrt(d_out)"},
    },
    "alibi_sign_flipped": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(scores="q @ k.transpose(1, 2) / k.shape[-1] ** 0.5 + self.slope * distance")},
        "fails": {"test_alibi_wrapper": "farther keys gained weight"},
    },
    "alibi_future_open": {
        # the penalty on |i - j| in place of the mask
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(scores="q @ k.transpose(1, 2) / k.shape[-1] ** 0.5 - self.slope * "
                                                 "distance.abs()").replace(
            '        scores = scores.masked_fill(j > i, float("-inf"))\n', "")},
        "fails": {"test_alibi_wrapper": "future must stay hidden"},
    },
    "alibi_first_slope_for_all": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(head_slope="slopes[0]")},
        "fails": {"test_alibi_wrapper": "slopes[h]"},
    },
    "alibi_slopes_learned": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi().replace("        self.slope = slope\n",
                                                    "        self.slope = nn.Parameter(torch.tensor(float(slope)))\n")},
        "fails": {"test_alibi_wrapper": "fixed, not learned"},
    },
    "alibi_factor_on_the_future": {
        # the task's words taken literally over the whole matrix: exp(-m (i - j)) overflows above the diagonal
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(scores="q @ k.transpose(1, 2) / k.shape[-1] ** 0.5").replace(
            "        w = torch.softmax(scores, dim=-1)\n",
            "        w = torch.softmax(scores, dim=-1) * torch.exp(-self.slope * distance)\n"
            "        w = w / w.sum(dim=-1, keepdim=True)\n")},
        "fails": {"test_alibi_wrapper": "overflows where j > i"},
    },
    "alibi_no_slopes_check": {
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(check="")},
        "fails": {"test_alibi_wrapper": "did not raise a ValueError"},
    },
    "alibi_mask_of_context_length": {
        # right up to context_length, then the mask buffer is too small
        "kind": "mistake",
        "cells": {"alibi_wrapper": _alibi(scores="q @ k.transpose(1, 2) / k.shape[-1] ** 0.5 - self.slope * distance")
                  .replace('        scores = scores.masked_fill(j > i, float("-inf"))\n',
                           '        scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))\n')},
        "fails": {"test_alibi_wrapper": "context_length"},
    },
}


PROOF = {
    cell: {"lesson": ["alibi_lesson_heads"], "shortcut": ["alibi_library_causal"],
           "correct": ["alibi_subclass_masked_fill", "alibi_sdpa_float_mask", "alibi_multiply_and_renormalise",
                       "alibi_key_position"]}
    for cell in ("test_alibi_wrapper",)
}
