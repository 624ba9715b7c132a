"""Files the product reads and writes, handled one way everywhere.

Reading: an input is opened only when it is a regular file (or a folder where a folder is
expected); a FIFO, a device, a socket or a symlink loop is refused before anything blocks.
Writing: every file goes through :func:`write_file`: an existing path is refused unless
``replace`` (a user's ``--force``, or the product's own run files), anything that is not a
regular file is refused even then, the bytes go to a temporary name in the same folder,
flushed and fsynced, and are renamed into place; every OS error becomes one line naming
the file. :func:`append_line` is the one way a line is added to a log.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from minigpt_tui.engine.core.errors import InputRefused, WriteRefused
from minigpt_tui.engine.core.printable import escape_controls

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _stat_input(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except FileNotFoundError:
        raise InputRefused(f"file not found: {path}") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputRefused(f"{path}: a symbolic link loop") from None
        if err.errno == errno.ENAMETOOLONG:
            raise InputRefused(f"{str(path)[:60]}…: the path is too long") from None
        raise InputRefused(f"cannot read {path}: {err.strerror or err}") from None


def require_regular_file(path: Path | str, what: str = "a file") -> Path:
    """``path`` when it names a regular file (after symlinks); one line otherwise."""
    path = Path(path)
    mode = _stat_input(path).st_mode
    if stat.S_ISDIR(mode):
        raise InputRefused(f"{path} is a directory, not {what}")
    if not stat.S_ISREG(mode):
        raise InputRefused(f"{path} is {_kind_of(mode)}, not {what}: refused before reading")
    return path


def require_file_or_folder(path: Path | str, what: str) -> Path:
    """``path`` when it names a regular file or a folder; one line otherwise."""
    path = Path(path)
    mode = _stat_input(path).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise InputRefused(f"{path} is {_kind_of(mode)}, not {what}: refused before reading")
    return path


def path_exists(path: Path | str) -> bool:
    """Whether a directory entry named ``path`` exists (a broken link or a link loop counts,
    so that the caller goes on to name the problem); never raises for a name too long."""
    try:
        os.lstat(path)
    except (OSError, ValueError):
        return False
    return True


def _unique_temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial-{os.getpid()}-{os.urandom(4).hex()}")


REPLACE_WITH_FORCE = "add --force to replace it"


def _existing_entry(path: Path) -> os.stat_result | None:
    """What is at ``path`` itself (a link is not followed); None when nothing is."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise WriteRefused(f"cannot write {shorten_middle(str(path))}: {err.strerror or err}") from None


def _entry_kind(info: os.stat_result) -> str:
    mode = info.st_mode
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else
            "a file" if stat.S_ISREG(mode) else _kind_of(mode))


def check_writable_target(path: Path | str, *, replace: bool = False, what: str = "output",
                          how_to_replace: str | None = REPLACE_WITH_FORCE) -> Path:
    """Refuse an output path before any work is done: an existing one without ``replace``
    (the refusal says ``how_to_replace`` where there is a way), one that is not a regular
    file, or one whose folder does not exist."""
    path = Path(path).expanduser()
    info = _existing_entry(path)
    if info is not None:
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            kind = _entry_kind(info)
            raise WriteRefused(f"{path} is {kind}: the {what} is written only to a regular file or a new path")
        if not replace:
            way = f" or {how_to_replace}" if how_to_replace else ""
            raise WriteRefused(f"{path} already exists: choose a new path{way}")
    parent = path.parent
    if not parent.is_dir():
        raise WriteRefused(f"cannot write {path}: the folder {parent} does not exist")
    return path


