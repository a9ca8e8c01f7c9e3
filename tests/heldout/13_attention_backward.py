"""Held-out mistakes for step 13, written from the released exercise only (issue 46).

Styles: the FlashAttention-2 paper's backward (dV = Pᵀ dO, dP = dO Vᵀ, D = rowsum(dO ∘ O), dS = P ∘ (dP − D)) as
usually transcribed in PyTorch, CS336 assignment style (a torch.autograd.Function over tiles, L = m + log l, key
tiles outer in the backward, einsum), Triton's fused-attention tutorial (exp2, block pointers by hand, masks on
loads), plain loops and Part-1 reuse. `fails` words name the actual mistake; "correct" variants are other people's
correct code, which must get full marks.
"""


def _fill(template, defaults, changes):
    text = template
    for key, value in {**defaults, **changes}.items():
        text = text.replace(f"@@{key}@@", value)
    return text


# Part 1: attention_backward, the FlashAttention-2 paper's equations on whole matrices --------------------------------

_BWD = '''def attention_backward(q, k, v, d_out, scale=None, causal=False):
    @@check@@
    if scale is None:
        scale = @@default_scale@@
    s = @@scores@@
    if causal:
        T_q, T_k = q.shape[-2], k.shape[-2]
        @@mask@@
        @@apply_mask@@
    p = @@softmax@@
    d_v = @@d_v@@
    d_p = @@d_p@@
    d_s = @@d_s@@
    d_q = @@d_q@@
    d_k = @@d_k@@
    return d_q, d_k, d_v
'''
_BWD_DEFAULTS = dict(
    check="out_shape = q.shape[:-1] + v.shape[-1:]\n"
          "    if d_out.shape != out_shape:\n"
          "        raise ValueError(f\"d_out must have the output's shape {tuple(out_shape)}, got {tuple(d_out.shape)}\")",
    default_scale="1.0 / math.sqrt(q.shape[-1])",
    scores="scale * (q @ k.transpose(-2, -1))",
    mask="allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)",
    apply_mask="s = s.masked_fill(~allowed, float(\"-inf\"))",
    softmax="torch.softmax(s, dim=-1)",
    d_v="p.transpose(-2, -1) @ d_out",
    d_p="d_out @ v.transpose(-2, -1)",
    d_s="p * (d_p - (d_p * p).sum(dim=-1, keepdim=True))",
    d_q="scale * (d_s @ k)",
    d_k="scale * (d_s.transpose(-2, -1) @ q)",
)


def _bwd(**changes):
    return _fill(_BWD, _BWD_DEFAULTS, changes)


# Part 2: FlashAttention as an autograd.Function, CS336 style ---------------------------------------------------------

