"""Feedback that shows students which checks failed and why, never the hidden tests, and never runs a submission's
script in anyone's browser (used by nbgrader_config.py).

nbgrader's feedback shows each graded cell as autograde ran it, hidden tests included, and IPython tracebacks quote the
failing lines of test code. This preprocessor removes the hidden regions and cuts every error in a test cell down to
its message, which the course's checks write for students. An answer graded by hand and not graded yet shows "not
graded yet", not nbgrader's 0.0.
"""
import html
import re

import nh3
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors.sanitize import ALLOWED_TAGS, SanitizeHTML
from nbgrader.preprocessors import ClearHiddenTests, GetGrades


class HideHiddenTests(ClearHiddenTests):
    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        nbgrader = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and nbgrader.get("grade") and not nbgrader.get("solution"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources


# Tags and attributes a student's HTML keeps; everything else (script, style, iframe, event handlers, javascript:
# links) is removed by ammonia (nh3), whose parser runs in time linear in the text, unlike bleach's html5lib.
TAGS = set(ALLOWED_TAGS) | {"p", "br", "pre", "h1", "h2", "h3", "h4", "hr", "table", "thead", "tbody", "tr", "th", "td",
                            "sub", "sup", "div", "span", "code"}
ATTRIBUTES = {"a": {"href", "title"}, "abbr": {"title"}, "acronym": {"title"}, "*": {"class"}}
# Any HTML parser's time grows with the depth of nesting at each tag (html5ever's too: 40,000 nested <div>s take 10 s),
# and every page is parsed again whole by nbconvert: a text with more tags than MAX_TAGS is shown as text, and a
# notebook's feedback shows at most MAX_SHOWN characters of its outputs and markdown (the graded notebook keeps them
# all), so that a notebook at the output cap is rendered in seconds.
MAX_TAGS = 5_000
MAX_SHOWN = 250_000
OPENING = re.compile(r"<[A-Za-z!/?]")


def clean_html(text):
    """A student's HTML without anything that runs, or its text escaped where it holds more than MAX_TAGS tags."""
    text = text.decode() if isinstance(text, bytes) else str(text)
    if len(OPENING.findall(text)) > MAX_TAGS:
        return "<pre>" + html.escape(text) + "</pre>"
    return nh3.clean(text, tags=TAGS, attributes=ATTRIBUTES)


class SanitizeStudentHTML(SanitizeHTML):
    """Markdown cells, HTML and markdown outputs cleaned by `clean_html`; a markdown cell is rendered to HTML first, so
    that `[text](javascript:...)` is cleaned like `<a href="javascript:...">`. Script, SVG and unknown output types are
    removed (SanitizeHTML's rules). HTML past MAX_TAGS tags or past the notebook's MAX_SHOWN characters is shown as
    text, cut where the budget ends."""

    def preprocess(self, nb, resources):
        self.left = MAX_SHOWN
        return super().preprocess(nb, resources)

    def shown(self, text):
        """`text` cut to what is left of the notebook's budget, with a note saying how much is not shown."""
        kept = min(len(text), max(self.left, 0))
        self.left -= kept
        if kept == len(text):
            return text
        return text[:kept] + f"\n... {len(text) - kept:,} more characters, not shown here (the graded notebook has them)"

    def as_text(self, text):
        """True where `text` is shown as text: too many tags, or more than the budget has left."""
        return len(text) > getattr(self, "left", MAX_SHOWN) or len(OPENING.findall(text)) > MAX_TAGS

    def sanitize_html_tags(self, html_str):
        return clean_html(html_str)

    def sanitize_code_outputs(self, outputs):
        for output in outputs:
            if output.get("output_type") == "stream":
                output.text = self.shown(output.text)
                continue
            data = output.get("data", {})
            for key in ("text/html", "text/markdown"):
                if key in data and self.as_text(str(data[key])):
                    data["text/plain"] = str(data.pop(key))  # cut once, below
            for key in ("text/plain", "text/latex", "text/html", "text/markdown"):
                if key in data:
                    data[key] = self.shown(str(data[key]))
        return super().sanitize_code_outputs(outputs)

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "markdown":
            return super().preprocess_cell(cell, resources, cell_index)
        if self.as_text(cell.source):
            html_text = "<pre>" + html.escape(self.shown(cell.source)) + "</pre>"
        else:
            html_text = clean_html(markdown2html_mistune(self.shown(cell.source)))
        # The templates render the source as markdown again: one HTML block without blank lines stays as it is.
        cell.source = "<div>" + re.sub(r"\n\s*\n", "\n", html_text) + "</div>"
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
