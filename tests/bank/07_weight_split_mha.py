"""Submission bank for step 07: correct variants written another way, and common mistakes."""

# The cheats of tests/bank/integrity.py ride on this mistake: its visible tests pass and its output is wrong, so only
# the hidden checks can take its points, and a cheat that skips or silences them must not keep them.
CHEATS_RIDE_ON = "dropout_never_applied"

# Carried over from earlier steps: the setup's load_fixed_weights loop and the no_grad copy of step 03, and the lines
# of steps 04-05's CausalAttention that the exercise gives (so that Parts 4 and 5 can convert to and from it) and that
# MultiHeadAttention keeps unchanged.
SHARED_LINES = [
    "with torch.no_grad():",
    'for name in ("W_query", "W_key", "W_value"):',
    "self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
    "self.dropout = nn.Dropout(dropout)",
    "future = torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1)",
    'self.register_buffer("mask", future)',
    "if num_tokens > self.mask.shape[0]:",
    'raise ValueError(f"{num_tokens} tokens do not fit context_length={self.mask.shape[0]}")',
    'attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))',
    "attn_weights = self.dropout(attn_weights)",
]

# The answer key's MultiHeadAttention calls split_heads and merge_heads, so a mistake in either also breaks
# Part 3. Part 4's visible test runs the MultiHeadAttention that wrapper_to_split returns, so a mistake of Part 3 that
# shows on its small example breaks Part 4 too; its hidden checks judge the weights and sizes wrapper_to_split chose,
# not Part 3's forward (dropout_by_hand_also_in_eval keeps Part 4's points).

_MHA_RESHAPE_PERMUTE = '''\
class MultiHeadAttention(nn.Module):
    """Causal multi-head attention with weight splits: (b, T, d_in) -> (b, T, d_out)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_out={d_out}")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(diagonal=1).bool())

    def forward(self, x):
        b, num_tokens, _ = x.shape
        if num_tokens > self.mask.size(0):
            raise ValueError(f"input has {num_tokens} tokens but context_length is {self.mask.size(0)}")
        shape = (b, num_tokens, self.num_heads, self.head_dim)
        queries = self.W_query(x).reshape(shape).permute(0, 2, 1, 3)
        keys = self.W_key(x).reshape(shape).permute(0, 2, 1, 3)
        values = self.W_value(x).reshape(shape).permute(0, 2, 1, 3)
        attn_scores = torch.matmul(queries, keys.permute(0, 1, 3, 2)) / math.sqrt(self.head_dim)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], -math.inf)
        attn_weights = self.dropout(F.softmax(attn_scores, dim=3))
        context_vecs = torch.matmul(attn_weights, values).permute(0, 2, 1, 3).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context_vecs)
'''

_MHA_EINSUM_WHERE = '''\
class MultiHeadAttention(nn.Module):
    """Layers created in another order, a float mask, einsum, torch.where with a large negative number."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError("d_out must be a multiple of num_heads")
        self.out_proj = nn.Linear(d_out, d_out)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.num_heads = num_heads
        self.context_length = context_length
        self.calls = 0  # an extra helper attribute

    def forward(self, x):
        self.calls += 1
        b, t, _ = x.shape
        if t > self.context_length:
            raise ValueError(f"sequence of length {t} is longer than context_length {self.context_length}")
        h = self.num_heads
        q = self.W_query(x).unflatten(-1, (h, -1))  # (b, t, h, hd)
        k = self.W_key(x).unflatten(-1, (h, -1))
        v = self.W_value(x).unflatten(-1, (h, -1))
        scores = torch.einsum("bthd,bshd->bhts", q, k) * q.shape[-1] ** -0.5
        scores = torch.where(self.mask[:t, :t].bool(), torch.full_like(scores, -1e9), scores)
        weights = self.dropout(scores.softmax(dim=-1))
        out = torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)
        return self.out_proj(out)
'''