def write_file(path: Path | str, data: bytes, *, replace: bool = False, what: str = "output",
               how_to_replace: str | None = REPLACE_WITH_FORCE) -> Path:
    """Write ``data`` as ``path``: checked as :func:`check_writable_target` says, under a
    temporary name in the same folder, flushed, fsynced, renamed into place, the folder
    fsynced. Nothing is left behind on failure; the error is one line naming the file."""
    path = check_writable_target(path, replace=replace, what=what, how_to_replace=how_to_replace)
    tmp = _unique_temporary(path)
    with removed_on_failure(tmp, f"cannot write {path}"):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            view = memoryview(data)
            while view.nbytes:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if not replace and os.path.lexists(path):  # appeared while we wrote: never clobber it
            raise FileExistsError(errno.EEXIST, "it appeared while writing")
        os.replace(tmp, path)
        fsync_folder(path.parent)
    return path


def every_name(_name: str) -> bool:
    """Whose files a work folder holds by default: ours (its unique hidden name was made here)."""
    return True


def remove_files_then_folder(folder: Path, ours: Callable[[str], bool] = every_name) -> tuple[str, ...]:
    """Remove the files (and links) in ``folder`` whose names ``ours`` claims, then
    ``folder`` itself when that leaves it empty. Never recursive: a folder inside, or a
    name ``ours`` does not claim, stays, and so does ``folder`` around it. Returns the
    names left, sorted (none: ``folder`` is gone; a folder already gone leaves none).
    OS errors other than a name already gone are raised."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return ()
    left = []
    for entry in entries:
        if ours(entry.name) and not entry.is_dir(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
        else:
            left.append(entry.name)
    if left:
        return tuple(sorted(left))
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        return tuple(sorted(os.listdir(folder)))  # something arrived meanwhile: it stays
    return ()


def discard_work(work: Path, ours: Callable[[str], bool] = every_name) -> None:
    """Best-effort clean-up of a work file or folder of ours (see
    :func:`remove_files_then_folder`); what cannot be removed stays."""
    if work.is_dir() and not work.is_symlink():
        try:
            remove_files_then_folder(work, ours)
        except OSError:
            pass
    else:
        _discard(work)


@contextmanager
def removed_on_failure(work: Path, failure: str, *, error: type[Exception] = WriteRefused,
                       ours: Callable[[str], bool] = every_name) -> Iterator[None]:
    """Remove ``work`` (a temporary file, or a folder: the files in it ``ours`` claims, then
    the folder if that empties it) when the block fails; an OS error becomes one line,
    ``failure: reason``, raised as ``error``."""
    try:
        yield
    except BaseException as err:
        discard_work(work, ours)
        if isinstance(err, OSError):
            raise error(f"{failure}: {err.strerror or err}") from None
        raise


def install_new(work: Path, final: Path) -> None:
    """Rename ``work`` to ``final`` where nothing is: a path that appeared there while the
    work was written is never replaced."""
    if os.path.lexists(final):
        raise FileExistsError(errno.EEXIST, "it appeared while writing")
    os.replace(work, final)


def _unheard(_event: str) -> None:
    pass


@contextmanager
def built_then_installed(
    work: Path,
    final: Path,
    failure: str,
    *,
    error: type[Exception] = WriteRefused,
    install: Callable[[Path, Path], Path | None] = install_new,
    notify: Callable[[str], None] = _unheard,
    ours: Callable[[str], bool] = every_name,
    retire: Callable[[Path], object] | None = None,
) -> Iterator[Path]:
    """A folder built under the hidden name ``work`` beside ``final``, then put in place:
    ``work`` is made, the block writes its files there; when the block ends the folder is
    fsynced, ``install`` renames it to ``final`` (by default only where nothing is) and the
    parent is fsynced, so a process killed at any moment leaves ``final`` whole or as it
    was. A folder ``install`` displaced (it returns it under a work name) is removed last,
    unsynced: the new one is durable already. On any failure ``work`` is removed and an OS
    error becomes one line, ``failure: reason``, raised as ``error``. ``notify`` hears
    ``folder-fsynced`` and ``parent-fsynced``. Removing a folder removes only the files
    ``ours`` claims (then the folder, if empty); ``retire`` (default: that) disposes of a
    displaced folder."""
    with removed_on_failure(work, failure, error=error, ours=ours):
        work.mkdir()
        yield work
        fsync_folder(work)
        notify("folder-fsynced")
        displaced = install(work, final)
        fsync_folder(final.parent)
        notify("parent-fsynced")
    if displaced is not None:
        (retire or (lambda old: discard_work(old, ours)))(displaced)


def append_line(path: Path | str, line: str) -> None:
    """Append one line (a newline is added) to a log file, created if missing; one-line error."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise WriteRefused(f"{path} is {_kind_of(info.st_mode)}: refusing to append to it")
            view = memoryview((line + "\n").encode("utf-8"))
            while view.nbytes:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as err:
        raise WriteRefused(f"cannot write {path}: {err.strerror or err}") from None


