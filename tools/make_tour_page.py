"""Write docs/guide/tour.md from the tour's lessons (minigpt_tui/engine/session/tour.py), the
one source the app's panel and ``minigpt-tui tour --check`` read too. A test fails while the
page differs from what this writes."""

from __future__ import annotations

from pathlib import Path

from minigpt_tui.engine.session.tour import guide_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "tour.md"

if __name__ == "__main__":
    PAGE.write_text(guide_markdown(), "utf-8")
    print(f"wrote {PAGE}")
