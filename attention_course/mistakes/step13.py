"""Likely mistakes of step 13's visible tests (the backward pass), shown only when their check fails."""

LIKELY = {
    "gradients": "compare each gradient with the formulas above, one line at a time: d_v, then dP, D, dS, d_q and d_k",
    "gradients-causal": "the backward uses the forward's masked weights: a masked score has weight 0, so its dS is 0",
    "flash-output": ("rescale the running output and sum by exp(m - m_new) when the maximum grows; the last tile "
                     "may be shorter than block_k"),
    "flash-saved": "save L (b, H, T), not the weights: the backward recomputes each tile's weights from it",
    "flash-saved-lse": "save the log-sum-exp L = m + log(l), one number per query, with ctx.save_for_backward",
    "flash-gradients": ("rebuild each tile's weights from the scores and the saved log-sum-exp, masked as in the "
                        "forward, then compare each tile's dS with Part 1's formula: which quantity per query does it "
                        "need, and is it computed once or per tile?"),
    "lse-gradients": ("d_lse reaches the scores only through the log-sum-exp: what is the derivative of "
                      "logsumexp(S) with respect to each score, and which row of dS does it add to?"),
    "triton-output": ("a key past T, or after its query when causal, must get score -inf; when the maximum grows, "
                      "multiply the sum and the output kept so far by exp(m_old - m_new); divide by the sum at the "
                      "end"),
}
