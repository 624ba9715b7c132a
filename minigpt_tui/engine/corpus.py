"""Corpus records, their deterministic train/validation split, and the corpus identity."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from minigpt_tui.engine.config import CorpusConfig
from minigpt_tui.engine.errors import CorpusError

TRAIN = "train"
VALIDATION = "validation"


@dataclass(frozen=True)
class Record:
    text: str
    split: str
    index: int  # position in source order, 0-based


@dataclass(frozen=True)
class Corpus:
    records: tuple[Record, ...]
    source: str
    val_every: int

    @property
    def train(self) -> list[str]:
        return [r.text for r in self.records if r.split == TRAIN]

    @property
    def validation(self) -> list[str]:
        return [r.text for r in self.records if r.split == VALIDATION]

    @cached_property  # the records never change: every checkpoint save and load asks
    def identity(self) -> str:
        """SHA-256 over each record's split and exact UTF-8 bytes, in order, length-prefixed."""
        digest = hashlib.sha256(b"minigpt-tui-corpus-v1\0")
        for record in self.records:
            data = record.text.encode("utf-8")
            digest.update(record.split.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
        return digest.hexdigest()

    def summary(self) -> dict[str, object]:
        return {
            "source": self.source,
            "records": len(self.records),
            "train_records": len(self.train),
            "validation_records": len(self.validation),
            "split_rule": (
                f"record i (1-based) is validation when i % {self.val_every} == 0"
                if self.val_every
                else "no validation split"
            ),
            "identity": self.identity,
        }


def split_records(texts: list[str], val_every: int) -> tuple[Record, ...]:
    return tuple(
        Record(text, VALIDATION if val_every and (i + 1) % val_every == 0 else TRAIN, i)
        for i, text in enumerate(texts)
    )


def parse_records(text: str) -> list[str]:
    """Blank-line separated paragraphs when the text has a blank line, else one per line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if _has_inner_blank(lines):
        records, current = [], []
        for line in lines:
            if line.strip():
                current.append(line.rstrip())
            elif current:
                records.append("\n".join(current))
                current = []
        if current:
            records.append("\n".join(current))
        return records
    return [line.rstrip() for line in lines if line.strip()]


def _has_inner_blank(lines: list[str]) -> bool:
    seen_text = False
    blank_after_text = False
    for line in lines:
        if line.strip():
            if blank_after_text:
                return True
            seen_text = True
        elif seen_text:
            blank_after_text = True
    return False


def _read_text(path: Path) -> str:
    from minigpt_tui.engine.files import require_regular_file

    require_regular_file(path, "a corpus file")  # a FIFO or /dev/zero would never end
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"corpus file {path} is not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise CorpusError(f"cannot read corpus file {path}: {err.strerror or err}") from None


def load_corpus(config: CorpusConfig) -> Corpus:
    source = config.source
    if source.startswith("bundled:"):
        name = source.removeprefix("bundled:")
        asset = resources.files("minigpt_tui").joinpath(f"assets/corpus/{name}")
        if not asset.is_file():
            raise CorpusError(f"no bundled corpus named '{name}'")
        texts = parse_records(asset.read_text("utf-8"))
    else:
        from minigpt_tui.engine.files import path_exists, require_file_or_folder

        path = Path(source).expanduser()
        if not path_exists(path):
            raise CorpusError(f"corpus not found: {path}")
        require_file_or_folder(path, "a corpus file or folder")
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            if not files:
                raise CorpusError(f"corpus folder {path} has no text files")
            texts = [t for f in files for t in parse_records(_read_text(f))]
        else:
            texts = parse_records(_read_text(path))
    if not texts:
        raise CorpusError(f"corpus {source} has no records")
    records = split_records(texts, config.val_every)
    if not any(r.split == TRAIN for r in records):
        raise CorpusError(f"corpus {source} has no training records")
    return Corpus(records, source, config.val_every)
