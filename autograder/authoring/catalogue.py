"""The message catalogues (:mod:`autograder.core.i18n`): extracted from the sources with Babel and
merged into the ``.po`` files that git holds.

Two domains. The engine's: every ``_()``, ``N_()`` and ``gettext()`` call in the engine's own
package, into ``autograder/locale/<lang>/LC_MESSAGES/autograder.po``. The course's: what the
course's mapping file (``babel.cfg`` in course.toml's ``[paths] locale``, Babel's mapping format)
names, into ``<locale>/<lang>/LC_MESSAGES/messages.po``. Besides Babel's own methods a mapping may
name ``hints``: :func:`extract_hints`, the advice of every ``(wrong answer, advice)`` pair a suite
hands to ``compare.assert_close`` (``hints=[...]``), found without running or changing the test
(hypothesis derives a test's examples from its source, so the advice is never wrapped in a call
there: it is translated where it is shown, by ``i18n.translate_text``); besides, each test's title
(its docstring's first line, the property's name, shown translated under the same id) and each
value's label that reads as prose (``what="weights averaged over heads"``; code such as
``what="split_heads(x, 2)"`` reads the same in every language). The engine's ``cli_arguments.py`` is
extracted by ``command_line``, which adds the words ``--help`` shows (``help=``, ``description=``).

``attn-course build`` writes the catalogues (:func:`build`): each language keeps the translations
of the messages still extracted, gains the new ones with an empty translation and loses the ones
no source has any more; ``build --check`` names the stale ones (:func:`stale`).
"""
from __future__ import annotations

import ast
import datetime
import io
import re
from pathlib import Path

from autograder.core.i18n import COURSE_DOMAIN, ENGINE_DOMAIN, ENGINE_LOCALE, FIELD, catalogue_path
from autograder.core.manifest import Course

KEYWORDS = {"_": None, "N_": None, "gettext": None, "tr": None}  # tr: a text that needs a font (plots)
MAPPING = "babel.cfg"  # the course's mapping file, in its locale folder
ENGINE_ROOT = ENGINE_LOCALE.parent  # the engine's package
FIXED_DATE = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)  # a header that does not change per run
HEADER = ("# The {domain} catalogue in {language}: autograder/core/i18n.py reads this file, the command line's\n"
          "# `build` writes its msgids from the sources (autograder/authoring/catalogue.py). Translate each\n"
          "# msgstr, keeping every {{placeholder}} of its msgid.")
# Advice reads as a sentence: a pair of names ("norm2") is not advice.
ADVICE_WORDS = 4
# The keyword a suite names a compared value with (compare.assert_close(..., what="weights")): shown in
# the failure's message, so in the student's language.
LABEL_KEYWORD = "what"
HELP_KEYWORDS = ("help", "description")  # argparse's texts that --help shows (extract_command_line)
COMMAND_LINE = "cli_arguments.py"  # the engine's command-line arguments, relative to its package
# A word of prose in a label: three letters or more, not part of a name, a call, a string or an argument
# (split_heads(, d_k, 'cuda', dim=0).
PROSE_WORD = re.compile(r"(?<![\w.(\['\"=])[A-Za-z]{3,}(?![\w(\['\"=])")


# -- extraction ------------------------------------------------------------------------------------

def extract_hints(fileobj, keywords, comment_tags, options):
    """Babel extraction method for a suite: what Babel's ``python`` method finds (the keyword calls),
    and the advice of every ``(wrong answer, advice)`` pair: the second of two, a string, an f-string
    (its fields named after their expressions: ``f"eps ({eps:g})"`` is ``"eps ({eps})"``) or a module
    constant holding one, that reads as a sentence (four words or more)."""
    from babel.messages.extract import extract_python

    source = fileobj.read()
    yield from extract_python(io.BytesIO(source), keywords, comment_tags, options)
    tree = ast.parse(source)
    constants = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            text = node.elts[1]
            text = constants.get(text.id, text) if isinstance(text, ast.Name) else text
            message = advice_template(text)
            if message is not None and len(FIELD.sub("", message).split()) >= ADVICE_WORDS:
                yield node.lineno, None, message, []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            title = property_title(node)
            if title:
                yield node.lineno, None, title, []
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == LABEL_KEYWORD:
                    label = advice_template(keyword.value)
                    if label is not None and reads_as_words(label):
                        yield keyword.value.lineno, None, label, []


