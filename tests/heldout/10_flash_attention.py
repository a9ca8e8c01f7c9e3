"""Held-out mistakes for step 10, written from the released exercise only (issue 46).

Styles: the online-softmax recurrence of Milakov & Gimelshein as usually transcribed (m, l = -inf, 0; m_new =
max(m, block max); l = l * exp(m - m_new) + sum exp(x - m_new)), FlashAttention-2 forward pseudocode in PyTorch
(o, l, m per query row, alpha = exp(m - m_new), causal mask from absolute positions), CS336 assignment style
(einsum, amax(-1, keepdim=True), a loop over key tiles), flash-attn's / xformers' LSE merge of split-key partials
(logaddexp or a shared maximum, exp(lse_i - lse)), plain Python loops. `fails` words name the actual mistake;
"correct" variants are other people's correct code, which must get full marks.
"""

# Part 1 --------------------------------------------------------------------------------------------------------------

_ONLINE = '''def online_softmax(x, block_size):
    m = {m0}
    l = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    n = x.shape[-1]
    for start in {blocks}:
        block = x[..., start:start + block_size]
        m_new = {m_new}
        l = {l_update}
        m = m_new
    return torch.exp(x - m) / l
'''
_ONLINE_DEFAULTS = dict(
    m0='torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype)',
    blocks="range(0, n, block_size)",
    m_new="torch.maximum(m, block.max(dim=-1, keepdim=True).values)",
    l_update="l * torch.exp(m - m_new) + torch.exp(block - m_new).sum(dim=-1, keepdim=True)",
)


def _online(**changes):
    return _ONLINE.format(**{**_ONLINE_DEFAULTS, **changes})


# Part 2: FlashAttention-2's forward loop, one key tile at a time ------------------------------------------------------

_TILED = '''import math


def tiled_attention(queries, keys, values, block_size, causal=False):
    {check}
    T, d = queries.shape[-2], queries.shape[-1]
    scale = {scale}
    m = torch.full(queries.shape[:-1] + (1,), float("-inf"), dtype=queries.dtype)
    l = torch.zeros(queries.shape[:-1] + (1,), dtype=queries.dtype)
    o = torch.zeros_like(queries)
    q_pos = torch.arange(T)[:, None]
    for start in range(0, keys.shape[-2], block_size):
        k = keys[..., start:start + block_size, :]
        v = values[..., start:start + block_size, :]
        s = {scores}
        if causal:
            k_pos = {k_pos}
            s = s.masked_fill({blocked}, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = {l_update}
        o = {o_update}
        m = m_new
    return o / l
'''
_TILED_DEFAULTS = dict(
    check='if block_size < 1:\n        raise ValueError(f"block_size must be >= 1, got {block_size}")',
    scale="1.0 / math.sqrt(d)",
    scores="(queries @ k.transpose(-2, -1)) * scale",
    k_pos="torch.arange(start, start + k.shape[-2])[None, :]",
    blocked="k_pos > q_pos",
    l_update="alpha * l + p.sum(dim=-1, keepdim=True)",
    o_update="alpha * o + p @ v",
)


def _tiled(**changes):
    return _TILED.format(**{**_TILED_DEFAULTS, **changes})


# Part 3: merging two partial results by their lse --------------------------------------------------------------------

_MERGE = '''def merge_attention(out_a, lse_a, out_b, lse_b):
    {check}
    {body}
'''
_MERGE_CHECK = '''for name, out, lse in (("lse_a", out_a, lse_a), ("lse_b", out_b, lse_b)):
        if lse.shape != out.shape[:-1]:
            raise ValueError(f"{name} has shape {tuple(lse.shape)}, expected {tuple(out.shape[:-1])}")'''
_MERGE_LOGADDEXP = '''lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - safe)[..., None]
    w_b = torch.exp(lse_b - safe)[..., None]
    return w_a * out_a + w_b * out_b, lse'''


def _merge(check=_MERGE_CHECK, body=_MERGE_LOGADDEXP):
    return _MERGE.format(check=check, body=body)


