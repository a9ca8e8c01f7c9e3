"""The lessons' own code: every answer key runs on any device, the schematic pictures draw offline, the training demo
is deterministic."""
import ast

import pytest
import torch
import torch.nn as nn

import course
from conftest import ROOT, STEPS

DEFINITIONS = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef)


def answer_key_namespace(step):
    """The definitions of a step's answer key (source/, hidden tests removed), run as benchmarks/ runs solutions/."""
    namespace = {"__name__": f"answer_key_{step}"}
    for cell in course.answer_key(ROOT / "source" / step / f"{step}.ipynb").cells:
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        tree = ast.parse(cell.source)
        tree.body = [node for node in tree.body if isinstance(node, DEFINITIONS)]
        exec(compile(tree, f"<answer key {step}>", "exec"), namespace)
    return namespace


def meta(*shape):
    return torch.empty(*shape, device="meta")


def on_meta(module):
    return module.to("meta")


# For each step: (what is called, a call on tensors and modules of the meta device, the expected output shape).
META_CALLS = {
    "01_dot_product_scores": [
        ("attention_scores_for_query", lambda ns: ns["attention_scores_for_query"](meta(6, 3), meta(3)), (6,)),
        ("attention_scores", lambda ns: ns["attention_scores"](meta(2, 6, 3)), (2, 6, 6)),
    ],
    "02_softmax": [
        ("softmax_naive", lambda ns: ns["softmax_naive"](meta(2, 5)), (2, 5)),
        ("softmax_stable", lambda ns: ns["softmax_stable"](meta(2, 5), dim=0), (2, 5)),
        ("context_vectors", lambda ns: ns["context_vectors"](meta(2, 6, 3)), (2, 6, 3)),
    ],
    "03_trainable_qkv": [
        ("scaled_dot_product_attention",
         lambda ns: ns["scaled_dot_product_attention"](meta(2, 4, 3), meta(2, 5, 3), meta(2, 5, 2)), (2, 4, 2)),
        ("SelfAttention_v1", lambda ns: on_meta(ns["SelfAttention_v1"](3, 2))(meta(6, 3)), (6, 2)),
        ("SelfAttention_v2", lambda ns: on_meta(ns["SelfAttention_v2"](3, 2, qkv_bias=True))(meta(2, 6, 3)), (2, 6, 2)),
        ("transfer_weights_v2_to_v1",
         lambda ns: ns["transfer_weights_v2_to_v1"](on_meta(ns["SelfAttention_v2"](3, 2)),
                                                    on_meta(ns["SelfAttention_v1"](3, 2)))(meta(6, 3)), (6, 2)),
    ],
    "04_causal_mask": [
        ("renormalized_causal_weights", lambda ns: ns["renormalized_causal_weights"](meta(2, 5, 5)), (2, 5, 5)),
        ("causal_attention_weights", lambda ns: ns["causal_attention_weights"](meta(2, 5, 5), 4), (2, 5, 5)),
        ("CausalSelfAttention", lambda ns: on_meta(ns["CausalSelfAttention"](3, 2, 6))(meta(2, 4, 3)), (2, 4, 2)),
    ],
    "05_dropout": [
        ("dropout", lambda ns: ns["dropout"](meta(4, 5), 0.5), (4, 5)),
        ("CausalAttention, training", lambda ns: on_meta(ns["CausalAttention"](3, 2, 6, 0.5)).train()(meta(2, 4, 3)),
         (2, 4, 2)),
    ],
    "06_multihead_wrapper": [
        ("MultiHeadAttentionWrapper",
         lambda ns: on_meta(ns["MultiHeadAttentionWrapper"](3, 2, 6, 0.5, num_heads=3))(meta(2, 4, 3)), (2, 4, 6)),
        ("wrapper_with_output_width",
         lambda ns: on_meta(ns["wrapper_with_output_width"](3, 6, 4, num_heads=2))(meta(2, 4, 3)), (2, 4, 4)),
    ],
    "07_weight_split_mha": [
        ("split_heads", lambda ns: ns["split_heads"](meta(2, 4, 6), 3), (2, 3, 4, 2)),
        ("merge_heads", lambda ns: ns["merge_heads"](meta(2, 3, 4, 2)), (2, 4, 6)),
        ("MultiHeadAttention",
         lambda ns: on_meta(ns["MultiHeadAttention"](3, 6, 6, 0.5, num_heads=2))(meta(2, 4, 3)), (2, 4, 6)),
        ("wrapper_to_split",
         lambda ns: ns["wrapper_to_split"](on_meta(ns["MultiHeadAttentionWrapper"](3, 2, 6, 0.0, num_heads=3,
                                                                                     qkv_bias=True)))(meta(2, 4, 3)),
         (2, 4, 6)),
    ],
    "08_efficient_attention": [
        ("MultiHeadAttentionCombinedQKV",
         lambda ns: on_meta(ns["MultiHeadAttentionCombinedQKV"](3, 6, 6, 0.5, num_heads=2))(meta(2, 4, 3)), (2, 4, 6)),
        ("combined_from_split",
         lambda ns: ns["combined_from_split"](on_meta(ns["MultiHeadAttention"](3, 6, 6, 0.0, num_heads=2,
                                                                               qkv_bias=True)))(meta(2, 4, 3)),
         (2, 4, 6)),
        ("MultiHeadAttentionSDPA, training",
         lambda ns: on_meta(ns["MultiHeadAttentionSDPA"](3, 6, 6, 0.5, num_heads=2)).train()(meta(2, 4, 3)),
         (2, 4, 6)),
    ],
    "09_kv_cache": [
        ("cached_attention", lambda ns: ns["cached_attention"](meta(2, 2, 4), meta(2, 5, 4), meta(2, 5, 4)), (2, 2, 4)),
        ("MultiHeadAttentionWithCache, without the cache",
         lambda ns: on_meta(ns["MultiHeadAttentionWithCache"](3, 6, 8, 0.0, num_heads=2))(meta(2, 4, 3)), (2, 4, 6)),
        ("MultiHeadAttentionWithCache, a prompt then one cached token", lambda ns: cached_twice(ns), (2, 1, 6)),
    ],
    "10_flash_attention": [
        ("online_softmax", lambda ns: ns["online_softmax"](meta(2, 3, 7), 3), (2, 3, 7)),
        ("tiled_attention", lambda ns: ns["tiled_attention"](meta(2, 5, 4), meta(2, 5, 4), meta(2, 5, 3), 2),
         (2, 5, 3)),
        ("tiled_attention, causal",
         lambda ns: ns["tiled_attention"](meta(2, 5, 4), meta(2, 5, 4), meta(2, 5, 3), 2, causal=True), (2, 5, 3)),
    ],
    "11_rope_gqa": [
        ("apply_rope", lambda ns: ns["apply_rope"](meta(2, 3, 5, 8), torch.arange(5, device="meta")), (2, 3, 5, 8)),
        ("GroupedQueryAttention, without the cache",
         lambda ns: on_meta(ns["GroupedQueryAttention"](3, 8, 8, 0.0, num_heads=4, num_kv_heads=2))(meta(2, 4, 3)),
         (2, 4, 8)),
        ("GroupedQueryAttention, a prompt then one cached token", lambda ns: gqa_cached_twice(ns), (2, 1, 8)),
    ],
    "12_tiny_gpt": [
        ("TinyGPT", lambda ns: on_meta(ns["TinyGPT"](11, 8, 2, 2, 6, 0.0))(torch.zeros(2, 5, dtype=torch.long, device="meta")),
         (2, 5, 11)),
        ("TinyGPT, a prompt then one cached token", lambda ns: gpt_cached_twice(ns), (2, 1, 11)),
    ],
    "13_attention_backward": [
        ("attention_backward, causal", lambda ns: ns["attention_backward"](*(meta(2, 3, 5, 4) for _ in range(4)), None,
                                                                          True)[0], (2, 3, 5, 4)),
        ("FlashAttention.apply, causal", lambda ns: ns["FlashAttention"].apply(*(meta(2, 3, 5, 4) for _ in range(3)),
                                                                              True, 2, 3), (2, 3, 5, 4)),
        ("attention_lse_backward, causal", lambda ns: ns["attention_lse_backward"](
            *(meta(2, 3, 5, 4) for _ in range(4)), meta(2, 3, 5), None, True)[0], (2, 3, 5, 4)),
    ],
}


