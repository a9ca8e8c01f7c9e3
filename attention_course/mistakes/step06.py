"""The likely mistakes the visible tests of step 06 (the multi-head wrapper) name when a check fails."""

LIKELY = {
    'wrapper_output-1': 'keep num_heads heads in self.heads, a list that PyTorch registers (see the lesson)',
    'wrapper_output-2': "join the heads' outputs along the last dimension, the features of a token: (b, T, d_out * num_heads); joining along the tokens (dim=1) would glue them one after the other",
    'wrapper_output-3': 'the first d_out columns are the output of self.heads[0], the next d_out of self.heads[1], ...',
    'wrapper_output-4': 'causal heads: the first 4 tokens do not depend on the later ones',
    'wrapper_heads-1': 'keep the heads in nn.ModuleList (a Python list hides their parameters), and create a new CausalAttention for every head (one head repeated num_heads times counts once)',
    'wrapper_heads-2': '[head] * num_heads repeats one head: create a new CausalAttention for every head',
    'wrapper_heads-3': 'create every head with its own CausalAttention(...) call (a copy of one head starts identical and stays identical)',
    'wrapper_heads-4': "mha.eval() reaches the heads' dropout only if the heads are registered: use nn.ModuleList",
    'wrapper_heads-5': "every head must drop with the wrapper's dropout probability",
    'wrapper_with_output_width-1': 'return MultiHeadAttentionWrapper(...)',
    'wrapper_with_output_width-2': 'keep num_heads as it is and choose d_out',
    'wrapper_with_output_width-3': "the output width is d_out * num_heads: choose each head's width so that the heads fill `width` together",
    'wrapper_with_output_width-4': 'MultiHeadAttentionWrapper takes (d_in, d_out, context_length, dropout, num_heads, qkv_bias), in this order',
    'lookback_wrapper-1': 'one head per window, in the order of windows',
    'lookback_wrapper-2': '(b, T, d_out * len(windows))',
    'lookback_wrapper-3': 'a window of 1 sees only the token itself, so its context vector is its own value vector',
    'lookback_wrapper-4': "a window of context_length or more is plain causal attention over the head's own layers",
    'lookback_wrapper-5': "with fewer tokens than context_length, each head's mask must be cut to T x T",
    'lookback_wrapper_reach-1': 'keep the heads where PyTorch registers them, as in Part 1, and give every head its own layers',
    'lookback_wrapper_reach-2': "eval() must reach every head's dropout",
    'lookback_wrapper_reach-3': "every head drops its attention weights with the wrapper's dropout probability",
    'lookback_wrapper-reach': ("token i of a head with window w reads the w tokens i - w + 1, ..., i: itself and w - 1 "
                               "before it, never a later one; head h gets windows[h], and a head's mask decides where "
                               "it looks"),
}
