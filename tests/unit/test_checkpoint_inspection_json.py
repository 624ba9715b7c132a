"""``inspect --json`` keeps its shape for scripts that read it: the format-1 fixture inspects
to the JSON recorded in ``tests/fixtures`` (state records in full, the rest by digest), and a
fresh run's folder shows exactly the records its two files hold, in the same groups."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from minigpt_tui.cli import main
from minigpt_tui.engine.formats.inspect import inspect_path
from minigpt_tui.engine.formats.state_groups import InspectionState, StateGroup
from minigpt_tui.engine.formats.checkpoint_folder import TRAINING_FILE

FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXTURE = FIXTURES / "tiny-format1" / "step-000002"
GOLDEN = FIXTURES / "tiny-format1-inspection.json"
MODEL_GROUPS = ["identities", "composition", "model_config", "constants", "tokenizer", "special_ids", "parameters",
                "provenance"]


def inspection_json(path: Path) -> dict[str, Any]:
    """The JSON ``inspect --json`` prints, with the folder's own path written as ``<folder>``."""
    text = json.dumps(inspect_path(path).to_json())
    return json.loads(text.replace(json.dumps(str(path))[1:-1], "<folder>"))


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def test_the_fixture_inspects_to_the_recorded_json():
    data, golden = inspection_json(FIXTURE), json.loads(GOLDEN.read_text())
    assert list(data) == golden["keys"]
    assert data["state"] == golden["state"]
    assert list(data["state"]) == list(golden["state"])  # the groups' order is part of the output
    for key in ("kind", "files", "aliases", "integrity"):
        assert data[key] == golden[key], key
    assert digest(data["entries"]) == golden["entries_sha256"]
    assert digest(data["metadata"]) == golden["metadata_sha256"]


def test_a_fresh_run_shows_the_records_its_files_hold_in_the_fixture_s_groups(tmp_path, capsys):
    assert main(["train", "--preset", "tiny", "--steps", "2", "--run", "fresh", "--runs-dir", str(tmp_path),
                 "--json"]) == 0
    capsys.readouterr()
    folder = next((tmp_path / "fresh" / "checkpoints").iterdir())
    state = inspection_json(folder)["state"]
    assert list(state) == list(json.loads(GOLDEN.read_text())["state"])
    training = json.loads(inspect_path(folder / TRAINING_FILE).metadata["records"])
    model_metadata = inspect_path(folder / "model.safetensors").metadata
    for group, records in training.items():
        assert state[group] == records, group
    assert state["model_config"] == json.loads(model_metadata["model_config"])
    assert state["tokenizer"] == json.loads(model_metadata["tokenizer"])
    # identities: the model file's two, then the training file's (which repeat the model's)
    identities = json.loads(inspect_path(folder / TRAINING_FILE).metadata["identities"])
    assert state["identities"] == {"model": json.loads(model_metadata["identity"])["model"],
                                   "tokenizer": json.loads(model_metadata["tokenizer"])["identity"], **identities}
    assert list(state)[:len(MODEL_GROUPS)] == MODEL_GROUPS
    assert list(state)[-2:] == ["envelope", "continuation"]


def test_every_group_our_files_record_is_in_the_one_vocabulary():
    state = inspect_path(FIXTURE).state
    assert [type(group.group) for group in state] == [StateGroup] * len(state)
    assert state.get(StateGroup.SCHEDULE)["step"] == 2 and state.integer(StateGroup.SCHEDULE, "steps") == 4
    assert state.get("no such group") == {} and "no such group" not in state


def test_typed_state_keeps_unknown_groups_by_name_and_merges_like_the_folder_view():
    model = InspectionState.of({"identities": {"model": "m"}, "made-up": {"x": 1}})
    training = InspectionState.of({"identities": {"config": "c"}, "schedule": {"step": 3}})
    merged = model.merged(training)
    assert merged.to_json() == {"identities": {"model": "m", "config": "c"}, "made-up": {"x": 1},
                                "schedule": {"step": 3}}
    assert [g.group for g in merged] == [StateGroup.IDENTITIES, "made-up", StateGroup.SCHEDULE]
    replaced = merged.with_group(StateGroup.SCHEDULE, {"step": 4}).with_group("extra", {})
    assert replaced.to_json() == {**merged.to_json(), "schedule": {"step": 4}, "extra": {}}
    assert merged.to_json()["schedule"] == {"step": 3}  # a state is never changed in place
