"""How often a failing cell's message names the actual mistake, on code written outside the course's bank.

tests/heldout/<step>.py holds VARIANTS in the bank's format, written independently of the judges' mistake tables: each
mistake lists the cells it fails with words that name its actual mistake (`fails`), and may list words of mistakes it
did not make (`not_named`: a message saying them blames the wrong thing). The bank is what the judges were written
against; this set is the measure (issue 46's aim: 90 % named, none blaming a mistake not made).

    .venv/bin/python tests/measure_messages.py [STEP ...]
"""
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

HELD_OUT = Path(__file__).resolve().parent / "heldout"


def measure(step):
    variants = importlib.import_module(f"heldout.{step}").VARIANTS
    graded = harness.grade_variants(step, variants=variants)
    rows = []
    for name, spec in variants.items():
        _, _, errors = graded[name]
        for cell, words in spec.get("fails", {}).items():
            message = errors.get(cell, "")
            named = words.lower() in message.lower() and "likely mistake" in message
            hints = " ".join(part.split("\n")[0] for part in message.split("likely mistake:")[1:]).lower()
            blamed = [w for w in spec.get("not_named", ()) if w.lower() in hints]  # what the hints say, not the label
            rows.append((name, cell, named, blamed, message))
    return rows


def main(steps):
    total = named_total = blamed_total = 0
    for step in steps:
        rows = measure(step)
        named = sum(r[2] for r in rows)
        blamed = sum(bool(r[3]) for r in rows)
        total, named_total, blamed_total = total + len(rows), named_total + named, blamed_total + blamed
        print(f"{step:24} {named:3} of {len(rows):3} failing cells name the actual mistake; {blamed} blame another")
        for name, cell, ok, wrong, message in rows:
            if not ok or wrong:
                print(f"    {name} / {cell}: {'blames ' + repr(wrong) if wrong else 'not named'}: "
                      f"{message.strip()[:400]!r}")
    print(f"{'all':24} {named_total:3} of {total:3} ({named_total / max(total, 1):.0%}) named; {blamed_total} blame "
          "another mistake")


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(p.stem for p in HELD_OUT.glob("[0-9][0-9]_*.py")))
