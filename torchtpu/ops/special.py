"""Ops that the generic kernel path cannot express: data-dependent output
shapes (they synchronise, as on CUDA) and other one-offs.  Filled by the
lowering modules with `special(op)`."""

HANDLERS: dict = {}


def special(*ops):
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn

    return deco