def gqa_cached_twice(ns):
    module = on_meta(ns["GroupedQueryAttention"](3, 8, 8, 0.0, num_heads=4, num_kv_heads=1)).eval()
    module(meta(2, 4, 3), use_cache=True)
    return module(meta(2, 1, 3), use_cache=True)


def gpt_cached_twice(ns):
    model = on_meta(ns["TinyGPT"](11, 8, 2, 2, 6, 0.0)).eval()
    model(torch.zeros(2, 4, dtype=torch.long, device="meta"), use_cache=True)
    return model(torch.zeros(2, 1, dtype=torch.long, device="meta"), use_cache=True)


def cached_twice(ns):
    module = on_meta(ns["MultiHeadAttentionWithCache"](3, 6, 8, 0.0, num_heads=2)).eval()
    module(meta(2, 4, 3), use_cache=True)
    return module(meta(2, 1, 3), use_cache=True)


def test_every_step_has_meta_device_calls():
    assert sorted(META_CALLS) == STEPS


@pytest.mark.parametrize("step", STEPS)
def test_answer_key_runs_on_the_meta_device(step):
    """A tensor or mask made on the CPU inside an answer key fails here: the answer keys serve on any device (the
    benchmark runs them with --device cuda). The meta device computes shapes only, so this is fast."""
    namespace = answer_key_namespace(step)
    for what, call, shape in META_CALLS[step]:
        try:
            with torch.no_grad():
                output = call(namespace)
        except Exception as error:  # noqa: BLE001 - the message names the call
            pytest.fail(f"{step}: {what} on meta tensors raised {type(error).__name__}: {error}", pytrace=False)
        assert output.device.type == "meta", f"{step}: {what} returned a tensor on {output.device}, not meta"
        assert tuple(output.shape) == shape, f"{step}: {what} returned shape {tuple(output.shape)}, expected {shape}"


