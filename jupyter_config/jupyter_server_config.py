"""Jupyter server settings of `python3 course.py start`, both views (course.py puts this folder on JUPYTER_CONFIG_PATH;
the student view adds student/ before it).

- JupyterLab opens on the course home, HOME.md, shown rendered (labconfig/default_setting_overrides.json).
- nbgrader's Validate button speaks the course's language: on a lesson it says there is nothing to validate, and a
  written answer left blank is reported as still to write, apart from the tests that fail; a failing part shows its
  check's message first, its test code and traceback folded below it.
"""
import html
import re
from pathlib import Path

import nbformat
from nbconvert.filters import strip_ansi
from nbgrader import utils
from nbgrader.server_extensions.validate_assignment import handlers

c = get_config()  # noqa: F821  (provided by traitlets when the server loads this file)
c.LabApp.default_url = "/lab/tree/HOME.md"

# Validate's dialog (nbgrader's labextension) puts "The following cell failed:" and the cell's source above every entry
# of "failed", and shows an entry's error as HTML. The course's notes (a lesson, a summary, a written answer still to
# write) are not failing cells, and a failing part shows its message first: their own style hides those two lines.
NOTE_STYLE = """<style>
#validation-message > div:has(+ div + div .course-validate-note),
#validation-message > div:has(+ div .course-validate-note) { display: none; }
.course-validate-note { font-family: var(--jp-ui-font-family); white-space: pre-wrap; overflow-wrap: anywhere; }
.course-validate-part .course-validate-message { display: block; margin-bottom: 0.5em; }
</style>"""


def note(kind, text):
    """A Validate entry that is a note, not a failing cell."""
    return {"source": "", "error": f'{NOTE_STYLE}<span class="course-validate-note course-validate-{kind}">'
                                   f'{html.escape(text)}</span>', "raw_error": text}


def is_blank_answer(cell):
    """A written answer nbgrader scores zero because it is still the text the release gave (its checksum matches)."""
    return (cell.cell_type == "markdown" and utils.is_grade(cell) and utils.is_solution(cell)
            and cell.metadata.nbgrader.get("checksum") == utils.compute_checksum(cell))


def heading_before(nb, index):
    """The first line of the text cell above cell `index`: the question a written answer answers."""
    for cell in reversed(nb.cells[:index]):
        if cell.cell_type == "markdown" and cell.source.strip():
            return re.sub(r"\s*\([^)]*\)$", "", cell.source.strip().splitlines()[0].lstrip("#* ").rstrip("* "))
    return "the question"


def part_of(nb, source):
    """The title of the part ("Part 2 · A softmax that does not overflow") whose test cell has `source`. A text cell
    may open two parts whose test cells follow it: they take its headings in order."""
    parts = []
    for cell in nb.cells:
        headings = [line.lstrip("# ").split(" (")[0] for line in cell.source.splitlines() if line.startswith("## Part")]
        parts = headings if cell.cell_type == "markdown" and headings else parts
        if utils.is_grade(cell) and parts:
            part = parts.pop(0) if len(parts) > 1 else parts[0]
            if cell.source.strip() == source:
                return part
    return "A test cell"


def message_first(nb, entry):
    """A failing test cell's entry showing, in order: its part, what the check said (called, expected, got, the likely
    mistake), then the test code folded away. nbgrader puts ~20 lines of traceback before the message."""
    raw = strip_ansi(entry.get("raw_error", ""))
    frames = [m for m in re.finditer(r"^(\w+)\s+Traceback \(most recent call last\)", raw, re.M)]
    start = raw.rfind(f"\n{frames[-1].group(1)}: ") + 1 if frames else 0
    message = raw[start:].strip() or raw.strip()
    folded = entry["source"] + (f"\n\n{raw.strip()}" if message != raw.strip() else "")
    return {**entry, "error": f'{NOTE_STYLE}<span class="course-validate-note course-validate-part">'
                              f'<b>{html.escape(part_of(nb, entry["source"]))}: fails</b>\n'
                              f'<span class="course-validate-message">{html.escape(message)}</span>'
                              f'<details><summary>The test code</summary>{html.escape(folded)}</details></span>'}


def validate_notebook(self, path):
    """nbgrader's Validate, with the course's words for a lesson and for written answers still to write."""
    root = Path(self.root_dir).resolve()
    target = (root / path).resolve()
    nb = nbformat.read(target, as_version=4) if target.is_relative_to(root) and target.is_file() else None
    if nb is not None and not any(utils.is_grade(cell) or utils.is_solution(cell) or utils.is_locked(cell)
                                  for cell in nb.cells):
        exercise = Path("work") / target.stem / target.name
        where = (f" Its exercise is {exercise}: validate that one." if (root / exercise).is_file()
                 else " Validate works on an exercise.")
        return {"success": True, "value": {"failed": [note("lesson", f"Nothing to validate: {target.name} is a lesson, "
                                                                     f"with no tests and no grade.{where}")]}}
    answer = self.course_validate_notebook(path)
    if nb is None or not answer.get("success") or not isinstance(answer.get("value"), dict):
        return answer
    blank = {cell.source.strip(): (index, cell) for index, cell in enumerate(nb.cells) if is_blank_answer(cell)}
    failed = answer["value"].get("failed", [])
    tests = [message_first(nb, entry) for entry in failed if entry["source"] not in blank]
    todo = [note("todo", f"Still to write: your answer to \"{heading_before(nb, index)}\" ({points:g} point"
                         f"{'s' if points != 1 else ''}, graded by hand), in place of \"YOUR ANSWER HERE\".")
            for index, cell in blank.values() for points in [float(cell.metadata.nbgrader.get("points", 0))]]
    if tests or todo:
        summary = (f"{len(tests)} test cell{'s' if len(tests) != 1 else ''} still fail{'s' if len(tests) == 1 else ''}"
                   if tests else "Every test passes") + (f"; {len(todo)} written answer{'s' if len(todo) != 1 else ''} "
                                                          f"still to write." if todo else ".")
        answer["value"] = {**answer["value"], "failed": [note("summary", summary)] + tests + todo}
    return answer


if not hasattr(handlers.ValidateAssignmentHandler, "course_validate_notebook"):  # once, if this file is read twice
    handlers.ValidateAssignmentHandler.course_validate_notebook = handlers.ValidateAssignmentHandler.validate_notebook
    handlers.ValidateAssignmentHandler.validate_notebook = validate_notebook
