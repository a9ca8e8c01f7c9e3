"""Step 10's likely mistakes, shown by the visible tests only when their check fails."""
LIKELY = {
    "softmax-rising": "when the maximum grows from m to m_new, multiply the sum so far by exp(m - m_new)",
    "softmax-blocks": "a block may be shorter than block_size (the last one) or longer than the row: every column must "
                      "be in exactly one block, and each block's terms enter the running sum once",
    "softmax-rows": "subtract each row's own running maximum before exponentiating (amax(dim=-1, keepdim=True)): "
                    "exp(1000) overflows to inf, and a maximum shared by all rows makes the other rows 0 / 0",
    "softmax-low": "start the running maximum at -inf, not 0: exp(-1000 - 0) underflows to 0, and 0 / 0 is nan",
    "softmax-batched": "keep one running maximum and sum per row: amax(dim=-1, keepdim=True) and sum(-1, keepdim=True)",
    "tiled-one-block": "with one block the running maximum never grows: check the scale 1 / sqrt(d), d being the last "
                       "dimension of the queries, and the final division o / l",
    "tiled-blocks": "rescale the running output AND the running sum by exp(m - m_new), and divide by the sum once, at "
                    "the end; the last block may be shorter than block_size",
    "tiled-journey": "scale the scores by 1 / sqrt(d), d being the last dimension of the queries",
    "tiled-large": "large scores overflow exp: subtract the running maximum before exponentiating",
    "tiled-low": "start the running maximum at -inf, not 0: exp of a score far below 0 underflows to 0, and 0 / 0 is nan",
    "causal-one-block": "if the non-causal tests fail too, fix those first; with causal=True, mask the keys whose "
                        "position is greater than the query's (a query may see itself)",
    "causal-blocks": "if the non-causal tests fail too, fix those first; otherwise compare the causal mask of each "
                     "block with the positions: the keys of the block that begins at `start` are tokens start, start "
                     "+ 1, ..., and a query may see the keys up to its own position, itself included",
    "causal-future": "with causal=True a query must not see later keys",
    "memory-largest": "compute the scores of one block of keys at a time, (T, block_size); build each block's causal "
                      "mask from the positions of its keys, not from a (T, T) mask",
    "memory-peak": "the tiles of the blocks already done stay alive (kept in a list, or referenced by a variable): a "
                   "block's scores and exponentials are needed only until the running maximum, sum and output are "
                   "updated; let them go",
    "merge-output": "each worker's output is normalised by its own denominator exp(lse) only: what share of the merged "
                    "denominator is each worker's?",
    "merge-lse": "the merged denominator is the sum of the two",
    "merge-swapped": "the order of the workers does not matter",
    "merge-large": "exp(1000) overflows in float32, so no lse may be exponentiated on its own: what can be subtracted "
                   "from both first?",
    "merge-empty": "zeros and -inf: a query that sees no key (watch -inf - (-inf) = nan, and a constant that a small "
                   "dtype rounds to 0)",
}
