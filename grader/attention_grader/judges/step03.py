"""Judges of step 03: scaled dot-product attention, SelfAttention_v1 and _v2, and the weight transfer.

As in step 02, a failing check names a mistake by running it in the answer key (Check.mistakes: the usual mistakes of
attention, of the two modules and of the transfers), or by reading what the student's error says; when no usual mistake
gives the student's values, the message says so.
"""
import re

import torch
from torch import nn

from attention_course import data
from attention_grader.judging import (G, Check, Expect, NamedMistake, Program, compare, default_judge,
                                      expect_value_error, raised_message)
from attention_grader.judges.common import (EXACT, NONE_MATCHES, by_running, differ, distinct, first_raised,
                                            forward_check, linear_state, own_attention_check, read_error,
                                            shape_problem, tensor_of, with_hint)

INPUTS = data.journey_inputs()  # (6, 3)
BATCH = data.journey_batch()    # (2, 6, 3)
NAMES = ("W_query", "W_key", "W_value")


def lesson_matrices():
    """The lesson's (3, 2) matrices: torch.manual_seed(123), then torch.rand(3, 2) three times."""
    generator = torch.Generator().manual_seed(123)
    return {name: torch.rand(3, 2, generator=generator) for name in NAMES}


LESSON = lesson_matrices()
INPLACE = "use out-of-place operations: queries / scale, not queries /= scale"
LAST_TWO = "work on the last two dimensions only, for any number of leading dimensions"
GLOBALS = ("forward must compute everything from its argument x and the module's own weights, not from notebook "
           "globals (the global `inputs`, or `queries`, `keys`, `values` of the cells above)")


# ---------------------------------------------------------------------------------------------------------------
# Part 1: scaled dot-product attention
# ---------------------------------------------------------------------------------------------------------------

def read_attention_error(message):
    """What an error of attention code says it did, when its words leave no doubt; "" otherwise."""
    message = str(message)
    if "leaf Variable that requires grad" in message:
        return ("a parameter (a leaf tensor that requires grad) is changed in place outside torch.no_grad(): copy "
                "into it inside `with torch.no_grad():`")
    found = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", message)
    if found:
        a, b, c, d = map(int, found.groups())
        return (f"a ({a}, {b}) matrix was multiplied by a ({c}, {d}) one: the inner sizes {b} and {c} differ. An "
                f"nn.Linear weight is stored as (d_out, d_in) = ({c}, {d}) and nn.Linear computes x @ weight.T: "
                "multiply by the transposed weight, or call the layer itself") if b == d else ""
    return read_error(message)


def _attention(scale="sqrt_d_k", dim=-1, keys="transpose", after=False):
    """scaled_dot_product_attention with one usual mistake put in."""
    def scaled_dot_product_attention(queries, keys_, values):
        if keys == ".T":
            swapped = keys_.permute(*reversed(range(keys_.dim())))
        elif keys == "1, 2":
            swapped = keys_.transpose(1, 2)
        else:
            swapped = keys_.transpose(-2, -1)
        scores = queries @ swapped
        divisor = {"sqrt_d_k": keys_.shape[-1] ** 0.5, "d_k": keys_.shape[-1], "sqrt_d_v": values.shape[-1] ** 0.5,
                   "none": 1.0}[scale]
        weights = torch.softmax(scores, dim=dim) / divisor if after else torch.softmax(scores / divisor, dim=dim)
        return weights @ values
    return scaled_dot_product_attention


NOT_SCALED = "the scores are not scaled: divide them by sqrt(d_k) = sqrt(keys.shape[-1]) before the softmax"
SCALED_BY_D_K = "the scores were divided by d_k instead of its square root: divide them by sqrt(d_k)"
SCALED_BY_D_V = ("the scores are scaled by the width of the values, sqrt(d_v): d_k is the width of the keys, "
                 "keys.shape[-1]")
OVER_QUERIES = ("softmax over the wrong dimension: it runs over the queries (dim=-2), so each column sums to 1; run it "
                "over the keys, the last dimension (dim=-1)")
OVER_DIM_0 = "softmax over the wrong dimension: it runs over dimension 0; run it over the keys, the last one (dim=-1)"
DOT_T = ("`.T` reverses all dimensions of a batch, not only the last two: swap only the last two with "
         "transpose(-2, -1) or .mT")
TRANSPOSE_1_2 = ("keys.transpose(1, 2) swaps dimensions 1 and 2, which are the last two only for 3-D input: it fails "
                 "on (T, d) inputs and swaps the wrong ones with more leading dimensions; use transpose(-2, -1)")
AFTER_SOFTMAX = ("the weights are divided by sqrt(d_k) after the softmax, so they no longer sum to 1: divide the "
                 "scores before the softmax")
