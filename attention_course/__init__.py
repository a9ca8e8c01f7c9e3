"""Student-safe helpers for "Attention, step by step": example data, plots and readable checks.

Nothing in this package solves an exercise: reference solutions and hidden tests live only in
the instructors' master notebooks under source/.
"""
from attention_course import checks, data, plots

__all__ = ["checks", "data", "plots"]
