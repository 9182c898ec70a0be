"""Files a reader may see at any moment (a gradebook, results.json): written whole or not at all."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8", suffix=".tmp") as handle:
        handle.write(text)
    os.replace(handle.name, path)