_FLASH = '''class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        b, H, T_q, d = q.shape
        T_k = k.shape[-2]
        scale = 1.0 / math.sqrt(d)
        o = torch.empty(b, H, T_q, v.shape[-1], dtype=q.dtype)
        L = torch.empty(b, H, T_q, dtype=torch.float32)
        for i in range(0, T_q, block_q):
            q_i = q[..., i:i + block_q, :].float()
            m = torch.full(q_i.shape[:-1], float("-inf"))
            l = torch.zeros(q_i.shape[:-1])
            acc = torch.zeros(q_i.shape[:-1] + (v.shape[-1],))
            for j in @@key_tiles@@:
                k_j = k[..., j:j + block_k, :].float()
                v_j = v[..., j:j + block_k, :].float()
                s = (q_i @ k_j.transpose(-2, -1)) * scale
                if causal:
                    rows = torch.arange(i, i + q_i.shape[-2])[:, None] + @@shift@@
                    cols = torch.arange(j, j + k_j.shape[-2])[None, :]
                    s = s.masked_fill(cols > rows, float("-inf"))
                m_new = torch.maximum(m, s.amax(dim=-1))
                alpha = torch.exp(m - m_new)
                p = torch.exp(s - m_new[..., None])
                l = @@l_update@@
                acc = @@acc_update@@
                m = m_new
            o[..., i:i + block_q, :] = (acc / l[..., None]).to(q.dtype)
            L[..., i:i + block_q] = @@lse@@
        @@save@@
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        return o

    @staticmethod
    def backward(ctx, d_o):
        @@unpack@@
        causal, block_q, block_k = ctx.causal, ctx.block_q, ctx.block_k
        T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(d)
        d_o = d_o.float()
        D = @@D@@
        d_q = torch.zeros(q.shape)
        d_k = torch.zeros(k.shape)
        d_v = torch.zeros(v.shape)
        for i in range(0, T_q, block_q):
            q_i = q[..., i:i + block_q, :].float()
            d_o_i = d_o[..., i:i + block_q, :]
            for j in range(0, T_k, block_k):
                k_j = k[..., j:j + block_k, :].float()
                v_j = v[..., j:j + block_k, :].float()
                s = (q_i @ k_j.transpose(-2, -1)) * scale
                if @@bwd_causal@@:
                    rows = torch.arange(i, i + q_i.shape[-2])[:, None] + T_k - T_q
                    cols = torch.arange(j, j + k_j.shape[-2])[None, :]
                    s = s.masked_fill(cols > rows, float("-inf"))
                p = @@p@@
                d_v[..., j:j + block_k, :] @@acc_op@@ p.transpose(-2, -1) @ d_o_i
                d_p = d_o_i @ v_j.transpose(-2, -1)
                d_s = p * (d_p - @@D_i@@)
                d_q[..., i:i + block_q, :] += @@scale_q@@ (d_s @ k_j)
                d_k[..., j:j + block_k, :] @@acc_op@@ @@scale_k@@ (d_s.transpose(-2, -1) @ q_i)
        return @@returns@@
'''
_FLASH_DEFAULTS = dict(
    key_tiles="range(0, T_k, block_k)",
    shift="T_k - T_q",
    l_update="alpha * l + p.sum(dim=-1)",
    acc_update="alpha[..., None] * acc + p @ v_j",
    lse="m + torch.log(l)",
    save="ctx.save_for_backward(q, k, v, o, L)",
    unpack="q, k, v, o, L = ctx.saved_tensors",
    D="(d_o * o.float()).sum(dim=-1)",
    bwd_causal="causal",
    p="torch.exp(s - L[..., i:i + block_q, None])",
    acc_op="+=",
    D_i="D[..., i:i + block_q, None]",
    scale_q="scale *",
    scale_k="scale *",
    returns="d_q.to(q.dtype), d_k.to(k.dtype), d_v.to(v.dtype), None, None, None",
)


def _flash(**changes):
    return _fill(_FLASH, _FLASH_DEFAULTS, changes)


# Part 3: attention_lse_backward --------------------------------------------------------------------------------------

_LSE = '''def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    s = scale * (q @ k.transpose(-2, -1))
    if causal:
        T_q, T_k = q.shape[-2], k.shape[-2]
        allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)
        s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1)
    d_v = p.transpose(-2, -1) @ d_out
    d_p = d_out @ v.transpose(-2, -1)
    D = (d_p * p).sum(dim=-1, keepdim=True)
    d_s = @@d_s@@
    d_q = scale * (d_s @ k)
    d_k = scale * (d_s.transpose(-2, -1) @ q)
    return d_q, d_k, d_v
'''


def _lse(d_s):
    return _LSE.replace("@@d_s@@", d_s)


# Part 4: the Triton kernel, in the style of Triton's fused-attention tutorial ----------------------------------------

