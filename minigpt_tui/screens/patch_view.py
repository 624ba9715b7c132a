"""The activation-patching view, over the Generation screen: the logit difference A − B of the
clean and corrupt prompts, then a layer x position grid of ``restored`` for one site kind
(``c`` cycles resid / attn / mlp), or one layer's heads x positions (``h`` or enter on a
layer), with the selected cell's numbers. The sweep runs on the Generation screen's queue
worker (progress below the prompts); escape closes the view and stops a sweep still running.
The attribution grid (gradient estimates of every cell, heads included) comes first and is
shown while the exact sweep runs; ``a`` switches between the two once both are there, and
the summary gives their agreement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, ProgressBar, Static

from minigpt_tui.engine.session import operations
from minigpt_tui.engine.session.patching import GRID_SITES, PatchingView, PatchRequest, cell_name, view_agreement
from minigpt_tui.engine.session.view_names import patch_site_name
from minigpt_tui.messages import (
    PatchAttributionReady,
    PatchHeadsReady,
    PatchProgress,
    PatchReady,
    PatchRefused,
)
from minigpt_tui.screens.patch_prompt import PatchPromptScreen
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.patch_grid import PatchGrid, legend
from minigpt_tui.widgets.pieces import piece_chips, visible_piece

Enqueue = Callable[[operations.Operation], None]
PROGRESS_STEPS = 100  # the worker reports at most this many times per sweep


def open_patching(owner: Screen, enqueue: Enqueue, clean: str, answer: str, against: str, *,
                  corrupt: str | None = None, sites: tuple[str, ...] = GRID_SITES) -> None:
    """The dialog, then the view of the request it makes (queued with ``enqueue``). Called
    while ``owner`` (the Generation screen) handles a message, so the dialog's answer comes
    back to it."""

    def chosen(request: PatchRequest | None) -> None:
        if request is not None:
            owner.app.push_screen(PatchViewScreen(request, enqueue, owner))

    owner.app.push_screen(PatchPromptScreen(clean, answer, against, corrupt=corrupt, sites=sites), chosen)


class PatchViewScreen(Screen):
    DEFAULT_CSS = """
    PatchViewScreen #patch-body { height: 1fr; }
    PatchViewScreen #patch-summary, PatchViewScreen #patch-prompts { height: auto; padding: 0 1; }
    PatchViewScreen #patch-progress { height: 1; padding: 0 1; }
    PatchViewScreen #patch-grid { height: 1fr; border: round $primary; }
    PatchViewScreen #patch-legend, PatchViewScreen #patch-cell { height: auto; padding: 0 1; }
    """

    BINDINGS = [
        Binding("c", "cycle_site", "Site"),
        Binding("h", "heads", "Heads"),
        Binding("a", "attribution", "Exact/attribution"),
        Binding("escape", "close", "Close"),
    ]

    def __init__(self, request: PatchRequest, enqueue: Enqueue, owner: Screen) -> None:
        super().__init__()
        self.request = request
        self.enqueue = enqueue
        self.owner = owner  # the screen below, which asks for the dialog again after a refusal
        self.stop = threading.Event()
        self.result: PatchingView | None = None
        self.attribution: PatchingView | None = None  # the gradient estimates, before the sweep
        self.showing_attribution = False
        self.effects: list[Any] = []
        self.sites = tuple(s for s in GRID_SITES if s in request.sites)
        self.site = self.sites[0] if self.sites else None
        self.heads_layer: int | None = None  # the layer whose heads are shown (None: the layer grid)
        self.head_layers: set[int] = set()  # layers whose heads are computed
        self.working = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="patch-body"):
            yield Static(Text("patching: waiting for the worker…", style="dim"), id="patch-summary")
            yield Static(id="patch-prompts")
            yield ProgressBar(show_eta=False, id="patch-progress")
            yield PatchGrid(id="patch-grid")
            yield Static(legend(), id="patch-legend")
            yield Static(id="patch-cell")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Patching"
        self._start(operations.patch(self.request, self.stop, self._progress(),
                                     lambda view: self.post_message(PatchReady(view)),
                                     lambda reason: self.post_message(PatchRefused(reason)),
                                     attributed=lambda view: self.post_message(PatchAttributionReady(view))))
        self.query_one(PatchGrid).focus()

    # -- the worker -----------------------------------------------------------------------------
    def _progress(self) -> Callable[[int, int], None]:
        """Posts a progress message each time another hundredth of the sweep is done (worker)."""
        shown = [-1]

        def report(done: int, total: int) -> None:
            step = done * PROGRESS_STEPS // total
            if step != shown[0] or done == total:
                shown[0] = step
                self.post_message(PatchProgress(done, total))
        return report

    def _start(self, operation: operations.Operation) -> None:
        self.working = True
        bar = self.query_one(ProgressBar)
        bar.display = True
        bar.update(total=None, progress=0)
        self.enqueue(operation)

    @on(PatchProgress)
    def _progressed(self, message: PatchProgress) -> None:
        self.query_one(ProgressBar).update(total=message.total, progress=message.done)

    @on(PatchRefused)
    def _refused(self, message: PatchRefused) -> None:
        """Back to the dialog with what was typed (the queue notifies the engine's reason)."""
        if self.result is not None:  # the heads of a layer refused: keep the grid
            self._done()
            return
        request = self.request
        self.dismiss()
        self.owner.call_next(open_patching, self.owner, self.enqueue, request.clean, request.answer, request.against,
                             corrupt=request.corrupt, sites=request.sites)

    @on(PatchAttributionReady)
    def _attribution_ready(self, message: PatchAttributionReady) -> None:
        """The estimates at once, shown until the sweep's exact figures come."""
        self.attribution = message.view
        if self.result is not None:
            return
        self.showing_attribution = True
        if self.site is None:
            self.heads_layer = 0
        self._show_summary()
        self._show_grid()

    @on(PatchReady)
    def _ready(self, message: PatchReady) -> None:
        self.result = message.view
        self.showing_attribution = False
        self.effects = list(message.view.effects)
        if "head" in self.request.sites:
            self.head_layers = set(range(message.view.layers))
        self._done()
        if self.site is None:  # only heads were asked: show block 0's heads
            self.heads_layer = 0
        self._show_summary()
        self._show_grid()

    @on(PatchHeadsReady)
    def _heads_ready(self, message: PatchHeadsReady) -> None:
        self.effects += list(message.effects)
        self.head_layers.add(message.layer)
        self._done()
        self.heads_layer = message.layer
        self._show_grid()

    def _done(self) -> None:
        self.working = False
        self.query_one(ProgressBar).display = False

    # -- what is shown --------------------------------------------------------------------------
    @property
    def _view(self) -> PatchingView | None:
        """The view on screen: the attribution grid until the sweep is done, or when chosen."""
        return self.attribution if self.showing_attribution else self.result

    def _show_summary(self) -> None:
        view = self._view
        assert view is not None
        a, b = visible_piece(view.answer_piece), visible_piece(view.against_piece)
        summary = Text()
        summary.append(f"logit difference '{a}' − '{b}' at the last position: ", style="bold")
        summary.append(f"clean {view.clean_difference:+.4f} · corrupt {view.corrupt_difference:+.4f} · "
                       f"gap {view.clean_difference - view.corrupt_difference:+.4f}\n")
        summary.append("restored = (patched − corrupt) / (clean − corrupt): 1 brings the clean answer back, "
                       "0 changes nothing", style="dim")
        summary.append_text(self._method_line())
        self.query_one("#patch-summary", Static).update(summary)
        prompts = Text()
        for name, pieces in (("clean  ", view.clean_pieces), ("corrupt", view.corrupt_pieces)):
            prompts.append(f"{name} ", style="dim")
            prompts.append_text(piece_chips(list(enumerate(pieces)), marked=set(view.differing)))
            prompts.append("\n")
        prompts.rstrip()
        self.query_one("#patch-prompts", Static).update(prompts)

    def _method_line(self) -> Text:
        """Which grid is shown and, once both exist, how the two agree."""
        line = Text("\n")
        if self.showing_attribution:
            line.append("attribution estimate: (clean − corrupt) · gradient at the corrupt run", style="bold")
            line.append(" · the exact sweep is running" if self.result is None else " · a: the exact sweep")
        else:
            line.append("exact patching", style="bold")
            line.append(" · a: the attribution estimate" if self.attribution is not None else "")
        if self.result is not None and self.attribution is not None:
            agreed = view_agreement(self.result, self.attribution)
            rho = "—" if agreed.spearman is None else f"{agreed.spearman:+.3f}"
            line.append(f"\nagreement: Spearman {rho} over {agreed.cells} cells · top {agreed.k} shared "
                        f"{agreed.shared} · exact top {cell_name(agreed.top_exact[0])} · attributed top "
                        f"{cell_name(agreed.top_attributed[0])}", style="dim")
        return line

    def _rows(self) -> tuple[Sequence[tuple[str, int, int | None]], str]:
        """The rows shown and the grid's title."""
        view = self._view
        assert view is not None
        if self.heads_layer is not None:
            layer = self.heads_layer
            return [("head", layer, h) for h in range(view.heads)], f"block {layer}'s heads x positions"
        assert self.site is not None
        top = view.layers + 1 if self.site == "resid" else view.layers
        return [(self.site, layer, None) for layer in range(top)], f"{self.site}: block x position"

    def _show_grid(self) -> None:
        view = self._view
        if view is None:
            return
        rows, title = self._rows()
        grid = self.query_one(PatchGrid)
        grid.show_effects(view.effects if self.showing_attribution else self.effects, rows, view.corrupt_pieces,
                          view.differing)
        grid.border_title = f"attribution · {title}" if self.showing_attribution else title
        grid.border_subtitle = "c: resid / attn / mlp · h or enter: heads · escape: close" \
            if self.heads_layer is None else "h or enter: back to the layers · escape: close"
        self._show_cell()

    @on(DataTable.CellHighlighted)
    def _cell_highlighted(self) -> None:
        self._show_cell()

    def _show_cell(self) -> None:
        view, effect = self._view, self.query_one(PatchGrid).selected
        target = self.query_one("#patch-cell", Static)
        if view is None or effect is None:
            target.update("")
            return
        where = patch_site_name(effect.site, effect.layer, effect.head)
        clean, corrupt = (visible_piece(p[effect.position]) for p in (view.clean_pieces, view.corrupt_pieces))
        text = Text()
        text.append(f"{where} · position {effect.position} '{corrupt}'", style="bold")
        if clean != corrupt:
            text.append(f" (clean '{clean}')")
        restored = "— (clean and corrupt give the same difference)" if effect.restored is None \
            else f"{effect.restored:+.4f}"
        estimated = "estimated " if self.showing_attribution else ""
        text.append(f" · {estimated}patched difference {effect.difference:+.4f} · restored {restored}")
        target.update(text)

    # -- keys -----------------------------------------------------------------------------------
    def action_attribution(self) -> None:
        """Between the exact sweep and the attribution estimate, once both are there."""
        if self.result is None or self.attribution is None:
            return
        self.showing_attribution = not self.showing_attribution
        if not self.showing_attribution and self.heads_layer not in self.head_layers and self.site is not None:
            self.heads_layer = None  # these heads have no exact sweep yet: back to the layers
        self._show_summary()
        self._show_grid()

    def action_cycle_site(self) -> None:
        if self._view is None or not self.sites:
            return
        if self.heads_layer is None:
            self.site = self.sites[(self.sites.index(self.site) + 1) % len(self.sites)]
        self.heads_layer = None
        self._show_grid()

    @on(DataTable.CellSelected)
    def _cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        self.action_heads()

    def action_heads(self) -> None:
        view = self._view
        if view is None or (self.working and not self.showing_attribution):
            return
        if self.heads_layer is not None:
            if self.site is not None:  # back to the layers, on the layer whose heads were shown
                layer, self.heads_layer = self.heads_layer, None
                self._show_grid()
                grid = self.query_one(PatchGrid)
                grid.call_after_refresh(grid.move_cursor, row=layer + self._resid_shift, animate=False)
            return
        grid = self.query_one(PatchGrid)
        layer = min(grid.cursor_coordinate.row - self._resid_shift, view.layers - 1)
        if layer < 0:
            self.notify("embed is the embeddings: no head wrote it", title="heads", severity="warning")
            return
        if layer in self.head_layers or self.showing_attribution:  # attribution has every head
            self.heads_layer = layer
            self._show_grid()
            return
        self._start(operations.patch_heads(self.request, layer, self.stop, self._progress(),
                                           lambda at, effects: self.post_message(PatchHeadsReady(at, effects)),
                                           lambda reason: self.post_message(PatchRefused(reason))))

    @property
    def _resid_shift(self) -> int:
        """Rows before block 0's: resid row 0 is embed, row N + 1 the stream block N leaves."""
        return 1 if self.site == "resid" else 0

    def action_close(self) -> None:
        self.stop.set()  # a sweep still running ends at its next patched run
        self.dismiss()
