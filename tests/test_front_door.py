"""The course's front door: a README of one screen, pages in docs/ that its links reach, and a course home that links
every step's lesson and exercise in order."""
import re

from conftest import ROOT, STEPS

PAGES = ["README.md", "HOME.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def test_readme_fits_one_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 65, f"README.md has {len(lines)} lines: keep it to one screen, move the rest to docs/"


def test_readme_gives_the_two_commands_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    for command in ("python3 course.py start", "python3 course.py test"):
        assert command in readme
    assert "maintainers and CI run it, not students" in readme  # the whole suite is not a learner's second command
    for page in ("instructors", "trust", "scale", "maintainers"):
        assert f"(docs/{page}.md)" in readme, f"README.md does not link docs/{page}.md"


def test_every_relative_link_of_the_pages_reaches_a_file():
    for page in PAGES:
        text = (ROOT / page).read_text()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("work/"):  # work/ is made by course.py start
                continue
            assert ((ROOT / page).parent / target).exists(), f"{page} links {target}, which does not exist"


def test_user_facing_pages_hold_no_commit_hashes():
    for page in PAGES:
        hashes = re.findall(r"`[0-9a-f]{7,40}`", (ROOT / page).read_text())
        assert not hashes, f"{page} names commits {hashes}: say what the course does, not its history"


def test_the_course_home_links_every_lesson_and_exercise_in_order():
    home = (ROOT / "HOME.md").read_text()
    rows = [line for line in home.splitlines() if re.match(r"\| \d\d \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == [step[:2] for step in STEPS], rows
    for row, step in zip(rows, STEPS):
        assert f"(notebooks/{step}.ipynb)" in row and f"(work/{step}/{step}.ipynb)" in row, row
