"""Held-out mistakes for step 04, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 3 (tril mask, masked_fill_ with -inf, row sums, register_buffer), nanoGPT
(tril buffer compared with 0, T from x.size()), d2l (masked softmax), common sliding-window / packed-document code.
`fails` words name the actual mistake.
"""

_MODULE = '''class CausalSelfAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        {layers}
        {mask}

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        {check}
        queries = self.W_query(x)
        keys = self.W_key(x)
        values = self.W_value(x)
        attn_scores = {scores}
        attn_scores = attn_scores.masked_fill({sliced}, -torch.inf)
        attn_weights = torch.softmax(attn_scores / {scale} ** 0.5, dim=-1)
        return attn_weights @ values
'''
_DEFAULTS = dict(
    layers="self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
           "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
           "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
    mask='self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))',
    check='if num_tokens > self.context_length:\n'
          '            raise ValueError(f"{num_tokens} tokens exceed context_length={self.context_length}")',
    scores="queries @ keys.transpose(1, 2)",
    sliced="self.mask.bool()[:num_tokens, :num_tokens]",
    scale="keys.shape[-1]",
)


def _module(**changes):
    return _MODULE.format(**{**_DEFAULTS, **changes})


VARIANTS = {
    # Part 1: the mask
    "mask_float_not_bool": {
        "kind": "mistake",
        "cells": {"causal_mask": '''def causal_mask(num_tokens):
    return torch.triu(torch.ones(num_tokens, num_tokens), diagonal=1)
'''},
        "fails": {"test_causal_mask": "bool", "test_renormalized_causal_weights": "bool",
                  "test_causal_attention_weights": "bool", "test_two_ways_agree": "bool",
                  "test_causal_self_attention": "bool"},
        "not_named": ["diagonal", "tril", "keys.T"],
    },
    "mask_diagonal_0": {
        "kind": "mistake",
        "cells": {"causal_mask": '''def causal_mask(num_tokens):
    return torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool))
'''},
        "fails": {"test_causal_mask": "diagonal"},
        "not_named": ["dtype", "tril"],
    },
    "mask_tril_keep_mask": {
        "kind": "mistake",
        "cells": {"causal_mask": '''def causal_mask(num_tokens):
    return torch.tril(torch.ones(num_tokens, num_tokens)).bool()
'''},
        "fails": {"test_causal_mask": "tril"},
        "not_named": ["dtype"],
    },
    # Part 2: after softmax
    "renorm_in_place": {
        "kind": "mistake",
        "cells": {"renormalized_causal_weights": '''def renormalized_causal_weights(attn_weights):
    T = attn_weights.shape[-1]
    attn_weights.masked_fill_(causal_mask(T), 0.0)
    return attn_weights / attn_weights.sum(dim=-1, keepdim=True)
'''},
        "fails": {"test_renormalized_causal_weights": "place"},
        "not_named": ["keepdim", "batch size"],
    },
    "renorm_column_sums": {
        "kind": "mistake",
        "cells": {"renormalized_causal_weights": '''def renormalized_causal_weights(attn_weights):
    context_length = attn_weights.shape[-1]
    mask_simple = torch.tril(torch.ones(context_length, context_length))
    masked_simple = attn_weights * mask_simple
    row_sums = masked_simple.sum(dim=-2, keepdim=True)
    return masked_simple / row_sums
'''},
        "fails": {"test_renormalized_causal_weights": "dim", "test_two_ways_agree": "dim"},
        "not_named": ["keepdim", "in place"],
    },
    "renorm_no_keepdim": {
        "kind": "mistake",
        "cells": {"renormalized_causal_weights": '''def renormalized_causal_weights(attn_weights):
    context_length = attn_weights.shape[-1]
    mask_simple = torch.tril(torch.ones(context_length, context_length))
    masked_simple = attn_weights * mask_simple
    row_sums = masked_simple.sum(dim=-1)
    return masked_simple / row_sums
'''},
        "fails": {"test_renormalized_causal_weights": "keepdim", "test_two_ways_agree": "keepdim"},
        "not_named": ["in place", "batch size"],
    },
    "renorm_T_from_shape_0": {
        "kind": "mistake",
        "cells": {"renormalized_causal_weights": '''def renormalized_causal_weights(attn_weights):
    context_length = attn_weights.shape[0]
    mask_simple = torch.tril(torch.ones(context_length, context_length))
    masked_simple = attn_weights * mask_simple
    return masked_simple / masked_simple.sum(dim=-1, keepdim=True)
'''},
        "fails": {"test_renormalized_causal_weights": "shape[0]", "test_two_ways_agree": "shape[0]"},
        "not_named": ["keepdim", "in place"],
    },
    # Part 3: -inf before softmax
    "weights_fill_zero": {
        "kind": "mistake",
        "cells": {"causal_attention_weights": '''def causal_attention_weights(attn_scores, d_k):
    T = attn_scores.shape[-1]
    masked = attn_scores.masked_fill(causal_mask(T), 0.0)
    return torch.softmax(masked / d_k ** 0.5, dim=-1)
'''},
        "fails": {"test_causal_attention_weights": "-inf", "test_two_ways_agree": "-inf"},
        "not_named": ["sqrt(d_k)", "in place"],
    },
    "weights_scale_by_T": {
        "kind": "mistake",
        "cells": {"causal_attention_weights": '''def causal_attention_weights(attn_scores, d_k):
    T = attn_scores.shape[-1]
    masked = attn_scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), -torch.inf)
    return torch.softmax(masked / masked.shape[-1] ** 0.5, dim=-1)
'''},
        "fails": {"test_causal_attention_weights": "d_k", "test_two_ways_agree": "d_k"},
        "not_named": ["-inf", "in place"],
    },
    "weights_softmax_dim_0": {
        "kind": "mistake",
        "cells": {"causal_attention_weights": '''def causal_attention_weights(attn_scores, d_k):
    T = attn_scores.shape[-1]
    masked = attn_scores.masked_fill(causal_mask(T), float("-inf"))
    return torch.softmax(masked / d_k ** 0.5, dim=0)
'''},
        "fails": {"test_causal_attention_weights": "dim", "test_two_ways_agree": "dim"},
        "not_named": ["-inf", "in place"],
    },
    "weights_masked_fill_in_place": {
        "kind": "mistake",
        "cells": {"causal_attention_weights": '''def causal_attention_weights(attn_scores, d_k):
    T = attn_scores.shape[-1]
    attn_scores.masked_fill_(causal_mask(T), -torch.inf)
    return torch.softmax(attn_scores / d_k ** 0.5, dim=-1)
'''},
        "fails": {"test_causal_attention_weights": "place"},
        "not_named": ["-inf", "sqrt(d_k)"],
    },
    # Part 4: the module
    "module_no_context_check": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _module(check="pass")},
        "fails": {"test_causal_self_attention_too_long": "context_length"},
        "not_named": ["buffer", "slice"],
    },
    "module_mask_not_sliced": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _module(sliced="self.mask.bool()")},
        "fails": {"test_causal_self_attention": "slice"},
        "not_named": ["buffer", ".T reverses"],
    },
    "module_mask_plain_attribute": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _module(
            mask="self.mask = torch.triu(torch.ones(context_length, context_length), diagonal=1)")},
        "fails": {"test_causal_self_attention_mask_buffer": "buffer"},
        "not_named": ["slice", "context_length"],
    },
    "module_keys_dot_T": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _module(scores="queries @ keys.T")},
        "fails": {"test_causal_self_attention": ".T"},
        "not_named": ["buffer", "slice"],
    },
    "module_scale_by_d_in": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _module(scale="d_in")},
        "fails": {"test_causal_self_attention": "d_in"},
        "not_named": ["buffer", "slice", "order"],
    },
    "module_tril_buffer_without_eq_0": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _module(
            mask='self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length)))')},
        "fails": {"test_causal_self_attention": "tril"},
        "not_named": ["buffer", ".T reverses", "diagonal=0"],
    },
    "module_T_from_batch_dim": {
        "kind": "mistake",
        "cells": {"causal_self_attention": _module(sliced="self.mask.bool()[:x.shape[0], :x.shape[0]]")},
        "fails": {"test_causal_self_attention": "shape[0]"},
        "not_named": ["buffer", ".T reverses"],
    },
    # Part 5: packed documents
    "packed_index_assumes_1d": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": '''def packed_causal_mask(document_ids):
    if document_ids.dtype.is_floating_point or document_ids.dim() == 0:
        raise ValueError("document_ids must be an integer tensor with at least one dimension")
    T = document_ids.shape[-1]
    other_doc = document_ids[:, None] != document_ids[None, :]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return other_doc | future
