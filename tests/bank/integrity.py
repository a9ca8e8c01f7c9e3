"""Cheating and broken submissions for every step, built from the step's own notebooks so they follow the course.

Cheats ride on a real mistake of the step's bank (`CHEATS_RIDE_ON`, or the first one by name): the cheat must not earn a single point
that the mistake alone does not earn. Broken submissions start from the answer key and break it at the end of its
last solution cell: every test cell before that cell keeps its points, what could not run scores zero, and the other
students are graded as usual.

Every route runs on two steps, one of functions and one of modules (`EVERY_ROUTE_ON`): the grading pipeline they
attack is the same for every step. The other steps keep the cheats whose outcome depends on the step's own checks and
judges (`ON_EVERY_STEP`); the grading benchmark grades every route on every step.

`at_most: True` makes the expected scores upper bounds, for a cheat whose effect depends on timing.
`stock_hole: True` marks variants that plain nbgrader (a Jupyter kernel with the instructor's rights, no limits) must
not even be shown: they read the solutions, write the gradebook, delete files or exhaust the machine's memory, or
plain nbgrader leaves them out of the gradebook (unreadable or missing notebooks, a kernel that died).
"""
import harness

# Prepended to the mistake's first cell: each leaves the mistake in place and tries to make its tests pass anyway.
CHEATS = {
    "cheat_patches_torch_allclose": "torch.allclose = lambda *args, **kwargs: True\n",
    "cheat_patches_numpy": "import numpy\nnumpy.allclose = lambda *args, **kwargs: True\n"
                           "numpy.testing.assert_allclose = lambda *args, **kwargs: None\n",
    "cheat_patches_course_checks": (
        "import attention_course.checks as _checks\n"
        "for _name in ('fail', 'expect', 'expect_tensor', 'expect_shape', 'expect_close', 'expect_value_error'):\n"
        "    setattr(_checks, _name, lambda *args, **kwargs: None)\n"
        "    globals()[_name] = lambda *args, **kwargs: None\n"),
    "cheat_swallows_errors": "get_ipython().set_custom_exc((BaseException,), lambda *args, **kwargs: None)\n",
    "cheat_hides_tracebacks": "get_ipython().showtraceback = lambda *args, **kwargs: None\n"
                              "get_ipython()._showtraceback = lambda *args, **kwargs: None\n",
    "cheat_global_function_mode": (
        "from torch.overrides import TorchFunctionMode\n"
        "class _Everything(TorchFunctionMode):\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        if getattr(func, '__name__', '') in ('allclose', 'equal'):\n"
        "            return True\n"
        "        return func(*args, **(kwargs or {}))\n"
        "_Everything().__enter__()\n"),
    # Re-patches the checks from a thread while the tests run, after the grader put them back.
    "cheat_thread_repatches_checks": (
        "import threading, time, attention_course.checks as _checks\n"
        "def _keep_patching():\n"
        "    while True:\n"
        "        _checks.fail = lambda *args, **kwargs: None\n"
        "        torch.allclose = lambda *args, **kwargs: True\n"
        "        time.sleep(0.0005)\n"
        "threading.Thread(target=_keep_patching, daemon=True).start()\n"),
    "cheat_prints_all_tests_passed": "print('All tests passed! 100/100')\n",
    # The routes around an in-kernel guard (each earned marks for wrong code while tests decided in the kernel):
    # rewrite the code of the functions the checks call, switch the guard off, show a value nbgrader reads as
    # partial credit, or write fake "cell finished" messages to the executor's own file descriptor.
    "cheat_rewrites_check_code": (
        "import attention_course.checks as _checks\n"
        "_nothing = (lambda *args, **kwargs: None).__code__\n"
        "for _check in (_checks.fail, _checks.expect, _checks.expect_tensor, _checks.expect_shape,\n"
        "               _checks.expect_close, _checks.expect_value_error):\n"
        "    _check.__code__ = _nothing\n"),
    "cheat_switches_the_guard_off": (
        "import importlib.util, attention_course.checks as _checks\n"
        "if importlib.util.find_spec('attention_course.guard'):\n"
        "    import attention_course.guard as _guard\n"
        "    _guard.ACTIVE.changes = lambda: []\n"
        "for _name in ('fail', 'expect', 'expect_tensor', 'expect_shape', 'expect_close', 'expect_value_error'):\n"
        "    setattr(_checks, _name, lambda *args, **kwargs: None)\n"
        "    globals()[_name] = lambda *args, **kwargs: None\n"),
    "cheat_displays_a_value": (
        "import sys\n"
        "get_ipython().events.register('pre_run_cell', lambda *args: get_ipython().displayhook('full marks'))\n"),
    "cheat_writes_executor_messages": (
        "import json, os\n"
        "os.write(1, ''.join(json.dumps({'cell': _i, 'outputs': []}) + '\\n' for _i in range(CODE_CELLS)).encode()\n"
        "         + b'{\"end\": \"ok\"}\\n')\n"),
    "cheat_reads_solutions": (
        "import json, os\n"
        "for _root in [os.getcwd(), *[os.path.dirname(os.getcwd().rsplit(os.sep, k)[0]) for k in (1, 2, 3)]]:\n"
        "    for _folder in ('source', 'solutions'):\n"
        "        try:\n"
        "            for _path in sorted(os.listdir(os.path.join(_root, _folder))):\n"
        "                print('found', _folder, _path)\n"
        "        except OSError:\n"
        "            pass\n"),
}

