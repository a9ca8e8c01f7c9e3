"""The judges, in this process, without nbgrader (attention_grader/judging.py, attention_course/probe.py).

The answer key, and the bank's correct solutions in other styles, pass every check of every step for several
students; records that are missing, duplicated,
malformed or forged fail their cell; displayed values and what student code printed during the hidden checks never
reach the verdict; hidden inputs differ between students and stay the same on a re-grade.
"""
import base64
import re
import json

import pytest
import torch
from nbformat import NotebookNode

import harness
from attention_course import checks as checks_module
from attention_course.probe import BEGIN_MIME, RECORDS_MIME, Interpreter, PlanError, decode_tensor, encode_tensor
from attention_grader import judging
from conftest import ROOT, STEPS


def reference(step):
    return judging.reference_namespace(str(ROOT / "source" / step / f"{step}.ipynb"))


def answer_key_sources(step):
    return judging.editable_sources(harness.source_notebook(step))


def records_of(namespace, checks):
    """What the probe publishes for these checks when the notebook's namespace is `namespace`."""
    return [Interpreter(namespace).run_check(c.program.ops) for c in checks if c.program is not None]


def outputs_with(cell_id, records, before=(), after=()):
    return [*before, NotebookNode(output_type="display_data", metadata={}, data={BEGIN_MIME: {"cell": cell_id}}),
            *after, NotebookNode(output_type="display_data", metadata={},
                                 data={RECORDS_MIME: {"cell": cell_id, "records": records}})]


def stream(text, name="stdout"):
    return NotebookNode(output_type="stream", name=name, text=text)


def verdict(step, cell_id, checks, outputs):
    return judging.verdict(outputs, cell_id, checks, reference(step), answer_key_sources(step))


@pytest.mark.parametrize("step", STEPS)
def test_every_autograded_cell_has_a_judge(step):
    assert set(judging.judges_of(step).CELLS) == set(harness.autograded_cells(step))


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("seed", [1, 2])
def test_the_answer_key_passes_every_check(step, seed):
    namespace = reference(step)
    for cell_id in harness.autograded_cells(step):
        checks = judging.plan_cell(step, cell_id, seed)
        outputs, flags = verdict(step, cell_id, checks, outputs_with(cell_id, records_of(namespace, checks)))
        assert flags == [] and [o.output_type for o in outputs] == ["stream"], (cell_id, outputs)


@pytest.mark.parametrize("step", STEPS)
def test_correct_solutions_in_other_styles_pass_on_the_hidden_inputs_of_many_students(step, tmp_path):
    """Every student draws other hidden inputs: a generator that breaks the task's promise (a document id that
    comes back later in its row, say) fails a correct solution for a few students of a class, not for all."""
    reference_namespace = reference(step)
    for name, variant in harness.bank(step).items():
        if variant.get("kind") != "correct" or "notebook" in variant:
            continue
        nb = harness.variant_notebook(step, variant.get("cells", {}))
        path = tmp_path / f"{name}.ipynb"
        path.write_text(json.dumps(nb))
        namespace = judging.reference_namespace(str(path))
        for cell_id in harness.autograded_cells(step):
            for seed in (1000, 1001):
                checks = judging.plan_cell(step, cell_id, seed)
                outputs, flags = judging.verdict(outputs_with(cell_id, records_of(namespace, checks)), cell_id,
                                                 checks, reference_namespace, judging.editable_sources(nb))
                assert flags == [] and [o.output_type for o in outputs] == ["stream"], (name, cell_id, seed, outputs)


def test_packed_documents_drawn_for_step_04_are_consecutive_as_the_task_promises():
    from attention_grader.judges.step04 import random_documents
    for seed in range(500):
        inputs = judging.Inputs(seed)
        for row in random_documents(inputs, (4, 12)).tolist():
            runs = [label for t, label in enumerate(row) if t == 0 or label != row[t - 1]]
            assert len(runs) == len(set(runs)), (seed, row)


