"""Several processes with torch.distributed (gloo on the CPU): exact resume across processes,
one process against two, a world-size change, a rank that dies, two nodes on localhost, and
the launch settings that are refused."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.cli_support import run_cli_json, run_cli_subprocess
from tests.conftest import cli_command, cli_env
from tests.polling import wait_until

MINI_DOCUMENT_ORDER = """
[train]
batch_policy = "document_order"
steps = 4
eval_every = 0
save_every = 0
microbatches = {microbatches}
"""


def end_process_group(launcher: subprocess.Popen) -> None:
    """Kill a launcher and every process it started (its ranks), so a failed test leaves
    no paused rank behind (the launcher runs in a session of its own)."""
    try:
        os.killpg(launcher.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    launcher.wait()


@contextmanager
def rendezvous_store() -> Iterator[int]:
    """A c10d rendezvous store served by this process on a port the system picks as it binds
    (port 0): no other process can take the port between its choice and its use, as one
    could when a free port was looked up, closed and passed on. The nodes join as clients
    (``is_host=false``); the port it serves on is yielded."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, multi_tenant=True,
                     timeout=timedelta(seconds=120))
    try:
        yield store.port
    finally:
        del store


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("minigpt-tui: error")]


@pytest.mark.slow
def test_verify_in_two_processes_resumes_bit_for_bit(tmp_path):
    """Saved at update 2 by two processes, ended, resumed in two new processes to update 4:
    every record and every digest equals the uninterrupted two-process run (tiny: dropout,
    recomputation, loss scaling and accumulation all on)."""
    result = run_cli_json(tmp_path, "verify", "--preset", "tiny", "--nproc", "2", "--keep", str(tmp_path / "verify"))
    assert result["processes"] == 2
    assert result["all_equal"], [c for c in result["comparisons"] if not c["equal"]]
    checkpoint = tmp_path / "verify" / "saved" / "checkpoints" / "step-000002" / "training.safetensors"
    tensors = load_file(checkpoint)
    assert tensors["ranks.world_size"].tolist() == [2]
    assert {"ranks.1.data.cursor", "ranks.1.data.epoch", "ranks.1.randomness.dropout"} <= set(tensors)
    # Each rank has its own dropout stream and its own share of the document order.
    assert tensors["ranks.1.randomness.dropout"][0] != tensors["randomness.dropout"][0]
    assert tensors["ranks.1.data.cursor"].tolist() != tensors["data.cursor"].tolist()


@pytest.mark.slow
def test_two_processes_agree_with_one_process_over_the_same_global_batch(tmp_path):
    """Two processes of one microbatch each and one process accumulating two microbatches see
    the same examples; float64 results agree within 1e-9 (the sums run in another order)."""
    one_config = tmp_path / "one.toml"
    one_config.write_text(MINI_DOCUMENT_ORDER.format(microbatches=2))
    two_config = tmp_path / "two.toml"
    two_config.write_text(MINI_DOCUMENT_ORDER.format(microbatches=1))
    one = run_cli_json(tmp_path, "train", "--preset", "mini", "--config", str(one_config), "--run", "one")
    two = run_cli_json(tmp_path, "train", "--preset", "mini", "--config", str(two_config), "--run", "two", "--nproc", "2")
    assert two["world_size"] == 2 and two["global_batch"] == one["global_batch"] == 16
    assert [u["batch"] for u in two["updates"]] == [u["batch"] for u in one["updates"]]
    for a, b in zip(one["updates"], two["updates"], strict=True):
        assert a["valid_targets"] == b["valid_targets"]
        assert abs(a["loss"] - b["loss"]) <= 1e-9
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-9
    weights_one = load_file(Path(one["checkpoints"][-1]) / "model.safetensors")
    weights_two = load_file(Path(two["checkpoints"][-1]) / "model.safetensors")
    assert weights_one.keys() == weights_two.keys()
    for name, value in weights_one.items():
        if value.is_floating_point():
            assert torch.allclose(value, weights_two[name], rtol=0, atol=1e-9), name