_TRITON = '''@triton.jit
def attention_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, num_tokens, head_dim, scale, CAUSAL: tl.constexpr,
                             BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_q = tl.program_id(0)
    pid_bh = tl.program_id(1)
    base = pid_bh * num_tokens * head_dim
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_q[:, None] < num_tokens) & (offs_d[None, :] < head_dim)
    q = tl.load(q_ptr + base + offs_q[:, None] * head_dim + offs_d[None, :], mask=q_mask, other=0.0)
    m_i = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_Q,), tl.float32)
    acc = tl.zeros((BLOCK_Q, BLOCK_D), tl.float32)
    for start in range(0, num_tokens, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        kv_mask = (offs_k[:, None] < num_tokens) & (offs_d[None, :] < head_dim)
        k = tl.load(k_ptr + base + offs_k[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + offs_k[:, None] * head_dim + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * @@scale@@
        keep = @@keep@@
        if CAUSAL:
            keep = keep & (@@causal@@)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(o_ptr + base + offs_q[:, None] * head_dim + offs_d[None, :], acc / l_i[:, None], mask=q_mask)


def flash_attention_forward_triton(q, k, v, causal=False):
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k and v must share one shape (b, H, T, head_dim): q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    b, H, T, d = q.shape
    q_, k_, v_ = (x.float().contiguous().reshape(b * H, T, d) for x in (q, k, v))
    o = torch.empty_like(q_)
    grid = @@grid@@
    attention_forward_kernel[grid](q_, k_, v_, o, T, d, 1.0 / math.sqrt(d), CAUSAL=causal, BLOCK_Q=16, BLOCK_K=16,
                                   BLOCK_D=max(16, triton.next_power_of_2(d)))
    return o.reshape(b, H, T, d)
'''
_TRITON_DEFAULTS = dict(scale="scale", keep="offs_k[None, :] < num_tokens", causal="offs_k[None, :] <= offs_q[:, None]",
                        grid="(triton.cdiv(T, 16), b * H)")


def _triton(**changes):
    return _fill(_TRITON, _TRITON_DEFAULTS, changes)


# Correct solutions in other styles -----------------------------------------------------------------------------------

_BWD_EINSUM = '''def attention_backward(q, k, v, d_out, scale=None, causal=False):
    expected = (*q.shape[:-1], v.shape[-1])
    if tuple(d_out.shape) != expected:
        raise ValueError(f"d_out has shape {tuple(d_out.shape)}, expected {expected}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        future = torch.arange(t_k)[None, :] > torch.arange(t_q)[:, None] + (t_k - t_q)
        scores = torch.where(future, torch.full_like(scores, float("-inf")), scores)
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
    delta = (d_out * out).sum(-1, keepdim=True)
    d_v = torch.einsum("bhqk,bhqd->bhkd", weights, d_out)
    d_weights = torch.einsum("bhqd,bhkd->bhqk", d_out, v)
    d_scores = weights * (d_weights - delta) * scale
    d_q = torch.einsum("bhqk,bhkd->bhqd", d_scores, k)
    d_k = torch.einsum("bhqk,bhqd->bhkd", d_scores, q)
    return d_q, d_k, d_v
'''

_LSE_EINSUM = '''def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        future = torch.arange(t_k)[None, :] > torch.arange(t_q)[:, None] + (t_k - t_q)
        scores = scores.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.exp(scores - lse)
    out = weights @ v
    d_v = weights.transpose(-2, -1) @ d_out
    # L = logsumexp(S) has dL/dS = P: d_lse enters dS as P * d_lse, next to the output's P * (dP - D)
    d_scores = weights * (d_out @ v.transpose(-2, -1) - (d_out * out).sum(-1, keepdim=True) + d_lse.unsqueeze(-1))
    d_q = scale * d_scores @ k
    d_k = scale * d_scores.transpose(-2, -1) @ q
    return d_q, d_k, d_v
'''