def make_folder(path: Path | str, *, what: str = "folder") -> Path:
    """``mkdir -p`` with one-line errors (a file in the way, a read-only parent, ...)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise WriteRefused(f"cannot use {path} as the {what}: it is a file, not a folder") from None
    except OSError as err:
        raise WriteRefused(f"cannot create the {what} {path}: {err.strerror or err}") from None
    if not path.is_dir():
        raise WriteRefused(f"cannot use {path} as the {what}: it is not a folder")
    return path


def fsync_folder(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def read_small_file(path: Path | str, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes. It is opened without
    blocking (a FIFO never hangs the reader), checked on the open descriptor (a link to
    ``/dev/zero`` is a device, not a file) and read to ``limit + 1`` bytes at most, so a
    file that grows while it is read is refused too. Failures are :class:`InputRefused`."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputRefused(f"file not found: {shorten_middle(str(path))}") from None
    except OSError as err:
        raise InputRefused(f"cannot read {shorten_middle(str(path))}: {err.strerror or err}") from None
    try:
        return _read_descriptor(fd, path, limit, what)
    except OSError as err:
        raise InputRefused(f"cannot read {shorten_middle(str(path))}: {err.strerror or err}") from None
    finally:
        os.close(fd)


def _read_descriptor(fd: int, path: Path, limit: int, what: str) -> bytes:
    """The bytes behind an open descriptor of ``path``: a regular file of at most ``limit``
    bytes, checked before reading and again as it is read."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise InputRefused(f"{shorten_middle(str(path))} is {_kind_of(info.st_mode)}, not {_a(what)}: refused before reading")
    if info.st_size > limit:
        raise InputRefused(f"{shorten_middle(str(path))} holds {info.st_size:,} bytes, more than {_a(what)} may ({limit:,})")
    chunks, total = [], 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise InputRefused(f"{shorten_middle(str(path))} grew past the {limit:,} bytes {_a(what)} may hold")
    return b"".join(chunks)


def _a(what: str) -> str:
    """``what`` with its article: callers name a kind with one ("a chat template") or without."""
    return what if what.startswith(("a ", "an ")) else f"a {what}"


def shorten_middle(text: str, limit: int = 160) -> str:
    """``text`` cut in the middle to at most ``limit`` characters, for an error line: a
    path keeps its start and its file name (``session.display.shorten`` keeps the start only)."""
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return f"{text[:keep]}…{text[-keep:]}"


def os_error_line(err: OSError) -> str:
    """An operating-system failure as one line naming the path (shortened when long) and
    the reason: "cannot use /tmp/aaa…aaa: File name too long"."""
    reason = err.strerror or type(err).__name__
    names = [str(name) for name in (err.filename, err.filename2) if name is not None]
    if not names:
        return f"{reason}"
    shown = " → ".join(shorten_middle(escape_controls(name), 120) for name in names)
    return f"cannot use {shown}: {reason}"


