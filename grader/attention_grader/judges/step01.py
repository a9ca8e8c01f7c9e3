"""Judges of step 01: dot-product scores."""
import torch

from attention_grader.judging import G, NamedMistake, Program, call_check, default_judge, expect_value_error
from attention_grader.judges.common import first_raised, tensor_of, with_other_hint
from attention_course import data

INPUTS = data.journey_inputs()
BATCH = data.journey_batch()

# The parts that apply the lesson's idea to a case it did not work through: one query per sentence of a batch,
# queries against keys of another length with broadcast leading dimensions, and scores that ignore length.
TRANSFER = {"test_attention_scores_for_query", "test_cross_attention_scores", "test_cross_attention_scores_broadcast",
            "test_direction_scores"}

PER_SENTENCE = ("each sentence meets only its own query: (..., T, d) times (..., d, 1) gives (..., T, 1), then drop the "
                "last dimension (or einsum '...td,...d->...t'); `inputs @ query` treats a (b, d) stack of queries as "
                "one matrix")


def attention_scores_for_query(inputs):
    checks = [call_check("attention_scores_for_query(inputs, inputs[1]) on the journey sentence",
                         "attention_scores_for_query", INPUTS, INPUTS[1],
                         hint="entry i is the sum over d of inputs[i, d] * query[d]: inputs @ query")]
    for num_tokens, d in [(5, 3), (3, 3), (1, 7), (9, 4)]:
        checks.append(call_check(f"attention_scores_for_query on a random ({num_tokens}, {d}) input",
                                 "attention_scores_for_query", inputs.randn(num_tokens, d), inputs.randn(d),
                                 hint="score token i against the query: inputs @ query, not query @ inputs"))
    checks.append(call_check("attention_scores_for_query on the journey batch with the queries 'journey' and 'one'",
                             "attention_scores_for_query", BATCH, torch.stack([INPUTS[1], INPUTS[4]]),
                             hint=PER_SENTENCE))
    for lead, num_tokens, d in [((3,), 5, 4), ((2,), 3, 2), ((2, 3), 4, 5), ((1,), 6, 3), ((4,), 1, 3),
                                ((3,), 2, 3)]:
        checks.append(call_check(f"attention_scores_for_query on a random {(*lead, num_tokens, d)} input with queries "
                                 f"{(*lead, d)}", "attention_scores_for_query", inputs.randn(*lead, num_tokens, d),
                                 inputs.randn(*lead, d), hint=PER_SENTENCE))
    return checks


def attention_scores_single(inputs):
    checks = [call_check("attention_scores(inputs) on the journey sentence", "attention_scores", INPUTS,
                         hint="(T, d) @ (d, T) gives (T, T): inputs @ inputs.T")]
    for num_tokens, d in [(4, 3), (3, 5), (1, 2), (7, 7)]:
        checks.append(call_check(f"attention_scores on a random ({num_tokens}, {d}) input", "attention_scores",
                                 inputs.randn(num_tokens, d), hint="entry [i, j] is inputs[i] · inputs[j]"))
    return checks


def attention_scores_batched(inputs):
    hint = "work on the last two dimensions only (transpose(-2, -1), not .T), whatever the leading dimensions"
    checks = [call_check("attention_scores(batch) on the journey batch", "attention_scores", BATCH, hint=hint)]
    for shape in [(3, 5, 4), (1, 2, 3), (2, 3, 4, 5), (5, 1, 6)]:
        checks.append(call_check(f"attention_scores on a random {shape} input", "attention_scores",
                                 inputs.randn(*shape), hint=hint))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 5: queries against keys of another length
# ---------------------------------------------------------------------------------------------------------------

CROSS = "queries @ keys.transpose(-2, -1): one row per query, one column per key, on the last two dimensions only"
BROADCAST = ("the leading dimensions must broadcast as `@` (torch.matmul) broadcasts them: torch.bmm, a loop over the "
             "first dimension or a reshape to (-1, T, d) needs equal leading shapes; " + CROSS)


def likely_cross_mistake(got, queries, keys, hint):
    """The hint for a wrong result: it names the mistake when the student's output is a known wrong one."""
    q, k = queries.double(), keys.double()
    guesses = [(k @ q.transpose(-2, -1), "rows and columns are swapped: entry [i, j] is query i against key j, so the "
                                         "result is (T_q, T_k); keys @ queries^T gives its transpose"),
               (q.transpose(-2, -1) @ k if q.shape[-2] == k.shape[-2] else None,
                "the transpose belongs on the keys, over their last two dimensions: queries^T @ keys gives (d, d)")]
    for guess, text in guesses:
        if guess is not None and got.shape == guess.shape and torch.allclose(got, guess, atol=1e-4, rtol=1e-4):
            return text
    return hint


