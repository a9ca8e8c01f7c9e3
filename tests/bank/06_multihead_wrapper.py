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
        "fails": {"test_wrapper_output": "dim=-1"},
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
        "fails": {"test_wrapper_heads": "pass dropout on"},
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
                  "    if width % num_heads:\n"
                  "        raise ValueError(f'width={width} is not a multiple of num_heads={num_heads}')\n"
                  "    return MultiHeadAttentionWrapper(d_in, width, context_length, dropout, num_heads, qkv_bias)\n"},
        "fails": {"test_wrapper_with_output_width": "d_out = width // num_heads"},
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
                  "    if width % num_heads != 0:\n"
                  "        raise ValueError(f'width={width} is not a multiple of num_heads={num_heads}')\n"
                  "    return MultiHeadAttentionWrapper(d_in, width // num_heads, context_length, 0.0, num_heads)\n"},
        "fails": {"test_wrapper_with_output_width": "pass d_in, context_length, dropout and qkv_bias on"},
    },
}
