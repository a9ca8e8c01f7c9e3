"""Time every causal multi-head attention implementation of the course on the same input.

The five modules below follow the course's contract (steps 5 to 8); a thin wrapper around PyTorch's own
`nn.MultiheadAttention` joins them for comparison. Each maps (batch, tokens, d_model) to (batch, tokens, d_model).

    python benchmarks/attention_benchmark.py --size small
    python benchmarks/attention_benchmark.py --size gpt2 --device cuda --dtype bfloat16
"""
import argparse
import statistics
import time
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def _check_divisible(d_out, num_heads):
    if d_out % num_heads != 0:
        raise ValueError(f"d_out ({d_out}) must be divisible by num_heads ({num_heads})")


def _check_num_tokens(num_tokens, context_length):
    if num_tokens > context_length:
        raise ValueError(f"{num_tokens} tokens exceed context_length ({context_length})")


def _causal_mask(context_length):
    """Bool (context_length, context_length), True above the diagonal: the future each query must not see."""
    return torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1)


class CausalAttention(nn.Module):
    """One causal attention head (step 5)."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", _causal_mask(context_length))

    def forward(self, x):
        num_tokens = x.shape[1]
        _check_num_tokens(num_tokens, self.context_length)
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        return attn_weights @ values


class MultiHeadAttentionWrapper(nn.Module):
    """Independent CausalAttention heads run one after another, outputs concatenated (step 6): d_out * num_heads wide."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class MultiHeadAttention(nn.Module):
    """All heads from one projection per query, key and value, split into heads by reshaping (step 7)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        _check_divisible(d_out, num_heads)
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", _causal_mask(context_length))

    def forward(self, x):
        batch_size, num_tokens, _ = x.shape
        _check_num_tokens(num_tokens, self.context_length)

        def split_heads(t):
            return t.view(batch_size, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

        queries, keys, values = split_heads(self.W_query(x)), split_heads(self.W_key(x)), split_heads(self.W_value(x))
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vecs = (attn_weights @ values).transpose(1, 2).reshape(batch_size, num_tokens, self.d_out)
        return self.out_proj(context_vecs)


class MultiHeadAttentionCombinedQKV(nn.Module):
    """MultiHeadAttention with the three projections fused into one matrix multiplication (step 8)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        _check_divisible(d_out, num_heads)
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.context_length = context_length
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", _causal_mask(context_length))

    def forward(self, x):
        batch_size, num_tokens, _ = x.shape
        _check_num_tokens(num_tokens, self.context_length)
        # (b, T, 3 * d_out) -> (3, b, H, T, head_dim): query, key, value in the order of qkv's output rows.
        qkv = self.qkv(x).view(batch_size, num_tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        queries, keys, values = qkv.unbind(0)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vecs = (attn_weights @ values).transpose(1, 2).reshape(batch_size, num_tokens, self.d_out)
        return self.out_proj(context_vecs)


class MultiHeadAttentionSDPA(nn.Module):
    """MultiHeadAttention whose attention core is PyTorch's fused scaled_dot_product_attention (step 8)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        _check_divisible(d_out, num_heads)
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.context_length = context_length
        self.dropout_p = dropout
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        batch_size, num_tokens, _ = x.shape
        _check_num_tokens(num_tokens, self.context_length)

        def split_heads(t):
            return t.view(batch_size, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

        queries, keys, values = split_heads(self.W_query(x)), split_heads(self.W_key(x)), split_heads(self.W_value(x))
        # SDPA applies dropout whenever dropout_p > 0: it does not know about train/eval mode.
        context_vecs = F.scaled_dot_product_attention(
            queries, keys, values, dropout_p=self.dropout_p if self.training else 0.0, is_causal=True
        )
        context_vecs = context_vecs.transpose(1, 2).reshape(batch_size, num_tokens, self.d_out)
        return self.out_proj(context_vecs)


class TorchMultiheadAttention(nn.Module):
    """PyTorch's nn.MultiheadAttention behind the course's signature, for comparison. Needs d_in == d_out.

    nn.MultiheadAttention has a single `bias` switch for its input and output projections, so with
    qkv_bias=False its out_proj has no bias either.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_in != d_out:
            raise ValueError(f"nn.MultiheadAttention needs d_in ({d_in}) equal to d_out ({d_out})")
        _check_divisible(d_out, num_heads)
        self.context_length = context_length
        self.attention = nn.MultiheadAttention(d_out, num_heads, dropout=dropout, bias=qkv_bias, batch_first=True)
        # nn.MultiheadAttention's boolean attn_mask is True where attention is BLOCKED (SDPA's is the opposite).
        self.register_buffer("mask", _causal_mask(context_length))

    def forward(self, x):
        num_tokens = x.shape[1]
        _check_num_tokens(num_tokens, self.context_length)
        context_vecs, _ = self.attention(
            x, x, x, attn_mask=self.mask[:num_tokens, :num_tokens], need_weights=False
        )
        return context_vecs


@dataclass(frozen=True)
class BenchmarkSize:
    batch_size: int
    num_tokens: int
    d_model: int
    num_heads: int
    repeats: int


SIZES = {
    "small": BenchmarkSize(batch_size=8, num_tokens=128, d_model=256, num_heads=4, repeats=10),
    # GPT-2 small's attention layer; one sequence keeps the CPU run short.
    "gpt2": BenchmarkSize(batch_size=1, num_tokens=1024, d_model=768, num_heads=12, repeats=5),
}

WRAPPER = "wrapper (step 6)"


def build_implementations(d_model, num_heads, context_length, dropout=0.0):
    """One module per implementation, keyed by display name, each mapping (b, T, d_model) to (b, T, d_model)."""
    head_dim = d_model // num_heads
    args = (d_model, d_model, context_length, dropout, num_heads)
    return {
        # Each wrapper head is head_dim wide so that the concatenation is d_model wide like the others.
        WRAPPER: MultiHeadAttentionWrapper(d_model, head_dim, context_length, dropout, num_heads),
        "split weights (step 7)": MultiHeadAttention(*args),
        "fused QKV": MultiHeadAttentionCombinedQKV(*args),
        "SDPA": MultiHeadAttentionSDPA(*args),
        "nn.MultiheadAttention": TorchMultiheadAttention(*args),
    }


class Timing(NamedTuple):
    name: str
    forward_ms: float
    forward_backward_ms: Optional[float]


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_ms(step, device):
    start = time.perf_counter()
    step()
    _synchronize(device)
    return 1000 * (time.perf_counter() - start)


def median_ms_interleaved(steps, repeats, warmup, device):
    """{name: median ms} of each step; the steps take turns so that a burst of load elsewhere hits them all alike."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    _synchronize(device)
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            times[name].append(_time_ms(step, device))
    return {name: statistics.median(samples) for name, samples in times.items()}


def _forward_step(module, x):
    def step():
        module.eval()
        with torch.no_grad():
            module(x)
    return step


def _forward_backward_step(module, x, grad_output):
    def step():
        module.train()
        module.zero_grad(set_to_none=True)
        module(x).backward(grad_output)
    return step


def benchmark(size="small", device="cpu", backward=False, implementations=None, dtype=torch.float32,
              repeats=None, warmup=2, seed=123):
    """Median milliseconds of each implementation on one random batch: a list of Timing rows.

    size: a key of SIZES or a BenchmarkSize. implementations: {name: module}; by default all of
    build_implementations. Forward runs in eval mode without autograd; with backward=True, forward plus
    backward is also timed in training mode (dropout is 0, so both modes compute the same).
    """
    size = SIZES[size] if isinstance(size, str) else size
    device = torch.device(device)
    repeats = size.repeats if repeats is None else repeats
    torch.manual_seed(seed)
    if implementations is None:
        implementations = build_implementations(size.d_model, size.num_heads, context_length=size.num_tokens)
    modules = {name: module.to(device=device, dtype=dtype) for name, module in implementations.items()}
    x = torch.randn(size.batch_size, size.num_tokens, size.d_model, device=device, dtype=dtype)
    grad_output = torch.randn_like(x)

    forward_ms = median_ms_interleaved(
        {name: _forward_step(module, x) for name, module in modules.items()}, repeats, warmup, device)
    forward_backward_ms = dict.fromkeys(modules)
    if backward:
        forward_backward_ms = median_ms_interleaved(
            {name: _forward_backward_step(module, x, grad_output) for name, module in modules.items()},
            repeats, warmup, device)
    for module in modules.values():
        module.eval()
    return [Timing(name, forward_ms[name], forward_backward_ms[name]) for name in modules]


def format_table(rows):
    """The timings side by side; 'x' columns are speed-ups relative to the wrapper (higher is faster)."""
    baseline = {row.name: row for row in rows}.get(WRAPPER, rows[0])
    width = max(len(row.name) for row in rows)
    header = f"{'implementation':<{width}}  {'forward ms':>10}  {'x':>5}"
    if baseline.forward_backward_ms is not None:
        header += f"  {'fwd+bwd ms':>10}  {'x':>5}"
    lines = [header]
    for row in rows:
        line = f"{row.name:<{width}}  {row.forward_ms:>10.2f}  {baseline.forward_ms / row.forward_ms:>5.2f}"
        if row.forward_backward_ms is not None:
            speedup = baseline.forward_backward_ms / row.forward_backward_ms
            line += f"  {row.forward_backward_ms:>10.2f}  {speedup:>5.2f}"
        lines.append(line)
    return "\n".join(lines)


def describe_device(device):
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {torch.get_num_threads()} threads"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="flash attention on a GPU needs bfloat16 or float16")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--repeats", type=int, help="timed runs per implementation (default: per size)")
    parser.add_argument("--forward-only", action="store_true", help="skip the forward+backward timings")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device available")
    if args.threads:
        torch.set_num_threads(args.threads)

    size = SIZES[args.size]
    rows = benchmark(size, device=args.device, backward=not args.forward_only, dtype=getattr(torch, args.dtype),
                     repeats=args.repeats)
    print(f"device: {describe_device(args.device)}, torch {torch.__version__}, {args.dtype}")
    print(f"size: {args.size} (batch {size.batch_size}, {size.num_tokens} tokens, d_model {size.d_model}, "
          f"{size.num_heads} heads), median of {args.repeats or size.repeats} runs")
    print(format_table(rows))


if __name__ == "__main__":
    main()
