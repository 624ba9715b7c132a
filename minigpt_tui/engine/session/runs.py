"""The runs directory: one folder per run with its resolved config, identities, metrics
and checkpoints. The default location is platformdirs' user data dir; ``--runs-dir`` or
the ``MINIGPT_TUI_RUNS_DIR`` environment variable override it."""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from minigpt_tui.engine.core.errors import (
    CheckpointError,
    ConfigError,
    ResumeRefused,
    RunLocked,
    WriteRefused,
)
from minigpt_tui.engine.core.files import (
    append_line,
    make_folder,
    path_exists,
    process_alive,
    removed_on_failure,
    require_file_or_folder,
    require_regular_file,
    write_file,
)
from minigpt_tui.engine.formats.checkpoint_folder import (
    MANIFEST,
    STEP_DIR,
    best_checkpoint,
    checkpoint_name,
    latest_checkpoint,
    latest_in_folder,
    list_checkpoints,
    read_manifest,
)
from minigpt_tui.engine.session.model_spec import RUN_NAME, ModelSpec, SpecKind, as_spec

ENV_RUNS_DIR = "MINIGPT_TUI_RUNS_DIR"
RUN_FILE = "run.json"  # the run's identity: written once, when the folder is made
LOCK_FILE = ".lock"  # held (flock) by the one process writing to the run


def default_runs_dir() -> Path:
    env = os.environ.get(ENV_RUNS_DIR)
    if env:
        return Path(env).expanduser()

    return platformdirs.user_data_path("minigpt-tui", appauthor=False) / "runs"


def resolve_runs_dir(runs_dir: str | Path | None) -> Path:
    path = Path(runs_dir).expanduser() if runs_dir else default_runs_dir()
    if path_exists(path) and not path.is_dir():
        raise ConfigError(f"the runs directory {path} is not a folder")
    return path


def check_run_name(name: str) -> str:
    if not RUN_NAME.match(name):
        raise ConfigError(
            f"invalid run name '{name}': use letters, digits, '.', '_' or '-' (at most 100)", field="name"
        )
    return name


