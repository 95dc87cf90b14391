"""The shape of the code, checked: the layers and the absence of import circles (import-linter's
contracts in pyproject.toml), no module reaching for another's private names, no function too long to
read.  ARCHITECTURE.md explains the layers."""
from __future__ import annotations

import ast
import pathlib

import hlo_cli

PACKAGE = pathlib.Path(hlo_cli.__file__).parent          # the copy the tests run (installed or not)
CONFIG = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"    # the contracts, in the repository
MAX_FUNCTION_LINES = 150


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        yield path, ".".join(parts), is_package


def test_import_contracts_hold(capsys):
    """`lint-imports`: imports go downward through the layers, and no package's modules import each
    other in a circle (lazy imports inside functions count too)."""
    from importlinter import cli as lint          # the test extra's import-linter
    code = lint.lint_imports(config_filename=str(CONFIG), no_cache=True)
    out = capsys.readouterr().out
    assert code == 0, out[out.find("Broken contracts"):] or out


def _private_imports(tree, module: str, is_package: bool, known: set[str]):
    base = module.split(".") if is_package else module.split(".")[:-1]
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("hlo_cli"):
                continue
            for alias in node.names:
                name = alias.name
                if (name.startswith("_") and not name.startswith("__") and f"{target}.{name}" not in known
                        and target != module):
                    yield f"{module}:{node.lineno} imports {name} from {target}"
                if f"{target}.{name}" in known:          # a module bound to a name: watch `name._private`
                    aliases[alias.asname or name] = f"{target}.{name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            yield f"{module}:{node.lineno} uses {node.attr} of {aliases[node.value.id]}"


def test_no_module_imports_another_modules_private_names():
    modules = list(_modules())
    known = {name for _, name, _ in modules}
    found = []
    for path, module, is_package in modules:
        found += _private_imports(ast.parse(path.read_text()), module, is_package, known)
    assert not found, "\n".join(found)


def test_no_function_is_longer_than_a_screenful_or_three():
    found = []
    for path, module, _ in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{module}.{node.name}: {length} lines (line {node.lineno})")
    assert not found, "\n".join(found)
