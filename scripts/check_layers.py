#!/usr/bin/env python3
"""Import loops between the core crate's top-level modules, as a ratchet,
and no loops at all between the files of a few rooms.

Reads every `crate::<module>` path in crates/tensorguard/src (comments left
out), builds the graph of top-level modules (device, memory, tensor, ops,
...), and finds its strongly connected components: each one is a set of
modules that import each other in a loop.

ALLOWED lists the loops that may exist: only tensor <-> autograd (the
tensor carries its autograd state, as in PyTorch). The check fails when a loop appears that is not inside
an allowed one, and says when an allowed loop has shrunk, so the list is
tightened in the same change.

ROOMS are directories whose files must not import each other in a loop
(alloc/, the CLI's bench/, every directory of device/ and transfer/). Their nodes are the room's children (a file,
or a subdirectory as one node) and `mod`, the code of the room's own
mod.rs. A child's `super::X` / `crate::<room>::X` goes to the child X, or
to the child that mod.rs re-exports X from, or else to `mod`; mod.rs's
`mod` and `use` lines are its public face, not dependencies, but a name it
imports from a child and uses in its own code is. Unit tests
(`#[cfg(test)]` modules, tests.rs) may use anything.

Run: python3 scripts/check_layers.py
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "crates" / "tensorguard" / "src"

# Directories whose files may not import each other in a loop, with the
# path by which the crate names them.
ROOMS = [
    (SRC / "memory" / "alloc", "crate::memory::alloc"),
    (ROOT / "crates" / "tensorguard-cli" / "src" / "bench", "crate::bench"),
]
# ... and every directory of the device layer and of the transfer ledger,
# at every depth (device/, device/cpu/, device/cuda/kernels/, ...): the
# seam that the backends plug into has no loops anywhere.


def device_rooms():
    """Every directory of device/ and transfer/ with a mod.rs, but those of
    test-only modules (unit tests may use anything)."""
    tests = test_only_files()
    rooms = []
    for top in ("device", "transfer"):
        for mod_rs in sorted((SRC / top).rglob("mod.rs")):
            if mod_rs not in tests:
                rel = mod_rs.parent.relative_to(SRC)
                rooms.append((mod_rs.parent, "crate::" + "::".join(rel.parts)))
    return rooms

# The loops that may exist now. Shrink these sets as the floors straighten;
# never grow them.
ALLOWED = [
    {"autograd", "tensor"},
]

# Imports that must not exist: the profiler observes memory, transfers and
# devices through the leaf `hooks` (it registers itself there), so they
# never name it; `hooks` stays a leaf. The allocator sits below the
# devices: a device asks its allocator, the allocator never calls a device
# (the device-keyed public API is `memory`, above both).
FORBIDDEN = [
    ("alloc", "device"),
    ("alloc", "memory"),
    ("alloc", "profiler"),
    ("memory", "profiler"),
    ("transfer", "profiler"),
    ("device", "profiler"),
]
LEAVES = ["hooks", "device_id", "dtype", "units", "oom_report"]

PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\};", re.S)


# Sub-layers: a directory inside a top-level module that is a layer of its
# own (its files are that node; `crate::<path>` names it). The allocator,
# `memory::alloc`, sits below the devices; `memory` itself is the public,
# device-keyed API above them.
SUBLAYERS = {("memory", "alloc"): "alloc"}


def module_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    if len(rel.parts) == 1:
        return rel.stem  # lib.rs -> lib, error.rs -> error
    return SUBLAYERS.get(tuple(rel.parts[:2]), rel.parts[0])


def name_sublayers(code: str) -> str:
    """`crate::memory::alloc::X` -> `crate::alloc::X` (its own node)."""
    for (top, sub), node in SUBLAYERS.items():
        code = re.sub(rf"\bcrate::{top}::{sub}\b", f"crate::{node}", code)
    return code


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def strip_tests(text: str) -> str:
    """Drops `#[cfg(test)]` items (a `mod x;` line or a braced block)."""
    out, i = [], 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = j + len("#[cfg(test)]")
        semi, brace = text.find(";", k), text.find("{", k)
        if brace < 0 or (0 <= semi < brace):
            i = semi + 1 if semi >= 0 else len(text)
            continue
        depth, k = 0, brace
        while k < len(text):
            c = text[k]
            if c == '"':  # a string literal: its braces do not count
                k += 1
                while k < len(text) and text[k] != '"':
                    k += 2 if text[k] == "\\" else 1
            elif c == "'":  # a char literal ('{', '\\n'), not a lifetime
                m = re.match(r"'(\\.|[^\\'])'", text[k:])
                if m:
                    k += m.end() - 1
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1


USE_STMT = re.compile(r"\b(?:pub(?:\([a-z]+\))?\s+)?use\s+([^;]*);", re.S)
MOD_DECL = re.compile(r"\b(?:pub(?:\([a-z]+\))?\s+)?mod\s+[a-z_][a-z0-9_]*\s*;")


def use_names(tree: str):
    """(first path segment, names brought in) of a `use` tree."""
    tree = re.sub(r"\s+", "", tree)
    if "::" not in tree:
        return tree, {tree}
    head, rest = tree.split("::", 1)
    if rest.startswith("{") and rest.endswith("}"):
        items, depth, cur = [], 0, ""
        for c in rest[1:-1]:
            if c == "," and depth == 0:
                items.append(cur)
                cur = ""
                continue
            depth += c == "{"
            depth -= c == "}"
            cur += c
        items.append(cur)
    else:
        items = [rest]
    names = set()
    for it in filter(None, items):
        if "{" in it:
            inner = it[it.index("{") + 1 : it.rindex("}")]
            names |= {x.split("as")[-1].split("::")[-1] for x in inner.split(",") if x}
        else:
            last = it.split("::as")[-1] if "::as" in it else it
            names.add(re.split(r"\bas\b", last)[-1].split("::")[-1])
    names.discard("self")
    names.discard("*")
    return head, names


def room_graph(room: Path, prefix: str):
    """The file-level import graph of one room (see the module doc)."""
    children = {p.stem for p in room.glob("*.rs") if p.name != "mod.rs"}
    children |= {p.name for p in room.iterdir() if p.is_dir()}
    mod_text = strip_tests(strip_comments((room / "mod.rs").read_text(encoding="utf-8")))
    exported = {}  # name -> child it comes from
    for stmt in USE_STMT.findall(mod_text):
        head, names = use_names(stmt)
        if head in children:
            for n in names:
                exported[n] = head
    graph = {c: set() for c in children}
    graph["mod"] = set()
    # mod.rs's own code: what it uses of each child outside its use lines.
    body = MOD_DECL.sub("", USE_STMT.sub("", mod_text))
    for name, child in exported.items():
        if re.search(rf"\b{re.escape(name)}\b", body):
            graph["mod"].add(child)
    for c in children:
        if re.search(rf"\b{c}::", body):
            graph["mod"].add(c)
    parent_path = re.escape(prefix) + r"::"

    defined = set(
        re.findall(r"(?<!')\b(?:fn|struct|enum|trait|type|const|static)\s+([A-Za-z_][A-Za-z0-9_]*)", body)
    )

    def target(name: str, is_path: bool):
        """The node of `<room>::name` (`is_path`: followed by `::`)."""
        if is_path and name in children:
            return name
        if name in defined:
            return "mod"
        if name in exported:
            return exported[name]
        return name if name in children else "mod"

    for f in sorted(room.rglob("*.rs")):
        rel = f.relative_to(room)
        if rel.name == "mod.rs" and len(rel.parts) == 1 or f.name == "tests.rs":
            continue
        node = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        # in room/x.rs and room/x/mod.rs `super` is the room; deeper, `super::super`
        depth = len(rel.parts) - 1 - (rel.name == "mod.rs")
        sup = r"\bsuper" + r"::super" * depth + r"::"
        code = strip_tests(strip_comments(f.read_text(encoding="utf-8")))
        refs = set()  # (name, is_path)
        for path in (sup, parent_path):
            for name, more in re.findall(path + r"([A-Za-z_][A-Za-z0-9_]*)(::)?", code):
                refs.add((name, bool(more)))
            for group in re.findall(path + r"\{([^;]*?)\};", code):
                for g in re.sub(r"\s+", "", group).split(","):
                    if g:
                        refs.add((g.split("::")[0], "::" in g))
        for name, is_path in refs:
            t = target(name, is_path)
            if t != node:
                graph[node].add(t)
    return graph


def self_test():
    """The room check finds a loop through a re-export and through mod.rs's
    own items, and none in a layered room (so it can fail)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        room = Path(d) / "room"
        (room / "deep").mkdir(parents=True)
        files = {
            "mod.rs": "mod a;\nmod b;\nmod deep;\npub use a::Alpha;\n"
            "pub(crate) use b::Beta;\npub fn helper() -> Beta { Beta }\n",
            "a.rs": "use super::Beta;\n// super::deep::Gamma in a comment is no edge\npub struct Alpha;\n",
            "b.rs": "pub struct Beta;\n#[cfg(test)]\nmod tests { use super::super::a::Alpha; }\n",
            "deep/mod.rs": "mod inner;\n",
            "deep/inner.rs": "use crate::room::helper;\nuse super::super::a;\n",
        }
        for name, text in files.items():
            (room / name).write_text(text)
        g = room_graph(room, "crate::room")
        assert g == {"a": {"b"}, "b": set(), "deep": {"mod", "a"}, "mod": {"b"}}, g
        assert not sccs(g), g
        (room / "b.rs").write_text("use super::helper;\npub struct Beta;\n")
        loops = sccs(room_graph(room, "crate::room"))
        assert loops == [{"b", "mod"}], loops