# Plain nbgrader would let these damage the course, so they only run through the course's sandboxed grader.
FILE_CHEATS = {
    "cheat_copies_the_answer_key": (
        "import glob, json, os\n"
        "for _path in glob.glob(os.path.join(os.getcwd(), *['..'] * 3, '*', 'STEP', 'STEP.ipynb')):\n"
        "    for _cell in json.load(open(_path))['cells']:\n"
        "        if _cell['cell_type'] == 'code' and 'BEGIN SOLUTION' in ''.join(_cell['source']):\n"
        "            exec(''.join(_cell['source']), globals())\n"),
    "cheat_writes_the_gradebook": (
        "import glob, os, sqlite3\n"
        "for _path in glob.glob(os.path.join(os.getcwd(), *['..'] * 3, 'gradebook.db')):\n"
        "    _db = sqlite3.connect(_path)\n"
        "    _db.execute('UPDATE grade SET auto_score = 0, manual_score = 0')\n"
        "    _db.commit()\n"),
    "cheat_deletes_other_files": (
        # Only where it finds the course: walking the whole sandbox (/usr, /proc) would just time out.
        "import glob, os, shutil\n"
        "_root = os.path.join(os.getcwd(), *['..'] * 3)\n"
        "_course = os.path.exists(os.path.join(_root, 'gradebook.db'))\n"
        "for _path in glob.glob(os.path.join(_root, '*')) if _course else []:\n"
        "    if os.path.basename(_path) not in ('autograded',):\n"
        "        shutil.rmtree(_path, ignore_errors=True) if os.path.isdir(_path) else os.remove(_path)\n"),
}


def _wrap(code):
    """A cheat that fails (no file to read, say) must not stop the mistake below it from being defined."""
    body = "".join("    " + line + "\n" for line in code.splitlines())
    return f"try:\n{body}except Exception as _error:\n    print('the cheat did not work:', _error)\n"


def _code_cells(step):
    nb = harness.read_notebook(harness.ROOT / "source" / step / f"{step}.ipynb")
    return [c.metadata.get("nbgrader", {}) for c in nb.cells if c.cell_type == "code"]


def _after_last_solution(step):
    """Test cells after the last solution cell: they test it, so they fail when it does not run."""
    cells = _code_cells(step)
    last = max(i for i, c in enumerate(cells) if c.get("solution"))
    return [c["grade_id"] for c in cells[last:] if c.get("grade_id") in harness.autograded_cells(step)], \
        cells[last]["grade_id"]


def _test_cells_after(step, grade_id):
    """The autograded test cells that come after the cell `grade_id`."""
    names = [c.get("grade_id") for c in _code_cells(step)]
    return [name for name in names[names.index(grade_id):] if name in harness.autograded_cells(step)]


def _test_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and
            not c.metadata.get("nbgrader", {}).get("solution")]


def _edit_tests(nb):
    for cell in _test_cells(nb):
        cell.source = "print('All tests passed!')"
    return nb


def _delete_tests(nb):
    tests = {id(c) for c in _test_cells(nb)}
    nb.cells = [c for c in nb.cells if id(c) not in tests]
    return nb


def _copy_tests(nb):
    import copy
    cells = []
    for cell in nb.cells:
        if cell in _test_cells(nb):  # the copy comes first, emptied, with the same grade id
            twin = copy.deepcopy(cell)
            twin.source = "print('All tests passed!')"
            twin["id"] = f"{cell.get('id', 'cell')}-copy"[:64]
            cells.append(twin)
        cells.append(cell)
    nb.cells = cells
    return nb


def _retype_tests(nb):
    for cell in _test_cells(nb):
        cell.metadata.pop("nbgrader")
        cell.source = "pass  # retyped by the student"
    return nb


EVERY_ROUTE_ON = ("02_softmax", "07_weight_split_mha")
ON_EVERY_STEP = ("cheat_rewrites_check_code", "cheat_displays_a_value", "cheat_skips_the_probe",
                 "cheat_copies_test_cells", "broken_syntax_error", "broken_cell_raises")


