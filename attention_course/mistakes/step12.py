"""Likely mistakes of step 12's visible tests (a tiny GPT), shown only when their check fails."""

LIKELY = {
    "mha-1": "W_query, W_key, W_value = nn.Linear(d_in, d_out, bias=qkv_bias), out_proj = nn.Linear(d_out, d_out)",
    "mha-2": (
        "the attention sees the future: mask the scores above the diagonal before the softmax, and keep the "
        "result of masked_fill"),
    "mha-3": ("check each step against step 07's on this small input: how the heads are split and merged, what the "
              "scores are divided by, the mask, and out_proj"),
    "mha-4": (
        "append the new keys and values to the kept ones, keep the result, and let the new queries attend to all "
        "of them with the mask aligned to the bottom-right corner"),
    "mha-5": "use_cache=False must neither read nor write the cache",
    "block-1": "the parts norm1, att, norm2 and ff (a Sequential of Linear, GELU, Linear), no others",
    "block-2": "the block passes its use_cache on to its attention",
    "gpt-1": "GPT-2 ties them; this exercise gives out_head a weight of its own, as the task says",
    "gpt-2": "tok_emb, pos_emb, blocks, final_norm, out_head (no bias), as the task says",
    "gpt-3": "out_head has no bias",
    "gpt-4": "one score per vocabulary entry for every position",
    "gpt-5": "tok_emb(idx) + pos_emb(positions 0 .. T-1), every block in order, final_norm, out_head",
    "gpt-6": "the logits at position t may depend only on the tokens up to t",
    "gpt-7": ("the new tokens sit at the positions after the cached ones: pos_emb(kept .. kept + T - 1), with kept "
              "counted by the model itself (the stand-in blocks here keep nothing to count)"),
    "gpt-cache-1": (
        "the model's full pass sees the future (see Part 1), and a cache, which has no later tokens to show, "
        "cannot agree with it"),
    "gpt-cache-2": "this needs Part 1's cache, Part 2 passing use_cache on, and Part 3's positions",
    "generate-1": ("if the model raised a ValueError, its cache would have passed context_length: reset_cache() "
                   "before the prompt and whenever it is full; otherwise print the shapes at the line that raised"),
    "generate-2": "return the prompt and the new tokens",
    "generate-3": "top_k=1 keeps only the largest logit of the last position",
    "generate-4": (
        "after the prompt, call model(last_token, use_cache=True) on the new token only, and not after the last "
        "draw"),
    "generate-5": "set every logit below the k-th largest to -inf",
    "train-1": "return the loss as a Python number, not a tensor",
    "train-2": "the mean cross-entropy over all b * T positions, computed before the step",
    "train-3": "clear the old gradients, backpropagate, then exactly one optimizer step",
    "train-4": "clear the gradients, backpropagate, step, at every call",
    "train-5": (
        "clip after the gradients are computed and before the step: all parameters' gradients together, as one "
        "vector, scaled to that norm"),
    "accumulation-1": "slice the batch: at most micro_batch_size sequences per call, each sequence once",
    "accumulation-2": "the mean over all b * T positions, not one slice's loss",
    "accumulation-3": (
        "with SGD(lr=1) the weights move by the gradient itself: the slices' gradients must add up to the whole "
        "batch's, with one step"),
    "accumulation-clipped-1": "clip the whole batch's gradients, once",
    "accumulation-clipped-2": "the clipping saw the gradient of part of the batch: the norm to clip is the whole batch's",
    "block-norms": (
        "this is a post-LayerNorm block (norm after the residual add, as in the 2017 Transformer); GPT-2 and this"
        " course normalise inside each branch, before attention and before the MLP"),
    "block-output": (
        "check each branch against the diagram on this input: what it reads (and through which norm), the MLP's "
        "layers and activation, and what its output is added to"),
    "temperature-1": "the temperature is ignored: divide the logits by it before the softmax",
    "temperature-2": "the logits are multiplied by the temperature: divide them by it",
    "temperature-3": "draw from softmax(logits / temperature) of the last position",
}