VARIANTS = {
    # Part 1: online_softmax
    "online_sum_not_rescaled": {
        "kind": "mistake",
        "cells": {"online_softmax": _online(l_update="l + torch.exp(block - m_new).sum(dim=-1, keepdim=True)")},
        "fails": {"test_online_softmax": "rescale"},
        "not_named": ["-inf", "last block", "running maximum"],
    },
    "online_rescale_inverted": {
        "kind": "mistake",
        "cells": {"online_softmax": _online(
            l_update="l * torch.exp(m_new - m) + torch.exp(block - m_new).sum(dim=-1, keepdim=True)")},
        "fails": {"test_online_softmax": "exp(m_new - m)"},
        "not_named": ["last block", "running maximum"],
    },
    "online_starts_at_zero": {
        "kind": "mistake",
        "cells": {"online_softmax": _online(m0="torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)")},
        "fails": {"test_online_softmax": "-inf"},
        "not_named": ["last block", "rescale"],
    },
    "online_block_max_only": {
        "kind": "mistake",
        "cells": {"online_softmax": _online(m_new="block.max(dim=-1, keepdim=True).values")},
        "fails": {"test_online_softmax": "running maximum"},
        "not_named": ["last block", "-inf"],
    },
    "online_drops_short_last_block": {
        "kind": "mistake",
        "cells": {"online_softmax": _online(blocks="range(0, n - block_size + 1, block_size)")},
        "fails": {"test_online_softmax": "last block"},
        "not_named": ["rescale", "-inf", "running maximum"],
    },
    "online_one_max_for_all_rows": {
        "kind": "mistake",
        "cells": {"online_softmax": '''def online_softmax(x, block_size):
    m = torch.tensor(float("-inf"))
    l = torch.zeros(x.shape[:-1] + (1,))
    for i in range(0, x.shape[-1], block_size):
        blk = x[..., i:i + block_size]
        m_new = torch.maximum(m, blk.max())
        l = l * torch.exp(m - m_new) + torch.exp(blk - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l
'''},
        "fails": {"test_online_softmax": "shared by all rows"},
        "not_named": ["last block", "-inf", "rescale"],
    },
    "online_no_keepdim": {
        "kind": "mistake",
        "cells": {"online_softmax": '''def online_softmax(x, block_size):
    m = torch.full(x.shape[:-1], float("-inf"))
    l = torch.zeros(x.shape[:-1])
    for i in range(0, x.shape[-1], block_size):
        blk = x[..., i:i + block_size]
        m_new = torch.maximum(m, blk.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(blk - m_new).sum(dim=-1)
        m = m_new
    return torch.exp(x - m) / l
'''},
        "fails": {"test_online_softmax": "keepdim"},
        "not_named": ["last block", "-inf", "rescale"],
    },
    "online_blocks_of_rows": {
        "kind": "mistake",
        "cells": {"online_softmax": '''def online_softmax(x, block_size):
    m = torch.full_like(x[:1], float("-inf"))
    l = torch.zeros_like(x[:1])
    for i in range(0, x.shape[0], block_size):
        blk = x[i:i + block_size]
        m_new = torch.maximum(m, blk.max(dim=0, keepdim=True).values)
        l = l * torch.exp(m - m_new) + torch.exp(blk - m_new).sum(dim=0, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l
'''},
        "fails": {"test_online_softmax": "last dimension"},
        "not_named": ["-inf", "rescale", "last block"],
    },
    "online_softmax_per_block": {
        "kind": "mistake",
        "cells": {"online_softmax": '''def online_softmax(x, block_size):
    lse = torch.full(x.shape[:-1] + (1,), float("-inf"))
    for i in range(0, x.shape[-1], block_size):
        lse = torch.logaddexp(lse, torch.logsumexp(x[..., i:i + block_size], dim=-1, keepdim=True))
    return torch.exp(x - lse)
'''},
        "fails": {"test_online_softmax": "logsumexp"},
        "not_named": ["-inf", "rescale", "last block"],
    },
    # Part 2: tiled_attention
    "tiled_no_scale": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(scale="1.0")},
        "fails": {"test_tiled_attention": "not scaled", "test_tiled_attention_causal": "not scaled",
                  "test_tiled_attention_memory": "not scaled"},
        "not_named": ["rescale", "start + j", "below 1"],
    },
    "tiled_scale_by_d": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(scale="1.0 / d")},
        "fails": {"test_tiled_attention": "divided by d", "test_tiled_attention_causal": "divided by d",
                  "test_tiled_attention_memory": "divided by d"},
        "not_named": ["rescale", "start + j", "below 1"],
    },
    "tiled_output_not_rescaled": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(o_update="o + p @ v")},
        "fails": {"test_tiled_attention": "rescale", "test_tiled_attention_causal": "rescale",
                  "test_tiled_attention_memory": "rescale"},
        "not_named": ["not scaled", "start + j", "below 1"],
    },
    "tiled_sum_not_rescaled": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(l_update="l + p.sum(dim=-1, keepdim=True)")},
        "fails": {"test_tiled_attention": "rescale", "test_tiled_attention_causal": "rescale",
                  "test_tiled_attention_memory": "rescale"},
        "not_named": ["not scaled", "start + j", "below 1"],
    },
    "tiled_causal_local_positions": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(k_pos="torch.arange(k.shape[-2])[None, :]")},
        "fails": {"test_tiled_attention_causal": "start"},
        "not_named": ["not scaled", "rescale", "below 1"],
    },
    "tiled_causal_blocks_diagonal": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(blocked="k_pos >= q_pos")},
        "fails": {"test_tiled_attention_causal": "itself"},
        "not_named": ["not scaled", "rescale", "below 1"],
    },
    "tiled_causal_ignored": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(blocked="torch.zeros_like(s, dtype=torch.bool)")},
        "fails": {"test_tiled_attention_causal": "ignored"},
        "not_named": ["not scaled", "rescale", "below 1"],
    },
    "tiled_full_mask_sliced": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(
            k_pos="torch.triu(torch.ones(T, keys.shape[-2], dtype=torch.bool), 1)",
            blocked="k_pos[:, start:start + k.shape[-2]]")},
        "fails": {"test_tiled_attention_memory": "(T, T)"},
        "not_named": ["not scaled", "rescale", "start + j"],
    },
    "tiled_no_block_size_check": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(check="pass")},
        "fails": {"test_tiled_attention_arguments": "block_size"},
        "not_named": ["not scaled", "rescale", "start + j"],
    },
    "tiled_keys_dot_T": {
        "kind": "mistake",
        "cells": {"tiled_attention": _tiled(scores="(queries @ k.T) * scale")},
        "fails": {"test_tiled_attention": ".T", "test_tiled_attention_causal": ".T"},
        "not_named": ["not scaled", "rescale", "start + j"],
    },
    "tiled_two_passes": {
        "kind": "mistake",
        "cells": {"tiled_attention": '''import math


def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    T, d = queries.shape[-2:]
    pos = torch.arange(T)
    m = torch.full(queries.shape[:-1] + (1,), float("-inf"))
    for j in range(0, T, block_size):
        s = queries @ keys[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(d)
        if causal:
            s = s.masked_fill(pos[j:j + block_size][None, :] > pos[:, None], float("-inf"))
        m = torch.maximum(m, s.amax(-1, keepdim=True))
    l = torch.zeros_like(m)
    o = torch.zeros_like(queries)
    for j in range(0, T, block_size):
        s = queries @ keys[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(d)
        if causal:
            s = s.masked_fill(pos[j:j + block_size][None, :] > pos[:, None], float("-inf"))
        p = torch.exp(s - m)
        l = l + p.sum(-1, keepdim=True)
        o = o + p @ values[..., j:j + block_size, :]
    return o / l
'''},
        "fails": {"test_tiled_attention": "two-pass", "test_tiled_attention_causal": "two-pass"},
        "not_named": ["not scaled", "rescale", "start + j"],
    },
    # issue 45: a right online softmax in log-sum-exp form (each tile normalised by the library's softmax, the tiles
    # merged through logaddexp), once counted as a mistake because it calls torch.softmax: it earns full marks
    "tiled_softmax_per_tile": {
        "kind": "correct",
        "cells": {"tiled_attention": '''def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    T, d = queries.shape[-2], queries.shape[-1]
    lse = torch.full(queries.shape[:-1] + (1,), float("-inf"))
    o = torch.zeros_like(queries)
    for start in range(0, T, block_size):
        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) / d ** 0.5
        if causal:
            kp = torch.arange(start, min(start + block_size, T))
            s = s.masked_fill(kp[None, :] > torch.arange(T)[:, None], float("-inf"))
        tile_lse = torch.logsumexp(s, dim=-1, keepdim=True)
        new_lse = torch.logaddexp(lse, tile_lse)
        o = o * torch.exp(lse - new_lse) + torch.softmax(s, dim=-1).nan_to_num() @ values[..., start:start + block_size, :] * torch.exp(tile_lse - new_lse)
        lse = new_lse
    return o
'''},
    },
    "tiled_keeps_all_tiles": {
        "kind": "mistake",
        "cells": {"tiled_attention": '''import math


def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    T, d = queries.shape[-2:]
    m = torch.full(queries.shape[:-1] + (1,), float("-inf"))
    l = torch.zeros_like(m)
    o = torch.zeros_like(queries)
    tiles = []
    for start in range(0, keys.shape[-2], block_size):
        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(d)
        if causal:
            kp = torch.arange(start, start + s.shape[-1])
            s = s.masked_fill(kp[None, :] > torch.arange(T)[:, None], float("-inf"))
        tiles.append(s)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ values[..., start:start + block_size, :]
        m = m_new
    return o / l
'''},
        "fails": {"test_tiled_attention_memory": "tiles"},
        "not_named": ["not scaled", "rescale", "start + j", "(T, T)"],
    },
    # Part 3: merge_attention
    "merge_exp_of_lse": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''w_a, w_b = torch.exp(lse_a), torch.exp(lse_b)
    total = w_a + w_b
    out = (w_a[..., None] * out_a + w_b[..., None] * out_b) / total[..., None]
    return torch.nan_to_num(out), torch.log(total)''')},
        "fails": {"test_merge_attention": "overflow"},
        "not_named": ["weights are swapped", "[..., None]", "in place"],
    },
    "merge_plain_average": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)''')},
        "fails": {"test_merge_attention": "average"},
        "not_named": ["weights are swapped", "[..., None]", "in place", "overflow"],
    },
    "merge_lse_is_max": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''m = torch.maximum(lse_a, lse_b)
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    w_a, w_b = torch.exp(lse_a - safe), torch.exp(lse_b - safe)
    out = (w_a[..., None] * out_a + w_b[..., None] * out_b) / (w_a + w_b).clamp_min(1e-30)[..., None]
    return out, m''')},
        "fails": {"test_merge_attention": "not the larger"},
        "not_named": ["weights are swapped", "[..., None]", "in place", "overflow"],
    },
    "merge_both_empty_nan": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''lse = torch.logaddexp(lse_a, lse_b)
    out = torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b
    return out, lse''')},
        "fails": {"test_merge_attention": "-inf"},
        "not_named": ["weights are swapped", "[..., None]", "in place", "overflow"],
    },
    "merge_shared_max_nan": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    out = (w_a.unsqueeze(-1) * out_a + w_b.unsqueeze(-1) * out_b) / (w_a + w_b).unsqueeze(-1)
    return out, m + torch.log(w_a + w_b)''')},
        "fails": {"test_merge_attention": "-inf"},
        "not_named": ["weights are swapped", "[..., None]", "in place", "overflow"],
    },
    "merge_weights_swapped": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_b - safe)[..., None]
    w_b = torch.exp(lse_a - safe)[..., None]
    return w_a * out_a + w_b * out_b, lse''')},
        "fails": {"test_merge_attention": "weights are swapped"},
        "not_named": ["[..., None]", "in place", "overflow"],
    },
    "merge_weights_without_last_axis": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return torch.exp(lse_a - safe) * out_a + torch.exp(lse_b - safe) * out_b, lse''')},
        "fails": {"test_merge_attention": "[..., None]"},
        "not_named": ["weights are swapped", "in place", "overflow"],
    },
    "merge_in_place": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(body='''lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    out_a.mul_(torch.exp(lse_a - safe)[..., None])
    out_a.add_(out_b * torch.exp(lse_b - safe)[..., None])
    return out_a, lse''')},
        "fails": {"test_merge_attention": "changed its inputs"},
        "not_named": ["weights are swapped", "[..., None]", "overflow"],
    },
    "merge_no_shape_check": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(check="pass")},
        "fails": {"test_merge_attention": "lse_a"},
        "not_named": ["weights are swapped", "[..., None]", "in place", "overflow"],
    },
    "merge_checks_lse_a_only": {
        "kind": "mistake",
        "cells": {"merge_attention": _merge(check='''if lse_a.shape != out_a.shape[:-1]:
        raise ValueError(f"lse_a has shape {tuple(lse_a.shape)}, expected {tuple(out_a.shape[:-1])}")''')},
        "fails": {"test_merge_attention": "lse_b"},
        "not_named": ["weights are swapped", "[..., None]", "in place", "overflow"],
    },
    # Correct code in other styles: must get full marks
    "correct_flash2_style": {
        "kind": "correct",
        "cells": {
            "online_softmax": _online(),
            "tiled_attention": _tiled(),
            "merge_attention": _merge(),
        },
    },
    "correct_cs336_style": {
        "kind": "correct",
        "cells": {
            "online_softmax": '''def online_softmax(x, block_size):
    running_max = None
    running_sum = None
    for start in range(0, x.size(-1), block_size):
        tile = x[..., start:start + block_size]
        tile_max = tile.amax(dim=-1, keepdim=True)
        if running_max is None:
            running_max = tile_max
            running_sum = (tile - tile_max).exp().sum(dim=-1, keepdim=True)
            continue
        new_max = torch.maximum(running_max, tile_max)
        running_sum = running_sum * (running_max - new_max).exp() + (tile - new_max).exp().sum(dim=-1, keepdim=True)
        running_max = new_max
    return (x - running_max).exp() / running_sum
