"""Submission bank for step 10: correct variants written another way, and common mistakes."""

# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (it computes the right numbers),
# so only the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
CHEATS_RIDE_ON = "softmax_calls_torch_softmax"


def _edit(text, *pairs):
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


# The answer key's functions, written out so that mistakes can change one line of them.
_SOFTMAX = (
    "def online_softmax(x, block_size):\n"
    "    running_max = torch.full_like(x[..., :1], float('-inf'))\n"
    "    running_sum = torch.zeros_like(x[..., :1])\n"
    "    for start in range(0, x.shape[-1], block_size):\n"
    "        block = x[..., start:start + block_size]\n"
    "        new_max = torch.maximum(running_max, block.amax(dim=-1, keepdim=True))\n"
    "        running_sum = running_sum * torch.exp(running_max - new_max)"
    " + torch.exp(block - new_max).sum(-1, keepdim=True)\n"
    "        running_max = new_max\n"
    "    return torch.exp(x - running_max) / running_sum\n"
)

_TILED = (
    "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
    "    if block_size < 1:\n"
    "        raise ValueError(f'block_size must be at least 1, got {block_size}')\n"
    "    num_tokens, scale = keys.shape[-2], queries.shape[-1] ** -0.5\n"
    "    running_max = torch.full_like(queries[..., :1], float('-inf'))\n"
    "    running_sum = torch.zeros_like(queries[..., :1])\n"
    "    output = torch.zeros_like(queries)\n"
    "    query_positions = torch.arange(queries.shape[-2])[:, None]\n"
    "    for start in range(0, num_tokens, block_size):\n"
    "        scores = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) * scale\n"
    "        if causal:\n"
    "            key_positions = torch.arange(start, min(start + block_size, num_tokens))\n"
    "            scores = scores.masked_fill(key_positions > query_positions, float('-inf'))\n"
    "        new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))\n"
    "        rescale = torch.exp(running_max - new_max)\n"
    "        weights = torch.exp(scores - new_max)\n"
    "        running_sum = running_sum * rescale + weights.sum(dim=-1, keepdim=True)\n"
    "        output = output * rescale + weights @ values[..., start:start + block_size, :]\n"
    "        running_max = new_max\n"
    "    return output / running_sum\n"
)

# Silences the visible checks (as a cheat of tests/bank/integrity.py does), so that the hidden checks' message shows.
_SILENCE_CHECKS = (
    "import attention_course.checks as _checks\n"
    "for _name in ('fail', 'expect', 'expect_tensor', 'expect_shape', 'expect_close', 'expect_value_error'):\n"
    "    setattr(_checks, _name, lambda *args, **kwargs: None)\n"
    "    globals()[_name] = lambda *args, **kwargs: None\n"
)

_SOFTMAX_NO_RESCALE = _edit(_SOFTMAX, ("running_sum * torch.exp(running_max - new_max)", "running_sum"))
_TILED_ONLY_SUM = _edit(_TILED, ("output = output * rescale + ", "output = output + "))

