"""Helpers shared by the subcommands: JSON output, stop signals, config from arguments."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from minigpt_tui.engine.core.config import PRECISIONS, TRAIN_ON, load_config, setting_of
from minigpt_tui.engine.core.errors import ConfigError, GenerationError
from minigpt_tui.engine.core.threads import Threads
from minigpt_tui.engine.session.inputs import RunChoices, parse_number
from minigpt_tui.engine.session.runs import resolve_runs_dir

PIPED_WIDTH = 400  # the line width when stdout is not a terminal: no cell or path is cut or folded


def output_console(**options: Any) -> Any:
    """A rich console for human-readable output: the terminal's width on a terminal; piped
    or redirected, wide enough that nothing wraps in the middle of a path (unless COLUMNS
    asks for a width)."""

    console = Console(**options)
    if not console.is_terminal and not os.environ.get("COLUMNS"):  # a width asked for is kept
        console = Console(width=PIPED_WIDTH, **options)
    return console


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")
    sys.stdout.flush()


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


class StopFlag:
    """Set by Ctrl+C or SIGTERM; the loop finishes the current update, then stops. While
    ``preparing`` (before the first update, when nothing is written yet) the signal
    interrupts at once instead: the cache is written temp-then-rename and the run folder
    comes last, so nothing is left half-written."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""
        self.preparing = False
        self.at = 0.0  # when the request came (monotonic)

    def __bool__(self) -> bool:
        return self.requested


SAME_REQUEST_S = 1.5  # signals closer together than this are one request


@contextmanager
def graceful_stop() -> Iterator[StopFlag]:
    flag = StopFlag()

    def handler(signum: int, _frame: Any) -> None:
        now = time.monotonic()
        if flag.requested and now - flag.at < SAME_REQUEST_S:
            return  # one request delivered twice (Ctrl+C reaches a launcher's processes and the launcher)
        if flag.requested or flag.preparing:  # a second signal: the user insists
            flag.requested, flag.at = True, now
            raise KeyboardInterrupt
        flag.requested, flag.at = True, now
        flag.signal_name = signal.Signals(signum).name
        try:
            print(f"\nminigpt-tui: {flag.signal_name}: finishing the current update, then stopping",
                  file=sys.stderr)
        except OSError:  # stderr is gone (a launcher that died): the stop and its save matter, not the line
            pass

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def runs_dir_from_args(args: argparse.Namespace) -> Any:
    """The runs directory: a subcommand's ``--runs-dir``, else the top-level one, else the
    environment variable or the user data dir."""
    return resolve_runs_dir(getattr(args, "runs_dir_sub", None) or getattr(args, "runs_dir", None))


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="mini",
                        help="preset: tiny, mini, small, text or finetune (with --init-from) (default: mini)")
    parser.add_argument("--config", help="TOML file whose sections override the preset")
    parser.add_argument("--corpus", help="UTF-8 text file (one record per line or paragraphs), JSON Lines file "
                                         "(.jsonl, one record per object; chat records as 'messages'), Parquet "
                                         "file (.parquet, one record per row) or a folder of them")
    parser.add_argument("--text-field", metavar="NAME", help=f"{setting_of('corpus.text_field').help} (default: text)")
    parser.add_argument("--train-on", choices=list(TRAIN_ON),
                        help="the tokens the loss counts: all, or only the assistant's turns of chat records "
                             "(default: all)")
    parser.add_argument("--follow-links", action="store_true", default=None,
                        help="read symbolic links in a corpus folder that point outside it (refused otherwise)")
    parser.add_argument("--val-every", type=int, help=setting_help("corpus.val_every", ": "))
    parser.add_argument("--steps", type=int, help=setting_help("train.steps"))
    parser.add_argument("--seed", type=int, help="one seed (0 to 2**64-1) from which init, data, dropout and sampling derive")
    parser.add_argument("--precision", choices=list(PRECISIONS),
                        help="exact: float64, one thread; fast: float32; bf16/fp16: autocast, float32 master weights")
    threads = setting_of("train.threads")
    parser.add_argument("--threads", type=thread_count, metavar="auto|N",
                        help=f"{threads.help}: auto (adapts to how busy the machine is) or {threads.least} to "
                             f"{threads.limit:,}")
    for flag, dotted in HYPERPARAMETER_FLAGS.items():
        parser.add_argument(flag, type=FLAG_TYPES[flag], help=f"{dotted}: {setting_of(dotted).help}{FLAG_NOTES.get(flag, '')}")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="any setting, as in a --config file (repeatable): --set train.weight_decay=0.1")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"],
                        help="where to train (auto: cuda, then mps, then cpu; default: cpu)")