def check_rooms():
    failed = False
    for room, prefix in ROOMS + device_rooms():
        if not (room / "mod.rs").is_file():
            continue
        graph = room_graph(room, prefix)
        for comp in sccs(graph):
            failed = True
            where = room.relative_to(ROOT)
            print(f"import loop between the files of {where}/: {sorted(comp)}")
            for m in sorted(comp):
                print(f"  {m} imports {', '.join(sorted(graph[m] & comp))}")
    return failed


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;")


def test_only_files():
    """Files of modules declared `#[cfg(test)] mod x;` (x.rs, x/...)."""
    out = set()
    for f in SRC.rglob("*.rs"):
        base = f.parent if f.name in ("mod.rs", "lib.rs") else f.with_suffix("")
        for name in TEST_MOD.findall(f.read_text(encoding="utf-8")):
            out.add(base / f"{name}.rs")
            out |= set((base / name).rglob("*.rs"))
    return out


def edges():
    graph = {}
    tests = test_only_files()
    for f in sorted(SRC.rglob("*.rs")):
        m = module_of(f)
        if m == "lib" or f.name == "tests.rs" or f in tests:
            continue  # the crate root re-exports everything; unit tests may use anything
        code = name_sublayers(strip_tests(strip_comments(f.read_text(encoding="utf-8"))))
        targets = set(PATH.findall(code))
        for group in USE_GROUP.findall(code):
            targets |= {t.split("::")[0].strip() for t in group.split(",") if t.strip()}
        nodes = set(SUBLAYERS.values())
        for t in targets:
            t = t.split("::")[0]
            is_module = (SRC / t).is_dir() or (SRC / f"{t}.rs").is_file() or t in nodes
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


