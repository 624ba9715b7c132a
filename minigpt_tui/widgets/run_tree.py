"""The runs directory as a tree: each run with how its trainer left it (finished, stopped at
300 of 600…) and its disk use, each run's checkpoints with
the reason they were saved and the best one marked.

The listing is gathered on a worker thread (:meth:`RunStore.scan`) and shown here as plain
records, so walking a large runs directory never holds up the screen; renaming and deleting
a run also run on workers, and a refusal comes back as the engine's one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode
from textual.worker import get_current_worker

from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.session.display import counted, human_bytes
from minigpt_tui.engine.session.run_store import (
    CheckpointListing,
    RunListing,
    RunStore,
    RunStoreError,
)
from minigpt_tui.engine.session.worker_failures import failure_line, passes_on
from minigpt_tui.messages import RunsScanned


@dataclass(frozen=True)
class TreeTarget:
    """What a tree node stands for: a run folder or one checkpoint folder."""

    kind: str  # "run" | "checkpoint"
    path: Path
    run: RunListing


def checkpoint_label(listing: CheckpointListing) -> Text:
    label = Text(f"step {listing.step}")
    if not listing.complete:
        label.append("  incomplete", style="red")
    elif listing.reason:
        label.append(f"  {listing.reason}", style="dim")
    if listing.best:
        label.append("  ★ best", style="bold green")
    return label


def run_label(listing: RunListing) -> Text:
    label = Text(escape_controls(listing.name), style="bold")
    if listing.unreadable is not None:
        label.append(f"  {listing.unreadable}", style="red")
        return label
    if listing.live:
        label.append("  ● live", style="bold green")
    elif listing.status is not None:  # how its trainer left it: a paused or stopped run can resume (r)
        label.append(f"  {listing.status}", style="yellow" if listing.resumable else "dim")
    label.append(f"  {human_bytes(listing.disk_bytes)}", style="dim")
    return label


def checkpoint_choices(listings: tuple[RunListing, ...], leaving_out: Path | None = None) -> list[tuple[str, str]]:
    """Every complete checkpoint of ``listings``, as (label, path) choices, but ``leaving_out``;
    newest first: the runs changed last first, each run's latest step first. The compare and
    the second-model dialogs offer the same list."""
    runs = sorted(listings, key=lambda listing: listing.changed_at, reverse=True)
    return [
        (f"{escape_controls(listing.name)}  step {checkpoint.step}", str(checkpoint.path))
        for listing in runs
        for checkpoint in reversed(listing.checkpoints)
        if checkpoint.complete and checkpoint.path != leaving_out
    ]


class RunTree(Tree[TreeTarget]):
    DEFAULT_CSS = """
    RunTree { height: 1fr; }
    """

    # Rename and delete are bound here, not on the screen: they act on the run under this
    # tree's cursor, so only a key pressed while the tree has the keyboard reaches them.
    BINDINGS = [
        Binding("e", "screen.rename", "Rename", show=False),
        Binding("d", "screen.delete", "Delete", show=False),
        Binding("w", "screen.export_tensorboard", "TensorBoard", show=False),
    ]

    class Renamed(Message):
        """A run folder was renamed to ``target``."""

        def __init__(self, run: RunListing, target: Path) -> None:
            super().__init__()
            self.run = run
            self.target = target

    class Deleted(Message):
        """A run folder was deleted."""

        def __init__(self, run: RunListing) -> None:
            super().__init__()
            self.run = run

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("runs", **kwargs)
        self.show_root = False
        self.guide_depth = 2
        self.listings: tuple[RunListing, ...] = ()

    def _notify(self, message: str, title: str) -> None:
        self.notify(message, title=title, severity="error", markup=False)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-scan")
    def scan(self, runs_dir: Path, select: Path | None = None) -> None:
        """List ``runs_dir`` on a worker and show it; ``select`` gets the cursor."""
        try:
            listings = RunStore(runs_dir).scan()
        except OSError as err:
            self.app.call_from_thread(self._notify, f"cannot read the runs directory {runs_dir}: {err.strerror or err}",
                                      "runs")
            return
        except BaseException as err:  # noqa: BLE001 - a listing that fails in any way says so
            if passes_on(err):
                raise
            self.app.call_from_thread(self._notify, f"cannot list the runs directory {runs_dir}: {failure_line(err)}",
                                      "runs")
            return
        # A newer scan started meanwhile (exclusive cancels this one, but a thread runs on):
        # its listing must win, or a run deleted in between would come back.
        if get_current_worker().is_cancelled:
            return
        self.post_message(RunsScanned(listings, select))

    @on(RunsScanned)
    def _scanned(self, message: RunsScanned) -> None:
        # Not stopped: the screen learns from it too whether what it shows is still there.
        runs = counted(len(message.listings), "run")
        unreadable = sum(1 for listing in message.listings if listing.unreadable is not None)
        marked = f" ({unreadable} unreadable)" if unreadable else ""
        self.border_subtitle = f"{runs}{marked} · {human_bytes(sum(r.disk_bytes for r in message.listings))}"
        self.show_runs(message.listings, message.select)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-files")
    def rename_run(self, store: RunStore, run: RunListing, new_name: str) -> None:
        """Rename ``run`` on a worker; posts :class:`Renamed` when done."""
        try:
            target = store.rename(run.path, new_name)
        except RunStoreError as err:
            self.app.call_from_thread(self._notify, str(err), "rename failed")
            return
        except MiniGPTError as err:
            self.app.call_from_thread(self._notify, str(err), "rename refused")
            return
        except BaseException as err:  # noqa: BLE001 - any failure is one line; the tree shows what is there
            if passes_on(err):
                raise
            self.app.call_from_thread(self._notify, failure_line(err), "rename failed")
            self.app.call_from_thread(self.scan, store.root)
            return
        self.post_message(self.Renamed(run, target))

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-files")
    def delete_run(self, store: RunStore, run: RunListing) -> None:
        """Delete ``run`` on a worker; posts :class:`Deleted` when done."""
        try:
            store.delete(run.path)
        except RunStoreError as err:
            self.app.call_from_thread(self._notify, str(err), "delete failed")
            self.app.call_from_thread(self.scan, store.root)
            return
        except MiniGPTError as err:
            self.app.call_from_thread(self._notify, str(err), "delete refused")
            return
        except BaseException as err:  # noqa: BLE001 - any failure is one line; the tree shows what is left
            if passes_on(err):
                raise
            self.app.call_from_thread(self._notify, failure_line(err), "delete failed")
            self.app.call_from_thread(self.scan, store.root)
            return
        self.post_message(self.Deleted(run))

    def checkpoint_choices(self, leaving_out: Path) -> list[tuple[str, str]]:
        """Every complete checkpoint listed, as (label, path) choices, but ``leaving_out``."""
        return checkpoint_choices(self.listings, leaving_out)

    def show_runs(self, listings: tuple[RunListing, ...], select: Path | None = None) -> None:
        """Rebuild the tree; the node for ``select`` (a run or checkpoint path) gets the cursor."""
        expanded = self._expanded_runs()
        self.listings = listings
        self.clear()
        target_line = None
        for listing in listings:
            found = self._add_run(listing, listing.path in expanded, select)
            if found is not None:
                target_line = found
        if not listings:
            self.root.add_leaf(Text("no runs yet: train one (t) or open a file (o)", style="dim italic"))
        self._place_cursor(listings, target_line)

    def _expanded_runs(self) -> set[Path]:
        return {node.data.path for node in self.root.children
                if node.data is not None and node.data.kind == "run" and node.is_expanded}

    def _add_run(self, listing: RunListing, was_expanded: bool, select: Path | None) -> TreeNode[TreeTarget] | None:
        """A run's node with its checkpoints (newest first); the node for ``select``, if here."""
        run_node = self.root.add(run_label(listing), data=TreeTarget("run", listing.path, listing),
                                 expand=was_expanded or (select is not None and listing.path in select.parents))
        target_line = run_node if select == listing.path else None
        if listing.unreadable is not None:
            run_node.add_leaf(Text("its folder or checkpoints cannot be read", style="dim italic"), data=None)
        elif not listing.checkpoints:
            run_node.add_leaf(Text("no checkpoints", style="dim italic"), data=None)
        for checkpoint in reversed(listing.checkpoints):  # newest first
            leaf = run_node.add_leaf(checkpoint_label(checkpoint),
                                     data=TreeTarget("checkpoint", checkpoint.path, listing))
            if select == checkpoint.path:
                target_line = leaf
        return target_line

    def _place_cursor(self, listings: tuple[RunListing, ...], target_line: TreeNode[TreeTarget] | None) -> None:
        if target_line is not None:
            self.call_after_refresh(self.move_cursor, target_line)
        elif listings:  # the newest run with a checkpoint (else the newest run), not the first by name
            newest = max(range(len(listings)),
                         key=lambda i: (bool(listings[i].checkpoints), listings[i].changed_at))
            self.call_after_refresh(self.move_cursor, self.root.children[newest])

    def run_for(self, path: Path) -> RunListing | None:
        """The run that holds ``path`` (the run folder itself or anything inside it)."""
        for listing in self.listings:
            if path == listing.path or listing.path in path.parents:
                return listing
        return None

    @property
    def highlighted_target(self) -> TreeTarget | None:
        node = self.cursor_node
        return node.data if node is not None else None
