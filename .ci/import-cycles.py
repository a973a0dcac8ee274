#!/usr/bin/env python3
"""Fails on an import circle between the modules of a Rust source tree.

    .ci/import-cycles.py src

A module refers to another when its code (comments aside) names it by a
`crate::` path (the deepest module the path names: `crate::a::b::Item` is
a reference to `a::b`, not to `a`), or, for a sibling (the same parent),
by `super::NAME`.
A parent declaring its children (`mod x;`) is not a reference. Prints each
module's references and every circle (a strongly connected set of more
than one module); exits 1 when there is one.
"""
import os
import re
import sys


def modules(root):
    """Module path ("lock::guard", "(root)") -> source text."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)[: -len(".rs")]
            name = rel.replace("/mod", "").replace("/", "::")
            if name in ("mod", "lib", "main"):
                name = "(root)"
            with open(path, encoding="utf-8") as fh:
                out[name] = re.sub(r"//.*", "", fh.read())
    return out


def parent(m):
    return m.rsplit("::", 1)[0] if "::" in m else "(root)"


def references(mods):
    edges = {m: set() for m in mods}
    names = [m for m in mods if m != "(root)"]
    for m, src in mods.items():
        for n in names:
            if n == m:
                continue
            leaf = n.split("::")[-1]
            sibling = parent(n) == parent(m) and re.search(
                r"\bsuper::(\{[^}]*\b" + leaf + r"\b|" + leaf + r"\b)", src
            )
            if sibling:
                edges[m].add(n)
        # A `crate::` path refers to the deepest module it names
        # (`crate::lock::verdict::Holder` is lock::verdict's, not lock's).
        for path in re.findall(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)", src):
            parts = path.split("::")
            for k in range(len(parts), 0, -1):
                n = "::".join(parts[:k])
                if n in mods:
                    if n != m:
                        edges[m].add(n)
                    break
    return edges


def circles(edges):
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main():
    status = 0
    for root in sys.argv[1:] or ["src"]:
        found = circles(references(modules(root)))
        for c in found:
            print(f"import-cycles: {root}: a circle: {' -> '.join(c)}")
            status = 1
        if not found:
            print(f"import-cycles: {root}: no circle")
    sys.exit(status)


if __name__ == "__main__":
    main()
