"""The installer's one error, shared by its modules."""


class RuntimeInstallError(Exception):
    """The runtime could not be fetched or installed; the message says why and what to do."""
