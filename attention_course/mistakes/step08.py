"""The likely mistakes the visible tests of step 08 (efficient attention) name when a check fails."""

LIKELY = {
    "combined_qkv-1": "one nn.Linear named qkv, from d_in to the queries, keys and values together",
    "combined_qkv-2": "nn.Linear(d_in, 3 * d_out) stores its weight as (3 * d_out, d_in)",
    "combined_qkv-3": "the output is d_out wide, like step 07's",
    "combined_qkv-4": (
        "compare each step with step 07's forward above (queries, keys and values from the qkv output, heads, "
        "scores, mask, scale, softmax, merge, out_proj), printing shapes and a few numbers"),
    "combined_qkv-5": (
        "a token must not see later tokens: the masked scores must go into the softmax, and no reshape may mix "
        "numbers of different tokens"),
    "combined_from_split-1": "an nn.Linear weight is (out_features, in_features): the fused weight has 3 * d_out rows",
    "combined_from_split-2": (
        "the fused weight stacks the three (d_out, d_in) weights along dim 0, not side by side (dim 1)"),
    "combined_from_split-3": "queries first, then keys, then values, stacked along dim 0",
    "combined_from_split-4": (
        "create the module with qkv_bias=mha.W_query.bias is not None (and let MultiHeadAttentionCombinedQKV "
        "pass bias=qkv_bias to nn.Linear)"),
    "combined_from_split-5": "the biases are fused like the weights",
    "combined_from_split-6": "copy out_proj too (weight and bias)",
    "combined_from_split-7": "copy out_proj's bias too",
    "sdpa_causal_bool_mask-1": (
        "a float mask is added to the scores instead; build it with dtype=torch.bool or compare with >="),
    "sdpa_causal_bool_mask-2": (
        "query i may see keys 0..i: print the mask and check each row against the value SDPA reads as 'may "
        "attend'"),
    "sdpa_causal_bool_mask-3": (
        "the future leaks into earlier tokens: True must mean 'may attend' (on and below the diagonal)"),
    "sdpa_attention-1": "merge the heads back to (b, T, d_out) before out_proj",
    "sdpa_attention-2": (
        "replace the scores, mask, softmax, dropout and weighted sum by one F.scaled_dot_product_attention "
        "call"),
    "sdpa_attention-3": (
        "SDPA applies dropout_p even in eval mode: pass a rate above 0 only while self.training is True"),
    "sdpa_attention-4": (
        "the future leaks: check what tells SDPA to be causal, and that no reshape mixes numbers of different "
        "tokens"),
    "sdpa_attention-5": "use the parameter names of step 07, so that trained weights load into it",
    "sdpa_attention-6": (
        "compare each step with step 07's forward above (projections, heads, the arguments of SDPA, merge, "
        "out_proj), printing shapes and a few numbers"),
    "padded_sdpa_attention-calls-0": (
        "the attention is computed without F.scaled_dot_product_attention: build the attn_mask and let one SDPA call "
        "do the rest"),
    "padded_sdpa_attention-calls-2": "one call for the whole batch: build one attn_mask that fits every sentence",
    "padded_sdpa_attention_left-1": (
        "a row of the mask with no allowed key can give nan: which key may such a query always attend to?"),
    "padded_sdpa_attention_left-2": (
        "a real token's query must skip the padding keys before it, and still not see the future"),
    "padded_sdpa_attention_left-3": "a query that may see no key attends to itself alone",
    "padded_sdpa_attention-2": (
        "SDPA reads a bool attn_mask as True = may attend, the opposite of is_padding; the mask must block "
        "padding keys for every query of that sentence, and the future when causal=True"),
}
