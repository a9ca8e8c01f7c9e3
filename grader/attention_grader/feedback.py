"""Feedback that shows students which checks failed and why, never the hidden tests, and never runs a submission's
script in anyone's browser (used by nbgrader_config.py).

nbgrader's feedback shows each graded cell as autograde ran it, hidden tests included, and IPython tracebacks quote the
failing lines of test code. This preprocessor removes the hidden regions and cuts every error in a test cell down to
its message, which the course's checks write for students. An answer graded by hand and not graded yet shows "not
graded yet", not nbgrader's 0.0.
"""
import re

from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors.sanitize import ALLOWED_TAGS, SanitizeHTML
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from traitlets import List, Unicode


class HideHiddenTests(ClearHiddenTests):
    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        nbgrader = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and nbgrader.get("grade") and not nbgrader.get("solution"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources


class SanitizeStudentHTML(SanitizeHTML):
    """nbconvert's bleach-based sanitiser, also for markdown syntax: a markdown cell is rendered to HTML first, so that
    `[text](javascript:...)` is cleaned like `<a href="javascript:...">`. Outputs: script, SVG and unknown types are
    removed, HTML is cleaned (SanitizeHTML's own rules)."""

    tags = List(Unicode(), default_value=sorted(ALLOWED_TAGS | {"p", "br", "pre", "h1", "h2", "h3", "h4", "hr", "table",
                                                                 "thead", "tbody", "tr", "th", "td", "sub", "sup"}))

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "markdown":
            return super().preprocess_cell(cell, resources, cell_index)
        html = self.sanitize_html_tags(markdown2html_mistune(cell.source))
        # The templates render the source as markdown again: one HTML block without blank lines stays as it is.
        cell.source = "<div>" + re.sub(r"\n\s*\n", "\n", html) + "</div>"
        return cell, resources


class PendingScore(str):
    """A score that is not given yet, as words; round() keeps it as it is."""

    def __round__(self, ndigits=None):
        return self


def score_or_pending(value, default=0.0):
    """The feedback template's `float` filter: Jinja's, except that a PendingScore shows as its words (not 0.0)."""
    if isinstance(value, PendingScore):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


class GetGradesOrPending(GetGrades):
    """nbgrader's GetGrades, except that an answer graded by hand and not graded yet reads "not graded yet" instead of
    0.0, and the notebook's heading says how many points are still to be graded."""

    def _get_score(self, cell, resources):
        super()._get_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata.nbgrader["grade_id"], self.notebook_id, self.assignment_id,
                                          self.student_id)
        if grade.manual_score is None and grade.auto_score is None:
            cell.metadata.nbgrader["score"] = PendingScore("not graded yet")

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        pending = sum(float(cell.metadata.nbgrader.get("points") or 0) for cell in nb.cells
                      if isinstance(cell.metadata.get("nbgrader", {}).get("score"), PendingScore))
        if pending:  # the heading then reads "(Score: 3.0 / 4.0, 1 point still to be graded by hand)"
            points = "1 point" if pending == 1 else f"{pending:g} points"
            grades = resources["nbgrader"]
            grades["max_score"] = PendingScore(f"{float(grades['max_score']):.1f}, {points} still to be graded by hand")
        return nb, resources
