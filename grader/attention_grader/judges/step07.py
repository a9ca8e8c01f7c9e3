"""Judges of step 07: multi-head attention with weight splits (the module checks they use live in common.py)."""
import torch

from attention_course import data
from attention_grader.judging import G, Check, Program, call_check, expect_value_error
from attention_grader.judges.common import (CLASS, attention_state, built_like_check, dropout_check, forward_check,
                                            linear_state, mask_buffer_check, returns_check, with_later_tokens_changed)
# step 11 (in progress) imports these from here; new judges import them from common.py
from attention_grader.judges.common import ANY_VALUES, first_raised, tensor_of, with_hint  # noqa: F401

BATCH = torch.stack((data.journey_in_pairs(), data.journey_in_pairs()))  # (2, 3, 6)

SPLIT_HINT = ("head h holds columns h*head_dim:(h+1)*head_dim of every token: view(b, T, num_heads, head_dim) then "
              "transpose(1, 2); viewing straight as (b, num_heads, T, head_dim) mixes up tokens")
MERGE_HINT = ("head h goes to columns h*head_dim:(h+1)*head_dim of every token: transpose(1, 2), then .contiguous() "
              "before .view() (or use .reshape())")
MHA_PARAMETERS = ("one nn.Linear(d_in, d_out, bias=qkv_bias) each for W_query, W_key and W_value, shared by all "
                  "heads, and out_proj = nn.Linear(d_out, d_out) with a bias")
MHA_RUNS = "print the shape after each step; a view after a transpose needs .contiguous() first (or use reshape)"
MHA_VALUES = ("project, split into heads, scores / sqrt(head_dim) (not sqrt(d_out)), causal mask, softmax over the "
              "last dimension (the keys), weighted sum of the values, merge the heads, out_proj")
MHA_CAUSAL = ("earlier tokens see a later one: did you keep the result of masked_fill, and take softmax over the last "
              "dimension (the keys)?")
STACK_HINT = ("head h's weights (and biases) go to rows h*head_dim:(h+1)*head_dim: stack them along dim 0 (the "
              "output rows) with torch.cat([...], dim=0)")
BIAS_HINT = ("pass qkv_bias=(the heads' layers have biases) to MultiHeadAttention, and stack the heads' biases like "
             "their weights, along dim 0")
IDENTITY_HINT = "out_proj must be the identity: weight torch.eye(d_out), bias zero"


# ---------------------------------------------------------------------------------------------------------------
# the test cells
# ---------------------------------------------------------------------------------------------------------------

