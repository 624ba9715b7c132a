"""Renaming, deleting and exporting (as TensorBoard event files) the run under the runs
tree's cursor, for the Checkpoints screen: only with the tree focused, never renaming or
deleting a run that is training now, delete after a confirmation. Workers do the file
work; the screen re-reads the runs directory afterwards and follows (or clears) what it
had open inside the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work

from minigpt_tui.engine.session.display import counted, human_bytes
from minigpt_tui.engine.session.run_store import RunListing, RunStore
from minigpt_tui.engine.session.tensorboard import export_tensorboard
from minigpt_tui.engine.session.worker_failures import WorkFailed, attempt
from minigpt_tui.screens.confirm_delete import ConfirmDeleteScreen
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.screens.runs_beside import RunsBesideScreen
from minigpt_tui.widgets.run_tree import RunTree


class RunActionsScreen(RunsBesideScreen):
    """A RunsBesideScreen whose tree's runs can be renamed (``e``) and deleted (``d``). The
    screen provides ``store``, ``opened``, ``open_path``, ``rescan`` and ``_clear_panels``."""

    store: RunStore
    opened: Any  # what the screen has open: ``.inspection.path``, or None

    def open_path(self, path: Path, *, loud: bool = True) -> None:
        raise NotImplementedError

    def rescan(self, select: Path | None = None) -> None:
        raise NotImplementedError

    def _clear_panels(self) -> None:
        raise NotImplementedError

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("rename", "delete", "export_tensorboard"):
            # They act on the run under the tree's cursor: only with the tree focused, so a
            # letter meant for a text field or another panel never renames or deletes a run.
            return isinstance(self.focused, RunTree)
        return super().check_action(action, parameters)

    def _run_under_cursor(self, action: str) -> RunListing | None:
        target = self.query_one(RunTree).highlighted_target
        if target is None:
            self.notify(f"move the cursor to a run in the tree to {action} it", title=action, severity="warning")
            return None
        return target.run

    def _refuse_active(self, run: RunListing, action: str) -> bool:
        training = getattr(self.app, "training_screen", None)
        active = getattr(training, "run", None) if training is not None else None
        if active is not None and getattr(active, "active", False) and active.run_dir is not None \
                and Path(active.run_dir) == run.path:
            self.notify(f"{run.name} is training now: stop it first", title=action, severity="warning")
            return True
        return False

    def action_rename(self) -> None:
        run = self._run_under_cursor("rename")
        if run is None or self._refuse_active(run, "rename"):
            return

        def chosen(text: str | None) -> None:
            if text and text != run.name:
                self.query_one(RunTree).rename_run(self.store, run, text)

        self.app.push_screen(PathPromptScreen("Rename run", f"New name for {run.name} (letters, digits, . _ -):",
                                              value=run.name), chosen)

    @on(RunTree.Renamed)
    def _renamed(self, message: RunTree.Renamed) -> None:
        run, target = message.run, message.target
        self.notify(f"{run.name} → {target.name}", title="renamed")
        opened = self._opened_inside(run)
        if opened is not None:
            self.open_path(target / opened.relative_to(run.path), loud=False)
        self.rescan(select=target)

    def action_delete(self) -> None:
        run = self._run_under_cursor("delete")
        if run is None or self._refuse_active(run, "delete"):
            return
        details = [f"folder {run.path}", f"{counted(run.complete_checkpoints, 'checkpoint')}, {human_bytes(run.disk_bytes)} on disk"]

        def decided(delete: bool | None) -> None:
            if delete:
                self.query_one(RunTree).delete_run(self.store, run)

        self.app.push_screen(ConfirmDeleteScreen(f"run {run.name}", details), decided)

    @on(RunTree.Deleted)
    def _deleted(self, message: RunTree.Deleted) -> None:
        run = message.run
        self.notify(f"{run.name} ({human_bytes(run.disk_bytes)} freed)", title="deleted")
        if self._opened_inside(run) is not None:
            self._clear_panels()
        self.rescan()

    def action_export_tensorboard(self) -> None:
        run = self._run_under_cursor("export")
        if run is not None:
            self._export_tensorboard(run.path)

    @work(thread=True, exit_on_error=False, group="tensorboard")
    def _export_tensorboard(self, run_dir: Path) -> None:
        """The run's metrics as TensorBoard event files, written off the UI thread."""
        exported = attempt(lambda: export_tensorboard(run_dir))
        if isinstance(exported, WorkFailed):
            self.app.call_from_thread(self.notify, exported.line, title="TensorBoard", severity="error", markup=False)
            return
        self.app.call_from_thread(
            self.notify, f"{exported.scalars:,} scalars written to {exported.folder}; view them with "
            f"tensorboard --logdir {exported.folder}"
            + (f" (skipped {counted(exported.skipped_lines, 'damaged line')} of metrics.jsonl)"
               if exported.skipped_lines else ""), title="TensorBoard", markup=False)

    def _opened_inside(self, run: RunListing) -> Path | None:
        """The path open now if it is ``run``'s folder or inside it."""
        opened = Path(self.opened.inspection.path) if self.opened is not None else None
        return opened if opened is not None and (opened == run.path or run.path in opened.parents) else None