def extract_command_line(fileobj, keywords, comment_tags, options):
    """Babel extraction method for the command line (``cli_arguments.py``): what Babel's ``python`` method
    finds, and the words ``--help`` shows, which the command line translates when it builds its
    parser: every ``help=`` and ``description=`` text (a string or an f-string, its fields named as
    in :func:`advice_template`), and the module docstring's first line (the program's description)."""
    from babel.messages.extract import extract_python

    source = fileobj.read()
    yield from extract_python(io.BytesIO(source), keywords, comment_tags, options)
    tree = ast.parse(source)
    doc = ast.get_docstring(tree)
    if doc and doc.strip():
        yield 1, None, doc.strip().splitlines()[0].strip(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                text = advice_template(keyword.value) if keyword.arg in HELP_KEYWORDS else None
                if text:
                    yield keyword.value.lineno, None, text, []


def property_title(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """A test's title, as the grading plugin names the property: its docstring's first line."""
    doc = ast.get_docstring(node)
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else None


def reads_as_words(label: str) -> bool:
    """Whether a value's label holds a word of prose (``"weights averaged over heads"``), not only
    code, which reads the same in every language (``"split_heads(x, 2)"``, ``"LayerNorm(x)"``)."""
    return bool(PROSE_WORD.search(FIELD.sub(" ", label)))


def advice_template(node: ast.AST) -> str | None:
    """The message a string or f-string node writes, its fields named; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    names: dict[str, str]  # a field's expression -> its name in the message
    parts, names = [], {}
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value).replace("{", "{{").replace("}", "}}"))
            continue
        assert isinstance(value, ast.FormattedValue)  # an f-string holds nothing else
        expression = ast.unparse(value.value)
        inner = value.value
        base = inner.id if isinstance(inner, ast.Name) else inner.attr if isinstance(inner, ast.Attribute) else "value"
        name = names.get(expression)
        if name is None:
            taken = set(names.values())
            name = base if base not in taken else next(f"{base}{n}" for n in range(2, 99) if f"{base}{n}" not in taken)
            names[expression] = name
        parts.append(f"{{{name}}}")
    return "".join(parts)


def _files(root: Path, pattern: str) -> list[Path]:
    """The files under ``root`` that a mapping pattern (Babel's: ``course/**.py``) matches."""
    from babel.util import pathmatch

    fixed = []
    for part in pattern.split("/"):
        if any(c in part for c in "*?["):
            break
        fixed.append(part)
    top = root.joinpath(*fixed) if fixed else root
    if top.is_file():
        return [top] if pathmatch(pattern, top.relative_to(root).as_posix()) else []
    return sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and pathmatch(pattern, p.relative_to(root).as_posix()))


def extract(root: Path, mapping: list[tuple[str, str]], shown: Path) -> dict[str, list[str]]:
    """msgid -> the files it is written in (relative to ``shown``), in the order of the files and
    their lines, for ``mapping``'s (pattern, method) pairs under ``root``."""
    from babel.messages.extract import extract as babel_extract

    methods = {"hints": extract_hints, "command_line": extract_command_line}
    found: dict[str, list[str]] = {}
    seen: set[Path] = set()
    for pattern, method in mapping:
        for path in _files(root, pattern):
            if path in seen:  # the first pattern that matches a file extracts it, as in Babel
                continue
            seen.add(path)
            where = path.relative_to(shown).as_posix()
            with path.open("rb") as handle:
                for _line, message, _comments, _context in babel_extract(methods.get(method, method), handle,
                                                                         KEYWORDS, options={}):
                    if isinstance(message, str) and message:
                        files = found.setdefault(message, [])
                        if where not in files:
                            files.append(where)
    return found


def course_mapping(course: Course) -> list[tuple[str, str]]:
    """The course's (pattern, method) pairs, from its mapping file (none without a locale folder)."""
    if course.locale is None or not (course.locale / MAPPING).is_file():
        return []
    from babel.messages.frontend import parse_mapping_cfg

    with (course.locale / MAPPING).open(encoding="utf-8") as handle:
        method_map, _options = parse_mapping_cfg(handle)
    return list(method_map)


def domains(course: Course) -> list[tuple[str, Path, dict[str, list[str]]]]:
    """(domain, locale folder, extracted messages) of the engine and, where it has one, the course."""
    found = [(ENGINE_DOMAIN, ENGINE_LOCALE, extract(ENGINE_ROOT, [(COMMAND_LINE, "command_line"), ("**.py", "python")],
                                                    ENGINE_ROOT.parent))]
    mapping = course_mapping(course)
    if mapping:
        assert course.locale is not None  # course_mapping found its mapping file there
        found.append((COURSE_DOMAIN, course.locale, extract(course.root, mapping, course.root)))
    return found


def languages(locale: Path) -> list[str]:
    """The languages a locale folder has a folder for."""
    return sorted(p.name for p in locale.iterdir() if (p / "LC_MESSAGES").is_dir()) if locale.is_dir() else []


# -- the .po files ------------------------------------------------------------------------------------

def read(path: Path):
    from babel.messages.pofile import read_po

    with path.open("rb") as handle:
        return read_po(handle)


def merged(path: Path, domain: str, language: str, messages: dict[str, list[str]]):
    """The catalogue ``path`` should hold: ``messages`` with the translations (and translators'
    comments) it already has."""
    old = read(path) if path.is_file() else None
    catalog = _catalog(domain, language)
    for msgid, files in messages.items():
        before = old.get(msgid) if old is not None else None
        catalog.add(msgid, before.string if before is not None else "", locations=[(f, None) for f in files],
                    user_comments=list(before.user_comments) if before is not None else [])
    return catalog


def _catalog(domain: str, language: str):
    from babel.messages.catalog import Catalog

    return Catalog(locale=language, domain=domain, header_comment=HEADER.format(domain=domain, language=language),
                   project=domain, version="1", creation_date=FIXED_DATE, revision_date=FIXED_DATE, fuzzy=False,
                   charset="utf-8")


def text_of(catalog, *, locations: bool = True) -> bytes:
    from babel.messages.pofile import write_po

    out = io.BytesIO()
    write_po(out, catalog, width=0, no_location=not locations, include_lineno=False, ignore_obsolete=True)
    return out.getvalue()


def build(course: Course) -> list[Path]:
    """Write every language's catalogues anew from the sources; the files that changed."""
    written = []
    for domain, locale, messages in domains(course):
        for language in languages(locale):
            path = catalogue_path(locale, language, domain)
            data = text_of(merged(path, domain, language, messages))
            if not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
                written.append(path)
    return written


def differences(course: Course) -> list[tuple[Path, list[str], list[str]]]:
    """(catalogue, msgids the sources have that it lacks, msgids it has that no source has) of
    every stale catalogue."""
    found = []
    for domain, locale, messages in domains(course):
        for language in languages(locale):
            path = catalogue_path(locale, language, domain)
            held = {m.id for m in read(path) if m.id} if path.is_file() else set()
            missing, extra = [m for m in messages if m not in held], sorted(held - set(messages))
            if missing or extra:
                found.append((path, missing, extra))
    return found


def stale(course: Course) -> list[str]:
    """The stale catalogues, as ``build --check`` names them (relative to the course root)."""
    def name(path: Path) -> str:
        return path.relative_to(course.root).as_posix() if path.is_relative_to(course.root) else str(path)

    return [f"{name(path)} ({len(missing)} messages to add, {len(extra)} to drop)" for path, missing, extra in
            differences(course)]


def for_students(course: Course, out_locale: Path, hidden: Path) -> list[Path]:
    """The course's catalogues as a student bundle holds them, under ``out_locale``: the messages
    some shipped file writes (none that only ``hidden``, the hidden suites, writes), without the
    files they come from."""
    if course.locale is None:
        return []
    hidden_prefix = hidden.relative_to(course.root).as_posix() + "/"
    written = []
    for language in languages(course.locale):
        path = catalogue_path(course.locale, language, COURSE_DOMAIN)
        if not path.is_file():
            continue
        source = read(path)
        catalog = _catalog(COURSE_DOMAIN, language)
        for message in source:
            if message.id and any(not f.startswith(hidden_prefix) for f, _ in message.locations):
                catalog.add(message.id, message.string)
        target = catalogue_path(out_locale, language, COURSE_DOMAIN)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text_of(catalog, locations=False))
        written.append(target)
    return written