@pytest.mark.parametrize("start", ["thread", "pool", "process"])
def test_a_watched_call_cannot_compute_out_of_sight_in_a_thread_or_a_process(start):
    """A dispatch mode sees its own thread only: softmax run in a thread would pass a trace that refuses softmax."""
    import concurrent.futures
    import subprocess
    import threading
    from attention_course.memory import OpTrace, PeakMemory
    x = torch.randn(4, 4)

    def elsewhere():
        if start == "thread":
            box = []
            worker = threading.Thread(target=lambda: box.append(torch.softmax(x, -1)))
            worker.start()
            worker.join()
            return box[0]
        if start == "pool":
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return pool.submit(torch.softmax, x, -1).result()
        subprocess.run(["true"], check=True)

    for watch in (OpTrace(x), PeakMemory()):
        with pytest.raises(RuntimeError, match="calling thread"), watch:
            elsewhere()
    if start != "process":  # once the watch ends, threads start again
        assert torch.equal(elsewhere(), torch.softmax(x, -1))


def test_a_trace_past_its_limit_still_shows_each_other_operation_once():
    """4,000 filler operations before a library kernel must not hide the kernel from a rule that refuses it."""
    from attention_course.memory import OpTrace
    x = torch.randn(4, 4)
    with OpTrace(x, limit=50) as trace:
        for _ in range(100):
            x.new_zeros(())
        torch.softmax(x, -1)
    assert "_softmax" in trace.ops and len(trace.ops) <= 52


def test_hidden_inputs_differ_between_students_and_repeat_on_a_regrade():
    secret = b"instructor secret"
    plans = {student: judging.probe_source("test_softmax_stable", judging.plan_cell(
        "02_softmax", "test_softmax_stable", judging.hidden_seed(secret, "02_softmax", student, "test_softmax_stable")))
        for student in ("ada", "alan")}
    again = judging.probe_source("test_softmax_stable", judging.plan_cell(
        "02_softmax", "test_softmax_stable", judging.hidden_seed(secret, "02_softmax", "ada", "test_softmax_stable")))
    assert plans["ada"] != plans["alan"] and plans["ada"] == again
    assert judging.hidden_seed(b"another secret", "02_softmax", "ada", "x") != judging.hidden_seed(
        secret, "02_softmax", "ada", "x")


def test_the_secret_is_created_once_readable_by_the_instructor_only(tmp_path):
    path = tmp_path / ".grading_secret"
    first = judging.read_secret(path)
    assert judging.read_secret(path) == first and len(first) == 64 and path.stat().st_mode & 0o077 == 0


def test_two_workers_that_create_the_secret_at_once_read_the_same_one(tmp_path, monkeypatch):
    """Two grading workers start on a class with no secret yet: the one that loses the race reads the winner's."""
    path = tmp_path / ".grading_secret"
    first = judging.read_secret(path)
    monkeypatch.setattr(type(path), "exists", lambda self: False)  # it looked before the other one wrote it
    assert judging.read_secret(path) == first


STEP, CELL = "02_softmax", "test_softmax_naive"


@pytest.fixture
def checks():
    return judging.plan_cell(STEP, CELL, 7)


@pytest.fixture
def good_records(checks):
    return records_of(reference(STEP), checks)


def test_displayed_values_and_prints_during_hidden_checks_are_dropped(checks, good_records):
    shown = NotebookNode(output_type="execute_result", execution_count=1, metadata={}, data={"text/plain": "'0'"})
    outputs, _ = verdict(STEP, CELL, checks, outputs_with(
        CELL, good_records, before=[stream("Part 1: visible tests passed\n"), shown],
        after=[stream("hidden input: 0.1234\n"), stream("oops\n", "stderr")]))
    assert [o.get("text") for o in outputs] == ["Part 1: visible tests passed\n",
                                                f"Graded: all {len(checks)} checks of this cell passed.\n"]


