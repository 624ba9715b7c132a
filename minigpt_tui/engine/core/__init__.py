"""The engine's bottom layer: what every other layer speaks in.

Errors, safe file operations, printable text, the run configuration (``config``), the
tokenizers, the device and thread settings, memory estimates and tensor digests. Imports
nothing else of the package.
"""
