"""A module imported on its first use.

    np = LazyModule("numpy")        # at the top of a module that the checker's path imports
    ...
    np.zeros(3)                     # numpy is imported here, on the first attribute read

Reading, checking and printing HLO text need neither NumPy nor ml_dtypes (their import is a tenth of
a second of a cold `hlo check`); the modules those commands import, and that use NumPy only in
functions that run a program, hold it this way."""
from __future__ import annotations

import importlib


class LazyModule:
    def __init__(self, name: str):
        self.__dict__["_lazy_name"] = name

    def __getattr__(self, attr: str):
        value = getattr(importlib.import_module(self._lazy_name), attr)
        self.__dict__[attr] = value         # (read from the instance from now on)
        return value

    def __repr__(self) -> str:
        return f"<lazily imported module {self._lazy_name!r}>"
