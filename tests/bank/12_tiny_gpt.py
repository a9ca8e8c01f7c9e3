"""Submission bank for step 12: correct variants written another way, and common mistakes."""
from bank import edit as _edit


# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass (they build the attention without
# biases), so only the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
CHEATS_RIDE_ON = "mha_qkv_bias_ignored"




# The answer key's cells, written out so that mistakes can change one line of them.
_MHA = (
    "class MultiHeadAttention(nn.Module):\n"
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
    "\n"
    "    def forward(self, x):\n"
    "        b, t, _ = x.shape\n"
    "        if t > self.mask.shape[0]:\n"
    "            raise ValueError(f'{t} tokens do not fit context_length={self.mask.shape[0]}')\n"
    "        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        k = self.W_key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        v = self.W_value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)\n"
    "        scores = q @ k.transpose(-2, -1)\n"
    "        scores = scores.masked_fill(self.mask[:t, :t], float('-inf'))\n"
    "        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))\n"
    "        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, t, -1))\n"
)

_BLOCK = (
    "class TransformerBlock(nn.Module):\n"
    "    def __init__(self, d_model, num_heads, context_length, dropout):\n"
    "        super().__init__()\n"
    "        self.norm1 = nn.LayerNorm(d_model)\n"
    "        self.att = MultiHeadAttention(d_model, d_model, context_length, dropout, num_heads)\n"
    "        self.norm2 = nn.LayerNorm(d_model)\n"
    "        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))\n"
    "        self.dropout = nn.Dropout(dropout)\n"
    "\n"
    "    def forward(self, x):\n"
    "        x = x + self.dropout(self.att(self.norm1(x)))\n"
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
    "\n"
    "    def forward(self, idx):\n"
    "        t = idx.shape[1]\n"
    "        if t > self.context_length:\n"
    "            raise ValueError(f'{t} tokens do not fit context_length={self.context_length}')\n"
    "        x = self.dropout(self.tok_emb(idx) + self.pos_emb(torch.arange(t)))\n"
    "        for block in self.blocks:\n"
    "            x = block(x)\n"
    "        return self.out_head(self.final_norm(x))\n"
)

_GENERATE = (
    "def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):\n"
    "    for _ in range(max_new_tokens):\n"
    "        logits = model(idx[:, -model.context_length:])[:, -1, :]\n"
    "        logits = logits / temperature\n"
    "        if top_k is not None:\n"
    "            kth = torch.topk(logits, top_k).values[:, -1:]\n"
    "            logits = logits.masked_fill(logits < kth, float('-inf'))\n"
    "        probs = torch.softmax(logits, dim=-1)\n"
    "        idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)\n"
    "    return idx\n"
)

