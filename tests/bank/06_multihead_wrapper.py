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


_LOOKBACK = """class LookbackWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, windows, qkv_bias=False):
        super().__init__()
CHECK
        self.heads = HOLDER
        for window in windows:
            head = CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
            ones = torch.ones(context_length, context_length, dtype=torch.bool)
            head.register_buffer("mask", MASK)
            self.heads.append(head)

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
"""
_WINDOWS_CHECK = ("        if len(windows) == 0 or any(w < 1 for w in windows):\n"
                  "            raise ValueError(f'every head needs a window >= 1, got windows={windows}')")


def _lookback(mask="torch.triu(ones, 1) | torch.tril(ones, -window)", check=_WINDOWS_CHECK, holder="nn.ModuleList()"):
    return _LOOKBACK.replace("CHECK", check).replace("MASK", mask).replace("HOLDER", holder)


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
    "lookback_triu_tril_buffers": {
        "kind": "correct",
        "cells": {"lookback_wrapper": _lookback()},
    },
    "lookback_own_heads_einsum": {
        # heads of its own (not CausalAttention), the window mask built in forward, einsum and a large negative
        "kind": "correct",
        "cells": {"lookback_wrapper":
            "class WindowHead(nn.Module):\n"
            "    def __init__(self, d_in, d_out, context_length, dropout, window, qkv_bias):\n"
            "        super().__init__()\n"
            "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
            "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
            "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
            "        self.dropout = nn.Dropout(dropout)\n"
            "        self.window, self.context_length = window, context_length\n"
            "\n"
            "    def forward(self, x):\n"
            "        T = x.shape[1]\n"
            "        if T > self.context_length:\n"
            "            raise ValueError(f'{T} tokens, context_length={self.context_length}')\n"
            "        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)\n"
            "        s = torch.einsum('bqd,bkd->bqk', q, k) / k.shape[-1] ** 0.5\n"
            "        i = torch.arange(T).unsqueeze(1)\n"
            "        j = torch.arange(T).unsqueeze(0)\n"
            "        allowed = (j <= i) & (j > i - self.window)\n"
            "        w = torch.softmax(torch.where(allowed, s, torch.full_like(s, -1e9)), dim=-1)\n"
            "        return torch.einsum('bqk,bkd->bqd', self.dropout(w), v)\n"
            "\n"
            "\n"
            "class LookbackWrapper(nn.Module):\n"
            "    def __init__(self, d_in, d_out, context_length, dropout, windows, qkv_bias=False):\n"
            "        super().__init__()\n"
            "        if not windows or min(windows) <= 0:\n"
            "            raise ValueError('windows must be a non-empty list of positive numbers')\n"
            "        self.heads = nn.ModuleList(WindowHead(d_in, d_out, context_length, dropout, w, qkv_bias)\n"
            "                                   for w in windows)\n"
            "\n"
            "    def forward(self, x):\n"
            "        return torch.cat(tuple(h(x) for h in self.heads), dim=2)\n"},
    },
    "lookback_one_token_too_many": {
        "kind": "mistake",
        "cells": {"lookback_wrapper": _lookback(mask="torch.triu(ones, 1) | torch.tril(ones, -window - 1)")},
        "fails": {"test_lookback_wrapper": "itself included", "test_lookback_wrapper_reach": "itself included"},
    },
    "lookback_window_both_ways": {
        "kind": "mistake",
        "cells": {"lookback_wrapper": _lookback(mask="torch.triu(ones, window) | torch.tril(ones, -window)")},
        "fails": {"test_lookback_wrapper": "looks back only", "test_lookback_wrapper_reach": "looks back only"},
    },
    "lookback_plain_causal": {
        "kind": "mistake",
        "cells": {"lookback_wrapper": _lookback(mask="torch.triu(ones, 1)")},
        "fails": {"test_lookback_wrapper": "plain causal mask", "test_lookback_wrapper_reach": "plain causal mask"},
    },
    "lookback_first_window_for_all": {
        "kind": "mistake",
        "cells": {"lookback_wrapper": _lookback(mask="torch.triu(ones, 1) | torch.tril(ones, -windows[0])")},
        "fails": {"test_lookback_wrapper": "windows[h]", "test_lookback_wrapper_reach": "windows[h]"},
    },
    "lookback_heads_in_python_list": {
        "kind": "mistake",
        "cells": {"lookback_wrapper": _lookback(holder="[]")},
        "fails": {"test_lookback_wrapper_reach": "registers"},
    },
    "lookback_no_windows_check": {
        "kind": "mistake",
        "cells": {"lookback_wrapper": _lookback(check="")},
        "fails": {"test_lookback_wrapper": "raise ValueError naming it"},
    },
}
