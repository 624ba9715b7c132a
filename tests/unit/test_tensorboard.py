"""TensorBoard event files: ``train``/``resume --tensorboard`` and ``export-tensorboard``
write the scalars of the run's ``metrics.jsonl`` records, which TensorBoard's own readers
read back at the same steps with the same values (as float32); writing them changes no
record of the run; a resumed run shows one history; refusals are one line and write nothing."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from minigpt_tui.cli import main
from minigpt_tui.engine.session.tensorboard import ScalarWriter

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# mini: validation loss, probes and head roles at every evaluation, in a few seconds.
MINI = ("--preset", "mini", "--steps", "4", "--eval-every", "2", "--save-every", "2")
TINY = ("--preset", "tiny", "--set", "train.eval_every=2", "--save-every", "2")
INSTALL = "pip install 'minigpt-tui[tensorboard]'"
TIMING = (
    "seconds",
    "tokens_per_second",
    "threads",
)  # what differs between any two runs


def cli_json(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*args, "--json"]) == 0
    return json.loads(out.getvalue())


def metrics(run_dir: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def single(value: float) -> float:
    return float(np.float32(value))


def expected_series(records: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard should show for these metrics records, tag by tag."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    updates = {
        "loss": "loss/batch",
        "lr": "optimizer/lr",
        "grad_norm": "optimizer/grad_norm",
        "loss_scale": "optimizer/loss_scale",
        "tokens_per_second": "speed/tokens_per_second",
        "seconds": "speed/seconds_per_update",
    }
    for record in records:
        step, kind = record.get("step"), record["kind"]
        if kind == "update":
            for field, tag in updates.items():
                series[tag].append((step, single(record[field])))
        elif kind == "evaluation":
            series["loss/train"].append((step, single(record["train_loss"])))
            if record["validation_loss"] is not None:
                series["loss/validation"].append(
                    (step, single(record["validation_loss"]))
                )
        elif kind == "probes":
            series["probes/matched"].append(
                (step, float(sum(p["match"] for p in record["probes"])))
            )
            for probe in record["probes"]:
                if not probe["error"]:
                    series[f"probe_probability/{probe['name']}"].append(
                        (step, single(probe["expected_probability"]))
                    )
                    series[f"probe_rank/{probe['name']}"].append(
                        (step, float(probe["expected_rank"]))
                    )
        elif kind == "heads":
            for role, top in record["top"].items():
                series[f"heads/{role}"].append((step, single(top["score"])))
    return dict(series)


def current_history(records: list[dict]) -> list[dict]:
    """The records as the run stands after its last resume (at step S): the records up to
    S from before it, then everything after it."""
    resumes = [i for i, r in enumerate(records) if r["kind"] == "resume"]
    if not resumes:
        return records
    at = resumes[-1]
    step = records[at]["step"]
    return [
        r for r in records[:at] if r.get("step", 0) <= step and r["kind"] != "resume"
    ] + records[at + 1 :]


def read_events(
    folder: Path, *, purge: bool = True
) -> dict[str, list[tuple[int, float]]]:
    accumulator = EventAccumulator(
        str(folder), size_guidance={"scalars": 0}, purge_orphaned_data=purge
    )
    accumulator.Reload()
    return {
        tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def event_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("events.out.tfevents.*"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A mini run written with --tensorboard, and the same run without it."""
    root = tmp_path_factory.mktemp("tensorboard")
    runs, logdir = root / "runs", root / "tb"
    with_events = cli_json(
        "train",
        *MINI,
        "--runs-dir",
        str(runs),
        "--run",
        "with",
        "--tensorboard",
        str(logdir),
    )
    without = cli_json("train", *MINI, "--runs-dir", str(runs), "--run", "without")
    return root, runs, logdir, with_events, without


def test_a_run_with_tensorboard_writes_the_scalars_of_its_metrics_records(trained):
    _, runs, logdir, _, _ = trained
    seen = read_events(logdir / "with")
    wanted = expected_series(metrics(runs / "with"))
    assert {
        "loss/batch",
        "loss/validation",
        "optimizer/lr",
        "heads/induction",
        "probes/matched",
    } <= set(seen)
    assert any(tag.startswith("probe_probability/") for tag in seen)
    assert seen == wanted
    assert [step for step, _ in seen["loss/validation"]] == [0, 2, 4]
    assert [step for step, _ in seen["loss/batch"]] == [1, 2, 3, 4]


