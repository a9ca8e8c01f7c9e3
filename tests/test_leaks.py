"""Nothing hidden reaches students: no solution code in release/, no hidden test or judge in release/, solutions/, the
lessons or the student package, and nothing a student installs or opens imports the grader package."""
import ast
import importlib
import io
import re
import tokenize

import nbformat
import pytest

from conftest import ROOT, STEPS
import harness
from harness import HIDDEN, SOLUTION, block_runs, blocks

MARKERS = re.compile(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)")


def pairs(lines):
    return set(zip(lines, lines[1:]))


def stripped_lines(path):
    if path.suffix == ".ipynb":
        text = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    else:
        text = path.read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


def code_lines(paths):
    lines = {}
    for path in paths:
        for line in stripped_lines(path):
            lines.setdefault(line, path.relative_to(ROOT))
    return lines


def leaked(secret_lines, paths):
    published = code_lines(paths)
    return sorted(f"{published[line]}: {line}" for line in secret_lines if line in published)


STUDENT_FILES = {
    "release": lambda step: sorted((ROOT / "release" / step).rglob("*.ipynb")),
    "solutions": lambda step: sorted((ROOT / "solutions" / step).rglob("*.ipynb")),
    "package": lambda step: sorted((ROOT / "attention_course").rglob("*.py")),
    "lessons": lambda step: sorted((ROOT / "notebooks").glob("*.ipynb")),
}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("where", ["release", "solutions"])
def test_no_hidden_test_line_is_published(step, where):
    hidden = blocks(step, *HIDDEN)
    assert hidden, f"source/{step} has no hidden tests"
    found = leaked(hidden, STUDENT_FILES[where](step))
    assert not found, f"hidden tests of {step} appear in {where}:\n" + "\n".join(found)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("where", ["lessons", "package"])
def test_no_hidden_test_code_is_copied_into_lessons_or_package(step, where):
    # Hand-written files may share a single plain line with a test (`torch.manual_seed(0)`); two consecutive
    # lines of a hidden test are a copy.
    runs, outside = block_runs(step, *HIDDEN)
    hidden = {pair for run in runs for pair in pairs(run) if not set(pair) <= outside}
    found = sorted(f"{path.relative_to(ROOT)}: {pair[0]} / {pair[1]}"
                   for path in STUDENT_FILES[where](step) for pair in hidden & pairs(stripped_lines(path)))
    assert not found, f"hidden tests of {step} are copied into {where}:\n" + "\n".join(found)


def lessons_a_student_has():
    """Every lesson: all of them are in the students' hands from day one, so a student at step 05 may open lesson 06;
    a later lesson that shows an earlier step's answer gives it away as much as the step's own lesson would."""
    return sorted((ROOT / "notebooks").glob("*.ipynb"))


def constructor_boilerplate(sources):
    """The lines of `sources` (code cells) that only give a module a layer or a size in its `__init__`:
    `self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)`, `self.dropout = nn.Dropout(dropout)`, `self.head_dim =
    d_out // num_heads`, `self.d_out, self.num_heads = d_out, num_heads`. One statement on one line, directly in the
    body of an `__init__`, assigning attributes of `self` only, each value a size (names and numbers with
    arithmetic) or a layer `nn.Something(...)` of sizes and constants (`nn.Linear(d_in, num_kv_heads * self.head_dim)`
    is not one)."""

    def size(value):
        return all(isinstance(node, (ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
                   or isinstance(node, ast.Constant) and type(node.value) in (int, float) for node in ast.walk(value))

    def layer_or_size(value):
        if isinstance(value, ast.Call):
            func = value.func
            return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "nn"
                    and all(size(arg) or isinstance(arg, ast.Constant)
                            for arg in [*value.args, *(keyword.value for keyword in value.keywords)]))
        return size(value)

    found = set()
    for source in sources:
        try:
            tree = ast.parse(re.sub(r"(?m)^\s*[%!].*$", "", source))
        except SyntaxError:
            continue
        lines = source.splitlines()
        for init in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "__init__"):
            for statement in init.body:
                if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                        and statement.lineno == statement.end_lineno):
                    continue
                target, value = statement.targets[0], statement.value
                tuples = isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                assigned = zip(target.elts, value.elts) if tuples else [(target, value)]
                if all(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                       and layer_or_size(v) for t, v in assigned):
                    found.add(lines[statement.lineno - 1].strip())
    return found


