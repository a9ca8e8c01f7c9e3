"""The course's plots, so that every lesson draws attention the same way."""
import matplotlib.pyplot as plt
import torch


def plot_attention(weights, tokens, title="attention weights", ax=None, query_tokens=None, fmt=".2f"):
    """Heatmap of a (T_query, T_key) matrix, rows = queries, columns = keys, each cell labelled with its value."""
    weights = torch.as_tensor(weights).detach().float()
    if ax is None:
        _, ax = plt.subplots(figsize=(0.9 * len(tokens) + 1.5, 0.8 * weights.shape[0] + 1.2))
    finite = weights[torch.isfinite(weights)]
    ax.imshow(weights.nan_to_num(posinf=0.0, neginf=0.0), cmap="Blues",
              vmin=min(0.0, finite.min().item()) if finite.numel() else 0.0)
    ax.set_xticks(range(len(tokens)), tokens, rotation=45, ha="right")
    ax.set_yticks(range(weights.shape[0]), query_tokens or tokens)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    high = finite.max().item() if finite.numel() else 1.0
    for row in range(weights.shape[0]):
        for col in range(weights.shape[1]):
            value = weights[row, col].item()
            color = "white" if value > 0.6 * high else "black"
            ax.text(col, row, format(value, fmt), ha="center", va="center", color=color, fontsize=8)
    return ax


def plot_bars(labels, values, ylabel, title, ax=None, value_fmt=".2f"):
    """Bar chart with each bar's value written on top: for comparisons such as benchmark timings."""
    if ax is None:
        _, ax = plt.subplots(figsize=(1.4 * len(labels) + 2, 3.5))
    bars = ax.bar(labels, values, color="tab:blue")
    ax.bar_label(bars, [format(v, value_fmt) for v in values], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=20)
    return ax
