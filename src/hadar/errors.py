"""Typed errors. The CLI turns every ``HadarError`` into one line on stderr
and exit code 2; anything else is a bug."""


class HadarError(Exception):
    """Base class of every error a user can act on."""


class InputError(HadarError):
    """Bad input: a malformed file, an unknown name, a wrong count."""


class InfeasibleError(HadarError):
    """A job or workload that the cluster can never run."""


class SolverError(HadarError):
    """An optimization problem the solver could not solve."""


class MissingExtraError(HadarError):
    """An optional extra (e.g. ``runtime``: Ray, torch, scikit-learn) that a command needs is not installed."""
