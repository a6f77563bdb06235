"""ATen's TORCH_WARN_ONCE: a UserWarning given once per process per message
(deprecated inputs, lossy casts)."""

import warnings

given: set = set()  # the messages already given (tests clear it)


def warn_once(message: str, stacklevel: int = 2) -> None:
    if message not in given:
        given.add(message)
        warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
