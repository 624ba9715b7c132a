"""The ideas behind the numbers: each screen's help ends with the entries its words call for,
and the guide's glossary holds the same entries word for word."""

from __future__ import annotations

import re

from minigpt_tui.screens.concepts import CONCEPTS, concepts_in
from minigpt_tui.screens.help_texts import CHECKPOINTS_HELP, GENERATION_HELP, TRAINING_HELP
from tests.conftest import ROOT


def _terms(text: str) -> set[str]:
    return {c.term for c in concepts_in(text)}


def test_a_help_text_gets_the_entries_its_words_use():
    assert {"Induction head", "Validation loss and overfitting", "Nats and perplexity"} <= _terms(TRAINING_HELP)
    assert "Activation patching" in _terms(GENERATION_HELP)
    assert _terms("Nothing here but bytes.") == set()
    assert "Attention head" in _terms("each head's pattern")
    assert "KL divergence" not in _terms("a kilo")  # a word start, not any substring
    assert "KL divergence" in _terms("KL(A||B) in nats")


def test_the_help_screen_shows_the_entries(tmp_path):
    from types import SimpleNamespace

    from minigpt_tui.screens.help import help_markdown

    text = help_markdown(SimpleNamespace(HELP=CHECKPOINTS_HELP), [("q", "quit")])  # type: ignore[arg-type]
    assert "## Ideas behind these numbers" in text
    for concept in concepts_in(CHECKPOINTS_HELP):
        assert f"**{concept.term}**: {concept.text}" in text


def test_the_guide_glossary_holds_every_entry_word_for_word():
    glossary = (ROOT / "docs" / "guide" / "glossary.md").read_text(encoding="utf-8")
    flat = re.sub(r"\s+", " ", glossary)
    for concept in CONCEPTS:
        assert f"- **{concept.term}**: {concept.text}" in flat, concept.term
