"""Submission bank for step 13: correct variants written another way, and common mistakes."""
import json
from pathlib import Path

from bank import edit as _edit

# The cheats of tests/bank/integrity.py ride on this mistake: it returns wrong gradients rather than raising, so a cheat
# that silences the checks would really earn its points if the grader let it.
CHEATS_RIDE_ON = "backward_d_from_dp"

_SOURCE = Path(__file__).resolve().parents[2] / "source" / "13_attention_backward" / "13_attention_backward.ipynb"


def _answer_key():
    """The answer key's solution cells by grade_id, without the ### BEGIN/END SOLUTION markers."""
    cells = {}
    for cell in json.loads(_SOURCE.read_text())["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cells[meta["grade_id"]] = "".join(line for line in text.splitlines(keepends=True)
                                              if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
    return cells


_KEY = _answer_key()
_BACKWARD, _FLASH, _LSE = _KEY["attention_backward"], _KEY["FlashAttention"], _KEY["attention_lse_backward"]
_TRITON = _KEY["flash_attention_forward_triton"]

_EINSUM_BACKWARD = (
    "def attention_backward(q, k, v, d_out, scale=None, causal=False):\n"
    "    if d_out.shape != q.shape[:-1] + v.shape[-1:]:\n"
    "        raise ValueError(f'd_out has shape {tuple(d_out.shape)}, not the output\\'s')\n"
    "    if scale is None:\n"
    "        scale = q.shape[-1] ** -0.5\n"
    "    scores = torch.einsum('bhid,bhjd->bhij', q, k) * scale\n"
    "    if causal:\n"
    "        n_q, n_k = scores.shape[-2:]\n"
    "        future = torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None] + (n_k - n_q)\n"
    "        scores = torch.where(future, torch.full_like(scores, -1e9), scores)\n"
    "    weights = F.softmax(scores, dim=-1)\n"
    "    d_weights = torch.einsum('bhid,bhjd->bhij', d_out, v)\n"
    "    # the Jacobian-vector product of softmax, row by row: P * (dP - <P, dP>)\n"
    "    d_scores = weights * (d_weights - (weights * d_weights).sum(dim=-1, keepdim=True))\n"
    "    d_q = torch.einsum('bhij,bhjd->bhid', d_scores, k) * scale\n"
    "    d_k = torch.einsum('bhij,bhid->bhjd', d_scores, q) * scale\n"
    "    d_v = torch.einsum('bhij,bhid->bhjd', weights, d_out)\n"
    "    return d_q, d_k, d_v\n"
)

# The backward with query tiles outside and key tiles inside (the forward's order; both FlashAttention papers put the
# key tiles outside in the backward); torch.where and a large negative instead of masked_fill and -inf; the forward's
# blocks taken with split, the output normalised once per query tile.
_FLASH_QUERY_TILES_OUTSIDE = (
    "class FlashAttention(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):\n"
    "        if block_q < 1 or block_k < 1:\n"
    "            raise ValueError('block_q and block_k must be at least 1')\n"
    "        work = torch.float32 if q.dtype == torch.bfloat16 else q.dtype\n"
    "        scale = q.shape[-1] ** -0.5\n"
    "        outs, lses = [], []\n"
    "        for qs, q_blk in zip(range(0, q.shape[-2], block_q), q.to(work).split(block_q, dim=-2)):\n"
    "            row_max = q_blk.new_full(q_blk.shape[:-1] + (1,), -1e30)\n"
    "            row_sum = q_blk.new_zeros(q_blk.shape[:-1] + (1,))\n"
    "            acc = q_blk.new_zeros(q_blk.shape[:-1] + (v.shape[-1],))\n"
    "            for ks, (k_blk, v_blk) in zip(range(0, k.shape[-2], block_k),\n"
    "                                          zip(k.to(work).split(block_k, dim=-2), v.to(work).split(block_k, dim=-2))):\n"
    "                sc = torch.einsum('bhid,bhjd->bhij', q_blk, k_blk) * scale\n"
    "                if causal:\n"
    "                    i = torch.arange(qs, qs + q_blk.shape[-2])[:, None] + k.shape[-2] - q.shape[-2]\n"
    "                    j = torch.arange(ks, ks + k_blk.shape[-2])[None, :]\n"
    "                    sc = torch.where(j > i, torch.full_like(sc, -1e30), sc)\n"
    "                new_max = torch.maximum(row_max, sc.amax(-1, keepdim=True))\n"
    "                w = torch.exp(sc - new_max)\n"
    "                c = torch.exp(row_max - new_max)\n"
    "                row_sum = row_sum * c + w.sum(-1, keepdim=True)\n"
    "                acc = acc * c + w @ v_blk\n"
    "                row_max = new_max\n"
    "            outs.append(acc / row_sum)\n"
    "            lses.append((row_max + row_sum.log()).squeeze(-1))\n"
    "        out, lse = torch.cat(outs, dim=-2).to(q.dtype), torch.cat(lses, dim=-1)\n"
    "        ctx.save_for_backward(q, k, v, out, lse)\n"
    "        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k\n"
    "        return out\n"
    "\n"
    "    @staticmethod\n"
    "    def backward(ctx, grad_out):\n"
    "        q, k, v, out, lse = ctx.saved_tensors\n"
    "        bq, bk, scale, work = ctx.block_q, ctx.block_k, q.shape[-1] ** -0.5, lse.dtype\n"
    "        qw, kw, vw, gw = q.to(work), k.to(work), v.to(work), grad_out.to(work)\n"
    "        delta = (gw * out.to(work)).sum(-1)\n"
    "        dq, dk, dv = torch.zeros_like(qw), torch.zeros_like(kw), torch.zeros_like(vw)\n"
    "        for qs in range(0, q.shape[-2], bq):\n"
    "            qe = min(qs + bq, q.shape[-2])\n"
    "            for ks in range(0, k.shape[-2], bk):\n"
    "                ke = min(ks + bk, k.shape[-2])\n"
    "                sc = qw[..., qs:qe, :] @ kw[..., ks:ke, :].mT * scale\n"
    "                if ctx.causal:\n"
    "                    shift = k.shape[-2] - q.shape[-2]  # the queries are the last positions\n"
    "                    future = torch.arange(ks, ke)[None, :] > torch.arange(qs, qe)[:, None] + shift\n"
    "                    sc = torch.where(future, torch.full_like(sc, -1e30), sc)\n"
    "                w = torch.exp(sc - lse[..., qs:qe].unsqueeze(-1))\n"
    "                dv[..., ks:ke, :] += w.mT @ gw[..., qs:qe, :]\n"
    "                dw = gw[..., qs:qe, :] @ vw[..., ks:ke, :].mT\n"
    "                ds = w * (dw - delta[..., qs:qe].unsqueeze(-1)) * scale\n"
    "                dq[..., qs:qe, :] += ds @ kw[..., ks:ke, :]\n"
    "                dk[..., ks:ke, :] += ds.mT @ qw[..., qs:qe, :]\n"
    "        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None\n"
)

_EINSUM_LSE = (
    "def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):\n"
    "    if d_lse.shape != q.shape[:-1]:\n"
    "        raise ValueError('d_lse must have shape (b, H, T)')\n"
    "    scale = q.shape[-1] ** -0.5 if scale is None else scale\n"
    "    s = torch.einsum('bhid,bhjd->bhij', q, k) * scale\n"
    "    if causal:\n"
    "        n_q, n_k = s.shape[-2:]\n"
    "        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1 + n_k - n_q), -1e9)\n"
    "    p = s.softmax(-1)\n"
    "    dp = torch.einsum('bhid,bhjd->bhij', d_out, v)\n"
    "    # L = log sum exp(S): dL/dS = P, so d_lse adds P * d_lse to dS\n"
    "    ds = p * (dp - (p * dp).sum(-1, keepdim=True)) + p * d_lse.unsqueeze(-1)\n"
    "    return (torch.einsum('bhij,bhjd->bhid', ds, k) * scale, torch.einsum('bhij,bhid->bhjd', ds, q) * scale,\n"
    "            torch.einsum('bhij,bhid->bhjd', p, d_out))\n"
)

# The Triton tutorial's style: strides passed to the kernel (no copy to contiguous memory), a grid computed from the
# block size, exp2 with log2(e) folded into the scale, scores by a broadcast product and tl.sum instead of tl.dot,
# keys in blocks of 32 and a finite large negative for the masked scores.
_TRITON_STRIDES_EXP2_NO_DOT = (
    "@triton.jit\n"
    "def attn_fwd(Q, K, V, Out, sq_b, sq_t, sk_b, sk_t, sv_b, sv_t, so_b, so_t, n, d, qk_scale,\n"
    "             IS_CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):\n"
    "    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)\n"
    "    offs_m = pid_m * BM + tl.arange(0, BM)\n"
    "    offs_d = tl.arange(0, BD)\n"
    "    q = tl.load(Q + pid_bh * sq_b + offs_m[:, None] * sq_t + offs_d[None, :],\n"
    "                mask=(offs_m[:, None] < n) & (offs_d[None, :] < d), other=0.0)\n"
    "    m_i = tl.zeros([BM], dtype=tl.float32) - 1.0e30\n"
    "    l_i = tl.zeros([BM], dtype=tl.float32)\n"
    "    acc = tl.zeros([BM, BD], dtype=tl.float32)\n"
    "    for start_n in range(0, n, BN):\n"
    "        offs_n = start_n + tl.arange(0, BN)\n"
    "        kv_ok = (offs_n[:, None] < n) & (offs_d[None, :] < d)\n"
    "        k = tl.load(K + pid_bh * sk_b + offs_n[:, None] * sk_t + offs_d[None, :], mask=kv_ok, other=0.0)\n"
    "        v = tl.load(V + pid_bh * sv_b + offs_n[:, None] * sv_t + offs_d[None, :], mask=kv_ok, other=0.0)\n"
    "        qk = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * qk_scale\n"
    "        valid = offs_n[None, :] < n\n"
    "        if IS_CAUSAL:\n"
    "            valid = valid & (offs_m[:, None] >= offs_n[None, :])\n"
    "        qk = tl.where(valid, qk, -1.0e30)\n"
    "        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))\n"
    "        p = tl.exp2(qk - m_ij[:, None])\n"
    "        corr = tl.exp2(m_i - m_ij)\n"
    "        l_i = l_i * corr + tl.sum(p, axis=1)\n"
    "        acc = acc * corr[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)\n"
    "        m_i = m_ij\n"
    "    tl.store(Out + pid_bh * so_b + offs_m[:, None] * so_t + offs_d[None, :], acc / l_i[:, None],\n"
    "             mask=(offs_m[:, None] < n) & (offs_d[None, :] < d))\n"
    "\n"
    "\n"
    "def flash_attention_forward_triton(q, k, v, causal=False):\n"
    "    check_qkv(q, k, v)\n"
    "    if not (q.shape == k.shape == v.shape):\n"
    "        raise ValueError('q, k and v must have the same shape')\n"
    "    batch, heads, n, d = q.shape\n"
    "    q, k, v = (x.float().reshape(batch * heads, n, d) for x in (q, k, v))\n"
    "    out = torch.empty_like(q)\n"
    "    grid = lambda meta: (triton.cdiv(n, meta['BM']), batch * heads)\n"
    "    attn_fwd[grid](q, k, v, out, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),\n"
    "                   out.stride(0), out.stride(1), n, d, d ** -0.5 * 1.4426950408889634, IS_CAUSAL=causal,\n"
    "                   BM=16, BN=32, BD=max(16, triton.next_power_of_2(d)))\n"
    "    return out.reshape(batch, heads, n, d)\n"
)

# The running output kept normalised at every key block (divided by the running sum each time), not once at the end.
_TRITON_NORMALISED_EACH_BLOCK = _edit(
    _TRITON,
    ("        l = l * alpha + tl.sum(p, 1)\n        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=\"ieee\")\n",
     "        l_new = l * alpha + tl.sum(p, 1)\n"
     "        acc = acc * (l * alpha / l_new)[:, None] + tl.dot(p, v, input_precision=\"ieee\") / l_new[:, None]\n"
     "        l = l_new\n"),
    ("acc / l[:, None], mask=q_mask)", "acc, mask=q_mask)"))

# Autograd through the setup cell's own reference, and autograd of L and O together: the shortcuts around Parts 1 and 3.
_AUTOGRAD_BACKWARD = (
    "def attention_backward(q, k, v, d_out, scale=None, causal=False):\n"
    "    if d_out.shape != q.shape[:-1] + v.shape[-1:]:\n"
    "        raise ValueError('d_out has the wrong shape')\n"
    "    with torch.enable_grad():\n"
    "        return tuple(g.to(q.dtype) for g in autograd_reference(q, k, v, d_out, scale, causal))\n"
)
_AUTOGRAD_LSE = (
    "def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):\n"
    "    if d_lse.shape != q.shape[:-1]:\n"
    "        raise ValueError('d_lse has the wrong shape')\n"
    "    with torch.enable_grad():\n"
    "        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]\n"
    "        s = leaves[0] @ leaves[1].transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)\n"
    "        if causal:\n"
    "            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float('-inf'))\n"
    "        return torch.autograd.grad((torch.softmax(s, -1) @ leaves[2], torch.logsumexp(s, -1)), leaves,\n"
    "                                   (d_out, d_lse))\n"
)
_FUNC_VJP_BACKWARD = (
    "def attention_backward(q, k, v, d_out, scale=None, causal=False):\n"
    "    if d_out.shape != q.shape[:-1] + v.shape[-1:]:\n"
    "        raise ValueError('d_out has the wrong shape')\n"
    "    def forward(q, k, v):\n"
    "        n_q, n_k = q.shape[-2], k.shape[-2]\n"
    "        s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)\n"
    "        if causal:\n"
    "            s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1 + n_k - n_q), float('-inf'))\n"
    "        return torch.softmax(s, -1) @ v\n"
    "    return torch.func.vjp(forward, q, k, v)[1](d_out)\n"
)

# PyTorch's own CPU flash-attention kernels, forward and backward, reached through torch.ops.
_FLASH_ATEN = (
    "class FlashAttention(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):\n"
    "        check_qkv(q, k, v)\n"
    "        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)\n"
    "        ctx.save_for_backward(q, k, v, out, lse)\n"
    "        ctx.causal = causal\n"
    "        return out\n"
    "\n"
    "    @staticmethod\n"
    "    def backward(ctx, d_out):\n"
    "        q, k, v, out, lse = ctx.saved_tensors\n"
    "        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(\n"
    "            d_out.contiguous(), q, k, v, out, lse, 0.0, ctx.causal)\n"
    "        return (*grads, None, None, None)\n"
)

# The lesson's recomputation (its recomputed_attention), put in the backward: the forward again, through autograd.
_FLASH_LESSON_RECOMPUTE = _edit(_FLASH, (
    "        acc = lse.dtype\n",
    "        with torch.enable_grad():\n"
    "            leaves = [x.detach().requires_grad_() for x in (q, k, v)]\n"
    "            s = leaves[0] @ leaves[1].transpose(-2, -1) * scale\n"
    "            if causal:\n"
    "                t_q, t_k = q.shape[-2], k.shape[-2]\n"
    "                s = s.masked_fill(torch.ones(t_q, t_k, dtype=torch.bool).triu(1 + t_k - t_q), float('-inf'))\n"
    "            grads = torch.autograd.grad(torch.softmax(s, dim=-1) @ leaves[2], leaves, d_out)\n"
    "        return (*grads, None, None, None)\n"))

# The lesson's kernel (one program per row, softmax_rows_kernel) used as it is: the scores and the weighted sum in
# PyTorch around it.
_TRITON_LESSON_SOFTMAX_ROWS = (
    "@triton.jit\n"
    "def softmax_rows_kernel(x_ptr, out_ptr, num_cols, BLOCK: tl.constexpr):\n"
    "    row = tl.program_id(0)\n"
    "    cols = tl.arange(0, BLOCK)\n"
    "    inside = cols < num_cols\n"
    "    x = tl.load(x_ptr + row * num_cols + cols, mask=inside, other=float('-inf'))\n"
    "    e = tl.exp(x - tl.max(x, axis=0))\n"
    "    tl.store(out_ptr + row * num_cols + cols, e / tl.sum(e, axis=0), mask=inside)\n"
    "\n"
    "\n"
    "def flash_attention_forward_triton(q, k, v, causal=False):\n"
    "    check_qkv(q, k, v)\n"
    "    b, h, t, d = q.shape\n"
    "    scores = (q.float() @ k.float().transpose(-2, -1) / math.sqrt(d))\n"
    "    if causal:\n"
    "        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float('-inf'))\n"
    "    scores = scores.reshape(-1, t).contiguous()\n"
    "    weights = torch.empty_like(scores)\n"
    "    softmax_rows_kernel[(scores.shape[0],)](scores, weights, t, BLOCK=triton.next_power_of_2(t))\n"
    "    return weights.reshape(b, h, t, t) @ v.float()\n"
)

# Central differences of a forward written here, no autograd: numbers right to 1e-8, but no gradient worked out.
_FINITE_DIFFERENCES = (
    "def _forward(q, k, v, scale, causal):\n"
    "    s = q @ k.transpose(-2, -1) * scale\n"
    "    if causal:\n"
    "        n_q, n_k = s.shape[-2:]\n"
    "        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1 + n_k - n_q), float('-inf'))\n"
    "    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)\n"
    "\n"
    "\n"
    "def _central_differences(q, k, v, d_out, d_lse, scale, causal, eps=1e-6):\n"
    "    scale = q.shape[-1] ** -0.5 if scale is None else scale\n"
    "    xs = [x.detach().double().clone() for x in (q, k, v)]\n"
    "    grads = []\n"
    "    for x, original in zip(xs, (q, k, v)):\n"
    "        g = torch.zeros_like(x)\n"
    "        flat, g_flat = x.view(-1), g.view(-1)\n"
    "        for n in range(flat.numel()):\n"
    "            keep = flat[n].item()\n"
    "            values = []\n"
    "            for step in (eps, -eps):\n"
    "                flat[n] = keep + step\n"
    "                o, lse = _forward(*xs, scale, causal)\n"
    "                values.append((o * d_out.double()).sum() + (0 if d_lse is None else (lse * d_lse.double()).sum()))\n"
    "            flat[n] = keep\n"
    "            g_flat[n] = (values[0] - values[1]) / (2 * eps)\n"
    "        grads.append(g.to(original.dtype))\n"
    "    return tuple(grads)\n"
    "\n"
    "\n"
    "def attention_backward(q, k, v, d_out, scale=None, causal=False):\n"
    "    if d_out.shape != q.shape[:-1] + v.shape[-1:]:\n"
    "        raise ValueError('d_out has the wrong shape')\n"
    "    return _central_differences(q, k, v, d_out, None, scale, causal)\n"
)
_FINITE_DIFFERENCES_LSE = (
    "def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):\n"
    "    if d_lse.shape != q.shape[:-1]:\n"
    "        raise ValueError('d_lse has the wrong shape')\n"
    "    return _central_differences(q, k, v, d_out, d_lse, scale, causal)\n"
)
# Autograd (here through the setup cell's autograd_reference) inside the student's own saved-tensor hooks, which take
# over from any hooks set around the call.
_AUTOGRAD_OWN_HOOKS_LSE = (
    "def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):\n"
    "    if d_lse.shape != q.shape[:-1]:\n"
    "        raise ValueError('d_lse has the wrong shape')\n"
    "    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):\n"
    "        leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]\n"
    "        s = leaves[0] @ leaves[1].transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)\n"
    "        if causal:\n"
    "            n_q, n_k = s.shape[-2:]\n"
    "            s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1 + n_k - n_q), float('-inf'))\n"
    "        e = torch.exp(s - s.amax(-1, keepdim=True))\n"
    "        o = e / e.sum(-1, keepdim=True) @ leaves[2]\n"
    "        lse = torch.log(e.sum(-1)) + s.amax(-1)\n"
    "        grads = torch.autograd.grad((o, lse), leaves, (d_out.double(), d_lse.double()))\n"
    "    return tuple(g.to(q.dtype) for g in grads)\n"
)
_AUTOGRAD_OWN_HOOKS = (_AUTOGRAD_OWN_HOOKS_LSE
                       .replace("attention_lse_backward(q, k, v, d_out, d_lse,", "attention_backward(q, k, v, d_out,")
                       .replace("if d_lse.shape != q.shape[:-1]", "if d_out.shape != q.shape[:-1] + v.shape[-1:]")
                       .replace("d_lse has the wrong shape", "d_out has the wrong shape")
                       .replace("(o, lse), leaves, (d_out.double(), d_lse.double())", "o, leaves, d_out.double()"))
# The backward runs autograd over the tiled forward, recomputed: no tensor is (T, T), but the graph keeps every tile.
_FLASH_AUTOGRAD_OVER_TILES = _edit(_FLASH, (
    "        acc = lse.dtype\n",
    "        with torch.enable_grad():\n"
    "            leaves = [x.detach().to(lse.dtype).requires_grad_() for x in (q, k, v)]\n"
    "            outs = []\n"
    "            for i in range(0, q.shape[-2], block_q):\n"
    "                q_i = leaves[0][..., i:i + block_q, :]\n"
    "                rows = torch.arange(i, i + q_i.shape[-2]) + k.shape[-2] - q.shape[-2]\n"
    "                o_i = l_i = 0\n"
    "                for j in range(0, k.shape[-2], block_k):\n"
    "                    cols = torch.arange(j, min(j + block_k, k.shape[-2]))\n"
    "                    s = scale * q_i @ leaves[1][..., j:j + block_k, :].transpose(-2, -1)\n"
    "                    if causal:\n"
    "                        s = s.masked_fill(cols[None, :] > rows[:, None], float('-inf'))\n"
    "                    p = torch.exp(s - lse[..., i:i + block_q, None])\n"
    "                    o_i, l_i = o_i + p @ leaves[2][..., j:j + block_k, :], l_i + p.sum(-1, keepdim=True)\n"
    "                outs.append(o_i / l_i)\n"
    "            grads = torch.autograd.grad(torch.cat(outs, -2), leaves, d_out.to(lse.dtype))\n"
    "        return (*(g.to(q.dtype) for g in grads), None, None, None)\n"))
# An empty kernel launched for show; the launcher computes attention itself with operations no check refused.
_TRITON_EMPTY_KERNEL = (
    "@triton.jit\n"
    "def attention_forward_kernel(o_ptr, BLOCK: tl.constexpr):\n"
    "    pid = tl.program_id(0)\n"
    "\n"
    "\n"
    "def flash_attention_forward_triton(q, k, v, causal=False):\n"
    "    check_qkv(q, k, v)\n"
    "    q, k, v = (x.float() for x in (q, k, v))\n"
    "    s = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / math.sqrt(q.shape[-1])\n"
    "    if causal:\n"
    "        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float('-inf'))\n"
    "    e = torch.pow(math.e, s - s.amax(-1, keepdim=True))\n"
    "    o = ((e / e.sum(-1, keepdim=True))[..., None] * v[..., None, :, :]).sum(-2).contiguous()\n"
    "    attention_forward_kernel[(1, 1)](o, BLOCK=16)\n"
    "    return o\n"
)

# Attention in numpy, out of PyTorch's sight: the launchers of the cheats below compute their output with it.
_NUMPY_ATTENTION = (
    "import numpy as np\n"
    "\n"
    "\n"
    "def _numpy_attention(q, k, v, causal):\n"
    "    qn, kn, vn = (x.detach().double().numpy() for x in (q, k, v))\n"
    "    s = qn @ kn.swapaxes(-1, -2) / math.sqrt(q.shape[-1])\n"
    "    if causal:\n"
    "        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)\n"
    "    e = np.exp(s - s.max(-1, keepdims=True))\n"
    "    return torch.from_numpy((e / e.sum(-1, keepdims=True)) @ vn).float()\n"
    "\n"
    "\n"
)
# A kernel that writes garbage into the output, which the launcher then overwrites with attention computed in numpy.
_TRITON_GARBAGE_THEN_NUMPY = _NUMPY_ATTENTION + (
    "@triton.jit\n"
    "def attention_forward_kernel(q_ptr, o_ptr, n, BLOCK: tl.constexpr):\n"
    "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(o_ptr + i, tl.load(q_ptr + i, mask=i < n, other=0.0) * 0.5, mask=i < n)\n"
    "\n"
    "\n"
    "def flash_attention_forward_triton(q, k, v, causal=False):\n"
    "    check_qkv(q, k, v)\n"
    "    q = q.float().contiguous()\n"
    "    o = torch.empty_like(q)\n"
    "    attention_forward_kernel[(triton.cdiv(q.numel(), 16), 1)](q, o, q.numel(), BLOCK=16)\n"
    "    o.copy_(_numpy_attention(q, k, v, causal))\n"
    "    return o\n"
)
# Attention computed in numpy before the launch; the kernel copies it into the output (and loads k, for show).
_TRITON_COPIES_NUMPY = _NUMPY_ATTENTION + (
    "@triton.jit\n"
    "def attention_forward_kernel(src_ptr, k_ptr, o_ptr, n, BLOCK: tl.constexpr):\n"
    "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    k = tl.load(k_ptr + i, mask=i < n, other=0.0)\n"
    "    tl.store(o_ptr + i, tl.load(src_ptr + i, mask=i < n, other=0.0) + 0.0 * tl.sum(k, 0), mask=i < n)\n"
    "\n"
    "\n"
    "def flash_attention_forward_triton(q, k, v, causal=False):\n"
    "    check_qkv(q, k, v)\n"
    "    answer = _numpy_attention(q, k, v, causal).contiguous()\n"
    "    o = torch.empty_like(answer)\n"
    "    attention_forward_kernel[(triton.cdiv(o.numel(), 16), 1)](answer, k.float().contiguous(), o, o.numel(),\n"
    "                                                          BLOCK=16)\n"
    "    return o\n"
)
# The lesson's row kernel adapted mechanically: a program holds its block of queries and one block of all the keys
# (BLOCK_K = next_power_of_2(T)), so a plain softmax of the whole row needs no running maximum.
_TRITON_LESSON_ONE_KEY_BLOCK = (
    "@triton.jit\n"
    "def attention_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, num_tokens, head_dim, scale, CAUSAL: tl.constexpr,\n"
    "                             BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):\n"
    "    base = tl.program_id(1) * num_tokens * head_dim\n"
    "    rows = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)\n"
    "    cols = tl.arange(0, BLOCK_K)\n"
    "    dims = tl.arange(0, BLOCK_D)\n"
    "    q_mask = (rows[:, None] < num_tokens) & (dims[None, :] < head_dim)\n"
    "    kv_mask = (cols[:, None] < num_tokens) & (dims[None, :] < head_dim)\n"
    "    q = tl.load(q_ptr + base + rows[:, None] * head_dim + dims[None, :], mask=q_mask, other=0.0)\n"
    "    k = tl.load(k_ptr + base + cols[:, None] * head_dim + dims[None, :], mask=kv_mask, other=0.0)\n"
    "    v = tl.load(v_ptr + base + cols[:, None] * head_dim + dims[None, :], mask=kv_mask, other=0.0)\n"
    "    s = tl.dot(q, tl.trans(k), input_precision=\"ieee\") * scale\n"
    "    inside = cols[None, :] < num_tokens\n"
    "    if CAUSAL:\n"
    "        inside = inside & (cols[None, :] <= rows[:, None])\n"
    "    s = tl.where(inside, s, float(\"-inf\"))\n"
    "    e = tl.exp(s - tl.max(s, axis=1)[:, None])\n"
    "    o = tl.dot(e / tl.sum(e, axis=1)[:, None], v, input_precision=\"ieee\")\n"
    "    tl.store(o_ptr + base + rows[:, None] * head_dim + dims[None, :], o, mask=q_mask)\n"
    "\n"
    "\n"
    + "def flash_attention_forward_triton" + _edit(_TRITON, ("BLOCK_K=16", "BLOCK_K=triton.next_power_of_2(t)"))
    .split("def flash_attention_forward_triton", 1)[1]
)
# Two kernels: the first keeps the running output unnormalised and writes it with the running sums, in a (b, T, H, d)
# layout, the second divides; the grid's axes swapped, keys in blocks of 128 transposed as they are loaded, the causal
# loop stopped at the diagonal, and the result a contiguous copy of the second kernel's output.
_TRITON_TWO_KERNELS = (
    "@triton.jit\n"
    "def partial_attention_kernel(Q, K, V, Acc, Sums, T, D, H, qk_scale, CAUSAL: tl.constexpr,\n"
    "                             BQ: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr):\n"
    "    bh, qb = tl.program_id(0), tl.program_id(1)\n"
    "    i = qb * BQ + tl.arange(0, BQ)\n"
    "    d = tl.arange(0, BD)\n"
    "    base = bh * T * D\n"
    "    q = tl.load(Q + base + i[:, None] * D + d[None, :], mask=(i[:, None] < T) & (d[None, :] < D), other=0.0)\n"
    "    m = tl.full([BQ], -1.0e38, tl.float32)\n"
    "    l = tl.zeros([BQ], tl.float32)\n"
    "    acc = tl.zeros([BQ, BD], tl.float32)\n"
    "    end = T\n"
    "    if CAUSAL:\n"
    "        end = tl.minimum(T, (qb + 1) * BQ)\n"
    "    for kb in range(0, tl.cdiv(end, BK)):\n"
    "        j = kb * BK + tl.arange(0, BK)\n"
    "        kt = tl.load(K + base + j[None, :] * D + d[:, None], mask=(j[None, :] < T) & (d[:, None] < D), other=0.0)\n"
    "        vb = tl.load(V + base + j[:, None] * D + d[None, :], mask=(j[:, None] < T) & (d[None, :] < D), other=0.0)\n"
    "        s = tl.dot(q, kt, input_precision=\"ieee\") * qk_scale\n"
    "        ok = j[None, :] < T\n"
    "        if CAUSAL:\n"
    "            ok = ok & (j[None, :] <= i[:, None])\n"
    "        s = tl.where(ok, s, -1.0e38)\n"
    "        m_new = tl.maximum(m, tl.max(s, 1))\n"
    "        p = tl.exp(s - m_new[:, None])\n"
    "        r = tl.exp(m - m_new)\n"
    "        l = l * r + tl.sum(p, 1)\n"
    "        acc = acc * r[:, None] + tl.dot(p, vb, input_precision=\"ieee\")\n"
    "        m = m_new\n"
    "    rows = ((bh // H) * T + i) * H + bh % H\n"
    "    tl.store(Acc + rows[:, None] * D + d[None, :], acc, mask=(i[:, None] < T) & (d[None, :] < D))\n"
    "    tl.store(Sums + bh * T + i, l, mask=i < T)\n"
    "\n"
    "\n"
    "@triton.jit\n"
    "def normalise_kernel(Acc, Sums, Out, T, D, H, BQ: tl.constexpr, BD: tl.constexpr):\n"
    "    bh, qb = tl.program_id(0), tl.program_id(1)\n"
    "    i = qb * BQ + tl.arange(0, BQ)\n"
    "    d = tl.arange(0, BD)\n"
    "    rows = ((bh // H) * T + i) * H + bh % H\n"
    "    ok = (i[:, None] < T) & (d[None, :] < D)\n"
    "    acc = tl.load(Acc + rows[:, None] * D + d[None, :], mask=ok, other=0.0)\n"
    "    l = tl.load(Sums + bh * T + i, mask=i < T, other=1.0)\n"
    "    tl.store(Out + rows[:, None] * D + d[None, :], acc / l[:, None], mask=ok)\n"
    "\n"
    "\n"
    "def flash_attention_forward_triton(q, k, v, causal=False):\n"
    "    check_qkv(q, k, v)\n"
    "    if q.shape != k.shape or k.shape != v.shape:\n"
    "        raise ValueError('q, k and v must have the same shape')\n"
    "    b, h, t, d = q.shape\n"
    "    q, k, v = (x.float().contiguous() for x in (q, k, v))\n"
    "    acc, out = torch.empty(b, t, h, d), torch.empty(b, t, h, d)\n"
    "    sums = torch.empty(b * h, t)\n"
    "    grid = (b * h, triton.cdiv(t, 16))\n"
    "    bd = max(16, triton.next_power_of_2(d))\n"
    "    partial_attention_kernel[grid](q, k, v, acc, sums, t, d, h, d ** -0.5, CAUSAL=causal, BQ=16, BK=128, BD=bd)\n"
    "    normalise_kernel[grid](acc, sums, out, t, d, h, BQ=16, BD=bd)\n"
    "    return out.transpose(1, 2).contiguous()\n"
)

# One program for everything: the kernel walks over the (sequence, head) pairs and the query blocks itself, on a grid
# of one, so it never reads tl.program_id; slow on a GPU, correct all the same.
_TRITON_ONE_PROGRAM = (
    "@triton.jit\n"
    "def attention_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, pairs, num_tokens, head_dim, scale, CAUSAL: tl.constexpr,\n"
    "                             BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):\n"
    "    dims = tl.arange(0, BLOCK_D)\n"
    "    for pair in range(0, pairs):\n"
    "        base = pair * num_tokens * head_dim\n"
    "        for start_q in range(0, num_tokens, BLOCK_Q):\n"
    "            rows = start_q + tl.arange(0, BLOCK_Q)\n"
    "            q_mask = (rows[:, None] < num_tokens) & (dims[None, :] < head_dim)\n"
    "            q = tl.load(q_ptr + base + rows[:, None] * head_dim + dims[None, :], mask=q_mask, other=0.0)\n"
    "            m = tl.full([BLOCK_Q], float('-inf'), tl.float32)\n"
    "            l = tl.zeros([BLOCK_Q], tl.float32)\n"
    "            acc = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)\n"
    "            for start_k in range(0, num_tokens, BLOCK_K):\n"
    "                cols = start_k + tl.arange(0, BLOCK_K)\n"
    "                kv_mask = (cols[:, None] < num_tokens) & (dims[None, :] < head_dim)\n"
    "                k = tl.load(k_ptr + base + cols[:, None] * head_dim + dims[None, :], mask=kv_mask, other=0.0)\n"
    "                v = tl.load(v_ptr + base + cols[:, None] * head_dim + dims[None, :], mask=kv_mask, other=0.0)\n"
    "                s = tl.sum(q[:, None, :] * k[None, :, :], 2) * scale\n"
    "                keep = cols[None, :] < num_tokens\n"
    "                if CAUSAL:\n"
    "                    keep = keep & (cols[None, :] <= rows[:, None])\n"
    "                s = tl.where(keep, s, float('-inf'))\n"
    "                m_new = tl.maximum(m, tl.max(s, 1))\n"
    "                p = tl.exp(s - m_new[:, None])\n"
    "                l = l * tl.exp(m - m_new) + tl.sum(p, 1)\n"
    "                acc = acc * tl.exp(m - m_new)[:, None] + tl.sum(p[:, :, None] * v[None, :, :], 1)\n"
    "                m = m_new\n"
    "            tl.store(o_ptr + base + rows[:, None] * head_dim + dims[None, :], acc / l[:, None], mask=q_mask)\n"
    "\n\n"
    "def flash_attention_forward_triton(q, k, v, causal=False):\n"
    "    check_qkv(q, k, v)\n"
    "    if q.shape != k.shape or k.shape != v.shape:\n"
    "        raise ValueError(f'q, k and v must have one shape, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')\n"
    "    b, h, t, d = q.shape\n"
    "    q, k, v = (x.float().contiguous() for x in (q, k, v))\n"
    "    o = torch.empty_like(q)\n"
    "    attention_forward_kernel[(1,)](q, k, v, o, b * h, t, d, d ** -0.5, CAUSAL=causal, BLOCK_Q=16, BLOCK_K=32,\n"
    "                                   BLOCK_D=max(16, triton.next_power_of_2(d)))\n"
    "    return o\n"
)

VARIANTS = {
    "einsum_rowsum_of_p_dp": {
        "kind": "correct",
        "cells": {"attention_backward": _EINSUM_BACKWARD, "attention_lse_backward": _EINSUM_LSE},
    },
    "flash_query_tiles_outside_where_large_negative": {
        "kind": "correct",
        "cells": {"FlashAttention": _FLASH_QUERY_TILES_OUTSIDE},
    },
    "flash_key_default_blocks_changed": {
        "kind": "correct",
        "cells": {"FlashAttention": _edit(_FLASH, ("block_q=16, block_k=16", "block_q=64, block_k=32"))},
    },
    "backward_d_from_dp": {
        "kind": "mistake",
        "cells": {"attention_backward": _edit(_BACKWARD, ("(d_out * o).sum(-1, keepdim=True)", "d_p.sum(-1, keepdim=True)"))},
        "fails": {"test_attention_backward": "not rowsum(dP)", "test_attention_backward_causal": "not rowsum(dP)"},
    },
    "backward_d_forgotten": {
        "kind": "mistake",
        "cells": {"attention_backward": _edit(_BACKWARD, ("d_s = p * (d_p - d)", "d_s = p * d_p"))},
        "fails": {"test_attention_backward": "-P P^T", "test_attention_backward_causal": "-P P^T"},
    },
    "backward_scale_missing": {
        "kind": "mistake",
        "cells": {"attention_backward": _edit(_BACKWARD, ("return scale * d_s @ k, scale * d_s.transpose(-2, -1) @ q",
                                                          "return d_s @ k, d_s.transpose(-2, -1) @ q"))},
        "fails": {"test_attention_backward": "scale is missing", "test_attention_backward_causal": "scale is missing"},
    },
    "backward_scale_twice": {
        "kind": "mistake",
        "cells": {"attention_backward": _edit(_BACKWARD, ("d_s = p * (d_p - d)", "d_s = scale * p * (d_p - d)"))},
        "fails": {"test_attention_backward": "applied twice", "test_attention_backward_causal": "applied twice"},
    },
    "backward_weights_not_transposed_for_d_v": {
        "kind": "mistake",
        "cells": {"attention_backward": _edit(_BACKWARD, ("d_v = p.transpose(-2, -1) @ d_out", "d_v = p @ d_out"))},
        "fails": {"test_attention_backward": "not P dO", "test_attention_backward_causal": "not P dO"},
    },
    "backward_causal_mask_missing": {
        "kind": "mistake",
        "cells": {"attention_backward": _edit(_BACKWARD, ("    if causal:\n", "    if False:\n"))},
        "fails": {"test_attention_backward_causal": "same masked weights"},
    },
    "flash_saves_the_weights": {
        "kind": "mistake",
        "cells": {"FlashAttention": _edit(
            _FLASH, ("ctx.save_for_backward(q, k, v, o, lse)",
                     "ctx.save_for_backward(q, k, v, o, lse, torch.softmax(scale * q @ k.transpose(-2, -1), -1))"),
            ("q, k, v, o, lse = ctx.saved_tensors", "q, k, v, o, lse = ctx.saved_tensors[:5]"))},
        "fails": {"test_flash_attention_forward": "one of them (T, T)"},
    },
    "flash_backward_without_subtracting_l": {
        "kind": "mistake",
        "cells": {"FlashAttention": _edit(_FLASH, ("p = torch.exp(s - lse[..., i:i + block_q, None])", "p = torch.exp(s)"))},
        "fails": {"test_flash_attention_backward": "rebuilt from the saved L"},
    },
    "flash_backward_causal_mask_missing": {
        "kind": "mistake",
        "cells": {"FlashAttention": _edit(_FLASH, ("            for i in range(0, q.shape[-2], block_q):",
                                                   "            for i in range(0, q.shape[-2], block_q):\n"
                                                   "                causal = False"))},
        "fails": {"test_flash_attention_backward": "masked as the forward masked them"},
    },
    "flash_skips_the_last_tile": {
        "kind": "mistake",
        "cells": {"FlashAttention": _edit(_FLASH, ("for j in range(0, t_k, block_k):",
                                                   "for j in range(0, t_k - block_k + 1, block_k):"))},
        "fails": {"test_flash_attention_forward": "may be shorter", "test_flash_attention_backward": "rebuilt from the saved L"},
    },
    "flash_accumulates_in_bfloat16": {
        "kind": "mistake",
        "cells": {"FlashAttention": _edit(_FLASH, ("acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) "
                                                   "else q.dtype", "acc = q.dtype"))},
        "fails": {"test_flash_attention_forward": "keep the running maximum, sum, output",
                  "test_flash_attention_backward": "keep the running maximum, sum, output"},
    },
    "flash_backward_through_the_whole_matrix": {
        "kind": "mistake",
        "cells": {"FlashAttention": _edit(_FLASH, ("        acc = lse.dtype\n",
                                                   "        grads = attention_backward(*(x.float() for x in (q, k, v, d_out)), scale, causal)\n"
                                                   "        return (*(g.to(q.dtype) for g in grads), None, None, None)\n"))},
        "fails": {"test_flash_attention_backward": "backward made a tensor of"},
    },
    "lse_gradient_ignored": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": _edit(_LSE, (" + d_lse[..., None])", ")"))},
        "fails": {"test_attention_lse_backward": "dL/dS = P"},
    },
    "lse_gradient_subtracted": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": _edit(_LSE, (" + d_lse[..., None])", " - d_lse[..., None])"))},
        "fails": {"test_attention_lse_backward": "add what d_lse sends through it"},
    },
    "triton_strides_exp2_no_dot": {
        "kind": "correct",
        "cells": {"flash_attention_forward_triton": _TRITON_STRIDES_EXP2_NO_DOT},
    },
    "triton_normalised_each_block": {
        "kind": "correct",
        "cells": {"flash_attention_forward_triton": _TRITON_NORMALISED_EACH_BLOCK},
    },
    "triton_keys_past_t_keep_score_zero": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _edit(_TRITON, ("keep = cols[None, :] < num_tokens",
                                                                    "keep = cols[None, :] >= 0"))},
        "fails": {"test_flash_attention_forward_triton": "scores are 0, not -inf"},
    },
    "triton_causal_ignored": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _edit(_TRITON, ("        if CAUSAL:\n", "        if False:\n"))},
        "fails": {"test_flash_attention_forward_triton": "key after its query"},
    },
    "triton_scale_missing": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _edit(_TRITON, (" * scale\n", "\n"))},
        "fails": {"test_flash_attention_forward_triton": "not multiplied by scale"},
    },
    "triton_running_output_not_rescaled": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _edit(_TRITON, ("acc = acc * alpha[:, None] + ", "acc = acc + "))},
        "fails": {"test_flash_attention_forward_triton": "multiply it by exp(m_old - m_new)"},
    },
    "backward_mask_top_left": {
        "kind": "mistake",
        "cells": {"attention_backward": _edit(_BACKWARD, ("triu(1 + t_k - t_q)", "triu(1)"))},
        "fails": {"test_attention_backward_causal": "aligned top-left"},
    },
    "backward_through_autograd_reference": {
        "kind": "mistake",
        "cells": {"attention_backward": _AUTOGRAD_BACKWARD, "attention_lse_backward": _AUTOGRAD_LSE},
        "fails": {"test_attention_backward": "built an autograd graph",
                  "test_attention_backward_causal": "built an autograd graph",
                  "test_attention_lse_backward": "built an autograd graph"},
    },
    "backward_through_torch_func_vjp": {
        "kind": "mistake",
        "cells": {"attention_backward": _FUNC_VJP_BACKWARD},
        "fails": {"test_attention_backward": "not through autograd",
                  "test_attention_backward_causal": "not through autograd"},
    },
    "flash_through_aten_cpu_kernels": {
        "kind": "mistake",
        "cells": {"FlashAttention": _FLASH_ATEN},
        "fails": {"test_flash_attention_forward": "a library's kernel",
                  "test_flash_attention_backward": "ran aten._scaled_dot_product_flash_attention_for_cpu"},
    },
    "flash_backward_recomputes_like_the_lesson": {
        "kind": "mistake",
        "cells": {"FlashAttention": _FLASH_LESSON_RECOMPUTE},
        "fails": {"test_flash_attention_backward": "a library's kernel"},
    },
    "triton_lesson_softmax_rows_kernel": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _TRITON_LESSON_SOFTMAX_ROWS},
        "fails": {"test_flash_attention_forward_triton": "the launcher ran aten."},
    },
    "triton_kernel_never_launched_sdpa": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _edit(
            _TRITON, ("    attention_forward_kernel[grid](", "    return F.scaled_dot_product_attention(q, k, v, "
                      "is_causal=causal)\n    attention_forward_kernel[grid]("))},
        "fails": {"test_flash_attention_forward_triton": "computes attention with PyTorch"},
    },
    "triton_sdpa_instead_of_a_kernel": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": (
            "def flash_attention_forward_triton(q, k, v, causal=False):\n"
            "    check_qkv(q, k, v)\n"
            "    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)\n")},
        "fails": {"test_flash_attention_forward_triton": "computes attention with PyTorch"},
    },
    "backward_finite_differences": {
        "kind": "cheat",
        "cells": {"attention_backward": _FINITE_DIFFERENCES, "attention_lse_backward": _FINITE_DIFFERENCES_LSE},
        "fails": {"test_attention_backward": "twice per input element", "test_attention_backward_causal": "twice per input element",
                  "test_attention_lse_backward": "twice per input element"},
    },
    "backward_autograd_inside_own_hooks": {
        "kind": "cheat",
        "cells": {"attention_backward": _AUTOGRAD_OWN_HOOKS, "attention_lse_backward": _AUTOGRAD_OWN_HOOKS_LSE},
        "fails": {"test_attention_backward": "built an autograd graph", "test_attention_backward_causal": "built an autograd graph",
                  "test_attention_lse_backward": "built an autograd graph"},
    },
    "flash_backward_autograd_over_tiles": {
        "kind": "cheat",
        "cells": {"FlashAttention": _FLASH_AUTOGRAD_OVER_TILES},
        "fails": {"test_flash_attention_backward": "built an autograd graph"},
    },
    "triton_empty_kernel_launched": {
        "kind": "cheat",
        "cells": {"flash_attention_forward_triton": _TRITON_EMPTY_KERNEL},
        "fails": {"test_flash_attention_forward_triton": "on k's elements"},
    },
    "triton_garbage_kernel_numpy_outside": {
        "kind": "cheat",
        "cells": {"flash_attention_forward_triton": _TRITON_GARBAGE_THEN_NUMPY},
        "fails": {"test_flash_attention_forward_triton": "hold no value a kernel it launched"},
    },
    "triton_kernel_copies_numpy_attention": {
        "kind": "cheat",
        "cells": {"flash_attention_forward_triton": _TRITON_COPIES_NUMPY},
        "fails": {"test_flash_attention_forward_triton": "loaded from memory no kernel had written"},
    },
    "triton_lesson_one_key_block": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _TRITON_LESSON_ONE_KEY_BLOCK},
        "fails": {"test_flash_attention_forward_triton": "more than the 128 keys"},
    },
    "triton_two_kernels_keys_by_128": {
        "kind": "correct",
        "cells": {"flash_attention_forward_triton": _TRITON_TWO_KERNELS},
    },
    "triton_one_program_no_program_id": {
        "kind": "correct",
        "cells": {"flash_attention_forward_triton": _TRITON_ONE_PROGRAM},
    },
}