def cross_check(what, queries, keys, hint=CROSS):
    check = call_check(what, "cross_attention_scores", queries, keys, hint=hint)

    def judge(got, want):
        problem = default_judge(check, got, want)
        if problem and first_raised(got) is None and got and "tensor" in got[0]:
            return with_other_hint(problem, likely_cross_mistake(tensor_of(got[0]), queries, keys, hint))
        return problem

    check.judge = judge
    return check


def cross_attention_scores(inputs):
    checks = [cross_check("cross_attention_scores(inputs[4:], inputs): the last two tokens against all six",
                          INPUTS[4:], INPUTS),
              cross_check("cross_attention_scores(inputs, inputs[:3])", INPUTS, INPUTS[:3]),
              cross_check("cross_attention_scores(batch[:, 3:], batch) on the journey batch", BATCH[:, 3:], BATCH)]
    for lead, t_q, t_k, d in [((), 1, 5, 3), ((), 4, 2, 6), ((), 3, 3, 4), ((2,), 1, 7, 3), ((3,), 5, 2, 4),
                              ((2, 3), 2, 6, 5), ((1,), 4, 9, 2)]:
        checks.append(cross_check(f"cross_attention_scores on random queries {(*lead, t_q, d)} and keys "
                                  f"{(*lead, t_k, d)}", inputs.randn(*lead, t_q, d), inputs.randn(*lead, t_k, d)))
    return checks


def value_error_check(what, queries, keys):
    p = Program()
    p.call(G("cross_attention_scores"), p.tensor(queries), p.tensor(keys))
    return expect_value_error(what, p, "keys")


def cross_attention_scores_broadcast(inputs):
    checks = [cross_check("cross_attention_scores(batch, inputs): keys (6, 3) shared by a (2, 6, 3) batch", BATCH,
                          INPUTS, BROADCAST)]
    for q_shape, k_shape in [((3, 4, 5), (6, 5)), ((2, 4, 3, 8), (2, 1, 5, 8)), ((2, 3, 2, 4), (1, 3, 7, 4)),
                             ((4, 1, 3), (4, 5, 3)), ((2, 2, 5, 3), (5, 3)), ((3, 2, 6, 2), (3, 1, 6, 2))]:
        checks.append(cross_check(f"cross_attention_scores on random queries {q_shape} and keys {k_shape}",
                                  inputs.randn(*q_shape), inputs.randn(*k_shape), BROADCAST))
    for q_shape, k_shape in [((6, 3), (5, 4)), ((2, 4, 5), (2, 4, 3)), ((3, 2, 8), (2, 7))]:
        checks.append(value_error_check(f"cross_attention_scores on queries {q_shape} and keys {k_shape}, whose last "
                                        "dimensions differ", inputs.randn(*q_shape), inputs.randn(*k_shape)))
    return checks



# ---------------------------------------------------------------------------------------------------------------
# Part 6: scores by direction alone
# ---------------------------------------------------------------------------------------------------------------

DIRECTION = ("divide each query and each key by its own length, the norm over its last dimension, before the product; "
             "a zero vector's length must not become a division by 0")


CLAMPED = ("a length clamped to a small minimum (clamp_min, F.normalize's or cosine_similarity's eps) shrinks the "
           "scores of a short vector that is not zero: only a vector of length 0 may be treated apart")


def unit(x, dim=-1, eps=1e-12):
    return x / x.norm(dim=dim, keepdim=True).clamp_min(eps)


