"""The contract where the student works: a unit's section of the API page (course.toml ``[paths] api``)."""
from __future__ import annotations

import re

from autograder.core.manifest import Course


def unit_section(course: Course, unit: str) -> str:
    """The section of ``unit``: from its heading ``## N. `<file>``` to the next ``## `` heading."""
    text = course.api.read_text(encoding="utf-8")
    start = re.search(rf"^## \d+\. `{re.escape(course.units[unit].file)}`.*$", text, re.M)
    if start is None:
        raise ValueError(f"{course.api.name} has no section '## N. `{course.units[unit].file}`'")
    end = re.search(r"^## ", text[start.end():], re.M)
    return text[start.start(): start.end() + end.start() if end else len(text)].strip()
