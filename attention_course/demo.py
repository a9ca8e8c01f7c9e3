"""Attention seen learning: a tiny model trained on a task that only attention can solve, for the lessons.

The task: a random sequence of tokens; at every position the model must name the token `lag` places back (lag 1:
the previous token). One causal attention layer reads the sequence; a linear read-out names the token from what the
layer returns, with no residual path, so the answer must come through attention. A head that solves the task
learns to look `lag` tokens back. With two lags and two heads, each head takes one lag.

The attention layer is PyTorch's own `nn.MultiheadAttention`, which can return its weights; nothing here is an
exercise's answer.

    model, losses = train_lookback(lags=(1,), num_heads=1)
    weights = attention_maps(model, example_tokens())   # (num_heads, T, T)
"""
import contextlib
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class LookbackModel(nn.Module):
    """Token and position embeddings, one causal multi-head attention layer, one read-out per lag."""

    def __init__(self, vocab_size, num_tokens, d_model, num_heads, num_lags, causal=True):
        super().__init__()
        self.vocab_size, self.num_lags = vocab_size, num_lags
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(num_tokens, d_model)
        self.attention = nn.MultiheadAttention(d_model, num_heads, bias=False, batch_first=True)
        self.readout = nn.Linear(d_model, num_lags * vocab_size)
        # nn.MultiheadAttention's convention, as in step 04: True = blocked (a future token)
        self.register_buffer("blocked", torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1 if causal else
                                                                                                   num_tokens))

    def forward(self, tokens):
        """tokens: (b, T) ints. Returns logits (b, T, num_lags, vocab_size) and weights (b, num_heads, T, T)."""
        num_tokens = tokens.shape[1]
        positions = torch.arange(num_tokens, device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        mixed, weights = self.attention(x, x, x, attn_mask=self.blocked[:num_tokens, :num_tokens],
                                        need_weights=True, average_attn_weights=False)
        logits = self.readout(mixed).view(*tokens.shape, self.num_lags, self.vocab_size)
        return logits, weights


def lookback_batch(batch_size, num_tokens, vocab_size, lags, generator):
    """Random tokens (b, T) and targets (b, T, len(lags)): the token `lag` places back, -100 (ignored) where none."""
    tokens = torch.randint(vocab_size, (batch_size, num_tokens), generator=generator)
    targets = torch.full((batch_size, num_tokens, len(lags)), -100)
    for i, lag in enumerate(lags):
        targets[:, lag:, i] = tokens[:, :-lag]
    return tokens, targets


@contextlib.contextmanager
def one_thread_deterministic():
    """One CPU thread and deterministic kernels, so the losses do not depend on the machine's number of cores."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def train_lookback(lags=(1,), num_heads=1, causal=True, steps=200, vocab_size=8, num_tokens=8, d_model=16,
                   batch_size=64, lr=0.003, seed=123, report_every=25):
    """Train a LookbackModel from seed `seed`, printing the loss (to one decimal) every `report_every` steps. Returns
    the model (in eval mode) and the loss of every step."""
    with one_thread_deterministic():
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        model = LookbackModel(vocab_size, num_tokens, d_model, num_heads, len(lags), causal)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        losses = []
        for step in range(steps):
            tokens, targets = lookback_batch(batch_size, num_tokens, vocab_size, lags, generator)
            logits, _ = model(tokens)
            loss = F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1), ignore_index=-100)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if report_every and (step % report_every == 0 or step == steps - 1):
                print(f"step {step:4d}   loss {loss.item():.1f}")
    return model.eval(), losses


def untrained_lookback(lags=(1,), num_heads=1, causal=True, vocab_size=8, num_tokens=8, d_model=16, seed=123):
    """The same model as train_lookback builds, before any training step."""
    torch.manual_seed(seed)
    return LookbackModel(vocab_size, num_tokens, d_model, num_heads, len(lags), causal).eval()


def example_tokens(num_tokens=8, vocab_size=8, seed=0):
    """One fixed random sequence (1, T) to look at the attention of a model."""
    return torch.randint(vocab_size, (1, num_tokens), generator=torch.Generator().manual_seed(seed))


def attention_maps(model, tokens):
    """The attention weights (num_heads, T, T) of `model` on one sequence `tokens` (1, T)."""
    with torch.no_grad():
        _, weights = model(tokens)
    return weights[0]


def accuracy(model, lags, num_tokens=8, vocab_size=8, batch_size=512, seed=1):
    """Share of the positions with a target where the model names the right token, per lag, on fresh sequences."""
    tokens, targets = lookback_batch(batch_size, num_tokens, vocab_size, lags, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits, _ = model(tokens)
    right = (logits.argmax(dim=-1) == targets) & (targets != -100)
    return [(right[..., i].sum() / (targets[..., i] != -100).sum()).item() for i in range(len(lags))]


@contextlib.contextmanager
def quiet_stderr():
    """Silence what C++ code writes to stderr (the profiler's start and stop lines) inside the block."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
