"""The import graph of gateway/, catalog/ and kms/, drawn from the code with `ast` (stdlib only).

Run from the repository root (or pass ``--root`` to measure another checkout)::

    python scripts/import_graph.py [--root PATH]

It prints, per package: the number of modules, the longest import chain (depth, counted in
modules), the import cycles (imports inside functions included: a deferred import still ties the
modules together), and the upward imports (a module importing from a layer above its own, see
`LAYERS`). `tests/test_architecture.py` asserts on the same functions, so the numbers printed
here are the numbers the test enforces.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "catalog", "kms")
# The installed namespace (issue 16): gateway/x.py is the module `cedarberg.gateway.x`. The graph
# names modules by their place in the source tree, so imports are read without this prefix.
NAMESPACE = "cedarberg."

# The layers, top first: a module may import its own layer and the layers below it, never one
# above. A module belongs to the layer of its longest matching prefix. aiohttp.web sits in the web
# layer: a module below it must not import it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cli+serve", ("gateway.cli", "gateway.serve")),  # commands and processes, beside web/
    ("web.app", ("gateway.web.app",)),  # registers the routes
    ("web.routes", ("gateway.web.routes",)),  # the handlers
    ("web", ("gateway.web", "aiohttp.web")),  # the request: middlewares, keys, errors, decisions
    ("below-web", ("gateway",)),  # authn, authz, storage, config, audit, ratelimit, tls, ...
    ("catalog", ("catalog",)),
    ("kms", ("kms",)),
)


def layer_of(module: str) -> int | None:
    """The rank of `module`'s layer (0 is the top), or None for a module outside the layers
    (the standard library and third-party packages other than aiohttp.web)."""
    best: tuple[int, int] | None = None  # (prefix length, rank)
    for rank, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def layer_name(rank: int) -> str:
    return LAYERS[rank][0]


@dataclass(frozen=True)
class Import:
    """`source` imports `target` on `line`; `deferred` when the import sits inside a function."""

    source: str
    target: str
    line: int
    deferred: bool


def local_name(module: str) -> str:
    """`module` as the graph names it: ``cedarberg.gateway.web`` is ``gateway.web``."""
    return module.removeprefix(NAMESPACE)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name a `from ... import` names (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    drop = node.level - 1 if is_package else node.level
    base = base[: len(base) - drop] if drop else base
    return ".".join([*base, node.module] if node.module else base)


def _walk(tree: ast.AST) -> Iterable[tuple[ast.AST, bool]]:
    """Every node with whether it sits inside a function body."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, deferred = stack.pop()
        yield node, deferred
        inner = deferred or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def _under_type_checking(tree: ast.AST) -> set[int]:
    """Lines of imports under `if TYPE_CHECKING:` (they never run, so they tie nothing)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for inner in ast.walk(child):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        lines.add(inner.lineno)
    return lines


def read_imports(root: Path, packages: Iterable[str] = PACKAGES) -> tuple[set[str], list[Import]]:
    """The modules of `packages` under `root` and every import statement they hold (targets are
    the full dotted names; ``from a import b`` names ``a.b`` when that is a module, else ``a``)."""
    packages = tuple(packages)
    files = {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    modules = set(files)
    found: list[Import] = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        typing_only = _under_type_checking(tree)
        is_package = path.name == "__init__.py"
        for node, deferred in _walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and node.lineno in typing_only:
                continue
            if isinstance(node, ast.Import):
                found.extend(Import(module, local_name(a.name), node.lineno, deferred) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = local_name(_resolve(module, is_package, node))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    internal = base.split(".")[0] in packages
                    target = full if full in modules or not internal else base
                    found.append(Import(module, target, node.lineno, deferred))
    return modules, sorted(set(found), key=lambda i: (i.source, i.line, i.target))


def internal_graph(modules: set[str], imports: Iterable[Import]) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports (a package's ``__init__`` counts as a
    module; importing ``a.b`` does not count as importing ``a``: both stay separate nodes)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        target = imp.target
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != imp.source:
            graph[imp.source].add(target)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted; a
    module importing itself is not counted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def depth(graph: Mapping[str, set[str]]) -> tuple[int, list[str]]:
    """The longest import chain, in modules, and one chain of that length. Modules of one cycle
    are taken as one node, so the chain is finite whatever the graph."""
    component_of = {m: m for m in graph}
    for component in cycles(graph):
        for member in component:
            component_of[member] = component[0]
    condensed: dict[str, set[str]] = {c: set() for c in component_of.values()}
    for source, targets in graph.items():
        condensed[component_of[source]].update(
            component_of[t] for t in targets if component_of[t] != component_of[source]
        )
    best: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in best:
            longest: list[str] = []
            for target in sorted(condensed[node]):
                candidate = chain(target)
                if len(candidate) > len(longest):
                    longest = candidate
            best[node] = [node, *longest]
        return best[node]

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(condensed) + 100))
    longest: list[str] = []
    for node in sorted(condensed):
        if len(chain(node)) > len(longest):
            longest = chain(node)
    return len(longest), longest


def upward(imports: Iterable[Import]) -> list[Import]:
    """Imports from a layer above the importing module's own (`LAYERS`)."""
    found = []
    for imp in imports:
        source, target = layer_of(imp.source), layer_of(imp.target)
        if source is not None and target is not None and target < source:
            found.append(imp)
    return sorted(found, key=lambda i: (i.source, i.line))


@dataclass(frozen=True)
class Package:
    """One package's modules, the imports they make, and the graph among its own modules."""

    modules: frozenset[str]
    imports: tuple[Import, ...]
    graph: dict[str, set[str]]

    @property
    def side_by_side(self) -> int:
        """Modules directly in the package's directory (its ``__init__`` and subpackages aside)."""
        packages = {m.rpartition(".")[0] for m in self.modules}
        return sum(1 for m in self.modules if m.count(".") == 1 and m not in packages)


def package(root: Path, name: str) -> Package:
    """`name`'s modules and imports, as found under `root`."""
    modules, imports = read_imports(root)
    mine = frozenset(m for m in modules if m == name or m.startswith(name + "."))
    own = tuple(i for i in imports if i.source in mine)
    graph = {m: t & mine for m, t in internal_graph(modules, own).items() if m in mine}
    return Package(mine, own, graph)


def report(root: Path) -> str:
    """The text `main` prints for the checkout at `root`."""
    lines = []
    for name in PACKAGES:
        found = package(root, name)
        length, chain = depth(found.graph)
        found_cycles = cycles(found.graph)
        up = upward(found.imports)
        lines.append(
            f"{name}/: {len(found.modules)} modules ({found.side_by_side} side by side in {name}/), "
            f"depth {length}, {len(found_cycles)} cycles, {len(up)} upward imports"
        )
        lines.append(f"  longest chain: {' -> '.join(chain)}")
        lines.extend(f"  cycle: {' <-> '.join(c)}" for c in found_cycles)
        lines.extend(
            f"  upward: {i.source}:{i.line} ({layer_name(layer_of(i.source) or 0)}) imports {i.target} "
            f"({layer_name(layer_of(i.target) or 0)}){' [deferred]' if i.deferred else ''}"
            for i in up
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    args = parser.parse_args(argv)
    print(report(args.root.resolve()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
