"""Feedback that shows students which checks failed and why, never the hidden tests (used by nbgrader_config.py).

nbgrader's feedback shows each graded cell as autograde ran it, hidden tests included, and IPython tracebacks quote the
failing lines of test code. This preprocessor removes the hidden regions and cuts every error in a test cell down to
its message, which the course's checks write for students.
"""
from nbgrader.preprocessors import ClearHiddenTests


class HideHiddenTests(ClearHiddenTests):
    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        nbgrader = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and nbgrader.get("grade") and not nbgrader.get("solution"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources
