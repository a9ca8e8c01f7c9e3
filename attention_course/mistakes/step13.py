"""Likely mistakes of step 13's visible tests (the backward pass), shown only when their check fails."""

LIKELY = {
    "gradients": "compare each gradient with the formulas above, one line at a time: d_v, then dP, D, dS, d_q and d_k",
    "gradients-causal": "the backward uses the forward's masked weights: a masked score has weight 0, so its dS is 0",
    "flash-output": ("compare each key tile with the running softmax: m_new = max(m, rowmax(s)); the sum and the "
                     "output kept so far times exp(m - m_new); exp(s - m_new) and its product with the tile's values "
                     "added; every tile of keys covered (the last may be shorter); the output divided by the sum at "
                     "the end"),
    "flash-saved": "save L (b, H, T), not the weights: the backward recomputes each tile's weights from it",
    "flash-saved-lse": "save the log-sum-exp L = m + log(l), one number per query, with ctx.save_for_backward",
    "flash-gradients": ("compare each tile with the backward's formulas: P is the forward's weights rebuilt from the "
                        "saved L, exp(scale * q_i k_j^T - L_i), masked as the forward masked them; d_v_j += P^T dO_i; "
                        "dS = P * (dO_i v_j^T - D_i) with D = rowsum(dO * O); d_q_i += scale * dS k_j; "
                        "d_k_j += scale * dS^T q_i"),
    "lse-gradients": ("d_lse reaches the scores too: L depends on every score of its row, so work out the derivative of "
                      "L with respect to one score and add what d_lse sends through it to dS"),
    "triton-output": ("a key past T, or after its query when causal, must get score -inf; when the maximum grows, "
                      "multiply the sum and the output kept so far by exp(m_old - m_new); divide by the sum at the "
                      "end"),
}
