"""The likely mistakes the visible tests name when they fail, one module per step (stepNN.py, a dict LIKELY).

A test cell passes a key (`hint="03.weights"`) instead of the words, so that nothing a student reads before running
their code states an answer. A key names what is checked, never the mistake.
"""
import importlib


def words(key):
    """The hint stored under `key` ("NN.name": step NN's LIKELY[name])."""
    step, name = key.split(".", 1)
    try:
        return importlib.import_module(f"attention_course.mistakes.step{step}").LIKELY[name]
    except (ImportError, KeyError):
        return ""