@dataclass(frozen=True)
class RunDirectory:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @staticmethod
    def create(
        runs_dir: Path, name: str | None, preset: str, files: dict[str, Any] | None = None
    ) -> "RunDirectory":
        """A new run folder holding its identity (``run.json``) and ``files`` (name: JSON
        data). It is made under a hidden name and renamed into place once every file is
        written, so a failure leaves no half-made run behind."""
        runs_dir = Path(runs_dir)
        make_folder(runs_dir, what="runs directory")
        if name is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            base = f"{preset}-{stamp}"
            name, n = base, 1
            while path_exists(runs_dir / name):
                n += 1
                name = f"{base}-{n}"
        check_run_name(name)
        path = runs_dir / name
        if path_exists(path):
            raise ConfigError(f"run '{name}' already exists in {runs_dir}")
        work = runs_dir / f".{name}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with removed_on_failure(work, f"cannot create the run folder {path}"):
            work.mkdir()
            (work / LOCK_FILE).touch()
            staged = RunDirectory(work)
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            staged.write_json(RUN_FILE, {"run_id": uuid.uuid4().hex, "name": name, "created_at": created})
            for filename, data in (files or {}).items():
                staged.write_json(filename, data)
            os.rename(work, path)
        return RunDirectory(path)

    @property
    def run_id(self) -> str | None:
        """The identity written when the folder was made (None: a run from before run ids)."""
        try:
            data = json.loads((self.path / RUN_FILE).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        run_id = data.get("run_id") if isinstance(data, dict) else None
        return run_id if isinstance(run_id, str) else None

    def write_json(self, filename: str, data: Any) -> None:
        write_file(self.path / filename, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"),
                   replace=True, what="run file")

    def read_json(self, filename: str) -> Any:
        return json.loads((self.path / filename).read_text("utf-8"))

    def append_metric(self, record: dict[str, Any]) -> None:
        append_line(self.metrics_path, json.dumps(record, sort_keys=True))

    def lock(self) -> "RunLock":
        """Hold the run for this process (see :func:`lock_run`)."""
        return lock_run(self.path)

    def metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        out = []
        for line in self.metrics_path.read_text("utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line after a crash: keep what precedes it
        return out


class RunLock:
    """An advisory lock on ``RUN/.lock`` (``flock``): one process writes to a run at a time.
    The kernel drops it when the process ends, however it ends, so a lock left by a dead
    process is stale by construction and the next writer simply takes it. Taking the lock
    writes nothing (a refused command changes nothing on disk); once the run really starts,
    :meth:`announce` writes the holder into the file for the refusal message, and release
    empties it again."""

    def __init__(self, run_path: Path, fd: int) -> None:
        self.run_path = run_path
        self._fd: int | None = fd
        self._announced = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def announce(self) -> None:
        """Name this process in the lock file (called when the run starts writing)."""
        if self._fd is None or self._announced:
            return
        holder = {"pid": os.getpid(), "since": time.time()}
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, (json.dumps(holder) + "\n").encode(), 0)
            self._announced = True
        except OSError:
            pass  # the lock holds without its description

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self._announced:
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
            finally:
                os.close(fd)

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_run(run_path: Path | str) -> RunLock:
    """Take the run's lock, or refuse in one line naming the process that holds it. The
    other processes of a several-process run hold locks of their own (``.lock-rank-N``,
    see :func:`lock_rank`): while any of them lives, the run is held too."""
    run_path = Path(run_path)
    lock = _take_lock(run_path, LOCK_FILE)
    try:
        _refuse_if_a_rank_lives(run_path)
    except BaseException:
        lock.release()
        raise
    return lock


def _in_use(run_path: Path, fd: int) -> RunLocked:
    """The refusal for a run whose lock (open as ``fd``) another process holds."""
    return RunLocked(f"run '{run_path.name}' is in use by {_holder_text(fd)}: one process writes to a run at a "
                     "time; wait for it to finish or stop it")


def refuse_if_in_use(checkpoint: Path | str) -> None:
    """Refuse in one line (RunLocked, naming the holder) a checkpoint folder of a run that
    another process is writing: that process saves and prunes its checkpoints at any
    moment, so whatever resolved a moment ago may be gone when it is read. Only looks:
    takes no lock and writes nothing."""
    parent = Path(checkpoint).parent
    run_path = parent.parent
    if parent.name != "checkpoints" or not (run_path / "config.json").is_file():
        return
    try:
        fd = os.open(run_path / LOCK_FILE, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        fd = None  # no lock file: no process holds the run
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # refused while a writer holds it
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            raise _in_use(run_path, fd) from None
        except OSError:
            pass
        finally:
            os.close(fd)
    _refuse_if_a_rank_lives(run_path)


def lock_rank(run_path: Path | str, rank: int) -> RunLock:
    """The lock rank ``rank`` (> 0) of a several-process run holds on the run rank 0 writes."""
    lock = _take_lock(Path(run_path), f"{LOCK_FILE}-rank-{rank}")
    lock.announce()
    return lock


def _take_lock(run_path: Path, name: str) -> RunLock:
    lock_path = run_path / name
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        raise WriteRefused(f"cannot lock the run {run_path}: {err.strerror or err}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        refusal = _in_use(run_path, fd)
        os.close(fd)
        raise refusal from None
    except OSError as err:
        os.close(fd)
        raise WriteRefused(f"cannot lock the run {run_path}: {err.strerror or err}") from None
    return RunLock(run_path, fd)


def _refuse_if_a_rank_lives(run_path: Path) -> None:
    for path in sorted(run_path.glob(f"{LOCK_FILE}-rank-*")):
        try:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            rank = path.name.rsplit("-", 1)[-1]
            raise RunLocked(
                f"run '{run_path.name}' is still in use by {_holder_text(fd)} (process {rank} of a several-process "
                "run): wait for it to end"
            ) from None
        except OSError:
            pass
        finally:
            os.close(fd)


def _holder_text(fd: int) -> str:
    """Who holds the lock: as the holder announced itself in the file, or (while it is
    still loading, before it announces) the process that has the lock file open."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        pid = int(data["pid"])
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(data["since"])))
        if process_alive(pid):  # not the description left by a holder that was killed
            return f"process {pid} (since {since})"
    except (OSError, ValueError, KeyError, TypeError, OverflowError):
        pass
    pid = _process_with_open(os.fstat(fd))
    return f"process {pid}" if pid is not None else "another process"


def _process_with_open(target: os.stat_result) -> int | None:
    """Another process that has the file ``target`` open (Linux ``/proc/PID/fd``)."""
    try:
        pids = sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    except OSError:
        return None
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            for link in Path(f"/proc/{pid}/fd").iterdir():
                info = link.stat()
                if (info.st_ino, info.st_dev) == (target.st_ino, target.st_dev):
                    return pid
        except OSError:
            continue
    return None


def owning_run(folder: Path, *, fork: bool = False) -> RunDirectory | None:
    """The run a resume from ``folder`` continues (None: a new run folder, for a loose
    checkpoint or with ``fork``). A checkpoint inside ``RUN/checkpoints/`` continues RUN
    only when both record the same run identity; one copied into another run's folder is
    refused unless ``fork``."""
    parent = Path(folder).parent
    if fork or parent.name != "checkpoints" or not (parent.parent / "config.json").is_file():
        return None
    run = RunDirectory(parent.parent)
    provenance = read_manifest(Path(folder)).get("provenance") or {}
    saved_id = provenance.get("run_id") if isinstance(provenance, dict) else None
    if saved_id != run.run_id:
        raise ResumeRefused(
            f"{folder} was saved by another run than '{run.name}' (run identity "
            f"{str(saved_id)[:12]} vs {str(run.run_id)[:12]}): resuming would append to the wrong history; "
            "add --fork to continue it in a new run folder"
        )
    return run


def list_runs(runs_dir: Path) -> list[RunDirectory]:
    """The runs of ``runs_dir`` by name; a folder that cannot be read is left out."""
    return run_folders(runs_dir)[0]


def run_folders(runs_dir: Path) -> tuple[list[RunDirectory], list[tuple[Path, OSError]]]:
    """The runs of ``runs_dir`` by name, and the folders that could not be read (one
    unreadable folder never hides the others), each with its error."""
    if not runs_dir.is_dir():
        return [], []
    runs, unreadable = [], []
    for path in runs_dir.iterdir():
        try:
            if path.is_dir() and (path / "config.json").exists():
                runs.append(RunDirectory(path))
        except OSError as err:  # a folder whose contents may not be listed (mode 000, a stale mount)
            unreadable.append((path, err))
    return sorted(runs, key=lambda r: r.name), sorted(unreadable, key=lambda item: item[0].name)


def disk_use(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _steps_held(steps: list[int]) -> str:
    """The steps a run has checkpoints at, for a refusal: all of a few, the ends of many."""
    if not steps:
        return "it has none"
    if len(steps) <= 8:
        return "its checkpoints: " + ", ".join(str(step) for step in steps)
    shown = ", ".join(str(step) for step in steps[:3])
    return f"its checkpoints: {shown}, …, {steps[-1]} ({len(steps)} in all)"


def checkpoint_target(spec: ModelSpec | str, runs_dir: Path | None = None) -> Path:
    """What a typed path or ``RUN``/``RUN:latest|best|STEP`` names, for inspection: an
    existing path as it is (a file of any kind, a folder), else the run's checkpoint."""
    spec = as_spec(spec, runs_dir)
    if spec.kind is not SpecKind.RUN:
        return spec.path
    return _checkpoint_of_run(spec)


def resolve_checkpoint(spec: ModelSpec | str, runs_dir: Path | None = None) -> Path:
    """A checkpoint folder from ``RUN:latest``, ``RUN:best``, ``RUN:STEP``, a run name (its
    latest), a run folder, a checkpoint folder, or a file inside one; a text spec is parsed
    against ``runs_dir``."""
    return _checkpoint(as_spec(spec, runs_dir))


def _checkpoint(spec: ModelSpec) -> Path:
    """The checkpoint a parsed spec names: a run's, or the one an existing path holds."""
    if spec.kind is SpecKind.RUN:
        return _checkpoint_of_run(spec)
    return _checkpoint_at_path(spec)


def _checkpoint_at_path(spec: ModelSpec) -> Path:
    """The checkpoint an existing path names: a checkpoint folder, the folder of a file in
    one, or a folder's latest checkpoint; refused in one line otherwise."""
    path = spec.path
    require_file_or_folder(path, "a checkpoint")
    if path.is_file():
        if (path.parent / MANIFEST).exists() or STEP_DIR.match(path.parent.name):
            return path.parent
        raise CheckpointError(f"{path} is a file; a checkpoint is a folder with {MANIFEST}")
    if (path / MANIFEST).exists() or STEP_DIR.match(path.name):
        return path
    latest = latest_in_folder(path)
    if latest is not None:
        return latest
    from minigpt_tui.engine.formats.hf_import import (  # deferred: off the first frame
        conversion_refusal,
    )

    if spec.kind is SpecKind.TRANSFORMERS:
        refusal = conversion_refusal(path)  # suggest convert only where it works
        way = (f"'minigpt-tui convert --hf {path} --out model.safetensors' makes a model file of it"
               if refusal is None else f"convert refuses it ({refusal})")
        raise CheckpointError(f"{path} is a transformers model folder, not a checkpoint: inspect shows it, and {way}")
    raise CheckpointError(f"{path} holds no complete checkpoint")


def _checkpoint_of_run(spec: ModelSpec) -> Path:
    """The checkpoint ``RUN[:latest|best|STEP]`` names (the run exists: parsing checked it)."""
    checkpoints = RunDirectory(spec.path).checkpoints
    if spec.which == "latest":
        latest = latest_checkpoint(checkpoints)
        if latest is None:
            raise CheckpointError(f"run '{spec.run}' has no complete checkpoint")
        return latest
    if spec.which == "best":
        return best_checkpoint(checkpoints)
    return _checkpoint_at_step(spec, checkpoints)


def _checkpoint_at_step(spec: ModelSpec, checkpoints: Path) -> Path:
    """The run's complete checkpoint at the step ``spec`` names (``RUN:STEP``, ``RUN:step-STEP``)."""
    wanted = checkpoints / checkpoint_name(spec.step)
    listed = list_checkpoints(checkpoints)
    if any(info.path == wanted for info in listed):
        return wanted
    raise CheckpointError(f"run '{spec.run}' has no complete checkpoint at step {spec.step} "
                          f"({_steps_held([info.step for info in listed if info.complete])})")


def resolve_model_file(spec: ModelSpec | str, runs_dir: Path | None = None) -> Path:
    """A ``model.safetensors`` path from a model file, a checkpoint folder or a run spec; a
    text spec is parsed against ``runs_dir``."""
    spec = as_spec(spec, runs_dir)
    if spec.kind is not SpecKind.RUN and not spec.path.is_dir():
        return require_regular_file(spec.path, "a model file")
    return _checkpoint(spec) / "model.safetensors"
