"""Feedback that shows students which checks failed and why, never the hidden tests, and never runs a submission's
script in anyone's browser (used by nbgrader_config.py).

nbgrader's feedback shows each graded cell as autograde ran it, hidden tests included, and IPython tracebacks quote the
failing lines of test code. This preprocessor removes the hidden regions and cuts every error in a test cell down to
its message, which the course's checks write for students. An answer graded by hand and not graded yet shows "not
graded yet", not nbgrader's 0.0; an unreadable notebook says why next to its score; long messages wrap.
"""
import html
import os
import re

import nbgrader
import nh3
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.exporters import HTMLExporter
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbconvert.preprocessors.sanitize import ALLOWED_TAGS, SanitizeHTML
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from traitlets import Bool


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


# A long message or hint wraps instead of running off the right edge, on a phone (390 px) as on a laptop.
WRAP_CSS = """
pre, code, div.output_area pre, div.output_subarea { white-space: pre-wrap; overflow-wrap: anywhere; }
div.output_subarea { max-width: 100%; min-width: 0; }
@media (max-width: 600px) { div.prompt { display: none; } .container { padding-left: 4px; padding-right: 4px; } }
"""


class CourseCSS(CSSHTMLHeaderPreprocessor):
    """nbconvert's page styles, then the course's WRAP_CSS."""
    enabled = Bool(True)  # nbconvert enables only its own class (HTMLExporter's default config)

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        resources["inlining"]["css"] = list(resources["inlining"]["css"]) + [WRAP_CSS]
        return nb, resources


def unreadable_reason(nb):
    """Why the class grader could not read this notebook (every cell then fails with it), or None."""
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "error" and output.get("ename") == "SubmissionError":
                return output.get("evalue")
    return None


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback page through templates/course_feedback, whose contents list names the parts. A class of its
    own, so that formgrader's HTMLExporter keeps its template (nbgrader_config.py configures this one)."""


NBGRADER_TEMPLATES = os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")
TEMPLATE_DIRS = [NBGRADER_TEMPLATES, os.path.join(os.path.dirname(__file__), "templates")]
# where the template finds nbgrader's ("feedback/index.html.j2") and the page's bootstrap.min.css
TEMPLATE_PATHS = [NBGRADER_TEMPLATES, os.path.join(NBGRADER_TEMPLATES, "..", "static", "node_modules", "bootstrap",
                                                   "dist", "css")]


# "## Part 3 · Title (2 points)", or the same heading as SanitizeStudentHTML rendered it: "<h2>Part 3 · Title (2 ..."
PART = re.compile(r"^## (Part [^(\n]*)|<h2[^>]*>(?:<[^>]*>)*(Part [^(<]*)", re.M)


def name_the_parts(nb):
    """Each graded cell's part ("Part 3 · Causal attention"), from the "## Part" headings above it, for the contents.
    A text cell may open two parts whose test cells follow it: they take its headings in order."""
    parts = []
    for cell in nb.cells:
        headings = [html.unescape(a or b).strip() for a, b in PART.findall(cell.source)]
        parts = headings if cell.cell_type == "markdown" and headings else parts
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("grade") and parts:
            part = parts.pop(0) if len(parts) > 1 else parts[0]
            grading["course_part"] = part + (": written answer" if grading.get("solution") else "")


class GetGradesOrPending(GetGrades):
    """nbgrader's GetGrades, except that an answer graded by hand and not graded yet reads "not graded yet" instead of
    0.0 and one left blank "0.0, left blank"; the notebook's heading says so, or why an unreadable notebook was not
    graded; each graded cell gets its part's title for the contents list."""

    def _get_score(self, cell, resources):
        super()._get_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata.nbgrader["grade_id"], self.notebook_id, self.assignment_id,
                                          self.student_id)
        if grade.manual_score is None and grade.auto_score is None:
            cell.metadata.nbgrader["score"] = PendingScore("not graded yet")
        elif grade.manual_score is None and cell.cell_type == "markdown" and not grade.auto_score:
            cell.metadata.nbgrader["score"] = PendingScore("0.0, left blank")  # nbgrader's zero for an unchanged answer

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)

        def points_of(score):
            total = sum(float(cell.metadata.nbgrader.get("points") or 0) for cell in nb.cells
                        if cell.metadata.get("nbgrader", {}).get("score") == score)
            return "1 point" if total == 1 else f"{total:g} points" if total else ""

        pending, blank = points_of("not graded yet"), points_of("0.0, left blank")
        notes = ([f"{pending} still to be graded by hand"] if pending else []) + (
            [f"{blank} of a written answer left blank"] if blank else [])
        grades, reason = resources["nbgrader"], unreadable_reason(nb)
        if reason:  # next to "Score: 0.0 / 15.0", not under the setup cell
            grades["max_score"] = PendingScore(f"{float(grades['max_score']):.1f}: not graded, {reason}")
        elif notes:  # the heading then reads "(Score: 3.0 / 4.0, 1 point still to be graded by hand)"
            grades["max_score"] = PendingScore(f"{float(grades['max_score']):.1f}, " + "; ".join(notes))
        name_the_parts(nb)
        return nb, resources
