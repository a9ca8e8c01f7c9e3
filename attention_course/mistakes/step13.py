"""Likely mistakes of step 13's visible tests (the backward pass), shown only when their check fails."""

LIKELY = {
    "gradients": "compare each gradient with the formulas above, one line at a time: d_v, then dP, D, dS, d_q and d_k",
    "gradients-causal": "the backward uses the forward's masked weights: a masked score has weight 0, so its dS is 0",
    "flash-output": ("rescale the running output and sum by exp(m - m_new) when the maximum grows; the last tile "
                     "may be shorter than block_k"),
    "flash-saved": "save L (b, H, T), not the weights: the backward recomputes each tile's weights from it",
    "flash-saved-lse": "save the log-sum-exp L = m + log(l), one number per query, with ctx.save_for_backward",
    "flash-gradients": ("each tile's weights are exp(s - L) for the tile's scores s, masked like the forward; D = "
                        "rowsum(dO * O) once per query, then dS = P * (dP - D) tile by tile"),
    "lse-gradients": ("d_lse reaches S through L = logsumexp(S), whose gradient with respect to S is P: each row of dS "
                      "gains P * d_lse"),
    "triton-output": ("a key past T, or after its query when causal, must get score -inf; when the maximum grows, "
                      "multiply the sum and the output kept so far by exp(m_old - m_new); divide by the sum at the "
                      "end"),
}