def setting_help(dotted: str, joint: str = ", ") -> str:
    """A setting's help as a flag shows it: what it is, then the values it takes."""
    declared = setting_of(dotted)
    return f"{declared.help}{joint}{declared.span}"


# The settings nanoGPT users reach for, as flags: the setting each sets, its help the
# setting's own, validated as the same setting in a TOML file is.
HYPERPARAMETER_FLAGS: dict[str, str] = {
    "--batch-size": "train.batch_size", "--lr": "train.lr", "--eval-every": "train.eval_every",
    "--width": "model.width", "--layers": "model.layers", "--heads": "model.heads",
    "--context": "model.context", "--dropout": "model.dropout",
}
FLAG_TYPES: dict[str, type] = {"--lr": float, "--dropout": float, **dict.fromkeys(
    ("--batch-size", "--eval-every", "--width", "--layers", "--heads", "--context"), int)}
FLAG_NOTES = {"--heads": " (key/value heads follow when the preset has as many)"}
FLAG_SETTINGS = {flag: tuple(dotted.split(".")) for flag, dotted in
                 {**HYPERPARAMETER_FLAGS, "--text-field": "corpus.text_field", "--train-on": "corpus.train_on"}.items()}


def settings_from_flags(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The settings the hyperparameter flags and ``--set`` give, by section."""
    extra: dict[str, dict[str, Any]] = {}
    for flag, (section, field) in FLAG_SETTINGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is not None:
            extra.setdefault(section, {})[field] = value
    for item in getattr(args, "set", None) or []:
        section, field, value = _set_item(item)
        extra.setdefault(section, {})[field] = value
    _keep_full_attention(extra, args.preset)
    return extra


def _set_item(item: str) -> tuple[str, str, Any]:
    """One ``--set SECTION.FIELD=VALUE``: the value read as TOML, or as a bare word."""
    name, sep, text = item.partition("=")
    section, dot, field = name.strip().partition(".")
    if not sep or not dot or not section or not field:
        raise ConfigError(f"--set takes SECTION.FIELD=VALUE, got '{item[:80]}'")
    try:
        return section, field, tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return section, field, text.strip()  # a bare word: a string, as it would be quoted in TOML


def _keep_full_attention(extra: dict[str, dict[str, Any]], preset: str) -> None:
    """A new head count on a preset with full attention keeps it full (kv heads follow)."""
    heads = extra.get("model", {}).get("heads")
    if heads is not None and "kv_heads" not in extra.get("model", {}):
        model = load_config(preset).model
        if model.kv_heads == model.heads:
            extra["model"]["kv_heads"] = heads


def thread_count(text: str) -> int:
    """``--threads``: "auto" (0, the config's form) or a whole number."""
    try:
        return Threads.parse(text).count
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def config_from_args(args: argparse.Namespace) -> Any:
    """The run config chosen by the common options (and ``--save-every``/``--keep-last``)."""

    config_file = Path(args.config).expanduser() if getattr(args, "config", None) else None
    extra = settings_from_flags(args)
    return RunChoices(
        args.preset, config_file, corpus=getattr(args, "corpus", None), val_every=getattr(args, "val_every", None),
        follow_links=getattr(args, "follow_links", None),
        steps=getattr(args, "steps", None), precision=getattr(args, "precision", None),
        threads=getattr(args, "threads", None), device=getattr(args, "device", None), save_every=getattr(args, "save_every", None),
        keep_last=getattr(args, "keep_last", None), seed=getattr(args, "seed", None), seed_label="--seed",
    ).resolve(extra)


def generation_number(text: str | None, option: str, kind: type) -> Any:
    """A number option of generate and its views, refused as a generation error."""
    return parse_number(text, option, kind, error=GenerationError)
