"""Judges of step 02: softmax and context vectors."""
import torch

from attention_course import data
from attention_grader.judging import METHODS, allow_only, call_check

INPUTS = data.journey_inputs()
SCORES = INPUTS @ INPUTS.T
NO_SOFTMAX = ("the exercise asks you to write softmax yourself: exponentiate, then divide by the sum, with elementary "
              "operations (exp, max, sum, indexing...) and helpers of your own, not a library's softmax (torch.softmax, "
              "softmin, log_softmax, nn.Softmax, distributions) nor a name reached by getattr, eval or torch.ops")


def how(part):
    """Part 1 and 2's rule: elementary operations only (logsumexp too: exp(x - logsumexp(x)) is softmax written out)."""
    return allow_only(part, part, NO_SOFTMAX, extra={"logsumexp"}, methods=METHODS | {"logsumexp"})


def softmax_naive(inputs):
    hint = "exp(x) divided by its sum along `dim` (keepdim=True), for any number of dimensions"
    checks = [
        *how("softmax_naive"),
        call_check("softmax_naive(attn_scores[1]), the scores of 'journey'", "softmax_naive", SCORES[1],
                   hint="exponentiate every score, then divide by the sum of the exponentials"),
        call_check("softmax_naive(tensor([2.0, -1.0, 0.5]))", "softmax_naive", torch.tensor([2.0, -1.0, 0.5]),
                   hint="normalising by the plain sum turns a negative score into a negative weight: exponentiate "
                        "first"),
        call_check("softmax_naive(attn_scores, dim=0)", "softmax_naive", SCORES, dim=0,
                   hint="use the `dim` argument rather than a fixed dimension"),
        call_check("softmax_naive on a random (2, 3, 4) input with the default dim", "softmax_naive",
                   inputs.randn(2, 3, 4), hint="the default dimension is the last one, dim=-1"),
    ]
    for shape, dim in [((5,), -1), ((4, 7), -1), ((4, 7), 0), ((2, 3, 5), 1), ((2, 3, 5), -2), ((3, 1, 4), 0),
                       ((1, 1), -1), ((2, 3, 5), 2)]:
        checks.append(call_check(f"softmax_naive on a random {shape} input with dim={dim}", "softmax_naive",
                                 inputs.randn(*shape, scale=3.0), dim=dim, hint=hint))
    return checks


def softmax_stable(inputs):
    hint = "subtract the maximum along `dim` (keepdim=True), then exp(x) divided by its sum along `dim`"
    checks = [
        *how("softmax_stable"),
        call_check("softmax_stable(attn_scores)", "softmax_stable", SCORES,
                   hint="normalise each row: use `dim` for the maximum and for the sum, both with keepdim=True"),
        call_check("softmax_stable(tensor([1000.0, 1001.0, 1002.0]))", "softmax_stable",
                   torch.tensor([1000.0, 1001.0, 1002.0]),
                   hint="exp(1000.0) overflows to inf and inf / inf is nan: subtract the largest entry along `dim` "
                        "before exponentiating"),
        call_check("softmax_stable(1e4 * attn_scores)", "softmax_stable", 1e4 * SCORES, atol=1e-3,
                   hint="subtract the maximum of each row (not of the whole tensor) before exponentiating"),
        call_check("softmax_stable(attn_scores, dim=0)", "softmax_stable", SCORES, dim=0,
                   hint="use `dim` for the maximum and for the sum, both with keepdim=True"),
        call_check("softmax_stable on a random (2, 3, 4) input with the default dim", "softmax_stable",
                   inputs.randn(2, 3, 4), hint="the default dimension is the last one, dim=-1"),
    ]
    for shape, dim, scale in [((6,), -1, 1.0), ((4, 7), -1, 3.0), ((4, 7), 0, 3.0), ((2, 3, 5), 1, 10.0),
                              ((2, 3, 5), -2, 100.0), ((3, 1, 4), 0, 1000.0), ((1, 1), -1, 1000.0),
                              ((2, 5, 3), -1, 1e4), ((3, 4, 2, 5), 2, 300.0)]:
        checks.append(call_check(f"softmax_stable on a random {shape} input times {scale:g} with dim={dim}",
                                 "softmax_stable", inputs.randn(*shape, scale=scale), dim=dim, hint=hint,
                                 atol=1e-5 if scale < 100 else 1e-3))
    # Rows of very different sizes: torch.softmax is finite on every one of them.
    rows = torch.stack([inputs.randn(4), 1000 + inputs.randn(4), -1000 + inputs.randn(4)])
    for dim, x in ((-1, rows), (0, rows.T.contiguous())):
        checks.append(call_check(f"softmax_stable on rows of very different sizes with dim={dim}", "softmax_stable",
                                 x, dim=dim, hint="subtract the maximum of each slice along `dim` (amax(dim=dim, "
                                                  "keepdim=True)), not the maximum of the whole tensor: a row far "
                                                  "below the overall maximum underflows to 0 / 0 = nan"))
    return checks


def context_vectors_single(inputs):
    checks = [call_check("context_vectors(inputs) on the journey sentence", "context_vectors", INPUTS,
                         hint="weights = softmax of the scores over the last dimension, then weights @ inputs")]
    for num_tokens, d in [(5, 3), (1, 4), (7, 2), (3, 8), (4, 4)]:
        checks.append(call_check(f"context_vectors on a random ({num_tokens}, {d}) input", "context_vectors",
                                 inputs.randn(num_tokens, d),
                                 hint="softmax over the last dimension of the scores, then weights @ inputs"))
    return checks


def context_vectors_batched(inputs):
    hint = ("each sentence on its own: scores over the last two dimensions (transpose(-2, -1), not .T), softmax "
            "over the last one, then weights @ inputs")
    checks = [call_check("context_vectors(batch) on the journey batch", "context_vectors", data.journey_batch(),
                         hint=hint),
              call_check("context_vectors(kid_inputs), 'the kid smiles'", "context_vectors", data.kid_smiles_inputs(),
                         hint=hint)]
    for shape in [(3, 5, 4), (1, 2, 3), (2, 3, 4, 5), (5, 1, 6), (2, 7, 3), (4, 3, 3)]:
        checks.append(call_check(f"context_vectors on a random {shape} input", "context_vectors",
                                 inputs.randn(*shape), hint=hint))
    return checks


CELLS = {
    "test_softmax_naive": softmax_naive,
    "test_softmax_stable": softmax_stable,
    "test_context_vectors_single": context_vectors_single,
    "test_context_vectors_batched": context_vectors_batched,
}
