"""Judges of step 01: dot-product scores."""
import functools
import math

import torch

from attention_grader.judging import (G, Check, Expect, NamedMistake, Program, call_check, compare, default_judge,
                                      expect_value_error, raised_message)
from attention_grader.judges.common import first_raised, library_ops, tensor_of, with_hint, with_other_hint
from attention_course import data

INPUTS = data.journey_inputs()
BATCH = data.journey_batch()

# The parts that apply the lesson's idea to a case it did not work through: one query per sentence of a batch, scores by
# distance within a memory budget (the matrix product does the work), and scores that ignore length.
TRANSFER = {"test_attention_scores_for_query", "test_distance_scores", "test_distance_scores_broadcast",
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
# Part 5: scores by distance
# ---------------------------------------------------------------------------------------------------------------

LIBRARY_DISTANCE = {"cdist", "_cdist_forward", "_euclidean_dist", "_pdist_forward", "pdist"}
OWN_DISTANCE = ("this part asks for your own computation of the distances, from sums and dot products, not "
                "torch.cdist or F.pdist: the grader watches the operations your function runs, whatever name reached them")
DEFINITION = "entry [..., i, j] is minus the sum over d of (queries[..., i, :] - keys[..., j, :]) ** 2"
NONE_USUAL = "none of the usual mistakes gives these values; " + DEFINITION
EAGER_ERROR = ("only the last dimensions of queries and keys (the features d) must match: T_q and T_k may differ, and "
               "the leading dimensions broadcast")
DIFFERENCES = ("it built the differences of every query with every key at once, T_q * T_k * d numbers: expand "
               "||q - k||^2 into terms that each need one vector's squared length or one dot product q . k (a matrix "
               "product gives every q . k at once), or take one query at a time and let its differences go")
TOO_MUCH = ("more was alive at once than the scores need: let each intermediate go once it is used (a list or a "
            "variable that keeps the differences of every query keeps them all alive)")


def squared_lengths(queries, keys):
    return (queries * queries).sum(-1, keepdim=True), (keys * keys).sum(-1).unsqueeze(-2)


def mistaken_distance(queries, keys, sign=1, cross=2, query_norm=True, key_norm=True, squared=True,
                      norms_swapped=False):
    """The answer key with one mistake put in: each argument other than the default is one mistake."""
    q_sq, k_sq = squared_lengths(queries, keys)
    if norms_swapped:  # each squared length laid along the other's dimension
        q_sq, k_sq = q_sq.transpose(-2, -1), k_sq.transpose(-2, -1)
    scores = cross * (queries @ keys.mT) - (q_sq if query_norm else 0) - (k_sq if key_norm else 0)
    if not squared:
        scores = -(-scores).clamp_min(0).sqrt()
    return sign * scores


def eager_value_error(queries, keys):
    if queries.shape != keys.shape:
        raise ValueError("keys and queries differ in shape")
    return mistaken_distance(queries, keys)


def bmm_distance(queries, keys):
    q_sq, k_sq = squared_lengths(queries, keys)
    return 2 * torch.bmm(queries, keys.transpose(1, 2)) - q_sq - k_sq


def distance_mistake(hint, **wrong):
    return hint, {"distance_scores": functools.partial(mistaken_distance, **wrong)}


DISTANCE_MISTAKES = (
    distance_mistake("the scores have the wrong sign: a score is minus the squared distance, so the nearest key "
                     "scores highest (0 for a key equal to the query) and farther keys lower", sign=-1),
    distance_mistake("these are minus the distances, not minus their squares: leave out the square root", squared=False),
    ("these are the lesson's dot products q . k: the score here is -||q - k||^2; expand the square and see what the "
     "dot product leaves out", {"distance_scores": lambda queries, keys: queries @ keys.mT}),
    distance_mistake("the squared length of each query, ||q||^2, is missing from its row: -||q - k||^2 has three "
                     "terms", query_norm=False),
    distance_mistake("the squared length of each key, ||k||^2, is missing from its column: -||q - k||^2 has three "
                     "terms", key_norm=False),
    distance_mistake("the product q . k counts twice in ||q - k||^2 = ||q||^2 - 2 q . k + ||k||^2", cross=1),
    distance_mistake("the product q . k enters with the wrong sign: these are -||q + k||^2", cross=-2),
    distance_mistake("the queries' squared lengths were laid along the columns and the keys' along the rows: query "
                     "i's (..., T_q, 1) column and key j's (..., 1, T_k) row", norms_swapped=True),
    ("rows and columns are swapped: entry [i, j] is query i against key j, so the result is (..., T_q, T_k)",
     {"distance_scores": lambda queries, keys: mistaken_distance(keys, queries)}),
    (EAGER_ERROR, {"distance_scores": eager_value_error}),
    ("a dimension counted from the front (transpose(1, 2), torch.bmm's 3-dimensional batches) is missing from some "
     "inputs the task allows: count from the end (transpose(-2, -1)) and let @ (torch.matmul) broadcast the leading "
     "dimensions", {"distance_scores": bmm_distance}),
)


def close_to_distances(what, got, want, queries, keys, label="the result"):
    """None when `got` (a record) is `want` (the reference's) within 1e-4 (||q||^2 + ||k||^2), the task's accuracy."""
    problem = compare(got, want, f"{what}: {label}", Expect("", atol=math.inf))  # its type and shape
    if problem:
        return problem
    actual, expected = tensor_of(got), tensor_of(want)
    q_sq, k_sq = squared_lengths(queries.double(), keys.double())
    allowed = 1e-4 * (q_sq + k_sq) + 1e-6
    difference = (actual - expected).abs().nan_to_num(nan=math.inf)
    if bool((difference > allowed).any()):
        return (f"{what}: {label} has the wrong values (largest difference {difference.max().item():.3g}, where "
                f"{(allowed.expand_as(difference)[difference > allowed]).min().item():.3g} was allowed)")
    return None


def distance_judge(what, queries, keys, records_before=0):
    """A judge of a call's records: `records_before` records (memory, trace) come before its result."""

    def judge(got, want):
        if want and "raised" in want[-1] and len(want) <= records_before + 1:  # the mistaken answer key raised
            # named only by an error that says which mistake it is: the student's own ValueError, or a dimension
            # counted from the front; a broadcasting error's sizes could come from another mistake
            raised, kind, message = first_raised(got), want[-1]["raised"], str(want[-1]["message"])
            same = raised and raised[1]["raised"] == kind and (kind == "ValueError" or (
                raised[1]["message"] == message and (kind == "IndexError" or "3D tensor" in message)))
            return None if same else f"{what}: it raised differently"
        raised = first_raised(got)
        if raised:
            hint = EAGER_ERROR if raised[1]["raised"] == "ValueError" else ""
            return raised_message(what, raised[1], hint)
        if len(got) < records_before + 1:
            return f"{what}: stopped before the result"
        problem = close_to_distances(what, got[records_before], want[records_before], queries, keys)
        if problem:
            return with_hint(problem, NONE_USUAL)
        for index in range(records_before + 1, len(want)):  # the inputs after the call, unchanged
            if index >= len(got) or compare(got[index], want[index], what, Expect("", atol=0, rtol=0)):
                return with_hint(f"{what}: its input after the call has changed",
                                 "use out-of-place operations (x - m, not x -= m or x.sub_(m))")
        return None

    return judge


def distance_check(what, queries, keys):
    check = call_check(what, "distance_scores", queries, keys)
    check.judge = distance_judge(what, queries, keys)
    check.mistakes = DISTANCE_MISTAKES
    return check


def memory_limit(queries, keys):
    """The bytes that may be alive at once: four tensors of the scores' size and two copies of each input (broadcast
    to the result's leading dimensions), counted in float64."""
    lead = torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2]).numel()
    (t_q, d), t_k = queries.shape[-2:], keys.shape[-2]
    return 8 * (4 * lead * t_q * t_k + 2 * lead * (t_q + t_k) * d), lead * t_q * t_k * d


