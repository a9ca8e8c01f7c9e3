"""The likely mistakes the visible tests of step 06 (the multi-head wrapper) name when a check fails."""

LIKELY = {
    "wrapper-heads": "keep num_heads heads in self.heads, a list that PyTorch registers (see the lesson)",
    "wrapper-shape": ("the heads' outputs go side by side along the last dimension, the features of a token: (b, T, "
                      "d_out * num_heads)"),
    "wrapper-columns": "the first d_out columns are the output of self.heads[0], the next d_out of self.heads[1], ...",
    "wrapper-short": "causal heads: the first 4 tokens do not depend on the later ones",
    "heads-parameters": ("num_heads separate CausalAttention(d_in, d_out, ...) heads, each registered, hold "
                         "num_heads * 3 * d_in * d_out parameters: list what the wrapper registers with "
                         "[name for name, _ in mha.named_parameters()]"),
    "heads-distinct": "[head] * num_heads repeats one head: create a new CausalAttention for every head",
    "heads-own-weights": ("create every head with its own CausalAttention(...) call (a copy of one head starts "
                          "identical and stays identical)"),
    "heads-eval": "mha.eval() reaches the heads' dropout only if the heads are registered: use nn.ModuleList",
    "heads-train": "every head must drop with the wrapper's dropout probability: pass dropout on to every head",
    "width-type": "return MultiHeadAttentionWrapper(...)",
    "width-heads": "keep num_heads as it is and choose d_out",
    "width-sum": "the output width is d_out * num_heads: choose each head's width so that the heads fill `width` together",
    "width-arguments": ("MultiHeadAttentionWrapper takes (d_in, d_out, context_length, dropout, num_heads, qkv_bias), "
                        "in this order"),
    "alibi-heads": "one head per slope, in the order of slopes, kept in self.heads (an nn.ModuleList)",
    "alibi-shape": "the heads' outputs side by side along the last dimension: (b, T, d_out * len(slopes))",
    "alibi-slope-0": ("a slope of 0 multiplies every weight by exp(0) = 1: the head is plain causal attention over its "
                      "own layers (scores divided by sqrt(d_out), the future hidden)"),
    "alibi-steep": ("with slope 50 a key one token back gets exp(-50) of its weight: the head sees only the token "
                    "itself, so its output is its own value vector (the factor is exp(-m * (i - j)), applied to the "
                    "weights of keys j <= i)"),
    "alibi-factor": ("with all scores 0 the weights of token 2 are proportional to exp(-log(2) * d) for the keys d = 2, "
                     "1, 0 tokens back: 1/4, 1/2, 1, normalised to 1/7, 2/7, 4/7. The factor must multiply the weights "
                     "before each row is normalised (or, the same thing, add -m * (i - j) to what the softmax reads), "
                     "and it is not divided by sqrt(d_out)"),
    "longer-runs": ("nothing in the rule depends on a largest length: build what the heads need (the hidden future, "
                    "the distances) for the T tokens of x, not once for context_length"),
}
