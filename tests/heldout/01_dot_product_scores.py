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
        "fails": {"test_attention_scores_for_query": "stack of queries as one"},
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
    # Part 5: scores by distance
    "distance_no_value_error": {
        "kind": "mistake",
        "cells": {"distance_scores": '''def distance_scores(queries, keys):
    sq_q = (queries ** 2).sum(dim=-1, keepdim=True)
    sq_k = (keys ** 2).sum(dim=-1, keepdim=True).transpose(-2, -1)
    return -(sq_q - 2 * queries @ keys.transpose(-2, -1) + sq_k)
'''},
        "fails": {"test_distance_scores_broadcast": "ValueError"},
        "not_named": ["bmm", "swapped"],
    },
    "distance_check_whole_shape": {
        "kind": "mistake",
        "cells": {"distance_scores": '''def distance_scores(queries, keys):
    if queries.shape != keys.shape:
        raise ValueError(f"keys must have the shape of queries {tuple(queries.shape)}, got {tuple(keys.shape)}")
    sq_q = (queries ** 2).sum(dim=-1, keepdim=True)
    sq_k = (keys ** 2).sum(dim=-1, keepdim=True).transpose(-2, -1)
    return -(sq_q - 2 * queries @ keys.transpose(-2, -1) + sq_k)
'''},
        "fails": {"test_distance_scores": "last dimension",
                  "test_distance_scores_broadcast": "last dimension"},
        "not_named": ["bmm", "swapped"],
    },
    "distance_bmm": {
        "kind": "mistake",
        "cells": {"distance_scores": '''def distance_scores(queries, keys):
    if queries.size(-1) != keys.size(-1):
        raise ValueError(f"keys have {keys.size(-1)} features, queries {queries.size(-1)}")
    qq = queries.pow(2).sum(-1).unsqueeze(-1)
    kk = keys.pow(2).sum(-1).unsqueeze(1)
    return 2 * torch.bmm(queries, keys.transpose(1, 2)) - qq - kk
'''},
        "fails": {"test_distance_scores": "bmm", "test_distance_scores_broadcast": "bmm"},
        "not_named": ["swapped", "cdist"],
    },
    "distance_keys_queries_swapped": {
        "kind": "mistake",
        "cells": {"distance_scores": '''def distance_scores(queries, keys):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError("queries and keys differ in their last dimension")
    kk = (keys * keys).sum(-1, keepdim=True)
    qq = (queries * queries).sum(-1).unsqueeze(-2)
    return 2 * keys @ queries.mT - kk - qq
'''},
        "fails": {"test_distance_scores": "swapped", "test_distance_scores_broadcast": "swapped"},
        "not_named": ["bmm", "cdist"],
    },
    "distance_pairwise_differences": {
        "kind": "mistake",
        "cells": {"distance_scores": '''def distance_scores(queries, keys):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError("keys: last dimension differs from the queries'")
    diff = queries[..., :, None, :] - keys[..., None, :, :]
    return -(diff * diff).sum(-1)
'''},
        "fails": {"test_distance_scores": "differences", "test_distance_scores_broadcast": "differences"},
        "not_named": ["cdist", "swapped"],
    },
    "distance_torch_cdist": {
        "kind": "mistake",
        "cells": {"distance_scores": '''def distance_scores(queries, keys):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError("keys: last dimension differs from the queries'")
    return -torch.cdist(queries, keys).pow(2)
'''},
        "fails": {"test_distance_scores": "cdist", "test_distance_scores_broadcast": "cdist"},
        "not_named": ["differences", "swapped"],
    },
    "distance_norm_not_squared": {
        "kind": "mistake",
        "cells": {"distance_scores": '''def distance_scores(queries, keys):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError("keys: last dimension differs from the queries'")
    sq = (queries ** 2).sum(-1)[..., :, None] + (keys ** 2).sum(-1)[..., None, :] - 2 * queries @ keys.mT
    return -sq.clamp_min(0).sqrt()
'''},
        "fails": {"test_distance_scores": "square root", "test_distance_scores_broadcast": "square root"},
        "not_named": ["cdist", "swapped", "differences"],
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