# Autograd and the whole matrix run in a thread: a dispatch mode sees its own thread only, so a watched call may start
# none (attention_course/memory.py)
VARIANTS["thread_autograd"] = {
    "kind": "cheat",
    "cells": {"attention_backward": 'import threading\ndef _off_thread(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\ndef attention_backward(q, k, v, d_out, scale=None, causal=False):\n    check_qkv(q, k, v)\n    if d_out.shape != q.shape[:-1] + v.shape[-1:]:\n        raise ValueError(f"d_out must have shape {tuple(q.shape)}, got {tuple(d_out.shape)}")\n    grads = _off_thread(lambda: autograd_reference(q, k, v, d_out, scale, causal))\n    return tuple(g.to(q.dtype) for g in grads)\n',
              "attention_lse_backward": 'import threading\ndef _off_thread2(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\ndef attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):\n    check_qkv(q, k, v)\n    if d_out.shape != q.shape[:-1] + v.shape[-1:]:\n        raise ValueError(f"d_out must have shape {tuple(q.shape)}, got {tuple(d_out.shape)}")\n    if d_lse.shape != q.shape[:-1]:\n        raise ValueError(f"d_lse must have shape {tuple(q.shape[:-1])}, got {tuple(d_lse.shape)}")\n    def work():\n        ls = [x.detach().double().requires_grad_() for x in (q, k, v)]\n        m = q.shape[-1] ** -0.5 if scale is None else scale\n        s = ls[0] @ ls[1].transpose(-2, -1) * m\n        if causal:\n            tq, tk = q.shape[-2], k.shape[-2]\n            s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1 + tk - tq), float("-inf"))\n        return torch.autograd.grad((torch.softmax(s, -1) @ ls[2], torch.logsumexp(s, -1)), ls, (d_out.double(), d_lse.double()))\n    return tuple(g.to(q.dtype) for g in _off_thread2(work))\n',
              "FlashAttention": 'import threading\ndef _off_thread3(f):\n    box = {}\n    t = threading.Thread(target=lambda: box.setdefault("r", f())); t.start(); t.join()\n    return box["r"]\n\nclass FlashAttention(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64):\n        def work():\n            m = q.shape[-1] ** -0.5\n            s = q.double() @ k.double().transpose(-2, -1) * m\n            if causal:\n                tq, tk = q.shape[-2], k.shape[-2]\n                s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1 + tk - tq), float("-inf"))\n            return (torch.softmax(s, -1) @ v.double()).to(q.dtype), torch.logsumexp(s, -1).float()\n        out, lse = _off_thread3(work)\n        ctx.save_for_backward(q, k, v, out, lse)\n        ctx.causal = causal\n        return out\n\n    @staticmethod\n    def backward(ctx, d_out):\n        q, k, v, out, lse = ctx.saved_tensors\n        grads = _off_thread3(lambda: autograd_reference(q, k, v, d_out, None, ctx.causal))\n        return tuple(g.to(q.dtype) for g in grads) + (None, None, None)\n'},
    "fails": {cell: "started a thread" for cell in ("test_attention_backward", "test_attention_backward_causal",
                                                  "test_flash_attention_forward", "test_flash_attention_backward",
                                                  "test_attention_lse_backward")},
}

