"""The vocabulary the app's views and the command line print, re-exported from the layers
below so that both reach the engine through the session layer only: the head roles in the
order every view lists them, and the names of the places inside a model and their legends
(:mod:`..analysis.site_names`, where each is defined). Torch-free, like the modules it
re-exports.
"""

from __future__ import annotations

from minigpt_tui.engine.analysis.roles import HEAD_ROLES
from minigpt_tui.engine.analysis.site_names import (
    HEAD_LEGEND,
    LENS_LEGEND,
    SITE_LEGEND,
    head_name,
    patch_site_name,
    resid_name,
)

__all__ = ["HEAD_LEGEND", "HEAD_ROLES", "LENS_LEGEND", "SITE_LEGEND", "head_name", "patch_site_name",
           "resid_name"]
