"""The tokenizer of a model file: its merges with their pieces, and the pieces of any text
typed into the field above them.

The panel holds a ``ByteBPETokenizer`` (pure Python: encoding a line on the UI thread costs
microseconds) that its worker reads from a model file's merges tensor or a tokenizer.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Input, Static

from minigpt_tui.engine.core.errors import MiniGPTError
from minigpt_tui.engine.session.display import counted
from minigpt_tui.engine.session.saved_tokenizer import read_saved_tokenizer
from minigpt_tui.engine.session.worker_failures import failure_line, passes_on
from minigpt_tui.messages import TokenizerReady
from minigpt_tui.widgets.pieces import piece_chips, piece_text

MAX_ENCODED_CHARACTERS = 4000  # the field is for trying words and lines, not documents
MAX_MERGE_ROWS = 5000  # a 50k-merge foreign tokenizer would take seconds to lay out


class TokenizerPanel(Vertical):
    DEFAULT_CSS = """
    TokenizerPanel { height: 1fr; }
    TokenizerPanel #tokenizer-summary { height: auto; padding: 0 1; }
    TokenizerPanel #tokenizer-try { margin: 0 1; }
    TokenizerPanel #tokenizer-pieces { height: auto; max-height: 6; padding: 0 1; }
    TokenizerPanel #tokenizer-merges { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tokenizer: Any = None
        self._serial = 0  # of what the panel shows now: a tokenizer read for older content is dropped

    def compose(self) -> ComposeResult:
        yield Static(Text("No model file open.", style="dim"), id="tokenizer-summary")
        yield Input(placeholder="type text to see its pieces", compact=True, id="tokenizer-try")
        yield Static("", id="tokenizer-pieces")
        table: DataTable = DataTable(cursor_type="row", zebra_stripes=True, id="tokenizer-merges")
        yield table

    def on_mount(self) -> None:
        table = self.query_one("#tokenizer-merges", DataTable)
        for label, key in (("rank", "rank"), ("id", "id"), ("left", "left"), ("right", "right"),
                           ("piece", "piece")):
            table.add_column(label, key=key)

    def load(self, source: Path) -> None:
        """Read the tokenizer saved at ``source`` (a model file or a tokenizer.json) on a worker."""
        self.show_unavailable("reading the tokenizer…")
        self._load(self._serial, source)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checkpoints-tokenizer")
    def _load(self, serial: int, source: Path) -> None:
        try:
            saved = read_saved_tokenizer(source)
        except (MiniGPTError, OSError, ValueError) as err:
            self.post_message(TokenizerReady(serial, None, str(err)))
            return
        except BaseException as err:  # noqa: BLE001 - a library's panic too is one line in the panel
            if passes_on(err):
                raise
            self.post_message(TokenizerReady(serial, None, failure_line(err, str(source))))
            return
        self.post_message(TokenizerReady(serial, saved.tokenizer, saved.note))

    @on(TokenizerReady)
    def _loaded(self, message: TokenizerReady) -> None:
        message.stop()
        if message.serial != self._serial:
            return
        if message.tokenizer is None:
            self.show_unavailable(message.note)
        else:
            self.show_tokenizer(message.tokenizer, message.note)

    def show_unavailable(self, reason: str) -> None:
        self._serial += 1
        self.tokenizer = None
        self.query_one("#tokenizer-summary", Static).update(Text(reason, style="dim"))
        self.query_one("#tokenizer-merges", DataTable).clear()
        self.query_one("#tokenizer-pieces", Static).update("")

    def show_tokenizer(self, tokenizer: Any, note: str = "") -> None:
        """List the merges; ``note`` says where the tokenizer came from or a doubt about it."""
        self.tokenizer = tokenizer
        merges = tokenizer.merges
        summary = Text()
        summary.append("byte-level BPE: ", style="bold")
        count = len(merges)
        learned = f"{counted(count, 'merge')} (258–{257 + count})" if count else "no merges"
        summary.append(f"{tokenizer.vocab_size} ids = 2 specials (0 <bos>, 1 <eos>) + 256 bytes (2–257) + {learned}")
        summary.append(f"\nidentity {tokenizer.identity}", style="dim")
        if note:
            summary.append(f"\n{note}", style="yellow")
        self.query_one("#tokenizer-summary", Static).update(summary)
        table = self.query_one("#tokenizer-merges", DataTable)
        table.clear()
        first = tokenizer.vocab_size - len(merges)
        if len(merges) > MAX_MERGE_ROWS:
            summary.append(f"\nthe table lists the first {MAX_MERGE_ROWS:,} of {len(merges):,} merges", style="dim")
            self.query_one("#tokenizer-summary", Static).update(summary)
        for rank, (left, right) in enumerate(merges[:MAX_MERGE_ROWS]):
            token_id = first + rank
            table.add_row(
                Text(str(rank), justify="right"),
                Text(str(token_id), justify="right"),
                self._id_piece(left),
                self._id_piece(right),
                piece_text(tokenizer.piece_text(token_id), style="bold"),
                key=str(rank),
            )
        self._show_pieces(self.query_one("#tokenizer-try", Input).value)

    def _id_piece(self, token_id: int) -> Text:
        out = Text(f"{token_id} ", style="dim")
        out.append_text(piece_text(self.tokenizer.piece_text(token_id)))
        return out

    @on(Input.Changed, "#tokenizer-try")
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        self._show_pieces(event.value)

    def pieces_of(self, text: str) -> list[tuple[int, str]]:
        if self.tokenizer is None:
            return []
        ids = self.tokenizer.encode(text[:MAX_ENCODED_CHARACTERS], bos=False, eos=False)
        return [(token_id, self.tokenizer.piece_text(token_id)) for token_id in ids]

    def _show_pieces(self, text: str) -> None:
        target = self.query_one("#tokenizer-pieces", Static)
        if self.tokenizer is None or not text:
            target.update("")
            return
        pieces = self.pieces_of(text)
        out = Text(f"{counted(len(pieces), 'piece')} for {counted(len(text.encode('utf-8')), 'byte')}: ", style="dim")
        out.append_text(piece_chips(pieces))
        out.append("\nids: " + " ".join(str(token_id) for token_id, _ in pieces), style="dim")
        if len(text) > MAX_ENCODED_CHARACTERS:
            out.append(f"\n(first {MAX_ENCODED_CHARACTERS} characters only)", style="dim")
        target.update(out)