def likely_direction_mistake(got, queries, keys):
    """The mistake a wrong result shows, when it is one of these; else None."""
    q, k = queries.double(), keys.double()
    if torch.isnan(got).any():
        return ("a zero vector has length 0, and dividing by it gives nan: treat a length of 0 apart (torch.where), "
                "or clamp the lengths to a minimum far below 1e-15, the shortest length the task admits, so that "
                "its scores are 0")
    guesses = [*((unit(q, eps=eps) @ unit(k, eps=eps).transpose(-2, -1), CLAMPED) for eps in (1e-12, 1e-8, 1e-6)),
               (unit(q) @ k.transpose(-2, -1), "only the queries were divided by their lengths: the keys' lengths "
                                               "still count, so divide each key by its own length too"),
               (q @ unit(k).transpose(-2, -1), "only the keys were divided by their lengths: divide each query by "
                                               "its own length too"),
               (unit(q, -2) @ unit(k, -2).transpose(-2, -1),
                "the lengths were taken down the columns (over the tokens, dim=-2): a vector's length is the norm of "
                "its own row, over the last dimension"),
               (q @ k.transpose(-2, -1) / ((q * q).sum(-1, keepdim=True) * (k * k).sum(-1)[..., None, :]).clamp_min(1e-24),
                "the product was divided by the squared lengths: a length is the square root of the sum of squares")]
    for guess, text in guesses:
        if got.shape == guess.shape and torch.allclose(got, guess, atol=1e-4, rtol=1e-4):
            return text
    return None


def direction_check(what, queries, keys):
    check = call_check(what, "direction_scores", queries, keys, hint=DIRECTION)

    def judge(got, want):
        problem = default_judge(check, got, want)
        if problem and first_raised(got) is None and got and "tensor" in got[0]:
            mistake = likely_direction_mistake(tensor_of(got[0]), queries, keys)
            return NamedMistake(with_other_hint(problem, mistake)) if mistake else problem
        return problem

    check.judge = judge
    return check


def direction_scores(inputs):
    checks = [direction_check("direction_scores(inputs, inputs) on the journey sentence", INPUTS, INPUTS),
              direction_check("direction_scores(batch, inputs / 3): keys (6, 3) shared by a (2, 6, 3) batch", BATCH,
                              INPUTS / 3)]
    for q_shape, k_shape in [((4, 3), (5, 3)), ((1, 7), (3, 7)), ((3, 4, 5), (3, 2, 5)), ((2, 4, 3, 8), (2, 1, 5, 8)),
                             ((2, 2, 5, 3), (5, 3))]:
        checks.append(direction_check(f"direction_scores on random queries {q_shape} and keys {k_shape}",
                                      inputs.randn(*q_shape), inputs.randn(*k_shape)))
    queries, keys = inputs.randn(3, 4), inputs.randn(5, 4)
    queries[1], keys[2] = 0, 0
    checks.append(direction_check("direction_scores on random queries (3, 4) and keys (5, 4), query 1 and key 2 zero",
                                  queries, keys))
    scales = torch.tensor([[1000.0], [0.001], [3.0]])
    checks.append(direction_check("direction_scores on random queries (3, 4) stretched by 1000, 0.001 and 3, and keys "
                                  "(5, 4)", inputs.randn(3, 4) * scales, inputs.randn(5, 4)))
    # short vectors that are not zero: a length clamped to a minimum changes their scores
    queries, keys = inputs.randn(3, 4), inputs.randn(5, 4)
    queries[0] *= 1e-15
    keys[1] *= 1e-13
    checks.append(direction_check("direction_scores on random queries (3, 4) and keys (5, 4), query 0 shrunk by 1e-15 "
                                  "and key 1 by 1e-13", queries, keys))
    tiny = inputs.randn(2, 6) * 1e-15
    checks.append(direction_check("direction_scores(tiny, tiny) on two random vectors of 6 entries shrunk by 1e-15",
                                  tiny, tiny))
    checks.append(direction_check("direction_scores(tiny, tiny) in float64, two random vectors of 5 entries shrunk by "
                                  "1e-15", *[inputs.randn(2, 5).double() * 1e-15] * 2))
    # long vectors, up to the task's 1e15: their squared lengths still fit float32
    queries, keys = inputs.randn(3, 4), inputs.randn(5, 4)
    queries[2] *= 1e14
    keys[0] *= 1e14
    checks.append(direction_check("direction_scores on random queries (3, 4) and keys (5, 4), query 2 and key 0 "
                                  "stretched by 1e14", queries, keys))
    return checks


CELLS = {
    "test_attention_scores_for_query": attention_scores_for_query,
    "test_attention_scores_single": attention_scores_single,
    "test_attention_scores_batched": attention_scores_batched,
    "test_cross_attention_scores": cross_attention_scores,
    "test_cross_attention_scores_broadcast": cross_attention_scores_broadcast,
    "test_direction_scores": direction_scores,
}