# FlashAttention-2's backward order: key tiles outer (d_k, d_v stay in the tile), query tiles inner; lists and cat
_FLASH_KV_OUTER = '''class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64):
        n_q, n_k = q.shape[-2], k.shape[-2]
        scale = q.shape[-1] ** -0.5
        outs, lses = [], []
        for i0 in range(0, n_q, block_q):
            qi = q[:, :, i0:i0 + block_q].float() * scale
            rows = torch.arange(i0, i0 + qi.shape[2]) + (n_k - n_q)
            row_max = torch.full(qi.shape[:3], -float("inf"))
            row_sum = torch.zeros(qi.shape[:3])
            acc = torch.zeros(*qi.shape[:3], v.shape[-1])
            for j0 in range(0, n_k, block_k):
                if causal and j0 > rows[-1]:
                    break
                kj, vj = k[:, :, j0:j0 + block_k].float(), v[:, :, j0:j0 + block_k].float()
                sij = torch.einsum("bhid,bhjd->bhij", qi, kj)
                if causal:
                    cols = torch.arange(j0, j0 + kj.shape[2])
                    sij = torch.where(cols[None, :] <= rows[:, None], sij, torch.tensor(-float("inf")))
                new_max = torch.maximum(row_max, sij.amax(-1))
                correction = torch.exp(row_max - new_max)
                pij = torch.exp(sij - new_max.unsqueeze(-1))
                row_sum = row_sum * correction + pij.sum(-1)
                acc = acc * correction.unsqueeze(-1) + torch.einsum("bhij,bhjd->bhid", pij, vj)
                row_max = new_max
            outs.append(acc / row_sum.unsqueeze(-1))
            lses.append(row_max + row_sum.log())
        out, lse = torch.cat(outs, dim=2), torch.cat(lses, dim=2)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        n_q, n_k = q.shape[-2], k.shape[-2]
        scale = q.shape[-1] ** -0.5
        grad_out = grad_out.float()
        delta = (grad_out * out).sum(-1)
        grad_q = torch.zeros(q.shape)
        grad_k, grad_v = [], []
        for j0 in range(0, n_k, ctx.block_k):
            kj, vj = k[:, :, j0:j0 + ctx.block_k].float(), v[:, :, j0:j0 + ctx.block_k].float()
            cols = torch.arange(j0, j0 + kj.shape[2])
            dkj, dvj = torch.zeros(kj.shape), torch.zeros(vj.shape)
            for i0 in range(0, n_q, ctx.block_q):
                qi = q[:, :, i0:i0 + ctx.block_q].float()
                doi = grad_out[:, :, i0:i0 + ctx.block_q]
                sij = torch.einsum("bhid,bhjd->bhij", qi, kj) * scale
                if ctx.causal:
                    rows = torch.arange(i0, i0 + qi.shape[2]) + (n_k - n_q)
                    sij = sij.masked_fill(cols[None, :] > rows[:, None], -float("inf"))
                pij = torch.exp(sij - lse[:, :, i0:i0 + ctx.block_q, None])
                dvj += torch.einsum("bhij,bhid->bhjd", pij, doi)
                dpij = torch.einsum("bhid,bhjd->bhij", doi, vj)
                dsij = pij * (dpij - delta[:, :, i0:i0 + ctx.block_q, None]) * scale
                grad_q[:, :, i0:i0 + ctx.block_q] += torch.einsum("bhij,bhjd->bhid", dsij, kj)
                dkj += torch.einsum("bhij,bhid->bhjd", dsij, qi)
            grad_k.append(dkj)
            grad_v.append(dvj)
        grad_k, grad_v = torch.cat(grad_k, dim=2), torch.cat(grad_v, dim=2)
        return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), None, None, None
'''