def code_cells(path):
    """The code cells of a notebook, or a whole Python file as one."""
    if path.suffix == ".ipynb":
        return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    return [path.read_text()]


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("where", ["lessons", "release", "benchmarks"])
def test_no_exercise_answer_is_shown_before_its_exercise(step, where):
    """Two consecutive lines of an answer are a copy: none in any lesson (every lesson is read before every exercise,
    see `lessons_a_student_has`), none in another step's released notebook (every released exercise is copied into
    the student's work/ on the first start, so a student at step 05 can open step 06's, whose locked cells must not
    give step 05's answer; the step's own release is `test_no_solution_line_reaches_students`), none in benchmarks/
    (which loads the answer keys from solutions/ at run time instead).

    Constructor boilerplate does not count: a line of `__init__` that only gives the module a layer or a size
    (`constructor_boilerplate`: `self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)`, `self.out_proj = nn.Linear(d_out,
    d_out)`, `self.head_dim = d_out // num_heads`) is left out of the answer and of the lesson before consecutive lines
    are paired. Every attention module from step 03 on has these lines, the task names the layers and sizes a
    module holds, and no part asks for them: a part asks for what the module computes, which these lines do not. A
    buffer (`register_buffer`), a mask, a check that raises and every line of `forward` still count."""
    runs, outside = block_runs(step, *SOLUTION)
    boilerplate = constructor_boilerplate(cell.source for cell in harness.source_notebook(step).cells
                                          if cell.cell_type == "code")
    runs = [[line for line in run if line not in boilerplate] for run in runs]
    answer = {pair for run in runs for pair in pairs(run) if not set(pair) <= outside and min(map(len, pair)) > 8}
    paths = {"lessons": lessons_a_student_has,
             "release": lambda: sorted(path for path in (ROOT / "release").glob("*/*.ipynb") if path.parent.name != step),
             "benchmarks": lambda: sorted((ROOT / "benchmarks").glob("*.py"))}[where]()
    found = []
    for path in paths:
        boilerplate = constructor_boilerplate(code_cells(path))
        shown = pairs([line for line in stripped_lines(path) if line not in boilerplate])
        found += sorted(f"{path.relative_to(ROOT)}: {pair[0]} / {pair[1]}" for pair in answer & shown)
    assert not found, f"the answer of {step} appears in {where}:\n" + "\n".join(found)


LESSON_IMPORTS = {"attention_course", "matplotlib", "torch", "triton", "math", "os", "statistics", "time"}


@pytest.mark.parametrize("lesson", sorted(path.name for path in (ROOT / "notebooks").glob("*.ipynb")))
def test_lessons_import_only_the_student_package_and_libraries(lesson):
    nb = nbformat.read(ROOT / "notebooks" / lesson, as_version=4)
    imported = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Import):
                    imported |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom):
                    imported.add((node.module or ".").split(".")[0])
            assert "sys.path" not in cell.source and "__import__" not in cell.source, f"{lesson} changes what it imports"
    assert imported <= LESSON_IMPORTS, f"{lesson} imports {sorted(imported - LESSON_IMPORTS)}"


# The three calls of every PyTorch training loop: the package's training demo (attention seen learning, from lesson
# 03 on) makes them too. Step 12's train_step is graded on what it puts around them (the loss, the order, the return).
TRAINING_IDIOMS = {"optimizer.zero_grad()", "loss.backward()", "optimizer.step()"}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("where", ["release", "package"])
def test_no_solution_line_reaches_students(step, where):
    solution = blocks(step, *SOLUTION) - (TRAINING_IDIOMS if where == "package" else set())
    assert solution, f"source/{step} has no solution blocks"
    found = leaked(solution, STUDENT_FILES[where](step))
    assert not found, f"solution code of {step} appears in {where}:\n" + "\n".join(found)