SDPA_MISTAKES = tuple((hint, {"scaled_dot_product_attention": _attention(**changes)}) for hint, changes in (
    (NOT_SCALED, dict(scale="none")), (SCALED_BY_D_K, dict(scale="d_k")), (SCALED_BY_D_V, dict(scale="sqrt_d_v")),
    (OVER_QUERIES, dict(dim=-2)), (OVER_DIM_0, dict(dim=0)), (DOT_T, dict(keys=".T")),
    (TRANSPOSE_1_2, dict(keys="1, 2")), (AFTER_SOFTMAX, dict(after=True))))


def sdpa_check(what, q, k, v, atol=1e-4):
    p = Program()
    refs = [p.tensor(t) for t in (q, k, v)]
    p.record(p.call(G("scaled_dot_product_attention"), *refs), "the result")
    for ref, name in zip(refs, ("queries", "keys", "values")):
        p.record(ref, f"the {name} after the call")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        problem = shape_problem(got[0], want[0], what, "one context vector per query: (..., T_q, T_k) weights @ "
                                                       "(..., T_k, d_v) values gives (..., T_q, d_v); " + LAST_TWO)
        for index, name in enumerate(("queries", "keys", "values"), 1):
            problem = problem or with_hint(compare(got[index], want[index], f"{what}: the {name} after the call",
                                                   EXACT), f"it changed its {name} in place: {INPLACE}")
        if problem:
            return problem
        return with_hint(compare(got[0], want[0], what, Expect("", atol=atol, rtol=atol)),
                         "softmax(queries @ keys^T / sqrt(keys.shape[-1]), dim=-1) @ values, on the last two "
                         "dimensions only")

    return by_running(Check(what, p, judge=judge), distinct(SDPA_MISTAKES, (q, k, v), {}), read_attention_error)


def shapes(*tensors):
    return ", ".join(str(tuple(t.shape)) for t in tensors)


def scaled_dot_product_attention(inputs):
    queries, keys, values = (INPUTS @ LESSON[name] for name in NAMES)
    one_query, two_keys = torch.ones(1, 4), torch.tensor([[1.0, 1, 1, 1], [0, 0, 0, 0]])
    batched = [BATCH @ LESSON[name] for name in NAMES]
    checks = [
        sdpa_check("scaled_dot_product_attention(queries[:2], keys, values) of the lesson", queries[:2], keys, values),
        sdpa_check("scaled_dot_product_attention(queries, keys, torch.eye(6)) of the lesson", queries, keys,
                   torch.eye(6)),
        sdpa_check("scaled_dot_product_attention on the (1, 4) query and (2, 4) keys of the visible example, values "
                   "torch.eye(2)", one_query, two_keys, torch.eye(2)),
        sdpa_check("scaled_dot_product_attention(queries, keys, values) of the lesson", queries, keys, values),
        sdpa_check("scaled_dot_product_attention on the lesson's (2, 6, 2) batch", *batched),
    ]
    configs = [((), 4, 4, 8, 8), ((), 3, 5, 4, 6), ((2,), 5, 3, 16, 2), ((3, 2), 2, 7, 5, 3), ((1,), 1, 1, 3, 4),
               ((2,), 6, 6, 64, 5), ((2,), inputs.randint(1, 6), inputs.randint(2, 8), inputs.randint(2, 40),
                                     inputs.randint(1, 6))]
    for lead, t_q, t_k, d_k, d_v in configs:
        q, k, v = inputs.randn(*lead, t_q, d_k), inputs.randn(*lead, t_k, d_k), inputs.randn(*lead, t_k, d_v)
        checks.append(sdpa_check(f"scaled_dot_product_attention on queries {tuple(q.shape)}, keys "
                                 f"{tuple(k.shape)}, values {tuple(v.shape)}", q, k, v))
    p = Program()
    q, k, v = inputs.randn(2, 3, 4), inputs.randn(2, 5, 4), inputs.randn(2, 5, 3)
    call = p.call(G("scaled_dot_product_attention"), p.tensor(q), p.tensor(k), p.tensor(v), trace=0)
    return checks + [own_attention_check("scaled_dot_product_attention on queries (2, 3, 4), keys (2, 5, 4), values "
                                         "(2, 5, 3), watched operation by operation", p, call, OWN_ATTENTION)]


OWN_ATTENTION = ("this part asks for attention's steps written out (scores, scaling, softmax, weighted sum); "
                 "torch.nn.functional.scaled_dot_product_attention does them all for you (step 08 uses it)")


# ---------------------------------------------------------------------------------------------------------------
# Parts 2 and 3: the two modules
# ---------------------------------------------------------------------------------------------------------------

def trainable(check, hint):
    """check, and every parameter of the module it builds must require gradients."""
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        if problem:
            return problem
        frozen = [str(entry[0]) for entry in got[0]["parameters"] if entry[2] is not True]
        return with_hint(frozen and f"{check.what}: {', '.join(frozen[:6])} does not require gradients", hint)

    check.judge = judged
    return check


