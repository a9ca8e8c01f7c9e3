"""Judges of step 02: softmax and context vectors.

A failing check names a mistake only by running it: the answer key is run again with the usual mistake of that part put
in (Check.mistakes) and the mistake is named when it gives the student's records (the same values, or the same error);
an error is read for what it says (a dimension asked of a tensor that has none, bmm given other than 3-D input). When
no known mistake gives the student's values, the message says so.
"""

import torch

from attention_course import data
from attention_grader.judging import (G, Check, NamedMistake, Program, call_check, default_judge, expect_value_error,
                                      raised_message)
from attention_grader.judges.common import (SOFTMAX_OPS, by_running, distinct, first_raised, library_ops,
                                            tensor_of, with_hint, with_other_hint)

INPUTS = data.journey_inputs()
SCORES = INPUTS @ INPUTS.T
# Part 6 applies the lesson's softmax to a case it did not work through: a mask, large hidden scores, entries that are
# already -inf and slices where nothing is visible.
TRANSFER = {"test_softmax_masked", "test_softmax_masked_blocked"}
NO_SOFTMAX = ("the exercise asks you to write softmax yourself: exponentiate, then divide by the sum, with elementary "
              "operations (exp, max, sum, division...), not a library's softmax (torch.softmax, softmin, log_softmax, "
              "nn.Softmax, distributions, scaled_dot_product_attention), whatever name reaches it")
NO_LOGSUMEXP = ("the exercise asks you to write softmax yourself: exp(x - logsumexp(x)) leaves the shift and the sum to "
                "a library's log-sum-exp (torch.logsumexp, logcumsumexp); exponentiate and sum with elementary "
                "operations (exp, max, sum, division...)")
# What a library's softmax dispatches, whatever name reached it (torch.softmax, nn.Softmax, softmin, Categorical,
# torch.ops...): judged from the aten operations the call ran in the kernel, not from the source. A library's
# log-sum-exp is refused too in Parts 1 and 2 (here, not in the shared SOFTMAX_OPS): exp(x - logsumexp(x)) is softmax
# with the shift and the sum done by the library, the two things these parts ask for.
LOGSUMEXP_OPS = frozenset({"logsumexp", "logcumsumexp"})
BY_HAND_REFUSED = SOFTMAX_OPS | LOGSUMEXP_OPS
def call(mistakes, what, function, *args, plain=(), **kwargs):
    """call_check whose failure names a mistake of `mistakes` by running it (those of them that differ here)."""
    check = call_check(what, function, *args, **kwargs)
    used = {k: v for k, v in kwargs.items() if k not in ("hint", "atol", "rtol", "check_inputs")}
    return by_running(check, distinct(mistakes, args, used, plain))


# ---------------------------------------------------------------------------------------------------------------
# Parts 1 and 2: the usual mistakes of a softmax, each a function of (x, dim) like the student's
# ---------------------------------------------------------------------------------------------------------------

def _over(fixed, shift=False):
    """exp, then divided by the sum over the dimension `fixed`, whatever `dim` is (after the maximum there)."""
    def softmax(x, dim=-1):
        e = torch.exp(x - x.amax(dim=fixed, keepdim=True)) if shift else torch.exp(x)
        return e / e.sum(dim=fixed, keepdim=True)
    return softmax


def _sum_without_keepdim(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim)


def _sum_of_everything(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum()


def _plain_sum(x, dim=-1):
    return x / x.sum(dim=dim, keepdim=True)


def _global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def _max_without_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim))
    return e / e.sum(dim=dim, keepdim=True)


def _shifted_sum_without_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


