"""Reusable widgets of the app; none of them imports torch or the engine's torch modules."""