VARIANTS = {
    "split_blocks_einsum_normalised_output": {
        "kind": "correct",
        "cells": {
            "online_softmax":
                "def online_softmax(x, block_size):\n"
                "    m = x.new_full(x.shape[:-1], -float('inf'))\n"
                "    l = x.new_zeros(x.shape[:-1])\n"
                "    for block in x.split(block_size, dim=-1):\n"
                "        m_new = torch.max(m, block.max(dim=-1).values)\n"
                "        l = l * (m - m_new).exp() + (block - m_new.unsqueeze(-1)).exp().sum(dim=-1)\n"
                "        m = m_new\n"
                "    return (x - m.unsqueeze(-1)).exp() / l.unsqueeze(-1)\n",
            # keeps the output normalised after every block (FlashAttention-1's bookkeeping)
            "tiled_attention":
                "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
                "    if block_size <= 0:\n"
                "        raise ValueError('block_size must be positive')\n"
                "    T, d = queries.shape[-2], queries.shape[-1]\n"
                "    m = torch.full(queries.shape[:-1], -torch.inf, dtype=queries.dtype)\n"
                "    l = torch.zeros(queries.shape[:-1], dtype=queries.dtype)\n"
                "    o = torch.zeros_like(queries)\n"
                "    rows = torch.arange(T).unsqueeze(1)\n"
                "    for start, (k, v) in zip(range(0, keys.shape[-2], block_size),\n"
                "                             zip(keys.split(block_size, -2), values.split(block_size, -2))):\n"
                "        s = torch.einsum('...qd,...kd->...qk', queries, k) / d ** 0.5\n"
                "        if causal:\n"
                "            cols = start + torch.arange(k.shape[-2]).unsqueeze(0)\n"
                "            s = torch.where(cols <= rows, s, torch.tensor(-1e30, dtype=s.dtype))\n"
                "        m_new = torch.maximum(m, s.amax(-1))\n"
                "        p = torch.exp(s - m_new[..., None])\n"
                "        l_new = l * torch.exp(m - m_new) + p.sum(-1)\n"
                "        o = (o * (l * torch.exp(m - m_new))[..., None] + torch.einsum('...qk,...kd->...qd', p, v))\n"
                "        o = o / l_new[..., None]\n"
                "        m, l = m_new, l_new\n"
                "    return o\n",
        },
    },
    "query_and_key_tiles_skip_future": {
        "kind": "correct",
        "cells": {
            "online_softmax":
                "import math\n"
                "\n"
                "def online_softmax(x, block_size):\n"
                "    n = x.size(-1)\n"
                "    top = torch.full(x.shape[:-1] + (1,), -math.inf)\n"
                "    total = torch.zeros(x.shape[:-1] + (1,))\n"
                "    start = 0\n"
                "    while start < n:\n"
                "        chunk = x[..., start:min(n, start + block_size)]\n"
                "        chunk_top = chunk.max(dim=-1, keepdim=True).values\n"
                "        bigger = torch.maximum(top, chunk_top)\n"
                "        total = total * torch.exp(top - bigger) + torch.sum(torch.exp(chunk - bigger), -1, keepdim=True)\n"
                "        top = bigger\n"
                "        start += block_size\n"
                "    return torch.exp(x - top) / total\n",
            # tiles the queries too, as the real kernel does, and skips key tiles entirely in a query tile's future
            "tiled_attention":
                "import math\n"
                "\n"
                "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
                "    if not block_size >= 1:\n"
                "        raise ValueError(f'block_size={block_size} is not a positive block size')\n"
                "    T = queries.shape[-2]\n"
                "    out = []\n"
                "    for qs in range(0, T, block_size):\n"
                "        q = queries[..., qs:qs + block_size, :] / math.sqrt(queries.shape[-1])\n"
                "        m = torch.full(q.shape[:-1] + (1,), -math.inf)\n"
                "        l = torch.zeros(q.shape[:-1] + (1,))\n"
                "        acc = torch.zeros(q.shape[:-1] + (values.shape[-1],))\n"
                "        for ks in range(0, keys.shape[-2], block_size):\n"
                "            if causal and ks > qs + q.shape[-2] - 1:\n"
                "                break\n"
                "            s = torch.matmul(q, keys[..., ks:ks + block_size, :].mT)\n"
                "            if causal:\n"
                "                qpos = torch.arange(qs, qs + q.shape[-2]).view(-1, 1)\n"
                "                kpos = torch.arange(ks, ks + s.shape[-1]).view(1, -1)\n"
                "                s = s.masked_fill(kpos > qpos, -math.inf)\n"
                "            m2 = torch.maximum(m, s.max(-1, keepdim=True).values)\n"
                "            p = (s - m2).exp()\n"
                "            alpha = (m - m2).exp()\n"
                "            l = alpha * l + p.sum(-1, keepdim=True)\n"
                "            acc = alpha * acc + torch.matmul(p, values[..., ks:ks + block_size, :])\n"
                "            m = m2\n"
                "        out.append(acc / l)\n"
                "    return torch.cat(out, dim=-2)\n",
        },
    },
    # A variable named softmax is not a call of torch's softmax.
    "result_named_softmax": {
        "kind": "correct",
        "cells": {"online_softmax": _edit(_SOFTMAX, ("    return torch.exp(x - running_max) / running_sum\n",
                                                     "    softmax = torch.exp(x - running_max) / running_sum\n"
                                                     "    return softmax\n"))},
    },
    "softmax_no_rescale": {
        "kind": "mistake",
        "cells": {"online_softmax": _SOFTMAX_NO_RESCALE},
        "fails": {"test_online_softmax": "exp(m - m_new)"},
    },
    "softmax_no_running_max": {
        "kind": "mistake",
        "cells": {"online_softmax":
                  "def online_softmax(x, block_size):\n"
                  "    total = 0\n"
                  "    for start in range(0, x.shape[-1], block_size):\n"
                  "        total = total + torch.exp(x[..., start:start + block_size]).sum(-1, keepdim=True)\n"
                  "    return torch.exp(x) / total\n"},
        "fails": {"test_online_softmax": "overflows"},
    },
    "softmax_skips_last_block": {
        "kind": "mistake",
        "cells": {"online_softmax": _edit(_SOFTMAX, ("range(0, x.shape[-1], block_size)",
                                                     "range(0, x.shape[-1] - block_size + 1, block_size)"))},
        "fails": {"test_online_softmax": "may be shorter than block_size"},
    },
    "softmax_calls_torch_softmax": {
        "kind": "mistake",
        "cells": {"online_softmax":
                  "def online_softmax(x, block_size):\n"
                  "    return torch.softmax(x, dim=-1)\n"},
        "fails": {"test_online_softmax": "write the loop"},
    },
    "softmax_imported_under_another_name": {
        "kind": "mistake",
        "cells": {"online_softmax":
                  "from torch.nn.functional import softmax as normalise\n"
                  "\n"
                  "def online_softmax(x, block_size):\n"
                  "    assert block_size >= 1\n"
                  "    return normalise(x, dim=-1)\n"},
        "fails": {"test_online_softmax": "write the loop"},
    },
    "tiled_rescales_only_the_sum": {
        "kind": "mistake",
        "cells": {"tiled_attention": _TILED_ONLY_SUM},
        "fails": {"test_tiled_attention": "AND the running sum", "test_tiled_attention_causal": "tiled_attention",
                  "test_tiled_attention_memory": "tiled_attention"},
    },
    "tiled_block_local_positions": {
        "kind": "mistake",
        "cells": {"tiled_attention": _edit(_TILED, ("torch.arange(start, min(start + block_size, num_tokens))",
                                                    "torch.arange(min(block_size, num_tokens - start))"))},
        "fails": {"test_tiled_attention_causal": "start + j"},
    },
    "tiled_causal_hides_itself": {
        "kind": "mistake",
        "cells": {"tiled_attention": _edit(_TILED, ("key_positions > query_positions",
                                                    "key_positions >= query_positions"))},
        "fails": {"test_tiled_attention_causal": "see itself"},
    },
    "tiled_full_causal_mask": {
        "kind": "mistake",
        "cells": {"tiled_attention": _edit(
            _TILED, ("    query_positions = torch.arange(queries.shape[-2])[:, None]\n",
                     "    full_mask = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)\n"),
            ("            key_positions = torch.arange(start, min(start + block_size, num_tokens))\n"
             "            scores = scores.masked_fill(key_positions > query_positions, float('-inf'))\n",
             "            scores = scores.masked_fill(full_mask[:, start:start + block_size], float('-inf'))\n"))},
        "fails": {"test_tiled_attention_memory": "(T, T)"},
    },
    "tiled_builds_the_whole_matrix": {
        "kind": "mistake",
        "cells": {"tiled_attention":
                  "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
                  "    if block_size < 1:\n"
                  "        raise ValueError('block_size must be at least 1')\n"
                  "    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5\n"
                  "    if causal:\n"
                  "        T = scores.shape[-1]\n"
                  "        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))\n"
                  "    return torch.softmax(scores, dim=-1) @ values\n"},
        "fails": {"test_tiled_attention_memory": "as large as the (T, T)"},
    },
    "tiled_accepts_block_size_zero": {
        "kind": "mistake",
        "cells": {"tiled_attention": _edit(_TILED, (
            "    if block_size < 1:\n        raise ValueError(f'block_size must be at least 1, got {block_size}')\n",
            ""))},
        "fails": {"test_tiled_attention_arguments": "ValueError"},
    },
    # The same mistakes with the visible checks silenced: the hidden checks name them, from the mistaken function
    # written out in the judge.
    "softmax_no_rescale_unseen": {
        "kind": "mistake",
        "cells": {"online_softmax": _SILENCE_CHECKS + _SOFTMAX_NO_RESCALE},
        "fails": {"test_online_softmax": "multiply it by exp(m - m_new)"},
    },
    "tiled_rescales_only_the_sum_unseen": {
        "kind": "mistake",
        "cells": {"tiled_attention": _SILENCE_CHECKS + _TILED_ONLY_SUM},
        "fails": {"test_tiled_attention": "the running output was computed with the old maximum",
                  "test_tiled_attention_causal": "the running output was computed with the old maximum",
                  "test_tiled_attention_memory": "the running output was computed with the old maximum"},
    },
}
