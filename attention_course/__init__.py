"""Student-safe helpers for "Attention, step by step": example data, plots and readable checks.

Nothing in this package solves an exercise or judges one: the answer keys live in the instructors' master
notebooks under source/, the hidden checks in the instructor's grader package, which students never
install.
"""
import os

# Triton kernels (step 13) run in Triton's interpreter, on the CPU, like every tensor of the course. Set before
# anything imports triton (torch._dynamo does); TRITON_INTERPRET=0 in the environment compiles them for a GPU.
os.environ.setdefault("TRITON_INTERPRET", "1")

from attention_course import checks, data, plots  # noqa: E402

__all__ = ["checks", "data", "plots"]
