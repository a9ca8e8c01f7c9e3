"""Submission bank for step 10: correct variants written another way, and common mistakes."""
from bank import edit as _edit


# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (it computes the right numbers),
# so only the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
# A cheat that silences the checks rebinds names at run time, which fails both parts with a rule about how they are
# written: it rides on a mistake that fails both.
CHEATS_RIDE_ON = "both_parts_call_a_library"




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
_SILENCE_CHECKS = (  # without globals() or setattr, which the rules about how a part is written refuse
    "import attention_course.checks as _checks\n"
    "_checks.fail = _checks.expect = _checks.expect_tensor = _checks.expect_shape = _checks.expect_close = \\\n"
    "    _checks.expect_value_error = lambda *args, **kwargs: None\n"
    "fail = expect = expect_tensor = expect_shape = expect_close = expect_value_error = lambda *args, **kwargs: None\n"
)

_SOFTMAX_NO_RESCALE = _edit(_SOFTMAX, ("running_sum * torch.exp(running_max - new_max)", "running_sum"))
_TILED_ONLY_SUM = _edit(_TILED, ("output = output * rescale + ", "output = output + "))

# A reference to _thread.start_new_thread kept before any watch starts a thread inside the watched call; the work runs
# there, out of the dispatch mode's sight, while the calling thread shows the operations the checks look for
_KEPT_THREAD_START = (
    "import _thread, time\n"
    "_start = _thread.start_new_thread\n"
    "\n"
    "def _elsewhere(fn):\n"
    "    box, done = {}, _thread.allocate_lock()\n"
    "    done.acquire()\n"
    "    before = _thread._count()\n"
    "    def run():\n"
    "        try:\n"
    "            box['r'] = fn()\n"
    "        finally:\n"
    "            done.release()\n"
    "    _start(run, ())\n"
    "    done.acquire()\n"
    "    while _thread._count() > before:\n"
    "        time.sleep(0.0005)\n"
    "    return box['r']\n"
    "\n"
    "def online_softmax(x, block_size):\n"
    "    for j in range(0, x.shape[-1], block_size):\n"
    "        torch.exp(x[..., j:j + block_size])\n"
    "    return _elsewhere(lambda: torch.softmax(x, -1))\n"
)
_KEPT_THREAD_TILED = (
    "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
    "    if block_size < 1:\n"
    "        raise ValueError(f'block_size must be at least 1, got {block_size}')\n"
    "    for j in range(0, keys.shape[-2], block_size):\n"
    "        torch.exp(keys[..., j:j + block_size, :].sum())\n"
    "    return _elsewhere(lambda: F.scaled_dot_product_attention(queries, keys, values, is_causal=causal))\n"
)

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
    "both_parts_call_a_library": {
        "kind": "mistake",
        "cells": {"online_softmax": "def online_softmax(x, block_size):\n    return torch.softmax(x, dim=-1)\n",
                  "tiled_attention": _edit(_TILED, (
                      "    num_tokens, scale = keys.shape[-2], queries.shape[-1] ** -0.5\n",
                      "    return F.scaled_dot_product_attention(queries, keys, values, is_causal=causal)\n"
                      "    num_tokens, scale = keys.shape[-2], queries.shape[-1] ** -0.5\n"))},
        "fails": {"test_online_softmax": "write the loop", "test_tiled_attention": "a library's",
                  "test_tiled_attention_causal": "a library's",
                  "test_tiled_attention_memory": "as large as the (T, T)"},
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
                  "    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))\n"
                  "    return weights / weights.sum(dim=-1, keepdim=True) @ values\n"},
        # it reads every key block before any exponential (a whole row of scores at a time): not the online loop
        "fails": {"test_tiled_attention_memory": "as large as the (T, T)", "test_tiled_attention": "watched operation",
                  "test_tiled_attention_causal": "watched operation"},
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
    "kept_thread_start_reference": {
        "kind": "cheat",
        "cells": {"online_softmax": _KEPT_THREAD_START, "tiled_attention": _KEPT_THREAD_TILED},
        "fails": {"test_online_softmax": "started a thread or a process", "test_tiled_attention": "started a thread or a process",
                  "test_tiled_attention_causal": "started a thread or a process",
                  "test_tiled_attention_memory": "started a thread or a process"},
    },
}


# ---------------------------------------------------------------------------------------------------------------
# more students' styles (correct), and more mistakes
# ---------------------------------------------------------------------------------------------------------------

_SOFTMAX_WHILE_FINFO = '''def online_softmax(x, block_size):
    lowest = torch.finfo(x.dtype).min
    n = x.shape[-1]
    m = torch.full((*x.shape[:-1], 1), lowest, dtype=x.dtype)
    s = torch.zeros((*x.shape[:-1], 1), dtype=x.dtype)
    i = 0
    while i < n:
        j = min(i + block_size, n)
        piece = x[..., i:j]
        m_next = torch.maximum(m, torch.amax(piece, dim=-1, keepdim=True))
        s = s * torch.exp(m - m_next) + torch.sum(torch.exp(piece - m_next), dim=-1, keepdim=True)
        m = m_next
        i = j
    weights = torch.exp(x - m) / s
    return weights
'''

_TILED_WHILE_BMM = '''import math

def tiled_attention(queries, keys, values, block_size, causal=False):
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    *batch, T, d = queries.shape
    q = queries.reshape(-1, T, d) / math.sqrt(d)
    k = keys.reshape(-1, T, d)
    v = values.reshape(-1, T, values.shape[-1])
    lowest = torch.finfo(q.dtype).min
    m = torch.full((q.shape[0], T, 1), lowest, dtype=q.dtype)
    l = torch.zeros((q.shape[0], T, 1), dtype=q.dtype)
    acc = torch.zeros((q.shape[0], T, v.shape[-1]), dtype=q.dtype)
    row = torch.arange(T).reshape(T, 1)
    i = 0
    while i < T:
        j = min(i + block_size, T)
        s = torch.bmm(q, k[:, i:j].transpose(1, 2))
        if causal:
            col = torch.arange(i, j).reshape(1, j - i)
            s = torch.where(col > row, torch.full_like(s, lowest), s)
        m_next = torch.maximum(m, s.amax(dim=2, keepdim=True))
        e = torch.exp(s - m_next)
        c = torch.exp(m - m_next)
        l = c * l + e.sum(dim=2, keepdim=True)
        acc = c * acc + torch.bmm(e, v[:, i:j])
        m = m_next
        i = j
    return (acc / l).reshape(*batch, T, v.shape[-1])
'''

