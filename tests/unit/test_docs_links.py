"""The README and the guide: every relative link reaches a file of the project, and the
README stays short enough to read in a few minutes (the guide holds the rest)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_in_the_readme_and_the_guide_reaches_a_file():
    broken = []
    for document in _documents():
        for target in LINK.findall(document.read_text("utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or a place in the same page
            path = (document.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{document.relative_to(ROOT)} → {target}")
    assert broken == []


def test_the_readme_is_short_and_links_every_guide_page():
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) < 150
    for page in sorted((ROOT / "docs" / "guide").glob("*.md")):
        if page.name != "README.md":
            assert f"docs/guide/{page.name}" in readme, page.name
