"""Checkpoint directories: saving that loses nothing, verified loading, retention, restore.

A checkpoint is ``checkpoints/step-NNNNNN/`` holding ``model.safetensors``,
``training.safetensors`` and ``manifest.json`` (per-file size and SHA-256). It is written
under a hidden temporary name: each file flushed and fsynced, the manifest written last,
the folder fsynced, then renamed into place and the parent fsynced. A process killed at
any moment therefore leaves either the previous set of checkpoints or the previous set
plus a complete new one; a hidden partial folder never resolves as a checkpoint, and a
folder without a manifest never loads as complete.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt_tui.engine.core.errors import CheckpointError, MiniGPTError, ResumeRefused
from minigpt_tui.engine.core.files import (
    built_then_installed,
    fsync_folder,
    process_alive,
    remove_files_then_folder,
    shorten_middle,
)
from minigpt_tui.engine.core.printable import escape_controls
from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE
from minigpt_tui.engine.formats.portable import (
    MODEL_FILE,
    PortableFile,
    PortablePayload,
    portable_payload,
)
from minigpt_tui.engine.formats.safetensors_read import ExpectedFile
from minigpt_tui.engine.formats.safetensors_write import (
    ProgressHook,
    WrittenFile,
    atomic_write_bytes,
    create_file,
    json_metadata,
    plan_file,
    start_writeback,
    write_data,
    write_header,
)
from minigpt_tui.engine.training.corpus import load_corpus
from minigpt_tui.engine.training.distributed import (
    DataParallel,
    refuse_world_size_change,
    saved_world_size,
    world_size_note,
)
from minigpt_tui.engine.models.model_file import (
    PortableModel,
    copy_into,
    open_model_file,
    portable_model,
)
from minigpt_tui.engine.training.trainer import Trainer, TrainingSetup
from minigpt_tui.engine.training.training_state import (
    CapturedState,
    Continuation,
    TrainingState,
    apply_training_state,
    capture_state,
    check_environment,
    continuation_of,
    read_training_state,
    saved_config,
)

if TYPE_CHECKING:
    from minigpt_tui.engine.training.distributed import DataParallel
    from minigpt_tui.engine.training.stream import Progress
    from minigpt_tui.engine.training.trainer import Trainer

from minigpt_tui.engine.formats.checkpoint_folder import (
    _HIDDEN_WORK,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    STEP_DIR,
    checkpoint_name,
    checkpoint_own_files,
    list_checkpoints,
    read_manifest,
)


@dataclass(frozen=True)
class KeptFolder:
    """A checkpoint folder whose own files were removed but which stays where it is: it
    holds ``names``, files minigpt-tui did not write (a user's notes, say)."""

    folder: Path
    names: tuple[str, ...]

    def line(self) -> str:
        shown = ", ".join(escape_controls(name) for name in self.names[:3])
        more = f" and {len(self.names) - 3} more" if len(self.names) > 3 else ""
        return (f"kept the folder {shorten_middle(escape_controls(str(self.folder)))}: the checkpoint's own files "
                f"were removed, but it holds files minigpt-tui did not write ({shown}{more})")


KeptHook = Callable[[KeptFolder], None]


def _unheard_kept(_kept: KeptFolder) -> None:
    pass


def prune_checkpoints(checkpoints_dir: Path, keep_last: int, best_step: int | None,
                      *, kept: KeptHook = _unheard_kept) -> list[Path]:
    """Keep the last ``keep_last`` complete checkpoints plus the best; remove the others'
    own files (a folder that also holds a user's files stays, and ``kept`` hears of it)."""
    complete = list_checkpoints(checkpoints_dir)
    keep = {info.step for info in complete[-keep_last:]} if keep_last > 0 else set()
    if best_step is not None:
        keep.add(best_step)
    removed = []
    for info in complete:
        if info.step not in keep:
            try:
                left = _remove_checkpoint(info.path)
            except FileNotFoundError:  # already gone (removed by another hand): nothing to prune
                continue
            except OSError as err:
                raise CheckpointError(f"cannot remove the old checkpoint {info.path}: {err.strerror or err}") from None
            removed.append(info.path)
            if left is not None:
                kept(left)
    return removed


def _work_name(final: Path, kind: str) -> Path:
    return final.with_name(f".{final.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _remove_checkpoint(path: Path) -> KeptFolder | None:
    """Rename out of sight first, so a crash mid-removal never leaves a listed half folder;
    then remove the checkpoint's own files (see :func:`_retire`)."""
    trash = _work_name(path, "trash")
    os.rename(path, trash)
    fsync_folder(path.parent)
    return _retire(trash, path)


def _retire(old: Path, home: Path | None) -> KeptFolder | None:
    """Remove a checkpoint folder under a work name file by file: its own files (see
    ``checkpoint_own_files``), then the folder if that empties it. Whatever else it holds
    goes back to ``home``, the checkpoint's own name: the whole folder when nothing is
    there, else entry by entry into the checkpoint now there (None: it stays in ``old``).
    Returns where the user's files are now, or None when there were none."""
    left = remove_files_then_folder(old, checkpoint_own_files(old))
    if not left:
        return None
    if home is None:
        return KeptFolder(old, left)
    if _rename_new(old, home):
        fsync_folder(home.parent)
        return KeptFolder(home, left)
    stayed = tuple(name for name in left if not _rename_new(old / name, home / name))
    if stayed:
        return KeptFolder(old, stayed)
    try:
        os.rmdir(old)
    except OSError:
        pass  # something arrived meanwhile: recover_interrupted looks again next time
    return KeptFolder(home, left)


def recover_interrupted(checkpoints_dir: Path, *, kept: KeptHook = _unheard_kept) -> list[str]:
    """Tidy work folders left by processes that died while saving: partial saves and
    trash lose their own files; a replaced checkpoint whose successor never arrived is put
    back. A user's files found there go back to the checkpoint's name (``kept`` hears)."""
    if not checkpoints_dir.is_dir():
        return []
    actions: list[str] = []
    for child in sorted(checkpoints_dir.iterdir()):
        match = _HIDDEN_WORK.match(child.name)
        if match and not process_alive(int(match.group(3))):
            action = _recover_one(child, checkpoints_dir / match.group(1), match.group(2), kept)
            actions += [action] if action else []
    if actions:
        fsync_folder(checkpoints_dir)
    return actions


def _recover_one(child: Path, final: Path, kind: str, kept: KeptHook) -> str | None:
    """One dead process's work folder tidied: what was done, or None when it is left."""
    if kind == "replaced" and not final.exists():
        os.rename(child, final)
        return f"restored {final.name}"
    try:
        left = _retire(child, None if kind == "partial" else final)
    except OSError:
        return None  # left for the next checkpointer
    if left is None:
        return f"removed {child.name}"
    kept(left)
    return f"kept {left.folder.name}"


def _renameat2(a: Path, b: Path, flags: int) -> int | None:
    """Linux renameat2: 0, or the errno of a failure; None where the call is missing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return None
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return 0
    return ctypes.get_errno()


def _rename_new(source: Path, target: Path) -> bool:
    """Rename ``source`` to ``target`` only where nothing is (False when something is)."""
    rename_noreplace = 1
    failure = _renameat2(source, target, rename_noreplace)
    if failure in (None, errno.ENOSYS, errno.EINVAL):  # no renameat2 here: check, then rename
        if os.path.lexists(target):
            return False
        os.rename(source, target)
        return True
    if failure == errno.EEXIST:
        return False
    if failure:
        raise OSError(failure, os.strerror(failure), str(source))
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    rename_exchange = 2
    return _renameat2(a, b, rename_exchange) == 0


def _install(tmp: Path, final: Path, notify: ProgressHook) -> Path | None:
    """Put a finished folder in place; an existing checkpoint of the same step is replaced
    without a moment where neither is in place (when the kernel can swap). Returns the
    displaced old checkpoint, now under a hidden work name, for the caller to delete once
    the parent folder is fsynced (a crash before that leaves it to recover_interrupted)."""
    if not final.exists():
        os.rename(tmp, final)
        notify("installed")
        return None
    if _exchange(tmp, final):
        notify("installed")
        return tmp  # now the old one
    aside = _work_name(final, "replaced")
    os.rename(final, aside)
    notify("moved-aside")
    os.rename(tmp, final)
    notify("installed")
    return aside


# -- saving -------------------------------------------------------------------------------------
# Stands in for a SHA-256 hex digest in a header planned before the digest is known: the
# final header has the same length, so tensor data can be written at its final offset first.
_DIGEST_PLACEHOLDER = "0" * 64


def _write_checkpoint_files(
    folder: Path, payload: PortablePayload, captured: CapturedState, notify: ProgressHook
) -> tuple[str, WrittenFile, WrittenFile]:
    """Write both files into ``folder``: (model identity, model file, training file).

    Ordered so that the disk and both cores work at once: the tensor data goes to its final
    offsets first (each header planned with placeholder digests of the final length) and
    the kernel starts writing it out while the model identity and the state's content
    digest are computed; then the headers are written, both files are fsynced on helper
    threads while each file's SHA-256 is computed from the same in-memory buffers (nothing
    is read back), and the call returns when all of that is done."""
    model_path, state_path = folder / MODEL_FILE, folder / TRAINING_FILE
    descriptors: list[int] = []
    try:
        # Leaving the pool waits for every helper, so no descriptor closes under one.
        with ThreadPoolExecutor(max_workers=3) as pool:
            content = pool.submit(captured.content_digest)
            model_plan = plan_file(payload.tensors, payload.metadata(_DIGEST_PLACEHOLDER))
            state_plan = plan_file(
                captured.tensors, json_metadata(captured.metadata(_DIGEST_PLACEHOLDER, _DIGEST_PLACEHOLDER))
            )
            model_fd = create_file(model_path)
            descriptors.append(model_fd)
            write_data(model_fd, model_plan, MODEL_FILE, notify)
            start_writeback(model_fd)
            state_fd = create_file(state_path)
            descriptors.append(state_fd)
            write_data(state_fd, state_plan, TRAINING_FILE, notify)
            start_writeback(state_fd)
            identity = payload.identity()
            model_final = model_plan.with_metadata(payload.metadata(identity))
            write_header(model_fd, model_final, MODEL_FILE, notify)
            model_synced = pool.submit(os.fsync, model_fd)
            state_final = state_plan.with_metadata(json_metadata(captured.metadata(identity, content.result())))
            write_header(state_fd, state_final, TRAINING_FILE, notify)
            state_synced = pool.submit(os.fsync, state_fd)
            state_sha256 = pool.submit(state_final.sha256)
            model_file = WrittenFile(model_path, model_final.size, model_final.sha256())
            model_synced.result()
            notify(f"{MODEL_FILE}:fsynced")
            state_synced.result()
            notify(f"{TRAINING_FILE}:fsynced")
            state_file = WrittenFile(state_path, state_final.size, state_sha256.result())
    except OSError as err:
        raise CheckpointError(f"cannot write the checkpoint files in {folder}: {err.strerror or err}") from None
    finally:
        for fd in descriptors:
            os.close(fd)
    return identity, model_file, state_file


def save_checkpoint(
    trainer: "Trainer",
    checkpoints_dir: Path,
    reason: str = "manual",
    *,
    provenance: dict[str, Any] | None = None,
    progress: ProgressHook | None = None,
    kept: KeptHook = _unheard_kept,
) -> Path:
    """Save the trainer's state as ``checkpoints_dir/step-NNNNNN``; returns that path. A
    checkpoint of the same step there is replaced; files a user put in its folder move
    into the new one (``kept`` hears of them)."""
    notify = progress or (lambda _event: None)
    trainer.require_update_boundary()  # refuse before anything touches the disk
    checkpoints_dir = Path(checkpoints_dir)
    final = checkpoints_dir / checkpoint_name(trainer.step)
    failure = f"cannot save in {checkpoints_dir}"
    try:
        checkpoints_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CheckpointError(f"{failure}: {err.strerror or err}") from None
    def retire(displaced: Path) -> None:
        try:
            left = _retire(displaced, final)
        except OSError:
            return  # the new checkpoint is in place; recover_interrupted tidies the old one later
        if left is not None:
            kept(left)

    work = _work_name(final, "partial")
    with built_then_installed(work, final, failure, error=CheckpointError,
                              install=lambda work, target: _install(work, target, notify), notify=notify,
                              ours=checkpoint_own_files(work), retire=retire) as tmp:
        notify("begin")
        origin = {"step": trainer.step, **(provenance or {})}
        payload = portable_payload(trainer.model, trainer.tokenizer, origin)
        captured = capture_state(trainer)
        identity, model_file, state_file = _write_checkpoint_files(tmp, payload, captured, notify)
        manifest = {
            "format": {"name": FORMAT_NAME, "version": FORMAT_VERSION},
            "step": trainer.step,
            "reason": reason,
            "best_step": trainer.best_step,
            "saved_at": time.time(),
            "model_identity": identity,
            "files": {
                MODEL_FILE: {"size": model_file.size, "sha256": model_file.sha256},
                TRAINING_FILE: {"size": state_file.size, "sha256": state_file.sha256},
            },
            **({"provenance": provenance} if provenance else {}),
        }
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        atomic_write_bytes(tmp / MANIFEST, text.encode("utf-8"), progress=notify, atomic=False)
    return final


class Checkpointer:
    """The run controller's checkpointer: saves into ``RUN/checkpoints`` and keeps the last
    ``keep_last`` checkpoints plus the best (``keep_last`` None: the run config's)."""

    def __init__(
        self,
        run_dir: Any,
        keep_last: int | None = None,
        *,
        progress: ProgressHook | None = None,
        run_id: str | None = None,
    ) -> None:
        """``run_dir`` is a run folder or its path; the run's identity (``run_id``, else the
        run folder's own) goes into every checkpoint's provenance."""
        path = Path(getattr(run_dir, "path", run_dir))
        self.run_dir = path
        self.run_id = run_id if run_id is not None else getattr(run_dir, "run_id", None)
        self.checkpoints_dir = path / "checkpoints"
        self.keep_last = keep_last
        self.progress = progress
        self.saved: list[Path] = []
        self.removed: list[Path] = []
        self.kept: list[KeptFolder] = []  # folders kept for a user's files, in the order met
        self._unsaid: list[KeptFolder] = []  # not yet taken by the session
        self._unlogged: list[KeptFolder] = []  # not yet in the run's log
        self._log = getattr(run_dir, "append_metric", None)  # the run's metrics log, when it has one
        self.recovered = recover_interrupted(self.checkpoints_dir, kept=self._keep)

    def save(self, trainer: "Trainer", reason: str) -> Path:
        if not self.run_dir.is_dir():  # never recreate a run folder deleted under a run
            raise CheckpointError(f"cannot save: the run folder {self.run_dir} no longer exists")
        run_id = self.run_id
        path = save_checkpoint(
            trainer,
            self.checkpoints_dir,
            reason,
            provenance={"run": self.run_dir.name, **({"run_id": run_id} if run_id else {})},
            progress=self.progress,
            kept=self._keep,
        )
        self.saved.append(path)
        keep = self.keep_last if self.keep_last is not None else trainer.config.train.keep_last
        self.removed += prune_checkpoints(self.checkpoints_dir, keep, trainer.best_step, kept=self._keep)
        self._record_kept(trainer.step)
        return path

    def _keep(self, folder: KeptFolder) -> None:
        self.kept.append(folder)
        self._unsaid.append(folder)
        self._unlogged.append(folder)

    def _record_kept(self, step: int) -> None:
        """Each folder kept since the last save as a ``note`` record in the run's metrics log."""
        unlogged, self._unlogged = self._unlogged, []
        if self._log is None:
            return
        try:
            for folder in unlogged:
                self._log({"kind": "note", "step": step, "note": folder.line()})
        except MiniGPTError:
            pass  # the checkpoint is saved; the session still shows the note, and its next metric names the fault

    def take_notes(self) -> list[str]:
        """The lines about folders kept since the last call (for the session to show)."""
        lines = [folder.line() for folder in self._unsaid]
        self._unsaid.clear()
        return lines


# -- loading and restoring ----------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedCheckpoint:
    """A verified checkpoint: the model file's weights not yet in any model, and the state."""

    path: Path
    manifest: dict[str, Any]
    model_file: PortableFile
    state: TrainingState

    def portable_model(self) -> PortableModel:
        """The weights as a model of their own, built through the constructor (eval mode)."""
        return portable_model(self.model_file)


def checkpoint_folder(path: Path | str) -> Path:
    path = Path(path)
    if path.is_file() and path.name in (MODEL_FILE, TRAINING_FILE, MANIFEST):
        return path.parent
    return path


_MALFORMED = (KeyError, TypeError, AttributeError, ValueError, IndexError)


def load_checkpoint(folder: Path | str, *, recompute_digests: bool = True) -> LoadedCheckpoint:
    """Read and verify a checkpoint folder: every file against the manifest's size and
    SHA-256, formats, and that the two files belong together (same model identity, same
    tokenizer). ``recompute_digests`` (the default) also recomputes the model identity and
    the state's content digest from the tensors, so that weights edited under a re-signed
    manifest are refused; only the benchmark turns it off, to measure what it costs.
    Changes nothing on disk."""
    try:
        return _load_checkpoint(folder, recompute_digests)
    except _MALFORMED as err:
        raise CheckpointError(f"{folder}: malformed checkpoint ({type(err).__name__}: {err})") from None


def _load_checkpoint(folder: Path | str, recompute_digests: bool) -> LoadedCheckpoint:
    folder = checkpoint_folder(folder)
    manifest = read_manifest(folder)
    for name in (MODEL_FILE, TRAINING_FILE):
        if name not in manifest["files"]:
            raise CheckpointError(f"{folder / MANIFEST}: does not list {name}")
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder}: {name} is missing")
    record = manifest["files"][TRAINING_FILE]
    with ThreadPoolExecutor(max_workers=1) as pool:  # read and hash both files side by side
        pending_state = pool.submit(
            read_training_state,
            folder / TRAINING_FILE,
            ExpectedFile(record["size"], record["sha256"], str(folder / MANIFEST)),
            verify_content=recompute_digests,
        )
        model = open_model_file(folder / MODEL_FILE, verify_identity=recompute_digests)
        state = pending_state.result()
    if state.step != manifest["step"]:
        raise CheckpointError(f"{folder}: the manifest says step {manifest['step']}, the training state {state.step}")
    match = STEP_DIR.match(folder.name)
    if match and int(match.group(1)) != state.step:
        raise CheckpointError(f"{folder}: the folder is named for step {int(match.group(1))} but holds step {state.step}")
    if model.tokenizer.identity != state.identities.get("tokenizer"):
        raise ResumeRefused(
            f"{folder}: the tokenizer in {MODEL_FILE} is not the one this run was trained with "
            f"(vocabulary {model.tokenizer.vocab_size}; identity differs)"
        )
    if model.identity != state.identities.get("model") or model.identity != manifest.get("model_identity"):
        raise ResumeRefused(f"{folder}: {MODEL_FILE} holds a different model than the training state was saved with")
    return LoadedCheckpoint(folder, manifest, model, state)


def restore_trainer(
    checkpoint_dir: Path | str,
    *,
    allow_environment_change: bool = False,
    corpus_path_override: Path | str | None = None,
    policy_overrides: dict[str, int] | None = None,
    parallel: "DataParallel | None" = None,
    allow_world_size_change: bool = False,
    device: str | None = None,
    progress: "Progress | None" = None,
) -> "Trainer":
    """A trainer whose next update is bitwise the one the saved run would have done.

    ``parallel``: this process's rank among several (each rank restores its own streams);
    a world size other than the saved one is refused unless ``allow_world_size_change``.
    ``device``: run on this device instead of the saved config's (a changed device kind is
    an environment change). ``progress`` hears about encoding and cache writing (stream
    mode, when the token cache lacks the corpus).

    Refuses (ResumeRefused), before building anything mutable, a changed corpus,
    tokenizer, config or model identity, and in exact precision a changed environment
    unless ``allow_environment_change`` (then bitwise continuation is no longer promised,
    and later checkpoints say so). The caller applies the precision settings
    (``apply_precision``) before running updates, as for a new run.
    """
    try:
        return _restore_trainer(checkpoint_dir, allow_environment_change, corpus_path_override, policy_overrides,
                                parallel, allow_world_size_change, device, progress)
    except _MALFORMED as err:
        raise CheckpointError(f"{checkpoint_dir}: malformed checkpoint ({type(err).__name__}: {err})") from None


def _restore_trainer(
    checkpoint_dir: Path | str,
    allow_environment_change: bool,
    corpus_path_override: Path | str | None,
    policy_overrides: dict[str, int] | None,
    parallel: "DataParallel | None" = None,
    allow_world_size_change: bool = False,
    device: str | None = None,
    progress: "Progress | None" = None,
) -> "Trainer":

    parallel = parallel or DataParallel()
    loaded = load_checkpoint(checkpoint_dir)
    state = loaded.state
    config = saved_config(state)
    if device is not None:
        config = config.replace(train={"device": device})
    saved_world = saved_world_size(state.tensors)
    refuse_world_size_change(saved_world, parallel.world_size, allowed=allow_world_size_change)
    if config.model != loaded.model_file.config:
        raise ResumeRefused(f"{loaded.path}: the model config in {MODEL_FILE} differs from the run's config")
    if loaded.model_file.dtype != config.train.precision_kind.stored_dtype:
        raise ResumeRefused(f"{loaded.path}: the weights' dtype does not match the run's {config.train.precision} precision")
    continuation = check_environment(state, config, allow_change=allow_environment_change)
    if corpus_path_override is not None:
        config = config.replace(corpus={"source": str(Path(corpus_path_override).expanduser().resolve())})
    if policy_overrides:
        unknown = set(policy_overrides) - {"save_every", "keep_last"}
        if unknown:
            raise CheckpointError(f"only the checkpoint policy may change on resume, not {sorted(unknown)}")
        config = config.replace(train=dict(policy_overrides))
    corpus = load_corpus(config.corpus)
    if corpus.identity != state.identities.get("corpus"):
        raise ResumeRefused(
            f"the corpus changed since saving ({config.corpus.source}: identity {corpus.identity[:12]}…, "
            f"saved {str(state.identities.get('corpus'))[:12]}…)"
        )
    setup = TrainingSetup(config, corpus, loaded.model_file.tokenizer, progress=progress)
    trainer = Trainer(setup, parallel=parallel)
    copy_into(loaded.model_file, trainer.model)
    apply_training_state(trainer, state)  # each rank takes its own streams (state_parts.RanksPart)
    note = world_size_note(saved_world, parallel.world_size, state.step)
    if note is not None:
        continuation = Continuation(False, continuation.notes + (note,))
    trainer.checkpoint_continuation = continuation  # type: ignore[attr-defined]
    return trainer


def continuation_record(trainer: "Trainer") -> dict[str, Any]:
    """Whether the trainer's run may still promise bitwise continuation, and why not."""
    return continuation_of(trainer).to_json()
