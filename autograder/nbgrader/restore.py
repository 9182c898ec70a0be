"""The nbgrader preprocessor that restores every nbgrader cell's metadata from the gradebook; it
runs inside nbgrader's (trusted) process, named in ``course/nbgrader_config.py``."""
from __future__ import annotations

from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor


class RestoreCellMetadata(NbGraderPreprocessor):
    """Restore every nbgrader cell's metadata (and a locked cell's source) from the gradebook.

    nbgrader's OverwriteCells restores a locked cell's source but then checks
    its checksum, which also covers the grade/solution flags and the points:
    a student who flips a test cell's ``grade`` flag makes the whole
    notebook fail with "Inconsistent checksums". Restoring all the flags first
    makes the checksum hold again. A cell claiming a grade_id this notebook
    does not have is treated as ordinary student text.
    """

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            source_nb = gb.find_notebook(info["notebook"], info["assignment"])
            sources = {c.name: c for c in source_nb.source_cells}
            grades = {c.name: c for c in source_nb.grade_cells}
            solutions = {c.name for c in source_nb.solution_cells}
            tasks = {c.name for c in source_nb.task_cells}
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader")
                if meta is None:
                    continue
                gid = meta.get("grade_id") if isinstance(meta, dict) else None
                if gid not in sources:
                    del cell.metadata["nbgrader"]
                    continue
                source = sources[gid]
                if cell.cell_type != source.cell_type:
                    self.log.warning("Cell %s: type restored to %s", gid, source.cell_type)
                    _set_type(cell, source.cell_type)
                restored = {"grade": gid in grades, "grade_id": gid, "locked": bool(source.locked),
                            "schema_version": 3, "solution": gid in solutions}
                if gid in tasks:
                    restored["task"] = True
                if gid in grades:
                    restored["points"] = float(grades[gid].max_score)
                if any(meta.get(k) != v for k, v in restored.items()):
                    self.log.warning("Cell %s: nbgrader metadata restored from the gradebook", gid)
                cell.metadata["nbgrader"] = restored
                if source.locked and cell.source != source.source:
                    self.log.warning("Cell %s: locked cell edited; its source is restored", gid)
                    cell.source = source.source
        return nb, resources


def _set_type(cell, cell_type: str) -> None:
    cell.cell_type = cell_type
    if cell_type == "code":
        cell.setdefault("outputs", [])
        cell.setdefault("execution_count", None)
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
