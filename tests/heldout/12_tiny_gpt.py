"""Held-out mistakes for step 12, written from the released exercise only (issue 46).

Styles: Raschka's LLMs-from-scratch ch. 4 and its KV-cache bonus (MultiHeadAttention with cache_k/cache_v and
ptr_current_pos, TransformerBlock with drop_shortcut, GPTModel with trf_blocks, generate_text_simple), nanoGPT
(Block with ln_1/ln_2 pre-norm, GPT.generate with v[:, [-1]] and top-k, the training loop with gradient accumulation
and clip_grad_norm_), Karpathy's makemore-style loops, plain PyTorch training steps. `fails` words name the actual
mistake; "correct" variants must get full marks.
"""


def _edit(source, *pairs):
    """`source` with each (old, new) replaced; each old must occur exactly once."""
    for old, new in pairs:
        assert source.count(old) == 1, (old, source.count(old))
        source = source.replace(old, new)
    return source


_MHA = '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.cache_k, self.cache_v = None, None

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        kept = self.cache_k.shape[2] if use_cache and self.cache_k is not None else 0
        if kept + num_tokens > self.context_length:
            raise ValueError(f"{kept} cached + {num_tokens} new tokens exceed context_length={self.context_length}")
        keys_new = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values_new = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        if use_cache:
            if self.cache_k is None:
                self.cache_k, self.cache_v = keys_new, values_new
            else:
                self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)
                self.cache_v = torch.cat([self.cache_v, values_new], dim=2)
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = keys_new, values_new
        attn_scores = queries @ keys.transpose(2, 3)
        num_keys = keys.shape[2]
        mask = torch.triu(torch.ones(num_tokens, num_keys, dtype=torch.bool), diagonal=num_keys - num_tokens + 1)
        attn_scores.masked_fill_(mask, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context)
'''

_BLOCK = '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, num_heads, context_length, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.att = MultiHeadAttentionWithCache(d_model, d_model, context_length, dropout, num_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, use_cache=False):
        shortcut = x
        x = self.norm1(x)
        x = self.att(x, use_cache=use_cache)
        x = self.dropout(x)
        x = x + shortcut
        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = self.dropout(x)
        x = x + shortcut
        return x
'''

_GPT = '''class TinyGPT(nn.Module):
    def __init__(self, vocab_size, d_model, num_layers, num_heads, context_length, dropout):
        super().__init__()
        self.context_length = context_length
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(context_length, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            [TransformerBlock(d_model, num_heads, context_length, dropout) for _ in range(num_layers)])
        self.final_norm = nn.LayerNorm(d_model)
        self.out_head = nn.Linear(d_model, vocab_size, bias=False)
        self.current_pos = 0

    def reset_cache(self):
        for block in self.blocks:
            block.att.reset_cache()
        self.current_pos = 0

    def forward(self, idx, use_cache=False):
        batch_size, seq_len = idx.shape
        start = self.current_pos if use_cache else 0
        if start + seq_len > self.context_length:
            raise ValueError(f"{start} cached + {seq_len} new tokens exceed context_length={self.context_length}")
        pos = torch.arange(start, start + seq_len, device=idx.device)
        if use_cache:
            self.current_pos += seq_len
        x = self.tok_emb(idx) + self.pos_emb(pos)
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, use_cache=use_cache)
        x = self.final_norm(x)
        return self.out_head(x)
'''

_GENERATE = '''def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    model.reset_cache()
    context = model.context_length
    new = idx[:, -context:]
    filled = 0
    for _ in range(max_new_tokens):
        if filled + new.shape[1] > context:
            model.reset_cache()
            new, filled = idx[:, -context:], 0
        logits = model(new, use_cache=True)
        filled += new.shape[1]
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("inf")
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
        idx = torch.cat((idx, idx_next), dim=1)
        new = idx_next
    return idx
'''

