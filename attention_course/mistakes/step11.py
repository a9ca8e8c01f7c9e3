"""Step 11's likely mistakes, shown by the visible tests only when their check fails."""
LIKELY = {
    "rope-shape": "return a tensor of x's shape",
    "rope-values": "none of the usual mistakes gives these values: compute one pair by hand, its two numbers and its "
                   "angle, from the task's formula, and compare",
    "rope-pairs": "the pairs are interleaved (x[2i], x[2i + 1]), the RoFormer paper's convention; this course uses "
                  "rotate-half pairs (x[i], x[i + head_dim/2]), as Hugging Face's Llama does",
    "rope-direction": "the rotation goes the wrong way: the first half is x1 * cos - x2 * sin, the second "
                      "x1 * sin + x2 * cos",
    "rope-positions": "the row was not rotated: rotate row t by positions[t] (here 1), not by t; the positions need "
                      "not start at 0",
    "rope-angles": "the angle of pair i is p * base ** (-2 * i / head_dim): the exponent has a factor 2",
    "rope-input": "use out-of-place operations",
    "rope-batched": "rotate the last dimension of every row",
    "rope-position-0": "position 0 has angle 0 in every pair: it is not rotated",
    "rope-norm": "a rotation keeps lengths: each pair gets cos and sin of the same angle",
    "rope-shift": "use the positions you are given, not 0 .. T-1",
    "rope-distance": "the score of a query at m and a key at n depends only on m - n when both use the same angles",
    "rope-head-dim-2": "with head_dim 2 the one pair is (x[0], x[1]), angle = position, whatever the base",
    "rope-dtype": "return x's dtype",
    "rope-bfloat16": "at position 4000 an angle in bfloat16 is off by radians: compute angles, cos and sin in float32",
    "mask-shape": "one row per sequence, one column per position",
    "mask-dtype": "the mask holds numbers, not bools: keep the bool tensor a comparison gives (no .float(), .int() or "
                  "torch.where(..., 1, 0)), or convert with .bool()",
    "mask-entries": "True at position j of sequence k when j >= lengths[k]",
    "mask-convention": "True means padding, blocked (step 04's convention): True = keep is SDPA's attn_mask convention",
    "mask-side": "the padding goes at the end (right padding): the real tokens come first",
    "gqa-parameters": "W_key and W_value project to num_kv_heads * head_dim = 2 * 2 numbers, W_query to d_out",
    "gqa-shape": "the output has d_out = 8 numbers per token",
    "gqa-values": "check each step against the task on this small input: which key/value head each query head "
                  "reads, which tensors are rotated and when, what the scores are divided by, and the mask",
    "gqa-cache": "compare the cached call with the full pass: the positions the new tokens are rotated at, what the "
                 "cache holds after each call, and which kept keys each new query may see",
    "gqa-reset": "reset_cache() must forget the kept keys and values",
    "padded-shape": "one output row per position, padded or not",
    "padded-finite": "a filler at the start of a left-padded row may see no key at all: what does softmax make of that "
                     "row?",
    "padded-real": "block the padded keys for every query of their sequence, in every head; and think about which "
                   "distances RoPE sees",
    "padded-zeros": "the output rows of padded positions must be zeros (the out_proj bias counts too)",
    "padded-grads": "a query row with every key blocked gives nan weights, and backward multiplies by them, even where "
                    "the row's output was replaced afterwards",
    "padded-none": "a mask without padding changes nothing",
}
