"""One exception family; each cause carries a one-line message meant for the user."""

from __future__ import annotations


class MiniGPTError(Exception):
    """Base of every error the user may see. ``str(err)`` is the one-line message;
    ``field``, where it refuses one setting or input, names it as the config does
    (``train.steps``, ``seeds.data``, ``corpus.source``) or as a run is asked for (``name``,
    ``model``: the model a run starts from, ``seeds``: the one seed they derive from)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(" ".join(message.split()))
        self.field = field


class ConfigError(MiniGPTError):
    """An unknown preset, an invalid setting or an unreadable config file."""


class CorpusError(MiniGPTError):
    """A missing, empty or unusable corpus."""


class TokenizerError(MiniGPTError):
    """A tokenizer that cannot be built, read or used as asked."""


class CacheError(MiniGPTError):
    """A token cache that cannot be written, read back or cleared."""


class CheckpointError(MiniGPTError):
    """A malformed, incomplete or incompatible checkpoint file or directory."""


class ResumeRefused(CheckpointError):
    """A checkpoint that is valid but may not be resumed under the present conditions."""


class CaptureRefused(MiniGPTError):
    """Training state asked for between complete updates."""


class GenerationError(MiniGPTError):
    """A generation request that cannot be served."""


class ProcessGroupError(MiniGPTError):
    """A process of a several-process run died or could not be reached."""


class InputRefused(CheckpointError, CorpusError, ConfigError):
    """An input that is not a regular file (a FIFO, a device, a symlink loop) or cannot be
    opened; refused before it is read. It is each kind of input error, so that a caller
    expecting a checkpoint, corpus or config error catches it as one."""


class WriteRefused(MiniGPTError):
    """An output that may not be written (it exists, it is not a regular file) or whose
    writing failed (no space, read-only, too large); nothing was left half-written."""


class RunLocked(MiniGPTError):
    """Another live process is writing to the run."""


class TrainingDiverged(MiniGPTError):
    """Updates stopped being finite: the run stops at the boundary and saves nothing."""


class EvaluationInterrupted(Exception):
    """Not for users: an evaluation abandoned between batches because a stop was asked
    (nothing was recorded); the training loop turns it into a stop at the boundary."""
