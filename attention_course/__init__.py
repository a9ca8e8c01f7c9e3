"""Student-safe helpers for "Attention, step by step": example data, plots and readable checks.

Nothing in this package solves an exercise or judges one: the answer keys live in the instructors' master
notebooks under source/, the hidden checks in the instructor's grader package, which students never
install.
"""
from attention_course import checks, data, plots

__all__ = ["checks", "data", "plots"]