def test_the_dashboard_reads_them_as_scalar_series(trained):
    from tensorboard import context
    from tensorboard.backend.event_processing import (
        data_provider,
        plugin_event_multiplexer,
    )

    _, runs, logdir, _, _ = trained
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    scalars = provider.read_scalars(
        context.RequestContext(),
        experiment_id="",
        plugin_name="scalars",
        downsample=1000,
    )
    losses = [(point.step, point.value) for point in scalars["with"]["loss/validation"]]
    assert losses == expected_series(metrics(runs / "with"))["loss/validation"]


def test_writing_event_files_changes_no_record_of_the_run(trained):
    _, runs, _, with_events, without = trained

    def untimed(run: str) -> list[dict]:
        return [
            {k: v for k, v in r.items() if k not in TIMING} for r in metrics(runs / run)
        ]

    assert untimed("with") == untimed("without")
    assert len(untimed("with")) > 10
    for digest in ("state_digest", "weights_digest", "optimizer_digest"):
        assert with_events[digest] == without[digest]


def test_a_run_resumed_from_an_earlier_checkpoint_shows_one_history(tmp_path, capsys):
    runs, logdir = tmp_path / "runs", tmp_path / "tb"
    cli_json(
        "train",
        *MINI,
        "--runs-dir",
        str(runs),
        "--run",
        "r",
        "--tensorboard",
        str(logdir),
    )
    cli_json(
        "resume",
        "--checkpoint",
        "r:2",
        "--runs-dir",
        str(runs),
        "--tensorboard",
        str(logdir),
    )
    records = metrics(runs / "r")
    assert [r["step"] for r in records if r["kind"] == "update"] == [1, 2, 3, 4, 3, 4]
    wanted = expected_series(current_history(records))
    folder = logdir / "r"
    assert len(event_files(folder)) == 2
    assert read_events(folder) == wanted
    # Without the resumed file's purge marker a reader would show updates 3 and 4 twice.
    assert [step for step, _ in read_events(folder, purge=False)["loss/batch"]] == [
        1,
        2,
        3,
        4,
        3,
        4,
    ]

    code, out, err = run_cli(
        capsys,
        "export-tensorboard",
        "r",
        "--runs-dir",
        str(runs),
        "--out",
        str(tmp_path / "out"),
    )
    assert code == 0 and err == ""
    assert (
        f"to {tmp_path / 'out' / 'r'}" in out
        and f"tensorboard --logdir {tmp_path / 'out'}" in out
    )
    assert len(event_files(tmp_path / "out" / "r")) == 1
    assert read_events(tmp_path / "out" / "r") == wanted


def test_a_run_resumed_into_an_empty_folder_writes_its_history_first(tmp_path):
    runs, logdir = tmp_path / "runs", tmp_path / "tb"
    cli_json("train", *TINY, "--runs-dir", str(runs), "--run", "r", "--until", "2")
    cli_json(
        "resume",
        "--checkpoint",
        "r",
        "--runs-dir",
        str(runs),
        "--tensorboard",
        str(logdir),
    )
    seen = read_events(logdir / "r")
    assert [step for step, _ in seen["loss/batch"]] == [1, 2, 3, 4]
    assert [step for step, _ in seen["loss/train"]] == [0, 2, 4]
    assert seen == expected_series(current_history(metrics(runs / "r")))


