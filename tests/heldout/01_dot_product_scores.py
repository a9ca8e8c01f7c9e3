"""Held-out mistakes for step 01, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 3 (loops of torch.dot, inputs @ inputs.T), d2l (bmm), nanoGPT (transpose
of the last two dims, einsum), common cosine-similarity code. `fails` words name the actual mistake.
"""

VARIANTS = {
    # Part 1: one query per sentence
    "query_matmul_no_unsqueeze": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query": '''def attention_scores_for_query(inputs, query):
    return inputs @ query
'''},
        "fails": {"test_attention_scores_for_query": "unsqueeze"},
        "not_named": ["torch.dot", ".T reverses"],
    },
    "query_transposed_mixes_sentences": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query": '''def attention_scores_for_query(inputs, query):
    return torch.matmul(inputs, query.T)
'''},
        "fails": {"test_attention_scores_for_query": ".T"},
        "not_named": ["torch.dot", "bmm"],
    },
    "query_loop_torch_dot": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query": '''def attention_scores_for_query(inputs, query):
    attn_scores = torch.empty(inputs.shape[0])
    for i, x_i in enumerate(inputs):
        attn_scores[i] = torch.dot(x_i, query)
    return attn_scores
'''},
        "fails": {"test_attention_scores_for_query": "torch.dot"},
        "not_named": [".T reverses", "bmm"],
    },
    # Parts 2-3: all pairs
    "scores_dot_T_on_batch": {
        "kind": "mistake",
        "cells": {"attention_scores": '''def attention_scores(inputs):
    return inputs @ inputs.T
'''},
        "fails": {"test_attention_scores_batched": ".T"},
        "not_named": ["bmm", "einsum"],
    },
    "scores_wrong_factor_transposed": {
        "kind": "mistake",
        "cells": {"attention_scores": '''def attention_scores(inputs):
    return inputs.transpose(-2, -1) @ inputs
'''},
        "fails": {"test_attention_scores_single": "transpos", "test_attention_scores_batched": "transpos"},
        "not_named": ["bmm", "einsum", ".T reverses"],
    },
    "scores_bmm_needs_3d": {
        "kind": "mistake",
        "cells": {"attention_scores": '''def attention_scores(inputs):
    return torch.bmm(inputs, inputs.transpose(1, 2))
'''},
        "fails": {"test_attention_scores_single": "bmm", "test_attention_scores_batched": "bmm"},
        "not_named": [".T reverses", "einsum"],
    },
    "scores_transpose_0_1": {
        "kind": "mistake",
        "cells": {"attention_scores": '''def attention_scores(inputs):
    return inputs @ inputs.transpose(0, 1)
'''},
        "fails": {"test_attention_scores_batched": "transpose(0, 1)"},
        "not_named": ["bmm", "einsum", ".T reverses"],
    },
    "scores_einsum_fixed_batch": {
        "kind": "mistake",
        "cells": {"attention_scores": '''def attention_scores(inputs):
    return torch.einsum("bid,bjd->bij", inputs, inputs)
'''},
        "fails": {"test_attention_scores_single": "einsum", "test_attention_scores_batched": "einsum"},
        "not_named": ["bmm", ".T reverses"],
    },
    # Part 5: queries against keys
    "cross_no_value_error": {
        "kind": "mistake",
        "cells": {"cross_attention_scores": '''def cross_attention_scores(queries, keys):
    return queries @ keys.transpose(-2, -1)
'''},
        "fails": {"test_cross_attention_scores_broadcast": "ValueError"},
        "not_named": ["bmm", ".T reverses"],
    },
    "cross_check_whole_shape": {
        "kind": "mistake",
        "cells": {"cross_attention_scores": '''def cross_attention_scores(queries, keys):
    if queries.shape != keys.shape:
        raise ValueError(f"keys must have the shape of queries {tuple(queries.shape)}, got {tuple(keys.shape)}")
    return queries @ keys.transpose(-2, -1)
'''},
        "fails": {"test_cross_attention_scores": "last dimension",
                  "test_cross_attention_scores_broadcast": "last dimension"},
        "not_named": ["bmm", ".T reverses"],
    },
    "cross_bmm": {
        "kind": "mistake",
        "cells": {"cross_attention_scores": '''def cross_attention_scores(queries, keys):
    if queries.size(-1) != keys.size(-1):
        raise ValueError(f"keys have {keys.size(-1)} features, queries {queries.size(-1)}")
    return torch.bmm(queries, keys.transpose(1, 2))
'''},
        "fails": {"test_cross_attention_scores": "bmm", "test_cross_attention_scores_broadcast": "bmm"},
        "not_named": [".T reverses", "einsum"],
    },
    "cross_keys_queries_swapped": {
        "kind": "mistake",
        "cells": {"cross_attention_scores": '''def cross_attention_scores(queries, keys):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError("queries and keys differ in their last dimension")
    return keys @ queries.transpose(-2, -1)
'''},
        "fails": {"test_cross_attention_scores": "swap", "test_cross_attention_scores_broadcast": "swap"},
        "not_named": ["bmm", ".T reverses"],
    },
    # Part 6: direction only
    "direction_divide_by_zero_norm": {
        "kind": "mistake",
        "cells": {"direction_scores": '''def direction_scores(queries, keys):
    q = queries / queries.norm(dim=-1, keepdim=True)
    k = keys / keys.norm(dim=-1, keepdim=True)
    return q @ k.transpose(-2, -1)
'''},
        "fails": {"test_direction_scores": "zero"},
        "not_named": ["eps", "cosine_similarity"],
    },
    "direction_cosine_similarity_aligned": {
        "kind": "mistake",
        "cells": {"direction_scores": '''def direction_scores(queries, keys):
    import torch.nn.functional as F
    return F.cosine_similarity(queries, keys, dim=-1)
'''},
        "fails": {"test_direction_scores": "cosine_similarity"},
        "not_named": ["eps", "nan"],
    },
    "direction_eps_added_to_norm": {
        "kind": "mistake",
        "cells": {"direction_scores": '''def direction_scores(queries, keys):
    eps = 1e-8
    q = queries / (queries.norm(dim=-1, keepdim=True) + eps)
    k = keys / (keys.norm(dim=-1, keepdim=True) + eps)
    return q @ k.transpose(-2, -1)
'''},
        "fails": {"test_direction_scores": "eps"},
        "not_named": ["one row per query", "transpose"],
    },
    "direction_normalize_default_eps": {
        "kind": "mistake",
        "cells": {"direction_scores": '''def direction_scores(queries, keys):
    import torch.nn.functional as F
    return F.normalize(queries, dim=-1) @ F.normalize(keys, dim=-1).mT
'''},
        "fails": {"test_direction_scores": "eps"},
        "not_named": ["one row per query", "transpose"],
    },
}