# float64 inside, blocks from torch.split, the maximum started from the first block, the output kept normalised
_SOFTMAX_SPLIT_F64 = '''def online_softmax(x, block_size):
    pieces = torch.split(x.to(torch.float64), block_size, dim=-1)
    mx = pieces[0].max(dim=-1, keepdim=True).values
    total = torch.exp(pieces[0] - mx).sum(dim=-1, keepdim=True)
    for piece in pieces[1:]:
        bigger = torch.maximum(mx, piece.max(dim=-1, keepdim=True).values)
        total = total * torch.exp(mx - bigger) + torch.exp(piece - bigger).sum(dim=-1, keepdim=True)
        mx = bigger
    return (torch.exp(x.to(torch.float64) - mx) / total).to(x.dtype)
'''

_TILED_CHUNK_F64 = '''import math

def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError("block_size has to be >= 1 (got %r)" % (block_size,))
    dtype = queries.dtype
    q, k, v = queries.double(), keys.double(), values.double()
    d = q.shape[-1]
    n = k.shape[-2]
    n_blocks = math.ceil(n / block_size)
    m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=torch.float64)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=torch.float64)
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=torch.float64)
    qpos = torch.arange(q.shape[-2]).unsqueeze(-1)
    start = 0
    for k_blk, v_blk in zip(k.chunk(n_blocks, dim=-2), v.chunk(n_blocks, dim=-2)):
        s = q @ k_blk.transpose(-1, -2) * (1.0 / d ** 0.5)
        if causal:
            kpos = torch.arange(start, start + k_blk.shape[-2]).unsqueeze(0)
            s = s.masked_fill(kpos > qpos, -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        l_new = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        # keeps `out` normalised after every block
        out = (out * (l * torch.exp(m - m_new)) + p @ v_blk) / l_new
        m, l = m_new, l_new
        start += k_blk.shape[-2]
    return out.to(dtype)
'''

# running log-sum-exp (torch.logaddexp in part 1, torch.logsumexp in part 2, which only part 1 forbids)
_SOFTMAX_LOGADDEXP = '''def online_softmax(x, block_size):
    lse = torch.full_like(x[..., :1], float("-inf"))
    for lo in range(0, x.size(-1), block_size):
        chunk = x[..., lo:lo + block_size]
        top = chunk.amax(-1, keepdim=True)
        chunk_lse = top + torch.log(torch.exp(chunk - top).sum(-1, keepdim=True))
        lse = torch.logaddexp(lse, chunk_lse)
    return torch.exp(x - lse)
'''

_TILED_LOGSUMEXP = '''def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size={block_size}: need at least one key per block")
    d = queries.shape[-1]
    T = keys.shape[-2]
    lse = torch.full(queries.shape[:-1], float("-inf"), dtype=queries.dtype)
    out = torch.zeros(queries.shape[:-1] + values.shape[-1:], dtype=queries.dtype)
    qi = torch.arange(queries.shape[-2])[:, None]
    for lo in range(0, T, block_size):
        hi = min(lo + block_size, T)
        s = torch.einsum("...id,...jd->...ij", queries, keys[..., lo:hi, :]) * d ** -0.5
        if causal:
            s = s.masked_fill(torch.arange(lo, hi)[None, :] > qi, float("-inf"))
        block_lse = torch.logsumexp(s, dim=-1)
        new_lse = torch.logaddexp(lse, block_lse)
        p = torch.exp(s - new_lse[..., None])
        out = out * torch.exp(lse - new_lse)[..., None] + torch.einsum("...ij,...jd->...id", p, values[..., lo:hi, :])
        lse = new_lse
    return out
'''

# unfold over -inf padding, with helpers of their own
_SOFTMAX_UNFOLD_HELPER = '''import torch.nn.functional as F

def _update(m, l, block):
    m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
    return m_new, l * (m - m_new).exp() + (block - m_new).exp().sum(dim=-1, keepdim=True)

def online_softmax(x, block_size):
    n = x.shape[-1]
    pad = (-n) % block_size
    padded = F.pad(x, (0, pad), value=float("-inf"))
    blocks = padded.unfold(-1, block_size, block_size)  # (..., n_blocks, block_size)
    m = torch.full_like(x[..., :1], float("-inf"))
    l = torch.zeros_like(x[..., :1])
    for b in range(blocks.shape[-2]):
        m, l = _update(m, l, blocks[..., b, :])
    return (x - m).exp() / l
'''

_TILED_TRIU_HELPER = '''def softmax_block(scores, m, l, o, v):
    m_new = torch.max(m, scores.max(dim=-1, keepdim=True).values)
    alpha = (m - m_new).exp()
    p = (scores - m_new).exp()
    return m_new, alpha * l + p.sum(dim=-1, keepdim=True), alpha * o + p @ v

def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    T, d = queries.shape[-2], queries.shape[-1]
    m = queries.new_full(queries.shape[:-1] + (1,), float("-inf"))
    l = queries.new_zeros(queries.shape[:-1] + (1,))
    o = queries.new_zeros(queries.shape[:-1] + (values.shape[-1],))
    for start in range(0, keys.shape[-2], block_size):
        k = keys[..., start:start + block_size, :]
        scores = queries @ k.transpose(-2, -1) / d ** 0.5
        if causal:
            # entry (i, j) is key start + j for query i: hidden when start + j > i, i.e. j - i >= 1 - start
            hidden = torch.ones(T, k.shape[-2], dtype=torch.bool).triu(1 - start)
            scores = scores.masked_fill(hidden, float("-inf"))
        m, l, o = softmax_block(scores, m, l, o, values[..., start:start + block_size, :])
    return o / l
'''

# the partial sums kept in a Python list and merged at the end; query tiles, future key tiles skipped, triu masks
_SOFTMAX_LIST = '''def online_softmax(x, block_size):
    maxes, sums = [], []
    for start in range(0, x.shape[-1], block_size):
        chunk = x[..., start:start + block_size]
        top = chunk.amax(dim=-1, keepdim=True)
        maxes.append(top)
        sums.append(torch.exp(chunk - top).sum(dim=-1, keepdim=True))
    m = maxes[0]
    for top in maxes[1:]:
        m = torch.maximum(m, top)
    l = sum(s * torch.exp(top - m) for s, top in zip(sums, maxes))
    softmax = torch.exp(x - m) / l
    return softmax
'''

