"""Messages in the student's language: gettext-style lookup keyed by the English text (the msgid).

Which language, once per process: the entry point calls :func:`choose`. The command line
(``autograder/cli.py``) takes ``--lang`` where a student-facing command (``check``, ``repro``,
``grade``, the course's ``viz``) is given it, else the course's ``course.toml`` ``[course] language``,
else English: ``--lang`` > ``course.toml`` > ``en``. A process that chooses nothing speaks English.
English is the identity: with ``en`` every function here returns its English argument unchanged,
byte for byte, and reads no file, so an English grade is what it was before translations existed.

The catalogues are gettext ``.po`` files, the source of truth in git: the engine's own
(``autograder/locale/<lang>/LC_MESSAGES/autograder.po``, beside this package) and the course's
(``course.toml`` ``[paths] locale``, ``<lang>/LC_MESSAGES/messages.po``: hints, plot labels, the
viewer). They are read at run time, lazily at the first lookup, with Babel's ``read_po``: no
compiled ``.mo`` exists to go stale (what runs is what git holds), for the price of parsing a few
hundred messages once per process. ``attn-course build`` extracts the messages again with Babel
(:mod:`autograder.authoring.catalogue`) and merges them into the ``.po`` files (new ones with an
empty translation, gone ones dropped); ``attn-course build --check`` and
``tests/project/test_i18n.py`` fail while a catalogue is stale or a translation is missing.

Two ways to mark a message (both extracted), its numbers as named placeholders, formatted after:

* ``_("{count} calls ran past the limit").format(count=n)``: translated where it is composed,
  on the grader's side;
* ``N_("...")``: a marker that returns its argument, for text composed where no language is
  chosen (what the sandbox's box says, the advice a suite writes). The grader's side translates
  the finished English text with :func:`translate_text`, which finds it in the catalogue, or
  recognises it as a catalogued template with its placeholders filled in, and writes the
  translation with the same values (each value translated in turn where it is a message).

The sandbox: ``autograder/core/`` is copied into the box, where only torch and numpy import. This
module imports nothing but the standard library at its top; Babel is imported by :func:`_table`,
which only a chosen language other than English reaches, and nothing in the box chooses one:
nothing inside the box translates.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from autograder.core.errors import UsageError

ENGLISH = "en"
ENGINE_LOCALE = Path(__file__).resolve().parents[1] / "locale"  # the engine's own catalogues
ENGINE_DOMAIN = "autograder"
COURSE_DOMAIN = "messages"  # Babel's default domain: the course's catalogue
# A str.format field: {name}, {name!r}, {name:.3g}.
FIELD = re.compile(r"\{(\w*)(![rsa])?(:[^{}]*)?\}")
# A template is recognised in a finished text only with this many letters of its own: "{a} ({b})"
# would match any text with a parenthesis.
MIN_LETTERS = 2

_state: dict[str, Any] = {"language": ENGLISH, "course_locale": None}
_loaded: dict[str, Any] = {}  # "table": msgid -> msgstr, "templates": [(regex, names, msgstr)]


def N_(message: str) -> str:
    """Mark ``message`` for the catalogue; it is translated later, by :func:`translate_text`."""
    return message


def catalogue_path(locale: Path, language: str, domain: str) -> Path:
    """Where a language's catalogue of ``domain`` sits under a locale folder."""
    return Path(locale) / language / "LC_MESSAGES" / f"{domain}.po"


def available(course_locale: Path | None = None) -> list[str]:
    """English and every language the engine's or the course's locale folder has a catalogue in."""
    found = {ENGLISH}
    for locale, domain in ((ENGINE_LOCALE, ENGINE_DOMAIN), (course_locale, COURSE_DOMAIN)):
        if locale is not None and Path(locale).is_dir():
            found |= {p.name for p in Path(locale).iterdir() if catalogue_path(locale, p.name, domain).is_file()}
    return sorted(found)


def choose(language: str | None, course_locale: Path | None = None) -> str:
    """Speak ``language`` (None: English) from now on in this process, the course's catalogue read
    from ``course_locale``. ValueError for a language no catalogue is written in."""
    language = language or ENGLISH
    if language != ENGLISH and language not in available(course_locale):
        raise UsageError(f"no messages in {language!r}; the languages are {', '.join(available(course_locale))}")
    _state.update(language=language, course_locale=Path(course_locale) if course_locale else None)
    _loaded.clear()
    translate_text.cache_clear()
    return language


