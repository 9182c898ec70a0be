"""The contract where the student works: a unit's section of the API page (course.toml ``[paths] api``)."""
from __future__ import annotations

import re
from pathlib import Path

from autograder.core.errors import UsageError
from autograder.core.manifest import Course


def translation(page: Path, lang: str | None) -> Path:
    """``page`` in ``lang``: its translation beside it, ``<stem>.<lang><suffix>``, where there is one;
    else ``page`` itself (the page as the course writes it, which every language falls back to)."""
    translated = page.with_name(f"{page.stem}.{lang}{page.suffix}") if lang else page
    return translated if translated.is_file() else page


def unit_section(course: Course, unit: str, lang: str | None = None) -> str:
    """The section of ``unit`` in the API page (in ``lang``, where the page is translated): from its
    heading ``## N. `<file>``` to the next ``## `` heading."""
    text = translation(course.api, lang).read_text(encoding="utf-8")
    start = re.search(rf"^## \d+\. `{re.escape(course.units[unit].file)}`.*$", text, re.M)
    if start is None:
        raise UsageError(f"{course.api.name} has no section '## N. `{course.units[unit].file}`'")
    end = re.search(r"^## ", text[start.end():], re.M)
    return text[start.start(): start.end() + end.start() if end else len(text)].strip()
