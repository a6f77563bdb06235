"""Ops that the generic kernel path cannot always express: data-dependent
output shapes (they synchronise, as on CUDA), arguments on the host, and
other one-offs.  Filled by the lowering modules with `@special(op)`.

A handler receives the op's real arguments and returns its result.  When
most calls of an op are ordinary kernel calls, give `generic_when`: a
predicate over the arguments that is True for calls the generic lowered path
handles; those are cached by the C++ entry point like any lowered op.  The
predicate may only look at what the kernel key sees (devices, dtypes,
shapes, static argument values), never at tensor contents."""

HANDLERS: dict = {}
GENERIC_WHEN: dict = {}


def special(*ops, generic_when=None):
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
            if generic_when is not None:
                GENERIC_WHEN[op] = generic_when
        return fn

    return deco


def handler_for(op, args, kwargs):
    """The handler this call needs, or None for the generic path."""
    handler = HANDLERS.get(op)
    if handler is None:
        return None
    predicate = GENERIC_WHEN.get(op)
    if predicate is not None and predicate(*args, **kwargs):
        return None
    return handler
