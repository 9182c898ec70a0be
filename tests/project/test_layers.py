"""The engine's layout: layers that import only downwards, and no course knowledge.

``autograder/`` is one folder per layer (README, "Layout"). A module may import
its own folder and the folders of lower layers, never a higher one nor a
sibling layer: so ``core`` stands alone, and ``sandbox/inside`` (copied whole
into the sandbox) needs nothing but ``core``. And no engine module names a
path, a brand or a unit of this course: those come from ``course/course.toml``.
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "autograder"

# Folder -> its layer; a module may import folders of a strictly lower layer, and its own.
LAYERS = {
    "core": 0,
    "trust": 1,
    "testing": 2, "sandbox": 2,
    "grading": 3,
    "authoring": 4,
    "delivery": 5,
    "nbgrader": 6,  # a delivery path built on delivery's own (the class report)
    "cli": 7,  # autograder/cli.py, autograder/cli_arguments.py and autograder/__init__.py
}
# Folder -> the lower layers it may still not import: delivery grades through grading's one entry,
# never a sandbox of its own.
NEVER = {"delivery": {"sandbox"}}
# Folders of data, not layers: the engine's message catalogues (autograder/core/i18n.py).
DATA = ("locale",)
# What the box holds besides core (autograder.sandbox.contents.BOXED): it may import only these.
BOXED = {"core", "trust", "sandbox.inside"}


def _folder(module: str) -> str:
    """'autograder.trust.subject' (or 'autograder.core') -> 'core'; the package's own top-level
    modules (autograder, autograder.cli) count as 'cli'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (ENGINE / parts[1]).is_dir() else "cli"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ENGINE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out[name] = path
    return out


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every engine module ``path`` imports, at any depth of the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "autograder"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno}: a relative import; the engine imports absolutely")
            if node.module and node.module.split(".")[0] == "autograder":
                found.append((node.lineno, node.module))
    return found


def _violations(modules: dict[str, Path]) -> list[str]:
    bad = []
    for name, path in modules.items():
        mine = _folder(name)
        boxed = name.startswith("autograder.sandbox.inside")
        for line, target in _imports(path):
            theirs = _folder(target)
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{line} imports {target}"
            if boxed and not any(target.startswith(f"autograder.{b}") for b in BOXED):
                bad.append(f"{where}: sandbox/inside may import only {sorted(BOXED)} (it is copied alone into the box)")
            elif theirs != mine and LAYERS[theirs] >= LAYERS[mine]:
                bad.append(f"{where}: {mine} (layer {LAYERS[mine]}) may not import {theirs} (layer {LAYERS[theirs]})")
            elif theirs in NEVER.get(mine, ()):
                bad.append(f"{where}: {mine} may not import {theirs} (it goes through grading)")
    return bad


def _circles(modules: dict[str, Path]) -> list[list[str]]:
    """The import circles among ``modules`` (imports at any depth of a file count: a deferred import
    is a circle deferred), each as the modules of one strongly connected component."""
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for _, target in _imports(path):
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                graph[name].add(target)
    for name, path in modules.items():  # `from autograder.core import cases` names the module cases
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                graph[name] |= {f"{node.module}.{a.name}" for a in node.names} & set(modules) - {name}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_engine_folder_is_a_known_layer():
    """Each sub-folder of autograder/ is one of the layers (a new one needs its place in LAYERS)."""
    folders = {p.name for p in ENGINE.iterdir() if p.is_dir() and p.name not in ("__pycache__", *DATA)}
    assert folders == set(LAYERS) - {"cli"}, sorted(folders ^ (set(LAYERS) - {"cli"}))
    assert not [p for name in DATA for p in (ENGINE / name).rglob("*.py")], "a data folder holds no module"


def test_engine_imports_only_downwards():
    """No engine module imports a module of its own or a higher layer's other folders."""
    assert _violations(_modules()) == []


def test_no_import_circle():
    """No engine module reaches itself through imports, deferred ones included."""
    assert _circles(_modules()) == []


def test_circle_check_finds_a_deferred_circle(tmp_path):
    (tmp_path / "a.py").write_text("from autograder.core import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from autograder.core.a import x\n")
    (tmp_path / "c.py").write_text("from autograder.core.a import y\n")
    found = _circles({"autograder.core.a": tmp_path / "a.py", "autograder.core.b": tmp_path / "b.py",
                      "autograder.core.c": tmp_path / "c.py"})
    assert found == [["autograder.core.a", "autograder.core.b"]], found