@pytest.mark.parametrize("folder", ["release", "solutions"])
def test_no_nbgrader_markers_are_published(folder):
    marked = [str(path.relative_to(ROOT)) for path in (ROOT / folder).rglob("*.ipynb")
              if MARKERS.search(path.read_text())]
    assert not marked, f"nbgrader markers left in {marked}"


GRADER = ROOT / "grader" / "attention_grader"
STUDENT_SIDE = {
    "release": sorted((ROOT / "release").rglob("*.ipynb")),
    "solutions": sorted((ROOT / "solutions").rglob("*.ipynb")),
    "lessons": sorted((ROOT / "notebooks").glob("*.ipynb")),
    "package": sorted((ROOT / "attention_course").rglob("*.py")) + [ROOT / "pyproject.toml"],
}


@pytest.mark.parametrize("where", sorted(STUDENT_SIDE))
def test_nothing_a_student_gets_imports_the_grader(where):
    found = [str(path.relative_to(ROOT)) for path in STUDENT_SIDE[where]
             if "attention_grader" in path.read_text() or "grader/" in path.read_text()]
    assert not found, f"{where} refers to the grader package: {found}"


@pytest.mark.parametrize("where", sorted(STUDENT_SIDE))
def test_no_judge_code_reaches_students(where):
    judge_pairs = {pair for path in sorted(GRADER.rglob("*.py")) for pair in pairs(stripped_lines(path))
                   if not all(line.startswith(("#", '"""', "import ", "from ")) or len(line) < 12 for line in pair)}
    found = sorted(f"{path.relative_to(ROOT)}: {pair[0]} / {pair[1]}"
                   for path in STUDENT_SIDE[where] for pair in judge_pairs & pairs(stripped_lines(path)))
    assert not found, f"grader code appears in {where}:\n" + "\n".join(found[:10])


def decisive_lines(step):
    """The answer key's lines that decide an answer (`answer_key_lines`), less what the step's bank lists as
    boilerplate carried over from earlier steps (`SHARED_LINES`) and lines whose computation is ten characters or
    fewer."""
    bank = importlib.import_module(f"bank.{step}")
    shared = {line.strip() for line in getattr(bank, "SHARED_LINES", ())}
    return {line for line in answer_key_lines(step) if line not in shared and len(core(line)) > 10}


def core(line):
    """What a line computes, without `return ` or the name it assigns to: `w = inputs @ query` and `return inputs @
    query` are the same answer."""
    return re.sub(r"^(return\s+|[\w.\[\], ]+(?<![=!<>])=(?!=)\s*)", "", line).strip()


# Steps whose exercises are still to be rewritten (issues 34, 45): expected to fail until they are, and flagged when
# they pass.
NOT_YET_REWRITTEN = {"decisive": set(), "transfer": set(), "hints": set(), "proof": set(),
                     "shown": set()}


def holds(step, ok, message, rule):
    if step in NOT_YET_REWRITTEN[rule]:
        assert not ok, f"{step} now passes: take it out of NOT_YET_REWRITTEN[{rule!r}]"
        pytest.xfail(f"{step}'s exercise is still to be rewritten (issue 45): {message}")
    assert ok, message


@pytest.mark.parametrize("step", STEPS)
def test_no_decisive_line_is_in_the_lesson_or_the_exercise(step):
    """Copying is not solving: no decisive line of the answer key (whitespace aside) is in the step's own lesson or
    in what the released exercise shows (task text, visible tests, hints)."""
    where = sorted((ROOT / "notebooks").glob(f"{step}.ipynb")) + sorted((ROOT / "release" / step).glob("*.ipynb"))
    shown = {}
    for path in where:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            texts = [re.sub(r"^[>\-*\s`]+|`+$", "", line.strip()) for line in cell.source.splitlines()]
            if cell.cell_type == "markdown":  # code quoted inline in the task text: `...`
                texts += re.findall(r"`([^`\n]+)`", cell.source)
            for text in texts:
                shown.setdefault(text.strip(), path.relative_to(ROOT))
                shown.setdefault(core(text.strip()), path.relative_to(ROOT))
    found = sorted(f"{shown[key]}: {line}" for line in decisive_lines(step)
                   for key in (line, core(line)) if key in shown)
    holds(step, not found, f"decisive lines of {step}'s answer key are shown to the student:\n" + "\n".join(found),
          "decisive")