def test_a_displayed_value_never_awards_points_to_wrong_records(checks, good_records):
    wrong = [good if "function" in good[0] else [{"tensor": encode_tensor(torch.zeros(1))}] for good in good_records]
    shown = NotebookNode(output_type="execute_result", execution_count=1, metadata={}, data={"text/plain": "'full'"})
    outputs, _ = verdict(STEP, CELL, checks, outputs_with(CELL, wrong, before=[shown]))
    assert [o.output_type for o in outputs] == ["error"] and "checks of this cell failed" in outputs[0].evalue


def test_the_first_failure_does_not_hide_the_others():
    first, second = "f(x) raised TypeError: bad\n  likely mistake: one", "f(y) has the wrong values\n  likely mistake: two"
    assert "Also failed:\n  - f(y) has the wrong values" in judging.also_failed([first, second, second], first)
    assert judging.also_failed([first], first) == ""


@pytest.mark.parametrize("forge", ["none", "twice", "other cell", "too few", "bad base64", "short data", "not a list",
                                   "huge"])
def test_missing_duplicated_or_malformed_records_fail_the_cell_and_flag_it(forge, checks, good_records):
    records = json.loads(json.dumps(good_records))
    outputs = outputs_with(CELL, records)
    if forge == "none":
        outputs = outputs[:1]
    elif forge == "twice":
        outputs = outputs + outputs[-1:]
    elif forge == "other cell":
        outputs[-1].data[RECORDS_MIME]["cell"] = "test_softmax_stable"
    elif forge == "too few":
        records.pop()
    elif forge == "not a list":
        outputs[-1].data[RECORDS_MIME]["records"] = {"0": records[0]}
    elif forge == "huge":
        records[0].append({"str": "x" * judging.RECORDS_LIMIT})
    else:
        tensor = next(value["tensor"] for record in reversed(records) for value in record if "tensor" in value)
        tensor["data"] = "not base64!" if forge == "bad base64" else tensor["data"][:8]
    new_outputs, flags = verdict(STEP, CELL, checks, outputs)
    assert new_outputs[-1].output_type == "error", new_outputs
    if forge in ("bad base64", "short data"):  # one check's data: that check fails
        assert "malformed" in new_outputs[-1].evalue
    else:
        assert new_outputs[-1].ename == "RecordError" and flags == ["bad records"]


def test_a_kernel_error_scores_zero_whatever_the_records_say(checks, good_records):
    error = NotebookNode(output_type="error", ename="CheckFailed", evalue="softmax_naive has the wrong values",
                         traceback=[])
    outputs, _ = verdict(STEP, CELL, checks, [error] + outputs_with(CELL, good_records))
    assert [o.output_type for o in outputs] == ["error"] and outputs[0].evalue == error.evalue


def test_an_error_after_the_hidden_checks_began_does_not_show_its_message(checks):
    error = NotebookNode(output_type="error", ename="SystemExit", evalue="hidden input was 0.123", traceback=[])
    outputs, _ = verdict(STEP, CELL, checks, outputs_with(CELL, [], after=[error])[:-1] + [error])
    assert outputs[-1].ename == "SystemExit" and "0.123" not in outputs[-1].evalue


def test_an_exception_inside_a_check_says_which_check_and_what_was_raised(checks):
    namespace = dict(reference(STEP))  # the student's function, written in a cell
    exec(compile("def softmax_naive(x, dim=-1):\n    return x.view(-1, 99)\n", "<ipython-input-1-0>", "exec"), namespace)
    outputs, _ = verdict(STEP, CELL, checks, outputs_with(CELL, records_of(namespace, checks)))
    assert "softmax_naive(attn_scores[1])" in outputs[-1].evalue and "raised RuntimeError" in outputs[-1].evalue


