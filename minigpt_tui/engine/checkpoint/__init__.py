"""Checkpoints in safetensors: a portable model file, a training-state file, a checkpoint
directory with a manifest, and header-only inspection. No pickle is written or read.

Modules: ``safetensors_io`` (strict reader, writer, atomic files), ``portable`` (the model
file), ``training_state`` (everything that decides the next update), ``directory`` (saving
that loses nothing, retention, restore), ``inspect`` (what a file holds, without reading it).
"""