class MistakenSelfAttention(nn.Module):
    """SelfAttention_v1 (matrices) or _v2 (nn.Linear layers) as the contract has them, with the usual mistake its class
    attributes name put in."""
    linear = False  # v2: nn.Linear layers
    layout = "d_in, d_out"  # v1 only: "d_out, d_in", nn.Linear's layout, used transposed
    bias = None  # v2 only: None: bias=qkv_bias; True or False: always
    untransposed = False  # v2 only: x @ layer.weight, the weight as nn.Linear stores it
    scale = "d_out"  # "d_in", "none", "d_k" (d_k itself, not its root)
    keys = "transpose"  # ".T"
    softmax_dim = -1

    def __init__(self, d_in, d_out, qkv_bias=False):
        nn.Module.__init__(self)
        self.d_in = d_in
        for name in NAMES:
            if self.linear:
                setattr(self, name, nn.Linear(d_in, d_out, bias=qkv_bias if self.bias is None else self.bias))
            else:
                shape = (d_in, d_out) if self.layout == "d_in, d_out" else (d_out, d_in)
                setattr(self, name, nn.Parameter(torch.rand(*shape)))

    def project(self, x, name):
        layer = getattr(self, name)
        if not self.linear:
            return x @ (layer if self.layout == "d_in, d_out" else layer.T)
        if self.untransposed:
            return x @ layer.weight + (layer.bias if layer.bias is not None else 0)
        return layer(x)

    def forward(self, x):
        queries, keys, values = (self.project(x, name) for name in NAMES)
        swapped = keys.permute(*reversed(range(keys.dim()))) if self.keys == ".T" else keys.transpose(-2, -1)
        divisor = {"d_out": keys.shape[-1] ** 0.5, "d_in": self.d_in ** 0.5, "none": 1.0, "d_k": keys.shape[-1]}
        return torch.softmax(queries @ swapped / divisor[self.scale], dim=self.softmax_dim) @ values


def mistaken(**changes):
    """The class with the mistake, named as the student's class is (an error message may name the class)."""
    return type("SelfAttention_v2" if changes.get("linear") else "SelfAttention_v1", (MistakenSelfAttention,), changes)


SCALED_BY_D_IN = ("the scores are scaled by sqrt(d_in), the input width: scale them by sqrt(d_k), the key dimension "
                  "keys.shape[-1] = d_out, not by the input width d_in")
MODULE_MISTAKES = (
    (SCALED_BY_D_IN, dict(scale="d_in")), (NOT_SCALED, dict(scale="none")), (SCALED_BY_D_K, dict(scale="d_k")),
    (DOT_T, dict(keys=".T")), (OVER_QUERIES, dict(softmax_dim=-2)), (OVER_DIM_0, dict(softmax_dim=0)))
V1_MISTAKES = tuple((hint, {"SelfAttention_v1": mistaken(**changes)}) for hint, changes in MODULE_MISTAKES + (
    ("the matrices are created as (d_out, d_in), nn.Linear's layout, and used transposed: SelfAttention_v1's "
     "matrices are (d_in, d_out), used as x @ self.W_query", dict(layout="d_out, d_in")),))
V2_MISTAKES = tuple((hint, {"SelfAttention_v2": mistaken(linear=True, **changes)}) for hint, changes in
                    MODULE_MISTAKES + (
    ("the layers have biases whatever qkv_bias says: pass bias=qkv_bias to each nn.Linear", dict(bias=True)),
    ("the layers never have biases: pass bias=qkv_bias to each nn.Linear", dict(bias=False)),
    ("x is multiplied by an nn.Linear weight as it is stored, (d_out, d_in): nn.Linear computes x @ weight.T (+ bias); "
     "call the layer itself (self.W_query(x) and so on)", dict(untransposed=True))))


V1_HINTS = dict(
    parameters_hint="assign nn.Parameter(torch.rand(d_in, d_out)) to self.W_query, self.W_key and self.W_value: a "
                    "plain tensor is not registered, so no optimizer would ever train it",
    runs_hint="project with x @ self.W_query (and so on), and work on the last two dimensions only; " + GLOBALS,
    value_hint="queries = x @ self.W_query (and so on); scale the scores by sqrt(d_k), the key dimension "
               "keys.shape[-1] = d_out, not by the input width d_in; softmax over the last dimension; " + GLOBALS,
    again_hint="forward must give the same output for the same input")


def v1_check(what, d_in, d_out, state, x):
    return by_running(trainable(forward_check(what, "SelfAttention_v1", (d_in, d_out), state, x, **V1_HINTS),
                                "use nn.Parameter, which requires gradients"), V1_MISTAKES, read_attention_error)


