#!/usr/bin/env python3
"""Import loops between the core crate's top-level modules, as a ratchet.

Reads every `crate::<module>` path in crates/tensorguard/src (comments left
out), builds the graph of top-level modules (device, memory, tensor, ops,
...), and finds its strongly connected components: each one is a set of
modules that import each other in a loop.

ALLOWED lists the loops that exist today (issue 11 removes them, leaving
tensor <-> autograd). The check fails when a loop appears that is not inside
an allowed one, and says when an allowed loop has shrunk, so the list is
tightened in the same change. Run: python3 scripts/check_layers.py
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "crates" / "tensorguard" / "src"

# The loops that may exist now. Shrink these sets as the floors straighten;
# never grow them.
ALLOWED = [
    {"autograd", "tensor"},
    {"device", "memory"},
]

PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\};", re.S)


def module_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    if len(rel.parts) == 1:
        return rel.stem  # lib.rs -> lib, error.rs -> error
    return rel.parts[0]


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def edges():
    graph = {}
    for f in sorted(SRC.rglob("*.rs")):
        m = module_of(f)
        if m == "lib" or f.name == "tests.rs":
            continue  # the crate root re-exports everything; unit tests may use anything
        code = strip_comments(f.read_text(encoding="utf-8"))
        targets = set(PATH.findall(code))
        for group in USE_GROUP.findall(code):
            targets |= {t.split("::")[0].strip() for t in group.split(",") if t.strip()}
        for t in targets:
            t = t.split("::")[0]
            is_module = (SRC / t).is_dir() or (SRC / f"{t}.rs").is_file()
            if t != m and is_module:
                graph.setdefault(m, set()).add(t)
        graph.setdefault(m, set())
    return graph


def sccs(graph):
    """Tarjan's algorithm, iterative."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def main():
    graph = edges()
    loops = sccs(graph)
    failed = False
    for comp in loops:
        if not any(comp <= allowed for allowed in ALLOWED):
            failed = True
            inner = {m: sorted(graph[m] & comp) for m in sorted(comp)}
            print(f"new import loop between {sorted(comp)}:")
            for m, ts in inner.items():
                print(f"  {m} imports {', '.join(ts)}")
    for allowed in ALLOWED:
        if any(c > allowed for c in loops):
            continue  # grew: reported above
        now = [c for c in loops if c <= allowed]
        largest = max(now, key=len, default=set())
        if largest != allowed:
            print(
                f"the allowed loop {sorted(allowed)} is now {sorted(largest) or 'gone'}: "
                "tighten ALLOWED in scripts/check_layers.py"
            )
            failed = True
    if failed:
        print("The module layers must not gain loops; see ARCHITECTURE.md.")
        return 1
    print(f"layers ok: {len(graph)} modules, loops only within the allowed sets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
