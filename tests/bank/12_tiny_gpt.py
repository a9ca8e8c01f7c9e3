"""Submission bank for step 12: correct variants written another way, and common mistakes."""
from bank import edit as _edit


# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (they build the attention without
# biases), so only the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
CHEATS_RIDE_ON = "mha_qkv_bias_ignored"

# Boilerplate carried over from earlier steps (step 09's attention with its cache and its API), and the two calls of
# the optimizer's API that every training loop has (the lesson's loop too): none decides a part of this exercise.
SHARED_LINES = [
    "self.dropout = nn.Dropout(dropout)",
    "self.out_proj = nn.Linear(d_out, d_out)",
    "self.context_length = context_length",
    "if use_cache:",
    "model.reset_cache()",
    "optimizer.zero_grad()",
    "optimizer.step()",
]




# The answer key's cells, written out so that mistakes can change one line of them.
_MHA = (
    "class MultiHeadAttentionWithCache(nn.Module):\n"
    "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
    "        super().__init__()\n"
    "        if d_out % num_heads:\n"
    "            raise ValueError(f'd_out={d_out} must be divisible by num_heads={num_heads}')\n"
    "        self.num_heads, self.head_dim = num_heads, d_out // num_heads\n"
    "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
    "        self.out_proj = nn.Linear(d_out, d_out)\n"
    "        self.dropout = nn.Dropout(dropout)\n"
    "        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))\n"
    "        self.k_cache = self.v_cache = None\n"
    "\n"
    "    def reset_cache(self):\n"
    "        self.k_cache = self.v_cache = None\n"
    "\n"
    "    def forward(self, x, use_cache=False):\n"
    "        b, t, _ = x.shape\n"
    "        kept = self.k_cache.shape[2] if use_cache and self.k_cache is not None else 0\n"
    "        if kept + t > self.mask.shape[0]:\n"
    "            raise ValueError(f'{kept + t} tokens do not fit context_length={self.mask.shape[0]}')\n"
    "        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        k = self.W_key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        v = self.W_value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        if use_cache:\n"
    "            if kept:\n"
    "                k, v = torch.cat([self.k_cache, k], dim=2), torch.cat([self.v_cache, v], dim=2)\n"
    "            self.k_cache, self.v_cache = k, v\n"
    "        scores = q @ k.transpose(-2, -1)\n"
    "        scores = scores.masked_fill(self.mask[kept:kept + t, :kept + t], float('-inf'))\n"
    "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
    "        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, -1))\n"
)

_BLOCK = (
    "class TransformerBlock(nn.Module):\n"
    "    def __init__(self, d_model, num_heads, context_length, dropout):\n"
    "        super().__init__()\n"
    "        self.norm1 = nn.LayerNorm(d_model)\n"
    "        self.att = MultiHeadAttentionWithCache(d_model, d_model, context_length, dropout, num_heads)\n"
    "        self.norm2 = nn.LayerNorm(d_model)\n"
    "        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))\n"
    "        self.dropout = nn.Dropout(dropout)\n"
    "\n"
    "    def forward(self, x, use_cache=False):\n"
    "        x = x + self.dropout(self.att(self.norm1(x), use_cache=use_cache))\n"
    "        x = x + self.dropout(self.ff(self.norm2(x)))\n"
    "        return x\n"
)

_GPT = (
    "class TinyGPT(nn.Module):\n"
    "    def __init__(self, vocab_size, d_model, num_layers, num_heads, context_length, dropout):\n"
    "        super().__init__()\n"
    "        self.context_length = context_length\n"
    "        self.tok_emb = nn.Embedding(vocab_size, d_model)\n"
    "        self.pos_emb = nn.Embedding(context_length, d_model)\n"
    "        self.dropout = nn.Dropout(dropout)\n"
    "        self.blocks = nn.ModuleList([TransformerBlock(d_model, num_heads, context_length, dropout)\n"
    "                                     for _ in range(num_layers)])\n"
    "        self.final_norm = nn.LayerNorm(d_model)\n"
    "        self.out_head = nn.Linear(d_model, vocab_size, bias=False)\n"
    "        self.cached = 0\n"
    "\n"
    "    def reset_cache(self):\n"
    "        self.cached = 0\n"
    "        for block in self.blocks:\n"
    "            block.att.reset_cache()\n"
    "\n"
    "    def forward(self, idx, use_cache=False):\n"
    "        t = idx.shape[1]\n"
    "        start = self.cached if use_cache else 0\n"
    "        if start + t > self.context_length:\n"
    "            raise ValueError(f'{t} tokens do not fit context_length={self.context_length}')\n"
    "        x = self.dropout(self.tok_emb(idx) + self.pos_emb(torch.arange(start, start + t)))\n"
    "        for block in self.blocks:\n"
    "            x = block(x, use_cache)\n"
    "        if use_cache:\n"
    "            self.cached += t\n"
    "        return self.out_head(self.final_norm(x))\n"
)

