"""Probes over training: scored after each scheduled evaluation, recorded in metrics.jsonl
and metrics.csv, never changing the trajectory; a bad probe file refused before anything."""

from __future__ import annotations

import csv
import json

import pytest

from minigpt_tui.engine.core.config import load_config
from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.session.events import EvaluationDone, Finished, ProbesScored
from minigpt_tui.engine.session.history import export_csv, load_history, probe_records, read_metrics
from minigpt_tui.engine.session.plans import NewRun
from minigpt_tui.engine.session.training import TrainingSession


def mini_plan(runs_dir, name: str, **options) -> NewRun:
    config = load_config("mini").replace(train={"steps": 12, "eval_every": 6, "save_every": 0})
    return NewRun(config, runs_dir, name, **options)


def run_plan(plan) -> tuple[list, TrainingSession]:
    events: list = []
    session = TrainingSession(plan, events.append)
    session.run()
    return events, session


def test_probes_follow_each_scheduled_evaluation_and_never_change_the_trajectory(tmp_path):
    events, session = run_plan(mini_plan(tmp_path / "runs", "with"))
    scored = [e for e in events if isinstance(e, ProbesScored)]
    evaluations = [e for e in events if isinstance(e, EvaluationDone)]
    assert [e.step for e in scored] == [e.record.step for e in evaluations] == [0, 6, 12]
    for event in scored:
        assert event.source == "bundled:probes.json" and len(event.scores) == 10
        assert event.matched == sum(s.match for s in event.scores)
        assert all(0 < s.expected_probability < 1 and s.expected_rank >= 1 for s in event.scores)
    # each ProbesScored comes right after its evaluation
    for event in scored:
        index = events.index(event)
        assert isinstance(events[index - 1], EvaluationDone) and events[index - 1].record.step == event.step
    plain_events, _ = run_plan(mini_plan(tmp_path / "runs", "without", score_probes=False))
    assert not any(isinstance(e, ProbesScored) for e in plain_events)
    digests = [next(e for e in run if isinstance(e, Finished)).state_digest for run in (events, plain_events)]
    assert digests[0] == digests[1]

    run_dir = session.prepared.run.path
    records = probe_records(run_dir)
    assert [r["step"] for r in records] == [0, 6, 12]
    assert records[-1]["probes"] == [s.to_json() for s in scored[-1].scores]
    assert [r["kind"] for r in read_metrics(run_dir)].count("probes") == 3
    with export_csv(run_dir).open(encoding="utf-8") as fh:
        rows = [row for row in csv.DictReader(fh) if row["kind"] == "probe"]
    assert len(rows) == 30
    assert rows[-1]["probe"] == scored[-1].scores[-1].name
    assert float(rows[-1]["expected_probability"]) == scored[-1].scores[-1].expected_probability
    history = load_history(run_dir, until_step=6)  # what a run resumed at update 6 shows
    assert [step for step, _ in history.probes] == [0, 6]
    assert [(h.name, h.match, h.expected_probability, h.expected_rank) for h in history.probes[-1][1]] == \
        [(s.name, s.match, s.expected_probability, s.expected_rank) for s in scored[1].scores]


def test_a_given_probe_file_is_scored_and_a_bad_one_refused_before_anything_is_written(tmp_path):
    good = tmp_path / "mine.json"
    good.write_text(json.dumps({"format": "minigpt-tui-probes", "version": 1,
                                "probes": [{"name": "one", "prompt": "The key", "expected": " is"}]}))
    events, _ = run_plan(mini_plan(tmp_path / "runs", "mine", probes=str(good)))
    scored = [e for e in events if isinstance(e, ProbesScored)]
    assert scored and all(e.source == str(good) and [s.name for s in e.scores] == ["one"] for e in scored)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "minigpt-tui-probes", "version": 7, "probes": []}))
    runs = tmp_path / "refused"
    with pytest.raises(GenerationError, match="unsupported version 7"):
        run_plan(mini_plan(runs, "bad", probes=str(bad)))
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow  # two processes of the command: CI runs it with the slow ones
def test_train_and_inspect_commands_show_the_probes(tmp_path):
    import subprocess

    from conftest import cli_command, cli_env

    env = cli_env(tmp_path)
    env["COLUMNS"] = "200"
    runs = tmp_path / "runs"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(cli_command(*args), capture_output=True, text=True, env=env, timeout=300)

    done = cli("train", "--preset", "mini", "--steps", "6", "--runs-dir", str(runs), "--run", "p", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [p["step"] for p in result["probes"]] == [0, 6]  # the start and the end of the schedule
    inspected = cli("inspect", "p:latest", "--runs-dir", str(runs), "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["probes"]["probes"] == result["probes"][-1]["probes"]
    text = cli("inspect", "p:latest", "--runs-dir", str(runs))
    assert "probes at step 6 (bundled:probes.json)" in text.stdout
    both = cli("train", "--preset", "mini", "--steps", "2", "--runs-dir", str(runs), "--no-probes",
               "--probes", "x.json")
    assert both.returncode == 1 and both.stderr.strip().splitlines() == [
        "minigpt-tui: error: choose either --probes FILE or --no-probes, not both"]
    missing = cli("train", "--preset", "mini", "--steps", "2", "--runs-dir", str(runs), "--probes", "nope.json")
    assert missing.returncode == 1 and "not found: nope.json" in missing.stderr
    assert sorted(p.name for p in runs.iterdir()) == ["p"]


def test_a_run_on_your_own_text_scores_the_bundled_probes_only_when_asked(tmp_path):
    """The bundled probes ask about the bundled texts: on your own corpus none are scored by
    default, a given file still is, and a bundled corpus keeps them."""
    from minigpt_tui.engine.analysis.generation import load_probes

    own = tmp_path / "own.txt"
    own.write_text("".join(f"Line {i} of a text about rivers and hills.\n" for i in range(60)))
    config = load_config("mini").replace(train={"steps": 6, "eval_every": 3, "save_every": 0},
                                         corpus={"source": str(own)})
    events, _ = run_plan(NewRun(config, tmp_path / "runs", "own"))
    assert any(isinstance(e, EvaluationDone) for e in events)
    assert not [e for e in events if isinstance(e, ProbesScored)]
    bundled = load_probes(None).source
    assert bundled == "bundled:probes.json"
    given = tmp_path / "given.json"
    given.write_text(json.dumps({"format": "minigpt-tui-probes", "version": 1,
                                 "probes": [{"name": "rivers", "prompt": "Line 3 of a text about", "expected": " rivers"}]}))
    events, _ = run_plan(NewRun(config, tmp_path / "runs", "own-given", probes=str(given)))
    assert [e.source for e in events if isinstance(e, ProbesScored)] == [str(given)] * 3
    events, _ = run_plan(mini_plan(tmp_path / "runs", "bundled"))
    assert {e.source for e in events if isinstance(e, ProbesScored)} == {bundled}