def seeded_check():
    """Right after torch.manual_seed(123), SelfAttention_v1(3, 2) holds the lesson's matrices: drawn with torch.rand
    (uniform on [0, 1)), one after the other (in any order of the three names)."""
    what = "SelfAttention_v1(3, 2) created right after torch.manual_seed(123)"
    p = Program()
    p.seed(123)
    p.record(p.call(G("SelfAttention_v1"), 3, 2), "its matrices", kind="state")
    generator = torch.Generator().manual_seed(123)
    normal = [torch.randn(3, 2, generator=generator) for _ in NAMES]

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], V1_HINTS["parameters_hint"])
        state = got[0].get("state") if isinstance(got[0], dict) else None
        if not isinstance(state, dict) or any(name not in state for name in NAMES):
            return None  # the other checks say which parameters are missing
        matrices = [tensor_of({"tensor": state[name]}) for name in NAMES]
        if any(m.shape != (3, 2) for m in matrices):
            return None  # the other checks say which shape is wrong
        if all(any(torch.allclose(m, lesson.double(), atol=1e-6) for lesson in LESSON.values()) for m in matrices):
            return None
        problem = f"{what}: its matrices are not the lesson's (torch.rand(3, 2) three times after that seed)"
        if all(any(torch.allclose(m, drawn.double(), atol=1e-6) for drawn in normal) for m in matrices):
            return NamedMistake(f"{problem}\n  likely mistake: the matrices are drawn with torch.randn, from a normal "
                                "distribution, not uniformly from [0, 1) with torch.rand")
        outside = any(((m < 0) | (m >= 1)).any() for m in matrices)
        return with_hint(problem + (", and some entries lie outside [0, 1)" if outside else ""),
                         f"{NONE_MATCHES}: draw each matrix with torch.rand(d_in, d_out), uniform on [0, 1), and "
                         "nothing else from the random generator in __init__")

    return Check(what, p, judge=judge)


def self_attention_v1(inputs):
    checks = [v1_check("SelfAttention_v1(3, 2) with the lesson's matrices on inputs (6, 3)", 3, 2, LESSON, INPUTS),
              v1_check("SelfAttention_v1(3, 2) with the lesson's matrices on the (2, 6, 3) batch", 3, 2, LESSON,
                       BATCH)]
    for d_in, d_out, lead, t in [(5, 3, (), 4), (4, 7, (2,), 5), (6, 2, (3, 2), 3), (3, 2, (1,), 1), (2, 4, (2,), 6),
                                 (3, 5, (), 6)]:
        x = inputs.randn(*lead, t, d_in)
        state = {name: inputs.randn(d_in, d_out) for name in NAMES}
        checks.append(v1_check(f"SelfAttention_v1({d_in}, {d_out}) on x of shape {tuple(x.shape)}", d_in, d_out,
                               state, x))
    return checks + [seeded_check()]


V2_HINTS = dict(
    parameters_hint="three nn.Linear(d_in, d_out, bias=qkv_bias) layers named W_query, W_key, W_value",
    runs_hint="project with self.W_query(x) (and so on), and work on the last two dimensions only; " + GLOBALS,
    value_hint="queries = self.W_query(x) (and so on); scale the scores by sqrt(d_k), the key dimension "
               "keys.shape[-1] = d_out, not by the input width d_in; softmax over the last dimension; " + GLOBALS,
    again_hint="forward must give the same output for the same input")


def v2_check(what, d_in, d_out, bias, state, x):
    return by_running(trainable(forward_check(what, "SelfAttention_v2", (d_in, d_out), state, x,
                                              kwargs={"qkv_bias": bias}, **V2_HINTS),
                                "keep the nn.Linear layers' parameters trainable"), V2_MISTAKES, read_attention_error)


def qkv_state(inputs, d_in, d_out, bias):
    state = {}
    for name in NAMES:
        state.update(linear_state(inputs, name, d_in, d_out, bias))
    return state


def self_attention_v2(inputs):
    # nn.Linear computes x @ weight.T, so the lesson's (d_in, d_out) matrices go in transposed.
    lesson = {f"{name}.weight": matrix.T.contiguous() for name, matrix in LESSON.items()}
    checks = [v2_check("SelfAttention_v2(3, 2) with the lesson's matrices on inputs (6, 3)", 3, 2, False, lesson,
                       INPUTS),
              v2_check("SelfAttention_v2(3, 2) with the lesson's matrices on the (2, 6, 3) batch", 3, 2, False,
                       lesson, BATCH),
              v2_check("SelfAttention_v2(3, 2, qkv_bias=True) on the (2, 6, 3) batch", 3, 2, True,
                       qkv_state(inputs, 3, 2, True), BATCH)]
    for d_in, d_out, bias, lead, t in [(5, 3, False, (), 4), (4, 7, True, (2,), 5), (6, 2, True, (3, 2), 3),
                                       (3, 3, False, (1,), 1), (2, 5, False, (2,), 6), (3, 4, True, (), 6)]:
        x = inputs.randn(*lead, t, d_in)
        checks.append(v2_check(f"SelfAttention_v2({d_in}, {d_out}, qkv_bias={bias}) on x of shape {tuple(x.shape)}",
                               d_in, d_out, bias, qkv_state(inputs, d_in, d_out, bias), x))
    return checks + [shuffled_tokens_check(inputs)]