@pytest.mark.parametrize("step", STEPS)
def test_transfer_parts_carry_at_least_40_percent_of_the_points(step):
    """Every exercise asks for the lesson's idea on a case the lesson did not work through: its judges name those
    test cells (`TRANSFER`), worth 40% or more of the autograded points."""
    judges = importlib.import_module(f"attention_grader.judges.step{step[:2]}")
    cells = harness.autograded_cells(step)
    transfer = set(getattr(judges, "TRANSFER", ()))
    assert transfer <= set(cells), f"TRANSFER of step {step[:2]} names cells that are not graded: {transfer - set(cells)}"
    share = sum(cells[cell] for cell in transfer) / sum(cells.values())
    holds(step, share >= 0.4, f"{step}: transfer parts carry {share:.0%} of the autograded points ({sorted(transfer)})",
          "transfer")


HINT_ARGUMENT = {"expect": 2, "fail": 3}  # the position of `hint` where a check takes it positionally


def hints_written_out(path):
    """The hints a notebook's code shows as words (`hint="..."`), where it should name a key of
    attention_course/mistakes, looked up only when the check fails."""
    from attention_course.checks import HINT_KEY
    from attention_course.mistakes import words
    found = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(re.sub(r"(?m)^\s*[%!].*$", "", cell.source))
        except SyntaxError:
            continue
        for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
            name = getattr(call.func, "id", getattr(call.func, "attr", ""))
            given = [k.value for k in call.keywords if k.arg == "hint"]
            if name in HINT_ARGUMENT and len(call.args) > HINT_ARGUMENT[name]:
                given.append(call.args[HINT_ARGUMENT[name]])
            for hint in given:
                key = hint.value if isinstance(hint, ast.Constant) else None
                if not (isinstance(key, str) and (key == "" or HINT_KEY.fullmatch(key) and words(key))):
                    found.append(f"{path.name}: {ast.unparse(hint)[:100]}")
    return found


@pytest.mark.parametrize("step", STEPS)
def test_no_hint_is_shown_before_its_check_fails(step):
    """A visible test names its hints by key (attention_course/mistakes/stepNN.py); the words appear only when the
    check fails, so the released exercise states no likely mistake before the student runs their code."""
    found = [hint for path in sorted((ROOT / "release" / step).glob("*.ipynb")) for hint in hints_written_out(path)]
    holds(step, not found, f"{step}'s released exercise shows hints before a check fails:\n" + "\n".join(found),
          "hints")


@pytest.mark.parametrize("step", STEPS)
def test_every_transfer_part_carries_its_proof_in_the_bank(step):
    """For every transfer test cell, the bank's PROOF names the lesson's code adapted mechanically and the library
    (or autograd) shortcut, both expected to fail that cell, and two correct solutions in other styles, expected to
    pass it; tests/test_grading.py grades them all."""
    judges = importlib.import_module(f"attention_grader.judges.step{step[:2]}")
    bank = harness.bank_module(step)
    variants, proof = bank.VARIANTS, getattr(bank, "PROOF", {})
    problems = []
    for cell in sorted(getattr(judges, "TRANSFER", ())):
        named = proof.get(cell, {})
        for role in ("lesson", "shortcut"):
            names = named.get(role, [])
            if not names or any(cell not in variants.get(name, {}).get("fails", {}) for name in names):
                problems.append(f"{cell}: no {role} variant that fails it ({names})")
        correct = named.get("correct", [])
        if len(correct) < 2 or any(variants.get(name, {}).get("kind") != "correct"
                                   or cell in variants[name].get("fails", {}) for name in correct):
            problems.append(f"{cell}: fewer than two correct variants that pass it ({correct})")
    holds(step, not problems, f"{step}'s transfer parts lack their proof:\n" + "\n".join(problems), "proof")


