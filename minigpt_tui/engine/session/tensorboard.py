"""A run's scalars as TensorBoard event files: written while it trains (``--tensorboard``) and
exported from its ``metrics.jsonl``. Both take the values from the same metrics records, so
TensorBoard shows what the run recorded (as single-precision floats, TensorBoard's scalar
type) at the update it recorded it, the step being TensorBoard's global step.

While a run trains, the session hands each record to :class:`ScalarWriter`, which only queues
it: a thread of its own turns records into events and TensorBoard's writer flushes them, so
the training thread never waits for the event files. The writer reads nothing the trainer
uses, so a run's records are the same with and without event files.

A resumed run continues the run's event folder: TensorBoard hides the events after the step
it resumed from (a purge marker), so the curves show one history, as ``metrics.jsonl`` read
through its ``resume`` records does.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError, WriteRefused
from minigpt_tui.engine.core.files import (
    built_then_installed,
    make_folder,
    shorten_middle,
    work_path,
)
from minigpt_tui.engine.session.history import read_metrics
from minigpt_tui.engine.session.runs import check_run_name

INSTALL_HINT = "pip install 'minigpt-tui[tensorboard]'"
EVENT_FILE_PREFIX = "events.out.tfevents."
RUN_SUBFOLDER = "tensorboard"  # the export's default folder, inside the run folder
FLUSH_SECONDS = 5  # how stale the files may be while a run trains
QUEUED_EVENTS = 10_000  # events TensorBoard's writer holds before its next flush

# metrics.jsonl field -> TensorBoard tag, per record kind. Tags sharing a first part are
# drawn in one section: the batch, train and validation losses side by side.
UPDATE_TAGS = {
    "loss": "loss/batch",
    "lr": "optimizer/lr",
    "grad_norm": "optimizer/grad_norm",
    "loss_scale": "optimizer/loss_scale",
    "tokens_per_second": "speed/tokens_per_second",
    "seconds": "speed/seconds_per_update",
    "threads": "speed/threads",
}
EVALUATION_TAGS = {"train_loss": "loss/train", "validation_loss": "loss/validation"}
HEAD_ROLE_TAG = "heads/{role}"  # the top head's score for each role
PROBE_TAGS = (
    "probe_probability/{name}",
    "probe_rank/{name}",
)  # a probe's expected answer
PROBES_MATCHED = "probes/matched"


def require_tensorboard() -> None:
    """Refuse, in one line, when the tensorboard package is not installed."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            f"TensorBoard event files need the tensorboard package: {INSTALL_HINT}"
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fields(record: dict[str, Any], tags: dict[str, str]) -> list[tuple[str, float]]:
    return [
        (tag, float(record[field]))
        for field, tag in tags.items()
        if _number(record.get(field))
    ]


def _probe_scalars(record: dict[str, Any]) -> list[tuple[str, float]]:
    """How many probes matched, and each scored probe's expected probability and rank (a
    probe that could not be scored, its prompt too long say, has none)."""
    scores = [s for s in record.get("probes", []) if isinstance(s, dict)]
    scalars = [(PROBES_MATCHED, float(sum(bool(s.get("match")) for s in scores)))]
    probability, rank = PROBE_TAGS
    for score in scores:
        if score.get("error") or not isinstance(score.get("name"), str):
            continue
        scalars += [
            (tag.format(name=score["name"]), float(score[field]))
            for tag, field in (
                (probability, "expected_probability"),
                (rank, "expected_rank"),
            )
            if _number(score.get(field))
        ]
    return scalars


def _head_scalars(record: dict[str, Any]) -> list[tuple[str, float]]:
    top = record.get("top")
    if not isinstance(top, dict):
        return []
    return [
        (HEAD_ROLE_TAG.format(role=role), float(best["score"]))
        for role, best in top.items()
        if isinstance(best, dict) and _number(best.get("score"))
    ]


