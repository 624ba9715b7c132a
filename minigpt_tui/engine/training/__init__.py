"""Training: data (corpus, stream, token cache), the trainer, its
optimizer and collectives, the training state and saving and restoring a trainer.

Imports ``models``, ``formats`` and ``core``; never the analysis, session or UI layers.
"""