@pytest.mark.slow
def test_world_size_change_is_refused_unless_allowed(tmp_path):
    saved = run_cli_json(tmp_path, "train", "--preset", "tiny", "--until", "2", "--run", "saved", "--nproc", "2")
    checkpoint = saved["checkpoints"][-1]
    before = {p.name: p.read_bytes() for p in Path(checkpoint).iterdir()}
    refused = run_cli_subprocess(tmp_path, "resume", "--checkpoint", checkpoint, "--json")
    assert refused.returncode == 1
    assert error_lines(refused.stderr) == [refused.stderr.strip()]
    assert "saved by 2 processes, this run has 1" in refused.stderr and "--allow-world-size-change" in refused.stderr
    assert {p.name: p.read_bytes() for p in Path(checkpoint).iterdir()} == before
    resumed = run_cli_json(tmp_path, "resume", "--checkpoint", checkpoint, "--allow-world-size-change")
    assert resumed["step"] == 4 and resumed["world_size"] == 1
    assert not resumed["continuation"]["bitwise_promised"]
    assert any("world size changed at step 2: 2 -> 1" in note for note in resumed["continuation"]["notes"])
    # Rank 0's share of the document order continues where the two processes left it.
    assert resumed["updates"][0]["batch"][0] == saved["progress"]["next_batch"][0]


