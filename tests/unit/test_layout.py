"""The package layout holds: no import cycle, the product never imports its tooling, the request on the ground
floor, the edges never reach into the flow, and the flow never imports what reports on it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tools.harness.server_process import REPO_ROOT

PACKAGES = ("thread_client", "tools")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports at module level or inside functions, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            # "from . import defaults" imports the module defaults, not what the package's __init__ imports.
            targets = [name for name in submodules if name in modules] or [base]
        else:
            continue
        found.update(target for target in targets if target in modules and target != name)
    return found


@functools.cache
def project_graph() -> dict[str, set[str]]:
    """Each project module -> the project modules it imports; parsed once per test process (read only: no test
    changes it)."""
    paths = [path for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py")]
    modules = {module_name(path) for path in paths}
    return {module_name(path): imports_of(path, modules) for path in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return visiting[visiting.index(node):] + [node]
        if node in done:
            return None
        visiting.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        cycle = visit(node)
        if cycle:
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    graph = project_graph()
    assert len(graph) > 30 and graph["thread_client.daemon"]  # the walk really found the modules
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_daemon_package_never_imports_the_tools():
    for module, targets in project_graph().items():
        if module.startswith("thread_client"):
            assert not [t for t in targets if t.startswith("tools")], module


def test_every_sub_package_says_what_lives_there():
    for init in (REPO_ROOT / "thread_client").glob("*/__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and len(docstring.splitlines()) == 1, init


def imports_into(graph: dict[str, set[str]], importers: str, imported: str) -> dict[str, set[str]]:
    """For every module under ``importers``, the modules under ``imported`` it imports (if any)."""
    found = {}
    for module, targets in graph.items():
        bad = {target for target in targets if target.startswith(imported)}
        if module.startswith(importers) and bad:
            found[module] = bad
    return found


def test_the_request_is_on_the_ground_floor_and_the_parts_stand_on_it():
    graph = project_graph()
    assert graph["thread_client.request"] == set()  # every layer imports it; it imports none of them
    # The Protocols name the request, the stop a source polls and (for type checking only) the key a pool holds
    # and the threads a part owns: nothing of the flow.
    allowed = {"thread_client.request", "thread_client.selectable_event", "thread_client.limits.keys",
               "thread_client.threads"}
    assert graph["thread_client.parts"] <= allowed


def test_the_edges_never_reach_into_the_flow():
    # Sources, sinks, journals and transports (io/, cluster/) serve the flow; they never import it.
    graph = project_graph()
    assert imports_into(graph, "thread_client.io", "thread_client.flow") == {}
    assert imports_into(graph, "thread_client.cluster", "thread_client.flow") == {}


def test_the_flow_reports_through_its_listener_and_imports_nothing_that_reports_on_it():
    # Metrics, reports, the summary, the status and Prometheus listen to the flow or read it from above.
    assert imports_into(project_graph(), "thread_client.flow", "thread_client.observe") == {}


def test_the_rule_checker_sees_a_forbidden_import():
    graph = {"thread_client.io.x": {"thread_client.flow.worker", "thread_client.request"}}
    assert imports_into(graph, "thread_client.io", "thread_client.flow") == {"thread_client.io.x": {"thread_client.flow.worker"}}
