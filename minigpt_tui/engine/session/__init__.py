"""Use cases shared by the command line and the app, torch-free at import.

- :mod:`.events`: the typed events a training session reports and the commands it takes.
- :mod:`.training`: the one schedule, evaluation, save and metrics loop (new run, resume,
  warm start), driven by ``minigpt-tui train``/``resume`` and by the app's worker alike.
- :mod:`.plans`: how a run is prepared: its trainer, its run folder, its identities.
- :mod:`.run_store`: the runs directory: scan, resolve ``RUN:latest|best|STEP``, rename,
  delete, read a saved tokenizer.
- :mod:`.inputs`: numbers and config overrides read from what a user typed, one set of
  messages for the command line and the app.

Modules here import torch (through the trainer and checkpoint modules) only inside the
functions that run a session, so the app can hold a session before torch has loaded.
"""
