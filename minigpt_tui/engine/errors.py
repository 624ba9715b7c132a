"""One exception family; each cause carries a one-line message meant for the user."""

from __future__ import annotations


class MiniGPTError(Exception):
    """Base of every error the user may see. ``str(err)`` is the one-line message."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


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
