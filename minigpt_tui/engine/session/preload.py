"""The engine's torch modules imported ahead of need. The app calls :func:`import_training_engine`
on a worker just after its first frame (importing torch takes about a second), so that
starting a run or opening a model later does not wait for it, and the first frame never does.
"""

from __future__ import annotations


def import_training_engine() -> None:
    """Import torch with the modules a run uses; raises what a broken install raises."""
    import minigpt_tui.engine.session.training  # noqa: F401  # deferred: off the first frame
    import minigpt_tui.engine.training.checkpoints  # noqa: F401  # deferred: imports torch
    import minigpt_tui.engine.training.trainer  # noqa: F401  # deferred: imports torch
