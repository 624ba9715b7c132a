"""The key bar at the bottom of a screen: the keys that work now and what they do.

One widget drawing one line of text. Textual's Footer rebuilds a widget per key whenever
the bindings change (every dialog closing, every screen switch), which cost tens of
milliseconds of each key's response while a run trained. Below ``wide_from`` columns (or
when the wide form does not fit) the bar drops the padding and shows grouped keys (t c g)
under their group's name; when that is still too long, the app-wide keys lose their
descriptions from the right (palette, quit, help, screens), since the screen's own keys
are the ones to read, and ? lists every key. Clicking a key presses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widget import Widget


@dataclass
class KeyEntry:
    keys: list[tuple[str, str]]  # (key, how it is displayed)
    description: str
    enabled: bool
    group: Binding.Group | None = None
    app_wide: bool = False  # bound on the App (screens, help, quit, palette), not the screen

    def width(self, gap: str) -> int:
        """Cells taken by the keys, the description and the gap after them."""
        return sum(cell_len(display) + 1 for _key, display in self.keys) + cell_len(self.description) + len(gap)


@dataclass(frozen=True)
class KeySpan:
    start: int
    end: int
    key: str


class KeyBar(Widget):
    COMPONENT_CLASSES = {"key-bar--key", "key-bar--description", "key-bar--disabled"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-description-foreground;
    }
    KeyBar > .key-bar--key { color: $footer-key-foreground; text-style: bold; }
    KeyBar > .key-bar--description { color: $footer-description-foreground; }
    KeyBar > .key-bar--disabled { text-style: dim; }
    """

    def __init__(self, *, wide_from: int = 120, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wide_from = wide_from
        self.spans: list[KeySpan] = []

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda _screen: self.refresh())

    def entries(self, narrow: bool) -> list[KeyEntry]:
        """What the bar shows, in binding order; one entry per action."""
        out: list[KeyEntry] = []
        seen_actions: set[str] = set()
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if not binding.show or binding.action in seen_actions:
                continue
            seen_actions.add(binding.action)
            key = (binding.key, self.app.get_key_display(binding))
            group = binding.group if narrow else None
            if group is not None and out and out[-1].group == group:
                out[-1].keys.append(key)
                continue
            out.append(KeyEntry([key], group.description if group else binding.description, active.enabled, group,
                                app_wide=active.node is self.app))
        if self.app.ENABLE_COMMAND_PALETTE:
            out.append(KeyEntry([(self.app.COMMAND_PALETTE_BINDING, "^p")], "palette", True, app_wide=True))
        return out

    def fitted(self, width: int) -> tuple[list[KeyEntry], str, set[int]]:
        """The entries, the gap between them, and which entries (by index) go without their
        description, so that the line fits ``width`` cells when it can."""
        if width >= self.wide_from:
            entries = self.entries(narrow=False)
            if 1 + sum(entry.width("  ") for entry in entries) - 2 <= width:
                return entries, "  ", set()
        entries = self.entries(narrow=True)
        bare: set[int] = set()
        length = 1 + sum(entry.width(" ") for entry in entries) - 1
        for index in reversed(range(len(entries))):
            if length <= width:
                break
            if entries[index].app_wide:
                bare.add(index)
                length -= cell_len(entries[index].description) + 1
        return entries, " ", bare

    def render(self) -> Text:
        entries, gap, bare = self.fitted(self.size.width)
        key_style = self.get_component_rich_style("key-bar--key")
        description_style = self.get_component_rich_style("key-bar--description")
        disabled = self.get_component_rich_style("key-bar--disabled")
        text = Text(no_wrap=True, overflow="crop", end="")
        spans: list[KeySpan] = []
        text.append(" ")
        for index, entry in enumerate(entries):
            dim = disabled if not entry.enabled else None
            for number, (key, display) in enumerate(entry.keys):
                if number:
                    text.append(" ")
                start = len(text)
                text.append(display, key_style + dim if dim else key_style)
                spans.append(KeySpan(start, len(text), key))
            if index not in bare:
                text.append(" ")
                text.append(entry.description, description_style + dim if dim else description_style)
            text.append(gap)
        self.spans = spans
        return text

    def on_click(self, event: events.Click) -> None:
        for span in self.spans:
            if span.start <= event.x < span.end:
                event.stop()
                self.app.simulate_key(span.key)
                return
