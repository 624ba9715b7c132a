"""The attention-head roles :mod:`.head_roles` scores, in the order every view lists them
(torch-free, so the session's events and the app can name them before torch loads)."""

HEAD_ROLES = ("induction", "previous_token", "duplicate_token", "first_token")
