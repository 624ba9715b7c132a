"""Helpers shared by the subcommands: JSON output, stop signals, config from arguments."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")
    sys.stdout.flush()


def _jsonable(value: Any) -> Any:
    from pathlib import Path

    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


class StopFlag:
    """Set by Ctrl+C or SIGTERM; the loop finishes the current update, then stops."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""

    def __bool__(self) -> bool:
        return self.requested


@contextmanager
def graceful_stop() -> Iterator[StopFlag]:
    flag = StopFlag()

    def handler(signum: int, _frame: Any) -> None:
        if flag.requested:  # a second signal: the user insists
            raise KeyboardInterrupt
        flag.requested = True
        flag.signal_name = signal.Signals(signum).name
        print(f"\nminigpt-tui: {flag.signal_name}: finishing the current update, then stopping",
              file=sys.stderr)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def runs_dir_from_args(args: argparse.Namespace) -> Any:
    """The runs directory: a subcommand's ``--runs-dir``, else the top-level one, else the
    environment variable or the user data dir."""
    from minigpt_tui.engine.runs import resolve_runs_dir

    return resolve_runs_dir(getattr(args, "runs_dir_sub", None) or getattr(args, "runs_dir", None))


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="mini", help="preset: tiny, mini, small or text (default: mini)")
    parser.add_argument("--config", help="TOML file whose sections override the preset")
    parser.add_argument("--corpus", help="UTF-8 text file (one record per line or paragraphs) or folder")
    parser.add_argument("--val-every", type=int, help="every Nth record is validation (0: none)")
    parser.add_argument("--steps", type=int, help="number of updates")
    parser.add_argument("--seed", type=int, help="one seed from which the init, data, dropout, sampling and evaluation seeds derive")
    parser.add_argument("--precision", choices=["exact", "fast"], help="exact: float64, one thread")
    parser.add_argument("--threads", type=int, help="threads in fast precision")


def config_from_args(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from minigpt_tui.engine.config import SeedConfig, load_config
    from minigpt_tui.engine.errors import ConfigError

    overrides: dict[str, dict[str, Any]] = {"corpus": {}, "train": {}, "seeds": {}}
    if getattr(args, "corpus", None):
        overrides["corpus"]["source"] = str(Path(args.corpus).expanduser().resolve())
    if getattr(args, "val_every", None) is not None:
        overrides["corpus"]["val_every"] = args.val_every
    for name in ("steps", "precision", "threads"):
        value = getattr(args, name, None)
        if value is not None:
            overrides["train"][name] = value
    if getattr(args, "seed", None) is not None:
        if not 0 <= args.seed < 2**64:
            raise ConfigError("--seed must be an unsigned 64-bit integer")
        seeds = SeedConfig.derive(args.seed)
        overrides["seeds"] = {k: getattr(seeds, k) for k in ("init", "data", "dropout", "sampling", "evaluation")}
    config_file = Path(args.config).expanduser() if getattr(args, "config", None) else None
    return load_config(args.preset, config_file, overrides)