_TRAIN = '''def train_step(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):
    if micro_batch_size is not None and micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
    b = inputs.shape[0]
    step = b if micro_batch_size is None else micro_batch_size
    optimizer.zero_grad()
    total = 0.0
    for start in range(0, b, step):
        x, y = inputs[start:start + step], targets[start:start + step]
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        (loss * x.shape[0] / b).backward()
        total += loss.item() * x.shape[0] / b
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return total
'''


VARIANTS = {
    # Part 1: MultiHeadAttentionWithCache
    "mha_mask_top_left": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _edit(_MHA, ("diagonal=num_keys - num_tokens + 1", "diagonal=1"))},
        "fails": {"test_multi_head_attention": "top-left", "test_tiny_gpt_cache": "top-left"},
        "not_named": ["sqrt(d_out)", "view(b, num_heads", "neither read nor write"],
    },
    "mha_scaled_by_d_out": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _edit(_MHA, ("attn_scores / keys.shape[-1] ** 0.5",
                                                       "attn_scores / self.d_out ** 0.5"))},
        "fails": {"test_multi_head_attention": "sqrt(d_out)"},
        "not_named": ["top-left", "view(b, num_heads", "neither read nor write"],
    },
    "mha_heads_split_without_transpose": {
        "kind": "mistake",  # view(b, num_heads, T, head_dim) straight from (b, T, d_out)
        "cells": {"multi_head_attention": _edit(
            _MHA,
            ("keys_new = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)",
             "keys_new = self.W_key(x).view(b, self.num_heads, num_tokens, self.head_dim)"),
            ("values_new = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)",
             "values_new = self.W_value(x).view(b, self.num_heads, num_tokens, self.head_dim)"),
            ("queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)",
             "queries = self.W_query(x).view(b, self.num_heads, num_tokens, self.head_dim)"),
            ("context = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)",
             "context = (attn_weights @ values).contiguous().view(b, num_tokens, self.d_out)"))},
        "fails": {"test_multi_head_attention": "view(b, num_heads", "test_tiny_gpt_cache": "view(b, num_heads"},
        "not_named": ["sqrt(d_out)", "top-left", "neither read nor write"],
    },
    "mha_cache_along_heads": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _edit(
            _MHA,
            ("self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)",
             "self.cache_k = torch.cat([self.cache_k, keys_new], dim=1)"),
            ("self.cache_v = torch.cat([self.cache_v, values_new], dim=2)",
             "self.cache_v = torch.cat([self.cache_v, values_new], dim=1)"))},
        "fails": {"test_multi_head_attention": "along the tokens", "test_tiny_gpt_cache": "along the tokens"},
        "not_named": ["top-left", "sqrt(d_out)", "neither read nor write"],
    },
    "mha_cache_written_without_use_cache": {
        "kind": "mistake",  # Raschka's bonus code fills the cache on every call
        "cells": {"multi_head_attention": _edit(
            _MHA,
            ("kept = self.cache_k.shape[2] if use_cache and self.cache_k is not None else 0",
             "kept = self.cache_k.shape[2] if self.cache_k is not None else 0"),
            ("""        if use_cache:
            if self.cache_k is None:
                self.cache_k, self.cache_v = keys_new, values_new
            else:
                self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)
                self.cache_v = torch.cat([self.cache_v, values_new], dim=2)
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = keys_new, values_new
""", """        if self.cache_k is None:
            self.cache_k, self.cache_v = keys_new, values_new
        else:
            self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)
            self.cache_v = torch.cat([self.cache_v, values_new], dim=2)
        keys, values = (self.cache_k, self.cache_v) if use_cache else (keys_new, values_new)
"""))},
        "fails": {"test_multi_head_attention": "neither read nor write",
                  "test_transformer_block": "neither read nor write", "test_tiny_gpt": "neither read nor write",
                  "test_tiny_gpt_cache": "neither read nor write"},
        "not_named": ["top-left", "sqrt(d_out)"],
    },
    "mha_context_check_new_tokens_only": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _edit(_MHA, ("if kept + num_tokens > self.context_length:",
                                                       "if num_tokens > self.context_length:"))},
        "fails": {"test_multi_head_attention": "not counted"},
        "not_named": ["top-left", "sqrt(d_out)", "`d_out` is let through"],
    },
    "mha_no_d_out_check": {
        "kind": "mistake",  # nanoGPT's assert
        "cells": {"multi_head_attention": _edit(_MHA, ('''        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
''', "        assert d_out % num_heads == 0\n"))},
        "fails": {"test_multi_head_attention": "ValueError"},
        "not_named": ["top-left", "sqrt(d_out)", "`context_length` is let through"],
    },
    # Part 2: TransformerBlock
    "block_post_layer_norm": {
        "kind": "mistake",  # the original Transformer's order: norm after the residual sum
        "cells": {"transformer_block": _edit(_BLOCK, ("""        shortcut = x
        x = self.norm1(x)
        x = self.att(x, use_cache=use_cache)
        x = self.dropout(x)
        x = x + shortcut
        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = self.dropout(x)
        x = x + shortcut
        return x
""", """        x = self.norm1(x + self.dropout(self.att(x, use_cache=use_cache)))
        x = self.norm2(x + self.dropout(self.ff(x)))
        return x
"""))},
        "fails": {"test_transformer_block": "post-LayerNorm"},
        "not_named": ["tanh", "ReLU", "norm1's output"],
    },
    "block_residual_from_normalised": {
        "kind": "mistake",  # x = norm(x) overwrites what the shortcut should add back
        "cells": {"transformer_block": '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, num_heads, context_length, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.att = MultiHeadAttentionWithCache(d_model, d_model, context_length, dropout, num_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, use_cache=False):
        x = self.norm1(x)
        x = x + self.dropout(self.att(x, use_cache=use_cache))
        x = self.norm2(x)
        x = x + self.dropout(self.ff(x))
        return x
'''},
        "fails": {"test_transformer_block": "adds the normalised"},
        "not_named": ["tanh", "post-LayerNorm", "ReLU"],
    },
    "block_gelu_tanh": {
        "kind": "mistake",  # GPT-2's tanh approximation
        "cells": {"transformer_block": _edit(_BLOCK, ("nn.GELU()", "nn.GELU(approximate=\"tanh\")"))},
        "fails": {"test_transformer_block": "tanh"},
        "not_named": ["post-LayerNorm", "adds the normalised", "ReLU"],
    },
    "block_relu": {
        "kind": "mistake",
        "cells": {"transformer_block": _edit(_BLOCK, ("nn.GELU()", "nn.ReLU()"))},
        "fails": {"test_transformer_block": "ReLU"},
        "not_named": ["tanh", "post-LayerNorm", "adds the normalised"],
    },
    "block_hidden_d_model": {
        "kind": "mistake",
        "cells": {"transformer_block": _edit(_BLOCK, (
            "nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)",
            "nn.Linear(d_model, d_model), nn.GELU(), nn.Linear(d_model, d_model)"))},
        "fails": {"test_transformer_block": "4 * d_model", "test_tiny_gpt": "ff.0.weight",
                  "test_tiny_gpt_cache": "ff.0.weight"},
        "not_named": ["tanh", "post-LayerNorm"],
    },
    "block_drops_use_cache": {
        "kind": "mistake",
        "cells": {"transformer_block": _edit(_BLOCK, ("x = self.att(x, use_cache=use_cache)", "x = self.att(x)"))},
        "fails": {"test_transformer_block": "use_cache", "test_tiny_gpt_cache": "use_cache"},
        "not_named": ["post-LayerNorm", "tanh"],
    },
    "block_one_norm_twice": {
        "kind": "mistake",  # norm1 reused for the MLP branch: norm2 is never used
        "cells": {"transformer_block": _edit(_BLOCK, ("        x = self.norm2(x)\n", "        x = self.norm1(x)\n"))},
        "fails": {"test_transformer_block": "norm1's output"},
        "not_named": ["post-LayerNorm", "tanh", "ReLU"],
    },
    # Part 3: TinyGPT
    "gpt_positions_restart_with_cache": {
        "kind": "mistake",  # generate_text_simple's arange(seq_len) kept with the cache
        "cells": {"tiny_gpt": _edit(_GPT, ("pos = torch.arange(start, start + seq_len, device=idx.device)",
                                           "pos = torch.arange(seq_len, device=idx.device)"))},
        "fails": {"test_tiny_gpt": "after the cached ones", "test_tiny_gpt_cache": "positions 0, 1, ... again"},
        "not_named": ["tied", "final_norm is not applied"],
    },
    "gpt_tied_weights": {
        "kind": "mistake",  # GPT-2 / nanoGPT weight tying
        "cells": {"tiny_gpt": _edit(_GPT, ("self.current_pos = 0\n\n    def reset_cache",
                                           "self.out_head.weight = self.tok_emb.weight\n"
                                           "        self.current_pos = 0\n\n    def reset_cache"))},
        "fails": {"test_tiny_gpt": "tied", "test_tiny_gpt_cache": "tied"},
        "not_named": ["after the cached ones", "final_norm is not applied"],
    },
    "gpt_head_with_bias": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("nn.Linear(d_model, vocab_size, bias=False)", "nn.Linear(d_model, vocab_size)"))},
        "fails": {"test_tiny_gpt": "bias", "test_tiny_gpt_cache": "bias"},
        "not_named": ["after the cached ones", "tied", "final_norm is not applied"],
    },
    "gpt_final_norm_unused": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("        x = self.final_norm(x)\n", ""))},
        "fails": {"test_tiny_gpt": "final_norm is not applied"},
        "not_named": ["after the cached ones", "tied"],
    },
    "gpt_count_read_from_first_block": {
        "kind": "mistake",  # the count lives in the blocks' caches: a model without blocks has none
        "cells": {"tiny_gpt": _edit(_GPT, (
            "start = self.current_pos if use_cache else 0",
            "start = 0\n"
            "        if use_cache and len(self.blocks) and getattr(self.blocks[0].att, 'cache_k', None) is not None:\n"
            "            start = self.blocks[0].att.cache_k.shape[2]"))},
        "fails": {"test_tiny_gpt": "counted by the model itself", "test_tiny_gpt_cache": "counted by the model itself"},
        "not_named": ["tied", "final_norm is not applied"],
    },
    "gpt_context_check_new_tokens_only": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("if start + seq_len > self.context_length:",
                                           "if seq_len > self.context_length:"))},
        "fails": {"test_tiny_gpt": "not counted", "test_tiny_gpt_cache": "not counted"},
        "not_named": ["tied", "final_norm is not applied"],
    },
    "gpt_count_moves_without_cache": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("        if use_cache:\n            self.current_pos += seq_len\n",
                                           "        self.current_pos = start + seq_len\n"))},
        "fails": {"test_tiny_gpt": "without the cache"},
        "not_named": ["tied", "final_norm is not applied"],
    },
    "gpt_reset_keeps_count": {
        "kind": "mistake",
        "cells": {"tiny_gpt": _edit(_GPT, ("            block.att.reset_cache()\n        self.current_pos = 0\n",
                                           "            block.att.reset_cache()\n"))},
        "fails": {"test_tiny_gpt_cache": "did not zero"},
        "not_named": ["tied", "final_norm is not applied"],
    },
    "gpt_seq_len_from_shape_0": {
        "kind": "mistake",  # positions counted over the batch
        "cells": {"tiny_gpt": _edit(_GPT, ("batch_size, seq_len = idx.shape", "seq_len = idx.shape[0]"))},
        "fails": {"test_tiny_gpt": "shape[1]", "test_tiny_gpt_cache": "shape[1]"},
        "not_named": ["tied", "final_norm is not applied"],
    },
    # Part 4: generate
    "generate_temperature_multiplied": {
        "kind": "mistake",
        "cells": {"generate": _edit(_GENERATE, ("logits[:, -1, :] / temperature", "logits[:, -1, :] * temperature"))},
        "fails": {"test_generate": "divide"},
        "not_named": ["not emptied", "first position", "argmax"],
    },
    "generate_topk_threshold_broadcast": {
        "kind": "mistake",  # v[:, -1] is (b,): it lines up with the vocabulary, not with the rows
        "cells": {"generate": _edit(_GENERATE, ("logits < v[:, [-1]]", "logits < v[:, -1]"))},
        "fails": {"test_generate": "v[:, [-1]]"},
        "not_named": ["not emptied", "multiplied by the temperature", "first position"],
    },
    "generate_without_cache": {
        "kind": "mistake",  # generate_text_simple: the whole window at every step
        "cells": {"generate": '''def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -model.context_length:]
        logits = model(idx_cond)[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits = torch.where(logits < v[:, -1:], torch.full_like(logits, -float("inf")), logits)
        probs = torch.softmax(logits, dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, 1, generator=generator)), dim=1)
    return idx
