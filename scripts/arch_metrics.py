"""The shape of hlo_cli in numbers: lines and files per package, the largest files, import circles
(strongly connected groups of modules, lazy imports inside functions included), names with a leading
underscore imported from another module, functions over 150 lines.  For a change's before/after
(tests/test_architecture.py and import-linter enforce the same rules; this counts them).

    python scripts/arch_metrics.py [hlo_cli] [-v]
"""
import ast, os, sys, collections
root = sys.argv[1] if len(sys.argv) > 1 else "hlo_cli"
mods = {}
for dp, dn, fn in os.walk(root):
    for f in fn:
        if f.endswith(".py"):
            p = os.path.join(dp, f)
            m = p[:-3].replace(os.sep, ".")
            if m.endswith(".__init__"): m = m[:-9]
            mods[m] = p
lines = collections.Counter(); files = collections.Counter()
edges = collections.defaultdict(set); private = []; longf = []
for m, p in mods.items():
    src = open(p).read(); n = src.count("\n")
    pkg = ".".join(m.split(".")[:2]) if m.count(".") >= 1 and not p.endswith("__init__.py") or m.count(".")>=2 else m
    if os.path.dirname(p) == root: pkg = root + " (top)"
    lines[pkg] += n; files[pkg] += 1
    tree = ast.parse(src)
    ispkg = p.endswith("__init__.py")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            ln = node.end_lineno - node.lineno + 1
            if ln > 150: longf.append((ln, m, node.name))
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = m.split(".") if ispkg else m.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                tgt = ".".join(base + ([node.module] if node.module else []))
            else:
                tgt = node.module or ""
            if not tgt.startswith(root): continue
            for a in node.names:
                full = tgt + "." + a.name
                dest = full if full in mods else tgt
                if dest in mods and dest != m:
                    edges[m].add(dest)
                if a.name.startswith("_") and not a.name.startswith("__") and full not in mods:
                    private.append((m, tgt, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(root) and a.name in mods and a.name != m:
                    edges[m].add(a.name)
# Tarjan SCC
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in list(mods):
    if v not in idx: sc(v)
print("total lines", sum(lines.values()), "files", len(mods))
for k, v in sorted(lines.items(), key=lambda kv: -kv[1]): print(f"  {k:28s} {v:6d} lines {files[k]:3d} files")
print("largest files:")
for p in sorted(mods.values(), key=lambda p: -open(p).read().count("\n"))[:10]: print("  ", open(p).read().count("\n"), p)
print("import cycles (strongly connected components, module level incl. lazy imports):", len(sccs))
for s in sorted(sccs, key=len, reverse=True): print("  ", len(s), sorted(s)[:40])
print("private names imported from other modules:", len(private), "by", len({p[0] for p in private}), "modules")
if "-v" in sys.argv:
    for x in private: print("   ", x)
print("functions over 150 lines:", len(longf))
for x in sorted(longf, reverse=True): print("  ", x)