''',
            "tiled_attention": '''import math


def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size={block_size}: must be a positive integer")
    *batch, n_q, d = queries.shape
    n_k = keys.shape[-2]
    scale = 1 / math.sqrt(d)
    o_i = torch.zeros_like(queries)
    l_i = queries.new_zeros(*batch, n_q)
    m_i = queries.new_full((*batch, n_q), float("-inf"))
    q_idx = torch.arange(n_q)
    for j in range(0, n_k, block_size):
        k_j = keys[..., j:j + block_size, :]
        v_j = values[..., j:j + block_size, :]
        s_ij = torch.einsum("...qd,...kd->...qk", queries, k_j) * scale
        if causal:
            k_idx = torch.arange(j, j + k_j.shape[-2])
            s_ij = torch.where(k_idx[None, :] <= q_idx[:, None], s_ij, float("-inf"))
        m_new = torch.maximum(m_i, s_ij.amax(dim=-1))
        p_ij = torch.exp(s_ij - m_new[..., None])
        corr = torch.exp(m_i - m_new)
        l_i = corr * l_i + p_ij.sum(dim=-1)
        o_i = corr[..., None] * o_i + torch.einsum("...qk,...kd->...qd", p_ij, v_j)
        m_i = m_new
    return o_i / l_i[..., None]