_MHA_INPLACE_FINFO = '''\
class MultiHeadAttention(nn.Module):
    """Helpers from Parts 1 and 2, queries scaled before the product, masked_fill_ with the smallest float."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"d_out ({d_out}) is not divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=True)
        self.dropout = nn.Dropout(p=dropout)
        self.register_buffer("mask", ~torch.tril(torch.ones(context_length, context_length, dtype=torch.bool)))

    def forward(self, x):
        T = x.size(1)
        if T > self.mask.shape[-1]:
            raise ValueError(f"too many tokens for context_length: {T} > {self.mask.shape[-1]}")
        q = split_heads(self.W_query(x), self.num_heads)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        q = q / math.sqrt(q.shape[-1])
        attn_scores = q @ k.mT
        attn_scores.masked_fill_(self.mask[:T, :T], torch.finfo(attn_scores.dtype).min)
        attn_weights = self.dropout(torch.softmax(attn_scores, dim=-1))
        return self.out_proj(merge_heads(attn_weights @ v))
'''

# The answer key's forward with one line changed, for the mistakes inside MultiHeadAttention.
_MHA_KEY = '''\
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        if num_tokens > self.mask.shape[0]:
            raise ValueError(f"{num_tokens} tokens do not fit context_length={self.mask.shape[0]}")
        queries = split_heads(self.W_query(x), self.num_heads)
        keys = split_heads(self.W_key(x), self.num_heads)
        values = split_heads(self.W_value(x), self.num_heads)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vecs = merge_heads(attn_weights @ values)
        return self.out_proj(context_vecs)
'''


def _mha_with(old, new):
    assert old in _MHA_KEY, old
    return _MHA_KEY.replace(old, new)


_WRAPPER_TO_SPLIT_STATE_DICT = '''\
def wrapper_to_split(wrapper):
    """Build a state dict and load it."""
    heads = list(wrapper.heads)
    num_heads = len(heads)
    d_in = heads[0].W_query.weight.shape[1]
    d_out = num_heads * heads[0].W_query.weight.shape[0]
    has_bias = heads[0].W_query.bias is not None
    mha = MultiHeadAttention(d_in, d_out, heads[0].mask.size(-1), heads[0].dropout.p, num_heads, qkv_bias=has_bias)
    mha = mha.to(heads[0].W_query.weight.dtype)
    state = mha.state_dict()
    for name in ["W_query", "W_key", "W_value"]:
        state[name + ".weight"] = torch.vstack([head.state_dict()[name + ".weight"] for head in heads])
        if has_bias:
            state[name + ".bias"] = torch.hstack([head.state_dict()[name + ".bias"] for head in heads])
    state["out_proj.weight"] = torch.eye(d_out)
    state["out_proj.bias"] = torch.zeros(d_out)
    mha.load_state_dict(state)
    return mha
'''

_WRAPPER_TO_SPLIT_TRANSPOSED = '''\
def wrapper_to_split(wrapper):
    """Stack the transposed weights side by side, transpose back; new Parameters; nn.init for out_proj."""
    first = wrapper.heads[0]
    num_heads = len(wrapper.heads)
    bias = first.W_query.bias is not None
    mha = MultiHeadAttention(first.W_query.in_features, num_heads * first.W_query.out_features,
                             len(first.mask), first.dropout.p, num_heads, bias).to(first.W_query.weight.dtype)
    for name in ("W_query", "W_key", "W_value"):
        layers = [getattr(head, name) for head in wrapper.heads]
        big = getattr(mha, name)
        big.weight = nn.Parameter(torch.cat([layer.weight.detach().T for layer in layers], dim=1).T.clone())
        if bias:
            big.bias = nn.Parameter(torch.cat([layer.bias.detach() for layer in layers]).clone())
    nn.init.eye_(mha.out_proj.weight)
    nn.init.zeros_(mha.out_proj.bias)
    return mha
'''

