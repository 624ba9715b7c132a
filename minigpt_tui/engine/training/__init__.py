"""Training: the model and its parts, data (corpus, stream, token cache), the trainer, its
optimizer and collectives, the training state and saving and restoring a trainer.

Imports ``formats`` and ``core``; never the analysis, session or UI layers.
"""
