"""The likely mistakes the visible tests of step 02 name when a check fails."""

LIKELY = {'softmax_naive-1': 'return one weight per score: the shape of x',
 'softmax_naive-2': 'exponentiate every score, then divide by the sum of the exponentials; dividing the scores by '
                    'their plain sum gives [0.1455, 0.2278, ...] instead',
 'softmax_naive-3': 'normalising by the plain sum turns a negative score into a negative weight: exponentiate first',
 'softmax_naive-4': 'return a tensor of the shape of x',
 'softmax_naive-5': ("the weights of each row must sum to 1: divide the exponentials of a row by the sum of that row's "
                    'exponentials'),
 'softmax_naive-6': 'row i should equal softmax_naive(attn_scores[i])',
 'softmax_naive-7': 'use the `dim` argument rather than a fixed dimension',
 'softmax_stable-1': 'subtract the largest score, exponentiate, then divide by the sum of the exponentials',
 'softmax_stable-2': 'normalise each row (dim=-1 by default): use `dim` for the maximum and for the sum, both with '
                     'keepdim=True, so that each row gets its own maximum and its own sum',
 'softmax_stable-3': 'exp(1000.0) overflows to inf and inf / inf is nan: subtract the largest entry along `dim` '
                     'before exponentiating',
 'softmax_stable-4': "`x -= ...` subtracts in place and changes the caller's tensor; write `shifted = x - ...`",
 'softmax_stable-5': 'subtract the maximum of each row (of each slice along `dim`), not of the whole tensor, before '
                     'exponentiating',
 'softmax_stable-6': 'use `dim` for the maximum and for the sum, both with keepdim=True',
 'context_vectors_single-1': 'one context vector per token, as wide as an embedding: multiply the (T, T) weights by '
                             '`inputs`, not by the scores',
 'context_vectors_single-2': "weights = softmax of the scores over the last dimension (each query's row sums to "
                             '1), then context = weights @ inputs',
 'context_vectors_single-3': 'row i mixes the inputs with the weights of query i: weights @ inputs',
 'context_vectors_batched-1': 'each sentence of the batch is its own attention problem: work on the last two '
                              'dimensions of `inputs` only, whatever the leading ones',
 'context_vectors_batched-2': 'one context vector per token and sentence; multiply the weights by `inputs`, not by '
                              'the scores',
 'context_vectors_batched-3': 'each sentence is its own attention problem: softmax over the last dimension, the keys',
 'context_vectors_batched-4': 'work on the last two dimensions only, whatever the leading ones',
 'context_vectors_batched-5': 'return the shape of the inputs',
 'softmax_masked-1': 'the (6,) mask must broadcast against the (6, 6) scores',
 'softmax_masked-2': 'return the shape of x',
 'softmax_masked-3': 'hidden entries (True) get weight 0, and the visible ones are renormalised so that they sum to '
                     '1; is True taken as hidden?',
 'softmax_masked-4': 'the visible weights of every row must sum to 1, not only the weights left over',
 'softmax_masked-5': 'a hidden entry must have no influence on the weights, however large its score',
 'softmax_masked-6': 'large visible scores must not overflow (Part 2)',
 'softmax_masked-7': 'normalise along `dim`',
 'softmax_masked_blocked-1': 'return the shape of x',
 'softmax_masked_blocked-2': 'hidden entries get weight 0 and the visible ones of each row are renormalised to sum '
                             'to 1',
 'softmax_masked_blocked-3': 'a row with no visible entry has nothing to share weight among: all zeros there, never '
                             'nan and never equal weights',
 'softmax_masked_blocked-4': 'a score of -inf counts as hidden: a row of -inf is blocked',
 'softmax_masked_blocked-5': 'return the shape of x'}
