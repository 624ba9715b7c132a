"""The Integrity tab: a checkpoint folder against its manifest (sizes; SHA-256 once
verified), or a transformers folder against its index and shard headers."""

from __future__ import annotations

from rich.text import Text

from minigpt_tui.engine.checkpoint.integrity import Integrity, IntegrityScope
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
    if not ok:
        verdict = "a check failed"
    elif integrity.hashes_checked:
        verdict = "every file's size and SHA-256 match"
    else:
        verdict = "every file's size matches (SHA-256 not checked yet)"
    out.append("complete, " + verdict, style="green" if ok else "bold red")
    out.append(f"\nstep {integrity.step}, saved because: {integrity.reason}\n")
    if integrity.problem:
        out.append(f"problem: {integrity.problem}\n", style="red")
    out.append("SHA-256 " + ("checked against every file\n" if integrity.hashes_checked
                             else "not checked yet (press v)\n"), style="dim")
    for record in integrity.files:
        out.append(f"\n{record.name}\n", style="bold")
        out.append(f"  recorded size {record.recorded_size:,} bytes; ")
        if not record.present:
            out.append("missing\n", style="red")
            continue
        out.append("size matches" if record.size_ok else f"actual {record.actual_size:,}",
                   style="green" if record.size_ok else "red")
        out.append("\n  sha256 " + record.sha256 + " ")
        if record.sha256_ok is None:
            out.append("(not checked)", style="dim")
        else:
            out.append("matches" if record.sha256_ok else "DIFFERS", style="green" if record.sha256_ok else "bold red")
        out.append("\n")
    return out
