"""The likely mistakes the visible tests of step 09 (a KV cache) name when a check fails."""

LIKELY = {
    "causal_mask_with_offset-1": "one row per new query (t_q), one column per key (t_k)",
    "causal_mask_with_offset-2": "build it with dtype=torch.bool, or compare positions with >",
    "cached_attention-1": (
        "scores / sqrt(head_dim), causal mask, softmax over the keys (the last dimension), then @ values; if "
        "you use causal_mask_with_offset, make Part 1's tests pass first"),
    "cached_attention-2": "one output row per query",
    "cached_attention-3": (
        "the causal mask is aligned to the top-left corner, as if the new queries were the first T_q tokens (what "
        "SDPA's is_causal=True, or a causal mask cut to [:T_q, :T_k], gives when T_q != T_k): the newest token may see "
        "every key"),
    "cached_attention-4": (
        "the newest token attends to every key, with the mask of Part 1 (make its tests pass first if you use"
        " it)"),
    "cached_attention-5": "query i of the new ones may see keys 0 .. T_k - T_q + i",
    "attention_with_cache-1": "use the parameter names of step 07, so that trained weights load into it",
    "attention_with_cache-2": (
        "without the cache it is step 07's computation: project, split heads, mask, softmax, merge, out_proj;"
        " if you use causal_mask_with_offset, make Part 1's tests pass first"),
    "attention_with_cache-3": (
        "the new queries attend to the kept keys and values too, with the mask aligned to the bottom-right "
        "corner (query i of the new ones sees keys 0 .. T_k - T_q + i), not to the top-left one (what SDPA's "
        "is_causal=True, or a mask cut to [:T_q, :T_k], gives); keep the concatenated keys and values for the next "
        "call"),
    "attention_with_cache-4": "reset_cache() must forget the kept keys and values",
    "mask-entries": "True where key j comes after query i's token t_k - t_q + i",
    "mask-corner": (
        "the mask is aligned to the top-left corner, so new query 0 sees only key 0: the new queries are the last t_q "
        "tokens, query i is token t_k - t_q + i and may see keys 0 .. t_k - t_q + i"),
    "mask-convention": "True means blocked (step 04's convention), the opposite of SDPA's attn_mask",
    "mask-diagonal": "the offset is off by one: query i may see keys 0 .. t_k - t_q + i, itself included, and no later key",
    "static-returns": "update returns three things: self.keys, self.values and the mask",
    "static-shape": (
        "return self.keys and self.values themselves, all max_len slots: the shapes attention sees must be "
        "the same at every call"),
    "static-mask-shape": "one row per new query (T_new), one column per slot of the cache (max_len)",
    "static-mask-dtype": "a bool mask, True where attention is blocked (step 04's convention)",
    "static-attention": (
        "new query i is token length + i (length before the update): it may see the slots up to its own and "
        "none after it, written or empty; Part 1's mask for (T_new, max_len) treats the new tokens as the "
        "last slots of the cache, which lets them see the empty slots"),
    "static-stored": "write the new keys and values into the next free slots, after the ones stored, and keep those",
    "static-refused": "check that the new tokens fit before you write anything",
    "static-memory-shape": "take the memory of max_len tokens at once, in __init__",
    "static-memory-same": (
        "write into the tensors you allocated (assignment to a slice writes in place); do not rebuild them"),
    "static-memory-returned": "return self.keys and self.values, not a copy or a new tensor",
    "static-memory-reset": "a new sequence reuses the same memory: reset only the count",
}
