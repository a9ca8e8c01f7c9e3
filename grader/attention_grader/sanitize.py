"""Sanitising steps for nbgrader's autograde (used by nbgrader_config.py): two ways one student's edits to the
structure of a notebook stopped nbgrader from grading it at all.

- A copied test cell gives two cells one grade id. nbgrader's DeduplicateIds keeps the last and empties the metadata
  of the others to `{}`, which OverwriteCells then reads as a grade cell without a grade id (nbgrader issue 1083).
  `DropDuplicateIds` removes that metadata instead: the last copy is restored to the instructor's test, once.
- A deleted test cell is put back after the cell before it in the source notebook, which nbgrader assumes to be a
  grade or solution cell; after a read-only cell it fails with a KeyError. `RestoreCells` puts it after the nearest
  earlier instructor cell still present, or first.
"""
from nbgrader.preprocessors import DeduplicateIds, OverwriteCells


class DropDuplicateIds(DeduplicateIds):
    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class RestoreCells(OverwriteCells):
    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        source_cells = source_nb.source_cells
        max_scores = {cell.name: cell.max_score for cell in source_nb.grade_cells}
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for position, source_cell in enumerate(source_cells):
            present = {cell["metadata"]["nbgrader"]["grade_id"]: index for index, cell in enumerate(nb.cells)
                       if "grade_id" in cell["metadata"].get("nbgrader", {})}
            if source_cell.name not in max_scores or source_cell.name in present:
                continue
            self.log.warning("Missing grade cell %s encountered, adding to notebook", source_cell.name)
            missing = self.missing_cell_transform(source_cell, max_scores[source_cell.name],
                                                  is_solution=source_cell.name in solution_ids)
            earlier = [present[cell.name] for cell in source_cells[:position] if cell.name in present]
            nb.cells.insert(earlier[-1] + 1 if earlier else 0, missing)
        return nb, resources
