"""Values typed by a user (command-line options, the app's form fields) read into numbers
and into a run's config, with one set of messages. Each message names the field as the
user knows it (``--seed`` on the command line, ``seed`` in the app), given by the caller.
No torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from minigpt_tui.engine.core.config import SeedConfig, load_config
from minigpt_tui.engine.core.errors import ConfigError, CorpusError, MiniGPTError
from minigpt_tui.engine.core.threads import Threads

if TYPE_CHECKING:
    from minigpt_tui.engine.core.config import RunConfig

SEED_STREAMS = ("init", "data", "dropout", "sampling")
BUNDLED_PREFIX = "bundled:"
Number = TypeVar("Number", int, float)


def parse_number(text: str | None, label: str, kind: type[Number], *,
                 error: type[MiniGPTError] = ConfigError, field: str | None = None) -> Number | None:
    """``text`` as ``kind``; blank or None is None (the default applies). Underscores
    group digits (``10_000``). A refusal carries ``field``, the setting the text is for."""
    if text is None:
        return None
    cleaned = text.strip().replace("_", "")
    if not cleaned:
        return None
    try:
        return kind(cleaned)
    except ValueError:
        expected = "a whole number" if kind is int else "a number"
        raise error(f"{label} must be {expected}, got '{cleaned}'", field=field) from None


def parse_threads(text: str | None, label: str) -> int | None:
    """A thread count as typed: ``auto`` (0, the config's form) or a whole number from 1;
    blank or None is None (the default applies)."""
    if text is None or not text.strip():
        return None
    return Threads.parse(text, label).count


def corpus_source(text: str) -> str:
    """A corpus as the config names it: ``bundled:NAME`` as given, a path made absolute
    (and checked to exist, so a wrong path is refused before anything is built)."""
    source = text.strip()
    if source.startswith(BUNDLED_PREFIX):
        return source
    path = Path(source).expanduser()
    if not path.exists():
        raise CorpusError(f"corpus not found: {path}", field="corpus.source")
    return str(path.resolve())


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class RunChoices:
    """What a user chose for a new run; None keeps the preset's value (or the TOML file's).
    ``seed_label`` names the one-seed field in messages."""

    preset: str
    config_file: Path | None = None
    corpus: str | None = None
    val_every: int | None = None
    follow_links: bool | None = None
    steps: int | None = None
    precision: str | None = None
    threads: int | None = None
    device: str | None = None
    save_every: int | None = None
    keep_last: int | None = None
    seed: int | None = None
    stream_seeds: Mapping[str, int | None] = field(default_factory=dict)
    seed_label: str = "seed"

    def overrides(self) -> dict[str, dict[str, Any]]:
        train = {"steps": self.steps, "precision": self.precision or None, "threads": self.threads,
                 "device": self.device or None, "save_every": self.save_every, "keep_last": self.keep_last}
        corpus = {"source": corpus_source(self.corpus) if self.corpus else None, "val_every": self.val_every,
                  "follow_links": self.follow_links}
        return {"corpus": _drop_none(corpus), "train": _drop_none(train), "seeds": self._seeds()}

    def _seeds(self) -> dict[str, int]:
        """The stream seeds given, or those one seed derives (refused when both are given)."""
        given = _drop_none(self.stream_seeds)
        if self.seed is None:
            return given
        if given:
            raise ConfigError(f"give one seed or separate stream seeds, not both (also set: {', '.join(given)})",
                              field="seeds")
        if not 0 <= self.seed < 2**64:
            raise ConfigError(f"{self.seed_label} must be an unsigned 64-bit integer", field="seeds")
        derived = SeedConfig.derive(self.seed)
        return {name: getattr(derived, name) for name in (*SEED_STREAMS, "evaluation")}

    def resolve(self, extra: Mapping[str, Mapping[str, Any]] | None = None) -> RunConfig:
        """The validated config: preset, then the TOML file, then ``extra``, then these choices."""
        merged: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (extra or {}).items()}
        for section, values in self.overrides().items():
            merged.setdefault(section, {}).update(values)
        if self.steps is not None and "warmup" not in merged.get("train", {}):
            warmup = self._scaled_warmup(merged)
            if warmup is not None:
                merged["train"]["warmup"] = warmup
        return load_config(self.preset, self.config_file, merged)

    def _scaled_warmup(self, merged: dict[str, dict[str, Any]]) -> int | None:
        """A preset's warmup that would not fit a shorter run (``--steps 30`` of the text
        preset's 100-update warmup) is scaled with the updates, keeping its share of the
        schedule; a warmup the user chose, or one that fits, is left as it is."""
        assert self.steps is not None
        preset = load_config(self.preset).train
        chosen = load_config(self.preset, self.config_file).train if self.config_file else preset
        if chosen.warmup != preset.warmup or preset.warmup < self.steps or self.steps < 1:
            return None
        return max(0, min(self.steps - 1, round(preset.warmup * self.steps / preset.steps)))
