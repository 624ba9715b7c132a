"""The activation-patching dialog: the clean prompt (the decision's context), the corrupt
prompt (it starts as the clean one: change a token, keep the length), the two one-token
answers compared (the chosen id and the runner-up) and the sites to sweep. Enter in any field
starts the sweep; escape cancels. The engine checks the prompts and answers on the worker."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Label

from minigpt_tui.engine.session.patching import PatchRequest

FIELDS = (("clean", "clean prompt (its answer is A)"), ("corrupt", "corrupt prompt (same token length)"),
          ("answer", "A: one token"), ("against", "B: one token, measured against A"))
SITES = (("resid", "residual stream", True), ("attn", "attention output", True), ("mlp", "feed-forward output", True),
         ("head", "every head now (else on demand)", False))
PLACEHOLDERS = {"clean": "the prompt whose next token is A", "corrupt": "the clean prompt with a change",
                "answer": "a piece the model may say next", "against": "another piece"}


class PatchPromptScreen(ModalScreen[PatchRequest | None]):
    """Dismisses with a :class:`PatchRequest` or None when cancelled."""

    DEFAULT_CSS = """
    PatchPromptScreen { align: center middle; }
    PatchPromptScreen #patch-prompt {
        width: 76; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    PatchPromptScreen .dim { color: $text-muted; width: 100%; }
    PatchPromptScreen Input, PatchPromptScreen Input:focus {
        height: 1; border: none; padding: 0 1; margin-bottom: 1; background: $boost;
    }
    PatchPromptScreen Input:focus { background: $primary 30%; }
    PatchPromptScreen #patch-sites { height: auto; }
    PatchPromptScreen Checkbox { height: 1; border: none; padding: 0 1 0 0; }
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, clean: str, answer: str, against: str, *, corrupt: str | None = None,
                 sites: tuple[str, ...] = ("resid", "attn", "mlp")) -> None:
        super().__init__()
        self.values = {"clean": clean, "corrupt": clean if corrupt is None else corrupt, "answer": answer,
                       "against": against}
        self.sites = sites
        # The keyboard is in the field to write first, from the start (a key typed at once
        # lands there): the corrupt prompt, an edit of the clean one, unless there is no
        # clean prompt yet (a decision right after BOS).
        self.AUTO_FOCUS = "#patch-corrupt" if clean else "#patch-clean"

    def compose(self) -> ComposeResult:
        with Vertical(id="patch-prompt") as box:
            box.border_title = "Activation patching"
            box.border_subtitle = "tab moves · enter patches · escape cancels"
            for name, label in FIELDS:
                yield Label(label, classes="dim")
                yield Input(value=self.values[name], placeholder=PLACEHOLDERS[name], id=f"patch-{name}")
            with Horizontal(id="patch-sites"):
                for site, label, _ in SITES:
                    box_ = Checkbox(site, site in self.sites, id=f"patch-site-{site}")
                    box_.tooltip = label
                    yield box_

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = False
        corrupt = self.query_one("#patch-corrupt", Input)
        corrupt.cursor_position = len(corrupt.value)

    def request(self) -> PatchRequest | str:
        """The request the fields make, or why they make none (one line)."""
        value = {name: self.query_one(f"#patch-{name}", Input).value for name, _ in FIELDS}
        sites = tuple(site for site, _, _ in SITES if self.query_one(f"#patch-site-{site}", Checkbox).value)
        refusals = (
            (not value["clean"] or not value["corrupt"], "type a clean and a corrupt prompt"),
            (value["corrupt"] == value["clean"],
             "the corrupt prompt is the clean one: change a token of it (same token length)"),
            (not value["answer"] or not value["against"], "type the two answers compared, A and B (one token each)"),
            (value["answer"] == value["against"], "A and B are the same answer: the difference A − B is always 0"),
            (not sites, "choose at least one site: resid, attn, mlp or head"),
        )
        for refused, reason in refusals:
            if refused:
                return reason
        return PatchRequest(value["clean"], value["corrupt"], value["answer"], value["against"], sites)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        request = self.request()
        if isinstance(request, str):
            self.notify(request, title="patching", severity="warning")
            return
        self.dismiss(request)

    def action_cancel(self) -> None:
        self.dismiss(None)