'''},
        "fails": {"test_generate": "use_cache"},
        "not_named": ["not emptied", "multiplied by the temperature", "first position"],
    },
    "generate_no_reset_at_start": {
        "kind": "mistake",
        "cells": {"generate": _edit(_GENERATE, ("    model.reset_cache()\n    context", "    context"))},
        "fails": {"test_generate": "not emptied"},
        "not_named": ["first position", "multiplied by the temperature"],
    },
    "generate_first_position_logits": {
        "kind": "mistake",
        "cells": {"generate": _edit(_GENERATE, ("logits[:, -1, :] / temperature", "logits[:, 0, :] / temperature"))},
        "fails": {"test_generate": "first position"},
        "not_named": ["not emptied", "set every logit below"],
    },
    "generate_never_refills": {
        "kind": "mistake",  # runs into the model's context_length ValueError once the cache is full
        "cells": {"generate": _edit(_GENERATE, ('''        if filled + new.shape[1] > context:
            model.reset_cache()
            new, filled = idx[:, -context:], 0
''', ""))},
        "fails": {"test_generate": "full"},
        "not_named": ["not emptied", "first position"],
    },
    "generate_greedy_always": {
        "kind": "mistake",
        "cells": {"generate": _edit(_GENERATE, (
            "idx_next = torch.multinomial(probs, num_samples=1, generator=generator)",
            "idx_next = torch.argmax(probs, dim=-1, keepdim=True)"))},
        "fails": {"test_generate": "argmax"},
        "not_named": ["first position", "multiplied by the temperature"],
    },
    "generate_topk_above_vocab": {
        "kind": "mistake",  # torch.topk refuses k larger than the vocabulary
        "cells": {"generate": _edit(_GENERATE, ("torch.topk(logits, min(top_k, logits.size(-1)))",
                                                "torch.topk(logits, top_k)"))},
        "fails": {"test_generate": "vocab"},
        "not_named": ["multiplied by the temperature", "not emptied"],
    },
    "generate_reads_whole_sequence_each_step": {
        "kind": "mistake",  # with the cache, but feeding every token again each step
        "cells": {"generate": _edit(_GENERATE, ("        new = idx_next\n",
                                                "        model.reset_cache()\n        filled = 0\n"
                                                "        new = idx[:, -context:]\n"))},
        "fails": {"test_generate": "once"},
        "not_named": ["multiplied by the temperature", "not emptied"],
    },
    # Part 5: train_step
    "train_no_zero_grad": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("    optimizer.zero_grad()\n", ""))},
        "fails": {"test_train_step": "not cleared", "test_train_step_accumulation": "not cleared",
                  "test_train_step_accumulation_clipped": "not cleared"},
        "not_named": ["clip_grad_value_", "unweighted"],
    },
    "train_returns_tensor": {
        "kind": "mistake",  # a Part 5 answer: returns the loss tensor, and reads the whole batch whatever micro_batch_size
        "cells": {"train_step": '''def train_step(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):
    if micro_batch_size is not None and micro_batch_size < 1:
        raise ValueError("micro_batch_size must be >= 1")
    optimizer.zero_grad(set_to_none=True)
    logits = model(inputs)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    loss.backward()
    if max_grad_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return loss
