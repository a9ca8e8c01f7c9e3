"""The likely mistakes the visible tests of step 01 name when a check fails."""

LIKELY = {'attention_scores_for_query-1': 'return one number per token; multiplying element-wise without summing over d gives '
                                 'shape (T, d)',
 'attention_scores_for_query-2': 'entry i is the sum over d of inputs[i, d] * query[d]',
 'attention_scores_for_query-3': '`@` treats a (b, d) stack of queries as one (b, d) matrix, not as b separate '
                                 "vectors: give each sentence's query a shape that meets only its own sentence",
 'attention_scores_for_query-4': 'one score per token of each sentence; a (2, 6, 2) result, what inputs @ '
                                 'query.T gives, scores every sentence against every query',
 'attention_scores_for_query-5': 'sentence 1 must be scored against query 1 only (not the first query, not a sum '
                                 'over queries)',
 'attention_scores_single-1': '(T, d) times (d, T) gives (T, T); the transpose as the first factor gives (d, d) '
                              'instead',
 'attention_scores_single-2': 'row i should equal attention_scores_for_query(inputs, inputs[i])',
 'attention_scores_single-3': 'x_i · x_j equals x_j · x_i, so the matrix must be symmetric',
 'attention_scores_batched-1': 'only the last two dimensions may trade places (transpose(-2, -1) or .mT): a '
                               'transpose that moves the batch dimension (batch.T, which reverses all three, or '
                               'transpose(0, 1)) gives shapes that do not match',
 'attention_scores_batched-2': "a transposed first factor gives (b, d, d): each sentence's (T, d) times its "
                               'transpose (d, T) gives (T, T)',
 'attention_scores_batched-3': 'each sentence of the batch is scored on its own',
 'distance_scores-1': 'one row per query and one column per key: (T_q, d) against (T_k, d) gives (T_q, T_k)',
 'distance_scores-2': 'entry [i, j] is -||queries[i] - keys[j]||^2: 0 where a query meets itself ("one" against '
                      '"one"), negative elsewhere, lower the farther apart the two vectors lie',
 'distance_scores-3': 'rows are queries, columns are keys: a (3, 6) result has them the other way round',
 'distance_scores-4': "row 4 holds the query 'one' against the first three tokens: minus the squared distances",
 'distance_scores-library': 'this part asks for your own computation of the distances, not a '
                            'library function that computes them (torch.cdist, F.pdist)',
 'distance_scores-largest': 'a tensor as large as the differences of every query with every key (T_q * T_k * d '
                            'numbers, d times the scores) was made: find a way to each score that never holds the '
                            'differences of all pairs at once',
 'distance_scores-memory': 'more was alive at once than the scores need: let each intermediate go once it is used (a '
                           'list or a variable that keeps the differences of every query keeps them all alive)',
 'distance_scores-5': 'entry [i, j] is minus the sum over d of (queries[i, :] - keys[j, :]) ** 2',
 'distance_scores_broadcast-1': 'keys without a batch dimension serve every sequence: the computation must '
                                'broadcast',
 'distance_scores_broadcast-2': "the queries' batch dimension stays in front; the keys broadcast against it",
 'distance_scores_broadcast-3': 'entry [b, i, j] is -||queries[b, i] - keys[j]||^2',
 'distance_scores_broadcast-4': 'a leading dimension of size 1 in the keys must broadcast against the queries\'',
 'distance_scores_broadcast-5': '(b, H, T_q, d) against (b, 1, T_k, d) gives (b, H, T_q, T_k)',
 'distance_scores_broadcast-6': 'entry [b, h, i, j] is -||queries[b, h, i] - keys[b, 0, j]||^2',
 'direction_scores-1': 'one row per query, one column per key: a function that pairs rows '
                       '(F.cosine_similarity, (q * k).sum(-1)) compares query i with key i only, after '
                       'broadcasting, where each query needs every key',
 'direction_scores-2': "'one' against itself must score 1: each score may depend on the angle between the two "
                       'vectors only',
 'direction_scores-3': 'stretching a query by 10 or the keys by 1/4 must leave every score unchanged: what is each '
                       "vector's own size, and how can a score stop depending on it?",
 'direction_scores-4': 'a zero vector has length 0: dividing by it gives nan; its scores must be 0',
 'direction_scores-5': 'the leading dimensions broadcast as in Part 5',
 'direction_scores-6': 'each query and each key must be measured by its own length, over its last dimension'}
