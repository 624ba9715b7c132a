"""A run's scalars as TensorBoard event files: written while it trains (``--tensorboard``) and
exported from its ``metrics.jsonl``. Both take the values from the same metrics records, so
TensorBoard shows what the run recorded (as single-precision floats, TensorBoard's scalar
type) at the update it recorded it, the step being TensorBoard's global step.

While a run trains, the session hands each record to :class:`ScalarWriter`, which only queues
it: a thread of its own turns records into events and writes them, so the training thread
never waits for the event files. The writer reads nothing the trainer uses, so a run's
records are the same with and without event files. A failure to write (a full disk) ends the
event files with one line; the run goes on.

A resumed run continues the run's event folder: TensorBoard hides the events after the step
it resumed from (a purge marker), so the curves show one history, as ``metrics.jsonl`` read
through its ``resume`` records does.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import queue
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from minigpt_tui.engine.core.errors import ConfigError, MiniGPTError, WriteRefused
from minigpt_tui.engine.core.files import (
    built_then_installed,
    make_folder,
    path_exists,
    refuse_inside_checkpoint,
    require_regular_file,
    shorten_middle,
    work_path,
)
from minigpt_tui.engine.session.runs import check_run_name

INSTALL_HINT = "pip install 'minigpt-tui[tensorboard]'"
EVENT_FILE_PREFIX = "events.out.tfevents."
FILE_VERSION = "brain.Event:2"  # the event-file version TensorBoard's readers expect first
RUN_SUBFOLDER = "tensorboard"  # the export's default folder, inside the run folder
FLUSH_SECONDS = 5  # how stale the files may be while a run trains
LARGEST_STEP = 2**63 - 1  # an event's step is a signed 64-bit integer
NAME_TRIES = 1_000  # event files begun by one process in one second

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
    """A JSON number a scalar can hold (an integer past a double's range is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _step(record: dict[str, Any]) -> int | None:
    """A record's update number, where it is one an event can carry."""
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= LARGEST_STEP:
        return None
    return step


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
    if _step(record) is None:
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
        step = _step(record)
        if step is None:
            continue
        if record.get("kind") == "resume":
            kept = [k for k in kept if k["step"] <= step]
        elif scalars_of(record):
            kept.append(record)
    return kept


@dataclass(frozen=True)
class MetricsLog:
    """The records of a run's ``metrics.jsonl`` that could be read, and how many damaged
    lines (not UTF-8, not a JSON object) were skipped."""

    records: tuple[dict[str, Any], ...]
    skipped: int


def read_metrics_log(run_dir: Path) -> MetricsLog:
    """A run's metrics records, each line on its own: a damaged line is skipped and counted,
    so one bad line costs its own record only. A last line without its newline (being
    written now, or cut by a crash) is kept when it reads and dropped uncounted when not."""
    target = run_dir / "metrics.jsonl"
    if path_exists(target):
        require_regular_file(target, "a metrics log")  # a FIFO or a device would never end
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"no metrics.jsonl in {run_dir}") from None
    except OSError as err:
        raise ConfigError(f"cannot read {target}: {err.strerror or err}") from None
    *lines, last = data.split(b"\n")  # a JSON Lines file ends its lines with \n alone
    records: list[dict[str, Any]] = []
    skipped = 0
    for line in lines:
        record = _metrics_record(line)
        if record is not None:
            records.append(record)
        elif line.strip():
            skipped += 1
    record = _metrics_record(last)
    if record is not None:
        records.append(record)
    return MetricsLog(tuple(records), skipped)


def _metrics_record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past Python's stack
        return None
    return record if isinstance(record, dict) else None