_GENERATE = (
    "def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):\n"
    "    model.reset_cache()\n"
    "    fresh, cached = idx[:, -model.context_length:], 0\n"
    "    for _ in range(max_new_tokens):\n"
    "        if cached + fresh.shape[1] > model.context_length:\n"
    "            model.reset_cache()\n"
    "            fresh, cached = idx[:, -model.context_length:], 0\n"
    "        logits = model(fresh, use_cache=True)[:, -1, :]\n"
    "        cached += fresh.shape[1]\n"
    "        logits = logits / temperature\n"
    "        if top_k is not None:\n"
    "            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]\n"
    "            logits = logits.masked_fill(logits < kth, float('-inf'))\n"
    "        probs = torch.softmax(logits, dim=-1)\n"
    "        fresh = torch.multinomial(probs, 1, generator=generator)\n"
    "        idx = torch.cat([idx, fresh], dim=1)\n"
    "    return idx\n"
)

_TRAIN = (
    "def train_step(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):\n"
    "    b = inputs.shape[0]\n"
    "    if micro_batch_size is not None and micro_batch_size < 1:\n"
    "        raise ValueError(f'micro_batch_size={micro_batch_size} must be at least 1')\n"
    "    size = micro_batch_size or b\n"
    "    optimizer.zero_grad()\n"
    "    loss = 0.0\n"
    "    for start in range(0, b, size):\n"
    "        logits = model(inputs[start:start + size])\n"
    "        part = F.cross_entropy(logits.flatten(0, 1), targets[start:start + size].flatten())\n"
    "        (part * len(logits) / b).backward()\n"
    "        loss = loss + part.detach() * len(logits) / b\n"
    "    if max_grad_norm is not None:\n"
    "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n"
    "    optimizer.step()\n"
    "    return loss.item()\n"
)

# Silences the visible checks (as a cheat of tests/bank/integrity.py does), so that the hidden checks' message shows.
_SILENCE_CHECKS = (
    "import attention_course.checks as _checks\n"
    "for _name in ('fail', 'expect', 'expect_tensor', 'expect_shape', 'expect_close', 'expect_value_error'):\n"
    "    setattr(_checks, _name, lambda *args, **kwargs: None)\n"
    "    globals()[_name] = lambda *args, **kwargs: None\n"
)

