"""Submission bank for step 02: correct variants written another way, and common mistakes."""

# The cheats of tests/bank/integrity.py ride on this mistake: it returns wrong values instead of raising, in both
# softmax cells (a cheat's exec, setattr or globals keeps the grader from reading how either softmax is written).
CHEATS_RIDE_ON = "both_softmaxes_wrong"

VARIANTS = {
    # ---------------------------------------------------------------- correct
    # The exercise says "write softmax yourself": judged from the aten operations the call ran in the kernel.
    "uses_torch_softmax": {
        "kind": "mistake",
        "fails": {"test_softmax_naive": "write softmax yourself", "test_softmax_stable": "write softmax yourself"},
        "cells": {
            "softmax_naive":
                "import torch.nn.functional as F\n\n\n"
                "def softmax_naive(x, dim=-1):\n"
                "    return F.softmax(x, dim=dim)\n",
            "softmax_stable":
                "def softmax_stable(x, dim=-1):\n"
                "    return torch.nn.functional.softmax(x, dim=dim)\n",
            "context_vectors":
                "def context_vectors(inputs):\n"
                "    return F.softmax(inputs @ inputs.mT, dim=-1) @ inputs\n",
        },
    },
    # Plain arithmetic under other names, typing annotations: the rule is about what runs, not about names.
    "arithmetic_by_other_names": {
        "kind": "correct",
        "cells": {
            "softmax_naive":
                "from typing import Optional\n\n\n"
                "def softmax_naive(x: torch.Tensor, dim: Optional[int] = -1) -> torch.Tensor:\n"
                "    moved = torch.moveaxis(torch.exp(x), dim, -1)\n"
                "    return torch.moveaxis(torch.divide(moved, torch.nansum(moved, dim=-1, keepdim=True)), -1, dim)\n",
            "softmax_stable":
                "def softmax_stable(x: torch.Tensor, dim: int = -1) -> torch.Tensor:\n"
                "    if not x.numel():\n"
                "        return x.clone()\n"
                "    last = x.swapdims(dim, -1)\n"
                "    shifted = torch.subtract(last, last.max(dim=-1, keepdim=True).values.repeat(*[1] * (x.dim() - 1), "
                "last.shape[-1]))\n"
                "    exps = shifted.exp()\n"
                "    return torch.div(exps, exps.sum(-1, keepdim=True)).swapdims(dim, -1)\n",
        },
    },
    # Prints what it is given on inputs only the hidden checks use: none of it may reach the feedback.
    "prints_hidden_inputs": {
        "kind": "correct",
        "cells": {"softmax_naive":
                  "def softmax_naive(x, dim=-1):\n"
                  "    if x.dim() == 3:\n"
                  "        print('HIDDEN-INPUT-SEEN', x.flatten()[:3].tolist())\n"
                  "    exps = torch.exp(x)\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
    },
    "unsqueezed_sums_and_einsum": {
        "kind": "correct",
        "cells": {
            "softmax_naive":
                "def softmax_naive(x, dim=-1):\n"
                "    return torch.exp(x) / torch.sum(torch.exp(x), dim=dim).unsqueeze(dim)\n",
            "softmax_stable":
                "def softmax_stable(x, dim=-1):\n"
                "    if x.size(dim) == 0:\n"
                "        return torch.zeros_like(x)\n"
                "    shifted = torch.subtract(x, torch.amax(x, dim, True))\n"
                "    return torch.divide(shifted.exp(), shifted.exp().sum(dim).unsqueeze(dim))\n",
            "context_vectors":
                "def context_vectors(inputs):\n"
                "    scores = torch.einsum('...id,...jd->...ij', inputs, inputs)\n"
                "    weights = torch.softmax(scores, dim=-1)\n"
                "    return torch.einsum('...ij,...jd->...id', weights, inputs)\n",
        },
    },
    "max_values_and_own_softmax": {
        "kind": "correct",
        "cells": {
            "softmax_stable":
                "def softmax_stable(x, dim=-1):\n"
                "    if x.shape[dim] == 0:\n"
                "        return softmax_naive(x, dim=dim)  # nothing to shift, nothing to overflow\n"
                "    largest = x.max(dim=dim, keepdim=True).values.detach()\n"
                "    return softmax_naive(x - largest, dim=dim)\n",
            "context_vectors":
                "def context_vectors(inputs):\n"
                "    attn_weights = softmax_stable(torch.matmul(inputs, inputs.transpose(-1, -2)))\n"
                "    return torch.matmul(attn_weights, inputs)\n",
        },
    },
    "loop_over_batch": {
        "kind": "correct",
        "cells": {
            "softmax_naive":
                "def softmax_naive(x, dim=-1):\n"
                "    exps = x.exp()\n"
                "    return exps / exps.sum(dim, keepdim=True)\n",
            "context_vectors":
                "def context_vectors(inputs):\n"
                "    *leading, num_tokens, d = inputs.shape\n"
                "    sentences = inputs.reshape(-1, num_tokens, d)\n"
                "    out = torch.empty_like(sentences)\n"
                "    for b, x in enumerate(sentences):\n"
                "        weights = torch.softmax(x @ x.T, dim=1)\n"
                "        for i in range(num_tokens):\n"
                "            out[b, i] = sum(weights[i, j] * x[j] for j in range(num_tokens))\n"
                "    return out.reshape(inputs.shape)\n",
        },
    },
    "moved_dim": {
        "kind": "correct",
        "cells": {
            "softmax_stable":
                "def softmax_stable(x, dim=-1):\n"
                "    moved = x.movedim(dim, -1)\n"
                "    if moved.shape[-1] == 0:\n"
                "        return x.clone()\n"
                "    shifted = moved - torch.max(moved, dim=-1, keepdim=True)[0]\n"
                "    exps = shifted.exp()\n"
                "    return (exps / exps.sum(-1, keepdim=True)).movedim(-1, dim)\n",
        },
    },
    # ---------------------------------------------------------------- mistakes: softmax_naive
    "naive_plain_sum": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n    return x / x.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_naive": "plain sum"},
    },
    "both_softmaxes_wrong": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n    return x / x.sum(dim=dim, keepdim=True)\n",
                  "softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    exps = torch.exp(x)\n"
                                    "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_naive": "plain sum", "test_softmax_stable": "overflows"},
    },
    "naive_sum_of_everything": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n    return torch.exp(x) / torch.exp(x).sum()\n"},
        "fails": {"test_softmax_naive": "adds up the whole matrix"},
    },
    "naive_dim0": {
        "kind": "mistake",
        "cells": {"softmax_naive":
                  "def softmax_naive(x, dim=-1):\n"
                  "    exps = torch.exp(x)\n"
                  "    return exps / exps.sum(dim=0, keepdim=True)\n"},
        "fails": {"test_softmax_naive": "dim=0"},
    },
    "naive_without_keepdim": {
        "kind": "mistake",
        "cells": {"softmax_naive":
                  "def softmax_naive(x, dim=-1):\n"
                  "    exps = torch.exp(x)\n"
                  "    return exps / exps.sum(dim=dim)\n"},
        "fails": {"test_softmax_naive": "keepdim"},
    },
    # ---------------------------------------------------------------- mistakes: softmax_stable
    "stable_without_max": {
        "kind": "mistake",
        "cells": {"softmax_stable":
                  "def softmax_stable(x, dim=-1):\n"
                  "    exps = torch.exp(x)\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_stable": "overflows"},
    },
    # the answer key of Part 2 before the empty dimension was promised: amax over no entries raises
    "stable_raises_on_an_empty_dim": {
        "kind": "mistake",
        "cells": {"softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                                    "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_stable": "no entries along"},
    },
    # Takes the expected result from the hidden tests themselves: while tests ran in the kernel, the reference
    # `_softmax64` that an earlier hidden test defined was a notebook global (3 unearned points before the judges).
    "cheat_calls_the_hidden_reference": {
        "kind": "cheat",
        "cells": {"softmax_stable":
                  "def softmax_stable(x, dim=-1):\n"
                  "    try:\n"
                  "        return _softmax64(x, dim).float()\n"
                  "    except NameError:\n"
                  "        pass\n"
                  "    exps = torch.exp(x)\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_stable": "overflows"},
    },
    "stable_global_max": {
        "kind": "mistake",
        "cells": {"softmax_stable":
                  "def softmax_stable(x, dim=-1):\n"
                  "    exps = torch.exp(x - x.max())\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_stable": "maximum of each row"},
    },
    "stable_dim0": {
        "kind": "mistake",
        "cells": {"softmax_stable":
                  "def softmax_stable(x, dim=-1):\n"
                  "    exps = torch.exp(x - x.amax(dim=0, keepdim=True))\n"
                  "    return exps / exps.sum(dim=0, keepdim=True)\n"},
        "fails": {"test_softmax_stable": "normalise each row"},
    },
    "stable_max_without_keepdim": {
        "kind": "mistake",
        "cells": {"softmax_stable":
                  "def softmax_stable(x, dim=-1):\n"
                  "    exps = torch.exp(x - x.amax(dim=dim))\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_stable": "keepdim"},
    },
    "stable_in_place": {
        "kind": "mistake",
        "cells": {"softmax_stable":
                  "def softmax_stable(x, dim=-1):\n"
                  "    x -= x.amax(dim=dim, keepdim=True)\n"
                  "    exps = torch.exp(x)\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_stable": "changed its input"},
    },
    # ---------------------------------------------------------------- mistakes: context_vectors
    "context_softmax_dim0": {
        "kind": "mistake",
        "cells": {"context_vectors":
                  "def context_vectors(inputs):\n"
                  "    attn_weights = torch.softmax(inputs @ inputs.transpose(-2, -1), dim=0)\n"
                  "    return attn_weights @ inputs\n"},
        "fails": {"test_context_vectors_single": "dim=0", "test_context_vectors_batched": "dim=0"},
    },
    "context_dot_T_on_batches": {
        "kind": "mistake",
        "cells": {"context_vectors":
                  "def context_vectors(inputs):\n"
                  "    attn_weights = torch.softmax(inputs @ inputs.T, dim=-1)\n"
                  "    return attn_weights @ inputs\n"},
        "fails": {"test_context_vectors_batched": "reverses all three dimensions"},
    },
    "context_weights_times_scores": {
        "kind": "mistake",
        "cells": {"context_vectors":
                  "def context_vectors(inputs):\n"
                  "    attn_scores = inputs @ inputs.transpose(-2, -1)\n"
                  "    attn_weights = torch.softmax(attn_scores, dim=-1)\n"
                  "    return attn_weights @ attn_scores\n"},
        "fails": {"test_context_vectors_single": "not by the scores",
                  "test_context_vectors_batched": "not by the scores"},
    },
    "context_without_softmax": {
        "kind": "mistake",
        "cells": {"context_vectors":
                  "def context_vectors(inputs):\n"
                  "    return (inputs @ inputs.transpose(-2, -1)) @ inputs\n"},
        "fails": {"test_context_vectors_single": "softmax", "test_context_vectors_batched": "softmax"},
    },
}


