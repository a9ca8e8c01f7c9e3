"""The likely mistakes the visible tests of step 03 name when a check fails."""

LIKELY = {'scaled_dot_product_attention-1': 'one context vector per query: (T_q, T_k) weights @ (T_k, d_v) values gives (T_q, '
                                   'd_v)',
 'scaled_dot_product_attention-2': 'the function changed its queries or keys in place: use out-of-place '
                                   'operations, queries / scale rather than queries /= scale',
 'scaled_dot_product_attention-3': "each query's weights must sum to 1: softmax over the keys, the last "
                                   'dimension',
 'scaled_dot_product_attention-4': 'scores [4, 0] divided by sqrt(d_k) = 2 give softmax([2, 0]) = [0.88, 0.12]. '
                                   '[0.98, 0.02] means the scores were not scaled; [0.73, 0.27] means you divided by '
                                   'd_k instead of its square root; [0.94, 0.06] means you used the width of the '
                                   'values, not keys.shape[-1]',
 'scaled_dot_product_attention-5': "the lesson's context_vec_2: softmax(query_2 @ keys^T / sqrt(2)) @ values",
 'scaled_dot_product_attention-6': 'the function must work for any number of leading batch dimensions: work on '
                                   'the last two dimensions only',
 'scaled_dot_product_attention-7': 'keep the leading dimensions: work on the last two dimensions only',
 'scaled_dot_product_attention-8': 'each sentence of the batch attends only within itself',
 'self_attention_v1-1': 'wrap each (d_in, d_out) matrix in nn.Parameter before assigning it to self.W_query, '
                        'self.W_key and self.W_value: a plain tensor is not registered, so no optimizer would ever '
                        'train it',
 'self_attention_v1-2': 'each matrix maps d_in inputs to d_out outputs',
 'self_attention_v1-3': 'one d_out-dimensional context vector per token',
 'self_attention_v1-4': 'multiply x by each (d_in, d_out) matrix and scale the scores by sqrt(d_k), the key '
                        'dimension keys.shape[-1] = d_out, not by the input width d_in',
 'self_attention_v1-5': 'forward must work for any number of leading dimensions of x: work on the last two '
                        'dimensions only',
 'self_attention_v1-6': "forward must compute everything from its argument x, not from the notebook's global "
                        '`inputs`, and keep the leading dimensions of x',
 'self_attention_v1-7': 'each sentence of the batch attends within itself',
 'self_attention_v2-1': 'the module registers the weights of three nn.Linear layers named W_query, W_key and '
                        'W_value, and their biases only when qkv_bias is true',
 'self_attention_v2-2': 'nn.Linear(d_in, d_out) stores its weight as (d_out, d_in)',
 'self_attention_v2-3': 'each layer has a bias exactly when qkv_bias is true: pass it on to the layers',
 'self_attention_v2-4': 'one d_out-dimensional context vector per token',
 'self_attention_v2-5': "compute everything from x and the module's own layers, never from notebook globals "
                        '(`values`, `keys` of the cells above), and scale the scores by sqrt(d_k), the key dimension '
                        'keys.shape[-1] = d_out, not by the input width d_in',
 'self_attention_v2-6': 'forward must work for any number of leading dimensions of x: work on the last two '
                        'dimensions only',
 'self_attention_v2-7': "forward must compute everything from its argument x, not from the notebook's global "
                        '`inputs`, and keep the leading dimensions of x',
 'self_attention_v2-8': 'each sentence of the batch attends within itself',
 'self_attention_v2-9': 'attention without positions is blind to order: shuffling the tokens must only shuffle the '
                        "outputs; compute everything from x and the module's own layers, not from notebook globals "
                        "(such as `values` or `d_k` from earlier cells), and use nothing that depends on a token's "
                        'index',
 'transfer_weights_v2_to_v1-1': "the transfer must run without an error: read the error's last line and the line "
                                'of your code it points at',
 'transfer_weights_v2_to_v1-sizes': "a weight of sa_v2 met a matrix of sa_v1 of another shape: nn.Linear keeps its "
                                    'weight as (d_out, d_in), SelfAttention_v1 its matrices as (d_in, d_out)',
 'transfer_weights_v2_to_v1-2': 'change the sa_v1 you were given in place (copy_ into its parameters); building and '
                                "returning a new module leaves the caller's sa_v1 untouched",
 'transfer_weights_v2_to_v1-3': 'nn.Linear computes x @ weight.T, so copy the transposed weight, weight.T, into the '
                                'matrix',
 'transfer_biased_v2_to_v1-1': 'each (d_in + 1, d_out) matrix is built from a (d_out, d_in) weight and a (d_out,) '
                               'bias',
 'transfer_biased_v2_to_v1-2': "change sa_v1 in place and return it; a new module leaves the caller's sa_v1 as it "
                               'was',
 'transfer_biased_v2_to_v1-3': "with_ones @ M must give the layer's output, x @ weight.T + bias, for every "
                               'token: the first d_in rows of M multiply x, and the row that meets the feature that '
                               'is always 1 adds the bias',
 'transfer_biased_v2_to_v1-4': "copy into sa_v1's parameters, or assign new nn.Parameter objects, not plain tensors",
 'transfer_biased_v2_to_v1_cases-1': 'a layer built with bias=False has no bias (its .bias is None): what does it '
                                     'add?',
 'transfer_biased_v2_to_v1_cases-2': 'change the sa_v1 you were given in place; building and returning a new module '
                                     'leaves it unchanged',
 'transfer_biased_v2_to_v1_cases-3': 'without a bias the layer adds nothing to x @ weight.T; the first d_in rows of '
                                     'the matrix multiply x, and the 1 is the last feature',
 'transfer_biased_v2_to_v1_cases-4': "sa_v1 must hold its own copies: a view of sa_v2's weights changes along with "
                                     'them',
 'drop_idle_biases-1': 'change the layers of the sa_v2 you were given (under torch.no_grad()) and return it; a layer '
                       'built with bias=False has .bias None',
 'drop_idle_biases-2': "change sa_v2 in place and return it; a new module leaves the caller's sa_v2 as it was",
 'drop_idle_biases-3': 'a bias that was zeroed changes the context vectors: write out q_i · k_j with the biases, and '
                       'the weighted sum of the values, and see which added terms are the same for every key of a '
                       'query (softmax cancels those) and which are not',
 'drop_idle_biases-4': 'one of the biases adds the same number to every score of a query: write out (x_i W_q + b_q) '
                       '· (x_j W_k + b_k) and look for terms that do not depend on j',
 'drop_idle_biases-5': 'a layer built with bias=False has .bias None: check for it before touching the bias'}