ORDER = ("attention without positions is blind to order: shuffling the tokens must only shuffle the outputs; compute "
         "everything from x and the module's own layers, not from notebook globals, and use nothing that depends on a "
         "token's index")


def shuffled_tokens_check(inputs):
    d_in, d_out, num_tokens = 4, 3, 7
    x = inputs.randn(2, num_tokens, d_in)
    order = torch.randperm(num_tokens, generator=inputs.generator)
    p = Program()
    module = p.call(G("SelfAttention_v2"), d_in, d_out)
    p.load(module, qkv_state(inputs, d_in, d_out, False))
    p.record(p.call(module, p.tensor(x)), "the output", V2_HINTS["value_hint"], atol=1e-5)
    p.record(p.call(module, p.tensor(x[:, order])), "the output on the shuffled tokens", ORDER, atol=1e-5)
    check = Check(f"SelfAttention_v2({d_in}, {d_out}) on a (2, {num_tokens}, {d_in}) batch and on the same batch "
                  "with its tokens shuffled", p)

    def judge(got, want):
        """First the property, on the student's own records (it names the mistake), then the reference's values."""
        if first_raised(got) is None and len(got) == 3 and all("tensor" in record for record in got[1:]):
            output, shuffled = tensor_of(got[1]), tensor_of(got[2])
            if output.shape == (2, num_tokens, d_out) and differ(shuffled, output[:, order], 1e-5):
                return with_hint(f"{check.what}: the outputs on the shuffled tokens are not the outputs shuffled",
                                 ORDER)
        return default_judge(check, got, want)

    check.judge = judge
    return check


# ---------------------------------------------------------------------------------------------------------------
# Part 4: the transfer
# ---------------------------------------------------------------------------------------------------------------


def _transfer(assign):
    """transfer_weights_v2_to_v1 that takes each weight as nn.Linear stores it, (d_out, d_in): copied into sa_v1's
    matrices (an error unless d_in == d_out) or assigned as new parameters."""
    def transfer_weights_v2_to_v1(sa_v2, sa_v1):
        for name in NAMES:
            weight = getattr(sa_v2, name).weight
            if assign:
                setattr(sa_v1, name, nn.Parameter(weight))
            else:
                with torch.no_grad():
                    getattr(sa_v1, name).copy_(weight)
        return sa_v1
    return transfer_weights_v2_to_v1


UNTRANSPOSED = ("the weight is taken as nn.Linear stores it, (d_out, d_in), but the v1 matrices are (d_in, d_out): "
                "nn.Linear computes x @ weight.T, so the v1 matrix is the transposed weight, weight.T; transpose the "
                "weight")
TRANSFER_MISTAKES = ((UNTRANSPOSED, {"transfer_weights_v2_to_v1": _transfer(assign=False)}),
                     (UNTRANSPOSED, {"transfer_weights_v2_to_v1": _transfer(assign=True)}))