# ---------------------------------------------------------------------------------------------------------------
# Part 6: softmax over what a mask leaves visible
# ---------------------------------------------------------------------------------------------------------------

_MASK_CHECKS = ("    if mask.dtype != torch.bool:\n"
                "        raise ValueError(f'mask must be bool, got {mask.dtype}')\n"
                "    try:\n"
                "        fits = torch.broadcast_shapes(mask.shape, x.shape) == x.shape\n"
                "    except RuntimeError:\n"
                "        fits = False\n"
                "    if not fits:\n"
                "        raise ValueError(f'mask of shape {tuple(mask.shape)} does not fit x')\n")

VARIANTS.update({
    "masked_torch_softmax_nan_to_num": {
        "kind": "correct",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    return torch.softmax(x.masked_fill(mask, float('-inf')), dim=dim).nan_to_num(0.0)\n"},
    },
    "masked_large_negative_and_where": {
        "kind": "correct",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n"
                  "    if mask.dtype != torch.bool or mask.dim() > x.dim():\n"
                  "        raise ValueError('mask must be a bool tensor no larger than x')\n"
                  "    try:\n"
                  "        mask = mask.expand_as(x)\n"
                  "    except RuntimeError:\n"
                  "        raise ValueError(f'mask {tuple(mask.shape)} does not fit x {tuple(x.shape)}') from None\n"
                  "    hidden = mask | torch.isneginf(x)\n"
                  "    filled = torch.where(hidden, torch.full_like(x, -1e9), x)\n"
                  "    weights = torch.softmax(filled, dim=dim).masked_fill(hidden, 0.0)\n"
                  "    sums = weights.sum(dim=dim, keepdim=True)\n"
                  "    return torch.where(sums > 0, weights / sums, torch.zeros_like(weights))\n"},
    },
    "masked_movedim_loop_free": {
        "kind": "correct",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    keep = ~(mask | (x == float('-inf')))\n"
                  "    if x.shape[dim] == 0:\n"
                  "        return x.clone()\n"
                  "    top = torch.where(keep, x, torch.tensor(float('-inf'))).max(dim=dim, keepdim=True).values\n"
                  "    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))\n"
                  "    exps = torch.exp(torch.where(keep, x - top, torch.tensor(float('-inf'))))\n"
                  "    total = exps.sum(dim=dim, keepdim=True)\n"
                  "    return exps / torch.where(total == 0, torch.ones_like(total), total)\n"},
    },
    # The answer key before issue 46: right weights, but exp of the hidden 1000 is inf, and the backward meets 0 * inf.
    "masked_exp_then_where": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    if x.shape[dim] == 0:\n"
                  "        return x.clone()\n"
                  "    hidden = mask | (x == float('-inf'))\n"
                  "    largest = x.masked_fill(hidden, float('-inf')).amax(dim=dim, keepdim=True)\n"
                  "    exps = torch.exp(x - largest).masked_fill(hidden, 0.0)\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True).clamp(min=1.0)\n"},
        "fails": {"test_softmax_masked": "exponentiated before it is hidden"},
    },
    # The lesson's softmax on the masked scores, adapted mechanically.
    "masked_lesson_softmax": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    x = x.masked_fill(mask, float('-inf'))\n"
                  "    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n"},
        "fails": {"test_softmax_masked": "overflow", "test_softmax_masked_blocked": "nan"},
    },
    "masked_nan_on_blocked_rows": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    return torch.softmax(x.masked_fill(mask, float('-inf')), dim=dim)\n"},
        "fails": {"test_softmax_masked_blocked": "never nan"},
    },
    "masked_zeroed_not_renormalised": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    return torch.softmax(x, dim=dim).masked_fill(mask | (x == float('-inf')), 0.0)\n"},
        "fails": {"test_softmax_masked": "renormalised", "test_softmax_masked_blocked": "renormalised"},
    },
    "masked_max_over_hidden_entries": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    hidden = mask | (x == float('-inf'))\n"
                  "    exps = torch.exp(x - x.amax(dim=dim, keepdim=True)).masked_fill(hidden, 0.0)\n"
                  "    return exps / exps.sum(dim=dim, keepdim=True).clamp(min=1e-30)\n"},
        "fails": {"test_softmax_masked": "no influence", "test_softmax_masked_blocked": "maximum of the visible"},
    },
    "masked_true_means_visible": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    return torch.softmax(x.masked_fill(~mask, float('-inf')), dim=dim).nan_to_num(0.0)\n"},
        "fails": {"test_softmax_masked": "True taken as hidden", "test_softmax_masked_blocked": "renormalised"},
    },
    "masked_large_negative_fill": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n" + _MASK_CHECKS +
                  "    return softmax_stable(x.masked_fill(mask, -1e9), dim=dim)\n"},
        "fails": {"test_softmax_masked_blocked": "equal weights"},
    },
    "masked_without_value_error": {
        "kind": "mistake",
        "cells": {"softmax_masked":
                  "def softmax_masked(x, mask, dim=-1):\n"
                  "    return torch.softmax(x.masked_fill(mask, float('-inf')), dim=dim).nan_to_num(0.0)\n"},
        "fails": {"test_softmax_masked_blocked": "ValueError"},
    },
})


