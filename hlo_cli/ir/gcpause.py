"""Pausing Python's cyclic garbage collector while a large IR is built or loaded.

The IR has no reference cycles, yet building hundreds of thousands of objects triggers many
collections that traverse everything built so far: on a 10 MB dump that costs more than the
work itself.  Shared by the parser and the parse cache.
"""
from __future__ import annotations

import gc


class NoGC:
    """Pause the cyclic GC while (un)pickling: collections triggered by hundreds of thousands of
    new objects would otherwise take longer than the unpickling itself (the IR has no cycles to
    find).  The previous state is restored, also when another thread had it off.

    With `promote`, the objects made meanwhile go straight to the oldest generation (a freeze and
    unfreeze, O(1)) instead of being traversed by the next two young collections on their way
    there (a noticeable part of loading a large module); not done when the program froze objects itself."""

    def __init__(self, promote: bool = False):
        self.promote = promote

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, exc_type, exc, tb):
        if self.was:
            if self.promote and exc_type is None and _PROMOTE and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


_PROMOTE = True
