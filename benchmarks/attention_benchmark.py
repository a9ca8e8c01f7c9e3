"""Time every causal multi-head attention implementation of the course on the same input.

The course's modules (steps 6 to 10) come from the answer keys in solutions/, loaded at run time; a thin wrapper
around PyTorch's own `nn.MultiheadAttention` joins them. Each maps (batch, tokens, d_model) to (batch, tokens,
d_model) through the same layers, so the differences are in how the work is organised. A second table times
generation one token at a time, with and without step 9's KV cache; a third, step 11's grouped-query attention with
its cache, from one key/value head per query head down to one for all (with RoPE: another layer, timed on its own); a
fourth, step 12's TinyGPT generating greedily through its cache against re-running the whole text for every token;
with --device cuda, a fifth: step 13's Triton kernel against PyTorch's scaled_dot_product_attention.

    python benchmarks/attention_benchmark.py --size small
    python benchmarks/attention_benchmark.py --size gpt2 --device cuda --dtype bfloat16
"""
import argparse
import ast
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

# step 13's Triton kernel is compiled for the GPU with --device cuda, else run in Triton's interpreter: set before
# anything imports triton (torch._dynamo does)
os.environ.setdefault("TRITON_INTERPRET", "0" if any("cuda" in arg for arg in sys.argv) else "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attention_course.memory import PeakMemory  # noqa: E402


def load_solutions(*steps):
    """The definitions (imports, classes, functions) of the answer keys in solutions/, run at call time.

    No exercise's answer is written in this file, so a lesson or a student importing it reads none.
    """
    namespace = {"__name__": "solutions"}
    for step in steps:
        notebook = json.loads((ROOT / "solutions" / step / f"{step}.ipynb").read_text())
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code" or cell["metadata"].get("nbgrader", {}).get("grade"):
                continue
            tree = ast.parse("".join(cell["source"]))
            tree.body = [node for node in tree.body if isinstance(node, DEFINITIONS)]
            exec(compile(tree, f"<solutions/{step}>", "exec"), namespace)
    return namespace


DEFINITIONS = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef)


class WrapperWithOutProj(nn.Module):
    """The step-6 wrapper followed by an output projection, so that it computes what the other modules compute."""

    def __init__(self, wrapper, d_model):
        super().__init__()
        self.wrapper = wrapper
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.out_proj(self.wrapper(x))


class TiledAttentionLayer(nn.Module):
    """Step 7's four layers around step 10's tiled_attention, causal, one block of keys at a time."""

    def __init__(self, tiled_attention, d_model, num_heads, block_size=64):
        super().__init__()
        self.tiled_attention, self.num_heads, self.block_size = tiled_attention, num_heads, block_size
        self.W_query, self.W_key, self.W_value, self.out_proj = (nn.Linear(d_model, d_model, bias=bias)
                                                                 for bias in (False, False, False, True))

    def forward(self, x):
        by_head = [layer(x).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)
                   for layer in (self.W_query, self.W_key, self.W_value)]
        context_vecs = self.tiled_attention(*by_head, self.block_size, causal=True)
        return self.out_proj(context_vecs.transpose(1, 2).flatten(2))