VARIANTS = {
    # every part in another style: SDPA with causal_lower_right, parameters created in another order, nn.Sequential of
    # blocks called one by one, positions read from the embedding's weight, sort-based top-k, Gumbel-max sampling that
    # reads nothing after the last token, a reshape-based loss
    "sdpa_sequential_gumbel": {
        "kind": "correct",
        "cells": {
            "multi_head_attention":
                "from torch.nn.attention.bias import causal_lower_right\n"
                "\n"
                "\n"
                "class MultiHeadAttentionWithCache(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads != 0:\n"
                "            raise ValueError('num_heads must divide d_out, got d_out=%d' % d_out)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.h, self.ctx, self.p = num_heads, context_length, dropout\n"
                "        self.reset_cache()\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.keys = self.values = None\n"
                "\n"
                "    def forward(self, x, use_cache=False):\n"
                "        b, t, _ = x.shape\n"
                "        old = self.keys.size(2) if use_cache and self.keys is not None else 0\n"
                "        if old + t > self.ctx:\n"
                "            raise ValueError(f'context_length is {self.ctx}, got {old + t} tokens')\n"
                "        q, k, v = (w(x).reshape(b, t, self.h, -1).permute(0, 2, 1, 3)\n"
                "                   for w in (self.W_query, self.W_key, self.W_value))\n"
                "        if use_cache:\n"
                "            if old:\n"
                "                k, v = torch.cat((self.keys, k), 2), torch.cat((self.values, v), 2)\n"
                "            self.keys, self.values = k, v\n"
                "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(t, old + t),\n"
                "                                             dropout_p=self.p if self.training else 0.0)\n"
                "        return self.out_proj(out.permute(0, 2, 1, 3).reshape(b, t, -1))\n",
            "transformer_block":
                "class TransformerBlock(nn.Module):\n"
                "    def __init__(self, d_model, num_heads, context_length, dropout):\n"
                "        super().__init__()\n"
                "        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate='none'),\n"
                "                                nn.Linear(4 * d_model, d_model))\n"
                "        self.norm2 = nn.LayerNorm(d_model)\n"
                "        self.att = MultiHeadAttentionWithCache(d_model, d_model, context_length, dropout, num_heads)\n"
                "        self.norm1 = nn.LayerNorm(d_model)\n"
                "        self.dropout = nn.Dropout(dropout)\n"
                "\n"
                "    def forward(self, x, use_cache=False):\n"
                "        attended = x + self.dropout(self.att(self.norm1(x), use_cache))\n"
                "        return attended + self.dropout(self.ff(self.norm2(attended)))\n",
            "tiny_gpt":
                "class TinyGPT(nn.Module):\n"
                "    def __init__(self, vocab_size, d_model, num_layers, num_heads, context_length, dropout):\n"
                "        super().__init__()\n"
                "        self.out_head = nn.Linear(d_model, vocab_size, bias=False)\n"
                "        self.final_norm = nn.LayerNorm(d_model)\n"
                "        self.blocks = nn.Sequential(*[TransformerBlock(d_model, num_heads, context_length, dropout)\n"
                "                                      for _ in range(num_layers)])\n"
                "        self.pos_emb = nn.Embedding(context_length, d_model)\n"
                "        self.tok_emb = nn.Embedding(vocab_size, d_model)\n"
                "        self.dropout = nn.Dropout(dropout)\n"
                "        self.context_length, self.seen = context_length, 0\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.seen = 0\n"
                "        for block in self.blocks:\n"
                "            block.att.reset_cache()\n"
                "\n"
                "    def forward(self, idx, use_cache=False):\n"
                "        offset = self.seen if use_cache else 0\n"
                "        if offset + idx.size(1) > self.context_length:\n"
                "            raise ValueError('more tokens than context_length')\n"
                "        h = self.dropout(self.tok_emb(idx) + self.pos_emb.weight[offset:offset + idx.size(1)])\n"
                "        for block in self.blocks:\n"
                "            h = block(h, use_cache=use_cache)\n"
                "        self.seen = offset + idx.size(1) if use_cache else self.seen\n"
                "        return self.out_head(self.final_norm(h))\n",
            "generate":
                "def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):\n"
                "    out = idx\n"
                "    model.reset_cache()\n"
                "    logits = model(out[:, -model.context_length:], use_cache=True)[:, -1]\n"
                "    n_cached = min(out.shape[1], model.context_length)\n"
                "    for i in range(max_new_tokens):\n"
                "        if top_k is not None:\n"
                "            values, order = torch.sort(logits, dim=-1, descending=True)\n"
                "            logits = torch.full_like(logits, -float('inf')).scatter(-1, order[:, :top_k],\n"
                "                                                                      values[:, :top_k])\n"
                "        u = torch.rand(logits.shape, generator=generator).clamp_min(1e-12)\n"
                "        gumbel = -torch.log(-torch.log(u))\n"
                "        nxt = (logits / temperature + gumbel).argmax(dim=-1, keepdim=True)\n"
                "        out = torch.cat((out, nxt), dim=1)\n"
                "        if i == max_new_tokens - 1:\n"
                "            break\n"
                "        if n_cached == model.context_length:\n"
                "            model.reset_cache()\n"
                "            logits = model(out[:, -model.context_length:], use_cache=True)[:, -1]\n"
                "        else:\n"
                "            logits = model(nxt, use_cache=True)[:, -1]\n"
                "            n_cached += 1\n"
                "    return out\n",
            "train_step":
                "def train_step(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):\n"
                "    if micro_batch_size is not None and micro_batch_size <= 0:\n"
                "        raise ValueError('micro_batch_size must be positive')\n"
                "    optimizer.zero_grad(set_to_none=True)\n"
                "    loss = torch.zeros(())\n"
                "    for x, y in zip(inputs.split(micro_batch_size or len(inputs)), targets.split(micro_batch_size or len(inputs))):\n"
                "        logits = model(x)\n"
                "        summed = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction='sum')\n"
                "        (summed / targets.numel()).backward()\n"
                "        loss += summed.detach() / targets.numel()\n"
                "    if max_grad_norm is not None:\n"
                "        grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
                "        norm = torch.sqrt(sum((g * g).sum() for g in grads))\n"
                "        for g in grads:\n"
                "            g.mul_(torch.clamp(max_grad_norm / (norm + 1e-6), max=1.0))\n"
                "    optimizer.step()\n"
                "    return float(loss.detach())\n",
        },
    },
    # einsum attention with an additive mask and a list as cache, a hand-written softmax over the top k, a window
    # cropped by hand, a loss written out
    "einsum_manual_sampling": {
        "kind": "correct",
        "cells": {
            "multi_head_attention":
                "class MultiHeadAttentionWithCache(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads:\n"
                "            raise ValueError(f'{d_out=} is not a multiple of {num_heads=}')\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.drop = nn.Dropout(dropout)\n"
                "        self.heads, self.context_length = num_heads, context_length\n"
                "        self.cache = []\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.cache = []\n"
                "\n"
                "    def forward(self, x, use_cache=False):\n"
                "        b, t, _ = x.shape\n"
                "        kept = self.cache[0].shape[1] if use_cache and self.cache else 0\n"
                "        if kept + t > self.context_length:\n"
                "            raise ValueError(f'{kept + t} tokens > context_length')\n"
                "        q = self.W_query(x).unflatten(-1, (self.heads, -1))\n"
                "        k = self.W_key(x).unflatten(-1, (self.heads, -1))\n"
                "        v = self.W_value(x).unflatten(-1, (self.heads, -1))\n"
                "        if use_cache:\n"
                "            if self.cache:\n"
                "                k, v = torch.cat([self.cache[0], k], 1), torch.cat([self.cache[1], v], 1)\n"
                "            self.cache = [k, v]\n"
                "        s = torch.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(q.shape[-1])\n"
                "        s = s + torch.full((t, kept + t), -1e9).triu(kept + 1)\n"
                "        w = self.drop(F.softmax(s, dim=-1))\n"
                "        return self.out_proj(torch.einsum('bhqk,bkhd->bqhd', w, v).flatten(2))\n",
            "generate":
                "def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):\n"
                "    model.reset_cache()\n"
                "    window = idx if idx.shape[1] <= model.context_length else idx[:, idx.shape[1] - model.context_length:]\n"
                "    scaled = model(window, use_cache=True)[:, -1] / temperature\n"
                "    used = window.shape[1]\n"
                "    for step in range(max_new_tokens):\n"
                "        if top_k:\n"
                "            top = torch.topk(scaled, min(top_k, scaled.shape[-1]), dim=-1)\n"
                "            p = torch.exp(top.values - top.values.max(-1, keepdim=True).values)\n"
                "            p = p / p.sum(-1, keepdim=True)\n"
                "            choice = top.indices.gather(-1, torch.multinomial(p, 1, generator=generator))\n"
                "        else:\n"
                "            choice = torch.multinomial(F.softmax(scaled, -1), 1, generator=generator)\n"
                "        idx = torch.cat([idx, choice], 1)\n"
                "        if step == max_new_tokens - 1:\n"
                "            break\n"
                "        if used < model.context_length:\n"
                "            scaled = model(choice, use_cache=True)[:, -1] / temperature\n"
                "            used += 1\n"
                "        else:\n"
                "            model.reset_cache()\n"
                "            scaled = model(idx[:, -model.context_length:], use_cache=True)[:, -1] / temperature\n"
                "    return idx\n",
            "train_step":
                "def train_step(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):\n"
                "    if micro_batch_size is not None and micro_batch_size < 1:\n"
                "        raise ValueError(f'micro_batch_size is {micro_batch_size}')\n"
                "    n = 1 if micro_batch_size is None else -(-len(inputs) // micro_batch_size)\n"
                "    for p in model.parameters():\n"
                "        p.grad = None\n"
                "    losses = []\n"
                "    for x, y in zip(inputs.chunk(n), targets.chunk(n)):\n"
                "        log_probs = torch.log_softmax(model(x), dim=-1)\n"
                "        nll = -log_probs.gather(-1, y.unsqueeze(-1)).mean() * (len(x) / len(inputs))\n"
                "        nll.backward()\n"
                "        losses.append(nll.item())\n"
                "    if max_grad_norm:\n"
                "        nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_grad_norm)\n"
                "    optimizer.step()\n"
                "    return sum(losses)\n",
        },
    },
    # SDPA with an explicit bool mask and the cache as one tuple, positions as an offset added to arange, top-k by a
    # threshold from kthvalue with torch.where, the window cropped by its start index, clipping by clip_grad_norm_ with a keyword
    "explicit_mask_where_topk": {
        "kind": "correct",
        "cells": {
            "multi_head_attention":
                "class MultiHeadAttentionWithCache(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads:\n"
                "            raise ValueError(f'd_out ({d_out}) is not divisible by num_heads ({num_heads})')\n"
                "        self.W_query, self.W_key, self.W_value = [nn.Linear(d_in, d_out, bias=qkv_bias) for _ in '123']\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.heads, self.limit, self.drop = num_heads, context_length, dropout\n"
                "        self.cache = None\n"
                "\n"
                "    def reset_cache(self):\n"
                "        self.cache = None\n"
                "\n"
                "    def forward(self, x, use_cache=False):\n"
                "        b, t, _ = x.shape\n"
                "        past = self.cache[0].shape[-2] if use_cache and self.cache is not None else 0\n"
                "        if past + t > self.limit:\n"
                "            raise ValueError(f'{past + t} tokens exceed context_length {self.limit}')\n"
                "        q, k, v = [layer(x).view(b, t, self.heads, -1).transpose(1, 2)\n"
                "                   for layer in (self.W_query, self.W_key, self.W_value)]\n"
                "        if use_cache:\n"
                "            if self.cache is not None:\n"
                "                k, v = torch.cat([self.cache[0], k], -2), torch.cat([self.cache[1], v], -2)\n"
                "            self.cache = (k, v)\n"
                "        allowed = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(past)\n"
                "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,\n"
                "                                             dropout_p=self.drop if self.training else 0.0)\n"
                "        return self.out_proj(out.transpose(1, 2).flatten(2))\n",
            "tiny_gpt": _edit(_GPT, ("self.pos_emb(torch.arange(start, start + t))", "self.pos_emb(torch.arange(t) + start)")),
            "generate":
                "def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):\n"
                "    model.reset_cache()\n"
                "    n = model.context_length\n"
                "    pending, held = idx[:, max(0, idx.shape[1] - n):], 0\n"
                "    for _ in range(max_new_tokens):\n"
                "        if held + pending.shape[1] > n:\n"
                "            model.reset_cache()\n"
                "            pending, held = idx[:, idx.shape[1] - n:], 0\n"
                "        logits = model(pending, use_cache=True)[:, -1, :] / temperature\n"
                "        held += pending.shape[1]\n"
                "        if top_k is not None:\n"
                "            drop = max(logits.shape[-1] - top_k, 0)  # how many logits fall below the top k\n"
                "            threshold = logits.kthvalue(drop + 1, dim=-1, keepdim=True).values\n"
                "            logits = torch.where(logits >= threshold, logits, torch.full_like(logits, float('-inf')))\n"
                "        pending = torch.multinomial(logits.softmax(dim=-1), num_samples=1, generator=generator)\n"
                "        idx = torch.cat((idx, pending), dim=-1)\n"
                "    return idx\n",
            "train_step": _edit(_TRAIN, ("torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)",
                                         "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_grad_norm, "
                                         "norm_type=2.0)")),
        },
    },
    "mha_no_mask": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _edit(_MHA, ("        scores = scores.masked_fill(self.mask[kept:kept + t, :kept + t], float('-inf'))\n", ""))},
        "fails": {"test_multi_head_attention": "sees the future", "test_tiny_gpt_cache": "full pass sees the future"},
    },
    "mha_mask_not_kept": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _SILENCE_CHECKS + _edit(_MHA, (
            "        scores = scores.masked_fill(", "        scores.masked_fill("))},
        "fails": {"test_multi_head_attention": "sees the future", "test_tiny_gpt_cache": "full pass sees the future"},
    },
    "mha_qkv_bias_ignored": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _edit(_MHA, *((f"self.{n} = nn.Linear(d_in, d_out, bias=qkv_bias)",
                                                          f"self.{n} = nn.Linear(d_in, d_out, bias=False)")
                                                         for n in ("W_query", "W_key", "W_value")))},
        "fails": {"test_multi_head_attention": "the parameters differ from the contract"},
    },
    "block_post_ln": {
        "kind": "mistake",
        "cells": {"transformer_block": _SILENCE_CHECKS + _edit(_BLOCK, (
            "        x = x + self.dropout(self.att(self.norm1(x), use_cache=use_cache))\n"
            "        x = x + self.dropout(self.ff(self.norm2(x)))\n",
            "        x = self.norm1(x + self.dropout(self.att(x, use_cache=use_cache)))\n"
            "        x = self.norm2(x + self.dropout(self.ff(x)))\n"))},
        "fails": {"test_transformer_block": "post-LayerNorm"},
    },
    "block_residual_of_normed_input": {
        "kind": "mistake",
        "cells": {"transformer_block": _SILENCE_CHECKS + _edit(_BLOCK, (
            "        x = x + self.dropout(self.att(self.norm1(x), use_cache=use_cache))\n",
            "        x = self.norm1(x)\n        x = x + self.dropout(self.att(x, use_cache=use_cache))\n"),
            ("        x = x + self.dropout(self.ff(self.norm2(x)))\n",
             "        x = self.norm2(x)\n        x = x + self.dropout(self.ff(x))\n"))},
        "fails": {"test_transformer_block": "normalised input"},
    },
    "block_no_residual_around_mlp": {
        "kind": "mistake",
        "cells": {"transformer_block": _SILENCE_CHECKS + _edit(_BLOCK, (
            "        x = x + self.dropout(self.ff(self.norm2(x)))\n", "        x = self.dropout(self.ff(self.norm2(x)))\n"))},
        "fails": {"test_transformer_block": "residual connection is missing"},
    },
    "block_tanh_gelu": {
        "kind": "mistake",
        "cells": {"transformer_block": _SILENCE_CHECKS + _edit(_BLOCK, ("nn.GELU()", "nn.GELU(approximate='tanh')"))},
        "fails": {"test_transformer_block": "wrong values"},
    },
    "gpt_python_list_of_blocks": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _SILENCE_CHECKS + _edit(_GPT, ("nn.ModuleList([", "list(["))},
        "fails": {"test_tiny_gpt": "missing", "test_tiny_gpt_cache": "its parameters"},
    },
    "gpt_no_positions": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _SILENCE_CHECKS + _edit(_GPT, (" + self.pos_emb(torch.arange(start, start + t))", ""))},
        "fails": {"test_tiny_gpt": "pos_emb(positions"},
    },
    "gpt_tied_head": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("        self.cached = 0\n",
                                           "        self.out_head.weight = self.tok_emb.weight\n        self.cached = 0\n"))},
        "fails": {"test_tiny_gpt": "GPT-2 ties them", "test_tiny_gpt_cache": "(tied weights)"},
    },
    "gpt_no_final_norm": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _SILENCE_CHECKS + _edit(_GPT, ("self.out_head(self.final_norm(x))", "self.out_head(x)"))},
        "fails": {"test_tiny_gpt": "final_norm"},
    },
    "gpt_no_context_check": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("        if start + t > self.context_length:\n"
                                           "            raise ValueError(f'{t} tokens do not fit context_length={self.context_length}')\n", ""))},
        "fails": {"test_tiny_gpt": "context_length", "test_tiny_gpt_cache": "context_length"},
    },
    "generate_ignores_temperature": {
        "kind": "mistake",
        "cells": {"generate": _edit(_GENERATE, ("        logits = logits / temperature\n", ""))},
        "fails": {"test_generate": "temperature is ignored"},
    },
    "generate_multiplies_by_temperature": {
        "kind": "mistake",
        "cells": {"generate": _SILENCE_CHECKS + _edit(_GENERATE, ("logits / temperature", "logits * temperature"))},
        "fails": {"test_generate": "multiplied"},
    },
    "generate_ignores_top_k": {
        "kind": "mistake",
        "cells": {"generate": _SILENCE_CHECKS + _edit(_GENERATE, ("        if top_k is not None:\n", "        if False:\n"))},
        "fails": {"test_generate": "top_k"},
    },
    # the answer key before top_k above the vocabulary was promised: torch.topk refuses a k above the row's size
    "generate_top_k_above_vocabulary_raises": {
        "kind": "mistake",
        "cells": {"generate": _edit(_GENERATE, ("torch.topk(logits, min(top_k, logits.size(-1)))", "torch.topk(logits, top_k)"))},
        "fails": {"test_generate": "as large as the vocabulary or larger"},
    },
    "generate_first_position": {
        "kind": "mistake",
        "cells": {"generate": _SILENCE_CHECKS + _edit(_GENERATE, ("[:, -1, :]", "[:, 0, :]"))},
        "fails": {"test_generate": "last position"},
    },
    "generate_no_crop": {
        "kind": "mistake",
        "cells": {"generate": _SILENCE_CHECKS + _edit(_GENERATE, ("idx[:, -model.context_length:]", "idx"))},
        "fails": {"test_generate": "context_length"},
    },
    "mha_cache_top_left": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _SILENCE_CHECKS + _edit(_MHA, ("self.mask[kept:kept + t, :kept + t]",
                                                                          "self.mask[:t, :kept + t]"))},
        "fails": {"test_multi_head_attention": "bottom-right", "test_tiny_gpt_cache": "use_cache=True"},
    },
    "gpt_positions_not_offset": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _SILENCE_CHECKS + _edit(_GPT, ("torch.arange(start, start + t)", "torch.arange(t)"))},
        "fails": {"test_tiny_gpt_cache": "positions after the cached ones"},
    },
    "generate_without_cache": {
        "kind": "mistake",
        "cells": {"generate": _SILENCE_CHECKS + _edit(_GENERATE, ("logits = model(fresh, use_cache=True)[:, -1, :]",
                                                                  "logits = model(idx[:, -model.context_length:])"
                                                                  "[:, -1, :]"))},
        "fails": {"test_generate": "through the cache"},
    },
    "train_step_no_zero_grad": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("    optimizer.zero_grad()\n", ""))},
        "fails": {"test_train_step": "zero_grad", "test_train_step_accumulation": "not cleared",
                  "test_train_step_accumulation_clipped": "not cleared"},
    },
    "train_step_summed_loss": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("targets[start:start + size].flatten())",
                                                                 "targets[start:start + size].flatten(), reduction='sum')"))},
        "fails": {"test_train_step": "mean over all", "test_train_step_accumulation": "wrong value",
                  "test_train_step_accumulation_clipped": "wrong value"},
    },
    "train_step_clips_after_the_step": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(
            _TRAIN, ("    if max_grad_norm is not None:\n        torch.nn.utils.clip_grad_norm_(model.parameters(), "
                     "max_grad_norm)\n    optimizer.step()\n", "    optimizer.step()\n    if max_grad_norm is not None:\n"
                     "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n"))},
        "fails": {"test_train_step": "not clipped", "test_train_step_accumulation_clipped": "not clipped"},
    },
    "train_step_returns_tensor": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("return loss.item()", "return loss"))},
        "fails": {"test_train_step": "should be a number", "test_train_step_accumulation": "should be a number",
                  "test_train_step_accumulation_clipped": "should be a number"},
    },
    "accumulation_unweighted": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("(part * len(logits) / b).backward()", "part.backward()"))},
        "fails": {"test_train_step_accumulation": "must add up", "test_train_step_accumulation_clipped": "clip"},
    },
    "accumulation_unweighted_unseen": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("(part * len(logits) / b).backward()", "part.backward()"))},
        "fails": {"test_train_step_accumulation": "unweighted", "test_train_step_accumulation_clipped": "unweighted"},
    },
    "accumulation_equal_weights_unseen": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(
            _TRAIN, ("(part * len(logits) / b).backward()", "(part / -(-b // size)).backward()"),
            ("loss = loss + part.detach() * len(logits) / b", "loss = loss + part.detach() / -(-b // size)"))},
        "fails": {"test_train_step_accumulation": "1 / (number of slices)",
                  "test_train_step_accumulation_clipped": "1 / (number of slices)"},
    },
    "accumulation_zero_grad_per_slice_unseen": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(
            _TRAIN, ("    optimizer.zero_grad()\n", ""),
            ("        logits = model(inputs[start:start + size])\n",
             "        optimizer.zero_grad()\n        logits = model(inputs[start:start + size])\n"))},
        "fails": {"test_train_step_accumulation": "only the last slice", "test_train_step_accumulation_clipped":
                  "only the last slice"},
    },
    "accumulation_step_per_slice_unseen": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(
            _TRAIN, ("        loss = loss + part.detach() * len(logits) / b\n",
                     "        loss = loss + part.detach() * len(logits) / b\n        optimizer.step()\n"
                     "        optimizer.zero_grad()\n"),
            ("    optimizer.step()\n    return", "    return"))},
        "fails": {"test_train_step": "clip", "test_train_step_accumulation": "stepped after every slice",
                  "test_train_step_accumulation_clipped": "stepped after every slice"},
    },
    "accumulation_clip_per_slice_unseen": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(
            _TRAIN, ("    if max_grad_norm is not None:\n        torch.nn.utils.clip_grad_norm_(model.parameters(), "
                     "max_grad_norm)\n    optimizer.step()\n", "    optimizer.step()\n"),
            ("        loss = loss + part.detach() * len(logits) / b\n",
             "        loss = loss + part.detach() * len(logits) / b\n        if max_grad_norm is not None:\n"
             "            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n"))},
        "fails": {"test_train_step_accumulation_clipped": "clipped on their own"},
    },
    "accumulation_returns_last_slice_unseen": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("    return loss.item()\n", "    return part.item()\n"))},
        "fails": {"test_train_step_accumulation": "one slice's", "test_train_step_accumulation_clipped": "one slice's"},
    },
    "accumulation_ignores_micro_batch_size": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("    size = micro_batch_size or b\n", "    size = b\n"))},
        "fails": {"test_train_step_accumulation": "the model read batches",
                  "test_train_step_accumulation_clipped": "ran the model on batches"},
    },
    # the shortcut: the slices' losses summed, one backward at the end (right values, no memory saved)
    "accumulation_one_backward_over_the_sum": {
        "kind": "mistake",
        "cells": {"train_step": _edit(
            _TRAIN, ("        (part * len(logits) / b).backward()\n        loss = loss + part.detach() * len(logits) / b\n",
                     "        loss = loss + part * len(logits) / b\n"),
            ("    if max_grad_norm is not None:\n", "    loss.backward()\n    if max_grad_norm is not None:\n"))},
        "fails": {"test_train_step_accumulation": "graph stays alive",
                  "test_train_step_accumulation_clipped": "graph stays alive"},
    },
    "accumulation_no_value_error": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("    if micro_batch_size is not None and micro_batch_size < 1:\n"
                                               "        raise ValueError(f'micro_batch_size={micro_batch_size} must be "
                                               "at least 1')\n", ""))},
        "fails": {"test_train_step_accumulation": "did not raise"},
    },
}