def _rank_pid(runs_dir: Path, rank: int) -> int | None:
    wanted = {f"MINIGPT_TUI_RUNS_DIR={runs_dir}".encode(), f"RANK={rank}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if wanted <= environ:
            return int(entry.name)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the rank's process through /proc")
def test_a_rank_that_dies_ends_the_run_and_the_last_checkpoint_resumes(tmp_path):
    config = tmp_path / "long.toml"
    config.write_text("[train]\nsteps = 400\neval_every = 0\nsave_every = 2\nkeep_last = 1000\n")
    launcher = subprocess.Popen(
        cli_command("train", "--preset", "mini", "--config", str(config), "--run", "dies", "--nproc", "2", "--json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path),
    )
    checkpoints = tmp_path / "runs" / "dies" / "checkpoints"
    wait_until((checkpoints / "step-000004").is_dir, timeout=90, what="the checkpoint of update 4", interval=0.2)
    pid = _rank_pid(tmp_path / "runs", 1)
    assert pid is not None and (checkpoints / "step-000004").is_dir()
    os.kill(pid, signal.SIGKILL)
    _, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 1
    assert len(error_lines(stderr)) == 1, stderr
    assert "Traceback" not in stderr
    latest = sorted(p for p in checkpoints.iterdir() if p.name.startswith("step-"))[-1]
    assert run_cli_subprocess(tmp_path, "inspect", str(latest), "--verify", "--json").returncode == 0
    step = int(latest.name.removeprefix("step-"))
    resumed = run_cli_json(tmp_path, "resume", "--checkpoint", str(latest), "--nproc", "2", "--until", str(step + 1))
    assert resumed["step"] == step + 1 and resumed["continuation"]["bitwise_promised"]


@pytest.mark.slow
def test_two_nodes_on_localhost_train_as_two_processes(tmp_path):
    """Two single-process nodes meeting at a c10d rendezvous on localhost give the records
    of ``--nproc 2`` bit for bit."""
    reference = run_cli_json(tmp_path, "train", "--preset", "tiny", "--run", "reference", "--nproc", "2")
    with rendezvous_store() as port:
        node = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes",
                "--rdzv-conf", "is_host=false",
                "-m", "minigpt_tui", "--", "train", "--preset", "tiny", "--run", "nodes", "--json"]
        nodes = [subprocess.Popen(node, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=cli_env(tmp_path)) for _ in range(2)]
        outputs = [p.communicate(timeout=120) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    reports = [json.loads(out) for out, _ in outputs if out.strip()]
    assert len(reports) == 1  # rank 0 alone reports
    (report,) = reports
    assert report["world_size"] == 2
    assert report["updates"] == reference["updates"]
    assert report["state_digest"] == reference["state_digest"]


def test_bad_launch_settings_are_refused_in_one_line(tmp_path):
    zero = run_cli_subprocess(tmp_path, "train", "--preset", "tiny", "--nproc", "0")
    assert zero.returncode == 1 and zero.stderr.strip() == "minigpt-tui: error: --nproc must be at least 1, got 0"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = run_cli_subprocess(tmp_path, "train", "--preset", "tiny", "--nproc", "2", "--port", str(port))
    assert taken.returncode == 1
    assert taken.stderr.strip() == f"minigpt-tui: error: port {port} is in use: choose another --port or leave it out"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_more_processes_than_training_examples_is_refused(tmp_path):
    done = run_cli_subprocess(tmp_path, "train", "--preset", "tiny", "--nproc", "4")
    assert done.returncode == 1
    assert error_lines(done.stderr) == [
        "minigpt-tui: error: 4 processes but the training split has only 3 examples: each process needs at least one"
    ]
    assert "Traceback" not in done.stderr


def last_update(metrics: Path) -> int:
    """The step of the last update record in a run's metrics.jsonl (0 before any)."""
    steps = [0]
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line still being written
            continue
        if record.get("kind") == "update":
            steps.append(record["step"])
    return max(steps)


@pytest.mark.slow
def test_the_control_file_steers_every_rank_of_a_two_process_run(tmp_path):
    from minigpt_tui.engine.session.events import Command
    from minigpt_tui.engine.session.run_control import read_live, send_command

    launcher = subprocess.Popen(
        cli_command("train", "--preset", "mini", "--steps", "100000", "--run", "steered", "--nproc", "2", "--json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path), start_new_session=True)
    run_dir = tmp_path / "runs" / "steered"

    def state() -> str | None:
        live = read_live(run_dir)
        return live.state if live is not None else None

    def wait(predicate, what: str, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
        """Until ``predicate`` holds; the launcher's errors if it ends first."""
        def reached() -> bool:
            if predicate():
                return True
            assert launcher.poll() is None, launcher.stderr.read() if launcher.poll() else ""
            return False

        wait_until(reached, timeout=timeout, what=what, interval=0.1)

    try:
        metrics = run_dir / "metrics.jsonl"
        # Pause after an update has been written, so the pause has something to save.
        wait(lambda: state() == "running" and last_update(metrics) > 0, "a written update")
        send_command(run_dir, Command.PAUSE)
        wait(lambda: state() == "paused", "the pause")
        paused = read_live(run_dir).step  # type: ignore[union-attr]
        assert (run_dir / "checkpoints" / f"step-{paused:06d}").is_dir()  # a pause saves
        send_command(run_dir, Command.RESUME)
        wait(lambda: state() == "running", "the resume")
        # Stop after an update past the pause: a pause between an update and its evaluation
        # resumes with that evaluation, and a stop landing right after it ends at the paused step.
        wait(lambda: last_update(metrics) > paused, "an update past the pause")
        send_command(run_dir, Command.STOP)
        out, err = launcher.communicate(timeout=90)
        assert launcher.returncode == 0, err
        result = json.loads(out)
        assert not result["stopped_by"] and result["step"] > paused and result["world_size"] == 2
        assert state() == "stopped"
        last = Path(result["checkpoints"][-1])
        assert load_file(last / "training.safetensors")["ranks.world_size"].tolist() == [2]
    finally:
        end_process_group(launcher)


@pytest.mark.slow
def test_under_plain_torchrun_a_bad_line_is_said_once_and_names_the_cause_in_the_launchers_report(tmp_path):
    """Every rank parses the same line: rank 0 alone prints the usage error, and each rank
    writes its error where torchrun's failure report reads it (not "To enable traceback see")."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                "-m", "minigpt_tui"]
    bad_flag = subprocess.run([*launcher, "train", "--preset", "tiny", "--no-such-flag"],
                              capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert bad_flag.returncode != 0
    said = [line for line in bad_flag.stderr.splitlines() if line.startswith("minigpt-tui: error:")]
    assert said == ["minigpt-tui: error: unrecognized arguments: --no-such-flag"]
    assert "traceback : minigpt-tui: error: unrecognized arguments: --no-such-flag" in bad_flag.stderr
    bad_value = subprocess.run([*launcher, "train", "--preset", "tiny", "--steps", "-3"],
                               capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert bad_value.returncode != 0
    assert "traceback : minigpt-tui: error: train.steps must be at least 1" in bad_value.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _rank_pids(runs_dir: Path) -> list[int]:
    return [pid for pid in (_rank_pid(runs_dir, rank) for rank in (0, 1)) if pid is not None]


def _start_long_two_process_run(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    config = tmp_path / "long.toml"
    config.write_text("[train]\nsteps = 100000\neval_every = 0\nsave_every = 0\n")
    launcher = subprocess.Popen(
        cli_command("train", "--preset", "mini", "--config", str(config), "--run", name, "--nproc", "2", "--json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path), start_new_session=True)
    metrics = tmp_path / "runs" / name / "metrics.jsonl"
    def three_updates() -> bool:
        if last_update(metrics) >= 3:
            return True
        assert launcher.poll() is None, launcher.stderr.read()
        return False

    wait_until(three_updates, timeout=90, what="update 3", interval=0.1)
    assert last_update(metrics) >= 3 and len(_rank_pids(tmp_path / "runs")) == 2
    return launcher, tmp_path / "runs" / name


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ranks through /proc")
def test_a_launcher_killed_with_sigkill_takes_its_processes_with_it_and_they_save(tmp_path):
    launcher, run_dir = _start_long_two_process_run(tmp_path, "orphaned")
    try:
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        wait_until(lambda: not _rank_pids(tmp_path / "runs"), timeout=30, what="every process to exit", interval=0.1)
        assert _rank_pids(tmp_path / "runs") == [], "a process outlived its launcher"
        saved = sorted((run_dir / "checkpoints").glob("step-*"))
        assert saved, "the processes stopped without saving"
        ended_at = last_update(run_dir / "metrics.jsonl")
        time.sleep(1.0)
        assert last_update(run_dir / "metrics.jsonl") == ended_at  # nothing goes on writing
        assert saved[-1].name == f"step-{ended_at:06d}"
        resumed = run_cli_json(tmp_path, "resume", "--checkpoint", str(saved[-1]), "--nproc", "2", "--until",
                           str(ended_at + 1))
        assert resumed["step"] == ended_at + 1
    finally:
        end_process_group(launcher)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGINT to the process group"])
def test_a_stop_signal_to_the_launcher_saves_and_every_process_exits_0(tmp_path, how):
    launcher, run_dir = _start_long_two_process_run(tmp_path, "stopped")
    try:
        if how == "SIGINT to the process group":  # Ctrl+C in a terminal
            os.killpg(launcher.pid, signal.SIGINT)
        else:
            os.kill(launcher.pid, getattr(signal, how))
        out, err = launcher.communicate(timeout=90)
        assert launcher.returncode == 0, err
        assert "Traceback" not in err and "failed" not in err
        result = json.loads(out)
        assert result["stopped_by"] and result["world_size"] == 2
        assert Path(result["checkpoints"][-1]).name == f"step-{result['step']:06d}"
        assert _rank_pids(tmp_path / "runs") == []
    finally:
        end_process_group(launcher)


@pytest.mark.slow
def test_no_resume_starts_while_any_process_of_the_run_lives(tmp_path):
    from minigpt_tui.engine.core.errors import RunLocked
    from minigpt_tui.engine.session.runs import lock_run

    launcher, run_dir = _start_long_two_process_run(tmp_path, "held")
    try:
        assert (run_dir / ".lock-rank-1").is_file()
        rank0 = _rank_pid(tmp_path / "runs", 0)
        rank1 = _rank_pid(tmp_path / "runs", 1)
        assert rank0 is not None and rank1 is not None
        os.kill(rank1, signal.SIGSTOP)  # rank 1 hangs on; rank 0 dies
        os.kill(rank0, signal.SIGKILL)
        time.sleep(0.5)
        with pytest.raises(RunLocked, match=f"process {rank1}.*process 1 of a several-process run"):
            lock_run(run_dir).release()
        os.kill(rank1, signal.SIGKILL)
        def run_free() -> bool:
            try:
                lock_run(run_dir).release()
            except RunLocked:
                return False
            return True

        # The last process is gone (its files closed as it exits): the run is free.
        wait_until(run_free, timeout=10, what="the run to be free", interval=0.1)
        launcher.communicate(timeout=60)
        assert launcher.returncode == 1
    finally:
        end_process_group(launcher)