# For each transfer part: the lesson's code adapted mechanically and the library or autograd shortcut (both fail it),
# and two correct solutions in other styles (full points).
_MEMO = """
_memo = {}


def _autograd_grads(q, k, v, d_out, d_lse, scale, causal):
    with torch.enable_grad():
        q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
        s = q @ k.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if causal:
            keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(s.shape[-1] - s.shape[-2])
            s = s.masked_fill(~keep, float("-inf"))
        outs, grads = [torch.softmax(s, -1) @ v], [d_out.double()]
        if d_lse is not None:
            outs.append(torch.logsumexp(s, -1))
            grads.append(d_lse.double())
        return tuple(g.to(d_out.dtype) for g in torch.autograd.grad(outs, (q, k, v), grads))


def _remembered(*args):
    key = tuple(x.detach().numpy().tobytes() if isinstance(x, torch.Tensor) else x for x in args)
    if key not in _memo:
        _memo[key] = _autograd_grads(*args)
    return _memo[key]
"""
# Autograd behind a memo of the inputs' bytes: called plainly first, it answered the watched call from memory.
VARIANTS["autograd_behind_a_memo"] = {
    "kind": "cheat",
    "cells": {"attention_backward": _MEMO + '''

def attention_backward(q, k, v, d_out, scale=None, causal=False):
    if d_out.shape != q.shape[:-1] + v.shape[-1:]:
        raise ValueError("d_out has the wrong shape")
    return _remembered(q, k, v, d_out, None, scale, causal)
''',
              "attention_lse_backward": '''def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):
    return _remembered(q, k, v, d_out, d_lse, scale, causal)
'''},
    "fails": {"test_attention_backward": "autograd", "test_attention_backward_causal": "autograd",
              "test_attention_lse_backward": "autograd"},
}


