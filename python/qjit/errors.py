"""The exceptions qjit raises: one class per status of the C API, each carrying the library's message."""

from __future__ import annotations


class Error(Exception):
    """A qjit call failed. ``message`` is the library's explanation, ``status`` its C status code."""

    status: int = 7

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class InvalidArgumentError(Error, ValueError):
    """A bad argument: a wrong shape, type or range, a name the object does not have."""

    status = 1


class UnsupportedError(Error):
    """A valid request this build or machine cannot serve."""

    status = 2


class OutOfMemoryError(Error, MemoryError):
    """The library could not allocate what the call needs."""

    status = 3


class FileIOError(Error, OSError):
    """A file or directory could not be opened, read or written."""

    status = 4


class CorruptDataError(Error):
    """A file is truncated, fails its checksum or is malformed."""

    status = 5


class NoDeviceError(Error):
    """No usable CUDA device or driver, or no NVRTC to compile for one."""

    status = 6


class InternalError(Error):
    """A fault inside qjit; please report it with the message."""

    status = 7


class CommunicationError(Error):
    """A collective of the caller's communicator failed (tensor-parallel forwards)."""

    status = 8


class StaleError(Error):
    """A pack file was made from another source, or for other kernels than this context makes."""

    status = 9


_BY_STATUS = {cls.status: cls for cls in (InvalidArgumentError, UnsupportedError, OutOfMemoryError, FileIOError,
                                          CorruptDataError, NoDeviceError, InternalError, CommunicationError,
                                          StaleError)}


# The words of qjit_status_string(), as the command-line tools print them in their failure lines.
_BY_STATUS_STRING = {"invalid argument": InvalidArgumentError, "unsupported": UnsupportedError,
                     "out of memory": OutOfMemoryError, "i/o error": FileIOError, "corrupt data": CorruptDataError,
                     "no CUDA device": NoDeviceError, "internal error": InternalError,
                     "communication error": CommunicationError, "stale": StaleError}


def class_for_status(status: int) -> type[Error]:
    """The exception class of a C status code (the extension raises through this)."""
    return _BY_STATUS.get(status, Error)


def class_for_status_string(text: str) -> type[Error]:
    """The exception class of a status as qjit_status_string() words it, e.g. "i/o error"."""
    return _BY_STATUS_STRING.get(text, Error)