def check_notes():
    """Every `// Note [Name]` written in the code has its row in
    ARCHITECTURE.md's table of notes (`[Name]` in backquotes); returns
    whether one is missing."""
    table = (ROOT / "ARCHITECTURE.md").read_text()
    missing = []
    for path in sorted((ROOT / "crates").rglob("*.rs")):
        for line in path.read_text().splitlines():
            m = re.match(r"\s*// Note (\[[^\]]+\])\s*$", line)
            if m and f"`{m.group(1)}`" not in table:
                missing.append((m.group(1), path.relative_to(ROOT)))
    for name, path in missing:
        print(f"Note {name} ({path}) has no row in ARCHITECTURE.md's table of notes")
    return bool(missing)


def check_unsafe():
    """`unsafe` in the core crate only under device/ and memory/, and each
    `unsafe` block or impl with a `// SAFETY:` comment in the 15 lines
    above it (the other crates forbid unsafe code); returns whether one
    fails."""
    failed = False
    for path in sorted(SRC.rglob("*.rs")):
        rel = path.relative_to(SRC)
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            code = line.split("//")[0]
            if not re.search(r"\bunsafe\s*(\{|impl\b|fn\b|trait\b)", code):
                continue
            if rel.parts[0] not in ("device", "memory"):
                print(f"{path.relative_to(ROOT)}:{i + 1}: unsafe outside device/ and memory/")
                failed = True
            block = re.search(r"\bunsafe\s*(\{|impl\b)", code)
            if block and not any("SAFETY" in l for l in lines[max(0, i - 15) : i + 1]):
                print(f"{path.relative_to(ROOT)}:{i + 1}: an unsafe block without a `// SAFETY:` comment above it")
                failed = True
    return failed


