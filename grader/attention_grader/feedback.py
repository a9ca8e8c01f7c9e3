"""Feedback that shows students which checks failed and why, never the hidden tests, and never runs a submission's
script in anyone's browser (used by nbgrader_config.py).

nbgrader's feedback shows each graded cell as autograde ran it, hidden tests included, and IPython tracebacks quote the
failing lines of test code. This preprocessor removes the hidden regions and cuts every error in a test cell down to
its message, which the course's checks write for students.
"""
import re

from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors.sanitize import ALLOWED_TAGS, SanitizeHTML
from nbgrader.preprocessors import ClearHiddenTests
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
