"""The engine: torch, numpy and safetensors only. It never imports the UI."""
