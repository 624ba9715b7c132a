"""Two lines about the selected decision: the chosen piece (and the rule's own pick when
another was forced), its rank and probabilities; then the entropy, how many ids the rule
retained of those eligible, and the sampling draw."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from minigpt_tui.engine.session.generation import DecisionView
from minigpt_tui.widgets.candidate_table import probability
from minigpt_tui.widgets.pieces import piece_text

NO_MODEL_HINT = "Press n to load the model named above and take a decision; tab moves to the form."
NO_DECISION_HINT = "Press n to take the first decision, r to run to the end."


def decision_lines(decision: DecisionView | None, *, loaded: bool) -> Text | Group:
    """The two lines for ``decision``; a hint when there is none (``loaded``: a model is)."""
    if decision is None:
        return Text(NO_DECISION_HINT if loaded else NO_MODEL_HINT, style="dim")
    chosen = decision.chosen
    first = Text(no_wrap=True, overflow="ellipsis")
    first.append(f"#{decision.step} ", style="bold")
    first.append("forced" if decision.forced else "chose", style="bold reverse" if decision.forced else "bold")
    first.append(" ")
    first.append_text(piece_text(chosen.piece, style="bold"))
    first.append(f" id {chosen.id}")
    if decision.forced:
        rule = decision.rule_choice
        first.append(" (rule: ")
        first.append_text(piece_text(rule.piece, style="italic"))
        first.append(f" id {rule.id})")
    first.append(f" · rank {chosen.rank} · raw {probability(chosen.raw_probability).plain} · sel "
                 f"{probability(chosen.selection_probability).plain}")
    second = Text(no_wrap=True, overflow="ellipsis", style="dim")
    if decision.window_start:  # first, so that a narrow screen still shows it
        end = decision.window_start + decision.prefix_length - 1
        second.append(f"saw positions {decision.window_start}-{end} (sliding window) · ")
    second.append(f"entropy {decision.entropy:.3f} nats · retained {decision.retained} of "
                  f"{decision.eligible_count} eligible")
    if decision.draw is not None:
        second.append(f" · draw {decision.draw:.4f}")
    return Group(first, second)


class DecisionInfo(Static):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(Text(NO_MODEL_HINT, style="dim"), **kwargs)

    def show_decision(self, decision: DecisionView | None, *, loaded: bool) -> None:
        self.update(decision_lines(decision, loaded=loaded))