_TRAIN = (
    "def train_step(model, optimizer, inputs, targets):\n"
    "    logits = model(inputs)\n"
    "    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())\n"
    "    optimizer.zero_grad()\n"
    "    loss.backward()\n"
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
    # every part in another style: SDPA, parameters created in another order, nn.Sequential of blocks, positions read
    # from the embedding's weight, sort-based top-k, Gumbel-max sampling, a reshape-based loss
    "sdpa_sequential_gumbel": {
        "kind": "correct",
        "cells": {
            "multi_head_attention":
                "class MultiHeadAttention(nn.Module):\n"
                "    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):\n"
                "        super().__init__()\n"
                "        if d_out % num_heads != 0:\n"
                "            raise ValueError('num_heads must divide d_out, got d_out=%d' % d_out)\n"
                "        self.out_proj = nn.Linear(d_out, d_out)\n"
                "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
                "        self.h, self.ctx, self.p = num_heads, context_length, dropout\n"
                "\n"
                "    def forward(self, x):\n"
                "        b, t, _ = x.shape\n"
                "        if t > self.ctx:\n"
                "            raise ValueError(f'context_length is {self.ctx}, got {t} tokens')\n"
                "        q, k, v = (w(x).reshape(b, t, self.h, -1).permute(0, 2, 1, 3)\n"
                "                   for w in (self.W_query, self.W_key, self.W_value))\n"
                "        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,\n"
                "                                             dropout_p=self.p if self.training else 0.0)\n"
                "        return self.out_proj(out.permute(0, 2, 1, 3).reshape(b, t, -1))\n",
            "transformer_block":
                "class TransformerBlock(nn.Module):\n"
                "    def __init__(self, d_model, num_heads, context_length, dropout):\n"
                "        super().__init__()\n"
                "        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate='none'),\n"
                "                                nn.Linear(4 * d_model, d_model))\n"
                "        self.norm2 = nn.LayerNorm(d_model)\n"
                "        self.att = MultiHeadAttention(d_model, d_model, context_length, dropout, num_heads)\n"
                "        self.norm1 = nn.LayerNorm(d_model)\n"
                "        self.dropout = nn.Dropout(dropout)\n"
                "\n"
                "    def forward(self, x):\n"
                "        attended = x + self.dropout(self.att(self.norm1(x)))\n"
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
                "        self.context_length = context_length\n"
                "\n"
                "    def forward(self, idx):\n"
                "        if idx.size(1) > self.context_length:\n"
                "            raise ValueError('more tokens than context_length')\n"
                "        h = self.tok_emb(idx) + self.pos_emb.weight[: idx.size(1)]\n"
                "        return self.out_head(self.final_norm(self.blocks(self.dropout(h))))\n",
            "generate":
                "def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):\n"
                "    out = idx\n"
                "    for _ in range(max_new_tokens):\n"
                "        logits = model(out[:, -model.context_length:])[:, -1]\n"
                "        if top_k is not None:\n"
                "            values, order = torch.sort(logits, dim=-1, descending=True)\n"
                "            logits = torch.full_like(logits, -float('inf')).scatter(-1, order[:, :top_k],\n"
                "                                                                      values[:, :top_k])\n"
                "        u = torch.rand(logits.shape, generator=generator).clamp_min(1e-12)\n"
                "        gumbel = -torch.log(-torch.log(u))\n"
                "        nxt = (logits / temperature + gumbel).argmax(dim=-1, keepdim=True)\n"
                "        out = torch.cat((out, nxt), dim=1)\n"
                "    return out\n",
            "train_step":
                "def train_step(model, optimizer, inputs, targets):\n"
                "    optimizer.zero_grad(set_to_none=True)\n"
                "    logits = model(inputs)\n"
                "    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))\n"
                "    loss.backward()\n"
                "    optimizer.step()\n"
                "    return float(loss.detach())\n",
        },
    },
    # einsum attention with an additive mask, a hand-written softmax over the top k, a loss written out
    "einsum_manual_sampling": {
        "kind": "correct",
        "cells": {
            "multi_head_attention":
                "class MultiHeadAttention(nn.Module):\n"
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
                "\n"
                "    def forward(self, x):\n"
                "        b, t, _ = x.shape\n"
                "        if t > self.context_length:\n"
                "            raise ValueError(f'{t} tokens > context_length')\n"
                "        q = self.W_query(x).unflatten(-1, (self.heads, -1))\n"
                "        k = self.W_key(x).unflatten(-1, (self.heads, -1))\n"
                "        v = self.W_value(x).unflatten(-1, (self.heads, -1))\n"
                "        s = torch.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(q.shape[-1])\n"
                "        s = s + torch.full((t, t), -1e9).triu(1)\n"
                "        w = self.drop(F.softmax(s, dim=-1))\n"
                "        return self.out_proj(torch.einsum('bhqk,bkhd->bqhd', w, v).flatten(2))\n",
            "generate":
                "def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):\n"
                "    for step in range(max_new_tokens):\n"
                "        context = idx if idx.shape[1] <= model.context_length else idx[:, idx.shape[1] - model.context_length:]\n"
                "        scaled = model(context)[:, -1] / temperature\n"
                "        if top_k:\n"
                "            top = torch.topk(scaled, top_k, dim=-1)\n"
                "            p = torch.exp(top.values - top.values.max(-1, keepdim=True).values)\n"
                "            p = p / p.sum(-1, keepdim=True)\n"
                "            choice = top.indices.gather(-1, torch.multinomial(p, 1, generator=generator))\n"
                "        else:\n"
                "            choice = torch.multinomial(F.softmax(scaled, -1), 1, generator=generator)\n"
                "        idx = torch.cat([idx, choice], 1)\n"
                "    return idx\n",
            "train_step":
                "def train_step(model, optimizer, inputs, targets):\n"
                "    log_probs = torch.log_softmax(model(inputs), dim=-1)\n"
                "    loss = -log_probs.gather(-1, targets.unsqueeze(-1)).mean()\n"
                "    for p in model.parameters():\n"
                "        p.grad = None\n"
                "    loss.backward()\n"
                "    optimizer.step()\n"
                "    return loss.item()\n",
        },
    },
    "mha_no_mask": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _edit(_MHA, ("        scores = scores.masked_fill(self.mask[:t, :t], float('-inf'))\n", ""))},
        "fails": {"test_multi_head_attention": "sees the future"},
    },
    "mha_mask_not_kept": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _SILENCE_CHECKS + _edit(_MHA, (
            "        scores = scores.masked_fill(", "        scores.masked_fill("))},
        "fails": {"test_multi_head_attention": "sees the future"},
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
            "        x = x + self.dropout(self.att(self.norm1(x)))\n"
            "        x = x + self.dropout(self.ff(self.norm2(x)))\n",
            "        x = self.norm1(x + self.dropout(self.att(x)))\n"
            "        x = self.norm2(x + self.dropout(self.ff(x)))\n"))},
        "fails": {"test_transformer_block": "post-LayerNorm"},
    },
    "block_residual_of_normed_input": {
        "kind": "mistake",
        "cells": {"transformer_block": _SILENCE_CHECKS + _edit(_BLOCK, (
            "        x = x + self.dropout(self.att(self.norm1(x)))\n",
            "        x = self.norm1(x)\n        x = x + self.dropout(self.att(x))\n"),
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
        "fails": {"test_tiny_gpt": "missing"},
    },
    "gpt_no_positions": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _SILENCE_CHECKS + _edit(_GPT, (" + self.pos_emb(torch.arange(t))", ""))},
        "fails": {"test_tiny_gpt": "pos_emb(positions"},
    },
    "gpt_no_final_norm": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _SILENCE_CHECKS + _edit(_GPT, ("self.out_head(self.final_norm(x))", "self.out_head(x)"))},
        "fails": {"test_tiny_gpt": "final_norm"},
    },
    "gpt_no_context_check": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("        if t > self.context_length:\n"
                                           "            raise ValueError(f'{t} tokens do not fit context_length={self.context_length}')\n", ""))},
        "fails": {"test_tiny_gpt": "context_length"},
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
    "train_step_no_zero_grad": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("    optimizer.zero_grad()\n", ""))},
        "fails": {"test_train_step": "zero_grad"},
    },
    "train_step_summed_loss": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("targets.flatten())", "targets.flatten(), reduction='sum')"))},
        "fails": {"test_train_step": "mean over all"},
    },
    "train_step_returns_tensor": {
        "kind": "mistake",
        "cells": {"train_step": _SILENCE_CHECKS + _edit(_TRAIN, ("return loss.item()", "return loss"))},
        "fails": {"test_train_step": "should be a number"},
    },
}
