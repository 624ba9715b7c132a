"""The run summary: what identifies the run on screen (or the next run, before one starts)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from minigpt_tui.engine.core.precision import precision_named
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.core.threads import Threads
from minigpt_tui.engine.session.display import counted
from minigpt_tui.messages import RunSummary
from minigpt_tui.widgets.pieces import plain_cell


def short_identity(identity: str) -> str:
    return identity[:12] + "…" if len(identity) > 12 else identity


def precision_text(precision: str, dtype: str, threads: int) -> str:
    kind = precision_named(precision)
    if kind is not None and kind.bitwise:
        return f"{precision} ({dtype}, 1 thread, deterministic)"
    if Threads(threads).auto:
        return f"{precision} ({dtype}, threads auto)"
    return f"{precision} ({dtype}, {threads} thread{'s' if threads != 1 else ''})"


class RunSummaryView(Static):
    DEFAULT_CSS = """
    RunSummaryView { height: auto; padding: 0 1; }
    """

    def show_pending(self, config: Any) -> None:
        """The configuration the next run will use (a RunConfig; nothing is built yet)."""
        grid = self._grid()
        grid.add_row("next run", Text.assemble(
            (f"preset {config.preset}", "bold"),
            f" · {config.train.steps} updates · ",
            precision_text(config.train.precision, config.dtype_name, config.train.threads),
        ))
        grid.add_row("corpus", plain_cell(config.corpus.source))
        grid.add_row("", Text("space starts it · n configures a new run", style="dim"))
        self.update(grid)

    def show_run(self, summary: RunSummary) -> None:
        grid = self._grid()
        title = Text.assemble((escape_controls(summary.run_name), "bold"))
        if summary.resumed_from is not None:  # before the sizes: a narrow terminal cuts the end of the line
            title.append(f" · resumed at update {summary.start_step}", style="italic")
        title.append(f" · preset {summary.preset}")
        if summary.parameter_scalars:  # an attached run's writer may not have said
            title.append(f" · {summary.parameter_scalars:,} parameters in {summary.parameter_tensors} tensors")
        grid.add_row("run", title)
        grid.add_row("precision", precision_text(summary.precision, summary.dtype, summary.threads))
        if summary.corpus_mode == "stream":
            counts = f" · stream of {summary.train_tokens:,} train / {summary.validation_tokens:,} val tokens · id "
        else:
            counts = f" · {summary.train_records} train / {summary.validation_records} val records · id "
        grid.add_row("corpus", Text.assemble(
            escape_controls(summary.corpus_source), counts, (short_identity(summary.corpus_identity), "cyan"),
        ))
        grid.add_row("tokenizer", Text.assemble(
            f"{tokenizer_text(summary)} · vocab {summary.vocab_size:,} · id ",
            (short_identity(summary.tokenizer_identity), "cyan"),
        ))
        self.update(grid)

    @staticmethod
    def _grid() -> Table:
        grid = Table.grid(padding=(0, 1))
        # The labels keep their width; a long value (a corpus path) is cut instead.
        grid.add_column(style="dim", no_wrap=True, min_width=9)
        grid.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        return grid


def tokenizer_text(summary: Any) -> str:
    """Our byte-level BPE by its merges, or the model's own tokenizer.json."""
    if getattr(summary, "tokenizer_kind", "") == "tokenizers":
        return "the model's own tokenizer"
    return merges_text(summary.merges)


def merges_text(merges: int) -> str:
    """What the tokenizer is, in a few words: "byte BPE · 32 merges", "bytes · no merges"."""
    return "bytes · no merges" if merges == 0 else f"byte BPE · {counted(merges, 'merge')}"