'''},
        "fails": {"test_packed_causal_mask": "unsqueeze"},
        "not_named": ["diagonal", "dtype"],
    },
    "packed_no_dtype_check": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": '''def packed_causal_mask(document_ids):
    if document_ids.dim() == 0:
        raise ValueError("document_ids needs at least one dimension")
    T = document_ids.shape[-1]
    same_doc = document_ids.unsqueeze(-1) == document_ids.unsqueeze(-2)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=document_ids.device), diagonal=1)
    return ~same_doc | future
'''},
        "fails": {"test_packed_causal_mask": "dtype"},
        "not_named": ["diagonal", "unsqueeze"],
    },
    "packed_and_instead_of_or": {
        "kind": "mistake",
        "cells": {"packed_causal_mask": '''def packed_causal_mask(document_ids):
    if not isinstance(document_ids, torch.Tensor) or document_ids.is_floating_point() or document_ids.ndim < 1:
        raise ValueError("document_ids must be an integer tensor with at least one dimension")
    T = document_ids.shape[-1]
    other_doc = document_ids.unsqueeze(-1) != document_ids.unsqueeze(-2)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return other_doc & future
'''},
        "fails": {"test_packed_causal_mask": "|"},
        "not_named": ["diagonal", "dtype"],
    },
    # Part 6: sliding window
    "window_off_by_one": {
        "kind": "mistake",
        "cells": {"sliding_window_causal_mask": '''def sliding_window_causal_mask(num_tokens, window):
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool)
    return torch.triu(ones, diagonal=1) | torch.tril(ones, diagonal=-(window - 1))
'''},
        "fails": {"test_sliding_window_causal_mask": "off by one"},
        "not_named": ["ValueError"],
    },
    "window_no_check": {
        "kind": "mistake",
        "cells": {"sliding_window_causal_mask": '''def sliding_window_causal_mask(num_tokens, window):
    i = torch.arange(num_tokens).unsqueeze(1)
    j = torch.arange(num_tokens).unsqueeze(0)
    return (j > i) | (i - j >= window)
'''},
        "fails": {"test_sliding_window_causal_mask": "window < 1"},
        "not_named": ["off by one", "diagonal"],
    },
}
