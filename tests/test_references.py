"""Every place the project names in its own words exists: a path (`src/core/schema.py`,
`conf/norm/`), a module or one of its names (`src.data.base.DATA_SOURCES`), a test
(`test_train.py::test_name`). A comment, a message or a page that points at a file moved away
sends its reader nowhere; this test finds it the day the file moves."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import REPO

# Where the project writes to its readers: code, configs, pages, tests, scripts.
READ_BY_PEOPLE = ["src", "conf", "docs", "tests", "scripts", "notebooks", "hydra_plugins", ".ci"]
TOP_FILES = ["README.md", "Makefile", "pyproject.toml"]
SUFFIXES = {".py", ".md", ".yaml", ".ipynb", ".sh", ".toml", ""}
# Named on purpose though absent, each for its reason.
NOT_FILES = {
    "conf/norm/my_norm.yaml": "docs/configuration.md: the file a reader writes to add a sixth norm",
    "src/__init__": "pyproject.toml: import-linter's name for the package's own __init__ module",
}

# The whole run of path characters, or nothing (a lookahead cannot give back): `shakespeare-*.zip`,
# `<experiment>/` are patterns, not paths.
PATH = re.compile(r"(?<![\w./-])((?:src|conf|docs|tests|scripts|notebooks|hydra_plugins)/(?=([\w./-]*))\2)(?![*<{])")
MODULE = re.compile(r"(?<![\w.])(src(?:\.\w+)+)")
TEST = re.compile(r"(test_\w+\.py)::(\w+)")


def texts() -> list[tuple[str, str]]:
    files = [p for d in READ_BY_PEOPLE for p in (REPO / d).rglob("*") if p.is_file()]
    here = Path(__file__).resolve()  # this file names broken references on purpose, as examples
    files = [p for p in files if p.suffix in SUFFIXES and "__pycache__" not in p.parts and p.resolve() != here]
    files += [REPO / name for name in TOP_FILES]
    out = []
    for path in files:
        try:
            out.append((str(path.relative_to(REPO)), path.read_text()))
        except UnicodeDecodeError:  # a bundled corpus, an image
            continue
    return out


def defines(module: Path, name: str) -> bool:
    return bool(
        re.search(rf"^\s*(async def|def|class)\s+{name}\b|^\s*{name}\s*[:=(]|^\s*(from\s+\S+\s+)?import\s.*\b{name}\b", module.read_text(), re.M)
    )


def module_file(parts: list[str]) -> Path | None:
    base = REPO.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def broken_module_reference(dotted: str) -> str | None:
    """Why `src.a.b.NAME` names nothing, or None. Only names rooted in a room of `src` count
    (`src.namelist()` on a variable called `src` is no reference)."""
    parts = dotted.split(".")
    if not ((REPO / "src" / parts[1]).exists() or (REPO / "src" / f"{parts[1]}.py").exists()):
        return None
    for k in range(len(parts), 1, -1):
        module = module_file(parts[:k])
        if module is not None or REPO.joinpath(*parts[:k]).is_dir():
            rest = parts[k:]
            if not rest or (module is not None and defines(module, rest[0])):
                return None
            return f"{'.'.join(parts[:k])} defines no {rest[0]}"
    return f"no module {'.'.join(parts[:2])}"


def broken_in(where: str, text: str) -> list[str]:
    broken = []
    for m in PATH.finditer(text):
        path = m.group(1).rstrip("./-")
        if path not in NOT_FILES and "__pycache__" not in path and not (REPO / path).exists():  # bytecode: made at run time
            broken.append(f"{where}: {path}: no such file or folder")
    for m in MODULE.finditer(text):
        why = broken_module_reference(m.group(1))
        if why:
            broken.append(f"{where}: {m.group(1)}: {why}")
    for m in TEST.finditer(text):
        test_file = REPO / "tests" / m.group(1)
        if not test_file.is_file() or not re.search(rf"def {m.group(2)}\b", test_file.read_text()):
            broken.append(f"{where}: {m.group(0)}: no such test")
    return broken


def test_every_path_module_and_test_the_project_names_exists() -> None:
    broken = [line for where, text in texts() for line in broken_in(where, text)]
    assert not broken, (
        "these name something that is not there (moved or renamed?): point them at where it lives now, "
        "or, for a name written on purpose for a file that does not exist, add it to NOT_FILES with why:\n  "
        + "\n  ".join(sorted(set(broken)))
    )


def test_a_moved_file_is_caught() -> None:
    """The checks themselves, on names that do and do not exist."""
    said = "see src/schema.py (`src.data.sources.DATA_SOURCES`), test_train.py::test_gone, not docs/faults.md#bad-input"
    assert broken_in("x", said) == [
        "x: src/schema.py: no such file or folder",
        "x: src.data.sources.DATA_SOURCES: src.data defines no sources",
        "x: test_train.py::test_gone: no such test",
    ]
    assert broken_module_reference("src.data.base.DATA_SOURCES") is None
    assert broken_module_reference("src.data.sources.DATA_SOURCES") == "src.data defines no sources"
    assert broken_module_reference("src.train.no_such_name") == "src.train defines no no_such_name"
    assert broken_module_reference("src.namelist") is None  # a variable called src
    assert [m.group(1) for m in PATH.finditer("see src/core/schema.py, and src/assets/shakespeare-*.zip")] == ["src/core/schema.py"]
