"""Use cases shared by the command line and the app, torch-free at import.

- :mod:`.events`: the typed events a training session reports and the commands it takes.
- :mod:`.training`: the one schedule, evaluation, save and metrics loop (new run, resume,
  warm start), driven by ``minigpt-tui train``/``resume`` and by the app's worker alike.
- :mod:`.plans`: how a run is prepared: its trainer, its run folder, its identities.
- :mod:`.model_spec`: a model spec parsed once where it is typed (``parse``: a model file,
  a checkpoint or run folder, ``RUN``, ``RUN:latest|best|STEP``, a transformers folder, a
  GGUF file, a nanoGPT checkpoint), its length guard and ``~`` expansion done there.
- :mod:`.runs`: the runs directory and its lock; a parsed spec resolved to a checkpoint
  (``resolve_checkpoint``, ``resolve_model_file``, ``checkpoint_target``).
- :mod:`.opening`: a model opened for generation and the views from a parsed spec (or its
  text): ours, a transformers folder, a GGUF file, a nanoGPT checkpoint.
- :mod:`.run_store`: the runs directory as the app and the command line list it: scan,
  rename, delete (resolving through :mod:`.runs`).
- :mod:`.saved_tokenizer`: the tokenizer saved with a model, read back without torch.
- :mod:`.inputs`: numbers, thread counts and config overrides read from what a user typed, one set of
  messages for the command line and the app.

Modules here import torch (through the trainer and checkpoint modules) only inside the
functions that run a session, so the app can hold a session before torch has loaded.
"""