class _EventFile:
    """One event file, written on the calling thread. (TensorBoard's own writer hands the
    bytes to a thread of its own, whose failure on a full disk prints a traceback over the
    user's terminal; here a failure is an ``OSError`` its caller turns into one line.)"""

    def __init__(self, folder: Path, purge_from: int | None) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2  # deferred: off the first frame
        from tensorboard.summary.writer.record_writer import RecordWriter  # deferred: off the first frame

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._file = _new_event_file(folder)
        self._records = RecordWriter(self._file)
        self._add(self._event(file_version=FILE_VERSION))
        if purge_from is not None:  # read as a restart at this step: later events of earlier files are hidden
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._add(self._event(step=purge_from, file_version=FILE_VERSION))
            self._add(self._event(step=purge_from, session_log=start))
        self.flush()

    def add_record(self, record: dict[str, Any]) -> int:
        """Add one record's scalars at its step; how many."""
        scalars = scalars_of(record)
        for tag, value in scalars:
            summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=value)])
            self._add(self._event(summary=summary, step=record["step"]))
        return len(scalars)

    def _add(self, event: Any) -> None:
        event.wall_time = time.time()
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _new_event_file(folder: Path) -> IO[bytes]:
    """A new event file in ``folder`` (made), named as TensorBoard names them: time first, so
    that the files of one folder sort in the order they were begun."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{EVENT_FILE_PREFIX}{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
    for number in range(NAME_TRIES):
        try:
            return open(folder / f"{stem}.{number}", "xb")  # noqa: SIM115 - closed by _EventFile.close
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"{NAME_TRIES} event files named {stem}.N are there already")


def _open_event_file(folder: Path, purge_from: int | None, *, shown: Path | None = None) -> _EventFile:
    """An event file in ``folder`` (made); ``purge_from``: hide the events at and after this
    step that earlier files of the folder hold. ``shown``: the folder a refusal names (the
    final one, where ``folder`` is its work folder)."""
    try:
        return _EventFile(folder, purge_from)
    except ImportError as err:
        raise ConfigError(
            f"TensorBoard event files need the tensorboard package ({err}): {INSTALL_HINT}"
        ) from None
    except OSError as err:
        raise WriteRefused(
            f"cannot write TensorBoard event files in {shown or folder}: {err.strerror or err}"
        ) from None


def event_files(folder: Path) -> list[Path]:
    try:
        return sorted(
            p for p in folder.iterdir() if p.name.startswith(EVENT_FILE_PREFIX)
        )
    except OSError:
        return []


def check_event_folder(folder: Path) -> Path:
    """Refuse a folder for event files that is a file, lies in a checkpoint folder, or
    holds anything but event files."""
    shown = shorten_middle(str(folder))
    refuse_inside_checkpoint(folder, "TensorBoard event files")
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
    refuse_inside_checkpoint(path, "TensorBoard event files")
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
        events = None
        try:
            events = _open_event_file(self.folder, purge_from)
            self._write_queued(events)
        except MiniGPTError as err:
            self.failure = str(err)
        except Exception as err:  # noqa: BLE001 - a side output (a full disk, say): a failure ends it, never the run
            self.failure = self._cannot(err)
        if self.failure is not None:
            while self._records.get() is not None:  # what comes until close is dropped
                pass
        self._close(events)

    def _write_queued(self, events: _EventFile) -> None:
        """Write each queued record until the closing None; what is written reaches the file
        within FLUSH_SECONDS."""
        due: float | None = None  # when the events written since the last flush must be in the file
        while True:
            wait = None if due is None else max(0.0, due - time.monotonic())
            try:
                record = self._records.get(timeout=wait)
            except queue.Empty:
                record = {}
            if record is None:
                return
            if events.add_record(record) and due is None:
                due = time.monotonic() + FLUSH_SECONDS
            if due is not None and time.monotonic() >= due:
                events.flush()
                due = None

    def _cannot(self, err: Exception) -> str:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        return f"cannot write TensorBoard event files in {self.folder}: {reason}"

    def _close(self, events: _EventFile | None) -> None:
        if events is None:
            return
        try:
            events.close()
        except OSError as err:  # the last flush: a failure already said is not said twice
            self.failure = self.failure or self._cannot(err)


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
        [r for r in current_records(read_metrics_log(run_path).records) if r["step"] <= step]
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
    skipped_lines: int = 0  # damaged lines of metrics.jsonl left out

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "scalars": self.scalars,
            "tags": list(self.tags),
            "first_step": self.first_step,
            "last_step": self.last_step,
            "skipped_lines": self.skipped_lines,
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
    folder's ``tensorboard/``), replacing the event files an earlier export or run left there.
    Damaged lines of the log are skipped and counted."""
    log = read_metrics_log(run_dir)
    records = current_records(log.records)
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
        ours=lambda name: name.startswith(EVENT_FILE_PREFIX),  # a file a user added meanwhile stays
    ) as work:
        events = _open_event_file(work, None, shown=folder)
        try:
            count = sum(events.add_record(record) for record in records)
        finally:
            events.close()
    tags = sorted({tag for record in records for tag, _ in scalars_of(record)})
    steps = [record["step"] for record in records]
    return ExportedScalars(folder, count, tuple(tags), min(steps), max(steps), log.skipped)
