"""Errors of the runtime, in arborcc's one hierarchy (:mod:`arborcc.errors`)."""

from __future__ import annotations

from arborcc.errors import ArborccError


class CommunicationError(ArborccError):
    """A collective could not complete: a rank died, never arrived, timed out or disagreed.

    The message names the rank that reports it and the rank it waited for."""