'''},
        "fails": {"test_train_step": "float", "test_train_step_accumulation": "micro_batch_size",
                  "test_train_step_accumulation_clipped": "micro_batch_size"},
        "not_named": ["not cleared", "clip_grad_value_"],
    },
    "train_clip_after_step": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("""    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
""", """    optimizer.step()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
"""))},
        "fails": {"test_train_step": "before", "test_train_step_accumulation_clipped": "before"},
        "not_named": ["not cleared", "clip_grad_value_"],
    },
    "train_clip_each_parameter": {
        "kind": "mistake",  # each parameter clipped on its own: the norm of all together may pass max_grad_norm
        "cells": {"train_step": _edit(_TRAIN, ("torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)",
                                               "for p in model.parameters():\n"
                                               "            torch.nn.utils.clip_grad_norm_(p, max_grad_norm)"))},
        "fails": {"test_train_step": "together"},
        "not_named": ["not cleared", "clip_grad_value_"],
    },
    "train_clip_value": {
        "kind": "mistake",  # clip_grad_value_: each number clamped, not the norm scaled
        "cells": {"train_step": _edit(_TRAIN, ("torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)",
                                               "torch.nn.utils.clip_grad_value_(model.parameters(), max_grad_norm)"))},
        "fails": {"test_train_step": "clip_grad_value_", "test_train_step_accumulation_clipped": "clip_grad_value_"},
        "not_named": ["not cleared", "unweighted"],
    },
    "train_cross_entropy_unflattened": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("F.cross_entropy(logits.flatten(0, 1), y.flatten())",
                                               "F.cross_entropy(logits, y)"))},
        "fails": {"test_train_step": "(b * T, vocab_size)", "test_train_step_accumulation": "(b * T, vocab_size)",
                  "test_train_step_accumulation_clipped": "(b * T, vocab_size)"},
        "not_named": ["not cleared", "clip_grad_value_"],
    },
    "train_summed_loss": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("F.cross_entropy(logits.flatten(0, 1), y.flatten())",
                                               "F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction=\"sum\")"))},
        "fails": {"test_train_step": "mean", "test_train_step_accumulation": "mean",
                  "test_train_step_accumulation_clipped": "mean"},
        "not_named": ["not cleared", "clip_grad_value_"],
    },
    # Part 6: accumulation
    "accum_sum_of_slice_means": {
        "kind": "mistake",  # each slice's mean backpropagated unscaled
        "cells": {"train_step": _edit(_TRAIN, ("(loss * x.shape[0] / b).backward()", "loss.backward()"))},
        "fails": {"test_train_step_accumulation": "unweighted", "test_train_step_accumulation_clipped": "unweighted"},
        "not_named": ["cleared before every slice", "stepped after every slice"],
    },
    "accum_divided_by_number_of_slices": {
        "kind": "mistake",  # nanoGPT's loss / gradient_accumulation_steps: wrong when the last slice is smaller
        "cells": {"train_step": _edit(_TRAIN,
                                      ("    total = 0.0\n", "    total = 0.0\n    slices = -(-b // step)\n"),
                                      ("(loss * x.shape[0] / b).backward()", "(loss / slices).backward()"),
                                      ("total += loss.item() * x.shape[0] / b", "total += loss.item() / slices"))},
        "fails": {"test_train_step_accumulation": "smaller", "test_train_step_accumulation_clipped": "smaller"},
        "not_named": ["cleared before every slice", "stepped after every slice"],
    },
    "accum_step_per_slice": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN,
                                      ("        total += loss.item() * x.shape[0] / b\n",
                                       "        total += loss.item() * x.shape[0] / b\n"
                                       "        optimizer.step()\n        optimizer.zero_grad()\n"),
                                      ("    optimizer.step()\n    return total", "    return total"))},
        "fails": {"test_train_step": "changes nothing", "test_train_step_accumulation": "once",
                  "test_train_step_accumulation_clipped": "once"},
        "not_named": ["smaller", "cleared before every slice"],
    },
    "accum_zero_grad_per_slice": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN,
                                      ("    optimizer.zero_grad()\n    total", "    total"),
                                      ("        logits = model(x)\n", "        optimizer.zero_grad()\n"
                                                                      "        logits = model(x)\n"))},
        "fails": {"test_train_step_accumulation": "cleared before every slice",
                  "test_train_step_accumulation_clipped": "cleared before every slice"},
        "not_named": ["smaller", "stepped after every slice"],
    },
    "accum_clip_per_slice": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN,
                                      ("        total += loss.item() * x.shape[0] / b\n",
                                       "        total += loss.item() * x.shape[0] / b\n"
                                       "        if max_grad_norm is not None:\n"
                                       "            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n"),
                                      ("    if max_grad_norm is not None:\n"
                                       "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n"
                                       "    optimizer.step()", "    optimizer.step()"))},
        "fails": {"test_train_step_accumulation_clipped": "once"},
        "not_named": ["smaller", "cleared before every slice", "unweighted"],
    },
    "accum_returns_last_slice_loss": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("total += loss.item() * x.shape[0] / b", "total = loss.item()"))},
        "fails": {"test_train_step_accumulation": "whole batch", "test_train_step_accumulation_clipped": "whole batch"},
        "not_named": ["smaller", "cleared before every slice", "stepped after every slice"],
    },
    "accum_ignores_micro_batch_size": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ("step = b if micro_batch_size is None else micro_batch_size", "step = b"))},
        "fails": {"test_train_step_accumulation": "micro_batch_size",
                  "test_train_step_accumulation_clipped": "micro_batch_size"},
        "not_named": ["stepped after every slice", "unweighted"],
    },
    "accum_no_value_error": {
        "kind": "mistake",
        "cells": {"train_step": _edit(_TRAIN, ('''    if micro_batch_size is not None and micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