_WRAPPER_TO_SPLIT_KEY = '''\
def wrapper_to_split(wrapper):
    heads = wrapper.heads
    first = heads[0]
    d_in, head_dim = first.W_query.in_features, first.W_query.out_features
    d_out = head_dim * len(heads)
    qkv_bias = first.W_query.bias is not None
    mha = MultiHeadAttention(d_in, d_out, first.mask.shape[0], first.dropout.p, len(heads), qkv_bias=qkv_bias)
    mha = mha.to(first.W_query.weight.dtype)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            big = getattr(mha, name)
            big.weight.copy_(torch.cat([getattr(head, name).weight for head in heads], dim=0))
            if qkv_bias:
                big.bias.copy_(torch.cat([getattr(head, name).bias for head in heads], dim=0))
        mha.out_proj.weight.copy_(torch.eye(d_out))
        mha.out_proj.bias.zero_()
    return mha
'''

_SPLIT_TO_WRAPPER_STATE_DICT = '''\
def split_to_wrapper(mha, num_heads):
    """A state dict for the wrapper; the heads each output block reads, counted block by block; einsum."""
    d_out, d_in = mha.W_query.weight.shape
    if num_heads <= 0 or d_out % num_heads != 0:
        raise ValueError(f"cannot cut d_out={d_out} into num_heads={num_heads} heads")
    hd = d_out // num_heads
    w_o, b_o = mha.out_proj.weight.detach(), mha.out_proj.bias.detach()
    has_bias = mha.W_value.bias is not None
    if not has_bias and torch.count_nonzero(b_o):
        raise ValueError("out_proj adds a bias that heads without biases cannot add")
    state = {}
    for g in range(num_heads):
        out = slice(g * hd, (g + 1) * hd)
        read = [h for h in range(num_heads) if torch.count_nonzero(w_o[out, h * hd:(h + 1) * hd])]
        if len(read) > 1:
            raise ValueError(f"block {g} of out_proj reads the heads {read}: no wrapper computes this")
        r = slice(read[0] * hd, (read[0] + 1) * hd) if read else slice(0, hd)
        block = w_o[out, r]
        for name in ("W_query", "W_key", "W_value"):
            w = getattr(mha, name).weight.detach()[r]
            state[f"heads.{g}.{name}.weight"] = torch.einsum("ij,jk->ik", block, w) if name == "W_value" else w
            if has_bias:
                b = getattr(mha, name).bias.detach()[r]
                state[f"heads.{g}.{name}.bias"] = torch.einsum("ij,j->i", block, b) + b_o[out] if name == "W_value" else b
    wrapper = MultiHeadAttentionWrapper(d_in, hd, len(mha.mask), mha.dropout.p, num_heads, qkv_bias=has_bias)
    wrapper = wrapper.to(w_o.dtype)
    wrapper.load_state_dict(state, strict=False)
    return wrapper
'''

_SPLIT_TO_WRAPPER_PARAMETERS = '''\
def split_to_wrapper(mha, num_heads):
    """New nn.Parameters per head; the head each block reads found with nonzero(); the bias check first."""
    d_out = mha.out_proj.in_features
    if num_heads < 1 or d_out % num_heads:
        raise ValueError("num_heads must divide d_out")
    head_dim = d_out // num_heads
    has_bias = mha.W_query.bias is not None
    W = mha.out_proj.weight.detach()
    out_bias = mha.out_proj.bias.detach()
    if not has_bias and not torch.allclose(out_bias, torch.zeros_like(out_bias), atol=0.0):
        raise ValueError("out_proj has a bias, and the heads' layers have none")
    sources = []
    for i in range(0, d_out, head_dim):
        heads_read = (W[i:i + head_dim].abs().sum(0).nonzero().flatten() // head_dim).unique().tolist()
        if len(heads_read) > 1:
            raise ValueError(f"out_proj reads the heads {heads_read} in one block")
        sources.append(heads_read[0] if heads_read else 0)
    wrapper = MultiHeadAttentionWrapper(mha.W_query.in_features, head_dim, mha.mask.size(0), mha.dropout.p,
                                        num_heads, has_bias).double()
    for g, (head, h) in enumerate(zip(wrapper.heads, sources)):
        i, j = g * head_dim, h * head_dim
        block = W[i:i + head_dim, j:j + head_dim].double()
        head.W_query.weight = nn.Parameter(mha.W_query.weight.detach()[j:j + head_dim].double().clone())
        head.W_key.weight = nn.Parameter(mha.W_key.weight.detach()[j:j + head_dim].double().clone())
        head.W_value.weight = nn.Parameter(block @ mha.W_value.weight.detach()[j:j + head_dim].double())
        if has_bias:
            head.W_query.bias = nn.Parameter(mha.W_query.bias.detach()[j:j + head_dim].double().clone())
            head.W_key.bias = nn.Parameter(mha.W_key.bias.detach()[j:j + head_dim].double().clone())
            head.W_value.bias = nn.Parameter(block @ mha.W_value.bias.detach()[j:j + head_dim].double()
                                             + out_bias[i:i + head_dim].double())
    return wrapper.to(W.dtype)
'''

