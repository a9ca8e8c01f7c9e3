"""benchmarks/attention_benchmark.py times the answer keys of solutions/, and every row computes the same layer;
benchmarks/grading_benchmark.py says why a submission was not graded, and its floor runs honest notebooks only."""
import sys

import pytest
import torch

import harness
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import attention_benchmark  # noqa: E402
import grading_benchmark  # noqa: E402


def test_every_implementation_computes_the_same_layer():
    torch.manual_seed(0)
    modules = attention_benchmark.build_implementations(d_model=8, num_heads=2, context_length=5)
    split = modules["split weights (step 7)"]
    fused = modules["fused QKV (step 8)"]
    sdpa = modules["SDPA (step 8)"]
    with torch.no_grad():
        sdpa.load_state_dict(split.state_dict(), strict=False)  # SDPA needs no mask buffer
        fused.qkv.weight.copy_(torch.cat([split.W_query.weight, split.W_key.weight, split.W_value.weight]))
        fused.out_proj.load_state_dict(split.out_proj.state_dict())
        wrapper = modules[attention_benchmark.WRAPPER]
        for h, head in enumerate(wrapper.wrapper.heads):  # head h is rows h*4:(h+1)*4 of each projection
            for name in ("W_query", "W_key", "W_value"):
                getattr(head, name).weight.copy_(getattr(split, name).weight[4 * h:4 * (h + 1)])
        wrapper.out_proj.load_state_dict(split.out_proj.state_dict())
        x = torch.randn(3, 5, 8)
        expected = split.eval()(x)
        tiled = modules[attention_benchmark.TILED]
        tiled.block_size = 2  # 5 tokens: two full blocks and a short one
        tiled.load_state_dict(split.state_dict(), strict=False)
        for name in ("fused QKV (step 8)", "SDPA (step 8)", attention_benchmark.WRAPPER, attention_benchmark.TILED):
            assert torch.allclose(modules[name].eval()(x), expected, atol=1e-5), name


def test_the_benchmark_prints_one_row_per_implementation():
    size = attention_benchmark.BenchmarkSize(batch_size=1, num_tokens=8, d_model=8, num_heads=2, repeats=1)
    rows = attention_benchmark.benchmark(size, backward=True, warmup=0)
    table = attention_benchmark.format_table(rows)
    assert [row.name for row in rows] == list(attention_benchmark.build_implementations(8, 2, 8))
    assert len(table.splitlines()) == len(rows) + 1


def test_generation_with_and_without_the_cache_gives_the_same_outputs():
    size = attention_benchmark.BenchmarkSize(batch_size=1, num_tokens=6, d_model=8, num_heads=2, repeats=1)
    ms_per_token, difference = attention_benchmark.generation_ms_per_token(size)
    assert difference < 1e-5
    assert list(ms_per_token) == ["step 7, recompute all", "KV cache (step 9)"]
    assert len(attention_benchmark.format_generation(ms_per_token, 6).splitlines()) == 3


def test_tiny_gpt_generates_the_same_ids_with_and_without_the_cache():
    size = attention_benchmark.BenchmarkSize(batch_size=1, num_tokens=12, d_model=8, num_heads=2, repeats=1)
    ms_per_token, same = attention_benchmark.tiny_gpt_generation(size)
    assert same
    assert list(ms_per_token) == ["TinyGPT, recompute all", "TinyGPT, KV cache (step 12)"]


def test_the_triton_kernel_computes_what_sdpa_computes():
    # on this CPU in Triton's interpreter; with --device cuda the same code times it compiled
    size = attention_benchmark.BenchmarkSize(batch_size=1, num_tokens=20, d_model=16, num_heads=2, repeats=1)
    ms, difference = attention_benchmark.triton_forward(size)
    assert difference < 1e-5, difference
    assert list(ms) == ["step 13's Triton kernel", "F.scaled_dot_product_attention"]
    assert len(attention_benchmark.format_triton(ms, "2 heads of 8").splitlines()) == 4


def test_a_submission_that_cannot_be_graded_shows_why(tmp_path):
    step = "01_dot_product_scores"
    course_dir = harness.make_course(tmp_path / "course", [step])
    harness.submit(course_dir, "nora", step, '{"cells": [')
    *_, failures, reasons = grading_benchmark.grade_plain(course_dir, [step])
    assert f"autograde {step} exited 1" in failures, failures
    scores = grading_benchmark.scores_or_none(course_dir, step, "nora", reasons)
    line = grading_benchmark.shown(scores, reasons.get(("nora", step)))
    assert line.startswith("not graded (") and "NotJSONError: Notebook does not appear to be JSON" in line, line

    died = {"student": "nora", "assignment": step, "success": False, "problems": [], "error": "the grading worker died"}
    reasons = grading_benchmark.fast_reasons([died])
    assert grading_benchmark.shown(None, reasons[("nora", step)]) == "not graded (the grading worker died)", reasons


def test_the_floor_runs_and_judges_honest_notebooks_only(tmp_path):
    step = "01_dot_product_scores"
    course_dir = harness.make_course(tmp_path / "course", [step])
    answers = {("ann", step): ("answer_key", "correct"), ("bob", step): ("cheat_rewrites_check_code", "cheat")}
    harness.submit(course_dir, "ann", step, harness.variant_submission(step, {"cells": {}}))
    seconds = grading_benchmark.floor(course_dir, answers)
    assert list(seconds) == [step] and len(seconds[step]) == 1 and seconds[step][0] > 0, seconds  # bob never ran

    # a notebook called correct that the floor fails is an error, not a figure
    broken = harness.variant_submission(step, {"cells": {"attention_scores": "def attention_scores(x):\n    return x\n"}})
    harness.submit(course_dir, "cy", step, broken)
    with pytest.raises(RuntimeError, match="the floor failed cy's correct"):
        grading_benchmark.floor(course_dir, {("cy", step): ("answer_key", "correct")})
