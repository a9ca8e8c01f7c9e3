"""Held-out mistakes for step 02, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 3 (softmax_naive summing over dim=0, inputs @ inputs.T, masked_fill with
-torch.inf), d2l (softmax with a hard-coded axis, bmm, masked softmax with -1e6), nanoGPT / CS336-style (x - max,
amax, torch.where, nan_to_num, einsum, a hand-written log-sum-exp). `fails` words name the actual mistake; "correct"
variants are other people's correct code, which must get full marks.
"""

_SHAPE_CHECK = '''    try:
        shape = torch.broadcast_shapes(mask.shape, x.shape)
    except RuntimeError:
        shape = None
    if shape != x.shape:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to x of shape {tuple(x.shape)}")
'''
_CHECKS = '''    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, not {mask.dtype}")
''' + _SHAPE_CHECK

VARIANTS = {
    # Part 1: softmax_naive
    "naive_raschka_sum_dim0": {
        "kind": "mistake",
        "cells": {"softmax_naive": '''def softmax_naive(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum(dim=0)
'''},
        "fails": {"test_softmax_naive": "dimension 0"},
        "not_named": ["keepdim", "subtract"],
    },
    "naive_keepdim_forgotten": {
        "kind": "mistake",
        "cells": {"softmax_naive": '''def softmax_naive(x, dim=-1):
    exp_x = torch.exp(x)
    return exp_x / exp_x.sum(dim=dim)
'''},
        "fails": {"test_softmax_naive": "keepdim"},
        "not_named": ["dimension 0", "whole"],
    },
    "naive_d2l_axis_1": {
        "kind": "mistake",
        "cells": {"softmax_naive": '''def softmax_naive(x, dim=-1):
    X_exp = torch.exp(x)
    partition = X_exp.sum(1, keepdim=True)
    return X_exp / partition
'''},
        "fails": {"test_softmax_naive": "dimension 1"},
        "not_named": ["keepdim", "whole"],
    },
    # Part 2: softmax_stable
    "stable_max_of_whole_tensor": {
        "kind": "mistake",
        "cells": {"softmax_stable": '''def softmax_stable(x, dim=-1):
    if x.numel() == 0:
        return x.clone()
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)
'''},
        "fails": {"test_softmax_stable": "whole"},
        "not_named": ["keepdim", "in place"],
    },
    "stable_shift_in_place": {
        "kind": "mistake",
        "cells": {"softmax_stable": '''def softmax_stable(x, dim=-1):
    if x.shape[dim] == 0:
        return x.clone()
    x -= x.max(dim=dim, keepdim=True).values
    x = x.exp()
    return x / x.sum(dim=dim, keepdim=True)
'''},
        "fails": {"test_softmax_stable": "in place"},
        "not_named": ["whole", "keepdim"],
    },
    "stable_max_returns_values_and_indices": {
        "kind": "mistake",
        "cells": {"softmax_stable": '''def softmax_stable(x, dim=-1):
    shifted = x - torch.max(x, dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / torch.sum(exps, dim=dim, keepdim=True)
'''},
        "fails": {"test_softmax_stable": ".values"},
        "not_named": ["whole", "in place"],
    },
    "stable_empty_dim_not_handled": {
        "kind": "mistake",
        "cells": {"softmax_stable": '''def softmax_stable(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)
'''},
        "fails": {"test_softmax_stable": "empty"},
        "not_named": ["whole", "in place", "keepdim"],
    },
    # Parts 3-4: context_vectors
    "context_raschka_dot_T": {
        "kind": "mistake",
        "cells": {"context_vectors": '''def context_vectors(inputs):
    attn_scores = inputs @ inputs.T
    attn_weights = torch.softmax(attn_scores, dim=-1)
    return attn_weights @ inputs
'''},
        "fails": {"test_context_vectors_batched": ".T"},
        "not_named": ["bmm", "queries", "sqrt"],
    },
    "context_softmax_over_dim_1": {
        "kind": "mistake",
        "cells": {"context_vectors": '''def context_vectors(inputs):
    scores = torch.matmul(inputs, inputs.transpose(-2, -1))
    weights = torch.softmax(scores, dim=1)
    return torch.matmul(weights, inputs)
'''},
        "fails": {"test_context_vectors_batched": "queries"},
        "not_named": [".T", "bmm", "sqrt"],
    },
    "context_d2l_bmm": {
        "kind": "mistake",
        "cells": {"context_vectors": '''def context_vectors(inputs):
    scores = torch.bmm(inputs, inputs.transpose(1, 2))
    weights = torch.softmax(scores, dim=-1)
    return torch.bmm(weights, inputs)
'''},
        "fails": {"test_context_vectors_single": "bmm", "test_context_vectors_batched": "bmm"},
        "not_named": [".T", "queries", "sqrt"],
    },
    "context_scaled_by_sqrt_d": {
        "kind": "mistake",
        "cells": {"context_vectors": '''def context_vectors(inputs):
    d = inputs.shape[-1]
    scores = inputs @ inputs.transpose(-2, -1) / d ** 0.5
    return torch.softmax(scores, dim=-1) @ inputs
'''},
        "fails": {"test_context_vectors_single": "sqrt", "test_context_vectors_batched": "sqrt"},
        "not_named": [".T", "bmm", "queries"],
    },
    # Part 6: softmax_masked
    "masked_raschka_neg_inf": {
        "kind": "mistake",
        "cells": {"softmax_masked": '''def softmax_masked(x, mask, dim=-1):
''' + _CHECKS + '''    return torch.softmax(x.masked_fill(mask, -torch.inf), dim=dim)
'''},
        "fails": {"test_softmax_masked_blocked": "-inf"},
        "not_named": ["finite", "after the softmax", "in place", "bool"],
    },
    "masked_d2l_fill_minus_1e6": {
        "kind": "mistake",
        "cells": {"softmax_masked": '''def softmax_masked(x, mask, dim=-1):
''' + _CHECKS + '''    return torch.softmax(x.masked_fill(mask, -1e6), dim=dim)
'''},
        "fails": {"test_softmax_masked_blocked": "finite"},
        "not_named": ["after the softmax", "in place", "bool"],
    },
    "masked_zeroed_after_softmax": {
        "kind": "mistake",
        "cells": {"softmax_masked": '''def softmax_masked(x, mask, dim=-1):
''' + _CHECKS + '''    weights = torch.softmax(x, dim=dim)
    return torch.nan_to_num(weights * ~mask)
'''},
        "fails": {"test_softmax_masked": "after the softmax", "test_softmax_masked_blocked": "after the softmax"},
        "not_named": ["finite", "in place", "bool"],
    },
    "masked_renormalised_after_softmax": {
        "kind": "mistake",
        "cells": {"softmax_masked": '''def softmax_masked(x, mask, dim=-1):
''' + _CHECKS + '''    visible = ~mask & ~torch.isneginf(x)
    weights = torch.softmax(x, dim=dim) * visible
    total = weights.sum(dim=dim, keepdim=True)
    return torch.where(total > 0, weights / total, torch.zeros_like(weights))
'''},
        "fails": {"test_softmax_masked": "hidden score", "test_softmax_masked_blocked": "hidden score"},
        "not_named": ["finite", "in place", "bool"],
    },
    "masked_exp_of_hidden_then_where": {
        "kind": "mistake",
        "cells": {"softmax_masked": '''def softmax_masked(x, mask, dim=-1):
''' + _CHECKS + '''    if x.shape[dim] == 0:
        return torch.zeros_like(x)
    hidden = mask | torch.isneginf(x)
    m = x.masked_fill(hidden, -torch.inf).amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.where(hidden, torch.zeros_like(x), torch.exp(x - m))
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))
'''},
        "fails": {"test_softmax_masked": "gradient"},
        "not_named": ["after the softmax", "in place", "bool", "-1e"],
    },
    "masked_float_mask_converted": {
        "kind": "mistake",
        "cells": {"softmax_masked": '''def softmax_masked(x, mask, dim=-1):
    mask = mask.bool()
''' + _SHAPE_CHECK + '''    hidden = mask | torch.isneginf(x)
    weights = torch.softmax(x.masked_fill(hidden, -torch.inf), dim=dim)
    return weights.masked_fill(hidden.all(dim=dim, keepdim=True), 0.0)
'''},
        "fails": {"test_softmax_masked_blocked": "bool"},
        "not_named": ["after the softmax", "in place", "-inf", "finite"],
    },
    # Correct code in other styles: must get full marks
    "correct_loops_and_logsumexp": {
        "kind": "correct",
        "cells": {
            "softmax_naive": '''def softmax_naive(x, dim=-1):
    numerator = x.exp()
    denominator = numerator.sum(dim, keepdim=True)
    return numerator / denominator
''',
            "softmax_stable": '''def softmax_stable(x, dim=-1):
    if x.size(dim) == 0:
        return torch.empty_like(x)
    x_max = torch.amax(x, dim=dim, keepdim=True)
    log_z = x_max + torch.log(torch.sum(torch.exp(x - x_max), dim=dim, keepdim=True))
    return torch.exp(x - log_z)
''',
            "context_vectors": '''def context_vectors(inputs):
    attn_scores = torch.einsum("...id,...jd->...ij", inputs, inputs)
    attn_weights = softmax_stable(attn_scores, dim=-1)
    return torch.einsum("...ij,...jd->...id", attn_weights, inputs)
''',
            "softmax_masked": '''def softmax_masked(x, mask, dim=-1):
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {getattr(mask, 'dtype', type(mask))}")
    try:
        shape = torch.broadcast_shapes(mask.shape, x.shape)
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to x {tuple(x.shape)}")
    if shape != x.shape:
        raise ValueError(f"mask of shape {tuple(mask.shape)} would change the shape of x {tuple(x.shape)}")
    if x.size(dim) == 0:
        return torch.empty_like(x)
    hidden = mask.expand(x.shape) | torch.isneginf(x)
    m = x.masked_fill(hidden, float("-inf")).amax(dim=dim, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp((x - m).masked_fill(hidden, float("-inf")))
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))
''',
        },
    },
    "correct_nanogpt_style": {
        "kind": "correct",
        "cells": {
            "softmax_naive": '''def softmax_naive(x, dim=-1):
    e = torch.exp(x)
    return torch.div(e, e.sum(dim=dim).unsqueeze(dim))
''',
            "softmax_stable": '''def softmax_stable(x, dim=-1):
    if x.numel() == 0:
        return x.clone()
    shifted = x - x.max(dim=dim, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)
''',
            "context_vectors": '''def context_vectors(inputs):
    att = inputs @ inputs.transpose(-2, -1)
    att = torch.softmax(att, dim=-1)
    return att @ inputs
''',
            "softmax_masked": '''def softmax_masked(x, mask, dim=-1):
    if mask.dtype != torch.bool:
        raise ValueError("mask must be a bool tensor")
    try:
        if torch.broadcast_shapes(mask.shape, x.shape) != x.shape:
            raise ValueError("mask is larger than x")
    except RuntimeError as error:
        raise ValueError(f"mask does not broadcast to x: {error}")
    visible = ~mask & ~torch.isneginf(x)
    filled = torch.where(visible, x, torch.full_like(x, torch.finfo(x.dtype).min))
    att = torch.softmax(filled, dim=dim)
    return att * visible
''',
        },
    },
}