def test_a_shape_error_says_where_the_sizes_it_names_came_from(checks):
    """Hidden checks and visible tests alike: the sizes in PyTorch's message are matched to the call's own arguments
    (and a module's sizes), so the student sees which dimension met which."""
    namespace = dict(reference(STEP))
    exec(compile("def softmax_naive(x, dim=-1):\n    return x.view(-1, 4)\n", "<ipython-input-1-0>", "exec"), namespace)
    outputs, _ = verdict(STEP, CELL, checks, outputs_with(CELL, records_of(namespace, checks)))
    assert "in this call: 6 is x.shape[0]" in outputs[-1].evalue

    class Heads(torch.nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.d_in, self.W_query = d_in, torch.nn.Linear(d_in, d_out)

        def forward(self, x):
            return self.W_query(x).view(x.shape[0], x.shape[1], 2, self.d_in)  # d_in where d_out belongs

    with pytest.raises(checks_module.CheckFailed) as failure:
        checks_module.expect_runs("Heads(3, 4)(x)", Heads(3, 4), torch.ones(2, 6, 3))
    assert "in this call: 2 is x.shape[0]; 6 is x.shape[1]; 3 is x.shape[2], self.d_in" in str(failure.value)
    exec(compile("def softmax_naive(x, dim=-1):\n    raise ValueError(f'shape {x.shape[0]}')\n", "<ipython-input-2-0>",
                 "exec"), namespace)  # a ValueError is the student's own words, judged as written
    assert not any("origins" in record for records in records_of(namespace, checks) for record in records)


RULE, KERNEL_RULE = judging.allow_only("softmax_naive", "softmax_naive", "write it yourself")


@pytest.mark.parametrize("code,uses", [
    ("def softmax_naive(x, dim=-1):\n    return torch.softmax(x, dim)", "torch.softmax"),
    ("import torch.nn.functional as F\ndef softmax_naive(x, dim=-1):\n    return F.softmax(x, dim=dim)", "F.softmax"),
    ("def softmax_naive(x, dim=-1):\n    return x.softmax(dim)", "x.softmax"),
    ("from torch import softmax\ndef softmax_naive(x, dim=-1):\n    return softmax(x, dim)", "torch.softmax"),
    ("def softmax_naive(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)", None),
    ("def softmax_stable(x, dim=-1):\n    return softmax_naive(x - x.amax(dim, keepdim=True), dim)", None),
    # imported under another name: still torch's
    ("from torch.nn.functional import softmax as normalise\ndef softmax_naive(x, dim=-1):\n    return normalise(x, dim)",
     "softmax (imported as normalise)"),
    # the student's own names: a result called softmax, a helper of their own, finfo, float64 inside, a loop
    ("def softmax_naive(x, dim=-1):\n    e = x.exp()\n    softmax = e / e.sum(dim, keepdim=True)\n    return softmax", None),
    ("def softmax(x, dim):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)\n"
     "def softmax_naive(x, dim=-1):\n    return softmax(x, dim)", None),
    ("LOW = torch.finfo(torch.float32).min\ndef softmax_naive(x, dim=-1):\n    e = (x.double() - LOW).exp()\n"
     "    return (e / sum(e.unbind(dim))).to(x.dtype)", None),
    # the routes of issue 25: other softmax-family functions and modules, dynamic access, private names
    ("def softmax_naive(x, dim=-1):\n    return torch.nn.functional.softmin(-x, dim)", "softmin"),
    ("def softmax_naive(x, dim=-1):\n    return getattr(torch, 'soft' + 'max')(x, dim)", "getattr"),
    ("def softmax_naive(x, dim=-1):\n    return vars(torch)['softmax'](x, dim)", "vars"),
    ("def softmax_naive(x, dim=-1):\n    return torch._softmax(x, dim, False)", "torch._softmax"),
    ("def softmax_naive(x, dim=-1):\n    return torch.ops.aten._softmax(x, dim, False)", "torch.ops"),
    ("def softmax_naive(x, dim=-1):\n    return torch.nn.LogSoftmax(dim)(x).exp()", "LogSoftmax"),
    ("from torch.distributions import Categorical\ndef softmax_naive(x, dim=-1):\n    return Categorical(logits=x).probs",
     "Categorical"),
    ("def softmax_naive(x, dim=-1):\n    return eval('torch.softmax(x, dim)')", "eval"),
    ("def softmax_naive(x, dim=-1):\n    return __import__('torch').softmax(x, dim)", "__import__"),
    ("import importlib\ndef softmax_naive(x, dim=-1):\n    return importlib.import_module('torch').softmax(x, dim)",
     "importlib"),
    ("helper = torch.softmax\ndef softmax_naive(x, dim=-1):\n    return helper(x, dim)", "torch.softmax"),
    ("softmax_naive = lambda x, dim=-1: torch.softmax(x, dim)", "torch.softmax"),
    # IPython runs an indented cell, and magics: the rule reads the cell as IPython does
    ("    def softmax_naive(x, dim=-1):\n        return torch.softmax(x, dim)", "torch.softmax"),
    ("%config InlineBackend.figure_format = 'png'\ndef softmax_naive(x, dim=-1):\n    return torch.softmax(x, dim)",
     "torch.softmax"),
    ("%%time\ndef softmax_naive(x, dim=-1):\n    return torch.softmax(x, dim)", "torch.softmax"),
    ("%run helper.py", "%run"),
    # a library's function changed at the top level
    ("torch.exp = torch.softmax\ndef softmax_naive(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim)",
     "torch.exp"),
    # a cell the grader cannot read
    ("def softmax_naive(x, dim=-1:\n    return x", "does not parse"),
    # what is not the exercise's point is allowed: numpy on numbers, decorators, functools around one's own function
    ("import numpy as np\ndef softmax_naive(x, dim=-1):\n    e = (x * np.sqrt(1.0)).exp()\n"
     "    return e / e.sum(dim, keepdim=True)", None),
    ("@torch.no_grad()\ndef softmax_naive(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)", None),
    ("import functools\ndef own(x, dim):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)\n"
     "softmax_naive = functools.partial(own, dim=-1)", None),
    # names rebound at run time, behind the source's back (issue 35)
    ("def softmax_naive(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)\n"
     "globals()['softmax_naive'] = lambda x, dim=-1: torch.softmax(x, dim)", "globals"),
    ("def softmax_naive(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)\n"
     "def other(x, dim=-1):\n    return torch.softmax(x, dim)\nsoftmax_naive.__code__ = other.__code__", "__code__"),
    ("globals().update(softmax_naive=torch.softmax)", "globals"),
    ("class Heads:\n    def __init__(self):\n        setattr(self, 'count', 2)\n"
     "def softmax_naive(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)", None),
])
def test_rules_about_how_are_judged_from_the_cells_as_ipython_runs_them(code, uses):
    message = RULE.source_rule({"softmax_naive": code})
    hint = "plain Python" if uses == "does not parse" else "write it yourself"
    assert (message is None) if uses is None else (uses in message and hint in message), message


def test_rules_about_how_read_every_cell_the_student_can_edit():
    honest = "def softmax_naive(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)"
    by_torch = "def softmax_naive(x, dim=-1):\n    return torch.softmax(x, dim)"
    assert "cell 7" in RULE.source_rule({"softmax_naive": honest, "cell 7": by_torch})
    assert "torch.softmax" in RULE.source_rule({"softmax_naive": honest, "softmax_naive (copy)": by_torch})
    helper = "def exps(x):\n    return torch.softmax(x, -1)"
    assert "torch.softmax" in RULE.source_rule({"softmax_naive": "def softmax_naive(x, dim=-1):\n    return exps(x)",
                                                "cell 9": helper})
    # a cell that does not parse and has nothing to do with the part: the kernel runs none of it either
    assert RULE.source_rule({"softmax_naive": honest, "cell 9": "def oops(:\n"}) is None
    nb = harness.variant_notebook("02_softmax", {})
    nb.cells.append(__import__("nbformat").v4.new_code_cell(by_torch))
    sources = judging.editable_sources(nb)
    assert list(sources)[-1].startswith("cell ") and "setup" not in sources and "test_softmax_naive" not in sources


def test_a_warning_printed_before_a_failure_comes_after_its_message(checks):
    namespace = {**reference(STEP), "softmax_naive": lambda x, dim=-1: x}
    warning = stream("UserWarning: The use of `x.T` on tensors of dimension other than 2 ...\n" * 20, "stderr")
    outputs, _ = verdict(STEP, CELL, checks, outputs_with(CELL, records_of(namespace, checks), before=[warning]))
    assert [o.output_type for o in outputs] == ["error", "stream"] and outputs[1].name == "stderr"


def test_the_probe_traces_the_operations_of_a_call_and_what_they_read():
    """Step 10's one-pass check: the answer key reads each block with a running maximum; a two-pass softmax reads
    every block before any exponential, a whole-row softmax reads no block alone."""
    step = "10_flash_attention"
    namespace, bank = reference(step), harness.bank(step, integrity=False)
    check = judging.judges_of(step).one_pass_check(torch.arange(12.0), 3)
    for variant, words in ((None, None), ("route_softmax_two_pass", "two-pass"), ("route_softmax_idle_loop",
                                                                                  "whole row"),
                           ("split_float64_normalised_output", None), ("unfold_padding_helpers_triu", None)):
        student = dict(namespace)
        if variant:
            exec(bank[variant]["cells"]["online_softmax"], student)
        got = Interpreter(student).run_check(check.program.ops)
        message = judging.judge_check(check, got, namespace, {})
        assert (message is None) if words is None else words in message, (variant, message)


def test_decoding_checks_every_field():
    good = encode_tensor(torch.arange(6.0).reshape(2, 3))
    assert torch.equal(decode_tensor(good), torch.arange(6.0).reshape(2, 3))
    for bad in [{**good, "shape": [3, 3]}, {**good, "shape": [-1, 6]}, {**good, "dtype": "pickle"},
                {**good, "storage": "object"}, {**good, "data": base64.b64encode(b"x" * 47).decode()},
                {**good, "extra": 1}, "not a dict", {**good, "shape": [2 ** 40, 2 ** 40]}]:
        with pytest.raises(PlanError):
            decode_tensor(bad)


def test_a_module_that_sees_positions_is_told_attention_is_blind_to_order():
    step = "03_trainable_qkv"
    reference_v2 = reference(step)["SelfAttention_v2"]

    class WithPositionBias(reference_v2):
        def forward(self, x):
            queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
            position_bias = 0.5 * torch.arange(x.shape[-2], dtype=x.dtype)  # a later key scores higher
            attn_weights = torch.softmax(queries @ keys.mT / keys.shape[-1] ** 0.5 + position_bias, dim=-1)
            return attn_weights @ values

    check = judging.judges_of(step).shuffled_tokens_check(judging.Inputs(7))
    for cls, verdict_words in ((reference_v2, None), (WithPositionBias, "blind to order")):
        got = Interpreter({**reference(step), "SelfAttention_v2": cls}).run_check(check.program.ops)
        message = judging.judge_check(check, got, reference(step), {})
        assert (message is None) if verdict_words is None else verdict_words in message, message


def test_a_known_mistake_is_named_from_the_answer_key_run_with_the_mistake_put_in():
    """Step 09's judges name a top-left mask in a student's module that calls SDPA with is_causal=True, though they
    never see its code: the answer key, run again with its causal_mask_with_offset replaced by the top-left one,
    computes the same records."""
    step = "09_kv_cache"
    judges = judging.judges_of(step)
    check = judges.cache_check(judging.Inputs(3), 3, 4, 2, 6, 6, 2, False)
    student = dict(reference(step))
    exec(harness.bank(step, integrity=False)["sdpa_is_causal"]["cells"]["attention_with_cache"], student)
    got = Interpreter(student).run_check(check.program.ops)
    named = judging.judge_check(check, got, reference(step), {})
    check.mistakes = ()
    unnamed = judging.judge_check(check, got, reference(step), {})
    assert "top-left" in named and "top-left" not in unnamed, (named, unnamed)
    assert named.split("\n")[0] == unnamed.split("\n")[0]  # the same failure, with the mistake's hint


def test_the_probe_records_the_memory_a_call_took():
    """Step 10's memory check: the largest tensor made during the call, measured in the kernel, judged outside."""
    step = "10_flash_attention"
    judges = judging.judges_of(step)
    check = judges.memory_check(judging.Inputs(5), 128, 8, 16, False)
    namespace = reference(step)

    def whole_matrix(queries, keys, values, block_size, causal=False):
        return torch.softmax(queries @ keys.mT / queries.shape[-1] ** 0.5, dim=-1) @ values

    for tiled, verdict_words in ((namespace["tiled_attention"], None), (whole_matrix, "(T, T)")):
        got = Interpreter({**namespace, "tiled_attention": tiled}).run_check(check.program.ops)
        assert got[0]["memory"]["largest_numel"] == (128 * 16 if verdict_words is None else 128 * 128)
        message = judging.judge_check(check, got, namespace, {})
        assert (message is None) if verdict_words is None else verdict_words in message, message
    forged = [{"memory": {"largest_numel": "small"}}, got[1]]
    assert "not recorded" in judging.judge_check(check, forged, namespace, {})


def test_a_stand_in_answers_for_an_earlier_part_only_in_its_cell():
    """Step 09: in the test cells of Parts 2 and 3, a student's wrong causal_mask_with_offset answers with the
    judges' masks (so that Part 1's mistake costs Part 1 only), sizes outside the table still reach the student's
    own function, and the hidden checks put the student's function back, also when they fail."""
    from attention_course import probe

    name, table = judging.judges_of("09_kv_cache").STAND_INS["test_cached_attention"]()
    top_left = lambda t_q, t_k: torch.ones(t_q, t_k, dtype=torch.bool).triu(1)  # noqa: E731
    namespace = {name: top_left}
    source = judging.with_probe("expect(True, 'visible')\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS", "cell", [],
                                (name, table))
    assert source.startswith(judging.HIDDEN_BEGIN)  # the table is cleared from feedback with the hidden tests
    exec(source.split(judging.HIDDEN_END)[0], namespace)
    assert torch.equal(namespace[name](1, 4), torch.tensor([[False, False, False, False]]))
    assert torch.equal(namespace[name](17, 20), top_left(17, 20))
    with pytest.raises(PlanError):
        probe.run(namespace, "cell", [[{"call": {"unknown": 1}}]])
    assert namespace[name] is top_left


def test_the_kernel_follows_decorators_and_partials_to_the_student_s_own_function():
    """@torch.no_grad() and functools.partial around a function of one's own pass; a partial of torch.softmax
    does not."""
    cell = {}
    exec(compile("import functools, torch\n@torch.no_grad()\ndef decorated(x, dim=-1):\n    return x.exp() / "
                 "x.exp().sum(dim, keepdim=True)\ndef own(x, dim):\n    return x.exp() / x.exp().sum(dim, keepdim=True)"
                 "\nwrapped = functools.partial(own, dim=-1)\nlibrary = functools.partial(torch.softmax, dim=-1)\n",
                 "<ipython-input-3-0>", "exec"), cell)
    for name, words in (("decorated", None), ("wrapped", None), ("library", "functools.partial")):
        got = Interpreter({**cell, "softmax_naive": cell[name]}).run_check(KERNEL_RULE.program.ops)
        message = judging.judge_check(KERNEL_RULE, got, cell, {})
        assert (message is None) if words is None else words in message, (name, message)


def test_the_kernel_shows_which_function_the_checks_call():
    """The rule's half seen in the kernel: a name rebound to torch.softmax through globals(), a function made by
    exec, or a helper rebound to a library softmax fail, though their cells' source may look honest."""
    namespace = reference(STEP)
    made_by_exec = {}
    exec("def softmax_naive(x, dim=-1):\n    return x.exp() / x.exp().sum(dim, keepdim=True)\n", made_by_exec)
    helped = {"exps": torch.softmax}
    exec(compile("def softmax_naive(x, dim=-1):\n    return exps(x, dim)\n", "<ipython-input-2-0>", "exec"), helped)
    for value, words in ((namespace["softmax_naive"], None), (torch.softmax, "torch.softmax"),
                         (made_by_exec["softmax_naive"], "exec"), (helped["softmax_naive"], "exps")):
        got = Interpreter({**namespace, "softmax_naive": value}).run_check(KERNEL_RULE.program.ops)
        message = judging.judge_check(KERNEL_RULE, got, namespace, {})
        assert (message is None) if words is None else words in message, (words, message)


def test_a_failed_check_shows_the_expected_values_in_the_student_s_dtype():
    """A float64 `expected` beside a float32 or bool `got` made students read the dtype as their mistake."""
    import torch
    from attention_course.checks import CheckFailed, fail
    for got, shown in ((torch.zeros(2), "tensor([1., 1.])"), (torch.zeros(2, dtype=torch.bool), "tensor([True, True])")):
        try:
            fail("wrong", torch.ones(2, dtype=torch.float64), got)
        except CheckFailed as failure:
            assert f"expected: {shown}\n" in str(failure), str(failure)


@pytest.mark.parametrize("causal", [False, True])
def test_step_13s_answer_key_passes_gradcheck(causal):
    """The key's hand-written backward and its FlashAttention agree with finite differences (float64), on tiles that
    do and do not divide T; gradcheck fails a backward with one term of the softmax's Jacobian dropped."""
    key = reference("13_attention_backward")
    flash, backward = key["FlashAttention"], key["attention_backward"]
    generator = torch.Generator().manual_seed(13)
    q, k, v, d_out = (torch.randn(1, 2, 5, 3, generator=generator, dtype=torch.float64) for _ in range(4))
    for block_q, block_k in [(1, 1), (2, 3), (4, 2), (8, 8)]:
        assert torch.autograd.gradcheck(lambda *x: flash.apply(*x, causal, block_q, block_k),
                                        [x.clone().requires_grad_() for x in (q, k, v)]), (block_q, block_k)

    class ByHand(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        @staticmethod
        def backward(ctx, grad):
            return backward(*ctx.saved_tensors, grad, None, causal)

    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    assert torch.autograd.gradcheck(ByHand.apply, leaves)
    mistaken = dict(key)
    exec(judging.editable_sources(harness.source_notebook("13_attention_backward"))["attention_backward"].replace(
        "d_s = p * (d_p - d)", "d_s = p * d_p"), mistaken)
    backward = mistaken["attention_backward"]  # ByHand looks it up when called
    assert not torch.autograd.gradcheck(ByHand.apply, leaves, raise_exception=False)


@pytest.mark.parametrize("expected,got,says", [
    ((2, 6, 4), (2, 4, 6), "dimensions 1 and 2 are swapped"),
    ((2, 2, 6, 6), (2, 6, 6), "a missing dimension of size 2"),
    ((6, 6), (6, 1, 6), "an extra dimension of size 1 (dimension 1)"),
    ((2, 6, 4), (2, 6, 3), "dimension 2 has size 3 where 4 belongs"),
])
def test_a_wrong_shape_says_how_it_differs(expected, got, says):
    message = judging.compare({"tensor": encode_tensor(torch.zeros(got))}, {"tensor": encode_tensor(torch.zeros(expected))},
                              "the weights", judging.Expect(""))
    assert says in message and str(expected) in message
    with pytest.raises(checks_module.CheckFailed, match=re.escape(says)):
        checks_module.expect_shape("the weights", torch.zeros(got), expected)
