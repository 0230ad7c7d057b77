"""The one exception type for user-facing data problems."""

from __future__ import annotations


class DataError(ValueError):
    """A dataset, image or download is missing, malformed or fails verification.

    The message is one line that says what was expected, what was found and what
    to do about it, so a CLI can print it as-is instead of a traceback.
    """


class DataWarning(UserWarning):
    """Something in the user's data was skipped or looks wrong, and the run goes on: stray files,
    an unreadable image, a vocabulary that makes steps slow. One line, which the command line prints
    as `anyformer: warning: ...`."""
