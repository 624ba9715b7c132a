"""Reading a model: generation one decision at a time (its forward and key/value cache in
``decoding``, the one decoding loop), the logit lens, contributions, head patterns and
roles, probes, scoring, patching and two-model contrast; each reads and edits the model's
named sites (``engine.models.sites``) inside its own forward.

Imports ``training``, ``formats`` and ``core``.
"""
