"""What the run is learning, at its latest scheduled evaluation: each sample prompt's greedy
and seeded continuations, and for each head role the head that does it most, with a
sparkline of that score over the evaluations so far. The highlighted role's score is what
the loss plot draws along the loss curve, so the induction bump shows beside the loss."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from minigpt_tui.engine.session.view_names import HEAD_ROLES
from minigpt_tui.widgets.probes_table import LEVELS, SeriesHighlighted

ROLE_NAMES = {"induction": "induction", "previous_token": "previous token", "duplicate_token": "duplicate token",
              "first_token": "first token"}
HISTORY_CELLS = 16


def score_sparkline(scores: list[float], cells: int = HISTORY_CELLS) -> str:
    return "".join(LEVELS[min(int(s * len(LEVELS)), len(LEVELS) - 1)] for s in scores[-cells:])


class WatchPanel(DataTable):
    DEFAULT_CSS = """
    WatchPanel { height: 1fr; scrollbar-size-vertical: 1; }
    """

    class RoleHighlighted(SeriesHighlighted):
        """The role whose top score the plot should draw (None: a sample row)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.samples: Any = None  # the latest SamplesTaken
        self.roles: dict[str, list[tuple[int, float, int, int]]] = {}  # role: (step, score, layer, head)

    def on_mount(self) -> None:
        self.add_column("what", key="what", width=18)
        self.add_column("at the latest evaluation", key="value")
        self.border_title = "Watch"

    def reset(self) -> None:
        self.samples = None
        self.roles.clear()
        self.clear()
        self.border_subtitle = ""

    def add_samples(self, event: Any) -> None:
        self.samples = event
        self._show()

    def add_heads(self, event: Any) -> None:
        for role in HEAD_ROLES:
            top = event.top(role)
            points = self.roles.setdefault(role, [])
            while points and points[-1][0] >= event.step:
                points.pop()
            points.append((event.step, getattr(top, role), top.layer, top.head))
        self._show()

    def _show(self) -> None:
        row = self.cursor_row
        self.clear()
        for role, points in self.roles.items():
            step, score, layer, head = points[-1]
            line = Text(f"block {layer} head {head}  {score:.2f}  ")
            line.append(score_sparkline([p[1] for p in points]), style="bold")
            self.add_row(Text(ROLE_NAMES[role]), line, key=f"role:{role}")
        if self.samples is not None:
            for index, sample in enumerate(self.samples.samples):
                self.add_row(Text(sample.prompt, overflow="ellipsis", no_wrap=True),
                             Text("greedy  " + repr(sample.greedy), overflow="ellipsis", no_wrap=True),
                             key=f"greedy:{index}")
                self.add_row(Text(""), Text("sampled " + repr(sample.sampled), overflow="ellipsis", no_wrap=True),
                             key=f"sampled:{index}")
        steps = [p[-1][0] for p in self.roles.values()] or ([self.samples.step] if self.samples else [])
        self.border_subtitle = f"update {max(steps)}" if steps else ""
        if self.row_count:
            self.move_cursor(row=min(max(row, 0), self.row_count - 1), animate=False)
            self.announce()

    @property
    def highlighted_role(self) -> str | None:
        roles = list(self.roles)
        return roles[self.cursor_row] if 0 <= self.cursor_row < len(roles) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.announce()

    def announce(self) -> None:
        """Post the highlighted role's scores (RoleHighlighted), for the plot's right axis."""
        role = self.highlighted_role
        points = tuple((p[0], p[1]) for p in self.roles.get(role, ())) if role else ()
        name = f"{ROLE_NAMES[role]} head" if role else None
        self.post_message(self.RoleHighlighted(name, points))
