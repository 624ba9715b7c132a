"""Round four, smaller causes: ``--set`` of an unknown section, damaged or hostile lines of a
run's ``metrics.jsonl`` under ``export-tensorboard``, ``--quant`` with a transformers export."""

from __future__ import annotations

import json
from pathlib import Path

from attack_cases import Case, fifo, write

TINY = ["train", "--preset", "tiny", "--steps", "2", "--set", "train.eval_every=0"]
UPDATE = json.dumps({"kind": "update", "step": 1, "loss": 2.0})


def _metrics(root: Path, *lines: str | bytes) -> Path:
    """A run folder holding only a metrics.jsonl of these lines."""
    run = root / "damaged"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n"
                                                 for line in lines))
    return run


def _export(run: Path) -> list[str]:
    return ["export-tensorboard", str(run), "--out", str(run.parent / "tb")]


def cases() -> list[Case]:
    return [
        Case("r4 misc: --set of an unknown section", lambda r: [*TINY, "--set", "a.b=1"]),
        Case("r4 misc: --set of a three-part name", lambda r: [*TINY, "--set", "a.b.c=1"]),
        Case("r4 misc: --set of an unknown setting", lambda r: [*TINY, "--set", "train.nope=1"]),
        Case("r4 misc: a config file with an unknown section",
             lambda r: [*TINY, "--config", str(write(r / "c.toml", "[trian]\nsteps = 2\n"))]),
        Case("r4 misc: a width of 10**20", lambda r: [*TINY, "--width", "100000000000000000000"]),
        Case("r4 misc: export-tensorboard, an invalid UTF-8 metrics line",
             lambda r: _export(_metrics(r, UPDATE, b'{"kind": "update", "step": \xff}', UPDATE))),
        Case("r4 misc: export-tensorboard, a metrics line that is a list",
             lambda r: _export(_metrics(r, UPDATE, "[1, 2, 3]"))),
        Case("r4 misc: export-tensorboard, a metrics step of 10**30",
             lambda r: _export(_metrics(r, UPDATE, '{"kind": "update", "step": ' + "1" + "0" * 30 + ', "loss": 1.0}'))),
        Case("r4 misc: export-tensorboard, a loss of 10**400",
             lambda r: _export(_metrics(r, UPDATE, '{"kind": "update", "step": 2, "loss": 1' + "0" * 400 + "}"))),
        Case("r4 misc: export-tensorboard, a metrics line nested 100,000 deep",
             lambda r: _export(_metrics(r, UPDATE, "[" * 100_000 + "]" * 100_000))),
        Case("r4 misc: export-tensorboard, metrics.jsonl is a FIFO",
             lambda r: _export(fifo(r / "damaged" / "metrics.jsonl").parent)),
        Case("r4 misc: export-tensorboard, metrics.jsonl links to /dev/zero",
             lambda r: _export(_linked_metrics(r, "/dev/zero"))),
        Case("r4 misc: export --format hf --quant q8_0",
             lambda r: ["export", "--model", "runs/trained:latest", "--format", "hf", "--quant", "q8_0",
                        "--out", str(r / "hf")]),
    ]


def _linked_metrics(root: Path, target: str) -> Path:
    run = root / "damaged"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(target)
    return run