# The weights kept row by row on ctx, outside save_for_backward, and the backward reads them back: Part 1's dense
# formulas per row, never L. No (T, T) tensor, yet all of the weights stay alive between the two passes.
VARIANTS["weights_kept_on_ctx"] = {
    "kind": "cheat",
    "cells": {"FlashAttention": '''class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64):
        check_qkv(q, k, v)
        t_q, t_k = q.shape[-2], k.shape[-2]
        scale = q.shape[-1] ** -0.5
        rows, outs, lses = [], [], []
        for i in range(t_q):
            s = (q[..., i:i + 1, :].float() @ k.float().transpose(-2, -1)) * scale
            if causal:
                s[..., i + t_k - t_q + 1:] = float("-inf")
            lse = torch.logsumexp(s, -1)
            p = torch.exp(s - lse[..., None])
            rows.append(p)
            outs.append(p @ v.float())
            lses.append(lse)
        o = torch.cat(outs, -2).to(q.dtype)
        ctx.rows = rows
        ctx.save_for_backward(q, k, v, o, torch.cat(lses, -1))
        return o

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, o, _ = ctx.saved_tensors
        scale = q.shape[-1] ** -0.5
        qf, kf, vf, of, dof = (x.float() for x in (q, k, v, o, d_out))
        dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
        for i, p in enumerate(ctx.rows):
            do_i = dof[..., i:i + 1, :]
            dv += p.transpose(-2, -1) @ do_i
            dp = do_i @ vf.transpose(-2, -1)
            ds = p * (dp - (do_i * of[..., i:i + 1, :]).sum(-1, keepdim=True)) * scale
            dq[..., i:i + 1, :] = ds @ kf
            dk += ds.transpose(-2, -1) @ qf[..., i:i + 1, :]
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None
'''},
    "fails": {"test_flash_attention_backward": "keeps the weights alive"},
}


