"""Reading a model: generation one decision at a time, the logit lens, contributions, head
patterns and roles, probes, scoring, patching and two-model contrast.

Imports ``training``, ``formats`` and ``core``.
"""