def _max_of_last(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _no_shift(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


SUM_OVER = ("the exponentials are divided by their sum over dimension {d} (dim={d}) whatever `dim` is: sum along "
            "`dim` instead, so that each slice along `dim` sums to 1")
KEEPDIM = ("the sum along `dim` is taken without keepdim=True: it loses that dimension, so each sum is divided into "
           "the wrong slices (or does not broadcast); keep it with sum(dim=dim, keepdim=True)")
WHOLE_SUM = ("the exponentials are divided by the sum of the whole tensor: `.sum()` without `dim` adds up the whole "
             "matrix; sum along `dim` only")
PLAIN_SUM = ("the scores are divided by their plain sum, without exponentiating: softmax is exp(x) divided by the sum "
             "of the exponentials (a plain sum gives negative scores negative weights)")
NAIVE_MISTAKES = ((SUM_OVER.format(d=0), {"softmax_naive": _over(0)}),
                  (SUM_OVER.format(d=1), {"softmax_naive": _over(1)}),
                  (SUM_OVER.format(d=-1), {"softmax_naive": _over(-1)}),
                  (KEEPDIM, {"softmax_naive": _sum_without_keepdim}),
                  (WHOLE_SUM, {"softmax_naive": _sum_of_everything}),
                  (PLAIN_SUM, {"softmax_naive": _plain_sum}))
STABLE_OVER = ("the maximum and the sum are taken over dimension {d} (dim={d}) whatever `dim` is: normalise each row "
               "(each slice along `dim`), with the maximum and the sum along `dim`")
STABLE_MISTAKES = (
    ("the maximum subtracted is that of the whole tensor (x.max()), not the maximum of each row (of each slice along "
     "`dim`): a row far below the overall maximum underflows to 0 / 0 = nan", {"softmax_stable": _global_max}),
    ("the maximum along `dim` is taken without keepdim=True: it loses that dimension and is subtracted from the wrong "
     "slices; use x.amax(dim=dim, keepdim=True)", {"softmax_stable": _max_without_keepdim}),
    (KEEPDIM, {"softmax_stable": _shifted_sum_without_keepdim}),
    ("the scores are exponentiated without subtracting the maximum first: exp(1000.0) overflows to inf, and inf / inf "
     "is nan", {"softmax_stable": _no_shift}),
    (STABLE_OVER.format(d=0), {"softmax_stable": _over(0, shift=True)}),
    (STABLE_OVER.format(d=-1), {"softmax_stable": _over(-1, shift=True)}),
    ("the maximum is taken over the last dimension whatever `dim` is, the sum along `dim`: take both along `dim`",
     {"softmax_stable": _max_of_last}),
    (WHOLE_SUM, {"softmax_stable": _sum_of_everything}),
)


def _unguarded(x, dim=-1):
    """softmax_stable without the empty-dimension case: amax over no entries raises, and a mistake that raises alike
    there is not told apart from it."""
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def naive_call(*args, **kwargs):
    return call(NAIVE_MISTAKES, *args, **kwargs)


def stable_call(*args, **kwargs):
    return call(STABLE_MISTAKES, *args, plain=(_unguarded,), **kwargs)


def how(part, x, **kwargs):
    """`part` called on `x` with its operations traced in the kernel: none of them a library's softmax or attention
    (a teaching check: a student who replaces the probe could forge the trace)."""
    what = f"{part} on a random {tuple(x.shape)} input, its operations traced"
    p = Program()
    p.record(p.call(G(part), p.tensor(x), trace=0, **kwargs), "the result", NO_SOFTMAX)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return None  # the calls say so
        trace = got[0].get("trace") if isinstance(got[0], dict) else None
        if not isinstance(trace, dict) or not isinstance(trace.get("ops"), list):
            return f"{what}: its operations were not recorded"
        used = library_ops(trace["ops"], BY_HAND_REFUSED)
        if not used:
            return None
        softmax = [op for op in used if op not in LOGSUMEXP_OPS]
        kind, hint = ("a library's softmax or attention kernel", NO_SOFTMAX) if softmax else (
            "a library's log-sum-exp", NO_LOGSUMEXP)
        return (f"{what}: it ran aten.{(softmax or used)[0]}, {kind}, not your own exponentials and sum"
                f"\n  likely mistake: {hint}")

    return Check(what, p, judge=judge)


def softmax_naive(inputs):
    hint = "exp(x) divided by its sum along `dim` (keepdim=True), for any number of dimensions"
    checks = [
        how("softmax_naive", inputs.randn(3, 5)), how("softmax_naive", inputs.randn(4, 2, 3), dim=1),
        naive_call("softmax_naive(attn_scores[1]), the scores of 'journey'", "softmax_naive", SCORES[1],
                   hint="exponentiate every score, then divide by the sum of the exponentials"),
        naive_call("softmax_naive(tensor([2.0, -1.0, 0.5]))", "softmax_naive", torch.tensor([2.0, -1.0, 0.5]),
                   hint="normalising by the plain sum turns a negative score into a negative weight: exponentiate "
                        "first"),
        naive_call("softmax_naive(attn_scores, dim=0)", "softmax_naive", SCORES, dim=0,
                   hint="use the `dim` argument rather than a fixed dimension"),
        naive_call("softmax_naive on a random (2, 3, 4) input with the default dim", "softmax_naive",
                   inputs.randn(2, 3, 4), hint="the default dimension is the last one, dim=-1"),
    ]
    for shape, dim in [((5,), -1), ((4, 7), -1), ((4, 7), 0), ((2, 3, 5), 1), ((2, 3, 5), -2), ((3, 1, 4), 0),
                       ((1, 1), -1), ((2, 3, 5), 2)]:
        checks.append(naive_call(f"softmax_naive on a random {shape} input with dim={dim}", "softmax_naive",
                                 inputs.randn(*shape, scale=3.0), dim=dim, hint=hint))
    return checks


def softmax_stable(inputs):
    hint = "subtract the maximum along `dim` (keepdim=True), then exp(x) divided by its sum along `dim`"
    checks = [
        how("softmax_stable", inputs.randn(3, 5)), how("softmax_stable", inputs.randn(4, 2, 3), dim=1),
        stable_call("softmax_stable(attn_scores)", "softmax_stable", SCORES,
                   hint="normalise each row: use `dim` for the maximum and for the sum, both with keepdim=True"),
        stable_call("softmax_stable(tensor([1000.0, 1001.0, 1002.0]))", "softmax_stable",
                   torch.tensor([1000.0, 1001.0, 1002.0]),
                   hint="exp(1000.0) overflows to inf and inf / inf is nan: subtract the largest entry along `dim` "
                        "before exponentiating"),
        stable_call("softmax_stable(1e4 * attn_scores)", "softmax_stable", 1e4 * SCORES, atol=1e-3,
                   hint="subtract the maximum of each row (not of the whole tensor) before exponentiating"),
        stable_call("softmax_stable(attn_scores, dim=0)", "softmax_stable", SCORES, dim=0,
                   hint="use `dim` for the maximum and for the sum, both with keepdim=True"),
        stable_call("softmax_stable on a random (2, 3, 4) input with the default dim", "softmax_stable",
                   inputs.randn(2, 3, 4), hint="the default dimension is the last one, dim=-1"),
    ]
    for shape, dim, scale in [((6,), -1, 1.0), ((4, 7), -1, 3.0), ((4, 7), 0, 3.0), ((2, 3, 5), 1, 10.0),
                              ((2, 3, 5), -2, 100.0), ((3, 1, 4), 0, 1000.0), ((1, 1), -1, 1000.0),
                              ((2, 5, 3), -1, 1e4), ((3, 4, 2, 5), 2, 300.0)]:
        checks.append(stable_call(f"softmax_stable on a random {shape} input times {scale:g} with dim={dim}",
                                 "softmax_stable", inputs.randn(*shape, scale=scale), dim=dim, hint=hint,
                                 atol=1e-5 if scale < 100 else 1e-3))
    # No entries along dim: torch.softmax returns an empty tensor of the shape of x, and so must softmax_stable.
    for shape, dim in (((3, 0), -1), ((0, 4), 0), ((2, 0, 3), 1)):
        checks.append(stable_call(f"softmax_stable on a {shape} input with dim={dim} (no entries along dim)",
                                 "softmax_stable", torch.zeros(shape), dim=dim,
                                 hint="an x with no entries along `dim` gives an empty result of the shape of x, as "
                                      "torch.softmax does: there is no maximum to take there, so return that empty "
                                      "result before you take one"))
    # Rows of very different sizes: torch.softmax is finite on every one of them.
    rows = torch.stack([inputs.randn(4), 1000 + inputs.randn(4), -1000 + inputs.randn(4)])
    for dim, x in ((-1, rows), (0, rows.T.contiguous())):
        checks.append(stable_call(f"softmax_stable on rows of very different sizes with dim={dim}", "softmax_stable",
                                 x, dim=dim, hint="subtract the maximum of each slice along `dim` (amax(dim=dim, "
                                                  "keepdim=True)), not the maximum of the whole tensor: a row far "
                                                  "below the overall maximum underflows to 0 / 0 = nan"))
    return checks


def _context(softmax_dim=-1, keys="transpose", weights="softmax", scale=False, times="inputs"):
    """context_vectors with one usual mistake put in."""
    def context_vectors(inputs):
        other = inputs.permute(*reversed(range(inputs.dim()))) if keys == ".T" else inputs.transpose(-2, -1)
        scores = inputs @ other
        if scale:
            scores = scores / inputs.shape[-1] ** 0.5
        w = torch.softmax(scores, dim=softmax_dim) if weights == "softmax" else scores
        return w @ (inputs if times == "inputs" else scores)
    return context_vectors


CONTEXT_MISTAKES = tuple((hint, {"context_vectors": _context(**changes)}) for hint, changes in (
    # the scores inputs @ inputs^T are symmetric: weights.T @ inputs is this same mistake for one sentence
    ("the softmax runs over dimension 0 (dim=0): for one sentence that normalises the columns (the queries), for a "
     "batch it mixes the sentences; run it over the keys, the last dimension (dim=-1)", dict(softmax_dim=0)),
    ("the softmax runs over dimension 1 (dim=1): for one (T, T) score matrix those are the keys, but for a batch "
     "(b, T, T) they are the queries; run it over the last dimension (dim=-1)", dict(softmax_dim=1)),
    ("`.T` reverses all dimensions (it reverses all three dimensions of a batch (b, T, d), giving (d, T, b)): swap "
     "only the last two, with transpose(-2, -1) or .mT", dict(keys=".T")),
    ("the scores are used as weights without a softmax: weights = softmax of the scores over the last dimension",
     dict(weights="scores")),
    ("the weights multiply the scores: multiply them by `inputs`, not by the scores, weights @ inputs",
     dict(times="scores")),
    ("the scores are divided by sqrt(d) before the softmax: this step's attention has no scaling (step 03 adds it, "
     "with trainable projections)", dict(scale=True)),
))


def context_call(*args, **kwargs):
    return call(CONTEXT_MISTAKES, *args, **kwargs)


def context_vectors_single(inputs):
    checks = [context_call("context_vectors(inputs) on the journey sentence", "context_vectors", INPUTS,
                         hint="weights = softmax of the scores over the last dimension, then weights @ inputs")]
    for num_tokens, d in [(5, 3), (1, 4), (7, 2), (3, 8), (4, 4)]:
        checks.append(context_call(f"context_vectors on a random ({num_tokens}, {d}) input", "context_vectors",
                                 inputs.randn(num_tokens, d),
                                 hint="softmax over the last dimension of the scores, then weights @ inputs"))
    return checks


def context_vectors_batched(inputs):
    hint = ("each sentence on its own: scores over the last two dimensions, softmax over the last one, then weights @ "
            "inputs")
    checks = [context_call("context_vectors(batch) on the journey batch", "context_vectors", data.journey_batch(),
                         hint=hint),
              context_call("context_vectors(kid_inputs), 'the kid smiles'", "context_vectors", data.kid_smiles_inputs(),
                         hint=hint)]
    for shape in [(3, 5, 4), (1, 2, 3), (2, 3, 4, 5), (5, 1, 6), (2, 7, 3), (4, 3, 3)]:
        checks.append(context_call(f"context_vectors on a random {shape} input", "context_vectors",
                                 inputs.randn(*shape), hint=hint))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 6: softmax over what a mask leaves visible
# ---------------------------------------------------------------------------------------------------------------

MASKED = ("set the hidden entries (True) to -inf, or drop them after exponentiating, shift by the maximum of the visible "
          "entries of each slice along `dim`, and divide by the sum of the visible exponentials")
BLOCKED = ("a slice with every entry hidden has nothing to normalise: 0 / 0 gives nan there (softmax of a row of -inf is "
           "nan), so return zeros for it, e.g. divide by the sum clamped to at least 1, or torch.where on the sum")
INVERTED = ("the mask is used the other way round: True means hidden (the convention of step 04), and here the "
            "entries where mask is False are hidden instead")
NOT_ZERO = "a hidden entry gets weight exactly 0: fill it with -inf (or zero its exponential), not with a finite number"
RENORMALISE = ("the visible weights of every slice must sum to 1: softmax over the visible entries only, not the full "
               "softmax with the hidden weights zeroed afterwards")
HIDDEN_MAX = ("the shift must be the maximum of the visible entries: a hidden entry with a huge score makes every "
              "visible exp(x - max) underflow to 0")
FILLED_BLOCKED = ("a slice with every entry hidden must be all zeros: filling hidden entries with a large negative "
                  "number gives such a slice equal weights instead")


def masked_reference(x, mask, dim):
    x = x.double()
    hidden = mask | (x == float("-inf"))
    weights = torch.softmax(x.masked_fill(hidden, float("-inf")), dim=dim).nan_to_num(0.0)
    return weights, hidden.expand(x.shape)


def masked_mistake(got, x, mask, dim, hint):
    """What the student's weights do wrong, as facts (the cause is named only by running a mistake: MASKED_MISTAKES)."""
    weights, hidden = masked_reference(x, mask, dim)
    if got.shape != weights.shape:
        return "return a tensor of the shape of x: the mask broadcasts to x, not x to the mask"
    blocked = hidden.all(dim=dim, keepdim=True).expand(x.shape)
    if torch.isnan(got[blocked]).any():
        return "a slice with every entry hidden came out nan: it must be all zeros, never nan"
    if torch.isnan(got).any() or torch.isinf(got).any():
        return "the weights hold nan or inf where some entries are visible: they must stay finite"
    if (got[hidden & ~blocked].abs() > 1e-6).any():
        return "a hidden entry got a weight other than 0: it must get weight exactly 0"
    if (got[blocked].abs() > 1e-6).any():
        return "a slice with every entry hidden got weights other than 0: it must be all zeros"
    return hint


def _checked(function):
    """A mistake of softmax_masked as a function of (x, mask, dim=-1), like the student's (the masks of the checks
    it is tried on are valid, so it need not check them)."""
    def softmax_masked(x, mask, dim=-1):
        return function(x, mask, dim)
    return softmax_masked


def _hidden(x, mask):
    return mask | torch.isneginf(x)


MASKED_MISTAKES = tuple((hint, {"softmax_masked": _checked(function)}) for hint, function in (
    ("the hidden entries are set to -inf and softmax runs on them as they are: a slice with every entry hidden (or "
     "already -inf) is the softmax of all -inf, 0 / 0 = nan; such a slice must be all zeros, never nan (e.g. "
     "torch.where on the sum, or nan_to_num)",
     lambda x, mask, dim: torch.softmax(x.masked_fill(mask, float("-inf")), dim=dim)),
    ("the hidden entries are filled with a large finite number (like -1e9) rather than -inf: a slice with every entry "
     "hidden then gets equal weights, not zeros, and scores already -inf stay a slice of -inf (nan)",
     lambda x, mask, dim: torch.softmax(x.masked_fill(mask, -1e9), dim=dim)),
    ("the softmax runs over all entries and the hidden weights are zeroed after the softmax: the visible weights are "
     "not renormalised, so they sum to less than 1; take the softmax over the visible entries only",
     lambda x, mask, dim: torch.softmax(x, dim=dim).masked_fill(_hidden(x, mask), 0.0).nan_to_num(0.0)),
    # softmax over every entry, then the visible weights renormalised, computes the same: both are this one mistake
    ("hidden entries take part in the shift (or in a softmax over every entry) before they are dropped: a hidden "
     "score far above the visible ones makes every visible exp(x - max) underflow to 0; the shift must be the maximum "
     "of the visible entries (hide the entries before exponentiating)",
     lambda x, mask, dim: (lambda e: e / e.sum(dim=dim, keepdim=True).clamp(min=1e-30))(
         torch.exp(x - x.amax(dim=dim, keepdim=True)).masked_fill(_hidden(x, mask), 0.0))),
    ("the exponentials are taken without subtracting the maximum of the visible entries: large visible scores "
     "overflow to inf (inf / inf = nan), and a slice with every entry hidden gives 0 / 0 = nan",
     lambda x, mask, dim: (lambda e: e / e.sum(dim=dim, keepdim=True))(
         torch.exp(x.masked_fill(mask, float("-inf"))))),
    (INVERTED, lambda x, mask, dim: torch.softmax(x.masked_fill(~mask, float("-inf")), dim=dim).nan_to_num(0.0)),
))


def masked_check(what, x, mask, dim=-1, hint=MASKED):
    check = call_check(what, "softmax_masked", x, mask, hint=hint, atol=1e-4, dim=dim)

    def judge(got, want):
        problem = default_judge(check, got, want)
        if problem and first_raised(got) is None and got and "tensor" in got[0]:
            found = tensor_of(got[0])
            if found.is_floating_point():
                return with_other_hint(problem, masked_mistake(found, x, mask, dim, hint))
        return problem

    check.judge = judge
    return by_running(check, distinct(MASKED_MISTAKES, (x, mask), {"dim": dim}))


def random_mask(inputs, shape, p):
    return inputs.rand(*shape) < p


def softmax_masked(inputs):
    scores = SCORES
    last_two = torch.tensor([False, False, False, False, True, True])
    checks = [masked_check("softmax_masked(journey_scores, last_two_hidden)", scores, last_two),
              masked_check("softmax_masked(journey_scores, last_two_hidden[:, None], dim=0)", scores, last_two[:, None],
                           dim=0),
              masked_check("softmax_masked on [[0, 1, 1000]] with the 1000 hidden", torch.tensor([[0.0, 1.0, 1000.0]]),
                           torch.tensor([[False, False, True]]), hint=HIDDEN_MAX)]
    for shape, mask_shape, dim, scale in [((5,), (5,), -1, 1.0), ((4, 7), (4, 7), -1, 3.0), ((4, 7), (7,), -1, 10.0),
                                          ((4, 7), (4, 1), 0, 3.0), ((2, 5, 5), (5, 5), -1, 100.0),
                                          ((2, 3, 5), (2, 1, 5), -1, 1000.0), ((3, 2, 4, 6), (6,), -1, 1e4),
                                          ((2, 6, 3), (1, 6, 1), -2, 30.0)]:
        x = inputs.randn(*shape, scale=scale)
        mask = random_mask(inputs, mask_shape, 0.3)
        # the first entry of every slice along dim stays visible: fully hidden slices are the next cell's
        mask.select(dim % len(shape) - (len(shape) - len(mask_shape)), 0).fill_(False)
        checks.append(masked_check(f"softmax_masked on a random {shape} input times {scale:g} with a {mask_shape} "
                                   f"mask and dim={dim}", x, mask, dim=dim))
    # a row whose hidden score is far above the visible ones next to a row whose hidden score is not: hidden scores that
    # entered the softmax show in both rows, in different ways
    checks.append(masked_check("softmax_masked on [[0, 1, 1000], [0, 1, 2]] with the last column hidden",
                               torch.tensor([[0.0, 1.0, 1000.0], [0.0, 1.0, 2.0]]),
                               torch.tensor([False, False, True]), hint=HIDDEN_MAX))
    # hidden entries far above the visible ones: they must not take part in the shift
    x = inputs.randn(3, 8, scale=5.0)
    mask = random_mask(inputs, (3, 8), 0.4)
    mask[:, 0], mask[:, 1] = False, True
    checks.append(masked_check("softmax_masked on a random (3, 8) input whose hidden entries are 1e4 larger",
                               x + 1e4 * mask, mask, hint=HIDDEN_MAX))
    checks.append(gradient_check("backward of (softmax_masked([[0, 1, 1000]], 1000 hidden) * w).sum()",
                                 torch.tensor([[0.0, 1.0, 1000.0]]), torch.tensor([[False, False, True]]),
                                 torch.tensor([[1.0, -2.0, 3.0]])))
    for shape, mask_shape, dim, scale in [((4, 7), (7,), -1, 3.0), ((2, 5, 6), (2, 1, 6), -1, 100.0),
                                          ((6, 3), (6, 1), 0, 10.0)]:
        x = inputs.randn(*shape, scale=scale)
        mask = random_mask(inputs, mask_shape, 0.4)
        mask.select(dim % len(shape) - (len(shape) - len(mask_shape)), 0).fill_(False)
        checks.append(gradient_check(f"backward of (softmax_masked(x, mask, dim={dim}) * w).sum() on a random {shape} "
                                     f"input whose hidden entries are 1e3 larger, a {mask_shape} mask",
                                     x + 1e3 * mask, mask, inputs.randn(*shape), dim=dim))
    return checks


EXP_FIRST = ("an entry is exponentiated before it is hidden: exp of a large hidden score is inf, and zeroing it "
             "afterwards (masked_fill, torch.where, multiplying by 0) leaves 0 * inf = nan in the backward pass. Hide "
             "the entries before exponentiating")


def gradient_check(what, x, mask, w, dim=-1):
    """The backward of softmax_masked: the gradient of (weights * w).sum() with respect to x, finite and right."""
    p = Program()
    leaf = p.call(p.tensor(x).attr("requires_grad_"), grad=True)
    weights = p.call(G("softmax_masked"), leaf, p.tensor(mask), dim=dim, grad=True)
    p.call(p.call(p.call(weights.attr("mul"), p.tensor(w), grad=True).attr("sum"), grad=True).attr("backward"),
           grad=True)
    p.record(leaf.attr("grad"), "the gradient with respect to x", MASKED)
    check = Check(what, p)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        if got and "tensor" in got[0]:
            grad = tensor_of(got[0])
            if grad.shape == x.shape and not torch.isfinite(grad).all():
                return with_hint(f"{what}: the gradient holds nan or inf", EXP_FIRST)
        return default_judge(check, got, want)

    check.judge = judge
    return check


def bad_mask_check(what, x, mask):
    """softmax_masked must refuse `mask` with a ValueError naming it: a mask that is not bool, or whose shape does not
    broadcast to x's without changing it. A mask that goes through was not checked: the message says which check."""
    p = Program()
    p.call(G("softmax_masked"), p.tensor(x), p.tensor(mask))
    check = expect_value_error(what, p, "mask")
    judge = check.judge
    if mask.dtype != torch.bool:
        unchecked = (f"the mask's dtype is not checked: a {str(mask.dtype).replace('torch.', '')} mask is used as it "
                     "is (or turned into bool) instead of refused; raise ValueError naming `mask` unless mask.dtype "
                     "is torch.bool (a float 0/1 mask means something else in other libraries)")
    elif len(mask.shape) > len(x.shape):
        unchecked = ("the mask's shape is not checked: a mask with more dimensions than x broadcasts x up to its own "
                     "shape (masked_fill and torch.where do), so the result is larger than x; raise ValueError "
                     "naming `mask` unless torch.broadcast_shapes(mask.shape, x.shape) == x.shape")
    else:
        unchecked = ("the mask's shape is not checked: raise ValueError naming `mask` when it does not broadcast to "
                     "x.shape (torch.broadcast_shapes raises RuntimeError then), before any other operation does")

    def judged(got, want):
        problem = judge(got, want)
        if problem and (not got or "raised" not in got[-1]):
            return NamedMistake(problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {unchecked}")
        if problem and got[-1]["raised"] not in ("ValueError", "NotImplementedError"):
            return NamedMistake(problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {unchecked} "
                                f"(here {got[-1]['raised']} came from a later operation)")
        return problem

    check.judge = judged
    return check


def softmax_masked_blocked(inputs):
    blocked_row = torch.tensor([[False, True, False], [False, False, False], [True, True, True]])
    minus_inf = torch.tensor([[0.0, float("-inf"), 0.0], [float("-inf"), float("-inf"), float("-inf")]])
    checks = [masked_check("softmax_masked with row 2 fully hidden", torch.tensor([[0.5, 2.0, 0.5], [1.0, 2.0, 3.0],
                                                                                  [4.0, 5.0, 6.0]]), blocked_row,
                           hint=BLOCKED),
              masked_check("softmax_masked on scores that are already -inf, nothing hidden", minus_inf,
                           torch.zeros(3, dtype=torch.bool), hint="a score of -inf counts as hidden; " + BLOCKED)]
    checks.append(masked_check("softmax_masked on [[0, 1, 1000], [0, 1, 2], [5, 6, 7]] with the last column and the "
                               "last row hidden", torch.tensor([[0.0, 1.0, 1000.0], [0.0, 1.0, 2.0], [5.0, 6.0, 7.0]]),
                               torch.tensor([[False, False, True], [False, False, True], [True, True, True]]),
                               hint=BLOCKED))
    for shape, dim, scale in [((4, 6), -1, 1.0), ((3, 5, 5), -1, 100.0), ((5, 4), 0, 10.0), ((2, 3, 4, 4), -1, 1e4),
                              ((2, 4, 3), 1, 3.0)]:
        x = inputs.randn(*shape, scale=scale)
        mask = random_mask(inputs, shape, 0.3)
        index = [inputs.randint(0, size) for size in shape]
        index[dim] = slice(None)
        mask[tuple(index)] = True  # one slice along dim fully hidden
        checks.append(masked_check(f"softmax_masked on a random {shape} input times {scale:g} with a slice along "
                                   f"dim={dim} fully hidden", x, mask, dim=dim, hint=BLOCKED))
    x = inputs.randn(3, 5)
    x[1] = float("-inf")
    x[0, 2] = float("-inf")
    checks.append(masked_check("softmax_masked on a random (3, 5) input with -inf scores and a row of -inf", x,
                               random_mask(inputs, (5,), 0.2), hint="a score of -inf counts as hidden; " + BLOCKED))
    for what, x, mask in [("softmax_masked with a float 0/1 mask", inputs.randn(4, 4), (inputs.rand(4, 4) < 0.5).float()),
                          ("softmax_masked with an int mask", inputs.randn(3, 5), (inputs.rand(5) < 0.5).long()),
                          ("softmax_masked with a (4,) bool mask on a (3, 5) input", inputs.randn(3, 5),
                           inputs.rand(4) < 0.5),
                          ("softmax_masked with a (2, 3, 5) bool mask on a (3, 5) input", inputs.randn(3, 5),
                           inputs.rand(2, 3, 5) < 0.5)]:
        checks.append(bad_mask_check(what, x, mask))
    checks.append(masked_check("softmax_masked on a (2, 0) input (no keys) with a (0,) mask", torch.zeros(2, 0),
                               torch.zeros(0, dtype=torch.bool),
                               hint="an empty dimension gives an empty result of the shape of x, as torch.softmax does"))
    return checks


CELLS = {
    "test_softmax_naive": softmax_naive,
    "test_softmax_stable": softmax_stable,
    "test_context_vectors_single": context_vectors_single,
    "test_context_vectors_batched": context_vectors_batched,
    "test_softmax_masked": softmax_masked,
    "test_softmax_masked_blocked": softmax_masked_blocked,
}
