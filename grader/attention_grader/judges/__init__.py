"""One module per step, stepNN.py, with CELLS = {test cell grade_id: function(inputs) -> list of Check}.

Each function builds the checks of one test cell from `inputs` (this student's hidden random inputs): the visible
examples again (so fooling a visible test earns nothing) and fresh random cases. The reference is the answer key.
"""