# Triton's tutorial style: exp2 with log2(e) folded into the scale
_TRITON_EXP2 = '''@triton.jit
def attention_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, num_tokens, head_dim, scale, CAUSAL: tl.constexpr,
                             BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):
    start_q = tl.program_id(0) * BLOCK_Q
    head = tl.program_id(1).to(tl.int64) * num_tokens * head_dim
    rq = start_q + tl.arange(0, BLOCK_Q)
    rd = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + head + rq[:, None] * head_dim + rd[None, :],
                mask=(rq[:, None] < num_tokens) & (rd[None, :] < head_dim), other=0.0)
    qk_scale = scale * 1.44269504
    m = tl.zeros((BLOCK_Q,), dtype=tl.float32) - float("inf")
    l = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_Q, BLOCK_D), dtype=tl.float32)
    hi = tl.minimum(start_q + BLOCK_Q, num_tokens) if CAUSAL else num_tokens
    for start_k in range(0, hi, BLOCK_K):
        rk = start_k + tl.arange(0, BLOCK_K)
        kv_ok = (rk[:, None] < num_tokens) & (rd[None, :] < head_dim)
        kt = tl.load(k_ptr + head + rk[None, :] * head_dim + rd[:, None],
                     mask=(rk[None, :] < num_tokens) & (rd[:, None] < head_dim), other=0.0)
        v = tl.load(v_ptr + head + rk[:, None] * head_dim + rd[None, :], mask=kv_ok, other=0.0)
        qk = tl.dot(q, kt) * qk_scale
        ok = rk[None, :] < num_tokens
        if CAUSAL:
            ok = ok & (rq[:, None] >= rk[None, :])
        qk = tl.where(ok, qk, -float("inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        corr = tl.math.exp2(m - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        l = l * corr + tl.sum(p, 1)
        acc = acc * corr[:, None] + tl.dot(p, v)
        m = m_new
    acc = acc / l[:, None]
    tl.store(o_ptr + head + rq[:, None] * head_dim + rd[None, :], acc,
             mask=(rq[:, None] < num_tokens) & (rd[None, :] < head_dim))


def flash_attention_forward_triton(q, k, v, causal=False):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4 or x.shape != q.shape:
            raise ValueError(f"{name} must have q's shape (b, H, T, head_dim) {tuple(q.shape)}, got {tuple(x.shape)}")
    b, n_heads, n_tokens, head_dim = q.shape
    flat = [x.to(torch.float32).reshape(b * n_heads, n_tokens, head_dim).contiguous() for x in (q, k, v)]
    out = torch.empty_like(flat[0])
    block_d = max(16, triton.next_power_of_2(head_dim))
    attention_forward_kernel[(triton.cdiv(n_tokens, 16), b * n_heads)](
        *flat, out, n_tokens, head_dim, head_dim ** -0.5, CAUSAL=causal, BLOCK_Q=16, BLOCK_K=16, BLOCK_D=block_d)
    return out.view(b, n_heads, n_tokens, head_dim)
'''

# Words of each mistake's message: a message naming a mistake the code did not make says one of the others' words.
_PHRASES = {
    1: {"no_d": "not P * dP", "d_dp": "not rowsum(dP)", "d_q": "summed over the queries", "no_scale": "scale is missing",
        "twice": "applied twice", "divides": "multiplier", "dk": "not dS Q", "dv": "not P dO", "dp": "V dO^T",
        "softmax": "softmax runs over", "top_left": "top-left", "square": "(T_q, T_q)", "diag": "diagonal",
        "no_mask": "not masked", "after": "after the softmax", "autograd": "through autograd",
        "inplace": "changed its input"},
    2: {"f_rescale": "output kept so far was weighted", "f_sum": "running sum was not multiplied",
        "f_last": "last tile may be shorter", "f_lse": "log-sum-exp L (b, H, T)", "f_log": "L is m + l",
        "top_left": "top-left", "f_unmasked": "tiles were not masked", "f_tile_d": "within one key tile",
        "no_scale": "scale is missing", "f_overwrite": "(+=)", "f_count": "None for", "f_tt": "(T, T)",
        "f_bf16": "float32"},
    3: {"l_ignored": "is an output too", "l_unweighted": "not d_lse itself", "l_sign": "sign of d_lse",
        "l_flat": "d_lse[..., None]", "l_exp": "not exp(S)", "l_unscaled": "without the scale",
        "no_d": "not P * dP", "d_dp": "not rowsum(dP)", "no_scale": "scale is missing"},
}


def _others(key, part):
    return [words for other, words in _PHRASES[part].items() if other != key and words != _PHRASES[part].get(key)]


_B1 = ("test_attention_backward", "test_attention_backward_causal")
_F2 = ("test_flash_attention_forward", "test_flash_attention_backward")


def _both(cells, words):
    return {cell: words for cell in cells}


