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


# Schematic pictures of the mechanism. Each function draws one picture and returns its Figure; nothing is read from
# or written to disk.

HEAD_COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:red", "tab:brown"]


def _box(ax, x, y, width, height, text, color="white", fontsize=9, text_color="black"):
    ax.add_patch(plt.Rectangle((x, y), width, height, facecolor=color, edgecolor="black", linewidth=1))
    ax.text(x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=fontsize, color=text_color)


def _arrow(ax, start, end, text=None, fontsize=8):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="black", linewidth=1))
    if text:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12, text, ha="center", va="bottom",
                fontsize=fontsize)


def _blank_axes(figsize, xlim, ylim):
    fig, ax = plt.subplots(figsize=figsize)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    return fig, ax


def draw_qkv_flow():
    """Self-attention as a data flow: the input makes queries, keys and values; scores, softmax, weighted sum."""
    fig, ax = _blank_axes((11, 4.4), (0, 11), (0, 4.8))
    _box(ax, 0.1, 1.7, 1.3, 1.0, "inputs\n(T, d_in)", "#e8e8e8")
    rows = [(3.2, "W_query", "queries\n(T, d_k)", "#cfe2f3"), (1.7, "W_key", "keys\n(T, d_k)", "#d9ead3"),
            (0.2, "W_value", "values\n(T, d_v)", "#fce5cd")]
    for y, weight, result, color in rows:
        _arrow(ax, (1.4, 2.2), (2.0, y + 0.5))
        _box(ax, 2.0, y, 1.2, 1.0, f"@ {weight}\n(d_in, d)", "white")
        _arrow(ax, (3.2, y + 0.5), (3.6, y + 0.5))
        _box(ax, 3.6, y, 1.3, 1.0, result, color)
    _arrow(ax, (4.9, 3.7), (5.6, 2.9))
    _arrow(ax, (4.9, 2.2), (5.6, 2.5))
    _box(ax, 5.6, 2.2, 1.6, 1.0, "scores\nq @ k^T / sqrt(d_k)\n(T, T)", "#f4cccc", fontsize=8)
    _arrow(ax, (7.2, 2.7), (7.7, 2.7))
    ax.text(7.45, 3.35, "softmax\nover keys", ha="center", va="bottom", fontsize=8)
    _box(ax, 7.7, 2.2, 1.3, 1.0, "weights\n(T, T)\nrows sum to 1", "#f4cccc", fontsize=8)
    _arrow(ax, (8.35, 2.2), (8.35, 1.2))
    _arrow(ax, (4.9, 0.7), (7.7, 0.7))
    _box(ax, 7.7, 0.2, 1.3, 1.0, "weights\n@ values", "white", fontsize=8)
    _arrow(ax, (9.0, 0.7), (9.5, 0.7))
    _box(ax, 9.5, 0.2, 1.4, 1.0, "context\nvectors\n(T, d_v)", "#d9d2e9", fontsize=8)
    ax.text(5.5, 4.75, "Queries ask, keys answer, values are handed over: one row of the weights per query",
            ha="center", va="top", fontsize=10)
    return fig


def draw_causal_mask(tokens):
    """The causal mask: each query (row) may attend to itself and earlier keys; later keys are blocked."""
    num_tokens = len(tokens)
    fig, ax = plt.subplots(figsize=(0.75 * num_tokens + 2.5, 0.65 * num_tokens + 1.5))
    blocked = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
    ax.imshow(blocked.float().numpy(), cmap="Greys", vmin=-0.6, vmax=1.6)
    for row in range(num_tokens):
        for col in range(num_tokens):
            ax.text(col, row, "blocked" if blocked[row, col] else "sees", ha="center", va="center", fontsize=7,
                    color="white" if blocked[row, col] else "black")
    ax.plot([-0.5 + i for i in range(num_tokens + 1) for _ in (0, 1)][1:-1],
            [-0.5 + i for i in range(num_tokens) for _ in (0, 1)], color="tab:red", linewidth=2)
    ax.set_xticks(range(num_tokens), tokens, rotation=45, ha="right")
    ax.set_yticks(range(num_tokens), tokens)
    ax.set_xlabel("key (a token that may be looked at)")
    ax.set_ylabel("query (the token looking)")
    ax.set_title("Causal mask: True above the diagonal = blocked (a later token)")
    fig.tight_layout()
    return fig