class TorchMultiheadAttention(nn.Module):
    """PyTorch's nn.MultiheadAttention behind the course's signature, for comparison. Needs d_in == d_out.

    nn.MultiheadAttention has a single `bias` switch for its input and output projections, so with
    qkv_bias=False its out_proj has no bias either.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_in != d_out:
            raise ValueError(f"nn.MultiheadAttention needs d_in ({d_in}) equal to d_out ({d_out})")
        self.context_length = context_length
        self.attention = nn.MultiheadAttention(d_out, num_heads, dropout=dropout, bias=qkv_bias, batch_first=True)
        # nn.MultiheadAttention's boolean attn_mask is True where attention is BLOCKED (SDPA's is the opposite).
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

    def forward(self, x):
        num_tokens = x.shape[1]
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

WRAPPER = "wrapper (step 6) + out_proj"
TILED = "tiled, block 64 (step 10)"


def build_implementations(d_model, num_heads, context_length, dropout=0.0):
    """One module per implementation, keyed by display name, each mapping (b, T, d_model) to (b, T, d_model) with
    the same layers: three projections, causal attention in every head, and an output projection."""
    solutions = load_solutions("07_weight_split_mha", "08_efficient_attention", "10_flash_attention")
    head_dim = d_model // num_heads
    args = (d_model, d_model, context_length, dropout, num_heads)
    # Each wrapper head is head_dim wide so that the concatenation is d_model wide like the others.
    wrapper = solutions["MultiHeadAttentionWrapper"](d_model, head_dim, context_length, dropout, num_heads)
    return {
        WRAPPER: WrapperWithOutProj(wrapper, d_model),
        "split weights (step 7)": solutions["MultiHeadAttention"](*args),
        "fused QKV (step 8)": solutions["MultiHeadAttentionCombinedQKV"](*args),
        "SDPA (step 8)": solutions["MultiHeadAttentionSDPA"](*args),
        "nn.MultiheadAttention": TorchMultiheadAttention(*args),
        TILED: TiledAttentionLayer(solutions["tiled_attention"], d_model, num_heads),
    }


class Timing(NamedTuple):
    name: str
    forward_ms: float
    forward_backward_ms: Optional[float]
    peak_mib: float  # the most memory held at once by the tensors one forward pass creates

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
    return [Timing(name, forward_ms[name], forward_backward_ms[name], peak_mib(module, x))
            for name, module in modules.items()]


def peak_mib(module, x):
    with torch.no_grad(), PeakMemory() as memory:
        module(x)
    return memory.peak_bytes / 2 ** 20


def format_table(rows):
    """The timings side by side; 'x' columns are speed-ups relative to the wrapper (higher is faster)."""
    baseline = {row.name: row for row in rows}.get(WRAPPER, rows[0])
    width = max(len(row.name) for row in rows)
    header = f"{'implementation':<{width}}  {'forward ms':>10}  {'x':>5}"
    if baseline.forward_backward_ms is not None:
        header += f"  {'fwd+bwd ms':>10}  {'x':>5}"
    lines = [header + f"  {'peak MiB':>8}"]
    for row in rows:
        line = f"{row.name:<{width}}  {row.forward_ms:>10.2f}  {baseline.forward_ms / row.forward_ms:>5.2f}"
        if row.forward_backward_ms is not None:
            speedup = baseline.forward_backward_ms / row.forward_backward_ms
            line += f"  {row.forward_backward_ms:>10.2f}  {speedup:>5.2f}"
        lines.append(line + f"  {row.peak_mib:>8.1f}")
    return "\n".join(lines)


def generation_ms_per_token(size, device="cpu", dtype=torch.float32, seed=123):
    """Milliseconds per token of feeding one sequence token by token, as generation does: step 7's module re-runs
    the whole sequence so far for every token; step 9's keeps the keys and values (KV cache) and runs the new token
    only. Both give the same outputs. Returns {name: ms per token}, and the largest difference of the last outputs."""
    solutions = load_solutions("07_weight_split_mha", "09_kv_cache")
    torch.manual_seed(seed)
    args = (size.d_model, size.d_model, size.num_tokens, 0.0, size.num_heads)
    full = solutions["MultiHeadAttention"](*args).to(device=device, dtype=dtype).eval()
    cached = solutions["MultiHeadAttentionWithCache"](*args).to(device=device, dtype=dtype).eval()
    cached.load_state_dict(full.state_dict(), strict=False)
    x = torch.randn(1, size.num_tokens, size.d_model, device=device, dtype=dtype)
    last = {}

    def without_cache():
        for end in range(1, size.num_tokens + 1):
            last["without"] = full(x[:, :end])[:, -1]

    def with_cache():
        cached.reset_cache()
        for end in range(1, size.num_tokens + 1):
            last["with"] = cached(x[:, end - 1:end], use_cache=True)[:, -1]

    with torch.no_grad():
        ms = median_ms_interleaved({"step 7, recompute all": without_cache, "KV cache (step 9)": with_cache},
                                   repeats=3, warmup=1, device=torch.device(device))
    difference = (last["without"] - last["with"]).abs().max().item()
    return {name: total / size.num_tokens for name, total in ms.items()}, difference


def format_generation(ms_per_token, num_tokens):
    baseline = next(iter(ms_per_token.values()))
    lines = [f"{'generating ' + str(num_tokens) + ' tokens':<28}  {'ms/token':>8}  {'x':>5}"]
    lines += [f"{name:<28}  {ms:>8.3f}  {baseline / ms:>5.2f}" for name, ms in ms_per_token.items()]
    return "\n".join(lines)


def gqa_generation(size, device="cpu", dtype=torch.float32, seed=123):
    """Step 11's grouped-query attention feeding one sequence token by token through its KV cache, from num_heads
    key/value heads (multi-head) down to one (multi-query). Returns rows (name, ms per token, MiB the cache holds
    after the sequence) and the largest difference between the cached outputs and one pass without the cache."""
    gqa = load_solutions("11_rope_gqa")["GroupedQueryAttention"]
    torch.manual_seed(seed)
    x = torch.randn(1, size.num_tokens, size.d_model, device=device, dtype=dtype)
    kv_heads = sorted({kv for kv in (size.num_heads, size.num_heads // 4, 1) if kv and size.num_heads % kv == 0},
                      reverse=True)
    args = (size.d_model, size.d_model, size.num_tokens, 0.0, size.num_heads)
    modules = {f"GQA, {kv} kv head{'s' if kv > 1 else ''} (step 11)":
               gqa(*args, kv).to(device=device, dtype=dtype).eval() for kv in kv_heads}
    outputs = {}

    def token_by_token(name, module):
        def step():
            module.reset_cache()
            outputs[name] = [module(x[:, end - 1:end], use_cache=True) for end in range(1, size.num_tokens + 1)]
        return step

    with torch.no_grad():
        ms = median_ms_interleaved({name: token_by_token(name, module) for name, module in modules.items()},
                                   repeats=3, warmup=1, device=torch.device(device))
        difference = max((torch.cat(outputs[name], dim=1) - module(x)).abs().max().item()
                         for name, module in modules.items())
    rows = [(name, ms[name] / size.num_tokens,
             sum(t.numel() * t.element_size() for t in (module.cache_keys, module.cache_values)) / 2 ** 20)
            for name, module in modules.items()]
    return rows, difference


def format_gqa_generation(rows, num_tokens):
    lines = [f"{'generating ' + str(num_tokens) + ' tokens':<28}  {'ms/token':>8}  {'cache MiB':>9}"]
    lines += [f"{name:<28}  {ms:>8.3f}  {mib:>9.3f}" for name, ms, mib in rows]
    return "\n".join(lines)


def tiny_gpt_generation(size, device="cpu", dtype=torch.float32, seed=123, vocab_size=65, num_layers=2):
    """Step 12's TinyGPT (random weights) generating greedily, top_k=1, with the answer key's generate through its KV
    cache, against a loop that runs the model on the whole text so far for every token. Returns {name: ms per token}
    and whether both gave the same ids."""
    solutions = load_solutions("12_tiny_gpt")
    torch.manual_seed(seed)
    model = solutions["TinyGPT"](vocab_size, size.d_model, num_layers, size.num_heads, size.num_tokens, 0.0)
    model = model.to(device=device, dtype=dtype).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    new_tokens = size.num_tokens - 1
    ids = {}

    def recompute_all():
        text = prompt
        for _ in range(new_tokens):
            text = torch.cat([text, model(text)[:, -1:].argmax(-1)], dim=1)
        ids["recompute"] = text

    def through_the_cache():
        ids["cache"] = solutions["generate"](model, prompt, new_tokens, top_k=1)

    with torch.no_grad():
        ms = median_ms_interleaved({"TinyGPT, recompute all": recompute_all,
                                    "TinyGPT, KV cache (step 12)": through_the_cache},
                                   repeats=3, warmup=1, device=torch.device(device))
    return {name: total / new_tokens for name, total in ms.items()}, torch.equal(ids["recompute"], ids["cache"])


def triton_forward(size, device="cpu", repeats=None, seed=123):
    """Step 13's Triton kernel against F.scaled_dot_product_attention, causal, on (batch, heads, tokens, head_dim):
    ({name: median ms}, largest difference). On a CPU the kernel runs in Triton's interpreter: a check, not a timing."""
    kernel = load_solutions("13_attention_backward")["flash_attention_forward_triton"]
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    shape = (size.batch_size, size.num_heads, size.num_tokens, size.d_model // size.num_heads)
    q, k, v = (torch.randn(*shape, generator=generator).to(device) for _ in range(3))
    steps = {"step 13's Triton kernel": lambda: kernel(q, k, v, True),
             "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
    difference = (steps["step 13's Triton kernel"]() - steps["F.scaled_dot_product_attention"]()).abs().max().item()
    ms = median_ms_interleaved(steps, repeats or size.repeats, warmup=1, device=device)
    return ms, difference


def format_triton(ms, shape_text):
    lines = [f"causal attention forward, {shape_text}, float32", f"{'implementation':34} {'ms':>9}"]
    lines += [f"{name:34} {value:9.2f}" for name, value in ms.items()]
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
    ms_per_token, difference = generation_ms_per_token(size, device=args.device, dtype=getattr(torch, args.dtype))
    print()
    print(format_generation(ms_per_token, size.num_tokens))
    print(f"largest difference of the last token's output, with and without the cache: {difference:.2g}")
    rows, difference = gqa_generation(size, device=args.device, dtype=getattr(torch, args.dtype))
    print()
    print(format_gqa_generation(rows, size.num_tokens))
    print(f"largest difference of the cached outputs from one pass without the cache: {difference:.2g}")
    ms_per_token, same = tiny_gpt_generation(size, device=args.device, dtype=getattr(torch, args.dtype))
    print()
    print(format_generation(ms_per_token, size.num_tokens - 1))
    print(f"greedy ids with and without the cache the same: {same}")
    print()
    if args.device == "cuda":
        ms, difference = triton_forward(size, device=args.device, repeats=args.repeats)
        print(format_triton(ms, f"{size.num_heads} heads of {size.d_model // size.num_heads}"))
        print(f"largest difference of the kernel's output from PyTorch's: {difference:.2g}")
    else:
        print("step 13's Triton kernel is timed with --device cuda only: on a CPU it runs in Triton's interpreter, "
              "which checks a kernel but is far too slow to time")


if __name__ == "__main__":
    main()