# The schematic pictures: drawn by the student package, offline.
import builtins  # noqa: E402
import socket  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from attention_course import data, demo, plots  # noqa: E402

PICTURES = {
    "draw_qkv_flow": lambda: plots.draw_qkv_flow(),
    "draw_causal_mask": lambda: plots.draw_causal_mask(data.TOKENS),
    "draw_heads_split_merge": lambda: plots.draw_heads_split_merge(num_tokens=3, num_heads=2, head_dim=3),
    "draw_kv_cache": lambda: plots.draw_kv_cache(t_q=2, t_k=5),
    "draw_tiles": lambda: plots.draw_tiles(num_tokens=8, block_size=2),
}


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_picture_draws_offline(name, monkeypatch):
    import matplotlib.pyplot as plt

    plt.close(PICTURES[name]())  # first call: matplotlib may load its fonts from disk once
    opened = []
    real_open = builtins.open

    def no_open(file, *args, **kwargs):
        opened.append(file)
        return real_open(file, *args, **kwargs)

    def no_socket(*args, **kwargs):
        raise AssertionError(f"{name} opened a network socket")

    monkeypatch.setattr(builtins, "open", no_open)
    monkeypatch.setattr(socket, "socket", no_socket)
    figure = PICTURES[name]()
    monkeypatch.undo()
    assert isinstance(figure, Figure), f"plots.{name} returned {type(figure).__name__}, not a matplotlib Figure"
    assert figure.axes, f"plots.{name} drew no axes"
    assert not opened, f"plots.{name} opened files: {opened}"
    plt.close(figure)


# The training demo: deterministic, and it learns.
def test_demo_training_is_deterministic():
    _, first = demo.train_lookback(lags=(1,), num_heads=1, steps=15, batch_size=16, report_every=0)
    _, second = demo.train_lookback(lags=(1,), num_heads=1, steps=15, batch_size=16, report_every=0)
    assert first == second, f"two runs from the same seed gave different losses:\n{first}\n{second}"


def test_demo_training_is_deterministic_whatever_the_threads():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _, with_two = demo.train_lookback(lags=(1, 2), num_heads=2, steps=10, batch_size=16, report_every=0)
        torch.set_num_threads(1)
        _, with_one = demo.train_lookback(lags=(1, 2), num_heads=2, steps=10, batch_size=16, report_every=0)
    finally:
        torch.set_num_threads(threads)
    assert with_two == with_one, "the losses depend on the number of threads the caller set"
    assert torch.get_num_threads() == threads


def test_demo_head_learns_to_look_one_token_back():
    model, losses = demo.train_lookback(lags=(1,), num_heads=1, steps=150, report_every=0)
    assert losses[-1] < 0.2 * losses[0], f"the loss fell only from {losses[0]:.3f} to {losses[-1]:.3f}"
    weights = demo.attention_maps(model, demo.example_tokens())[0]  # (T, T) of the only head
    previous = torch.stack([weights[t, t - 1] for t in range(1, weights.shape[0])])
    assert previous.min() > 0.5, f"the trained head puts only {previous.tolist()} on the previous token"


def test_demo_module_holds_no_answer_of_an_exercise():
    source = (ROOT / "attention_course" / "demo.py").read_text()
    for forbidden in ("softmax(", "masked_fill", "@ keys", "transpose(-2, -1)"):
        assert forbidden not in source, f"attention_course/demo.py computes attention by hand ({forbidden!r})"


def test_the_exercise_s_lesson_losses_are_what_the_lesson_prints():
    """Step 12's training cell puts the student's losses beside the lesson's printout; nbval keeps that printout true."""
    import re
    import nbformat
    printed = {}
    for cell in nbformat.read(ROOT / "notebooks" / "12_tiny_gpt.ipynb", as_version=4).cells:
        if cell.cell_type == "code" and "for step in range(400)" in cell.source:
            text = "".join(o.get("text", "") for o in cell.outputs)
            printed = {int(step): float(loss) for step, loss in re.findall(r"step +(\d+): loss ([\d.]+)", text)}
    source = next(c.source for c in nbformat.read(ROOT / "source" / "12_tiny_gpt" / "12_tiny_gpt.ipynb",
                                                  as_version=4).cells if "LESSON_LOSSES = " in c.source)
    shown = ast.literal_eval(re.search(r"LESSON_LOSSES = (\{[^}]*\})", source).group(1))
    assert printed and shown == printed
