"""The likely mistakes the visible tests of step 07 (multi-head attention with weight splits) name when a check
fails."""

LIKELY = {
    "split_heads-1": "the result is (b, num_heads, T, head_dim): split the last dimension, then swap tokens and heads",
    "split_heads-2": (
        "head h must hold columns h*head_dim:(h+1)*head_dim of every token: print split_heads(x, 2)[0, 1] beside "
        "x[0, :, 3:6] and see where its numbers come from"),
    "merge_heads-1": (
        "after transpose(1, 2) the tensor is not contiguous: call .contiguous() before .view(), or use "
        ".reshape()"),
    "merge_heads-2": "the result is (b, T, num_heads * head_dim): move the tokens back in front of the heads first",
    "merge_heads-3": (
        "head h goes to columns h*head_dim:(h+1)*head_dim of every token: transpose(1, 2) before flattening "
        "the last two dimensions"),
    "multi_head_attention-1": "one projection of width d_out shared by all heads, not one per head",
    "multi_head_attention-2": (
        "out_proj, a linear layer from d_out to d_out with a bias, mixes the heads after they are merged"),
    "multi_head_attention-3": (
        "self.register_buffer(\"mask\", torch.triu(...)) keeps the mask with the module (state_dict, "
        ".to(device))"),
    "multi_head_attention-4": (
        "print the shape of each tensor after each step: the message names the sizes that met"),
    "multi_head_attention-5": "the output is (b, T, d_out): merge the heads again",
    "multi_head_attention-6": (
        "earlier tokens see a later one: the masked scores must be what goes into the softmax, and no step may "
        "mix numbers of different tokens"),
    "multi_head_attention-7": (
        "compare each step with the task on this small batch (scores of every head, mask, scale, softmax over "
        "the keys, weighted sum, merge, out_proj), printing shapes and a few numbers"),
    "wrapper_to_split-1": "print the shapes: an nn.Linear weight is (out_features, in_features)",
    "wrapper_to_split-2": "d_out = num_heads * head_dim = 6; each head's weight is (head_dim, d_in) = (3, 6)",
    "wrapper_to_split-3": "read the wrapper's weights, do not write to them",
    "wrapper_to_split-4": (
        "build the MultiHeadAttention with the wrapper's sizes: its context length is the size of a head's "
        "mask"),
    "split_to_wrapper-1": "read mha's weights, do not write to them",
    "gpt2_small_attention_params-1": (
        "p.numel() is an int, and so is their sum; .item() turns a one-element tensor into a number"),
    "gpt2_small_attention_params-2": "count every layer of the attention layer, with its weight and its bias",
}