def value_error_check(what, function, args, argument):
    p = Program()
    p.call(G(function), *[p.tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    return expect_value_error(what, p, argument)


def split_heads(inputs):
    x = torch.arange(2 * 3 * 6, dtype=torch.float32).reshape(2, 3, 6)
    checks = [call_check("split_heads(x, 2) for x = arange(36) of shape (2, 3, 6)", "split_heads", x, 2,
                         hint=SPLIT_HINT),
              value_error_check("split_heads on a (1, 2, 5) tensor with num_heads=2", "split_heads",
                                (torch.zeros(1, 2, 5), 2), "num_heads")]
    for b, t, d, h in [(3, 4, 15, 5), (1, 1, 3, 1), (2, 5, 12, 4), (4, 2, 6, 3), (2, 3, 7, 7)]:
        checks.append(call_check(f"split_heads on a random ({b}, {t}, {d}) tensor with num_heads={h}", "split_heads",
                                 inputs.randn(b, t, d), h, hint=SPLIT_HINT))
    for shape, h in [((2, 3, 7), 2), ((1, 4, 10), 4), ((3, 1, 6), 4)]:
        checks.append(value_error_check(f"split_heads on a {shape} tensor with num_heads={h}", "split_heads",
                                        (torch.zeros(shape), h), "num_heads"))
    return checks


def merge_heads(inputs):
    heads = torch.randn(2, 2, 3, 4, generator=torch.Generator().manual_seed(0))
    checks = [call_check("merge_heads(heads) for heads of shape (2, 2, 3, 4)", "merge_heads", heads,
                         hint=MERGE_HINT)]
    for b, h, t, hd in [(3, 5, 4, 3), (1, 1, 1, 2), (2, 4, 5, 1), (4, 3, 2, 5), (2, 2, 6, 3)]:
        checks.append(call_check(f"merge_heads on a random ({b}, {h}, {t}, {hd}) tensor", "merge_heads",
                                 inputs.randn(b, h, t, hd), hint=MERGE_HINT))
    return checks


def fixed_weights(d_in, d_out, seed=0, scale=0.5):
    """The weights of the notebook's load_fixed_weights(module, seed) for a module without qkv biases."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, fan_in in (("W_query", d_in), ("W_key", d_in), ("W_value", d_in), ("out_proj", d_out)):
        state[f"{name}.weight"] = scale * torch.randn(d_out, fan_in, generator=generator)
    state["out_proj.bias"] = scale * torch.randn(d_out, generator=generator)
    return state


def multi_head_attention(inputs):
    mha = "MultiHeadAttention"
    changed = BATCH.clone()
    changed[:, 2] += 1.0
    hints = dict(parameters_hint=MHA_PARAMETERS, runs_hint=MHA_RUNS, value_hint=MHA_VALUES, causal_hint=MHA_CAUSAL)
    checks = [
        mask_buffer_check("MultiHeadAttention(6, 6, 3, 0.0, num_heads=2)", mha, (6, 6, 3, 0.0, 2),
                          "self.register_buffer(\"mask\", torch.triu(...)) keeps the mask with the module "
                          "(state_dict, .to(device))"),
        forward_check("MultiHeadAttention(6, 6, 3, 0.0, num_heads=2) with the weights of load_fixed_weights(mha, "
                      "seed=0) on the (2, 3, 6) batch", mha, (6, 6, 3, 0.0, 2), fixed_weights(6, 6), BATCH, cut=2,
                      changed=changed, **hints),
    ]
    for b, t, context, d_in, d_out, heads, bias in [
            (2, 4, 6, 5, 6, 2, False), (1, 5, 5, 3, 15, 5, True), (3, 3, 7, 4, 3, 1, False),
            (2, 1, 4, 6, 10, 5, False), (4, 6, 8, 7, 12, 4, True), (1, 7, 9, 2, 9, 3, False)]:
        x = inputs.randn(b, t, d_in)
        cut = inputs.randint(1, t) if t > 1 else None
        checks.append(forward_check(
            f"MultiHeadAttention({d_in}, {d_out}, {context}, 0.0, num_heads={heads}, qkv_bias={bias}) on a random "
            f"({b}, {t}, {d_in}) input", mha, (d_in, d_out, context, 0.0, heads), attention_state(inputs, d_in, d_out,
                                                                                               bias),
            x, kwargs={"qkv_bias": bias}, cut=cut, changed=with_later_tokens_changed(inputs, x, cut) if cut else None,
            **hints))
    # Dropout: off in eval mode (deterministic, equal to the reference), on in training mode.
    state, x = attention_state(inputs, 5, 8, False), inputs.randn(3, 6, 5)
    checks.append(forward_check(
        "MultiHeadAttention(5, 8, 6, 0.5, num_heads=2) in eval mode on a random (3, 6, 5) input", mha,
        (5, 8, 6, 0.5, 2), state, x, parameters_hint=MHA_PARAMETERS, runs_hint=MHA_RUNS,
        value_hint="in eval mode dropout must do nothing: use nn.Dropout, not a hand-made mask",
        again_hint="use self.dropout (an nn.Dropout module), which is switched off by mha.eval()"))
    checks.append(dropout_check("MultiHeadAttention(5, 8, 6, 0.5, num_heads=2) on a random (3, 6, 5) input", mha,
                                (5, 8, 6, 0.5, 2), state, x, inputs.seed(),
                                "apply self.dropout to the attention weights"))
    return checks


def multi_head_attention_arguments(inputs):
    checks = [
        value_error_check("MultiHeadAttention(6, 5, 4, 0.0, num_heads=2)", "MultiHeadAttention", (6, 5, 4, 0.0, 2),
                          "d_out"),
    ]
    for d_in, d_out, context, heads in [(8, 10, 6, 4), (3, 9, 2, 2), (4, 7, 5, 3)]:
        checks.append(value_error_check(f"MultiHeadAttention({d_in}, {d_out}, {context}, 0.0, num_heads={heads})",
                                        "MultiHeadAttention", (d_in, d_out, context, 0.0, heads), "d_out"))
    # (d_in, d_out, context_length, num_heads, b): the visible example first
    for d_in, d_out, context, heads, b in [(6, 6, 4, 2, 1), (3, 4, 2, 2, 2), (5, 6, 1, 3, 1), (2, 8, 6, 4, 3)]:
        p = Program()
        module = p.call(G("MultiHeadAttention"), d_in, d_out, context, 0.0, heads)
        p.call(module, p.tensor(torch.zeros(b, context + 1, d_in)))
        checks.append(expect_value_error(f"a forward pass with {context + 1} tokens through MultiHeadAttention("
                                         f"{d_in}, {d_out}, {context}, 0.0, num_heads={heads})", p, "context_length"))
    return checks


def wrapper_to_split_checks(inputs, d_in, head_dim, context, heads, bias, dropout, seed=None):
    """The weights wrapper_to_split copies, and the sizes and dropout rate of the MultiHeadAttention it builds."""
    d_out = heads * head_dim
    what = (f"wrapper_to_split(MultiHeadAttentionWrapper({d_in}, {head_dim}, {context}, {dropout}, "
            f"num_heads={heads}, qkv_bias={bias}))")
    wrapper_state = {}
    for h in range(heads):
        for name in ("W_query", "W_key", "W_value"):
            wrapper_state.update(linear_state(inputs, f"heads.{h}.{name}", d_in, head_dim, bias))

    def build():
        p = Program()
        if seed is not None:
            p.seed(seed)
        wrapper = p.call(G("MultiHeadAttentionWrapper"), d_in, head_dim, context, dropout, num_heads=heads,
                         qkv_bias=bias)
        if seed is None:
            p.load(wrapper, wrapper_state)
        p.call(wrapper.attr("eval"))
        return p, wrapper, p.call(G("wrapper_to_split"), wrapper)

    p, wrapper, mha = build()
    p.record(mha.attr("__class__").attr("__name__"), CLASS, STACK_HINT)
    for name in ("W_query", "W_key", "W_value"):
        p.record(mha.attr(name).attr("weight"), f"mha.{name}.weight", STACK_HINT)
        p.record(mha.attr(name).attr("bias"), f"mha.{name}.bias", BIAS_HINT)
    p.record(mha.attr("out_proj").attr("weight"), "mha.out_proj.weight", IDENTITY_HINT)
    p.record(mha.attr("out_proj").attr("bias"), "mha.out_proj.bias", IDENTITY_HINT)
    p.record(wrapper, "the wrapper after the call", "copy the wrapper's weights, do not modify them", kind="state")
    checks = [returns_check(what, p)]

    p, wrapper, mha = build()
    checks.append(built_like_check(
        what, p, mha, "MultiHeadAttention", (d_in, d_out, context, dropout, heads, bias),
        attention_state(inputs, d_in, d_out, bias), inputs.randn(2, context, d_in), inputs.seed(),
        "build MultiHeadAttention(d_in, num_heads * head_dim, context_length, dropout, num_heads, qkv_bias) with the "
        "wrapper's sizes: the mask's size, dropout.p, and whether its layers have biases"))
    return checks


def dtype_check(d_in, head_dim, context, heads):
    """A float64 wrapper gives a float64 module (the reference runs in float64, the student's kernel in float32 by
    default: the number of bytes per number tells them apart)."""
    p = Program()
    wrapper = p.call(p.call(G("MultiHeadAttentionWrapper"), d_in, head_dim, context, 0.0, num_heads=heads,
                            qkv_bias=True).attr("double"))
    mha = p.call(G("wrapper_to_split"), wrapper)
    for name in ("W_query", "out_proj"):
        p.record(p.call(mha.attr(name).attr("weight").attr("element_size")), f"bytes per number of mha.{name}.weight",
                 "build the MultiHeadAttention with the wrapper's dtype (and device), and give out_proj that dtype too")
    return Check(f"wrapper_to_split(MultiHeadAttentionWrapper({d_in}, {head_dim}, {context}, 0.0, num_heads={heads}, "
                 "qkv_bias=True).double())", p)


def wrapper_to_split(inputs):
    checks = wrapper_to_split_checks(inputs, 6, 3, 3, 2, False, 0.0, seed=123)
    checks.append(dtype_check(4, 2, 5, 3))
    for d_in, head_dim, context, heads, bias, dropout in [(5, 3, 6, 2, False, 0.0), (4, 1, 4, 5, True, 0.0),
                                                          (7, 4, 5, 1, False, 0.0), (3, 2, 8, 3, True, 0.0),
                                                          (6, 3, 5, 4, False, 0.3)]:
        checks += wrapper_to_split_checks(inputs, d_in, head_dim, context, heads, bias, dropout)
    return checks


FOLD_HINT = ("output block g of out_proj reads one head h through a head_dim x head_dim block B (not always h = g): "
             "wrapper head g gets head h's query and key rows, and B applied after the weighted sum, which is B on "
             "every value (W_value weight B @ rows, bias B @ bias); attention weights sum to 1, so out_proj's bias of "
             "block g can join that value bias")
REFUSE_HINT = ("no wrapper exists exactly when a block of head_dim output numbers of out_proj reads two heads or more, "
               "or out_proj has a bias and the layers have none (a head without biases outputs 0 for a 0 input): "
               "raise ValueError naming out_proj then, and only then")
ACCEPT_HINT = ("a wrapper exists here: each block of head_dim outputs of out_proj reads at most one head, maybe not its "
               "own, and a bias of out_proj can join the value bias when the layers have biases")
SIZES_HINT = ("build MultiHeadAttentionWrapper(d_in, d_out // num_heads, context_length, dropout, num_heads, qkv_bias) "
              "from mha's sizes: the mask's size, dropout.p, and whether W_query has a bias")


def routed_out_proj(inputs, d_out, heads, sources):
    """An out_proj weight whose output block g reads only head sources[g] (None: no head) through a random block."""
    head_dim = d_out // heads
    weight = torch.zeros(d_out, d_out)
    for g, h in enumerate(sources):
        if h is not None:
            weight[g * head_dim:(g + 1) * head_dim, h * head_dim:(h + 1) * head_dim] = inputs.randn(head_dim, head_dim,
                                                                                                    scale=0.5)
    return weight


def stand_in_mha(p, d_in, d_out, context, dropout, bias, state):
    """A module with MultiHeadAttention's contract attributes (W_query, W_key, W_value, out_proj, mask, dropout)
    built in the kernel from torch.nn alone, so that Part 5 is judged without the student's Part 3."""
    nn_ = G("nn")
    layers = [[name, p.call(nn_.attr("Linear"), d_in, d_out, bias=bias)] for name in ("W_query", "W_key", "W_value")]
    layers += [["out_proj", p.call(nn_.attr("Linear"), d_out, d_out)], ["dropout", p.call(nn_.attr("Dropout"), dropout)]]
    mha = p.call(nn_.attr("ModuleDict"), [tuple(pair) for pair in layers])
    p.call(mha.attr("register_buffer"), "mask",
           p.tensor(torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)))
    p.load(mha, state)
    p.call(mha.attr("eval"))
    return mha


def split_to_wrapper_checks(inputs, d_in, d_out, context, heads, bias, dropout, sources, out_bias):
    routes = ", ".join(f"{g}<-{'none' if h is None else h}" for g, h in enumerate(sources))
    what = (f"split_to_wrapper(mha, {heads}) for a module with MultiHeadAttention's attributes ({d_in} -> {d_out}, "
            f"context_length={context}, dropout={dropout}, qkv_bias={bias}) whose out_proj's output blocks read the "
            f"heads {routes}" + (", with a bias" if out_bias else ", without a bias"))
    state = attention_state(inputs, d_in, d_out, bias)
    state["out_proj.weight"] = routed_out_proj(inputs, d_out, heads, sources)
    state["out_proj.bias"] = inputs.randn(d_out, scale=0.5) if out_bias else torch.zeros(d_out)
    p = Program()
    mha = stand_in_mha(p, d_in, d_out, context, dropout, bias, state)
    wrapper = p.call(G("split_to_wrapper"), mha, heads)
    p.record(wrapper.attr("__class__").attr("__name__"), CLASS, "return a MultiHeadAttentionWrapper (the class given "
             "above), built with your sizes")
    p.call(wrapper.attr("eval"))
    t = inputs.randint(1, context + 1)
    p.record(p.call(wrapper, p.tensor(inputs.randn(2, t, d_in))), f"the wrapper's output on a random (2, {t}, {d_in}) "
             "input, against the module's", FOLD_HINT)
    p.record(p.call(wrapper.attr("heads").attr("__len__")), "the number of heads", SIZES_HINT)
    p.record(wrapper.attr("heads")[0].attr("mask").attr("shape"), "the shape of a head's mask", SIZES_HINT)
    p.record(wrapper.attr("heads")[0].attr("dropout").attr("p"), "a head's dropout probability", SIZES_HINT)
    p.record(wrapper.attr("heads")[heads - 1].attr("W_key").attr("bias"), "the last head's W_key.bias", SIZES_HINT)
    p.record(mha, "the module after the call", "read mha's weights, do not write to them", kind="state")
    checks = [with_raised_hint(returns_check(what, p), ACCEPT_HINT)]

    refusals = []
    if heads > 1:  # one head: any out_proj is one block
        head_dim = d_out // heads
        two_heads = routed_out_proj(inputs, d_out, heads, range(heads))
        two_heads[:head_dim, head_dim:2 * head_dim] = inputs.randn(head_dim, head_dim, scale=0.5)
        refusals += [("out_proj's first output block reads heads 0 and 1", two_heads, torch.zeros(d_out)),
                     ("out_proj mixes the heads", inputs.randn(d_out, d_out, scale=0.5), torch.zeros(d_out))]
    if not bias:
        refusals.append(("the layers have no biases and out_proj has one", routed_out_proj(inputs, d_out, heads, sources),
                         inputs.randn(d_out, scale=0.5)))
    for reason, weight, refused_bias in refusals:
        refused = dict(state, **{"out_proj.weight": weight, "out_proj.bias": refused_bias})
        p = Program()
        p.call(G("split_to_wrapper"), stand_in_mha(p, d_in, d_out, context, dropout, bias, refused), heads)
        checks.append(with_expect_hint(expect_value_error(
            f"split_to_wrapper(mha, {heads}) for a module ({d_in} -> {d_out}) where {reason}", p, "out_proj"),
            REFUSE_HINT))
    return checks


def with_raised_hint(check, hint):
    """The check's message, with `hint` as the likely mistake where the student's function raised."""
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        if problem and first_raised(got):
            return problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {hint}"
        return problem

    check.judge = judged
    return check


def with_expect_hint(check, hint):
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        return problem and problem.split("\n  likely mistake: ")[0] + f"\n  likely mistake: {hint}"

    check.judge = judged
    return check


def split_to_wrapper(inputs):
    checks = []
    # (d_in, d_out, context_length, num_heads, qkv_bias, dropout, the head each output block reads, out_proj's bias)
    for d_in, d_out, context, heads, bias, dropout, sources, out_bias in [
            (6, 6, 3, 2, True, 0.0, [0, 1], False), (5, 12, 6, 3, False, 0.0, [0, 1, 2], False),
            (6, 6, 4, 2, True, 0.0, [1, 0], True), (4, 8, 5, 4, True, 0.25, [3, 3, None, 0], True),
            (3, 5, 4, 1, False, 0.0, [0], False), (7, 10, 7, 5, True, 0.1, [0, 1, 2, 3, 4], True),
            (4, 6, 5, 3, False, 0.0, [2, 0, 0], False)]:
        checks += split_to_wrapper_checks(inputs, d_in, d_out, context, heads, bias, dropout, sources, out_bias)
    for d_out, heads in [(6, 4), (10, 3)]:
        p = Program()
        state = attention_state(inputs, 4, d_out, False)
        p.call(G("split_to_wrapper"), stand_in_mha(p, 4, d_out, 5, 0.0, False, state), heads)
        checks.append(expect_value_error(f"split_to_wrapper(mha, {heads}) for d_out={d_out}", p, "num_heads"))
    return checks


def gpt2_small_attention_params(inputs):
    return [call_check("gpt2_small_attention_params()", "gpt2_small_attention_params", atol=0, rtol=0,
                       hint="four 768 x 768 weights and four biases of 768 (GPT-2's query, key and value projection "
                            "has a bias; a mask is a buffer, not a parameter); return a Python int")]


# Parts 4 and 5 ask for what the lesson did not work through: the conversion stated as a requirement, and its reverse
TRANSFER = {"test_wrapper_to_split", "test_split_to_wrapper"}

CELLS = {
    "test_split_heads": split_heads,
    "test_merge_heads": merge_heads,
    "test_multi_head_attention": multi_head_attention,
    "test_multi_head_attention_arguments": multi_head_attention_arguments,
    "test_wrapper_to_split": wrapper_to_split,
    "test_split_to_wrapper": split_to_wrapper,
    "test_gpt2_small_attention_params": gpt2_small_attention_params,
}