_TILED_QTILES_TRIU = '''import math

def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"expected block_size >= 1, got block_size={block_size}")
    T, d = queries.shape[-2], queries.shape[-1]
    scale = 1 / math.sqrt(d)
    rows = []
    for qs in range(0, T, block_size):
        q = queries[..., qs:qs + block_size, :]
        bq = q.shape[-2]
        m = torch.full((*q.shape[:-1], 1), -math.inf)
        l = torch.zeros((*q.shape[:-1], 1))
        acc = torch.zeros((*q.shape[:-1], values.shape[-1]))
        for ks in range(0, keys.shape[-2], block_size):
            if causal and ks >= qs + bq:
                break  # every key of this tile is after every query of the query tile
            k = keys[..., ks:ks + block_size, :]
            s = torch.matmul(q, k.transpose(-1, -2)) * scale
            if causal:
                s = s.masked_fill(torch.ones(bq, k.shape[-2], dtype=torch.bool).triu(qs - ks + 1), -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            corr = torch.exp(m - m_new)
            p = torch.exp(s - m_new)
            l = corr * l + p.sum(-1, keepdim=True)
            acc = corr * acc + torch.matmul(p, values[..., ks:ks + block_size, :])
            m = m_new
        rows.append(acc / l)
    return torch.cat(rows, dim=-2)
'''

# the parameter renamed (visible tests call it positionally)
_SOFTMAX_RENAMED = '''def online_softmax(x, bs):
    m = torch.full_like(x[..., :1], -torch.inf)
    z = torch.zeros_like(x[..., :1])
    for a in range(0, x.shape[-1], bs):
        blk = x[..., a:a + bs]
        m2 = torch.maximum(m, blk.amax(-1, keepdim=True))
        z = z * (m - m2).exp() + (blk - m2).exp().sum(-1, keepdim=True)
        m = m2
    return (x - m).exp() / z
'''

# mistakes
_TILED_SCALE_BY_D = _edit(_TILED, ("queries.shape[-1] ** -0.5", "1 / queries.shape[-1]"))
_TILED_SCALE_BY_SQRT_T = _edit(_TILED, ("queries.shape[-1] ** -0.5", "queries.shape[-2] ** -0.5"))
_SOFTMAX_MAX_FROM_ZERO = _edit(_SOFTMAX, ("torch.full_like(x[..., :1], float('-inf'))", "torch.zeros_like(x[..., :1])"))
_TILED_MAX_FROM_ZERO = _edit(_TILED, ("torch.full_like(queries[..., :1], float('-inf'))",
                                        "torch.zeros_like(queries[..., :1])"))
_SOFTMAX_SHARED_MAX = '''def online_softmax(x, block_size):
    m = torch.tensor(float("-inf"))
    l = torch.zeros_like(x[..., :1])
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.max())
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l
'''
_SOFTMAX_NO_LOOP = '''def online_softmax(x, block_size):
    assert block_size >= 1
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=-1, keepdim=True)
'''
_TILED_TRIU_SIGN = _edit(_TILED_TRIU_HELPER, (".triu(1 - start)", ".triu(1 + start)"))
_TILED_DIVIDES_EVERY_BLOCK = _edit(_TILED, ("        running_max = new_max\n    return output / running_sum\n",
                                              "        output = output / running_sum\n"
                                              "        running_max = new_max\n    return output\n"))
_TILED_UNFOLD_DROPS_PARTIAL = '''def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    scale = queries.shape[-1] ** -0.5
    k_blocks = keys.unfold(-2, block_size, block_size)      # (..., n_blocks, d, block_size)
    v_blocks = values.unfold(-2, block_size, block_size)
    m = torch.full(queries.shape[:-1] + (1,), float("-inf"))
    l = torch.zeros(queries.shape[:-1] + (1,))
    o = torch.zeros(queries.shape[:-1] + (values.shape[-1],))
    pos = torch.arange(queries.shape[-2])[:, None]
    for b in range(k_blocks.shape[-3]):
        s = queries @ k_blocks[..., b, :, :] * scale
        if causal:
            s = s.masked_fill(torch.arange(b * block_size, (b + 1) * block_size) > pos, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        a = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = a * l + p.sum(-1, keepdim=True)
        o = a * o + p @ v_blocks[..., b, :, :].transpose(-1, -2)
        m = m_new
    return o / l
'''
_TILED_SOFTMAX_PER_BLOCK = '''import torch.nn.functional as F

def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    d = queries.shape[-1]
    out = torch.zeros_like(queries)
    pos = torch.arange(queries.shape[-2])[:, None]
    for start in range(0, keys.shape[-2], block_size):
        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) / d ** 0.5
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > pos, float("-inf"))
        out = out + F.softmax(s, dim=-1).nan_to_num() @ values[..., start:start + block_size, :]
    return out
'''
_TILED_ERROR_WITHOUT_NAME = _edit(_TILED, ("f'block_size must be at least 1, got {block_size}'",
                                             "'block size must be at least 1'"))
_TILED_ONLY_ZERO_REJECTED = _edit(_TILED, ("if block_size < 1:", "if block_size == 0:"))
_TILED_QUERY_CHUNKS = '''def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    T, d = queries.shape[-2], queries.shape[-1]
    outs = []
    for start in range(0, T, block_size):
        s = queries[..., start:start + block_size, :] @ keys.transpose(-2, -1) / d ** 0.5  # (..., block, T)
        if causal:
            s = s.masked_fill(torch.arange(T) > torch.arange(start, start + s.shape[-2])[:, None], float("-inf"))
        outs.append(torch.softmax(s, dim=-1) @ values)
    return torch.cat(outs, dim=-2)
'''

