"""Integrity of anything opened as a folder, in one shape: a checkpoint folder checked
against its manifest (sizes, and SHA-256 when asked), or a transformers folder checked
against its index and shard headers. A single file has none (its header is validated
when it opens)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class IntegrityScope(enum.StrEnum):
    MANIFEST = "manifest"  # our checkpoint folder: manifest.json against the files
    INDEX = "index"  # a transformers folder: the index against the shard headers


@dataclass(frozen=True)
class FileIntegrity:
    """One file the manifest lists, as found on disk."""

    name: str
    recorded_size: int
    sha256: str
    present: bool
    actual_size: int | None = None
    sha256_ok: bool | None = None  # None: not hashed

    @property
    def size_ok(self) -> bool:
        return self.present and self.actual_size == self.recorded_size

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"size": self.recorded_size, "sha256": self.sha256, "present": self.present}
        if self.present:
            data["actual_size"] = self.actual_size
        data.update(size_ok=self.size_ok, sha256_ok=self.sha256_ok if self.present else False)
        return data


@dataclass(frozen=True)
class Integrity:
    scope: IntegrityScope
    checked: str  # what was checked, in words
    problems: tuple[str, ...] = ()
    complete: bool = True  # False: no readable manifest (an unfinished or damaged save)
    hashes_checked: bool = False
    step: int | None = None
    reason: str | None = None
    files: tuple[FileIntegrity, ...] = ()

    @property
    def ok(self) -> bool:
        return self.complete and not self.problems

    @property
    def problem(self) -> str | None:
        return self.problems[0] if self.problems else None

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": str(self.scope),
            "ok": self.ok,
            "complete": self.complete,
            "checked": self.checked,
            "problem": self.problem,
            "problems": list(self.problems),
            "hashes_checked": self.hashes_checked,
            "step": self.step,
            "reason": self.reason,
            "files": {f.name: f.to_json() for f in self.files},
        }
