"""The generation queue without the app: order, what a failure drops, and the mirror of the
spec and settings the session will have applied."""

from __future__ import annotations

import pytest

from minigpt_tui.engine.core.errors import GenerationError
from minigpt_tui.engine.analysis.generation_rule import GenerationRule
from minigpt_tui.engine.session.generation import NO_MODEL, GenerationSession, GenerationSettings
from minigpt_tui.engine.session.operations import Operation, OperationQueue, failure_reason


def drained(queue: OperationQueue, session: GenerationSession) -> tuple[list, list]:
    updates: list = []
    failures: list = []
    queue.drain(session, lambda *update: updates.append(update), lambda *failure: failures.append(failure))
    return updates, failures


def test_operations_run_in_the_order_they_were_queued(tmp_path):
    queue, session = OperationQueue(), GenerationSession(tmp_path)
    assert queue.idle
    assert queue.push(Operation("first", lambda s: "one")) is True  # the caller starts a drain
    assert queue.push(Operation("second", lambda s: "two", select="keep")) is False  # that drain takes it
    assert not queue.idle
    updates, failures = drained(queue, session)
    assert updates == [(None, "one", None), (None, "two", None)]  # no stepper yet: no view
    assert failures == [] and queue.idle


def test_a_failure_drops_what_was_queued_on_top_of_it(tmp_path):
    queue, session = OperationQueue(), GenerationSession(tmp_path)
    queue.push(Operation("step", lambda s: s.step()))
    queue.push(Operation("later", lambda s: "never"))
    queue.push(Operation("last", lambda s: "never"))
    updates, failures = drained(queue, session)
    assert updates == []
    assert failures == [(NO_MODEL, "step", 2)]
    assert queue.idle


def test_an_os_error_reads_as_the_file_and_the_reason():
    assert failure_reason(OSError(2, "No such file or directory", "trace.json")) == "trace.json No such file or directory"
    assert failure_reason(GenerationError("bad budget")) == "bad budget"


def test_prepare_loads_a_new_spec_and_restarts_only_when_settings_change(tmp_path):
    queue = OperationQueue()
    greedy = GenerationSettings("hi")
    with pytest.raises(GenerationError, match="no model loaded"):
        queue.prepare("", greedy)
    load = queue.prepare("run:latest", greedy)
    assert load is not None and load.what == "load" and load.loads_model
    assert (queue.spec_applied, queue.settings_applied) == ("run:latest", greedy)
    assert queue.prepare("run:latest", greedy) is None  # nothing changed
    assert queue.prepare("", greedy) is None  # an empty model field keeps the model
    reset = queue.prepare("run:latest", greedy, force_reset=True)
    assert reset is not None and reset.what == "start"
    sample = GenerationSettings("hi", GenerationRule.sample(seed=7))
    start = queue.prepare("run:latest", sample)
    assert start is not None and start.what == "start" and queue.settings_applied == sample


def test_after_a_failed_load_the_mirror_follows_the_session(tmp_path):
    queue, session = OperationQueue(), GenerationSession(tmp_path)
    queue.push(queue.load(str(tmp_path / "missing.safetensors"), GenerationSettings("hi")))
    updates, failures = drained(queue, session)
    assert updates == [] and [what for _, what, _ in failures] == ["load"]
    assert queue.spec_applied is not None
    queue.follow(session, "load")
    assert (queue.spec_applied, queue.settings_applied) == (None, None)  # nothing was ever loaded


def test_no_run_means_no_suggested_model(tmp_path):
    assert GenerationSession(tmp_path).suggested_spec() is None
    assert GenerationSession(tmp_path / "absent").suggested_spec() is None


def test_a_run_shows_its_decisions_as_they_come_and_stops_when_asked(runs, monkeypatch):
    """A run to the end reports its view now and then (each one more decision along) and
    stops between decisions once a stop is asked for, keeping what it decided; a queue
    running nothing that reports has nothing to stop."""
    import minigpt_tui.engine.session.operations as operations

    monkeypatch.setattr(operations, "PROGRESS_INTERVAL_S", 0.0)  # report after every decision
    queue, session = OperationQueue(), GenerationSession(runs)
    assert not queue.request_stop()
    queue.push(queue.load("tiny-a:latest", GenerationSettings("a", GenerationRule("greedy", max_new_tokens=6))))
    drained(queue, session)
    progress: list = []

    def report(view):
        progress.append(len(view.decisions))
        if len(progress) == 3:
            assert queue.request_stop()  # as the app's r does, from its own thread

    queue.push(operations.run_to_end())
    updates: list = []
    queue.drain(session, lambda *update: updates.append(update), lambda *failure: pytest.fail(str(failure)),
                report)
    assert progress == [1, 2, 3]
    (view, note, select), = updates
    assert len(view.decisions) == 4 and not view.finished  # the decision in progress, then the stop
    assert note == "run stopped after decision 4" and select == 4
    assert not queue.request_stop() and queue.idle
    queue.push(operations.run_to_end())
    updates.clear()
    queue.drain(session, lambda *update: updates.append(update), lambda *failure: pytest.fail(str(failure)))
    assert updates[0][0].finished and len(updates[0][0].decisions) == 6 and updates[0][1] is None
