"""A run's ``metrics.jsonl`` read back: a resumed run's history, another run's curves for
an overlay, and the CSV export. No torch."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt_tui.engine.core.errors import ConfigError

CSV_COLUMNS = ("kind", "step", "lr", "loss", "grad_norm", "loss_scale", "next_loss_scale", "applied",
               "valid_targets", "seconds", "tokens_per_second", "train_loss", "validation_loss",
               "train_targets", "validation_targets", "extra", "probe", "match", "expected_id",
               "expected_probability", "expected_rank")


@dataclass(frozen=True)
class LoadedCurve:
    """Another run's curves, read from its ``metrics.jsonl`` for the plot overlay."""

    name: str
    updates: tuple[tuple[int, float], ...]
    train: tuple[tuple[int, float], ...]
    validation: tuple[tuple[int, float], ...]
    lr: tuple[tuple[int, float], ...] = ()  # per update, as the plot's other views show them
    grad_norm: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class HistoricUpdate:
    """An update record as ``metrics.jsonl`` kept it (the fields the table and plot read)."""

    step: int
    loss: float | None
    lr: float | None
    grad_norm: float | None
    loss_scale: float
    tokens_per_second: float | None
    applied: bool


@dataclass(frozen=True)
class HistoricEvaluation:
    step: int
    train_loss: float | None
    validation_loss: float | None
    extra: bool


@dataclass(frozen=True)
class HistoricProbe:
    """One probe's score as a ``probes`` record kept it."""

    name: str
    match: bool
    expected_probability: float
    expected_rank: int


@dataclass(frozen=True)
class RunHistory:
    """A resumed run's records up to the checkpoint it continues from."""

    updates: tuple[HistoricUpdate, ...]
    evaluations: tuple[HistoricEvaluation, ...]
    best_step: int | None
    probes: tuple[tuple[int, tuple[HistoricProbe, ...]], ...] = ()  # (step, scores) per scored evaluation


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a run directory's ``metrics.jsonl`` (or of that file itself)."""
    target = path / "metrics.jsonl" if path.is_dir() else path
    try:
        lines = target.read_text("utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"no metrics.jsonl in {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {target}: {err}") from None
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a torn last line after a crash: keep what precedes it
    return records


def load_history(run_dir: Path, until_step: int) -> RunHistory:
    """The records a resumed run had up to ``until_step``: the last record of each update
    and evaluation step at or before it (a run resumed before may hold a step twice)."""
    updates, evaluations = _steps_until(run_dir, until_step)
    scheduled = [e for e in evaluations.values() if not e.extra and e.validation_loss is not None]
    best = min(scheduled, key=lambda e: (e.validation_loss, e.step)) if scheduled else None
    ordered_evaluations = sorted(evaluations.values(), key=lambda e: (e.step, e.extra))
    probes = tuple((record["step"], _historic_probes(record)) for record in probe_records(run_dir, until_step))
    return RunHistory(tuple(updates[k] for k in sorted(updates)), tuple(ordered_evaluations),
                      best.step if best else None, probes)


def _steps_until(run_dir: Path, until_step: int) -> tuple[dict[int, HistoricUpdate],
                                                           dict[tuple[int, bool], HistoricEvaluation]]:
    """The last update record of each step at or before ``until_step``, and the last
    evaluation record of each (step, extra)."""
    updates: dict[int, HistoricUpdate] = {}
    evaluations: dict[tuple[int, bool], HistoricEvaluation] = {}
    for record in read_metrics(run_dir):
        step = record.get("step")
        if not isinstance(step, int) or step > until_step:
            continue
        if record.get("kind") == "update":
            updates[step] = HistoricUpdate(
                step=step, loss=record.get("loss"), lr=record.get("lr"), grad_norm=record.get("grad_norm"),
                loss_scale=record.get("loss_scale", 1.0), tokens_per_second=record.get("tokens_per_second"),
                applied=record.get("applied", True))
        elif record.get("kind") == "evaluation":
            extra = bool(record.get("extra"))
            evaluations[(step, extra)] = HistoricEvaluation(
                step=step, train_loss=record.get("train_loss"), validation_loss=record.get("validation_loss"),
                extra=extra)
    return updates, evaluations


def _historic_probes(record: dict[str, Any]) -> tuple[HistoricProbe, ...]:
    """The probe scores of one probes record."""
    return tuple(
        HistoricProbe(str(s.get("name")), bool(s.get("match")), float(s.get("expected_probability", 0.0)),
                      int(s.get("expected_rank", 0)))
        for s in record.get("probes", []) if isinstance(s, dict))


def _curve_points(records: list[dict[str, Any]]) -> tuple[tuple[tuple[int, float], ...], ...]:
    """A metrics log's (step, loss) points: of updates, evaluations' training loss and
    evaluations' validation loss."""
    updates = tuple((int(r["step"]), float(r["loss"])) for r in records
                    if r.get("kind") == "update" and "loss" in r)
    evaluations = [r for r in records if r.get("kind") == "evaluation"]
    train = tuple((int(r["step"]), float(r["train_loss"])) for r in evaluations)
    validation = tuple((int(r["step"]), float(r["validation_loss"])) for r in evaluations
                       if r.get("validation_loss") is not None)
    return updates, train, validation


def _update_points(records: list[dict[str, Any]], field: str) -> tuple[tuple[int, float], ...]:
    """(step, value) of one field of the update records that hold a whole step and a number in it."""
    return tuple((r["step"], float(r[field])) for r in records
                 if r.get("kind") == "update" and _whole(r.get("step")) and _number(r.get(field)))


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_curve(path: Path) -> LoadedCurve:
    records = read_metrics(path)
    updates, train, validation = _curve_points(records)
    if not updates and not train:
        raise ConfigError(f"{path} has no update or evaluation records")
    name = (path if path.is_dir() else path.parent).name
    return LoadedCurve(name=name, updates=updates, train=train, validation=validation,
                       lr=_update_points(records, "lr"), grad_norm=_update_points(records, "grad_norm"))


def probe_records(run_dir: Path, until_step: int | None = None) -> list[dict[str, Any]]:
    """The run's ``probes`` records (one per scored evaluation), up to ``until_step``; a step
    scored twice (a resumed run) keeps its last record."""
    by_step: dict[int, dict[str, Any]] = {}
    for record in read_metrics(run_dir):
        step = record.get("step")
        if record.get("kind") == "probes" and isinstance(step, int) and (until_step is None or step <= until_step):
            by_step[step] = record
    return [by_step[step] for step in sorted(by_step)]


NOT_IN_CSV = ("samples", "heads")  # texts and per-head tables: metrics.jsonl holds them


def _csv_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A probes record becomes one row per probe (kind ``probe``); samples and head roles
    none; any other record one row."""
    if record.get("kind") in NOT_IN_CSV:
        return []
    if record.get("kind") != "probes":
        return [record]
    return [{"kind": "probe", "step": record.get("step"), "probe": score.get("name"), **score}
            for score in record.get("probes", []) if isinstance(score, dict)]


def export_csv(run_dir: Path, target: Path | None = None) -> Path:
    """Write the run's metrics as CSV (one row per update or evaluation, one per probe of a
    probes record); return its path."""
    records = read_metrics(run_dir)
    target = target or run_dir / "metrics.csv"
    tmp = target.with_suffix(target.suffix + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for record in records:
            for row in _csv_rows(record):
                writer.writerow({k: row.get(k, "") for k in CSV_COLUMNS})
    tmp.replace(target)
    return target