def transfer_check(inputs, d_in, d_out):
    """The student's transfer between stand-ins built from torch.nn only (an nn.ModuleDict of three nn.Linear layers
    and an nn.ParameterDict of three matrices, with the classes' attribute names), so that a bug in Part 2 or 3 costs
    nothing here."""
    what = f"transfer_weights_v2_to_v1(sa_v2, sa_v1) with d_in={d_in}, d_out={d_out}"
    nn = G("torch").attr("nn")
    v2_state = {f"{name}.weight": inputs.randn(d_out, d_in) for name in NAMES}
    v1_before = {name: inputs.randn(d_in, d_out) for name in NAMES}
    p = Program()
    sa_v2 = p.call(nn.attr("ModuleDict"), [(name, p.call(nn.attr("Linear"), d_in, d_out, bias=False))
                                           for name in NAMES])
    p.load(sa_v2, v2_state)
    sa_v1 = p.call(nn.attr("ParameterDict"), [(name, p.call(nn.attr("Parameter"), p.tensor(v1_before[name])))
                                              for name in NAMES])
    p.call(G("transfer_weights_v2_to_v1"), sa_v2, sa_v1, grad=True)  # with autograd on, as a student calls it
    p.record(sa_v1, "sa_v1 after the call", kind="state")
    p.record(sa_v1, "the parameters of sa_v1", kind="parameters")
    p.record(sa_v2, "sa_v2 after the call", kind="state")
    # Part 4 does not ask for separate copies: the book's solution (nn.Parameter(sa_v2.W_query.weight.T), a view of
    # sa_v2's weight) is right here. Part 5 asks for them.
    transpose = "nn.Linear weights are (d_out, d_in) and the v1 matrices are (d_in, d_out): transpose the weight"

    def judge(got, want):
        found = first_raised(got)
        if found and found[0] <= 1:
            message = str(found[1].get("message"))
            if "leaf Variable" in message:
                return NamedMistake(raised_message(what, found[1], read_attention_error(message)))
            return raised_message(what, found[1], transpose)
        if found:
            return raised_message(f"{what}, then changing sa_v2's weights in place", found[1],
                                  "sa_v2 must keep its nn.Linear layers and their weights")
        problem = compare(got[0], want[0], f"{what}: loading sa_v2", EXACT)
        if problem:
            return problem
        if got[1].get("state", {}).keys() == v1_before.keys() and all(
                not compare({"tensor": got[1]["state"][name]}, {"tensor": encode(v1_before[name])}, "", EXACT)
                for name in NAMES):
            return with_hint(f"{what} left sa_v1 unchanged", "change the sa_v1 you were given in place (copy_ into "
                                                             "its parameters); building and returning a new module "
                                                             "does not count")
        problem = with_hint(compare(got[1], want[1], f"{what}: sa_v1", Expect("")),
                            "copy the transposed weight, weight.T: nn.Linear computes x @ weight.T")
        problem = problem or with_hint(compare(got[2], want[2], f"{what}: sa_v1", EXACT),
                                       "copy into the existing parameters under torch.no_grad(), or assign an "
                                       "nn.Parameter of shape (d_in, d_out)")
        if problem:
            return problem
        frozen = [str(entry[0]) for entry in got[2]["parameters"] if entry[2] is not True]
        if frozen:
            return with_hint(f"after {what}, sa_v1.{frozen[0]} is no longer a trainable parameter",
                             "copy into the existing parameter under torch.no_grad(), or assign an nn.Parameter")
        problem = with_hint(compare(got[3], want[3], f"{what}: sa_v2 after the call", EXACT),
                            "copy from sa_v2 into sa_v1, not the other way round, and leave sa_v2 as it was")
        return problem

    return by_running(Check(what, p, judge=judge), TRANSFER_MISTAKES, read_attention_error)


def encode(tensor):
    from attention_course.probe import encode_tensor
    return encode_tensor(tensor)


def transfer_weights_v2_to_v1(inputs):
    return [transfer_check(inputs, d_in, d_out) for d_in, d_out in [(3, 2), (5, 3), (4, 4), (2, 7)]]


# ---------------------------------------------------------------------------------------------------------------
# Part 5: biases folded into the matrices (a transfer: the lesson moved weights without biases, the other way)
# ---------------------------------------------------------------------------------------------------------------

# Part 5 applies the lesson's weight transfer to a case it did not work through: a bias, and a module that has none.
TRANSFER = {"test_transfer_biased_v2_to_v1", "test_transfer_biased_v2_to_v1_cases", "test_drop_idle_biases"}

FOLD = ("[x, 1] @ M = x @ M[:-1] + M[-1]: the first d_in rows of the (d_in + 1, d_out) matrix are the layer's "
        "weight transposed (weight.T), the last row, which meets the feature that is always 1, is its bias")


def folded(weight, bias):
    return torch.cat([weight.T, (bias if bias is not None else torch.zeros(weight.shape[0]))[None, :]], dim=0)


def biased_mistake(got, weight, bias):
    """The likely mistake, from the student's matrix for one layer (weight (d_out, d_in), bias (d_out,) or None)."""
    zeros = torch.zeros(weight.shape[0])
    bias_or_zeros = bias if bias is not None else zeros
    guesses = [(torch.cat([bias_or_zeros[None, :], weight.T]), "the bias is in the first row: the feature that is "
                "always 1 is appended as the last feature, so it meets the last row, and the first d_in rows multiply "
                "x (weight.T)"),
               (folded(weight, None), "the bias is lost: the part of the projection that does not depend on x is "
                "missing; the last row of the matrix, which meets the feature that is always 1, must hold the layer's "
                "bias"),
               (torch.cat([weight.T, torch.ones(1, weight.shape[0])]), "the last row is the feature 1 itself, not the "
                "bias: the product [x, 1] @ M adds the last row of M to every projection"),
               (torch.cat([weight.T, -bias_or_zeros[None, :]]), "the bias has the wrong sign: nn.Linear adds it")]
    if weight.shape[0] == weight.shape[1]:
        guesses.append((torch.cat([weight, bias_or_zeros[None, :]]), "the weight is not transposed: nn.Linear "
                        "stores it as (d_out, d_in) and computes x @ weight.T"))
    for guess, text in guesses:
        if got.shape == guess.shape and torch.allclose(got.double(), guess.double(), atol=1e-5):
            return text
    return FOLD