def draw_heads_split_merge(num_tokens=3, num_heads=2, head_dim=3):
    """Split a (T, d_out) projection into heads by columns, attend per head, merge the heads back side by side."""
    d_out = num_heads * head_dim
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), gridspec_kw={"width_ratios": [d_out, num_heads * head_dim + 1,
                                                                                      d_out]})
    for ax in axes:
        ax.axis("off")
        ax.set_aspect("equal")

    def grid(ax, x0, columns, color_of_column, label):
        for row in range(num_tokens):
            for col in range(columns):
                ax.add_patch(plt.Rectangle((x0 + col, num_tokens - 1 - row), 1, 1, facecolor=color_of_column(col),
                                           edgecolor="white", linewidth=1.5, alpha=0.85))
        ax.text(x0 + columns / 2, num_tokens + 0.25, label, ha="center", va="bottom", fontsize=9)

    def head_color(col):
        return HEAD_COLORS[(col // head_dim) % len(HEAD_COLORS)]

    grid(axes[0], 0, d_out, head_color, f"W_query(x): (T, d_out) = ({num_tokens}, {d_out})")
    axes[0].set_xlim(-0.2, d_out + 0.2)
    for h in range(num_heads):
        grid(axes[1], h * (head_dim + 1 / max(num_heads - 1, 1)), head_dim, lambda col, h=h: HEAD_COLORS[h],
             f"head {h}")
    axes[1].text((num_heads * head_dim + 1) / 2, -0.6, f"view + transpose: (num_heads, T, head_dim) = ({num_heads}, "
                 f"{num_tokens}, {head_dim})\neach head attends\nwith its own columns", ha="center", va="top", fontsize=9)
    axes[1].set_xlim(-0.2, num_heads * head_dim + 1.2)
    grid(axes[2], 0, d_out, head_color, f"merged: (T, d_out) = ({num_tokens}, {d_out})")
    axes[2].text(d_out / 2, -0.6, "transpose + reshape:\nheads side by side again;\nout_proj then mixes the colours",
                 ha="center", va="top", fontsize=9)
    axes[2].set_xlim(-0.2, d_out + 0.2)
    for ax in axes:
        ax.set_ylim(-1.8, num_tokens + 0.9)
    for ax_from, ax_to in ((axes[0], axes[1]), (axes[1], axes[2])):
        fig.add_artist(plt.matplotlib.patches.ConnectionPatch(
            xyA=(1.02, 0.5), coordsA=ax_from.transAxes, xyB=(-0.02, 0.5), coordsB=ax_to.transAxes,
            arrowstyle="->", linewidth=1.5))
    fig.suptitle("Heads split from one projection, and merged back", fontsize=11)
    return fig


def draw_kv_cache(t_q=2, t_k=5, num_steps=4):
    """Left: the bottom-right causal mask of t_q new queries against t_k keys. Right: a KV cache growing by one key
    and value per generated token."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [t_k, num_steps + 3]})
    blocked = torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q + 1)
    axes[0].imshow(blocked.float().numpy(), cmap="Greys", vmin=-0.6, vmax=1.6)
    for row in range(t_q):
        for col in range(t_k):
            axes[0].text(col, row, "blocked" if blocked[row, col] else "sees", ha="center", va="center", fontsize=8,
                         color="white" if blocked[row, col] else "black")
    axes[0].set_xticks(range(t_k), [f"key {j}" + (" (kept)" if j < t_k - t_q else " (new)") for j in range(t_k)],
                       rotation=45, ha="right")
    axes[0].set_yticks(range(t_q), [f"new query {i}\n= token {t_k - t_q + i}" for i in range(t_q)])
    axes[0].set_title(f"bottom-right mask, T_q = {t_q}, T_k = {t_k}")
    ax = axes[1]
    ax.axis("off")
    for step in range(num_steps):
        kept = t_k - t_q + step
        y = num_steps - 1 - step
        ax.text(-0.3, y + 0.4, f"token {kept}", ha="right", va="center", fontsize=9)
        for j in range(kept + 1):
            new = j == kept
            ax.add_patch(plt.Rectangle((j, y), 0.9, 0.8, facecolor="tab:orange" if new else "tab:blue",
                                       alpha=0.9 if new else 0.5, edgecolor="black", linewidth=0.8))
            ax.text(j + 0.45, y + 0.4, "k,v", ha="center", va="center", fontsize=7)
    ax.set_xlim(-2.2, t_k - t_q + num_steps + 0.5)
    ax.set_ylim(-1.2, num_steps + 0.4)
    ax.text(-2.1, -0.7, "blue: keys and values kept in the cache;  orange: the new token's, appended.\n"
            "Each new query attends to the whole row: no mask is needed for a single new token.",
            ha="left", va="center", fontsize=8)
    ax.set_title("the cache grows by one key and value per generated token")
    fig.tight_layout()
    return fig


def draw_tiles(num_tokens=8, block_size=2):
    """Attention tile by tile: one block of queries stays in fast memory while the blocks of keys and values pass
    through it, one after the other; the (T, T) matrix is never stored."""
    num_blocks = -(-num_tokens // block_size)
    fig, axes = plt.subplots(1, num_blocks, figsize=(3 * num_blocks, 4.3))
    query_block = num_blocks - 1
    for j, ax in enumerate(axes):
        ax.set_xlim(-0.5, num_tokens - 0.5)
        ax.set_ylim(num_tokens - 0.5, -0.5)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        for row_block in range(num_blocks):
            for col_block in range(num_blocks):
                if row_block == query_block and col_block < j:
                    color = "#b7d7a8"  # done: folded into the running m, l and o
                elif row_block == query_block and col_block == j:
                    color = "tab:orange"  # in fast memory now
                else:
                    color = "#f0f0f0"
                ax.add_patch(plt.Rectangle((col_block * block_size - 0.5, row_block * block_size - 0.5),
                                           block_size, block_size, facecolor=color, edgecolor="white", linewidth=2))
        ax.set_title(f"keys and values {j * block_size}-{min((j + 1) * block_size, num_tokens) - 1}", fontsize=9)
        last = min((j + 1) * block_size, num_tokens)
        first_query = query_block * block_size
        ax.set_xlabel(f"in fast memory: queries {first_query}-{num_tokens - 1},\nkeys and values {j * block_size}-"
                      f"{last - 1}, and m, l, o", fontsize=8)
        if j == 0:
            ax.set_ylabel("queries")
    fig.suptitle(f"One block of {block_size} queries in fast memory (SRAM), blocks of keys and values streaming past: "
                 "orange = the tile computed now,\ngreen = tiles already folded into the running maximum m, sum l "
                 "and output o, grey = tiles of the other blocks of queries, which run the same loop", fontsize=9)
    fig.tight_layout()
    return fig
