"""The tools built on the run pipeline: bisect (tools/bisect.py), XLA as a reference (reference.py,
xla_reference.py, xla_worker.py), isolate / extract / shrink, and the library side of `hlo check`,
`info`, `fmt` and `graph` (check.py, info.py, fmt.py, graphfiles.py).  `hlo diff` and the graph
model are their own packages in the same layer (hlo_cli/diff, hlo_cli/graph)."""