def test_layer_check_catches_an_upward_import(tmp_path):
    """The check itself fails on core importing grading, and on the box importing the host side."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "bad.py").write_text("from autograder.grading.grade import grade\n")
    (tmp_path / "inside.py").write_text("from autograder.sandbox import host\n")
    (tmp_path / "batch.py").write_text("from autograder.sandbox.pool import Pool\n")
    found = _violations({"autograder.core.bad": tmp_path / "core" / "bad.py",
                         "autograder.sandbox.inside.worker": tmp_path / "inside.py",
                         "autograder.delivery.batch": tmp_path / "batch.py"})
    assert len(found) == 3 and "core (layer 0) may not import grading" in found[0] and "copied alone" in found[1] \
        and "delivery may not import sandbox" in found[2], found


def _course_words() -> tuple[set[str], set[str]]:
    """The names only the course may know: (names found as whole tokens anywhere in a literal:
    brand, course name, units, unit files, multi-part paths; single folder names, which are also
    plain words, found only as a path: the whole literal, or its first part)."""
    data = tomllib.loads((ROOT / "course" / "course.toml").read_text(encoding="utf-8"))
    names = {data["course"]["name"], *data["branding"].values(), *data["units"]}
    names |= {spec["file"] for spec in data["units"].values()}
    names |= {rel for spec in data["units"].values() for rel in spec.get("stand_ins", {}).values()}
    paths = set()
    for value in data["paths"].values():
        paths |= set(value) if isinstance(value, list) else {value}
    paths.discard("autograder")  # the engine itself, which the student bundle lists
    return names | {p for p in paths if "/" in p}, {p for p in paths if "/" not in p}


def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant in ``path`` but docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def _named(text: str, words: tuple[set[str], set[str]]) -> set[str]:
    """The course words ``text`` names (``attention`` in "from .attention", not in "attentive")."""
    names, folders = words
    found = {w for w in names if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)}
    return found | {w for w in folders if text == w or text.startswith(w + "/")}


def test_no_engine_module_names_the_course():
    """No engine code literal names a course path, brand, name or unit (docstrings may give examples)."""
    words = _course_words()
    manifest = ENGINE / "core" / "manifest.py"  # the manifest's reader: it knows the keys, and where the manifest lies
    found = [f"{path.relative_to(ROOT)}:{line}: {sorted(_named(text, words))} in {text[:60]!r}"
             for path in _modules().values() if path != manifest for line, text in _literals(path)
             if _named(text, words)]
    assert found == [], "\n".join(found)


def test_course_name_check_catches_a_brand_and_a_path():
    """The check itself finds the brand and a suite's folder in a literal."""
    words = _course_words()
    assert _named('print("attn-course: done")', words) == {"attn-course"}
    assert _named("tests/hidden/oracles.py", words) == {"tests/hidden"}
    assert _named("solutions/attention.py", words) == {"solutions", "attention", "attention.py"}
    assert _named("attentive solutions", words) == set()


# What starts grading: the zygote (started, acquired, made) and the grader's heavy import. Only
# the session and the modules it is built on may call them (autograder/grading/session.py).
STARTERS = {"prestart", "Pool", "acquire", "import_grader"}
SESSION_SIDE = {"autograder.grading.session", "autograder.grading.forking", "autograder.grading.parallel",
                "autograder.sandbox.pool", "autograder.sandbox.host"}


def _starts(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every call of a starter in ``path``."""
    calls = [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)]
    names = [(c.lineno, c.func.id if isinstance(c.func, ast.Name) else getattr(c.func, "attr", "")) for c in calls]
    return [(line, name) for line, name in names if name in STARTERS]


def _own_starts(modules: dict[str, Path]) -> list[str]:
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{line}: calls {name}(); "
            "start grading with GradingSession" for module, path in modules.items() if module not in SESSION_SIDE
            for line, name in _starts(path)]


def test_every_entry_point_starts_grading_through_the_session():
    """The CLI, the batch, the batch's servers, Gradescope, PrairieLearn (and nbgrader, through
    the CLI) start no pool and import no grader but through GradingSession."""
    assert _own_starts(_modules()) == []


def test_session_check_catches_a_pool_started_by_hand(tmp_path):
    (tmp_path / "entry.py").write_text("from autograder.sandbox import pool\nzygote = pool.Pool.acquire(course)\n"
                                       "from autograder.sandbox.pool import prestart\nprestart(course)\n")
    found = _own_starts({"autograder.delivery.entry": tmp_path / "entry.py"})
    assert [f.split(": ")[1].split(";")[0] for f in found] == ["calls acquire()", "calls prestart()"], found


# The platforms (autograder/delivery/platform.py): each module that defines one imports the base
# module, never another platform's module; what two platforms share lives in the base module.
PLATFORM_BASE = "autograder.delivery.platform"


def _targets(path: Path) -> set[str]:
    """Every engine module ``path`` imports, ``from package import module`` included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {t for t in found if t.split(".")[0] == "autograder"}


def _classes(path: Path) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)]


