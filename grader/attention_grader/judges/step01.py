"""Judges of step 01: dot-product scores."""
from attention_grader.judging import call_check
from attention_course import data

INPUTS = data.journey_inputs()


def attention_scores_for_query(inputs):
    checks = [call_check("attention_scores_for_query(inputs, inputs[1]) on the journey sentence",
                         "attention_scores_for_query", INPUTS, INPUTS[1],
                         hint="entry i is the sum over d of inputs[i, d] * query[d]: inputs @ query")]
    for num_tokens, d in [(5, 3), (3, 3), (1, 7), (9, 4)]:
        checks.append(call_check(f"attention_scores_for_query on a random ({num_tokens}, {d}) input",
                                 "attention_scores_for_query", inputs.randn(num_tokens, d), inputs.randn(d),
                                 hint="score token i against the query: inputs @ query, not query @ inputs"))
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
    checks = [call_check("attention_scores(batch) on the journey batch", "attention_scores", data.journey_batch(),
                         hint=hint)]
    for shape in [(3, 5, 4), (1, 2, 3), (2, 3, 4, 5), (5, 1, 6)]:
        checks.append(call_check(f"attention_scores on a random {shape} input", "attention_scores",
                                 inputs.randn(*shape), hint=hint))
    return checks


CELLS = {
    "test_attention_scores_for_query": attention_scores_for_query,
    "test_attention_scores_single": attention_scores_single,
    "test_attention_scores_batched": attention_scores_batched,
}
