"""Submission bank for step 01: correct variants written another way, and common mistakes."""

# The cheats of tests/bank/integrity.py ride on this mistake: it returns wrong values instead of raising.
CHEATS_RIDE_ON = "elementwise_without_sum"

VARIANTS = {
    # ---------------------------------------------------------------- correct
    "einsum": {
        "kind": "correct",
        "cells": {
            "attention_scores_for_query":
                "def attention_scores_for_query(inputs, query):\n"
                "    return torch.einsum('...td,...d->...t', inputs, query)\n",
            "attention_scores":
                "def attention_scores(inputs):\n"
                "    return torch.einsum('...id,...jd->...ij', inputs, inputs)\n",
            "distance_scores":
                "def distance_scores(queries, keys):\n"
                "    if queries.shape[-1] != keys.shape[-1]:\n"
                "        raise ValueError(f'keys must have {queries.shape[-1]} features, not {keys.shape[-1]}')\n"
                "    cross = torch.einsum('...qd,...kd->...qk', queries, keys)\n"
                "    q2 = torch.einsum('...qd,...qd->...q', queries, queries)[..., :, None]\n"
                "    k2 = torch.einsum('...kd,...kd->...k', keys, keys)[..., None, :]\n"
                "    return 2 * cross - q2 - k2\n",
        },
    },
    "broadcast_products_and_matmul": {
        "kind": "correct",
        "cells": {
            "attention_scores_for_query":
                "def attention_scores_for_query(inputs, query):\n"
                "    return (inputs * query[..., None, :]).sum(dim=-1)\n",
            "attention_scores":
                "def attention_scores(inputs):\n"
                "    return torch.matmul(inputs, inputs.mT)\n",
            "distance_scores":
                "def distance_scores(queries, keys):\n"
                "    d = queries.size(-1)\n"
                "    if keys.size(-1) != d:\n"
                "        raise ValueError('queries and keys differ in their last dimension: keys ' + str(tuple(keys.shape)))\n"
                "    q2 = queries.pow(2).sum(-1).unsqueeze(-1)\n"
                "    k2 = torch.linalg.vector_norm(keys, dim=-1).square().unsqueeze(-2)\n"
                "    return (2 * torch.matmul(queries, torch.transpose(keys, -1, -2)) - q2 - k2).clamp(max=0)\n",
        },
    },
    "sum_over_broadcast_products": {
        "kind": "correct",
        "cells": {
            "attention_scores_for_query":
                "def attention_scores_for_query(inputs, query):\n"
                "    return torch.matmul(inputs, query.unsqueeze(-1))[..., 0]\n",
            # one query at a time: its (..., T_k, d) differences go before the next query's are made
            "distance_scores":
                "def distance_scores(queries, keys):\n"
                "    if keys.shape[-1] != queries.shape[-1]:\n"
                "        raise ValueError(f'keys.shape[-1]={keys.shape[-1]} != queries.shape[-1]={queries.shape[-1]}')\n"
                "    rows = [-((q.unsqueeze(-2) - keys) ** 2).sum(-1) for q in queries.unbind(-2)]\n"
                "    return torch.stack(rows, dim=-2)\n",
        },
    },
    # ---------------------------------------------------------------- mistakes: Part 1
    "elementwise_without_sum": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query":
                  "def attention_scores_for_query(inputs, query):\n    return inputs * query\n"},
        "fails": {"test_attention_scores_for_query": "without summing"},
    },
    "hard_coded_journey": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query":
                  "def attention_scores_for_query(inputs, query):\n    return inputs @ inputs[1]\n"},
        "fails": {"test_attention_scores_for_query": "raised"},
    },
    "lesson_line_on_batches": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query":
                  "def attention_scores_for_query(inputs, query):\n    return inputs @ query\n"},
        "fails": {"test_attention_scores_for_query": "stack of queries"},
    },
    "every_sentence_against_every_query": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query":
                  "def attention_scores_for_query(inputs, query):\n"
                  "    if query.dim() == 1:\n"
                  "        return inputs @ query\n"
                  "    return inputs @ query.transpose(-2, -1)\n"},
        "fails": {"test_attention_scores_for_query": "every sentence against every query"},
    },
    # torch.inner: one library call that is right for one query and one sentence only
    "inner_product_shortcut": {
        "kind": "mistake",
        "cells": {"attention_scores_for_query":
                  "def attention_scores_for_query(inputs, query):\n    return torch.inner(inputs, query)\n"},
        "fails": {"test_attention_scores_for_query": "every query"},
    },
    # ---------------------------------------------------------------- mistakes: Parts 2 and 3
    "transpose_first": {
        "kind": "mistake",
        "cells": {"attention_scores":
                  "def attention_scores(inputs):\n    return inputs.transpose(-2, -1) @ inputs\n"},
        "fails": {"test_attention_scores_single": "(d, d)", "test_attention_scores_batched": "transposed first factor"},
    },
    "dot_T_on_batches": {
        "kind": "mistake",
        "cells": {"attention_scores": "def attention_scores(inputs):\n    return inputs @ inputs.T\n"},
        "fails": {"test_attention_scores_batched": "batch.T, which reverses all three"},
    },
    # ---------------------------------------------------------------- Part 5: scores by distance
    "distance_in_float64": {
        "kind": "correct",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if queries.shape[-1] != keys.shape[-1]:\n"
                  "        raise ValueError('keys: wrong number of features')\n"
                  "    q, k = queries.double(), keys.double()\n"
                  "    scores = torch.einsum('...qd,...kd->...qk', q, k).mul_(2)\n"
                  "    scores.sub_((q * q).sum(-1, keepdim=True)).sub_((k * k).sum(-1).unsqueeze(-2))\n"
                  "    return scores.to(queries.dtype)\n"},
    },
    # The lesson's line: dot products, not distances.
    "distance_lesson_dot_products": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    return queries @ keys.mT\n"},
        "fails": {"test_distance_scores": "dot products", "test_distance_scores_broadcast": "dot products"},
    },
    # The library's distances: the values are right, the computation is not the student's.
    "distance_cdist": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    return -torch.cdist(queries, keys) ** 2\n"},
        "fails": {"test_distance_scores": "cdist", "test_distance_scores_broadcast": "cdist"},
    },
    # The definition written out: right values, but every pair's differences at once.
    "distance_broadcast_differences": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    return -((queries.unsqueeze(-2) - keys.unsqueeze(-3)) ** 2).sum(-1)\n"},
        "fails": {"test_distance_scores": "T_q * T_k * d", "test_distance_scores_broadcast": "T_q * T_k * d"},
    },
    "distance_sign_flipped": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    q2 = (queries ** 2).sum(-1, keepdim=True)\n"
                  "    k2 = (keys ** 2).sum(-1).unsqueeze(-2)\n"
                  "    return q2 + k2 - 2 * queries @ keys.mT\n"},
        "fails": {"test_distance_scores": "wrong sign", "test_distance_scores_broadcast": "wrong sign"},
    },
    "distance_not_squared": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    q2 = (queries ** 2).sum(-1, keepdim=True)\n"
                  "    k2 = (keys ** 2).sum(-1).unsqueeze(-2)\n"
                  "    return -(q2 + k2 - 2 * queries @ keys.mT).clamp(min=0).sqrt()\n"},
        "fails": {"test_distance_scores": "square root", "test_distance_scores_broadcast": "square root"},
    },
    "distance_query_length_missing": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    return 2 * queries @ keys.mT - (keys ** 2).sum(-1).unsqueeze(-2)\n"},
        "fails": {"test_distance_scores": "each query", "test_distance_scores_broadcast": "each query"},
    },
    "distance_product_once": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    q2 = (queries ** 2).sum(-1, keepdim=True)\n"
                  "    k2 = (keys ** 2).sum(-1).unsqueeze(-2)\n"
                  "    return queries @ keys.mT - q2 - k2\n"},
        "fails": {"test_distance_scores": "counts twice", "test_distance_scores_broadcast": "counts twice"},
    },
    # Each squared length along the other's dimension: right only where T_q == T_k and the lengths happen to agree.
    "distance_lengths_laid_wrong": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    if keys.shape[-1] != queries.shape[-1]:\n"
                  "        raise ValueError('keys do not match the queries')\n"
                  "    q2 = (queries ** 2).sum(-1).unsqueeze(-2)\n"
                  "    k2 = (keys ** 2).sum(-1, keepdim=True)\n"
                  "    return 2 * queries @ keys.mT - q2 - k2\n"},
        "fails": {"test_distance_scores": "laid along", "test_distance_scores_broadcast": "laid along"},
    },
    "distance_without_value_error": {
        "kind": "mistake",
        "cells": {"distance_scores":
                  "def distance_scores(queries, keys):\n"
                  "    q2 = (queries ** 2).sum(-1, keepdim=True)\n"
                  "    k2 = (keys ** 2).sum(-1).unsqueeze(-2)\n"
                  "    return 2 * queries @ keys.mT - q2 - k2\n"},
        "fails": {"test_distance_scores_broadcast": "ValueError"},
    },
    # ---------------------------------------------------------------- Part 6
    # A length clamped to a minimum (cosine_similarity's eps, F.normalize's eps) breaks the promise for short vectors.
    "direction_by_cosine_similarity": {
        "kind": "mistake",
        "cells": {"direction_scores":
                  "import torch.nn.functional as F\n\n\n"
                  "def direction_scores(queries, keys):\n"
                  "    return F.cosine_similarity(queries.unsqueeze(-2), keys.unsqueeze(-3), dim=-1)\n"},
        "fails": {"test_direction_scores": "clamped to a small minimum"},
    },
    "direction_normalize_then_einsum": {
        "kind": "mistake",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    q = torch.nn.functional.normalize(queries, dim=-1)\n"
                  "    k = torch.nn.functional.normalize(keys, dim=-1)\n"
                  "    return torch.einsum('...qd,...kd->...qk', q, k)\n"},
        "fails": {"test_direction_scores": "clamped to a small minimum"},
    },
    "direction_where_then_einsum": {
        "kind": "correct",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    def unit(x):\n"
                  "        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)\n"
                  "        return torch.where(n > 0, x / n, torch.zeros_like(x))\n"
                  "    return torch.einsum('...qd,...kd->...qk', unit(queries), unit(keys))\n"},
    },
    # The lesson's dot products, unchanged: length still counts.
    "direction_plain_dot_products": {
        "kind": "mistake",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    return queries @ keys.transpose(-2, -1)\n"},
        "fails": {"test_direction_scores": "direction_scores"},
    },
    "direction_divide_the_dot_products": {
        "kind": "correct",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    lengths = queries.norm(dim=-1).unsqueeze(-1) * keys.norm(dim=-1).unsqueeze(-2)\n"
                  "    scores = queries @ keys.transpose(-2, -1)\n"
                  "    return torch.where(lengths > 0, scores / torch.where(lengths > 0, lengths, 1.0), 0.0)\n"},
    },
    "direction_nan_for_zero_vectors": {
        "kind": "mistake",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    q = queries / queries.norm(dim=-1, keepdim=True)\n"
                  "    k = keys / keys.norm(dim=-1, keepdim=True)\n"
                  "    return q @ k.transpose(-2, -1)\n"},
        "fails": {"test_direction_scores": "length 0"},
    },
    "direction_keys_not_normalised": {
        "kind": "mistake",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    q = queries / queries.norm(dim=-1, keepdim=True).clamp_min(1e-12)\n"
                  "    return q @ keys.transpose(-2, -1)\n"},
        "fails": {"test_direction_scores": "keys' lengths"},
    },
    "direction_lengths_over_tokens": {
        "kind": "mistake",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    q = queries / queries.norm(dim=-2, keepdim=True).clamp_min(1e-12)\n"
                  "    k = keys / keys.norm(dim=-2, keepdim=True).clamp_min(1e-12)\n"
                  "    return q @ k.transpose(-2, -1)\n"},
        "fails": {"test_direction_scores": "own row"},
    },
    "direction_squared_lengths": {
        "kind": "mistake",
        "cells": {"direction_scores":
                  "def direction_scores(queries, keys):\n"
                  "    q = queries / (queries * queries).sum(-1, keepdim=True).clamp_min(1e-12)\n"
                  "    return q @ keys.transpose(-2, -1) / (keys * keys).sum(-1).unsqueeze(-2).clamp_min(1e-12)\n"},
        "fails": {"test_direction_scores": "square root"},
    },
}

# Rule 3: each transfer part (tests/test_leaks.py) has the lesson's code adapted, the library shortcut, and two correct
# solutions in other styles.
PROOF = {
    "test_attention_scores_for_query": {"lesson": ["lesson_line_on_batches"], "shortcut": ["inner_product_shortcut"],
                                        "correct": ["einsum", "broadcast_products_and_matmul",
                                                    "sum_over_broadcast_products"]},
    "test_distance_scores": {"lesson": ["distance_lesson_dot_products"], "shortcut": ["distance_cdist"],
                             "correct": ["einsum", "broadcast_products_and_matmul", "sum_over_broadcast_products",
                                         "distance_in_float64"]},
    "test_distance_scores_broadcast": {"lesson": ["distance_lesson_dot_products"], "shortcut": ["distance_cdist"],
                                       "correct": ["einsum", "broadcast_products_and_matmul",
                                                   "sum_over_broadcast_products", "distance_in_float64"]},
    "test_direction_scores": {"lesson": ["direction_plain_dot_products"],
                              "shortcut": ["direction_by_cosine_similarity", "direction_normalize_then_einsum"],
                              "correct": ["direction_divide_the_dot_products", "direction_where_then_einsum"]},
}