''',
            "merge_attention": '''def merge_attention(out_a, lse_a, out_b, lse_b):
    if lse_a.shape != out_a.shape[:-1]:
        raise ValueError(f"lse_a must have shape {tuple(out_a.shape[:-1])}, got {tuple(lse_a.shape)}")
    if lse_b.shape != out_b.shape[:-1]:
        raise ValueError(f"lse_b must have shape {tuple(out_b.shape[:-1])}, got {tuple(lse_b.shape)}")
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e_a, e_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    total = e_a + e_b
    lse = m + torch.log(total)
    out = (e_a.unsqueeze(-1) * out_a + e_b.unsqueeze(-1) * out_b) / total.clamp_min(1e-38).unsqueeze(-1)
    return out, lse
''',
        },
    },
    "correct_plain_loops": {
        "kind": "correct",
        "cells": {
            "online_softmax": '''import math


def online_softmax(x, block_size):
    flat = x.reshape(-1, x.shape[-1])
    out = torch.empty_like(flat)
    for r in range(flat.shape[0]):
        row = flat[r]
        m, l = -math.inf, 0.0
        for start in range(0, row.shape[0], block_size):
            block = row[start:start + block_size]
            m_new = max(m, block.max().item())
            l = l * math.exp(m - m_new) + torch.exp(block - m_new).sum().item()
            m = m_new
        out[r] = torch.exp(row - m) / l
    return out.reshape(x.shape)
''',
        },
    },
}
