"""Submission banks: for each step, correct variants and known mistakes with the points each should get."""


def edit(text, *pairs):
    """`text` with each (old, new) replaced; `old` must occur, so a variant cannot silently stop being one."""
    for old, new in pairs:
        if old not in text:
            raise ValueError(f"{old!r} not found")
        text = text.replace(old, new)
    return text