# ---------------------------------------------------------------------------------------------------------------
# routes past "write softmax yourself" (issue 25): each loses exactly the cell of the part it skips, with a message
# naming what it called; every one kept full marks when the rule was a list of forbidden names on the solution cell
# ---------------------------------------------------------------------------------------------------------------

def _code_cell(source):
    import nbformat
    return nbformat.v4.new_code_cell(source)


def _add_cell_after(grade_id, source, duplicate=False):
    """A notebook transform: a code cell of the student's own (or a copy of the solution cell, metadata included)
    right after the solution cell `grade_id`."""
    def transform(nb):
        import copy
        index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        cell = copy.deepcopy(nb.cells[index]) if duplicate else _code_cell(source)
        cell.source = source
        if duplicate:
            cell["id"] = f"{nb.cells[index].get('id', 'cell')}-copy"[:64]
        nb.cells.insert(index + 1, cell)
        return nb
    return transform


_NAIVE_BY_TORCH = "def softmax_naive(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"
_STABLE_BY_TORCH = "def softmax_stable(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"

VARIANTS.update({
    "route_softmin": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n"
                                   "    return torch.nn.functional.softmin(-x, dim=dim)\n"},
        "fails": {"test_softmax_naive": "a library's softmax"},
    },
    "route_getattr": {
        "kind": "mistake",
        "cells": {"softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    return getattr(torch, 'soft' + 'max')(x, dim=dim)\n"},
        "fails": {"test_softmax_stable": "a library's softmax"},
    },
    # vars, eval (and globals, exec, setattr...) can rebind any name at run time: used in one cell, they leave the
    # grader unable to read how either softmax is written, so both routes are taken in both cells
    "route_vars": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n"
                                   "    return vars(torch)['soft' + 'max'](x, dim)\n",
                  "softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    return vars(torch)['soft' + 'max'](x, dim)\n"},
        "fails": {"test_softmax_naive": "a library's softmax", "test_softmax_stable": "a library's softmax"},
    },
    "route_private_softmax": {
        "kind": "mistake",
        "cells": {"softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    return torch._softmax(x, dim, False)\n"},
        "fails": {"test_softmax_stable": "a library's softmax"},
    },
    "route_torch_ops": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n"
                                   "    return torch.ops.aten._softmax(x, dim, False)\n"},
        "fails": {"test_softmax_naive": "a library's softmax"},
    },
    # exp(x - logsumexp(x)): the shift and the sum left to a library's log-sum-exp (issue 45)
    "route_logsumexp": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n"
                                   "    return (x - torch.logsumexp(x, dim=dim, keepdim=True)).exp()\n",
                  "softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    return torch.exp(x - x.logsumexp(dim=dim, keepdim=True))\n"},
        "fails": {"test_softmax_naive": "a library's log-sum-exp", "test_softmax_stable": "a library's log-sum-exp"},
    },
    "route_log_softmax_module": {
        "kind": "mistake",
        "cells": {"softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    return torch.nn.LogSoftmax(dim=dim)(x).exp()\n"},
        "fails": {"test_softmax_stable": "a library's softmax"},
    },
    "route_categorical": {
        "kind": "mistake",
        "cells": {"softmax_naive": "from torch.distributions import Categorical\n\n\n"
                                   "def softmax_naive(x, dim=-1):\n"
                                   "    return Categorical(logits=x.movedim(dim, -1)).probs.movedim(-1, dim)\n"},
        "fails": {"test_softmax_naive": "a library's softmax"},
    },
    "route_eval": {
        "kind": "mistake",
        "cells": {"softmax_naive": "def softmax_naive(x, dim=-1):\n"
                                   "    return eval('torch.soft' + 'max(x, dim=dim)')\n",
                  "softmax_stable": "def softmax_stable(x, dim=-1):\n"
                                    "    return eval('torch.soft' + 'max(x, dim=dim)')\n"},
        "fails": {"test_softmax_naive": "a library's softmax", "test_softmax_stable": "a library's softmax"},
    },
    # the answer key's cell stays; a cell of the student's own after it redefines the function
    "route_own_cell": {
        "kind": "mistake",
        "cells": {},
        "notebook": _add_cell_after("softmax_naive", _NAIVE_BY_TORCH),
        "fails": {"test_softmax_naive": "a library's softmax"},
    },
    # the solution cell duplicated (metadata and all), the copy redefining the function
    "route_duplicated_cell": {
        "kind": "mistake",
        "cells": {},
        "notebook": _add_cell_after("softmax_stable", _STABLE_BY_TORCH, duplicate=True),
        "fails": {"test_softmax_stable": "a library's softmax"},
    },
    # IPython runs an indented cell (it removes the common indentation) and a cell that starts with a magic
    "route_indented_cell": {
        "kind": "mistake",
        "cells": {"softmax_naive": "".join("    " + line + "\n" for line in _NAIVE_BY_TORCH.splitlines())},
        "fails": {"test_softmax_naive": "a library's softmax"},
    },
    "route_config_magic": {
        "kind": "mistake",
        "cells": {"softmax_stable": "%config InlineBackend.figure_format = 'png'\n" + _STABLE_BY_TORCH},
        "fails": {"test_softmax_stable": "a library's softmax"},
    },
})

# Rule 3: each transfer part (tests/test_leaks.py) has the lesson's code adapted, the library shortcut, and two correct
# solutions in other styles.
PROOF = {
    "test_softmax_masked": {"lesson": ["masked_lesson_softmax"], "shortcut": ["masked_zeroed_not_renormalised"],
                            "correct": ["masked_torch_softmax_nan_to_num", "masked_large_negative_and_where",
                                        "masked_movedim_loop_free"]},
    "test_softmax_masked_blocked": {"lesson": ["masked_lesson_softmax"], "shortcut": ["masked_nan_on_blocked_rows"],
                                    "correct": ["masked_torch_softmax_nan_to_num", "masked_large_negative_and_where",
                                                "masked_movedim_loop_free"]},
}