VARIANTS.update({
    "while_finfo_min_bmm": {"kind": "correct", "cells": {"online_softmax": _SOFTMAX_WHILE_FINFO,
                                                               "tiled_attention": _TILED_WHILE_BMM}},
    "split_float64_normalised_output": {"kind": "correct", "cells": {"online_softmax": _SOFTMAX_SPLIT_F64,
                                                                           "tiled_attention": _TILED_CHUNK_F64}},
    "running_logsumexp": {"kind": "correct", "cells": {"online_softmax": _SOFTMAX_LOGADDEXP,
                                                             "tiled_attention": _TILED_LOGSUMEXP}},
    "unfold_padding_helpers_triu": {"kind": "correct", "cells": {"online_softmax": _SOFTMAX_UNFOLD_HELPER,
                                                                       "tiled_attention": _TILED_TRIU_HELPER}},
    "list_of_sums_query_tiles": {"kind": "correct", "cells": {"online_softmax": _SOFTMAX_LIST,
                                                                    "tiled_attention": _TILED_QTILES_TRIU}},
    "parameter_renamed": {"kind": "correct", "cells": {"online_softmax": _SOFTMAX_RENAMED}},
    "logaddexp_only_softmax": {"kind": "correct", "cells": {"online_softmax": _SOFTMAX_LOGADDEXP}},
    "logsumexp_only_tiled": {"kind": "correct", "cells": {"tiled_attention": _TILED_LOGSUMEXP}},
    # mistakes
    "tiled_scale_by_d": {"kind": "mistake", "cells": {"tiled_attention": _TILED_SCALE_BY_D},
                               "fails": {"test_tiled_attention": "sqrt(d)", "test_tiled_attention_causal": "non-causal",
                                         "test_tiled_attention_memory": "sqrt(d)"}},
    "tiled_scale_by_sqrt_T": {"kind": "mistake", "cells": {"tiled_attention": _TILED_SCALE_BY_SQRT_T},
                                    "fails": {"test_tiled_attention": "sqrt(d)",
                                              "test_tiled_attention_causal": "non-causal",
                                              "test_tiled_attention_memory": "sqrt(d)"}},
    "softmax_max_from_zero": {"kind": "mistake", "cells": {"online_softmax": _SOFTMAX_MAX_FROM_ZERO},
                                    "fails": {"test_online_softmax": "-inf"}},
    "tiled_max_from_zero": {"kind": "mistake", "cells": {"tiled_attention": _TILED_MAX_FROM_ZERO},
                                  "fails": {"test_tiled_attention": "-inf", "test_tiled_attention_causal": "-inf"}},
    "softmax_max_from_zero_unseen": {"kind": "mistake",
                                     "cells": {"online_softmax": _SILENCE_CHECKS + _SOFTMAX_MAX_FROM_ZERO},
                                     "fails": {"test_online_softmax": "start the running maximum at -inf"}},
    "tiled_max_from_zero_unseen": {"kind": "mistake",
                                   "cells": {"tiled_attention": _SILENCE_CHECKS + _TILED_MAX_FROM_ZERO},
                                   "fails": {"test_tiled_attention": "start the running maximum at -inf",
                                             "test_tiled_attention_causal": "start the running maximum at -inf"}},
    "softmax_shared_max_across_rows": {"kind": "mistake", "cells": {"online_softmax": _SOFTMAX_SHARED_MAX},
                                             "fails": {"test_online_softmax": "own running maximum"}},
    "softmax_no_loop": {"kind": "mistake", "cells": {"online_softmax": _SOFTMAX_NO_LOOP},
                              "fails": {"test_online_softmax": "loop"}},
    # a right online softmax that ignores the block size it is given: one column at a time
    "softmax_one_column_at_a_time": {"kind": "mistake", "cells": {"online_softmax": _edit(
        _SOFTMAX, ("range(0, x.shape[-1], block_size)", "range(x.shape[-1])"),
        ("x[..., start:start + block_size]", "x[..., start:start + 1]"))},
        "fails": {"test_online_softmax": "block of block_size columns at once"}},
    "tiled_triu_sign": {"kind": "mistake", "cells": {"tiled_attention": _TILED_TRIU_SIGN},
                              "fails": {"test_tiled_attention_causal": "start + j"}},
    "tiled_divides_every_block": {"kind": "mistake", "cells": {"tiled_attention": _TILED_DIVIDES_EVERY_BLOCK},
                                        "fails": {"test_tiled_attention": "once, at the end",
                                                  "test_tiled_attention_causal": "tiled_attention",
                                                  "test_tiled_attention_memory": "tiled_attention"}},
    "tiled_unfold_drops_partial": {"kind": "mistake", "cells": {"tiled_attention": _TILED_UNFOLD_DROPS_PARTIAL},
                                         "fails": {"test_tiled_attention": "size is 16",
                                                   "test_tiled_attention_causal": "tiled_attention",
                                                   "test_tiled_attention_memory": "tiled_attention"}},
    "tiled_softmax_per_block": {"kind": "mistake", "cells": {"tiled_attention": _TILED_SOFTMAX_PER_BLOCK},
                                      "fails": {"test_tiled_attention": "running",
                                                "test_tiled_attention_causal": "non-causal",
                                                # a softmax per tile is allowed: the memory cell judges its values
                                                "test_tiled_attention_memory": "wrong values"}},
    "tiled_error_without_name": {"kind": "mistake", "cells": {"tiled_attention": _TILED_ERROR_WITHOUT_NAME},
                                       "fails": {"test_tiled_attention_arguments": "does not name `block_size`"}},
    "tiled_only_zero_rejected": {"kind": "mistake", "cells": {"tiled_attention": _TILED_ONLY_ZERO_REJECTED},
                                       "fails": {"test_tiled_attention_arguments": "block_size=-2"}},
    # (block_size, T) rows of scores hold no more than (T, block_size) tiles: the memory cell keeps its point
    "tiled_query_chunks_full_softmax": {"kind": "mistake", "cells": {"tiled_attention": _TILED_QUERY_CHUNKS},
                                              "fails": {"test_tiled_attention": "keys",
                                                        "test_tiled_attention_causal": "keys"}},
})


# ---------------------------------------------------------------------------------------------------------------
# routes past the exercise's algorithm (issue 25): each loses exactly the cells of the part it skips; every one kept
# full marks (or 10/10 for the magic line) when the rules were lists of names read from the solution cell only
# ---------------------------------------------------------------------------------------------------------------

_ROUTE_SOFTMAX_IDLE_LOOP = '''def online_softmax(x, block_size):
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=-1, keepdim=True)
'''

