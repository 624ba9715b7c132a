"""Threads that adapt: the start from the idle cores, and the tuner that tries the
neighbouring count now and then and keeps the faster one (simulated update times)."""

from __future__ import annotations

from minigpt_tui.engine.core.threads import ThreadChange, ThreadTuner, initial_threads, thread_hint


def simulate(tuner: ThreadTuner, seconds_at: dict[int, float], updates: int) -> list[tuple[int, int, int, str]]:
    threads, changes = tuner.threads, []
    for step in range(1, updates + 1):
        change = tuner.observe(step, seconds_at[threads])
        if change is not None:
            threads = change.after
            changes.append((step, change.before, change.after, change.reason))
    return changes


def test_the_start_is_the_usable_cores_that_are_idle_now():
    assert initial_threads(cores=2, busy=0.05) == 2
    assert initial_threads(cores=2, busy=1.0) == 1
    assert initial_threads(cores=2, busy=2.0) == 1  # at least one
    assert initial_threads(cores=64, busy=0.0) == 8  # at most MAX_AUTO


def test_on_a_busy_machine_it_moves_to_the_faster_count_and_stays():
    tuner = ThreadTuner(2, cores=2, settle=5, period=20, window=4)
    changes = simulate(tuner, {2: 0.040, 1: 0.020}, 400)
    kept = [c for c in changes if c[3] not in ("trying", "back")]
    assert kept[0][1:3] == (2, 1) and "another program is using a core (40 → 20 ms an update)" in kept[0][3]
    assert tuner.threads == 1
    assert thread_hint(ThreadChange(29, 2, 1, "another program is using a core")) == (
        "2 → 1 thread: another program is using a core")


def test_on_an_idle_machine_trials_grow_rare_and_cost_little():
    tuner = ThreadTuner(2, cores=2)
    updates = 5000
    changes = simulate(tuner, {2: 0.020, 1: 0.034}, updates)
    assert all(c[3] in ("trying", "back") for c in changes) and tuner.threads == 2
    trials = sum(1 for c in changes if c[3] == "trying")
    extra = trials * tuner.window * (0.034 - 0.020)  # seconds spent at the slower count
    assert extra / (updates * 0.020) < 0.01  # under 1 % of the run


def test_a_core_that_comes_free_is_taken_back():
    tuner = ThreadTuner(1, cores=2, settle=5, period=20, window=4)
    changes = simulate(tuner, {1: 0.034, 2: 0.020}, 200)
    assert any(c[1:3] == (1, 2) and c[3].startswith("a core came free") for c in changes)
    assert tuner.threads == 2


def test_a_trial_far_slower_than_the_kept_count_ends_after_one_update():
    """Both cores busy: a trial of two threads that makes an update ten times slower goes
    back after that one update, not after the whole window."""
    tuner = ThreadTuner(1, cores=2, settle=5, period=20, window=5)
    changes = simulate(tuner, {1: 0.020, 2: 0.200}, 200)
    trials = [c for c in changes if c[3] == "trying"]
    backs = [c for c in changes if c[3] == "back"]
    assert trials and len(backs) == len(trials) and tuner.threads == 1
    assert all(back[0] == trial[0] + 1 for trial, back in zip(trials, backs))  # one update at two threads


def test_a_trial_a_little_slower_still_runs_its_whole_window():
    tuner = ThreadTuner(1, cores=2, settle=5, period=20, window=5)
    changes = simulate(tuner, {1: 0.020, 2: 0.030}, 100)
    trial, back = [c for c in changes if c[3] == "trying"][0], [c for c in changes if c[3] == "back"][0]
    assert back[0] == trial[0] + 5


def test_a_fast_run_with_automatic_threads_records_each_updates_count(tmp_path):
    import json
    import subprocess

    from tests.conftest import cli_command, cli_env

    done = subprocess.run(cli_command("train", "--preset", "text", "--steps", "200", "--until", "12", "--run", "auto",
                                      "--json"), capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "runs" / "auto" / "config.json").read_text())
    assert config["train"]["threads"] == 0 and config["train"]["precision"] == "fast"
    lines = (tmp_path / "runs" / "auto" / "metrics.jsonl").read_text().splitlines()
    counts = [json.loads(line)["threads"] for line in lines if '"kind": "update"' in line]
    assert len(counts) == 12 and all(1 <= n <= 8 for n in counts)
    refused = subprocess.run(cli_command("train", "--preset", "text", "--threads", "0"), capture_output=True,
                             text=True, env=cli_env(tmp_path), timeout=60)
    assert refused.returncode == 2 and "expected auto or at least 1, got 0" in refused.stderr


def test_the_new_run_form_takes_auto_or_a_number_of_threads():
    import pytest

    from minigpt_tui.engine.core.errors import ConfigError
    from minigpt_tui.screens.new_run import NewRunForm, refused_field

    assert NewRunForm("text").resolve().train.threads == 0  # the preset's automatic threads
    assert NewRunForm("text", threads="auto").resolve().train.threads == 0
    assert NewRunForm("text", threads="3").resolve().train.threads == 3
    with pytest.raises(ConfigError) as refused:
        NewRunForm("text", threads="many").resolve()
    assert refused_field(refused.value) == "threads"
