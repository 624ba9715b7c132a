"""File formats: what is on disk and how it is read and written. Imports only ``core``.

Our safetensors reader and writer with its bounded JSON, the portable model file, the
inspection records of any checkpoint, and the readers and writers of other tools' files
(transformers folders, torch pickles, GGUF). Nothing here trains, builds a model, or knows
a run folder.
"""