# maximum first (a pass over the blocks), sums second (another pass): no running maximum
_ROUTE_SOFTMAX_TWO_PASS = '''def online_softmax(x, block_size):
    n = x.shape[-1]
    m = torch.full_like(x[..., :1], float("-inf"))
    for start in range(0, n, block_size):
        m = torch.maximum(m, x[..., start:start + block_size].amax(dim=-1, keepdim=True))
    l = torch.zeros_like(m)
    for start in range(0, n, block_size):
        l = l + torch.exp(x[..., start:start + block_size] - m).sum(dim=-1, keepdim=True)
    return torch.exp(x - m) / l
'''

_ROUTE_SOFTMAX_LOGCUMSUMEXP = '''def online_softmax(x, block_size):
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
    return torch.exp(x - torch.logcumsumexp(x, dim=-1)[..., -1:])
'''

_ROUTE_TILED_CPU_FLASH = '''def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    *lead, t, d = queries.shape
    q, k, v = (z.reshape(-1, 1, t, d) for z in (queries, keys, values))
    out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=causal)[0]
    return out.reshape(*lead, t, d)
'''

_ROUTE_MAGIC_SOFTMAX = '''%config InlineBackend.figure_format = "png"
def online_softmax(x, block_size):
    return torch.softmax(x, dim=-1)
'''

_ROUTE_MAGIC_SDPA = '''%config InlineBackend.figure_format = "png"
def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    return F.scaled_dot_product_attention(queries, keys, values, is_causal=causal)
'''

VARIANTS.update({
    "route_softmax_idle_loop": {"kind": "mistake", "cells": {"online_softmax": _ROUTE_SOFTMAX_IDLE_LOOP},
                                "fails": {"test_online_softmax": "whole row"}},
    "route_softmax_two_pass": {"kind": "mistake", "cells": {"online_softmax": _ROUTE_SOFTMAX_TWO_PASS},
                               "fails": {"test_online_softmax": "two-pass"}},
    "route_softmax_logcumsumexp": {"kind": "mistake", "cells": {"online_softmax": _ROUTE_SOFTMAX_LOGCUMSUMEXP},
                                   "fails": {"test_online_softmax": "logcumsumexp"}},
    "route_tiled_cpu_flash_kernel": {"kind": "mistake", "cells": {"tiled_attention": _ROUTE_TILED_CPU_FLASH},
                                     "fails": {"test_tiled_attention": "_scaled_dot_product_flash_attention",
                                               "test_tiled_attention_causal": "_scaled_dot_product_flash_attention",
                                               "test_tiled_attention_memory": "_scaled_dot_product_flash_attention"}},
    "route_magic_line_softmax_and_sdpa": {
        "kind": "mistake", "cells": {"online_softmax": _ROUTE_MAGIC_SOFTMAX, "tiled_attention": _ROUTE_MAGIC_SDPA},
        "fails": {"test_online_softmax": "torch.softmax", "test_tiled_attention": "a library's",
                  "test_tiled_attention_causal": "a library's",
                  # the visible memory test fails first, in the kernel: SDPA's math path makes the (T, T) weights
                  "test_tiled_attention_memory": "(T, T)"}},
})


# Part 3: merge_attention
_MERGE = (
    "def merge_attention(out_a, lse_a, out_b, lse_b):\n"
    "    if lse_a.shape != out_a.shape[:-1]:\n"
    "        raise ValueError(f'lse_a has shape {tuple(lse_a.shape)}')\n"
    "    if lse_b.shape != out_b.shape[:-1]:\n"
    "        raise ValueError(f'lse_b has shape {tuple(lse_b.shape)}')\n"
    "    top = torch.maximum(lse_a, lse_b)\n"
    "    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)\n"
    "    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)\n"
    "    total = wa + wb\n"
    "    out = (wa[..., None] * out_a + wb[..., None] * out_b) / total.clamp_min(1e-30)[..., None]\n"
    "    return out, top + torch.log(total)\n"
)

VARIANTS.update({
    # logaddexp for the merged lse, each output weighted by exp(lse_x - lse), empty rows by torch.where
    "merge_logaddexp": {"kind": "correct", "cells": {"merge_attention":
        "def merge_attention(out_a, lse_a, out_b, lse_b):\n"
        "    for name, o, l in (('lse_a', out_a, lse_a), ('lse_b', out_b, lse_b)):\n"
        "        if list(l.shape) != list(o.shape[:-1]):\n"
        "            raise ValueError(f'{name} does not match its output')\n"
        "    lse = torch.logaddexp(lse_a, lse_b)\n"
        "    seen = torch.isfinite(lse)[..., None]\n"
        "    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))\n"
        "    out = torch.exp(lse_a - safe)[..., None] * out_a + torch.exp(lse_b - safe)[..., None] * out_b\n"
        "    return torch.where(seen, out, torch.zeros_like(out)), lse\n"}},
    # ring-flash-attention's form: out_b + sigmoid(lse_a - lse_b) * (out_a - out_b), with the empty rows handled apart
    "merge_sigmoid": {"kind": "correct", "cells": {"merge_attention":
        "import torch.nn.functional as F\n"
        "\n"
        "\n"
        "def merge_attention(out_a, lse_a, out_b, lse_b):\n"
        "    if lse_a.shape != out_a.shape[:-1]:\n"
        "        raise ValueError('lse_a: wrong shape')\n"
        "    if lse_b.shape != out_b.shape[:-1]:\n"
        "        raise ValueError('lse_b: wrong shape')\n"
        "    a_empty, b_empty = torch.isneginf(lse_a), torch.isneginf(lse_b)\n"
        "    diff = torch.where(a_empty | b_empty, torch.zeros_like(lse_a), lse_a - lse_b)\n"
        "    share_a = torch.where(a_empty, 0.0, torch.where(b_empty, 1.0, torch.sigmoid(diff)))\n"
        "    out = out_b + share_a[..., None] * (out_a - out_b)\n"
        "    lse = torch.where(a_empty, lse_b, torch.where(b_empty, lse_a, lse_a - F.logsigmoid(diff)))\n"
        "    return torch.where((a_empty & b_empty)[..., None], torch.zeros_like(out), out), lse\n"}},
    "merge_exp_of_lse": {"kind": "mistake", "cells": {"merge_attention": _edit(
        _MERGE, ("    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)\n",
                 "    top = torch.zeros_like(top)\n"))},
        "fails": {"test_merge_attention": "overflows"}},
    "merge_exp_of_lse_unseen": {"kind": "mistake", "cells": {"merge_attention": _SILENCE_CHECKS + _edit(
        _MERGE, ("    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)\n",
                 "    top = torch.zeros_like(top)\n"))},
        "fails": {"test_merge_attention": "exp(lse) overflows"}},
    "merge_equal_average_unseen": {"kind": "mistake", "cells": {"merge_attention": _SILENCE_CHECKS + _edit(
        _MERGE, ("(wa[..., None] * out_a + wb[..., None] * out_b) / total.clamp_min(1e-30)[..., None]",
                 "(out_a + out_b) / 2"))},
        "fails": {"test_merge_attention": "equal weights"}},
    # with the visible checks in place: they fail first, and the judges' named mistake is shown before them
    "merge_equal_average": {"kind": "mistake", "cells": {"merge_attention": _edit(
        _MERGE, ("(wa[..., None] * out_a + wb[..., None] * out_b) / total.clamp_min(1e-30)[..., None]",
                 "(out_a + out_b) / 2"))},
        "fails": {"test_merge_attention": "equal weights"}},
    "merge_lse_is_max": {"kind": "mistake", "cells": {"merge_attention": _edit(
        _MERGE, ("return out, top + torch.log(total)", "return out, torch.maximum(lse_a, lse_b)"))},
        "fails": {"test_merge_attention": "not the larger"}},
    "merge_no_guard": {"kind": "mistake", "cells": {"merge_attention": _edit(
        _MERGE, ("    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)\n", ""),
        ("total.clamp_min(1e-30)", "total"))},
        "fails": {"test_merge_attention": "-inf - (-inf)"}},
    "merge_no_guard_unseen": {"kind": "mistake", "cells": {"merge_attention": _SILENCE_CHECKS + _edit(
        _MERGE, ("    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)\n", ""),
        ("total.clamp_min(1e-30)", "total"))},
        "fails": {"test_merge_attention": "saw no key"}},
    "merge_lse_is_max_unseen": {"kind": "mistake", "cells": {"merge_attention": _SILENCE_CHECKS + _edit(
        _MERGE, ("return out, top + torch.log(total)", "return out, torch.maximum(lse_a, lse_b)"))},
        "fails": {"test_merge_attention": "not the larger"}},
    "merge_no_value_error": {"kind": "mistake", "cells": {"merge_attention": _edit(
        _MERGE, ("    if lse_a.shape != out_a.shape[:-1]:\n        raise ValueError(f'lse_a has shape {tuple(lse_a.shape)}')\n", ""))},
        "fails": {"test_merge_attention": "lse_a"}},
})

