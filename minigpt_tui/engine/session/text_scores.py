"""A text's per-token loss for the app's Text view: the model loaded on the Generation screen
scores the text as ``minigpt-tui score`` does (:func:`score_model_text`), and, when a second
model is loaded, its scores are set beside (:func:`compare_model_text`) or the reason they
cannot be. Torch-free at import; the screen's queue worker calls :func:`score_for_view`, the
command line the two steps it shares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.core.files import read_small_file
from minigpt_tui.engine.session.generation import NO_MODEL, GenerationSession

if TYPE_CHECKING:
    from minigpt_tui.engine.analysis.scoring import ComparedToken, TextScore, TokenScore

TEXT_LIMIT = 64 * 1024 * 1024  # the most bytes of text read from a file


def read_text_file(path: str) -> str:
    """A UTF-8 text file's text (refused in one line: missing, too large, not a file, not UTF-8)."""
    data = read_small_file(Path(path).expanduser(), TEXT_LIMIT, "a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise GenerationError(f"{path}: not UTF-8 text (byte {err.start})") from None


def screen_text(session: GenerationSession) -> str:
    """The text the Generation screen shows: the prompt and the continuation generated so far
    (a character cut short at the end left out)."""
    if session.stepper is None or session.settings is None:
        raise GenerationError(NO_MODEL)
    generated = bytes(session.stepper.output()["generated_bytes"])
    return session.settings.prompt + generated.decode("utf-8", errors="ignore")


@dataclass(frozen=True)
class TextScoresView:
    """Every id of a scored text and the engine's records: the first model's scores, and the
    second model's beside them when it is loaded and comparable."""

    model_label: str
    pieces: tuple[str, ...]  # the readable piece of every id of the text, scored or not
    scored: TextScore
    vocab_size: int
    second_label: str | None = None
    second_mean_loss: float | None = None
    compared: tuple[ComparedToken, ...] = ()  # one per scored token, in order
    compare_refused: str | None = None  # why the second model's scores cannot be set beside

    @property
    def tokens(self) -> tuple[TokenScore, ...]:
        return self.scored.tokens

    @property
    def can_compare(self) -> bool:
        return bool(self.compared)


Progress = Callable[[int, int], None]  # progress(windows done, windows), as the scoring reports it


@dataclass(frozen=True)
class ComparedText:
    """A second model's scores of a text set beside the first's: its mean loss and, per
    scored token, both losses."""

    mean_loss: float
    tokens: tuple[ComparedToken, ...]

    def most_changed(self) -> tuple[list[ComparedToken], list[ComparedToken]]:
        """The tokens the second model predicts most better, and most worse."""
        from minigpt_tui.engine.analysis.scoring import (  # deferred: imports torch
            most_changed,
        )

        return most_changed(self.tokens)

    def to_json(self, model: str) -> dict[str, Any]:
        return {"model": model, "mean_loss": self.mean_loss, "tokens": [t.to_json() for t in self.tokens]}


def score_model_text(portable: Any, text: str, *, stride: int | None = None,
                     progress: Progress | None = None) -> TextScore:
    """Every token's loss, probability, rank and alternatives over ``text`` under an opened
    model (``score``, and the Text view)."""
    from minigpt_tui.engine.analysis.scoring import (  # deferred: imports torch
        score_text,
    )

    return score_text(portable.model, portable.tokenizer, text, stride=stride, progress=progress)


def compare_model_text(first: Any, second: Any, scored: TextScore, text: str, *,
                       progress: Progress | None = None) -> ComparedText:
    """``second``'s scores of ``text`` (windows as ``scored``'s) beside ``first``'s; refused
    in one line when the two do not share a tokenizer."""
    from minigpt_tui.engine.analysis.contrast import (  # deferred: imports torch
        check_same_tokenizer,
    )
    from minigpt_tui.engine.analysis.scoring import (  # deferred: imports torch
        compare_scores,
    )

    check_same_tokenizer(first, second)
    other = score_model_text(second, text, stride=scored.stride, progress=progress)
    return ComparedText(other.mean_loss, tuple(compare_scores(scored, other)))


def score_for_view(session: GenerationSession, text: str) -> TextScoresView:
    """Score ``text`` with the session's model (and its second model); on the worker thread."""
    portable = session.portable
    if portable is None:
        raise GenerationError(NO_MODEL)
    scored = score_model_text(portable, text)
    pieces = tuple(portable.tokenizer.piece_text(i) for i in scored.ids)
    view = TextScoresView(session.display(str(session.model_path)), pieces, scored, int(portable.model.vocab_size))
    second = session.second
    if second is None:
        return view
    second_label = session.display(str(session.second_path))
    try:
        compared = compare_model_text(portable, second, scored, text)
    except GenerationError as err:
        return TextScoresView(view.model_label, pieces, scored, view.vocab_size, second_label,
                              compare_refused=str(err))
    return TextScoresView(view.model_label, pieces, scored, view.vocab_size, second_label, compared.mean_loss,
                          compared.tokens)