def biased_check(inputs, d_in, d_out, bias):
    """The student's transfer between stand-ins built from torch.nn only (an nn.ModuleDict of three nn.Linear layers
    and an nn.ParameterDict of three (d_in + 1, d_out) matrices, with the classes' attribute names), so that a bug in
    Part 2 or 3 costs nothing here."""
    what = f"transfer_biased_v2_to_v1(sa_v2, sa_v1) with d_in={d_in}, d_out={d_out}, qkv_bias={bias}"
    nn = G("torch").attr("nn")
    v2_state = {}
    for name in NAMES:
        v2_state[f"{name}.weight"] = inputs.randn(d_out, d_in)
        if bias:
            v2_state[f"{name}.bias"] = inputs.randn(d_out)
    v1_before = {name: inputs.randn(d_in + 1, d_out) for name in NAMES}
    p = Program()
    sa_v2 = p.call(nn.attr("ModuleDict"), [(name, p.call(nn.attr("Linear"), d_in, d_out, bias=bias))
                                           for name in NAMES])
    p.load(sa_v2, v2_state)
    sa_v1 = p.call(nn.attr("ParameterDict"), [(name, p.call(nn.attr("Parameter"), p.tensor(v1_before[name])))
                                              for name in NAMES])
    p.call(G("transfer_biased_v2_to_v1"), sa_v2, sa_v1, grad=True)  # with autograd on, as a student calls it
    p.record(sa_v1, "sa_v1 after the call", kind="state")
    p.record(sa_v1, "the parameters of sa_v1", kind="parameters")
    p.record(sa_v2, "sa_v2 after the call", kind="state")
    for name in NAMES:  # training sa_v2 further must leave sa_v1 alone
        p.call(nn.attr("init").attr("zeros_"), sa_v2.attr(name).attr("weight"))
        if bias:
            p.call(nn.attr("init").attr("zeros_"), sa_v2.attr(name).attr("bias"))
    p.record(sa_v1, "sa_v1 after sa_v2's weights changed", kind="state")
    no_bias = ("a layer built with bias=False has .bias None: it adds nothing, so the last row is zeros"
               if not bias else FOLD)

    def judge(got, want):
        found = first_raised(got)
        if found and found[0] <= 1:
            return raised_message(what, found[1], no_bias if not bias else
                                  "build each (d_in + 1, d_out) matrix from the layer's weight (d_out, d_in), "
                                  "transposed, and its bias (d_out,) as one more row; " + FOLD)
        if found:
            return raised_message(f"{what}, then changing sa_v2's weights in place", found[1],
                                  "sa_v2 must keep its nn.Linear layers and their weights")
        problem = compare(got[0], want[0], f"{what}: loading sa_v2", EXACT)
        if problem:
            return problem
        state = got[1].get("state", {})
        if state.keys() == v1_before.keys() and all(
                not compare({"tensor": state[name]}, {"tensor": encode(v1_before[name])}, "", EXACT)
                for name in NAMES):
            return with_hint(f"{what} left sa_v1 unchanged", "change the sa_v1 you were given in place (copy into "
                                                             "its parameters, or assign new nn.Parameters); building "
                                                             "and returning a new module does not count")
        problem = compare(got[1], want[1], f"{what}: sa_v1", Expect(""))
        if problem:
            hint = FOLD
            for name in NAMES:
                if name in state:
                    matrix = tensor_of({"tensor": state[name]})
                    weight = v2_state[f"{name}.weight"]
                    guess = biased_mistake(matrix, weight, v2_state.get(f"{name}.bias"))
                    if guess != FOLD or not torch.allclose(matrix.double(), folded(
                            weight, v2_state.get(f"{name}.bias")).double(), atol=1e-5):
                        hint = guess
                        break
            return with_hint(problem, f"{NONE_MATCHES}; {hint}") if hint == FOLD else NamedMistake(
                with_hint(problem, hint))
        problem = with_hint(compare(got[2], want[2], f"{what}: sa_v1", EXACT),
                            "keep sa_v1's parameters named W_query, W_key, W_value, of shape (d_in + 1, d_out)")
        if problem:
            return problem
        frozen = [str(entry[0]) for entry in got[2]["parameters"] if entry[2] is not True]
        if frozen:
            return with_hint(f"after {what}, sa_v1.{frozen[0]} is no longer a trainable parameter",
                             "copy into the existing parameters under torch.no_grad(), or assign an nn.Parameter")
        problem = with_hint(compare(got[3], want[3], f"{what}: sa_v2 after the call", EXACT),
                            "copy from sa_v2 into sa_v1, not the other way round, and leave sa_v2 as it was")
        if problem:
            return problem
        if compare(got[4], got[1], "", EXACT):
            return with_hint(f"{what}: sa_v1 changes when sa_v2's weights are changed in place afterwards",
                             "sa_v1 must hold its own copies: a view of sa_v2's weights (or a Parameter built "
                             "on one) changes along with them")
        return None

    return Check(what, p, judge=judge)


def transfer_biased_v2_to_v1(inputs):
    return [biased_check(inputs, d_in, d_out, True) for d_in, d_out in [(3, 2), (5, 3), (4, 4), (2, 7)]]