# elementary operations that the allowlist once refused (issue 35): torch.fmax for the running maximum
VARIANTS.update({
    "fmax_running_max": {"kind": "correct", "cells": {
        "online_softmax": _edit(_SOFTMAX, ("new_max = torch.maximum(running_max, block.amax(dim=-1, keepdim=True))",
                                           "new_max = torch.fmax(running_max, block.amax(dim=-1, keepdim=True))")),
        "tiled_attention": _edit(_TILED, ("new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))",
                                          "new_max = torch.fmax(running_max, scores.amax(dim=-1, keepdim=True))"))}},
})

# the two shortcuts of issue 35: right outputs, small tensors, but not the online algorithm over key blocks
VARIANTS.update({
    "tiled_query_blocks_hand_softmax": {"kind": "mistake", "cells": {"tiled_attention":
        "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
        "    if block_size < 1:\n"
        "        raise ValueError(f'block_size must be at least 1, got {block_size}')\n"
        "    d = queries.shape[-1]\n"
        "    outs = []\n"
        "    for start in range(0, queries.shape[-2], block_size):\n"
        "        s = queries[..., start:start + block_size, :] @ keys.transpose(-2, -1) / d ** 0.5\n"
        "        if causal:\n"
        "            later = torch.arange(keys.shape[-2]) > torch.arange(start, start + s.shape[-2])[:, None]\n"
        "            s = s.masked_fill(later, float('-inf'))\n"
        "        e = torch.exp(s - s.amax(dim=-1, keepdim=True))\n"
        "        outs.append(e / e.sum(dim=-1, keepdim=True) @ values)\n"
        "    return torch.cat(outs, dim=-2)\n"},
        "fails": {"test_tiled_attention": "all the keys at once", "test_tiled_attention_causal": "all the keys at once"}},
    "tiled_two_pass": {"kind": "mistake", "cells": {"tiled_attention":
        "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
        "    if block_size < 1:\n"
        "        raise ValueError(f'block_size must be at least 1, got {block_size}')\n"
        "    num_keys, d = keys.shape[-2], queries.shape[-1]\n"
        "    query_positions = torch.arange(queries.shape[-2])[:, None]\n"
        "\n"
        "    def scores(start):\n"
        "        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) / d ** 0.5\n"
        "        if causal:\n"
        "            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > query_positions, float('-inf'))\n"
        "        return s\n"
        "\n"
        "    m = torch.full_like(queries[..., :1], float('-inf'))\n"
        "    for start in range(0, num_keys, block_size):\n"
        "        m = torch.maximum(m, scores(start).amax(dim=-1, keepdim=True))\n"
        "    l = torch.zeros_like(m)\n"
        "    o = torch.zeros(*queries.shape[:-1], values.shape[-1])\n"
        "    for start in range(0, num_keys, block_size):\n"
        "        p = torch.exp(scores(start) - m)\n"
        "        l = l + p.sum(dim=-1, keepdim=True)\n"
        "        o = o + p @ values[..., start:start + block_size, :]\n"
        "    return o / l\n"},
        "fails": {"test_tiled_attention": "two-pass", "test_tiled_attention_causal": "two-pass"}},
})