def memory_check(what, queries, keys):
    """One call measured and traced in the kernel: no library distance, at most `memory_limit` bytes alive at once,
    and the values."""
    p = Program()
    q, k = p.tensor(queries), p.tensor(keys)
    result = p.call(G("distance_scores"), q, k, measure=True, trace=0)
    p.record(result, "the result")
    limit, pairs = memory_limit(queries, keys)
    values = distance_judge(what, queries, keys, records_before=2)

    def judge(got, want):
        raised = first_raised(got)
        if raised or len(got) < 3 or not all(isinstance(r, dict) for r in got[:2]):
            return values(got, want)
        memory, trace = got[0].get("memory"), got[1].get("trace")
        if not (isinstance(memory, dict) and isinstance(trace, dict) and isinstance(trace.get("ops"), list)):
            return f"{what}: its memory and operations were not recorded"
        used = library_ops(trace["ops"], LIBRARY_DISTANCE)
        if used:
            return with_hint(f"{what} ran aten.{used[0]}, the library's distance (torch.cdist)", OWN_DISTANCE)
        peak, largest = memory.get("peak_bytes"), memory.get("largest_numel")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (peak, largest)):
            return f"{what}: its memory was not recorded"
        if peak > limit:
            problem = (f"{what} held {peak:,} bytes at once at its peak, more than {limit:,} (four tensors of the "
                       f"scores' size and two copies of each input, in float64)")
            if largest >= pairs:
                return with_hint(problem + f"; its largest tensor had {largest:,} entries, T_q * T_k * d = "
                                 f"{pairs:,}", DIFFERENCES)
            return with_hint(problem, TOO_MUCH)
        return values(got, want)

    return Check(what, p, judge=judge, mistakes=DISTANCE_MISTAKES)


