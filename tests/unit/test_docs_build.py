"""The guide builds as a website (``make docs``): mkdocs in strict mode, every guide page and
the checkpoint format in the navigation, and a broken link, a broken anchor, a page missing
from the navigation or a navigation entry without its page fails the build."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("material")
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _quiet_theme(monkeypatch):
    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")


def build_site(project: Path, site: Path) -> None:
    """Build ``project``'s mkdocs.yml into ``site`` as ``make docs`` does (strict: set in the file)."""
    config = load_config(str(project / "mkdocs.yml"), site_dir=str(site))
    assert config.strict is True
    build(config)


def copy_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    return project


def test_the_guide_builds_with_every_page_in_the_navigation(tmp_path):
    site = tmp_path / "site"
    build_site(ROOT, site)
    navigation = (ROOT / "mkdocs.yml").read_text("utf-8")
    pages = [
        *sorted((ROOT / "docs" / "guide").glob("*.md")),
        ROOT / "docs" / "checkpoint-format.md",
    ]
    for page in pages:
        name = page.relative_to(ROOT / "docs").as_posix()
        assert re.search(rf":\s*{re.escape(name)}\s*$", navigation, re.MULTILINE), name
        built = (
            "guide/index.html"
            if name == "guide/README.md"
            else f"{name.removesuffix('.md')}/index.html"
        )
        assert (site / built).is_file(), built
    assert (site / "index.html").is_file()
    assert not list(
        site.rglob("development*")
    )  # for those who work on the project, not in the guide


@pytest.mark.parametrize(
    "damage", ["broken link", "broken anchor", "page left out", "page gone"]
)
def test_a_broken_link_or_a_missing_page_fails_the_build(tmp_path, damage):
    project = copy_project(tmp_path)
    guide = project / "docs" / "guide"
    if damage == "broken link":
        with (guide / "training.md").open("a", encoding="utf-8") as page:
            page.write("\nSee [the missing page](no-such-page.md).\n")
    elif damage == "broken anchor":
        with (guide / "training.md").open("a", encoding="utf-8") as page:
            page.write("\nSee [a missing section](checkpoints.md#no-such-section).\n")
    elif damage == "page left out":
        (guide / "extra.md").write_text("# A page no one listed\n", encoding="utf-8")
    else:
        (guide / "glossary.md").unlink()
        for page in guide.glob("*.md"):  # only the navigation names it now
            page.write_text(
                page.read_text("utf-8").replace("(glossary.md)", "(training.md)"),
                "utf-8",
            )
    with pytest.raises(Abort, match="strict mode"):
        build_site(project, tmp_path / "site")


def test_the_copy_the_damage_tests_start_from_builds(tmp_path):
    build_site(copy_project(tmp_path), tmp_path / "site")
    assert (tmp_path / "site" / "guide" / "training" / "index.html").is_file()