# The leaf types of `device_id`, which code inside the crate imports from
# there and nowhere else (lib.rs and device/mod.rs re-export them for users).
ONE_PATH = ("Device", "DeviceKind", "StreamId", "Direction")
OTHER_PATH = re.compile(
    r"\b(?:crate|super|crate::device)::(?:\{[^;]*?\b(" + "|".join(ONE_PATH) + r")\b[^;]*?\}|("
    + "|".join(ONE_PATH) + r")\b)"
)


def self_test_one_path():
    """The one-path check finds each other path, and not the right one."""
    bad = ["use crate::Device;", "use super::{Storage, StreamId};", "crate::device::Device::Cpu",
           "use crate::{DType, DeviceKind};", "super::super::Direction"]
    good = ["use crate::device_id::{Device, StreamId};", "crate::device_id::Device::Cpu",
            "use super::DeviceTiming;", "use crate::device::Storage;"]
    assert all(OTHER_PATH.search(b) for b in bad), [b for b in bad if not OTHER_PATH.search(b)]
    assert not any(OTHER_PATH.search(g) for g in good), [g for g in good if OTHER_PATH.search(g)]


def check_one_path():
    """`Device` and its kin are named as `crate::device_id::X` inside the
    core crate, never `crate::X`, `crate::device::X` or `super::X` (unit
    tests may use the public paths)."""
    failed = False
    for f in sorted(SRC.rglob("*.rs")):
        if f.name == "lib.rs" or f == SRC / "device" / "mod.rs" or f == SRC / "transfer" / "mod.rs":
            continue  # the public re-exports
        code = strip_tests(strip_comments(f.read_text(encoding="utf-8")))
        for m in OTHER_PATH.finditer(code):
            name = m.group(1) or m.group(2)
            line = code.count("\n", 0, m.start()) + 1
            print(
                f"{f.relative_to(ROOT)}:{line}: `{name}` is imported through another path; "
                f"inside the crate it is `crate::device_id::{name}` (one import path per type)"
            )
            failed = True
    return failed


def main():
    self_test()
    self_test_one_path()
    graph = edges()
    loops = sccs(graph)
    failed = check_rooms()
    failed = check_notes() or failed
    failed = check_unsafe() or failed
    failed = check_one_path() or failed
    for a, b in FORBIDDEN:
        if b in graph.get(a, set()):
            print(f"{a} imports {b}, which must observe it through crate::hooks instead")
            failed = True
    for leaf in LEAVES:
        inner = graph.get(leaf, set()) - set(LEAVES)
        if inner:
            print(f"the leaf {leaf} imports {', '.join(sorted(inner))}; leaves import only leaves")
            failed = True
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
    print(
        f"layers ok: {len(graph)} modules, loops only within the allowed sets; "
        f"no loops between the files of {', '.join(str(r.relative_to(ROOT)) for r, _ in ROOMS + device_rooms())}; "
        "every note of the code is in ARCHITECTURE.md's table; Device, DeviceKind, StreamId and "
        "Direction imported from crate::device_id only; unsafe only in device/ and memory/, "
        "each block with its SAFETY comment"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
