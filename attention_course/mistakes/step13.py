"""Likely mistakes of step 13's visible tests (the backward pass), shown only when their check fails."""

LIKELY = {
    "gradients": "compare each gradient with the formulas above, one line at a time: d_v, then dP, D, dS, d_q and d_k",
    "gradients-causal": "the backward uses the forward's masked weights: a masked score has weight 0, so its dS is 0",
    "flash-output": ("rescale the running output and sum by exp(m - m_new) when the maximum grows; the last tile "
                     "may be shorter than block_k"),
    "flash-saved": "save L (b, H, T), not the weights: the backward recomputes each tile's weights from it",
    "flash-saved-lse": "save the log-sum-exp L = m + log(l), one number per query, with ctx.save_for_backward",
    "flash-gradients": ("a tile's weights must be the forward's own weights, rebuilt from the saved L and masked as the "
                        "forward masked them, not weights normalised within the tile; and the term of softmax's "
                        "backward that sums over a whole row of keys must come from the whole row, not from one tile"),
    "lse-gradients": ("d_lse reaches the scores too: L depends on every score of its row, so work out the derivative of "
                      "L with respect to one score and add what d_lse sends through it to dS"),
    "triton-output": ("a key past T, or after its query when causal, must get score -inf; when the maximum grows, "
                      "multiply the sum and the output kept so far by exp(m_old - m_new); divide by the sum at the "
                      "end"),
}