def distance_scores(inputs):
    checks = [distance_check("distance_scores(inputs[4:], inputs): the last two tokens against all six", INPUTS[4:],
                             INPUTS),
              distance_check("distance_scores(inputs, inputs[:3])", INPUTS, INPUTS[:3]),
              distance_check("distance_scores(inputs, inputs): every token against itself too", INPUTS, INPUTS),
              distance_check("distance_scores(batch[:, 3:], batch) on the journey batch", BATCH[:, 3:], BATCH)]
    for lead, t_q, t_k, d in [((), 1, 5, 3), ((), 4, 2, 6), ((), 3, 3, 4), ((2,), 1, 7, 3), ((3,), 5, 2, 4),
                              ((2, 3), 2, 6, 5), ((1,), 4, 9, 2)]:
        checks.append(distance_check(f"distance_scores on random queries {(*lead, t_q, d)} and keys "
                                     f"{(*lead, t_k, d)}", inputs.randn(*lead, t_q, d), inputs.randn(*lead, t_k, d)))
    queries, keys = inputs.randn(4, 8), inputs.randn(5, 8)
    keys[2] = queries[1]
    checks.append(distance_check("distance_scores on random queries (4, 8) and keys (5, 8), key 2 equal to query 1",
                                 queries, keys))
    queries, keys = inputs.randn(3, 16).double(), inputs.randn(6, 16).double()
    keys[0] = queries[2]
    checks.append(distance_check("distance_scores on random float64 queries (3, 16) and keys (6, 16), key 0 equal "
                                 "to query 2", queries, keys))
    # a cluster away from the origin: the squared lengths are large next to the distances
    queries, keys = 10 + inputs.randn(5, 8), 10 + inputs.randn(4, 8)
    keys[3] = queries[0]
    checks.append(distance_check("distance_scores on random queries (5, 8) and keys (4, 8) around (10, ..., 10), "
                                 "key 3 equal to query 0", queries, keys))
    checks.append(memory_check("distance_scores on random queries (96, 64) and keys (72, 64), its memory measured",
                               inputs.randn(96, 64), inputs.randn(72, 64)))
    return checks


def value_error_check(what, queries, keys):
    p = Program()
    p.call(G("distance_scores"), p.tensor(queries), p.tensor(keys))
    return expect_value_error(what, p, "keys")


def distance_scores_broadcast(inputs):
    checks = [distance_check("distance_scores(batch, inputs): keys (6, 3) shared by a (2, 6, 3) batch", BATCH,
                             INPUTS)]
    for q_shape, k_shape in [((3, 4, 5), (6, 5)), ((2, 4, 3, 8), (2, 1, 5, 8)), ((2, 3, 2, 4), (1, 3, 7, 4)),
                             ((4, 1, 3), (4, 5, 3)), ((2, 2, 5, 3), (5, 3)), ((3, 2, 6, 2), (3, 1, 6, 2)),
                             ((4, 3), (2, 5, 3))]:
        checks.append(distance_check(f"distance_scores on random queries {q_shape} and keys {k_shape}",
                                     inputs.randn(*q_shape), inputs.randn(*k_shape)))
    for q_shape, k_shape in [((6, 3), (5, 4)), ((2, 4, 5), (2, 4, 3)), ((3, 2, 8), (2, 7))]:
        checks.append(value_error_check(f"distance_scores on queries {q_shape} and keys {k_shape}, whose last "
                                        "dimensions differ", inputs.randn(*q_shape), inputs.randn(*k_shape)))
    checks.append(memory_check("distance_scores on random queries (2, 2, 48, 64) and keys (2, 1, 40, 64), its memory "
                               "measured", inputs.randn(2, 2, 48, 64), inputs.randn(2, 1, 40, 64)))
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
    "test_distance_scores": distance_scores,
    "test_distance_scores_broadcast": distance_scores_broadcast,
    "test_direction_scores": direction_scores,
}