def _kernel_in_a_cell_of_its_own(nb):
    """The kernel in an unlocked cell of the student's own above the launcher's cell: where a solution's code sits
    is not the point."""
    import nbformat
    index = next(i for i, c in enumerate(nb.cells)
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "flash_attention_forward_triton")
    kernel, launcher = nb.cells[index].source.split("\n\n\ndef flash_attention_forward_triton", 1)
    nb.cells[index].source = "def flash_attention_forward_triton" + launcher
    nb.cells.insert(index, nbformat.v4.new_code_cell(kernel + "\n"))
    return nb


VARIANTS["triton_kernel_in_a_cell_of_its_own"] = {"kind": "correct", "cells": {},
                                                 "notebook": _kernel_in_a_cell_of_its_own}


PROOF = {
    "test_flash_attention_backward": {
        "lesson": ["flash_backward_recomputes_like_the_lesson", "flash_backward_through_the_whole_matrix"],
        "shortcut": ["flash_through_aten_cpu_kernels", "flash_backward_autograd_over_tiles"],
        "correct": ["flash_query_tiles_outside_where_large_negative", "flash_key_default_blocks_changed"],
    },
    "test_flash_attention_forward_triton": {
        "lesson": ["triton_lesson_softmax_rows_kernel", "triton_lesson_one_key_block"],
        "shortcut": ["triton_kernel_never_launched_sdpa", "triton_sdpa_instead_of_a_kernel",
                     "triton_empty_kernel_launched", "triton_garbage_kernel_numpy_outside",
                     "triton_kernel_copies_numpy_attention"],
        "correct": ["triton_strides_exp2_no_dot", "triton_normalised_each_block", "triton_two_kernels_keys_by_128"],
    },
}
