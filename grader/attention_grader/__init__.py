"""The instructor's side of "Attention, step by step": executor, judges, class grader, sanitising, feedback.

Installed only where instructors grade; released notebooks never import it (tests/test_leaks.py).
"""