# The criterion of an earlier version of the task: only a block-diagonal out_proj without a bias (sufficient, not
# necessary: a block may read another head, and with biases out_proj's bias joins the value bias).
_SPLIT_TO_WRAPPER_DIAGONAL_ONLY = '''\
def split_to_wrapper(mha, num_heads):
    d_out, d_in = mha.W_query.weight.shape
    if num_heads < 1 or d_out % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide d_out={d_out}")
    head_dim = d_out // num_heads
    mixing = mha.out_proj.weight.detach()
    blocks = [mixing[h * head_dim:(h + 1) * head_dim, h * head_dim:(h + 1) * head_dim] for h in range(num_heads)]
    across_heads = mixing - torch.block_diag(*blocks)
    out_bias = mha.out_proj.bias
    if across_heads.abs().max() > 1e-6 or (out_bias is not None and out_bias.detach().abs().max() > 1e-6):
        raise ValueError("out_proj mixes the heads or has a bias: no wrapper computes this module")
    qkv_bias = mha.W_query.bias is not None
    wrapper = MultiHeadAttentionWrapper(d_in, head_dim, mha.mask.shape[0], mha.dropout.p, num_heads, qkv_bias)
    wrapper = wrapper.to(device=mixing.device, dtype=mixing.dtype)
    with torch.no_grad():
        for h, head in enumerate(wrapper.heads):
            rows = slice(h * head_dim, (h + 1) * head_dim)
            for name, after in (("W_query", None), ("W_key", None), ("W_value", blocks[h])):
                big, small = getattr(mha, name), getattr(head, name)
                weight = big.weight.detach()[rows]
                small.weight.copy_(weight if after is None else after @ weight)
                if qkv_bias:
                    bias = big.bias.detach()[rows]
                    small.bias.copy_(bias if after is None else after @ bias)
    return wrapper
'''

_SPLIT_TO_WRAPPER_KEY = '''\
def split_to_wrapper(mha, num_heads):
    d_out, d_in = mha.W_query.weight.shape
    if num_heads < 1 or d_out % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide d_out={d_out}")
    head_dim = d_out // num_heads
    qkv_bias = mha.W_query.bias is not None
    weight = mha.out_proj.weight.detach()
    out_bias = mha.out_proj.bias.detach()
    blocks = weight.reshape(num_heads, head_dim, num_heads, head_dim).transpose(1, 2)
    reads = blocks.flatten(2).abs().amax(dim=-1) > 0
    if (reads.sum(dim=1) > 1).any():
        raise ValueError("out_proj mixes heads: an output block reads more than one head")
    if not qkv_bias and (out_bias != 0).any():
        raise ValueError("out_proj has a bias, which heads without biases cannot add")
    source = reads.to(torch.int64).argmax(dim=1)
    wrapper = MultiHeadAttentionWrapper(d_in, head_dim, mha.mask.shape[0], mha.dropout.p, num_heads, qkv_bias)
    wrapper = wrapper.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        for g, head in enumerate(wrapper.heads):
            h = int(source[g])
            rows, block = slice(h * head_dim, (h + 1) * head_dim), blocks[g, h]
            head.W_query.weight.copy_(mha.W_query.weight[rows])
            head.W_key.weight.copy_(mha.W_key.weight[rows])
            head.W_value.weight.copy_(block @ mha.W_value.weight[rows])
            if qkv_bias:
                head.W_query.bias.copy_(mha.W_query.bias[rows])
                head.W_key.bias.copy_(mha.W_key.bias[rows])
                head.W_value.bias.copy_(block @ mha.W_value.bias[rows] + out_bias[g * head_dim:(g + 1) * head_dim])
    return wrapper
'''