OWNERS = ("self", "mha", "module", "model", "attn", "block", "layer", "cache")


def tokens(line):
    """A line as Python tokens, with `self.`, `mha.`, ... dropped: `self.W_query(x)` and `mha.W_query(x)` are one line."""
    try:
        found = [t.string for t in tokenize.generate_tokens(io.StringIO(line).readline)
                 if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                                   tokenize.ENDMARKER)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        found = line.split()
    kept = [t for i, t in enumerate(found) if not (t in OWNERS and found[i + 1:i + 2] == ["."])]
    return tuple(kept[1:] if kept[:1] == ["."] else kept)


def answer_key_lines(step):
    """Every line the answer key writes inside its solution blocks, but comments, docstrings, `def`/`class` headers
    and lines of ten characters or fewer."""
    lines = []
    for cell in harness.source_notebook(step).cells:
        inside = in_docstring = False
        for line in cell.source.splitlines() if cell.cell_type == "code" else ():
            stripped = line.strip()
            if SOLUTION[0] in stripped or SOLUTION[1] in stripped:
                inside = SOLUTION[0] in stripped
                continue
            quotes = stripped.count('"""') + stripped.count("'''")
            if quotes:
                in_docstring ^= quotes % 2 == 1
                continue
            if inside and not in_docstring and len(stripped) > 10 and not stripped.startswith(("#", "@", "def ", "class ")):
                lines.append(stripped)
    return lines


def on_screen_before(step):
    """The lines of the lessons and released exercises up to this step, task text and code quoted in it included, as
    tokens, grouped by length."""
    upto = STEPS[:STEPS.index(step) + 1]
    paths = [ROOT / "notebooks" / f"{s}.ipynb" for s in upto] + [p for s in upto for p in (ROOT / "release" / s).glob("*.ipynb")]
    shown = {}
    for path in paths:
        for cell in nbformat.read(path, as_version=4).cells:
            texts = [re.sub(r"^[>\-*\s`]+|`+$", "", line.strip()) for line in cell.source.splitlines()]
            texts += re.findall(r"`([^`\n]+)`", cell.source) if cell.cell_type == "markdown" else []
            for text in texts:
                if text.strip():
                    found = tokens(text)
                    shown.setdefault(len(found), set()).add(found)
    return shown


def seen(line, shown):
    """The line is on screen, up to one token changed in a line of six or more (a renamed variable, another number)."""
    same_length = shown.get(len(line), set())
    return line in same_length or len(line) >= 6 and any(sum(a != b for a, b in zip(line, other)) <= 1
                                                         for other in same_length)


def shown_share(step):
    lines = answer_key_lines(step)
    shown = on_screen_before(step)
    return [line for line in lines if seen(tokens(line), shown)], lines


@pytest.mark.parametrize("step", STEPS)
def test_few_answer_key_lines_are_on_screen_before_the_student_writes_them(step):
    """Retyping is not solving: at most 30 % of a step's answer-key lines are in its lessons and released exercises
    up to it (names normalised, one token changed), boilerplate included (a locked cell or a base class gives it)."""
    found, lines = shown_share(step)
    holds(step, len(found) <= 0.3 * len(lines), f"{step}: {len(found)} of its {len(lines)} answer-key lines are on "
          f"screen before the student writes them:\n" + "\n".join(found), "shown")


def test_at_most_a_fifth_of_the_course_answer_key_is_on_screen_before_it_is_written():
    counts = [tuple(map(len, shown_share(step))) for step in STEPS]
    found, lines = map(sum, zip(*counts))
    assert found <= 0.2 * lines, f"{found} of the course's {lines} answer-key lines are on screen before they are written"