def scalars_of(record: dict[str, Any]) -> list[tuple[str, float]]:
    """The (tag, value) pairs of one metrics record; none for samples, resumes and records
    without a step."""
    if not isinstance(record.get("step"), int):
        return []
    kind = record.get("kind")
    if kind == "update":
        return _fields(record, UPDATE_TAGS)
    if kind == "evaluation":
        return _fields(record, EVALUATION_TAGS)
    if kind == "probes":
        return _probe_scalars(record)
    if kind == "heads":
        return _head_scalars(record)
    return []


def current_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the run's history as it stands: a ``resume`` record at step S drops
    the records after S that came before it (those of a run resumed from an earlier step)."""
    kept: list[dict[str, Any]] = []
    for record in records:
        step = record.get("step")
        if not isinstance(step, int):
            continue
        if record.get("kind") == "resume":
            kept = [k for k in kept if k["step"] <= step]
        elif scalars_of(record):
            kept.append(record)
    return kept


def _summary_writer(folder: Path, purge_from: int | None) -> Any:
    """TensorBoard's writer for ``folder`` (created); ``purge_from``: hide the events at and
    after this step that earlier files of the folder hold."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # deferred: imports torch
    except ImportError as err:
        raise ConfigError(
            f"TensorBoard event files need the tensorboard package ({err}): {INSTALL_HINT}"
        ) from None
    try:
        return SummaryWriter(
            log_dir=str(folder),
            purge_step=purge_from,
            max_queue=QUEUED_EVENTS,
            flush_secs=FLUSH_SECONDS,
        )
    except OSError as err:
        raise WriteRefused(
            f"cannot write TensorBoard event files in {folder}: {err.strerror or err}"
        ) from None


def _write_record(writer: Any, record: dict[str, Any]) -> int:
    """Add one record's scalars at its step; how many."""
    scalars = scalars_of(record)
    for tag, value in scalars:
        writer.add_scalar(tag, value, global_step=record["step"])
    return len(scalars)


def event_files(folder: Path) -> list[Path]:
    try:
        return sorted(
            p for p in folder.iterdir() if p.name.startswith(EVENT_FILE_PREFIX)
        )
    except OSError:
        return []


def check_event_folder(folder: Path) -> Path:
    """Refuse a folder for event files that is a file, or holds anything but event files."""
    shown = shorten_middle(str(folder))
    if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
        raise WriteRefused(
            f"{shown} is not a folder: TensorBoard event files are written into a folder"
        )
    if folder.is_dir():
        others = sorted(
            p.name for p in folder.iterdir() if not p.name.startswith(EVENT_FILE_PREFIX)
        )
        if others:
            listed = ", ".join(others[:3]) + (
                f" and {len(others) - 3} more" if len(others) > 3 else ""
            )
            raise WriteRefused(
                f"{shown} holds files that are not TensorBoard event files ({listed}): "
                "choose another folder; nothing was written"
            )
    return folder


def check_log_folder(logdir: Path | str) -> Path:
    """A ``--tensorboard`` folder, checked before a run starts: the package installed, and a
    folder there or one that can be made (nothing is made yet)."""
    require_tensorboard()
    path = Path(logdir).expanduser()
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), None)
    if existing is not None and not existing.is_dir():
        raise WriteRefused(
            f"cannot write TensorBoard event files in {shorten_middle(str(path))}: "
            f"{shorten_middle(str(existing))} is not a folder"
        )
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise WriteRefused(
            f"cannot write TensorBoard event files in {shorten_middle(str(path))}: "
            f"{shorten_middle(str(existing))} is not writable"
        )
    return path