def check_new_output(path: Path | str, what: str = "--out") -> Path:
    """A new output path, refused in one line before any work when anything is there (a
    file, a folder even if empty, a symbolic link even if dangling), when its folder does
    not exist, or when it lies inside a checkpoint folder (checkpoints hold their own files
    only). Stale work files of earlier writes to it whose process died are reclaimed."""
    path = Path(path).expanduser()
    shown = shorten_middle(str(path))
    info = _existing_entry(path)
    if info is not None:
        raise WriteRefused(f"{shown} already exists ({_entry_kind(info)}); choose a new {what}: nothing is overwritten")
    parent = path.parent
    if not parent.is_dir():
        raise WriteRefused(f"cannot write {shown}: the folder {shorten_middle(str(parent))} does not exist")
    refuse_inside_checkpoint(path, what)
    reclaim_stale_work(path)
    return path


# A checkpoint folder's own files and the folder that holds checkpoints, as the checkpoint
# format names them (formats.checkpoint_folder, formats.portable); repeated here because the
# rule for users' outputs sits below the formats.
CHECKPOINT_FILES = ("manifest.json", "model.safetensors", "training.safetensors")
CHECKPOINTS_FOLDER = "checkpoints"
_CHECKPOINT_FOLDER_NAME = re.compile(r"\.?step-\d{6,}(?:\..*)?")


def is_checkpoint_folder(folder: Path) -> bool:
    """Whether ``folder`` is a checkpoint folder: one of a run's (``checkpoints/step-N``, or
    the hidden work name of one being saved or removed), or any folder holding a manifest
    beside a model or training file (a checkpoint copied elsewhere)."""
    if folder.parent.name == CHECKPOINTS_FOLDER and _CHECKPOINT_FOLDER_NAME.fullmatch(folder.name):
        return True
    manifest, *files = CHECKPOINT_FILES
    return os.path.isfile(folder / manifest) and any(os.path.isfile(folder / name) for name in files)


def enclosing_checkpoint(path: Path | str) -> Path | None:
    """The checkpoint folder ``path`` is (or lies) in, links followed, or None."""
    try:
        resolved = Path(os.path.realpath(Path(path).expanduser()))
    except (OSError, ValueError):
        return None
    return next((folder for folder in (resolved, *resolved.parents) if is_checkpoint_folder(folder)), None)


def refuse_inside_checkpoint(path: Path | str, what: str = "output") -> None:
    """The one rule for every output a user names (``--out``, ``--trace-out``,
    ``--tensorboard``, the app's saves): nothing is written inside a checkpoint folder,
    whose files retention removes and whose contents minigpt-tui alone writes. Refused in
    one line naming the path and the folder, before any work."""
    folder = enclosing_checkpoint(path)
    if folder is not None:
        raise WriteRefused(f"{shorten_middle(str(path))} is inside the checkpoint folder "
                           f"{shorten_middle(str(folder))}; choose another place for the {what} "
                           "(a checkpoint holds its own files only)")


def check_user_output(path: Path | str, *, replace: bool = False, what: str = "output",
                      how_to_replace: str | None = REPLACE_WITH_FORCE) -> Path:
    """A file a user asked for (``--trace-out``, ``--out`` of a report, the app's trace):
    checked as :func:`check_writable_target` says and refused inside a checkpoint folder."""
    path = check_writable_target(path, replace=replace, what=what, how_to_replace=how_to_replace)
    refuse_inside_checkpoint(path, what)
    return path


def work_path(path: Path) -> Path:
    """The hidden work name a write to ``path`` uses until it is renamed into place."""
    return path.with_name(f".{path.name}.partial-{os.getpid()}-{os.urandom(4).hex()}")


def reclaim_stale_work(path: Path) -> None:
    """Remove work files and folders of writes to ``path`` whose process is gone (a kill -9)."""
    pattern = re.compile(re.escape(f".{path.name}.partial-") + r"(\d+)(?:-[0-9a-f]{8})?")
    try:
        candidates = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    except OSError:
        return
    for candidate in candidates:
        pid = int(pattern.fullmatch(candidate.name).group(1))  # type: ignore[union-attr]
        if process_alive(pid):
            continue
        discard_work(candidate)


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True
