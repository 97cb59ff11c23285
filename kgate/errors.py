"""The one exception hierarchy of kgate.

A ``KgateError`` means kgate could not measure: bad input, a provenance
mismatch, a missing tool. It is an infrastructure error (non-zero exit, log
path). A candidate that fails a gate is *data*, written as ``status: fail`` in a
stage record, never an exception.
"""

from __future__ import annotations


class KgateError(Exception):
    """Base class: the CLI prints ``kgate: error: <message>`` and exits 2."""


class ConfigError(KgateError):
    """A campaign or config value is malformed; the message names the key."""


class TargetError(KgateError):
    """The target repository, baseline SHA or sdist cannot be resolved."""


class ProvenanceMismatch(KgateError):
    """A worktree, manifest or device differs from what the records say."""


class IncompleteData(KgateError):
    """A record that a stage needs is missing or unreadable."""


class FormatVersionError(KgateError):
    """A record carries a schema version this kgate cannot read."""


class MissingDependency(KgateError):
    """The stages' environment lacks a module that the target's tests import and the target does not provide."""
