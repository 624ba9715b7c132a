"""The Checkpoints screen: runs and their checkpoints, and any safetensors file or checkpoint
folder opened by path, shown from their headers alone.

Everything that touches the disk runs on thread workers: the screen inspects headers; its
panels list the runs directory and rename and delete runs (RunTree), read a tensor's
statistics (TensorDetail), the tokenizer (TokenizerPanel), hash files against the manifest
(IntegrityView) and compare two checkpoints (ComparisonView). Results come back as
messages; a worker's failure comes back as the engine's one-line reason and changes
nothing on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Header, Input, Tree

from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.session.checkpoint_views import inspect_for_view
from minigpt_tui.engine.session.file_uses import file_uses
from minigpt_tui.engine.session.resume_preview import ResumePreview
from minigpt_tui.engine.session.run_store import RunStore, VanishedCheckpoint, vanished_checkpoint
from minigpt_tui.engine.session.saved_tokenizer import model_file_of
from minigpt_tui.engine.session.worker_failures import WorkFailed
from minigpt_tui.messages import Inspected, InspectionFailed, OpenInGeneration, ResumeOnTraining, RunsScanned
from minigpt_tui.screens.help_texts import CHECKPOINTS_HELP
from minigpt_tui.screens.path_prompt import PathPromptScreen
from minigpt_tui.screens.resume_preflight import ResumePreflightScreen
from minigpt_tui.screens.run_actions import RunActionsScreen
from minigpt_tui.widgets.checkpoint_panels import CheckpointPanels
from minigpt_tui.widgets.checkpoint_summary import kind_label
from minigpt_tui.widgets.comparison_view import ComparisonView
from minigpt_tui.widgets.integrity_view import IntegrityView
from minigpt_tui.widgets.key_bar import KeyBar
from minigpt_tui.widgets.run_tree import RunTree, TreeTarget
from minigpt_tui.widgets.tensor_table import TensorTable
from minigpt_tui.widgets.text_fields import is_text_field

if TYPE_CHECKING:
    from minigpt_tui.app import MiniGPTApp

TABS = ("tensors", "detail", "aliases", "state", "metadata", "integrity", "tokenizer", "compare")
# Below this width the tensor table does not fit beside the runs panel with all its columns:
# the runs panel steps aside while the keyboard works in the panels (b brings it back).
RUNS_BESIDE_FROM = 150
ROOMY_RUNS_FROM = 120  # from here the runs panel is wide enough for every checkpoint label
SUMMARY_DETAIL_FROM = 110  # file summaries add header and data sizes from this width


def vanished_note(vanished: VanishedCheckpoint) -> str:
    return (f"step {vanished.step}, open here before, has been deleted since "
            "(a run keeps only its newest checkpoints and its best)")


@dataclass(frozen=True)
class Opened:
    """What the panels show: the inspection and the serial of the request that made it."""

    serial: int
    inspection: Any


class CheckpointsScreen(RunActionsScreen):
    HELP = CHECKPOINTS_HELP
    HELP_TITLE = "Checkpoints"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (ROOMY_RUNS_FROM, "-medium"), (RUNS_BESIDE_FROM, "-wide")]

    DEFAULT_CSS = """
    CheckpointsScreen #ckpt-body { height: 1fr; }
    CheckpointsScreen #runs {
        width: 32; height: 1fr;
        border: round $primary 50%; border-title-color: $text;
    }
    CheckpointsScreen #runs:focus { border: round $primary; }
    CheckpointsScreen.-medium #runs, CheckpointsScreen.-wide #runs { width: 38; }
    CheckpointsScreen.-runs-aside #runs { display: none; }
    CheckpointsScreen.-wide.-runs-aside #runs { display: block; }
    CheckpointsScreen #ckpt-main { width: 1fr; height: 1fr; }
    CheckpointsScreen #ckpt-summary-box { height: auto; max-height: 25%; background: $boost; }
    CheckpointsScreen #ckpt-summary { height: auto; padding: 0 1; }
    CheckpointsScreen #tensor-filter { display: none; margin: 0 1; }
    CheckpointsScreen.-filtering #tensor-filter { display: block; }
    CheckpointsScreen TabbedContent { height: 1fr; }
    CheckpointsScreen TabPane { padding: 0; height: 1fr; }
    CheckpointsScreen #aliases-view, CheckpointsScreen #metadata-view,
    CheckpointsScreen #integrity-view, CheckpointsScreen #compare-view { height: 1fr; padding: 0 1; }
    CheckpointsScreen VerticalScroll > Static { height: auto; }
    """

    BINDINGS = [
        Binding("o", "open_path", "Open"),
        Binding("slash", "filter", "Filter"),
        Binding("p", "generate", "Generate"),
        Binding("r", "resume", "Resume"),
        Binding("m", "compare", "Compare"),
        Binding("b", "runs_aside", "Hide runs"),
        Binding("b", "runs_beside", "Show runs"),
        Binding("tab", "focus_next", "Focus next", show=False),
        Binding("shift+tab", "focus_previous", "Focus previous", show=False),
        Binding("v", "verify", "Verify", show=False),
        Binding("escape", "leave_field", "Leave field"),
        Binding("f5", "rescan", "Refresh", show=False),
        *(Binding(str(number), f"show_tab('{tab}')", tab.title(), show=False)
          for number, tab in enumerate(TABS, start=1)),
    ]
    PALETTE_COMMANDS = (
        ("Open a path", "Open a safetensors file, checkpoint folder or run folder (o)", "open_path"),
        ("Generate with this model", "Load this checkpoint on the Generation screen (p)", "generate"),
        ("Resume training from this checkpoint", "After a preflight list of what is restored (r)", "resume"),
        ("Compare with another checkpoint", "Changed tensors and differing state records (m)", "compare"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.opened: Opened | None = None
        self._serial = 0
        self._vanished: VanishedCheckpoint | None = None  # what was open and has been deleted since

    @property
    def mini_app(self) -> "MiniGPTApp":
        return self.app  # type: ignore[return-value]

    @property
    def runs_dir(self) -> Path:
        return self.mini_app.settings.runs_dir

    @property
    def store(self) -> RunStore:
        return RunStore(self.runs_dir)

    # -- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="ckpt-body"):
            tree = RunTree(id="runs")
            tree.border_title = "Runs"
            yield tree
            yield CheckpointPanels(id="ckpt-main")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Checkpoints"
        for field in self.query(Input):
            field.cursor_blink = False
        self.query_one(RunTree).focus()
        self.rescan()

    def on_screen_resume(self) -> None:
        self.sub_title = "Checkpoints"
        if is_text_field(self.focused):
            # Arriving from another screen (or a dialog): the screen's keys act, not type
            # into the field left with the keyboard (the tokenizer's, the filter).
            self.query_one(CheckpointPanels).focus_active_panel(text_field=False)
        if self.is_mounted:
            self.rescan(select=self._selected_path())

    def _selected_path(self) -> Path | None:
        target = self.query_one(RunTree).highlighted_target
        return target.path if target is not None else None

    # -- the runs directory ------------------------------------------------------------------
    def rescan(self, select: Path | None = None) -> None:
        self.query_one(RunTree).scan(self.runs_dir, select)

    def action_rescan(self) -> None:
        self.rescan(select=self._selected_path())

    @on(RunsScanned)
    def _runs_listed(self, message: RunsScanned) -> None:
        """What is open was deleted since (retention after a resume, or by hand): show the
        run's newest checkpoint instead, saying so, never a checkpoint that is gone."""
        if self.opened is None:
            return
        vanished = vanished_checkpoint(Path(self.opened.inspection.path), message.listings)
        if vanished is None:
            return
        if not vanished.run.complete_checkpoints:
            self._clear_panels()
            self.query_one(CheckpointPanels).show_open_failure(vanished_note(vanished))
            return
        self._vanished = vanished
        self.open_path(vanished.run.path, loud=False)

    @on(Tree.NodeSelected, "#runs")
    def _tree_selected(self, event: Tree.NodeSelected) -> None:
        target = event.node.data
        if isinstance(target, TreeTarget):
            self.open_path(target.path, loud=True)

    @on(Tree.NodeHighlighted, "#runs")
    def _tree_highlighted(self, event: Tree.NodeHighlighted) -> None:
        target = event.node.data
        if isinstance(target, TreeTarget) and (self.opened is None or self.opened.inspection.path != target.path):
            if target.kind == "run" and not any(c.complete for c in target.run.checkpoints):
                return
            self.open_path(target.path, loud=False)

    # -- opening -------------------------------------------------------------------------------
    def open_path(self, path: Path, *, loud: bool = True) -> None:
        """Inspect ``path`` (file, checkpoint folder or run folder) on a worker; ``loud``
        failures are notified, quiet ones (cursor moves in the tree) only shown in the summary."""
        self._serial += 1
        self._inspect(self._serial, Path(path).expanduser(), loud)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-inspect")
    def _inspect(self, serial: int, path: Path, loud: bool) -> None:
        inspection = inspect_for_view(path)
        if isinstance(inspection, WorkFailed):  # an unexpected failure is always shown
            self.post_message(InspectionFailed(serial, path, inspection.line, loud or not inspection.expected))
            return
        self.post_message(Inspected(serial, inspection))

    @on(InspectionFailed)
    def _inspection_failed(self, message: InspectionFailed) -> None:
        if message.serial != self._serial:
            return
        if message.loud:
            self.notify(message.reason, title="cannot open", severity="error")
        if self.opened is None:
            self.query_one(CheckpointPanels).show_open_failure(message.reason)

    @on(Inspected)
    def _inspected(self, message: Inspected) -> None:
        if message.serial != self._serial:
            return
        inspection = message.inspection
        vanished, self._vanished = self._vanished, None
        note = vanished_note(vanished) if vanished is not None and vanished.run.path in Path(
            inspection.path).parents else None
        self.opened = Opened(message.serial, inspection)
        self.query_one(CheckpointPanels).show_inspection(inspection, self.store.display,
                                                         wide=self.size.width >= SUMMARY_DETAIL_FROM, note=note)

    def model_file(self) -> Path | None:
        """The portable model file of what is open, if any."""
        return model_file_of(self.opened.inspection) if self.opened is not None else None

    # -- tensors ---------------------------------------------------------------------------------
    def action_filter(self) -> None:
        if not self.has_class("-wide"):
            self._set_runs_aside(True)
        self.add_class("-filtering")
        self.query_one(CheckpointPanels).show_tab("tensors")
        self.query_one("#tensor-filter", Input).focus()

    def action_leave_field(self) -> None:
        """escape: clear the tensor filter, or leave any other text field for its panel's
        table, where the screen's keys work again."""
        if self.has_class("-filtering"):
            self.action_clear_filter()
        elif is_text_field(self.focused):
            self.query_one(CheckpointPanels).focus_active_panel(text_field=False)

    def action_clear_filter(self) -> None:
        field = self.query_one("#tensor-filter", Input)
        if not self.has_class("-filtering"):
            return
        field.value = ""
        self.remove_class("-filtering")
        self.query_one(TensorTable).focus()
        # The table may have had the keyboard already (no focus change to redraw the key
        # bar): escape's entry goes now that there is no filter and no field to leave.
        self.refresh_bindings()

    def action_show_tab(self, tab: str) -> None:
        """Show a panel. A panel with a text field takes the keyboard, so what is typed next
        goes into the field, never to the screen's keys."""
        panels = self.query_one(CheckpointPanels)
        panels.show_tab(tab)
        if panels.active_panel_has_text_field():
            if not self.has_class("-wide") and isinstance(self.focused, RunTree):
                self._set_runs_aside(True)  # as leaving the tree from the keyboard does
            self._focus_panels()

    # -- integrity ---------------------------------------------------------------------------------
    def action_verify(self) -> None:
        if self.opened is None or self.opened.inspection.kind != "checkpoint-dir":
            self.notify("open a checkpoint folder first: only a checkpoint has a manifest to verify against",
                        title="verify", severity="warning")
            return
        self.query_one(CheckpointPanels).show_tab("integrity")
        self.query_one(IntegrityView).verify(Path(self.opened.inspection.path))

    # -- open by path ---------------------------------------------------------------------------------
    def _typed_target(self, text: str | None, title: str) -> Path | None:
        """What a dialog's text names: a path, or RUN / RUN:latest|best|STEP as on the command line."""
        if not text:
            return None
        try:
            return self.store.target(text)
        except MiniGPTError as err:
            self.notify(str(err), title=title, severity="error", markup=False)
            return None

    def action_open_path(self) -> None:
        def chosen(text: str | None) -> None:
            target = self._typed_target(text, "cannot open")
            if target is not None:
                self.open_path(target, loud=True)

        self.app.push_screen(PathPromptScreen(
            "Open", "A safetensors file (from any tool), a PyTorch .pt/.bin file, a transformers model "
            "folder, a checkpoint folder, a run folder, or RUN:latest / RUN:best / RUN:STEP:",
            placeholder="path/to/model.safetensors"), chosen)

    # -- generate ----------------------------------------------------------------------------------------
    def action_generate(self) -> None:
        model_file = self.model_file()
        if model_file is None:
            if self.opened is None:
                reason = "nothing is open: choose a run or checkpoint on the left, or open a file with o"
            else:
                foreign = file_uses(self.opened.inspection)
                reason = foreign.why_no_generation if foreign is not None else (
                    f"generation needs a minigpt-tui model file or checkpoint; this is a "
                    f"{kind_label(self.opened.inspection.kind)}")
            self.notify(reason, title="generate", severity="warning")
            return
        self.post_message(OpenInGeneration(Path(model_file)))

    # -- resume ------------------------------------------------------------------------------------------
    def action_resume(self) -> None:
        if self.opened is None:
            self.notify("open a checkpoint first", title="resume", severity="warning")
            return
        inspection = self.opened.inspection
        folder = Path(inspection.path)
        check = ResumePreview.of(self.store.display(folder), inspection)

        def decided(go: bool | None) -> None:
            if go:
                self.post_message(ResumeOnTraining(folder))

        self.app.push_screen(ResumePreflightScreen(check), decided)

    # -- compare -----------------------------------------------------------------------------------------
    def action_compare(self) -> None:
        if self.opened is None:
            self.notify("open a checkpoint first", title="compare", severity="warning")
            return
        current = Path(self.opened.inspection.path)
        choices = self.query_one(RunTree).checkpoint_choices(leaving_out=current)

        def chosen(text: str | None) -> None:
            target = self._typed_target(text, "cannot compare")
            if target is not None:
                self._start_compare(target)

        self.app.push_screen(PathPromptScreen(
            "Compare with", f"Compare {self.store.display(current)} with (choose or type a path):",
            placeholder="checkpoint folder, safetensors file or RUN:STEP", choices=choices), chosen)

    def _start_compare(self, other: Path) -> None:
        if self.opened is None:
            return
        # The result takes the keyboard (page keys scroll it), wherever the compare was asked
        # from; focus left in another panel (the tokenizer's field) would bring that panel
        # back when the dialog closes.
        self.query_one(CheckpointPanels).show_tab("compare")
        view = self.query_one(ComparisonView)
        view.compare(Path(self.opened.inspection.path), other, self.store.display)
        self.call_after_refresh(view.focus)

    # -- keys ---------------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_field":  # in the key bar only while a field has the keyboard
            return self.has_class("-filtering") or is_text_field(self.focused)
        if action == "filter":
            # A field types "/" itself; Textual does not know "slash" is a character, so the
            # key bar would list it while a field has the keyboard.
            return not is_text_field(self.focused)
        return super().check_action(action, parameters)

    def _clear_panels(self) -> None:
        self.opened = None
        self._serial += 1
        self.query_one(CheckpointPanels).clear_panels()