def variants(step, every_route=None):
    """The cheating and broken submissions of a step: all of them on `EVERY_ROUTE_ON` (or with every_route=True)."""
    result = every_variant(step)
    if every_route or (every_route is None and step in EVERY_ROUTE_ON):
        return result
    return {name: spec for name, spec in result.items() if name in ON_EVERY_STEP}


def every_variant(step):
    mistakes = {name: v for name, v in harness.bank(step, integrity=False).items()
                if v["kind"] == "mistake" and v.get("fails")}
    # A bank may name the mistake its cheats ride on: one that returns a wrong value rather than raising, so that
    # a cheat which silences the checks would really earn its points.
    mistake_name = getattr(harness.bank_module(step), "CHEATS_RIDE_ON", sorted(mistakes)[0])
    mistake = mistakes[mistake_name]
    first = next(iter(mistake["cells"]))
    fails = {cell: "" for cell in mistake["fails"]}
    all_cells = {cell: "" for cell in harness.autograded_cells(step)}
    result = {}
    for name, code in {**CHEATS, **(FILE_CHEATS if harness.SANDBOX else {})}.items():
        cells = dict(mistake["cells"])
        code = code.replace("STEP", step).replace("CODE_CELLS", str(len(_code_cells(step))))
        cells[first] = _wrap(code) + cells[first]
        result[name] = {"kind": "cheat", "cells": cells, "fails": fails, "on": mistake_name,
                        "stock_hole": name in FILE_CHEATS}
    # Without the probe's records no hidden check can pass: every test cell scores zero and the notebook is flagged.
    result["cheat_skips_the_probe"] = {
        "kind": "cheat", "on": mistake_name,
        # the mistake's own cells may fail in the kernel first, with the mistake's message
        "fails": {cell: "" if cell in fails else "left no records" for cell in _test_cells_after(step, first)},
        "cells": {**mistake["cells"], first: _wrap("import attention_course.probe as _probe\n"
                                                   "_probe.run = lambda *args, **kwargs: None\n")
                  + mistake["cells"][first]}}
    # The thread patches at moments the scheduler picks, so which cells it spoils varies from run to run: a cell
    # that ran while it patched fails (GuardError), and none may score more than the mistake alone.
    result["cheat_thread_repatches_checks"]["at_most"] = True
    # Patching torch itself can also make a visible test of an honest part fail in the kernel: never more points.
    for name in ("cheat_global_function_mode", "cheat_patches_torch_allclose"):
        result[name]["at_most"] = True
    # Test cells edited, deleted, copied or retyped: nbgrader puts the instructor's version back.
    for name, transform in {"cheat_edits_test_cells": _edit_tests, "cheat_deletes_test_cells": _delete_tests,
                            "cheat_copies_test_cells": _copy_tests, "cheat_retypes_test_cells": _retype_tests}.items():
        result[name] = {"kind": "cheat", "cells": mistake["cells"], "fails": fails, "on": mistake_name,
                        "notebook": transform}

    result["broken_invalid_json"] = {"kind": "broken", "cells": {}, "notebook": lambda nb: '{"cells": [',
                                     "fails": {cell: "could not be read" for cell in all_cells}, "stock_hole": True}
    result["broken_missing_notebook"] = {"kind": "broken", "cells": {}, "notebook": lambda nb: None,
                                         "fails": {cell: "no notebook" for cell in all_cells}, "stock_hole": True}
    after, last = _after_last_solution(step)
    key = harness.variant_notebook(step, {})
    last_source = next(c.source for c in key.cells if c.metadata.get("nbgrader", {}).get("grade_id") == last)
    broken = {
        "broken_syntax_error": ("def oops(:\n", {c: "Python cannot run" for c in after}, False),
        "broken_cell_raises": ("raise RuntimeError('not finished yet')\n", {c: "stopped with an error" for c in after},
                               False),
        "broken_os_exit": ("import os\nos._exit(3)\n", {c: "" for c in after}, True),
        "broken_infinite_loop": ("def _spin():\n    while True:\n        pass\n_spin()\n", {}, False),
        "broken_unstoppable_loop": ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n"
                                    "    pass\n", {c: "" for c in after}, True),
        "broken_huge_allocation": ("too_big = torch.empty(1 << 42)\n", {}, False),
        "broken_over_memory_limit": ("too_big = torch.ones(6 << 30, dtype=torch.uint8)\n", {}, True),
        "broken_output_flood": ("for _ in range(200_000):\n    print('spam ' * 40)\n", {}, False),
    }
    for name, (code, failing, hole) in broken.items():
        before = name in ("broken_syntax_error", "broken_cell_raises")  # the cell never defines its names
        source = code + last_source if before else last_source + "\n" + code
        result[name] = {"kind": "broken", "cells": {last: source}, "fails": failing, "stock_hole": hole}
    return result
