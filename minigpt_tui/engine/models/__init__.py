"""Models: our MiniGPT module, its named sites (``sites``: read, replace or add inside the
forward) and the readers and writers of model files (our safetensors model file,
transformers folders, GGUF files, nanoGPT checkpoints, GGUF export).

Imports ``formats`` and ``core``; never the training, analysis, session or UI layers.
"""