def wrong_size_check(inputs, d_in, d_out, rows, cols, bias):
    nn = G("torch").attr("nn")
    p = Program()
    sa_v2 = p.call(nn.attr("ModuleDict"), [(name, p.call(nn.attr("Linear"), d_in, d_out, bias=bias))
                                           for name in NAMES])
    sa_v1 = p.call(nn.attr("ParameterDict"), [(name, p.call(nn.attr("Parameter"), p.tensor(inputs.randn(rows, cols))))
                                              for name in NAMES])
    p.call(G("transfer_biased_v2_to_v1"), sa_v2, sa_v1)
    return expect_value_error(f"transfer_biased_v2_to_v1 from a ({d_in} -> {d_out}) sa_v2 into an sa_v1 of "
                              f"({rows}, {cols}) matrices", p, "sa_v1")


def transfer_biased_v2_to_v1_cases(inputs):
    checks = [biased_check(inputs, d_in, d_out, False) for d_in, d_out in [(3, 2), (5, 3), (4, 4)]]
    checks += [wrong_size_check(inputs, 3, 2, 3, 2, True), wrong_size_check(inputs, 3, 2, 4, 3, True),
               wrong_size_check(inputs, 5, 3, 5, 3, False), wrong_size_check(inputs, 4, 4, 6, 4, True)]
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 6: which biases make a difference (the lesson's attention on a case it did not work through: biases)
# ---------------------------------------------------------------------------------------------------------------

KEY_BIAS = ("the key bias adds q_i · b_key to every score of query i alike, and softmax cancels a shift shared by a "
            "whole row: it never changes the weights, so it is the bias to zero")
QUERY_BIAS = ("the query bias adds b_query · k_j to the score of key j, a different number for each key: it changes "
              "the weights, so it must stay")
VALUE_BIAS = ("the value bias adds b_value to every context vector (the weights sum to 1): it changes the output, so "
              "it must stay")
WEIGHTS_KEPT = "only biases may change: the weights of the three layers stay as they were"


def idle_check(inputs, d_in, d_out, bias):
    """drop_idle_biases on a stand-in (an nn.ModuleDict of three nn.Linear layers): the state it leaves."""
    what = f"drop_idle_biases(sa_v2) with d_in={d_in}, d_out={d_out}, " + ("biases" if bias else "no biases")
    nn = G("torch").attr("nn")
    state = {}
    for name in NAMES:
        state.update(linear_state(inputs, name, d_in, d_out, bias))
    p = Program()
    sa_v2 = p.call(nn.attr("ModuleDict"), [(name, p.call(nn.attr("Linear"), d_in, d_out, bias=bias)) for name in NAMES])
    p.load(sa_v2, state)
    p.call(G("drop_idle_biases"), sa_v2, grad=True)  # with autograd on, as a student calls it
    p.record(sa_v2, "sa_v2 after the call", kind="state")

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1], "a layer built with bias=False has .bias None" if not bias else "")
        after = got[1].get("state") if len(got) > 1 and isinstance(got[1], dict) else None
        if not isinstance(after, dict):
            return f"{what}: sa_v2's state was not recorded"
        for name in NAMES:
            weight = after.get(f"{name}.weight")
            if weight is None or compare({"tensor": weight}, {"tensor": encode(state[f"{name}.weight"])}, "", EXACT):
                return with_hint(f"{what}: sa_v2.{name}.weight changed", WEIGHTS_KEPT)
        if not bias:
            return None
        kept = {name: f"{name}.bias" in after and not compare(
            {"tensor": after[f"{name}.bias"]}, {"tensor": encode(state[f"{name}.bias"])}, "", EXACT) for name in NAMES}
        if not kept["W_query"]:
            return with_hint(f"{what}: sa_v2.W_query.bias changed", QUERY_BIAS)
        if not kept["W_value"]:
            return with_hint(f"{what}: sa_v2.W_value.bias changed", VALUE_BIAS)
        key = after.get("W_key.bias")
        if key is not None and (tensor_of({"tensor": key}) != 0).any():
            return with_hint(f"{what}: sa_v2.W_key.bias is not zero", KEY_BIAS)
        return None

    return Check(what, p, judge=judge)


def drop_idle_biases(inputs):
    return [idle_check(inputs, d_in, d_out, bias) for d_in, d_out, bias in
            [(3, 2, True), (5, 3, True), (4, 4, True), (2, 7, True), (3, 2, False), (6, 4, False)]]


CELLS = {
    "test_scaled_dot_product_attention": scaled_dot_product_attention,
    "test_self_attention_v1": self_attention_v1,
    "test_self_attention_v2": self_attention_v2,
    "test_transfer_weights_v2_to_v1": transfer_weights_v2_to_v1,
    "test_transfer_biased_v2_to_v1": transfer_biased_v2_to_v1,
    "test_transfer_biased_v2_to_v1_cases": transfer_biased_v2_to_v1_cases,
    "test_drop_idle_biases": drop_idle_biases,
}