def _platform_imports(modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """(the platform modules: those defining a subclass of a class of the base module, the
    imports of one platform module by another)."""
    bases = {c.name for c in _classes(modules[PLATFORM_BASE])}
    named = lambda base: base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")  # noqa: E731
    platforms = {name for name, path in modules.items() if name != PLATFORM_BASE
                 and any(named(b) in bases for c in _classes(path) for b in c.bases)}
    bad = [f"{name} imports {target}: a platform module imports only {PLATFORM_BASE}, never another platform's"
           for name in sorted(platforms) for target in sorted(_targets(modules[name]))
           if any(target == other or target.startswith(other + ".") for other in platforms - {name})]
    return platforms, bad


def test_no_platform_module_imports_another():
    """Gradescope, PrairieLearn and Classroom each subclass Platform, and none imports another."""
    platforms, bad = _platform_imports(_modules())
    assert {"autograder.delivery.gradescope", "autograder.delivery.prairielearn",
            "autograder.delivery.classroom"} <= platforms, platforms
    assert bad == []


def test_platform_check_catches_a_platform_importing_another(tmp_path):
    (tmp_path / "base.py").write_text("class Platform:\n    pass\n\nclass HostedPlatform(Platform):\n    pass\n")
    (tmp_path / "one.py").write_text("from autograder.delivery.platform import HostedPlatform\n"
                                     "class One(HostedPlatform):\n    pass\n")
    (tmp_path / "two.py").write_text("from autograder.delivery import one\nfrom autograder.delivery import platform\n"
                                     "class Two(platform.Platform):\n    pass\n")
    (tmp_path / "three.py").write_text("from autograder.delivery.one import One\nfrom autograder.delivery.two import Two\n")
    platforms, bad = _platform_imports({PLATFORM_BASE: tmp_path / "base.py", "autograder.delivery.one": tmp_path / "one.py",
                                        "autograder.delivery.two": tmp_path / "two.py",
                                        "autograder.delivery.three": tmp_path / "three.py"})
    assert platforms == {"autograder.delivery.one", "autograder.delivery.two"}, platforms
    assert len(bad) == 1 and bad[0].startswith("autograder.delivery.two imports autograder.delivery.one:"), bad


# -- each layer's public face ------------------------------------------------------------------
#
# A layer's ``__init__`` lists, as ``__all__``, the modules other layers and the course (its
# files, its suites) may import; the rest are the layer's own. The project's tests may reach any.
PROTOCOL = {"Call", "New", "Result", "Failure", "StudentError", "Subject", "leaves_of", "map_nested"}
USERS = (ENGINE, ROOT / "course", ROOT / "tests" / "hidden", ROOT / "tests" / "public")


def _faces() -> dict[str, list[str]]:
    """Folder -> its ``__all__``, read from its ``__init__.py`` without importing it."""
    faces = {}
    for folder in LAYERS:
        init = ENGINE / folder / "__init__.py"
        if init.is_file():
            tree = ast.parse(init.read_text(encoding="utf-8"))
            faces[folder] = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                                  and [getattr(t, "id", None) for t in n.targets] == ["__all__"]), None)
    return faces


def _reaches(files: list[tuple[str, Path]], modules: dict[str, Path], faces: dict[str, list[str]]) -> list[str]:
    """Imports of another layer's module that its ``__all__`` does not list (``files``: (the
    importer's folder, or "" outside the engine, and its path))."""
    bad = []
    for mine, path in files:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        for node in ast.walk(_parsed(path)):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("autograder."):
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                         for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("autograder.")]
            for target in names:
                parts = target.split(".")
                folder = _folder(target)
                if folder == "cli" or folder == mine or len(parts) < 3:
                    continue
                if parts[2] not in (faces.get(folder) or ()):
                    bad.append(f"{shown}:{node.lineno} imports {target}, which "
                               f"autograder/{folder}/__init__.py's __all__ does not list")
    return bad


def _parsed(path: Path) -> ast.AST:
    """``path``'s tree; an empty one for a file that does not compile (a hostile case's, on purpose)."""
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def _users() -> list[tuple[str, Path]]:
    return [(_folder(".".join(p.relative_to(ROOT).with_suffix("").parts)) if p.is_relative_to(ENGINE) else "", p)
            for top in USERS for p in sorted(top.rglob("*.py"))]


def test_every_layer_lists_its_public_modules():
    modules = _modules()
    faces = _faces()
    assert {f for f, face in faces.items() if face is None} == set(), "a layer without __all__"
    missing = [f"{folder}.{name}" for folder, face in faces.items() for name in face
               if f"autograder.{folder}.{name}" not in modules]
    assert not missing, f"__all__ names no such module: {missing}"
    assert _reaches(_users(), modules, faces) == []


def test_protocol_types_are_imported_from_the_protocol():
    """Call, Result and the rest come from autograder.core.protocol, never through another module."""
    bad = [f"{p.relative_to(ROOT)}:{n.lineno} imports {sorted(PROTOCOL & {a.name for a in n.names})} from {n.module}"
           for top in (*USERS, ROOT / "tests") for p in sorted(top.rglob("*.py"))
           for n in ast.walk(_parsed(p))
           if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("autograder.")
           and n.module != "autograder.core.protocol" and PROTOCOL & {a.name for a in n.names}]
    assert not bad, "\n".join(bad)


def test_the_face_check_catches_an_unlisted_module(tmp_path):
    user = tmp_path / "user.py"
    user.write_text("from autograder.trust.loader import load_unit\nfrom autograder.trust import enforce\n")
    modules = {"autograder.trust.loader": user, "autograder.trust.enforce": user}
    found = _reaches([("grading", user)], modules, {"trust": ["enforce"]})
    assert len(found) == 1 and "autograder.trust.loader" in found[0], found