# memory-efficient attention written as others write it (issue 45): torch.utils.checkpoint around the student's own
# block function, and blocks merged through their log-sum-exp with F.logsigmoid (logaddexp in another form)
VARIANTS.update({
    "checkpointed_block_function": {"kind": "correct", "cells": {"tiled_attention":
        "from torch.utils.checkpoint import checkpoint\n"
        "\n"
        "\n"
        "def _block(q, k, v, m, l, o, start, causal):\n"
        "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    if causal:\n"
        "        later = torch.arange(start, start + k.shape[-2]) > torch.arange(q.shape[-2])[:, None]\n"
        "        s = s.masked_fill(later, float('-inf'))\n"
        "    m_new = torch.maximum(m, s.amax(-1, keepdim=True))\n"
        "    p, alpha = torch.exp(s - m_new), torch.exp(m - m_new)\n"
        "    return m_new, l * alpha + p.sum(-1, keepdim=True), o * alpha + p @ v\n"
        "\n"
        "\n"
        "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
        "    if block_size < 1:\n"
        "        raise ValueError(f'block_size={block_size}, expected at least 1')\n"
        "    m = queries.new_full(queries.shape[:-1] + (1,), float('-inf'))\n"
        "    l = queries.new_zeros(queries.shape[:-1] + (1,))\n"
        "    o = queries.new_zeros(queries.shape[:-1] + values.shape[-1:])\n"
        "    for start in range(0, keys.shape[-2], block_size):\n"
        "        k, v = keys[..., start:start + block_size, :], values[..., start:start + block_size, :]\n"
        "        m, l, o = checkpoint(_block, queries, k, v, m, l, o, start, causal, use_reentrant=False)\n"
        "    return o / l\n"}},
    "blocks_merged_with_logsigmoid": {"kind": "correct", "cells": {"tiled_attention":
        "import torch.nn.functional as F\n"
        "\n"
        "\n"
        "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
        "    if block_size < 1:\n"
        "        raise ValueError('block_size must be >= 1')\n"
        "    rows = torch.arange(queries.shape[-2])[:, None]\n"
        "    out = lse = None\n"
        "    for start in range(0, keys.shape[-2], block_size):\n"
        "        s = queries @ keys[..., start:start + block_size, :].mT / queries.shape[-1] ** 0.5\n"
        "        if causal:\n"
        "            s = s.masked_fill(start + torch.arange(s.shape[-1]) > rows, float('-inf'))\n"
        "        top = s.amax(-1, keepdim=True)\n"
        "        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)  # a row that sees none of this block\n"
        "        p = torch.exp(s - top)\n"
        "        total = p.sum(-1, keepdim=True)\n"
        "        block_out = p @ values[..., start:start + block_size, :] / total.clamp_min(1e-30)\n"
        "        block_lse = top + torch.log(total)\n"
        "        if out is None:\n"
        "            out, lse = block_out, block_lse\n"
        "            continue\n"
        "        diff = lse - block_lse  # the running lse is finite: every query sees key 0\n"
        "        out = block_out + torch.sigmoid(diff) * (out - block_out)\n"
        "        lse = lse - F.logsigmoid(diff)\n"
        "    return out\n"}},
    # right values, one block of keys at a time, but every tile's exponentials kept to the end: O(T^2) memory alive
    "tiled_keeps_every_tile": {"kind": "mistake", "cells": {"tiled_attention":
        "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
        "    if block_size < 1:\n"
        "        raise ValueError(f'block_size must be at least 1, got {block_size}')\n"
        "    m = torch.full_like(queries[..., :1], float('-inf'))\n"
        "    rows = torch.arange(queries.shape[-2])[:, None]\n"
        "    tiles = []\n"
        "    for start in range(0, keys.shape[-2], block_size):\n"
        "        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) / queries.shape[-1] ** 0.5\n"
        "        if causal:\n"
        "            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, float('-inf'))\n"
        "        m_new = torch.maximum(m, s.amax(-1, keepdim=True))\n"
        "        tiles.append((torch.exp(s - m_new), m_new, start))\n"
        "        m = m_new\n"
        "    l = sum(p.sum(-1, keepdim=True) * torch.exp(m_j - m) for p, m_j, _ in tiles)\n"
        "    o = sum((p @ values[..., j:j + block_size, :]) * torch.exp(m_j - m) for p, m_j, j in tiles)\n"
        "    return o / l\n"},
        "fails": {"test_tiled_attention_memory": "at its peak"}},
})

# Part 3, the proof of the transfer part: the lesson's running update applied to the two workers as they come, and
# the library's softmax over the two lse for the shares: both right until a query sees no key at all
VARIANTS.update({
    "merge_lesson_running_update": {"kind": "mistake", "cells": {"merge_attention":
        "def merge_attention(out_a, lse_a, out_b, lse_b):\n"
        "    for name, out, lse in (('lse_a', out_a, lse_a), ('lse_b', out_b, lse_b)):\n"
        "        if lse.shape != out.shape[:-1]:\n"
        "            raise ValueError(f'{name} has the wrong shape')\n"
        "    m, l, o = lse_a[..., None], torch.ones_like(lse_a[..., None]), out_a\n"
        "    new_max = torch.maximum(m, lse_b[..., None])\n"
        "    l = l * torch.exp(m - new_max) + torch.exp(lse_b[..., None] - new_max)\n"
        "    o = o * torch.exp(m - new_max) + torch.exp(lse_b[..., None] - new_max) * out_b\n"
        "    return o / l, (new_max + torch.log(l))[..., 0]\n"},
        "fails": {"test_merge_attention": "saw no key"}},
    "merge_library_softmax_shares": {"kind": "mistake", "cells": {"merge_attention":
        "def merge_attention(out_a, lse_a, out_b, lse_b):\n"
        "    for name, out, lse in (('lse_a', out_a, lse_a), ('lse_b', out_b, lse_b)):\n"
        "        if lse.shape != out.shape[:-1]:\n"
        "            raise ValueError(f'{name} has the wrong shape')\n"
        "    both = torch.stack([lse_a, lse_b])\n"
        "    share = torch.softmax(both, dim=0)[..., None]\n"
        "    return share[0] * out_a + share[1] * out_b, torch.logsumexp(both, dim=0)\n"},
        "fails": {"test_merge_attention": "saw no key"}},
})

PROOF = {"test_merge_attention": {"lesson": ["merge_lesson_running_update"],
                                  "shortcut": ["merge_library_softmax_shares"],
                                  "correct": ["merge_logaddexp", "merge_sigmoid"]}}


