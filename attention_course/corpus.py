"""Public-domain texts shipped with the course (provenance in attention_course/texts/README.md)."""
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "texts"


def tiny_shakespeare():
    """The course's slice of Shakespeare (about 200 KB of Coriolanus and Richard III) as one string."""
    return (FOLDER / "tiny_shakespeare.txt").read_text(encoding="utf-8")