def _split_back_with(old, new):
    assert old in _SPLIT_TO_WRAPPER_KEY, old
    return _SPLIT_TO_WRAPPER_KEY.replace(old, new)


_IMPORTS = "import math\nimport torch.nn.functional as F\n\n"

VARIANTS = {
    # ------------------------------------------------------------------ correct variants
    "reshape_permute": {
        "kind": "correct",
        "cells": {
            "split_heads": (
                "def split_heads(x, num_heads):\n"
                "    b, t, d = x.shape\n"
                "    if d % num_heads != 0:\n"
                "        raise ValueError(f'cannot split {d} dimensions into num_heads={num_heads} equal heads')\n"
                "    return x.reshape(b, t, num_heads, d // num_heads).permute(0, 2, 1, 3)\n"
            ),
            "merge_heads": (
                "def merge_heads(x):\n"
                "    b, h, t, hd = x.shape\n"
                "    return x.permute(0, 2, 1, 3).reshape(b, t, h * hd)\n"
            ),
            "multi_head_attention": _IMPORTS + _MHA_RESHAPE_PERMUTE,
        },
    },
    "einsum_where_other_layer_order": {
        "kind": "correct",
        "cells": {
            "multi_head_attention": _MHA_EINSUM_WHERE,
            "wrapper_to_split": _WRAPPER_TO_SPLIT_STATE_DICT,
            "split_to_wrapper": _SPLIT_TO_WRAPPER_STATE_DICT,
        },
    },
    "unflatten_flatten_inplace_mask": {
        "kind": "correct",
        "cells": {
            "split_heads": (
                "def split_heads(x, num_heads):\n"
                "    if x.shape[-1] % num_heads:\n"
                "        raise ValueError('the last dimension must be divisible by num_heads')\n"
                "    return x.unflatten(-1, (num_heads, x.shape[-1] // num_heads)).transpose(1, 2)\n"
            ),
            "merge_heads": "def merge_heads(x):\n    return x.transpose(1, 2).flatten(start_dim=2)\n",
            "multi_head_attention": _IMPORTS + _MHA_INPLACE_FINFO,
            "wrapper_to_split": _WRAPPER_TO_SPLIT_TRANSPOSED,
            "split_to_wrapper": _SPLIT_TO_WRAPPER_PARAMETERS,
            "gpt2_small_attention_params": (
                "def gpt2_small_attention_params():\n"
                "    mha = MultiHeadAttention(768, 768, 1024, 0.0, 12, qkv_bias=True)\n"
                "    return int(sum(p.numel() for p in mha.parameters() if p.requires_grad))\n"
            ),
        },
    },
    # ------------------------------------------------------------------ mistakes
    "split_view_heads_first": {
        "kind": "mistake",
        "cells": {
            "split_heads": (
                "def split_heads(x, num_heads):\n"
                "    b, num_tokens, d_out = x.shape\n"
                "    if d_out % num_heads != 0:\n"
                "        raise ValueError(f'd_out={d_out} is not divisible by num_heads={num_heads}')\n"
                "    return x.view(b, num_heads, num_tokens, d_out // num_heads)\n"
            ),
        },
        "fails": {
            "test_split_heads": "straight as (b, num_heads, T, head_dim)",
            "test_multi_head_attention": "has the wrong values",
        },
    },
    "split_without_value_error": {
        "kind": "mistake",
        "cells": {
            "split_heads": (
                "def split_heads(x, num_heads):\n"
                "    b, num_tokens, d_out = x.shape\n"
                "    return x.view(b, num_tokens, num_heads, d_out // num_heads).transpose(1, 2)\n"
            ),
        },
        "fails": {"test_split_heads": "instead of a ValueError"},
    },
    "merge_view_without_contiguous": {
        "kind": "mistake",
        "cells": {
            "merge_heads": (
                "def merge_heads(x):\n"
                "    b, num_heads, num_tokens, head_dim = x.shape\n"
                "    return x.transpose(1, 2).view(b, num_tokens, num_heads * head_dim)\n"
            ),
        },
        "fails": {
            "test_merge_heads": "contiguous",
            "test_multi_head_attention": "contiguous",
        },
    },
    "scale_by_d_out": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha_with("attn_scores / self.head_dim ** 0.5",
                                                    "attn_scores / (self.num_heads * self.head_dim) ** 0.5")},
        "fails": {
            "test_multi_head_attention": "sqrt(head_dim)",
        },
    },
    "softmax_over_queries": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha_with("self.head_dim ** 0.5, dim=-1)", "self.head_dim ** 0.5, dim=-2)")},
        "fails": {
            "test_multi_head_attention": "the softmax runs over the queries",
        },
    },
    "masked_fill_result_dropped": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha_with("        attn_scores = attn_scores.masked_fill(",
                                                    "        attn_scores.masked_fill(")},
        "fails": {
            "test_multi_head_attention": "the result of masked_fill is not kept",
        },
    },
    "out_proj_missing": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha_with("        self.out_proj = nn.Linear(d_out, d_out)\n", "")
                  .replace("return self.out_proj(context_vecs)", "return context_vecs")},
        "fails": {
            "test_multi_head_attention": "out_proj",
            "test_wrapper_to_split": "out_proj",
            "test_split_to_wrapper": "out_proj",
        },
    },
    "dropout_never_applied": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha_with("        attn_weights = self.dropout(attn_weights)\n", "")},
        "fails": {"test_multi_head_attention": "apply self.dropout"},
    },
    "dropout_by_hand_also_in_eval": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha_with(
            "        attn_weights = self.dropout(attn_weights)\n",
            "        keep = (torch.rand_like(attn_weights) >= self.dropout.p).float()\n"
            "        attn_weights = attn_weights * keep / (1 - self.dropout.p)\n")},
        "fails": {"test_multi_head_attention": "eval mode"},
    },
    "assert_instead_of_value_error": {
        "kind": "mistake",
        "cells": {"multi_head_attention": _mha_with(
            "        if d_out % num_heads != 0:\n"
            "            raise ValueError(f\"d_out={d_out} must be divisible by num_heads={num_heads}\")\n",
            "        assert d_out % num_heads == 0, \"d_out must be divisible by num_heads\"\n")
            .replace("        if num_tokens > self.mask.shape[0]:\n"
                     "            raise ValueError(f\"{num_tokens} tokens do not fit context_length={self.mask.shape[0]}\")\n",
                     "")},
        "fails": {"test_multi_head_attention_arguments": "instead of a ValueError"},
    },
    "wrapper_cat_wrong_dim": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _WRAPPER_TO_SPLIT_KEY.replace(
            "big.weight.copy_(torch.cat([getattr(head, name).weight for head in heads], dim=0))",
            "big.weight.copy_(torch.cat([getattr(head, name).weight for head in heads], dim=1).reshape(d_out, d_in))")},
        "fails": {"test_wrapper_to_split": "dim 0"},
    },
    "wrapper_cat_wrong_dim_shape_error": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _WRAPPER_TO_SPLIT_KEY.replace(
            "big.weight.copy_(torch.cat([getattr(head, name).weight for head in heads], dim=0))",
            "big.weight.copy_(torch.cat([getattr(head, name).weight for head in heads], dim=1))")},
        "fails": {"test_wrapper_to_split": "out_features"},
    },
    "wrapper_out_proj_left_random": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _WRAPPER_TO_SPLIT_KEY.replace(
            "        mha.out_proj.weight.copy_(torch.eye(d_out))\n        mha.out_proj.bias.zero_()\n", "")},
        "fails": {"test_wrapper_to_split": "identity"},
    },
    # The visible example has no biases and no dropout: only the hidden checks see these two.
    "wrapper_without_biases": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _WRAPPER_TO_SPLIT_KEY.replace("qkv_bias = first.W_query.bias is not None",
                                                                    "qkv_bias = False")},
        "fails": {"test_wrapper_to_split": "W_query.bias"},
    },
    "wrapper_dropout_dropped": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _WRAPPER_TO_SPLIT_KEY.replace("first.mask.shape[0], first.dropout.p,",
                                                                    "first.mask.shape[0], 0.0,")},
        "fails": {"test_wrapper_to_split": "dropout.p"},
    },
    "back_block_folded_into_queries": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with(
            "head.W_query.weight.copy_(mha.W_query.weight[rows])", "head.W_query.weight.copy_(block @ mha.W_query.weight[rows])")
            .replace("head.W_value.weight.copy_(block @ mha.W_value.weight[rows])",
                     "head.W_value.weight.copy_(mha.W_value.weight[rows])")},
        "fails": {"test_split_to_wrapper": "W_value"},
    },
    "back_block_transposed": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with("block @ mha.W_value.weight", "block.T @ mha.W_value.weight")
                  .replace("block @ mha.W_value.bias", "block.T @ mha.W_value.bias")},
        "fails": {"test_split_to_wrapper": "W_value"},
    },
    # the lesson's slicing of rows, head by head, applied mechanically: out_proj never reaches the heads
    "back_out_proj_ignored": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with("block @ mha.W_value.weight[rows]", "mha.W_value.weight[rows]")
                  .replace("block @ mha.W_value.bias[rows] + out_bias[g * head_dim:(g + 1) * head_dim]",
                           "mha.W_value.bias[rows]")},
        "fails": {"test_split_to_wrapper": "W_value"},
    },
    "back_out_bias_dropped": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with(" + out_bias[g * head_dim:(g + 1) * head_dim]", "")},
        "fails": {"test_split_to_wrapper": "bias"},
    },
    "back_never_refuses": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with(
            "    if (reads.sum(dim=1) > 1).any():\n"
            "        raise ValueError(\"out_proj mixes heads: an output block reads more than one head\")\n"
            "    if not qkv_bias and (out_bias != 0).any():\n"
            "        raise ValueError(\"out_proj has a bias, which heads without biases cannot add\")\n", "")},
        "fails": {"test_split_to_wrapper": "out_proj"},
    },
    "back_bias_not_checked": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with(
            "    if not qkv_bias and (out_bias != 0).any():\n"
            "        raise ValueError(\"out_proj has a bias, which heads without biases cannot add\")\n", "")},
        "fails": {"test_split_to_wrapper": "the layers have no biases and out_proj has one"},
    },
    "back_only_the_identity": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with(
            "if (reads.sum(dim=1) > 1).any():", "if not torch.equal(weight, torch.eye(d_out)):")},
        "fails": {"test_split_to_wrapper": "ValueError"},
    },
    # the task's earlier, false criterion: a block reading another head, or a bias with biased layers, is refused
    "back_block_diagonal_only": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _SPLIT_TO_WRAPPER_DIAGONAL_ONLY},
        "fails": {"test_split_to_wrapper": "a wrapper exists here"},
    },
    "back_own_head_only": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with("h = int(source[g])", "h = g")},
        "fails": {"test_split_to_wrapper": "not always h = g"},
    },
    # shortcut: a wrapper that runs mha itself (its heads hold nothing of mha, it never refuses)
    "back_forward_delegated": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": (
            "def split_to_wrapper(mha, num_heads):\n"
            "    d_out, d_in = mha.W_query.weight.shape\n"
            "    if num_heads < 1 or d_out % num_heads:\n"
            "        raise ValueError('num_heads must divide d_out')\n"
            "    wrapper = MultiHeadAttentionWrapper(d_in, d_out // num_heads, mha.mask.shape[0], mha.dropout.p,\n"
            "                                        num_heads, mha.W_query.bias is not None)\n"
            "    wrapper.forward = mha.forward\n"
            "    return wrapper\n")},
        "fails": {"test_split_to_wrapper": "ValueError"},
    },
    "back_dropout_dropped": {
        "kind": "mistake",
        "cells": {"split_to_wrapper": _split_back_with("mha.mask.shape[0], mha.dropout.p,", "mha.mask.shape[0], 0.0,")},
        "fails": {"test_split_to_wrapper": "dropout probability"},
    },
    # shortcut: a MultiHeadAttention that runs the wrapper itself (its layers hold nothing of the wrapper)
    "wrapper_forward_delegated": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": (
            "def wrapper_to_split(wrapper):\n"
            "    first = wrapper.heads[0]\n"
            "    mha = MultiHeadAttention(first.W_query.in_features, len(wrapper.heads) * first.W_query.out_features,\n"
            "                             first.mask.shape[0], first.dropout.p, len(wrapper.heads),\n"
            "                             qkv_bias=first.W_query.bias is not None)\n"
            "    mha.forward = wrapper.forward\n"
            "    return mha.to(first.W_query.weight.dtype)\n")},
        "fails": {"test_wrapper_to_split": "with its weights"},
    },
    "wrapper_dtype_dropped": {
        "kind": "mistake",
        "cells": {"wrapper_to_split": _WRAPPER_TO_SPLIT_KEY.replace("    mha = mha.to(first.W_query.weight.dtype)\n", "")},
        "fails": {"test_wrapper_to_split": "bytes per number"},
    },
    "gpt2_returns_a_tensor": {
        "kind": "mistake",
        "cells": {"gpt2_small_attention_params": (
            "def gpt2_small_attention_params():\n"
            "    module = MultiHeadAttention(768, 768, 1024, 0.0, num_heads=12, qkv_bias=True)\n"
            "    return torch.tensor([p.numel() for p in module.parameters()]).sum()\n")},
        "fails": {"test_gpt2_small_attention_params": "should return an int"},
    },
    "gpt2_counts_the_mask_buffer": {
        "kind": "mistake",
        "cells": {"gpt2_small_attention_params": (
            "def gpt2_small_attention_params():\n"
            "    module = MultiHeadAttention(768, 768, 1024, 0.0, num_heads=12, qkv_bias=True)\n"
            "    return sum(t.numel() for t in module.state_dict().values())\n")},
        "fails": {"test_gpt2_small_attention_params": "buffer"},
    },
    "gpt2_without_qkv_bias": {
        "kind": "mistake",
        "cells": {"gpt2_small_attention_params": (
            "def gpt2_small_attention_params():\n"
            "    return 4 * 768 * 768 + 768\n")},
        "fails": {"test_gpt2_small_attention_params": "counted without biases"},
    },
}

# Rule 3 of the course: every transfer part fails the lesson's code adapted mechanically and the shortcut, and passes
# two correct solutions in other styles.
PROOF = {
    "test_wrapper_to_split": {"lesson": ["wrapper_out_proj_left_random"], "shortcut": ["wrapper_forward_delegated"],
                              "correct": ["einsum_where_other_layer_order", "unflatten_flatten_inplace_mask"]},
    "test_split_to_wrapper": {"lesson": ["back_out_proj_ignored"], "shortcut": ["back_forward_delegated"],
                              "correct": ["einsum_where_other_layer_order", "unflatten_flatten_inplace_mask"]},
}
