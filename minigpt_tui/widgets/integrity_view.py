"""The Integrity tab: a checkpoint folder against its manifest (sizes; SHA-256 once
verified), or a transformers folder against its index and shard headers. Verifying hashes
every file on a worker thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.containers import VerticalScroll
from textual.widgets import Static

from minigpt_tui.engine.session.checkpoint_views import FileIntegrity, Integrity, IntegrityScope, verify_for_view
from minigpt_tui.messages import IntegrityReady
from minigpt_tui.widgets.checkpoint_summary import kind_label
from minigpt_tui.widgets.state_view import short_value


def integrity_text(integrity: Integrity | None, kind_label: str) -> Text:
    if integrity is None:
        return Text(f"A single file ({kind_label}) has no manifest; its header "
                    "was validated when it opened (lengths, offsets, dtypes).", style="dim")
    if integrity.scope is IntegrityScope.INDEX:
        return _index_text(integrity)
    return _manifest_text(integrity)


def _index_text(integrity: Integrity) -> Text:
    out = Text()
    out.append("checks: ", style="bold")
    out.append("passed" if integrity.ok else "problems found", style="green" if integrity.ok else "bold red")
    out.append("\nchecked: ", style="bold")
    out.append(integrity.checked)
    out.append("\nproblems: ", style="bold")
    out.append(short_value(list(integrity.problems)) if integrity.problems else "none")
    return out


def _manifest_text(integrity: Integrity) -> Text:
    out = Text()
    if not integrity.complete:
        out.append("incomplete: ", style="bold red")
        out.append(f"{integrity.problem}\n")
        return out
    ok = integrity.ok
    out.append("manifest: ", style="bold")
    out.append("complete, " + _manifest_verdict(integrity), style="green" if ok else "bold red")
    out.append(f"\nstep {integrity.step}, saved because: {integrity.reason}\n")
    if integrity.problem:
        out.append(f"problem: {integrity.problem}\n", style="red")
    out.append("SHA-256 " + ("checked against every file\n" if integrity.hashes_checked
                             else "not checked yet (press v)\n"), style="dim")
    for record in integrity.files:
        _append_file_record(out, record)
    return out


def _manifest_verdict(integrity: Integrity) -> str:
    if not integrity.ok:
        return "a check failed"
    if integrity.hashes_checked:
        return "every file's size and SHA-256 match"
    return "every file's size matches (SHA-256 not checked yet)"


def _append_file_record(out: Text, record: FileIntegrity) -> None:
    """One file of the manifest: its recorded size against the actual one, then its SHA-256."""
    out.append(f"\n{record.name}\n", style="bold")
    out.append(f"  recorded size {record.recorded_size:,} bytes; ")
    if not record.present:
        out.append("missing\n", style="red")
        return
    out.append("size matches" if record.size_ok else f"actual {record.actual_size:,}",
               style="green" if record.size_ok else "red")
    out.append("\n  sha256 " + record.sha256 + " ")
    if record.sha256_ok is None:
        out.append("(not checked)", style="dim")
    else:
        out.append("matches" if record.sha256_ok else "DIFFERS", style="green" if record.sha256_ok else "bold red")
    out.append("\n")


class IntegrityView(VerticalScroll):
    """The Integrity panel: what the opened thing was checked against, and a verify on demand."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._serial = 0  # of what the panel shows now: a verification of older content is dropped

    def compose(self) -> Any:
        yield Static("", id="integrity-text")

    def show_integrity(self, integrity: Integrity | None, kind: str) -> None:
        self._serial += 1
        self.query_one("#integrity-text", Static).update(integrity_text(integrity, kind_label(kind)))

    def clear_integrity(self) -> None:
        self._serial += 1
        self.query_one("#integrity-text", Static).update("")

    def verify(self, folder: Path) -> None:
        """Hash every file of the checkpoint ``folder`` against its manifest on a worker."""
        self.query_one("#integrity-text", Static).update(Text("hashing the files…", style="dim italic"))
        self._verify(self._serial, folder)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-verify")
    def _verify(self, serial: int, folder: Path) -> None:
        self.post_message(IntegrityReady(serial, verify_for_view(folder)))

    @on(IntegrityReady)
    def _verified(self, message: IntegrityReady) -> None:
        message.stop()
        if message.serial != self._serial:
            return
        self.query_one("#integrity-text", Static).update(
            integrity_text(message.integrity, kind_label("checkpoint-dir")))
        if message.integrity.ok:
            self.notify("every file matches its manifest SHA-256", title="verified", markup=False)
        else:
            self.notify(str(message.integrity.problem), title="verification failed", severity="error",
                        markup=False)
