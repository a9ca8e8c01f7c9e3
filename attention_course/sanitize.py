"""A sanitising step for nbgrader's autograde (used by nbgrader_config.py).

A student who copies a test cell submits two cells with one grade id. nbgrader's DeduplicateIds keeps the last and
empties the metadata of the others to `{}`, which OverwriteCells then reads as a grade cell without a grade id and
fails: the whole submission is not graded (nbgrader issue 1083). Removing the metadata instead keeps the last copy,
which OverwriteCells restores to the instructor's test, and grades the rest.
"""
from nbgrader.preprocessors import DeduplicateIds


class DropDuplicateIds(DeduplicateIds):
    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources
