"""The exceptions kvcache raises: each C++ error code has its class, subclassing the built-in
exception a Python caller would expect, and all derive from kvcache.Error."""


class Error(RuntimeError):
    """A kvcache error; `code` is the C++ library's (e.g. "invalid_argument")."""

    def __init__(self, message, code="internal"):
        super().__init__(message)
        self.code = code


class InvalidArgument(Error, ValueError):
    """A call the library refuses and that changed nothing."""


class NotFound(Error, LookupError):
    """No such sequence, component or file."""


class OutOfMemory(Error, MemoryError):
    """Memory the store cannot give."""


class Unsupported(Error):
    """Something a component does not do (e.g. dropping tokens of a format that groups them)."""


class Unavailable(Error):
    """A backend that cannot run here, with its reason."""


class ConfigError(Error, ValueError):
    """A config with errors; `diagnostics` lists them as "file:line:column: error: ..."."""

    def __init__(self, message, diagnostics):
        super().__init__(message, "invalid_argument")
        self.diagnostics = list(diagnostics)


class EvictionError(Error):
    """An operation that failed after evicting something: `report` says what left the cache."""

    def __init__(self, message, report, code="internal"):
        super().__init__(message, code)
        self.report = report


class CacheFull(EvictionError, MemoryError):
    """A reserve that did not fit even after eviction: nothing was reserved; `report` holds what
    the policy evicted while trying."""

    def __init__(self, message, report):
        super().__init__(message, report, "out_of_memory")


_BY_CODE = {"invalid_argument": InvalidArgument, "not_found": NotFound,
            "out_of_memory": OutOfMemory, "unsupported": Unsupported,
            "unavailable": Unavailable}


def from_code(message, code):
    """The exception for a C++ Error of this code (its code_name); Error for any other code."""
    return _BY_CODE.get(code, Error)(message, code)