# A decoy loop over the blocks, and the library's softmax and attention run in a thread, where the trace and the
# memory meter do not see them: a watched call may start none (attention_course/memory.py)
VARIANTS["library_in_a_thread_behind_a_decoy_loop"] = {
    "kind": "cheat",
    "cells": {"online_softmax": 'import threading\ndef _off_thread(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\ndef online_softmax(x, block_size):\n    for start in range(0, x.shape[-1], block_size):\n        torch.exp(x[..., start:start + block_size])   # looks like a pass over blocks\n    return _off_thread(lambda: torch.softmax(x, dim=-1))\n',
              "tiled_attention": 'import threading\ndef _off_thread(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\ndef tiled_attention(queries, keys, values, block_size, causal=False):\n    if block_size < 1:\n        raise ValueError(f"block_size must be at least 1, got {block_size}")\n    for start in range(0, keys.shape[-2], block_size):\n        torch.exp(queries @ keys[..., start:start + block_size, :].transpose(-2, -1)) @ values[..., start:start + block_size, :]\n    return _off_thread(lambda: F.scaled_dot_product_attention(queries, keys, values, is_causal=causal))\n'},
    "fails": {cell: "started a thread" for cell in ("test_online_softmax", "test_tiled_attention",
                                                  "test_tiled_attention_causal", "test_tiled_attention_memory")},
}


# Online softmax written with the library's softmax over each TILE (issue 45): every block of keys normalised on its
# own by torch.softmax / F.log_softmax, the blocks combined through their log-sum-exp. Not a softmax over whole rows.
VARIANTS.update({
    "tile_softmax_merged_by_logaddexp": {"kind": "correct", "cells": {"tiled_attention":
        "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
        "    if block_size < 1:\n"
        "        raise ValueError(f'block_size must be at least 1, got {block_size}')\n"
        "    rows = torch.arange(queries.shape[-2])[:, None]\n"
        "    lse = torch.full_like(queries[..., :1], float('-inf'))\n"
        "    out = torch.zeros_like(queries)\n"
        "    for start in range(0, keys.shape[-2], block_size):\n"
        "        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) / queries.shape[-1] ** 0.5\n"
        "        if causal:\n"
        "            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, float('-inf'))\n"
        "        tile_lse = torch.logsumexp(s, dim=-1, keepdim=True)\n"
        "        tile_out = torch.softmax(s, dim=-1).nan_to_num() @ values[..., start:start + block_size, :]\n"
        "        new_lse = torch.logaddexp(lse, tile_lse)\n"
        "        out = out * torch.exp(lse - new_lse).nan_to_num() + torch.exp(tile_lse - new_lse).nan_to_num() * tile_out\n"
        "        lse = new_lse\n"
        "    return out\n"}},
    "tile_log_softmax_stacked_logsumexp": {"kind": "correct", "cells": {"tiled_attention":
        "import torch.nn.functional as F\n"
        "\n"
        "\n"
        "def tiled_attention(queries, keys, values, block_size, causal=False):\n"
        "    if block_size <= 0:\n"
        "        raise ValueError('block_size must be positive')\n"
        "    T, d = keys.shape[-2], queries.shape[-1]\n"
        "    out, lse = None, None\n"
        "    for k, v, start in zip(keys.split(block_size, -2), values.split(block_size, -2), range(0, T, block_size)):\n"
        "        s = torch.einsum('...qd,...kd->...qk', queries, k) * d ** -0.5\n"
        "        if causal:\n"
        "            s = s.masked_fill(torch.triu(torch.ones(s.shape[-2:], dtype=torch.bool), 1 - start), float('-inf'))\n"
        "        tile_lse = s.logsumexp(-1)\n"
        "        tile_out = torch.where(tile_lse[..., None].isinf(), 0.0, F.log_softmax(s, -1).exp()) @ v\n"
        "        if out is None:\n"
        "            out, lse = tile_out, tile_lse\n"
        "            continue\n"
        "        new_lse = torch.stack([lse, tile_lse]).logsumexp(0)\n"
        "        out = (lse - new_lse).exp()[..., None] * out + (tile_lse - new_lse).exp()[..., None] * tile_out\n"
        "        lse = new_lse\n"
        "    return out\n"}},
})

# Shortcuts around the loop (issue 45): numpy computes the answer while torch operations on each block of the inputs
# give the trace what it looks for; and whole rows of scores assembled from the blocks, softmaxed by the library.
_NUMPY_SOFTMAX = '''import numpy as np

def online_softmax(x, block_size):
    m = torch.full_like(x[..., :1], float("-inf"))
    for start in range(0, x.shape[-1], block_size):  # what the grader watches
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1, keepdim=True))
        torch.exp(block - m_new).sum(-1, keepdim=True) * torch.exp(m - m_new)
        m = m_new
    a = x.detach().cpu().double().numpy()
    e = np.exp(a - a.max(-1, keepdims=True))
    return torch.from_numpy(e / e.sum(-1, keepdims=True)).to(x.dtype) + 0 * x
'''
_NUMPY_TILED = '''import numpy as np

def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    out = torch.zeros_like(queries)
    for start in range(0, keys.shape[-2], block_size):  # what the grader watches
        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1)
        out = out + torch.exp(s - s.amax(-1, keepdim=True)) @ values[..., start:start + block_size, :]
    q, k, v = (t.detach().cpu().double().numpy() for t in (queries, keys, values))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], dtype=bool), 1), -np.inf, s)
    e = np.exp(s - s.max(-1, keepdims=True))
    out.copy_(torch.from_numpy(e / e.sum(-1, keepdims=True) @ v))
    return out
'''
_CAT_BLOCKS_ROW_SOFTMAX = '''def tiled_attention(queries, keys, values, block_size, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    rows = torch.arange(queries.shape[-2])[:, None]
    tiles = []
    for start in range(0, keys.shape[-2], block_size):
        s = queries @ keys[..., start:start + block_size, :].transpose(-2, -1) / queries.shape[-1] ** 0.5
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, float("-inf"))
        torch.exp(s)  # an exponential in the loop, for the grader
        tiles.append(s)
    return torch.softmax(torch.cat(tiles, dim=-1), dim=-1) @ values
'''
VARIANTS.update({
    "numpy_behind_torch_decoys": {"kind": "mistake", "cells": {"online_softmax": _NUMPY_SOFTMAX,
                                                                "tiled_attention": _NUMPY_TILED},
        "fails": {"test_online_softmax": "numpy", "test_tiled_attention": "numpy",
                  "test_tiled_attention_causal": "numpy", "test_tiled_attention_memory": "numpy"}},
    "whole_rows_from_key_blocks_library_softmax": {"kind": "mistake", "cells": {"tiled_attention":
        _CAT_BLOCKS_ROW_SOFTMAX},
        "fails": {"test_tiled_attention": "whole rows", "test_tiled_attention_causal": "whole rows",
                  "test_tiled_attention_memory": "(T, T)"}},
})