class ScalarWriter:
    """Event files of a training run in one folder, written on a thread of its own:
    :meth:`write` only queues a record. A failure ends the writing; ``failure`` says why."""

    def __init__(
        self,
        folder: Path,
        *,
        purge_from: int | None = None,
        backlog: Iterable[dict[str, Any]] = (),
    ) -> None:
        self.folder = folder
        self.failure: str | None = None
        self._records: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        for record in backlog:
            self._records.put(record)
        self._thread = threading.Thread(
            target=self._drain, args=(purge_from,), name="tensorboard", daemon=True
        )
        self._thread.start()

    def write(self, record: dict[str, Any]) -> None:
        if self.failure is None:
            self._records.put(record)

    def close(self) -> str | None:
        """Write what is queued, close the files; the failure, if any."""
        if self._thread.is_alive():
            self._records.put(None)
            self._thread.join()
        return self.failure

    def _drain(self, purge_from: int | None) -> None:
        writer = None
        try:
            writer = _summary_writer(self.folder, purge_from)
            while (record := self._records.get()) is not None:
                _write_record(writer, record)
        except MiniGPTError as err:
            self.failure = str(err)
        except Exception as err:  # noqa: BLE001 - a side output: a failure ends it, never the run
            self.failure = (
                f"cannot write TensorBoard event files in {self.folder}: {err}"
            )
        if self.failure is not None:
            while self._records.get() is not None:  # what comes until close is dropped
                pass
        self._close(writer)

    def _close(self, writer: Any) -> None:
        if writer is None:
            return
        try:
            writer.close()
        except Exception as err:  # noqa: BLE001 - the last flush of the same side output
            self.failure = (
                self.failure
                or f"cannot write TensorBoard event files in {self.folder}: {err}"
            )


def open_run_writer(
    logdir: Path, run_path: Path, step: int, *, resumed: bool
) -> ScalarWriter:
    """The writer of a run starting (or resuming) at ``step``, into ``logdir/RUN``. A new run
    hides whatever that folder held; a resumed one hides the events after ``step``; into a
    folder without events, a resumed run first writes its history up to ``step``."""
    folder = check_event_folder(
        make_folder(Path(logdir).expanduser(), what="TensorBoard folder")
        / run_path.name
    )
    if event_files(folder):
        return ScalarWriter(folder, purge_from=step + 1 if resumed else 0)
    backlog = (
        [r for r in current_records(read_metrics(run_path)) if r["step"] <= step]
        if resumed
        else []
    )
    return ScalarWriter(folder, backlog=backlog)


@dataclass(frozen=True)
class ExportedScalars:
    """What an export wrote."""

    folder: Path
    scalars: int
    tags: tuple[str, ...]
    first_step: int
    last_step: int

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "scalars": self.scalars,
            "tags": list(self.tags),
            "first_step": self.first_step,
            "last_step": self.last_step,
        }


def run_folder(spec: str, runs_dir: Path) -> Path:
    """The run a command names: a run folder, its ``metrics.jsonl``, or a run's name."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path.parent
    if path.is_dir():
        return path
    if not (Path(runs_dir) / check_run_name(spec)).is_dir():
        raise ConfigError(
            f"no run '{spec}': no such folder, and no run of that name in {runs_dir}"
        )
    return Path(runs_dir) / spec


def _replace_events(work: Path, final: Path) -> Path | None:
    """Put the new event folder in place; an earlier one (event files only) is displaced and
    returned for removal."""
    if not os.path.lexists(final):
        os.rename(work, final)
        return None
    aside = work_path(final)
    os.rename(final, aside)
    os.rename(work, final)
    return aside


def export_tensorboard(run_dir: Path, folder: Path | None = None) -> ExportedScalars:
    """Write the run's ``metrics.jsonl`` as event files in ``folder`` (default: the run
    folder's ``tensorboard/``), replacing the event files an earlier export or run left there."""
    records = current_records(read_metrics(run_dir))
    if not records:
        raise ConfigError(
            f"{run_dir} has no update or evaluation records yet: nothing to export"
        )
    require_tensorboard()
    folder = check_event_folder(
        Path(folder).expanduser() if folder is not None else run_dir / RUN_SUBFOLDER
    )
    make_folder(folder.parent, what="TensorBoard folder")
    with built_then_installed(
        work_path(folder),
        folder,
        f"cannot write TensorBoard event files in {folder}",
        install=_replace_events,
    ) as work:
        writer = _summary_writer(work, None)
        try:
            count = sum(_write_record(writer, record) for record in records)
        finally:
            writer.close()
    tags = sorted({tag for record in records for tag, _ in scalars_of(record)})
    steps = [record["step"] for record in records]
    return ExportedScalars(folder, count, tuple(tags), min(steps), max(steps))