def language() -> str:
    """The language this process speaks."""
    return _state["language"]


def course_locale() -> Path | None:
    """The course's locale folder this process reads (None: the engine's catalogue only)."""
    return _state["course_locale"]


def _read(language: str, course_locale: Path | None) -> dict[str, str]:
    """``language``'s translations, the engine's and the course's catalogues merged (with Babel)."""
    from babel.messages.pofile import read_po  # never in the box: only a language other than English gets here

    table: dict[str, str] = {}
    for locale, domain in ((ENGINE_LOCALE, ENGINE_DOMAIN), (course_locale, COURSE_DOMAIN)):
        path = catalogue_path(locale, language, domain) if locale is not None else None
        if path is None or not path.is_file():
            continue
        with path.open("rb") as handle:
            catalog = read_po(handle)
        table.update({m.id: m.string for m in catalog
                      if m.id and isinstance(m.id, str) and isinstance(m.string, str) and m.string and not m.fuzzy})
    return table


def translations(language: str, course_locale: Path | None = None) -> dict[str, str]:
    """msgid -> ``language``'s translation (the engine's and the course's catalogues merged), whatever
    language this process speaks: what writes a text in another one (a notebook built in Chinese by
    an English process). Empty for English. Do not change the dict it returns."""
    return {} if language == ENGLISH else _read_cached(language, str(course_locale) if course_locale else None)


@functools.lru_cache(maxsize=8)
def _read_cached(language: str, course_locale: str | None) -> dict[str, str]:
    return _read(language, Path(course_locale) if course_locale else None)


def renderings(message: str) -> tuple[str, ...]:
    """``message`` in English and in every language the engine's catalogue has, English first: what
    reads results written in any language (the class report) recognises the engine's words by."""
    found = [message] + [_read(lang, None).get(message, message) for lang in available() if lang != ENGLISH]
    return tuple(dict.fromkeys(found))


def _table() -> dict[str, str]:
    """The chosen language's translations, both catalogues merged (read once)."""
    if "table" not in _loaded:
        table = _read(language(), _state["course_locale"])
        _loaded["table"] = table
        _loaded["templates"] = sorted((t for t in map(_template, table.items()) if t), key=lambda t: -t[3])
    return _loaded["table"]


def _template(item: tuple[str, str]):
    """(regex that recognises ``msgid`` filled in, its field names, ``msgstr``, letters of its own),
    or None for a message without fields, or with too few letters of its own to be recognised."""
    msgid, msgstr = item
    parts = FIELD.split(msgid)  # literal, name, conversion, spec, literal, ...
    literals, names = parts[::4], parts[1::4]
    letters = sum(c.isalpha() for c in "".join(literals))
    if not names or letters < MIN_LETTERS:
        return None
    seen: dict[str, str]  # a field's name -> the group that first matched it
    pattern, seen = [], {}
    for i, literal in enumerate(literals):
        pattern.append(re.escape(literal))
        if i < len(names):
            name = names[i]
            pattern.append(f"(?P={seen[name]})" if name in seen else f"(?P<g{i}>.+?)")
            seen.setdefault(name, f"g{i}")
    return re.compile("".join(pattern), re.S), seen, msgstr, letters


def gettext(message: str) -> str:
    """``message`` in the chosen language (itself in English, or where it has no translation)."""
    if _state["language"] == ENGLISH:
        return message
    return _table().get(message, message)


_ = gettext


@functools.lru_cache(maxsize=4096)
def translate_text(text: str) -> str:
    """A finished English ``text`` in the chosen language: a catalogued message, or a catalogued
    template with its fields filled in (those values translated in turn); else ``text`` itself."""
    if _state["language"] == ENGLISH or not text:
        return text
    table = _table()
    if text in table:
        return table[text]
    for regex, groups, msgstr, _letters in _loaded["templates"]:
        found = regex.fullmatch(text)
        if found:
            values = {name: translate_text(found.group(group)) for name, group in groups.items()}
            return FIELD.sub(lambda field: values.get(field.group(1), field.group(0)), msgstr)
    return text
