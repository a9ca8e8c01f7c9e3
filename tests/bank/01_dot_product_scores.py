"""Submission bank for step 01: correct variants written another way, and common mistakes."""

# The cheats of tests/bank/integrity.py ride on this mistake: it returns wrong values instead of raising.
CHEATS_RIDE_ON = "elementwise_without_sum"

VARIANTS = {
    "einsum": {
        "kind": "correct",
        "cells": {
            "attention_scores_for_query":
                "def attention_scores_for_query(inputs, query):\n"
                "    return torch.einsum('td,d->t', inputs, query)\n",
            "attention_scores":
                "def attention_scores(inputs):\n"
                "    return torch.einsum('...id,...jd->...ij', inputs, inputs)\n",
        },
    },
    "loops_and_matmul": {
        "kind": "correct",
        "cells": {
            "attention_scores_for_query":
                "def attention_scores_for_query(inputs, query):\n"
                "    return torch.stack([torch.dot(x_i, query) for x_i in inputs])\n",
            "attention_scores":
                "def attention_scores(inputs):\n"
                "    return torch.matmul(inputs, inputs.mT)\n",
        },
    },
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
        "fails": {"test_attention_scores_for_query": "wrong values"},
    },
    "transpose_first": {
        "kind": "mistake",
        "cells": {"attention_scores":
                  "def attention_scores(inputs):\n    return inputs.transpose(-2, -1) @ inputs\n"},
        "fails": {"test_attention_scores_single": "(d, d)", "test_attention_scores_batched": "transpose"},
    },
    "dot_T_on_batches": {
        "kind": "mistake",
        "cells": {"attention_scores": "def attention_scores(inputs):\n    return inputs @ inputs.T\n"},
        "fails": {"test_attention_scores_batched": "reverses all three dimensions"},
    },
}