def test_export_writes_into_the_run_folder_and_replaces_only_event_files(
    trained, capsys
):
    root, runs, _, _, _ = trained
    run = root / "export-me"
    shutil.copytree(runs / "without", run)
    for _ in range(2):  # exporting again replaces the first export
        code, out, err = run_cli(capsys, "export-tensorboard", str(run), "--json")
        assert code == 0 and err == ""
    result = json.loads(out)
    assert (
        result["folder"] == str(run / "tensorboard")
        and result["first_step"] == 0
        and result["last_step"] == 4
    )
    assert "loss/validation" in result["tags"]
    assert len(event_files(run / "tensorboard")) == 1
    assert read_events(run / "tensorboard") == expected_series(metrics(run))

    foreign = root / "foreign"
    (foreign / "export-me").mkdir(parents=True)
    (foreign / "export-me" / "notes.txt").write_text("mine")
    code, out, err = run_cli(
        capsys, "export-tensorboard", str(run / "metrics.jsonl"), "--out", str(foreign)
    )
    assert code == 1 and out == ""
    assert (
        len(err.strip().splitlines()) == 1
        and "not TensorBoard event files (notes.txt)" in err
    )
    assert sorted(p.name for p in (foreign / "export-me").iterdir()) == ["notes.txt"]


def test_export_of_a_run_without_metrics_is_refused(tmp_path, capsys):
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    code, out, err = run_cli(
        capsys, "export-tensorboard", "empty", "--runs-dir", str(tmp_path / "runs")
    )
    assert (
        code == 1
        and out == ""
        and "no metrics.jsonl" in err
        and len(err.strip().splitlines()) == 1
    )
    code, out, err = run_cli(
        capsys, "export-tensorboard", "nosuch", "--runs-dir", str(tmp_path / "runs")
    )
    assert code == 1 and "no run 'nosuch'" in err
    assert sorted(p.name for p in (tmp_path / "runs").rglob("*")) == ["empty"]


@pytest.fixture
def without_tensorboard(monkeypatch):
    """As if the tensorboard package were not installed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            None if name.split(".")[0] == "tensorboard" else real(name, *a)
        ),
    )


def test_without_the_package_train_and_export_say_how_to_install_it(
    trained, tmp_path, capsys, without_tensorboard
):
    runs = tmp_path / "runs"
    code, out, err = run_cli(
        capsys,
        "train",
        *TINY,
        "--runs-dir",
        str(runs),
        "--tensorboard",
        str(tmp_path / "tb"),
    )
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and INSTALL in err
    assert not runs.exists() and not (tmp_path / "tb").exists()
    _, trained_runs, _, _, _ = trained
    code, out, err = run_cli(
        capsys,
        "export-tensorboard",
        str(trained_runs / "without"),
        "--out",
        str(tmp_path / "x"),
    )
    assert code == 1 and INSTALL in err and not (tmp_path / "x").exists()


def test_a_tensorboard_path_that_is_a_file_is_refused_before_the_run(tmp_path, capsys):
    (tmp_path / "tb").write_text("a file")
    runs = tmp_path / "runs"
    code, out, err = run_cli(
        capsys,
        "train",
        *TINY,
        "--runs-dir",
        str(runs),
        "--tensorboard",
        str(tmp_path / "tb" / "x"),
    )
    assert (
        code == 1
        and out == ""
        and len(err.strip().splitlines()) == 1
        and "is not a folder" in err
    )
    assert not runs.exists()


def test_event_files_that_cannot_be_written_leave_the_run_going(tmp_path, capsys):
    logdir = tmp_path / "tb"
    logdir.mkdir()
    (logdir / "r").write_text("in the way")
    runs = tmp_path / "runs"
    code, out, err = run_cli(
        capsys,
        "train",
        *TINY,
        "--runs-dir",
        str(runs),
        "--run",
        "r",
        "--tensorboard",
        str(logdir),
        "--json",
    )
    assert code == 0
    warnings = [line for line in err.splitlines() if "TensorBoard" in line]
    assert len(warnings) == 1 and "the run goes on without them" in warnings[0]
    assert json.loads(out)["step"] == 4
    assert [r["step"] for r in metrics(runs / "r") if r["kind"] == "update"] == [
        1,
        2,
        3,
        4,
    ]


def test_the_writer_thread_reports_a_failure_and_drops_what_follows(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    writer = ScalarWriter(tmp_path / "file" / "events")
    writer.write({"kind": "update", "step": 1, "loss": 1.0})
    failure = writer.close()
    assert failure is not None and "cannot write TensorBoard event files" in failure
    writer.write(
        {"kind": "update", "step": 2, "loss": 1.0}
    )  # after a failure: ignored, no error
    assert writer.close() == failure
