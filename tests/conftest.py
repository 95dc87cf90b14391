"""The suite runs with XLA CPU's thread pool the goldens were made with.

YNNPACK (XLA CPU's reduce library) orders a sum by the size of XLA's thread pool, which is the
number of processors the process may run on; hlo follows the same rule (ynn_sum.xla_threads).  The
committed goldens were made by XLA with a pool of 2.  So the tests run on 2 processors: on a larger
machine this process is confined to two of them before JAX starts (XLA and hlo then both see 2,
and the live differential tests agree with the goldens); on a one-processor machine hlo is told 2
(HLO_XLA_THREADS), which keeps the goldens, while XLA itself runs with 1 there.
"""
import os

GOLDEN_XLA_THREADS = 2

if "HLO_XLA_THREADS" not in os.environ:
    try:
        _cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):    # no affinity on this platform: say the count instead
        _cpus = []
    if len(_cpus) > GOLDEN_XLA_THREADS:
        os.sched_setaffinity(0, _cpus[:GOLDEN_XLA_THREADS])
    elif len(_cpus) != GOLDEN_XLA_THREADS:
        os.environ["HLO_XLA_THREADS"] = str(GOLDEN_XLA_THREADS)