''', "    micro_batch_size = micro_batch_size or None\n"))},
        "fails": {"test_train_step_accumulation": "ValueError"},
        "not_named": ["smaller", "cleared before every slice", "stepped after every slice"],
    },
    # Correct code in other styles: must get full marks
    "correct_raschka_style": {
        "kind": "correct",
        "cells": {"multi_head_attention": _MHA, "transformer_block": _BLOCK, "tiny_gpt": _GPT,
                  "generate": _GENERATE, "train_step": _TRAIN},
    },
    "correct_nanogpt_style": {
        "kind": "correct",
        "cells": {
            "multi_head_attention": '''class MultiHeadAttentionWithCache(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if num_heads <= 0 or d_out % num_heads:
            raise ValueError(f"num_heads={num_heads} does not divide d_out={d_out}")
        self.n_head, self.n_embd, self.block_size = num_heads, d_out, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.attn_dropout = nn.Dropout(dropout)
        self.k_cache = self.v_cache = None

    def reset_cache(self):
        self.k_cache = self.v_cache = None

    def forward(self, x, use_cache=False):
        B, T, _ = x.size()
        past = 0 if not use_cache or self.k_cache is None else self.k_cache.size(-2)
        if past + T > self.block_size:
            raise ValueError(f"context_length={self.block_size} is too small for {past} + {T} tokens")
        hs = self.n_embd // self.n_head
        q = self.W_query(x).view(B, T, self.n_head, hs).transpose(1, 2)
        k = self.W_key(x).view(B, T, self.n_head, hs).transpose(1, 2)
        v = self.W_value(x).view(B, T, self.n_head, hs).transpose(1, 2)
        if use_cache:
            if self.k_cache is not None:
                k = torch.cat((self.k_cache, k), dim=-2)
                v = torch.cat((self.v_cache, v), dim=-2)
            self.k_cache, self.v_cache = k, v
        S = k.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        keep = torch.tril(torch.ones(S, S, dtype=torch.bool))[S - T:]
        att = att.masked_fill(~keep, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).reshape(B, T, self.n_embd)
        return self.out_proj(y)
''',
            "transformer_block": '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, num_heads, context_length, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.att = MultiHeadAttentionWithCache(d_model, d_model, context_length, dropout, num_heads, qkv_bias=False)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, use_cache=False):
        x = x + self.dropout(self.att(self.norm1(x), use_cache=use_cache))
        x = x + self.dropout(self.ff(self.norm2(x)))
        return x
''',
            "tiny_gpt": '''class TinyGPT(nn.Module):
    def __init__(self, vocab_size, d_model, num_layers, num_heads, context_length, dropout):
        super().__init__()
        self.context_length = context_length
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(context_length, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[TransformerBlock(d_model, num_heads, context_length, dropout)
                                      for _ in range(num_layers)])
        self.final_norm = nn.LayerNorm(d_model)
        self.out_head = nn.Linear(d_model, vocab_size, bias=False)
        self.pos_offset = 0

    def reset_cache(self):
        self.pos_offset = 0
        for blk in self.blocks:
            blk.att.reset_cache()

    def forward(self, idx, use_cache=False):
        b, t = idx.size()
        offset = self.pos_offset if use_cache else 0
        if offset + t > self.context_length:
            raise ValueError(f"Cannot forward {offset} + {t} tokens, context_length is only {self.context_length}")
        pos = torch.arange(offset, offset + t, dtype=torch.long, device=idx.device)
        x = self.dropout(self.tok_emb(idx) + self.pos_emb(pos))
        for blk in self.blocks:
            x = blk(x, use_cache=use_cache)
        if use_cache:
            self.pos_offset = offset + t
        return self.out_head(self.final_norm(x))
''',
            "generate": '''@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    model.reset_cache()
    pending = idx[:, -model.context_length:]
    held = 0
    for i in range(max_new_tokens):
        if held + pending.size(1) > model.context_length:
            model.reset_cache()
            pending, held = idx[:, -model.context_length:], 0
        logits = model(pending, use_cache=True)[:, -1, :]
        held += pending.size(1)
        logits = logits / temperature
        if top_k is not None and top_k < logits.size(-1):
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1, None]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = F.softmax(logits, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator)
        idx = torch.cat([idx, nxt], dim=-1)
        pending = nxt
    return idx
''',
            "train_step": '''def train_step(model, optimizer, inputs, targets, max_grad_norm=None, micro_batch_size=None):
    B = inputs.size(0)
    if micro_batch_size is None:
        micro_batch_size = B
    elif micro_batch_size < 1:
        raise ValueError("micro_batch_size must be a positive number of sequences")
    optimizer.zero_grad(set_to_none=True)
    n_total = targets.numel()
    loss_sum = 0.0
    for xb, yb in zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)):
        logits = model(xb)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), yb.reshape(-1), reduction="sum") / n_total
        loss.backward()
        loss_sum += loss.item()
    if max_grad_norm is not None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))
        factor = min(1.0, max_grad_norm / (norm.item() + 1e-6))
        for g in grads:
            g.mul_(factor)
    optimizer.step()
    return float(loss_sum)
''',
        },
    },
}