# One backward over the summed slice losses, run in a thread where the memory meter does not see it
VARIANTS["accumulation_one_backward_in_a_thread"] = {
    "kind": "cheat",
    "cells": {"train_step": VARIANTS["accumulation_one_backward_over_the_sum"]["cells"]["train_step"].replace(
        "def train_step(", "def _train_step(") + (
        "\n\nimport threading\n\n"
        "def train_step(*args, **kwargs):\n"
        "    box = {}\n"
        "    def work():\n"
        "        try:\n"
        "            box['loss'] = _train_step(*args, **kwargs)\n"
        "        except Exception as error:\n"
        "            box['error'] = error\n"
        "    worker = threading.Thread(target=work)\n"
        "    worker.start()\n"
        "    worker.join()\n"
        "    if 'error' in box:\n"
        "        raise box['error']\n"
        "    return box['loss']\n")},
    "fails": {"test_train_step_accumulation": "started a thread", "test_train_step_accumulation_clipped": "started a thread"},
}

# For each transfer part: the lesson's code adapted mechanically and the shortcut (both fail it), and two correct
# solutions in other styles (full points).
PROOF = {cell: {"lesson": ["accumulation_ignores_micro_batch_size"],
                "shortcut": ["accumulation_one_backward_over_the_sum"],
                "correct": ["sdpa_sequential_gumbel", "einsum_manual_sampling"]}
         for cell in ("test_train_step_accumulation", "test_train_step_accumulation_clipped")}