VARIANTS = {
    # Part 1: attention_backward
    "bwd_no_D_term": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(d_s="p * d_p")},
        "fails": _both(_B1, "not P * dP"),
        "not_named": _others('no_d', 1),
    },
    "bwd_D_unweighted_row_sum": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(d_s="p * (d_p - d_p.sum(dim=-1, keepdim=True))")},
        "fails": _both(_B1, "not rowsum(dP)"),
        "not_named": _others('d_dp', 1),
    },
    "bwd_D_summed_over_queries": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(d_s="p * (d_p - (d_p * p).sum(dim=-2, keepdim=True))")},
        "fails": _both(_B1, "summed over the queries"),
        "not_named": _others('d_q', 1),
    },
    "bwd_scale_left_out_of_chain": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(d_q="d_s @ k", d_k="d_s.transpose(-2, -1) @ q")},
        "fails": _both(_B1, "the scale is missing"),
        "not_named": _others('no_scale', 1),
    },
    "bwd_scale_as_divisor": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(default_scale="math.sqrt(q.shape[-1])",
                                             scores="(q @ k.transpose(-2, -1)) / scale",
                                             d_q="(d_s @ k) / scale", d_k="(d_s.transpose(-2, -1) @ q) / scale")},
        "fails": _both(_B1, "multiplier"),
        "not_named": _others('divides', 1),
    },
    "bwd_d_k_without_transpose": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(d_k="scale * (d_s @ q)")},
        "fails": _both(_B1, "not dS Q"),
        "not_named": _others('dk', 1),
    },
    "bwd_d_v_without_transpose": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(d_v="p @ d_out")},
        "fails": _both(_B1, "not P dO"),
        "not_named": _others('dv', 1),
    },
    "bwd_d_p_transposed": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(d_p="v @ d_out.transpose(-2, -1)")},
        "fails": _both(_B1, "V dO^T"),
        "not_named": _others('dp', 1),
    },
    "bwd_softmax_over_queries": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(softmax="torch.softmax(s, dim=-2)")},
        "fails": _both(_B1, "softmax runs over"),
        "not_named": _others('softmax', 1),
    },
    "bwd_mask_top_left": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(mask="allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril()")},
        "fails": {"test_attention_backward_causal": "top-left"},
        "not_named": _others('top_left', 1),
    },
    "bwd_mask_square_of_T_q": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(mask="allowed = torch.tril(torch.ones(T_q, T_q, dtype=torch.bool))")},
        "fails": {"test_attention_backward_causal": "(T_q, T_q)"},
        "not_named": _others('square', 1),
    },
    "bwd_mask_blocks_diagonal": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(
            mask="allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q - 1)")},
        "fails": {"test_attention_backward_causal": "diagonal"},
        "not_named": _others('diag', 1),
    },
    "bwd_masked_fill_result_dropped": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(apply_mask="s.masked_fill(~allowed, float(\"-inf\"))")},
        "fails": {"test_attention_backward_causal": "not masked"},
        "not_named": _others('no_mask', 1),
    },
    "bwd_weights_zeroed_after_softmax": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(apply_mask="pass",
                                             softmax="torch.softmax(s, dim=-1) if not causal else "
                                                     "torch.softmax(s, dim=-1).masked_fill(~allowed, 0.0)")},
        "fails": {"test_attention_backward_causal": "after the softmax"},
        "not_named": _others('after', 1),
    },
    "bwd_no_d_out_check": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(check="pass")},
        "fails": {"test_attention_backward": "ValueError"},
        "not_named": _others('valueerror', 1),
    },
    "bwd_through_autograd": {
        "kind": "mistake",
        "cells": {"attention_backward": '''def attention_backward(q, k, v, d_out, scale=None, causal=False):
    if d_out.shape[:-1] != q.shape[:-1] or d_out.shape[-1] != v.shape[-1]:
        raise ValueError(f"d_out has the wrong shape {tuple(d_out.shape)}")
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    with torch.enable_grad():
        T_q, T_k = q.shape[-2], k.shape[-2]
        mask = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q) if causal else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return torch.autograd.grad(out, (q, k, v), d_out)
'''},
        "fails": _both(_B1, "through autograd"),
        "not_named": _others('autograd', 1),
    },
    "bwd_q_scaled_in_place": {
        "kind": "mistake",
        "cells": {"attention_backward": _bwd(scores="(q.mul_(scale) @ k.transpose(-2, -1))", d_q="scale * (d_s @ k)",
                                             d_k="d_s.transpose(-2, -1) @ q")},
        "fails": _both(_B1, "changed its input"),
        "not_named": _others('inplace', 1),
    },

    # Part 2: FlashAttention
    "flash_acc_not_rescaled": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(acc_update="acc + p @ v_j")},
        "fails": _both(_F2, "output kept so far was weighted"),
        "not_named": _others('f_rescale', 2),
    },
    "flash_drops_short_last_key_tile": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(key_tiles="range(0, T_k - block_k + 1, block_k)")},
        "fails": _both(_F2, "last tile may be shorter"),
        "not_named": _others('f_last', 2),
    },
    "flash_saves_m_and_l": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(
            lse="m\n            row_sum[..., i:i + block_q] = l",
            save="ctx.save_for_backward(q, k, v, o, L, row_sum)",
            unpack="q, k, v, o, m, l = ctx.saved_tensors",
            p="torch.exp(s - m[..., i:i + block_q, None]) / l[..., i:i + block_q, None]").replace(
            "        for i in range(0, T_q, block_q):\n            q_i = q[..., i:i + block_q, :].float()\n            m =",
            "        row_sum = torch.empty(b, H, T_q)\n        for i in range(0, T_q, block_q):\n"
            "            q_i = q[..., i:i + block_q, :].float()\n            m =")},
        "fails": {"test_flash_attention_forward": "log-sum-exp"},
        "not_named": _others('f_lse', 2),
    },
    "flash_lse_without_log": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(lse="m + l")},
        "fails": {"test_flash_attention_backward": "L is m + l"},
        "not_named": _others('f_log', 2),
    },
    "flash_mask_top_left": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(shift="0").replace("+ T_k - T_q", "")},
        "fails": _both(_F2, "top-left"),
        "not_named": _others('top_left', 2),
    },
    "flash_backward_forgets_mask": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(bwd_causal="False")},
        "fails": {"test_flash_attention_backward": "tiles were not masked"},
        "not_named": _others('f_unmasked', 2),
    },
    "flash_backward_tile_local_D": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(D_i="(d_p * p).sum(dim=-1, keepdim=True)")},
        "fails": {"test_flash_attention_backward": "within one key tile"},
        "not_named": _others('f_tile_d', 2),
    },
    "flash_backward_no_scale": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(scale_q="", scale_k="")},
        "fails": {"test_flash_attention_backward": "the scale is missing"},
        "not_named": _others('no_scale', 2),
    },
    "flash_backward_overwrites_key_tiles": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(acc_op="=")},
        "fails": {"test_flash_attention_backward": "(+=)"},
        "not_named": _others('f_overwrite', 2),
    },
    "flash_backward_three_gradients": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash(returns="d_q.to(q.dtype), d_k.to(k.dtype), d_v.to(v.dtype)")},
        "fails": {"test_flash_attention_backward": "None for"},
        "not_named": _others('f_count', 2),
    },
    "flash_forward_saves_weights": {
        "kind": "mistake",
        "cells": {"FlashAttention": '''class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        T_q, T_k = q.shape[-2], k.shape[-2]
        s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q).logical_not(), float("-inf"))
        L = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - L[..., None])
        o = p @ v.float()
        ctx.save_for_backward(q, k, v, o, L, p)
        ctx.dtype = q.dtype
        return o.to(q.dtype)

    @staticmethod
    def backward(ctx, d_o):
        q, k, v, o, L, p = ctx.saved_tensors
        q, k, v, d_o = q.float(), k.float(), v.float(), d_o.float()
        scale = 1.0 / math.sqrt(q.shape[-1])
        d_v = p.transpose(-2, -1) @ d_o
        d_p = d_o @ v.transpose(-2, -1)
        d_s = p * (d_p - (d_o * o).sum(-1, keepdim=True))
        d_q, d_k = scale * d_s @ k, scale * d_s.transpose(-2, -1) @ q
        return d_q.to(ctx.dtype), d_k.to(ctx.dtype), d_v.to(ctx.dtype), None, None, None
'''},
        "fails": _both(_F2, "(T, T)"),
        "not_named": _others('f_tt', 2),
    },
    "flash_bfloat16_accumulation": {
        "kind": "mistake",
        "cells": {"FlashAttention": _flash().replace(".float()", "").replace(
            "torch.full(q_i.shape[:-1], float(\"-inf\"))", "torch.full(q_i.shape[:-1], float(\"-inf\"), dtype=q.dtype)")
            .replace("torch.zeros(q_i.shape[:-1])", "torch.zeros(q_i.shape[:-1], dtype=q.dtype)")
            .replace("torch.zeros(q_i.shape[:-1] + (v.shape[-1],))", "torch.zeros(q_i.shape[:-1] + (v.shape[-1],), dtype=q.dtype)")
            .replace("dtype=torch.float32", "dtype=q.dtype")
            .replace("torch.zeros(q.shape)", "torch.zeros_like(q)").replace("torch.zeros(k.shape)", "torch.zeros_like(k)")
            .replace("torch.zeros(v.shape)", "torch.zeros_like(v)")},
        "fails": _both(_F2, "float32"),
        "not_named": _others('f_bf16', 2),
    },

    # Part 3: attention_lse_backward
    "lse_d_lse_ignored": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": _lse("p * (d_p - D)")},
        "fails": {"test_attention_lse_backward": "is an output too"},
        "not_named": _others('l_ignored', 3),
    },
    "lse_d_lse_added_unweighted": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": _lse("p * (d_p - D) + d_lse[..., None]")},
        "fails": {"test_attention_lse_backward": "not d_lse itself"},
        "not_named": _others('l_unweighted', 3),
    },
    "lse_d_lse_sign_flipped": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": _lse("p * (d_p - D - d_lse[..., None])")},
        "fails": {"test_attention_lse_backward": "sign of d_lse"},
        "not_named": _others('l_sign', 3),
    },
    "lse_d_lse_not_unsqueezed": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": _lse("p * (d_p - D + d_lse)")},
        "fails": {"test_attention_lse_backward": "d_lse[..., None]"},
        "not_named": _others('l_flat', 3),
    },
    "lse_exp_scores_not_normalized": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": _lse("p * (d_p - D) + d_lse[..., None] * torch.exp(s)")},
        "fails": {"test_attention_lse_backward": "not exp(S)"},
        "not_named": _others('l_exp', 3),
    },
    "lse_reuses_part1_unscaled_extra": {
        "kind": "mistake",
        "cells": {"attention_lse_backward": '''def attention_lse_backward(q, k, v, d_out, d_lse, scale=None, causal=False):
    d_q, d_k, d_v = attention_backward(q, k, v, d_out, scale, causal)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ k.transpose(-2, -1)
    if causal:
        T_q, T_k = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q) == 0, float("-inf"))
    extra = torch.softmax(s, dim=-1) * d_lse.unsqueeze(-1)
    return d_q + extra @ k, d_k + extra.transpose(-2, -1) @ q, d_v
'''},
        "fails": {"test_attention_lse_backward": "without the scale"},
        "not_named": _others('l_unscaled', 3),
    },

    # Part 4: the Triton kernel (measured as they stand)
    "triton_padded_keys_not_masked": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _triton(keep="offs_k[None, :] >= 0")},
        "fails": {"test_flash_attention_forward_triton": "past"},
        "not_named": ["diagonal", "scale"],
    },
    "triton_causal_blocks_diagonal": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _triton(causal="offs_k[None, :] < offs_q[:, None]")},
        "fails": {"test_flash_attention_forward_triton": "diagonal"},
        "not_named": ["past", "scale"],
    },
    "triton_scale_left_out": {
        "kind": "mistake",
        "cells": {"flash_attention_forward_triton": _triton(scale="1.0")},
        "fails": {"test_flash_attention_forward_triton": "scale"},
        "not_named": ["past", "diagonal"],
    },

    # correct solutions in other styles
    "correct_einsum_parts_1_and_3": {
        "kind": "correct",
        "cells": {"attention_backward": _BWD_EINSUM, "attention_lse_backward": _LSE_EINSUM},
    },
    "correct_paper_style_every_part": {
        "kind": "correct",
        "cells": {"attention_backward": _bwd(), "FlashAttention": _flash(),
                  "attention_lse_backward": _lse("p * (d_p - D + d_lse[..., None])"),
                  "flash_attention_forward_triton": _triton()},
    },
    "correct_kv_outer_flash_and_exp2_triton": {
        "kind": "correct",
        "cells": {"FlashAttention": _FLASH_KV_OUTER, "flash_attention_forward_triton": _TRITON_EXP2},
    },
}
