"""What every demo shares: where the course code comes from, seeds, plots, timers.

The one place that decides which implementation the demos run is
:func:`load_units`: by default the instructor's ``solutions/``, or a
student's folder (the same files the grader takes), or modules passed in
directly (a notebook's own namespace, for instance). The units are the ones
``course.toml`` lists; files are loaded by the engine's loader, as the grader
loads them.
"""
from __future__ import annotations

import functools
import inspect
import os
import statistics
import sys
import time
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from autograder.core.loader import load_folder, load_stand_ins
from autograder.core.manifest import Course, load_course
from autograder.core.results import NOT_IMPLEMENTED

ROOT = Path(__file__).resolve().parents[2]
SIZES = ("small", "full")
SEED = 0


@functools.cache
def demo_course() -> Course:
    """The course these demos belong to: the manifest of the tree they sit in."""
    return load_course(ROOT)


class UnitNotImplemented(Exception):
    """A unit a demo runs is still (partly) the stub; the message names the file to implement first."""


class Units(Mapping[str, types.ModuleType]):
    """The course modules a demo may use, keyed by unit name (course.toml's order).

    A unit the source does not provide is absent; ``source`` says where the
    modules came from.
    """

    def __init__(self, modules: Mapping[str, types.ModuleType], source: str, course: Course):
        unknown = sorted(set(modules) - set(course.units))
        if unknown:
            raise ValueError(f"no unit {', '.join(unknown)}; the units are {', '.join(course.units)}")
        self._modules = {name: modules[name] for name in course.units if name in modules}
        self.source, self.course = source, course

    def __getitem__(self, name: str) -> types.ModuleType:
        return self._modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def need(self, name: str) -> types.ModuleType:
        if name not in self.course.units:
            raise ValueError(f"no unit {name!r}; the units are {', '.join(self.course.units)}")
        if name not in self._modules:
            raise ValueError(f"this demo needs {self.course.units[name].file}, which {self.source} does not provide")
        return self._modules[name]


def _stand_ins(course: Course) -> dict[str, types.ModuleType]:
    """The course's trusted stand-ins (course.toml ``stand_ins``) whose files are present: none in a
    student's bundle, which does not ship them (they would hand out answers)."""
    found = {}
    for unit in course.units.values():
        present = all((course.root / path).is_file() for path in unit.stand_ins.values())
        if present and set(unit.stand_ins) - set(found):
            found = {**load_stand_ins(course, unit), **found}
    return found


def _folder_units(course: Course, folder: Path) -> dict[str, types.ModuleType]:
    return load_folder(course, folder) if folder.is_dir() else {}


def _reference_units(course: Course, given: set[str]) -> tuple[dict[str, types.ModuleType], str]:
    """The units not in ``given``, and where they came from: solutions/, then (where it is absent,
    as in a student's bundle) the stand-ins, then the student's own assignments/ (which ``check``
    also runs together)."""
    origins = {"solutions": lambda: _folder_units(course, course.solutions),
               "stand-ins": lambda: _stand_ins(course),
               "assignments": lambda: _folder_units(course, course.assignments)}
    found, used = {}, []
    for origin, load in origins.items():
        wanted = set(course.units) - given - set(found)
        if not wanted:
            break
        new = {name: module for name, module in load().items() if name in wanted}
        if new:
            found.update(new)
            used.append(origin)
    return found, " + ".join(used) or "solutions"


def load_units(source: str | os.PathLike | None = None, **modules: types.ModuleType) -> Units:
    """The course code the demos run.

    Inputs:
      source: None or "solutions" (the reference; where it is absent, the
        course's stand-ins and then ``assignments/`` fill in), or a folder
        holding any of the unit files (a student's submission,
        ``assignments/``).
      modules: override single units with already-imported modules, e.g.
        ``load_units(attention=my_module)``.
    Returns:
      Units, without the units the source does not have.
    """
    course = demo_course()
    if source is None or str(source) == "solutions":
        found, label = _reference_units(course, set(modules))
    else:
        folder = Path(source)
        if not folder.is_dir():
            raise ValueError(f"load_units: {folder} is not a folder")
        found, label = load_folder(course, folder), str(folder)
    return Units({**found, **modules}, label, course)


def _functions(module: types.ModuleType) -> Iterator[types.FunctionType]:
    """The functions ``module`` defines, its classes' methods included."""
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported, not defined here
        if inspect.isfunction(value):
            yield value
        elif inspect.isclass(value):
            yield from (f for f in vars(value).values() if inspect.isfunction(f))


def _is_stub(module: types.ModuleType) -> bool:
    """Whether a function of ``module`` still raises the stub's NotImplementedError("<name>: not implemented yet")."""
    constants = (c for f in _functions(module) for c in f.__code__.co_consts)
    return any(isinstance(c, str) and c.endswith(NOT_IMPLEMENTED) for c in constants)


def _raising_unit(units: Units, error: BaseException) -> str | None:
    """The unit whose code raised ``error`` itself (the innermost frame), or None (torch's own)."""
    tb = error.__traceback__
    while tb.tb_next:
        tb = tb.tb_next
    raised_in = tb.tb_frame.f_globals.get("__name__")
    return next((name for name, module in units.items() if module.__name__ == raised_in), None)


@contextmanager
def stubs_named(units: Units):
    """Turn a unit's NotImplementedError into UnitNotImplemented naming the files to implement, in
    order: the unit's siblings (course.toml ``stand_ins``) that are still stubs, then the unit."""
    try:
        yield
    except NotImplementedError as error:
        unit = _raising_unit(units, error)
        if unit is None:
            raise
        first = [s for s in units.course.units if s in units.course.units[unit].stand_ins
                 and s in units and _is_stub(units[s])]
        files = [units.course.units[name].file for name in (*first, unit)]
        then = "".join(f", then {file}" for file in files[1:])
        raise UnitNotImplemented(f"implement {files[0]} first{then} ({files[-1]} says: {error})") from None


def seeded(seed: int = SEED) -> torch.Generator:
    """Seed torch's global generator (module init uses it) and return a private one."""
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the demos draw their plots with matplotlib, which is not installed: "
                          "pip install 'matplotlib>=3.8'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 10,
                         "axes.spines.top": False, "axes.spines.right": False})
    font = cjk_font()
    # DejaVu draws the Latin text; matplotlib falls back glyph by glyph to the CJK font.
    plt.rcParams["font.family"] = ["DejaVu Sans", font] if font else ["DejaVu Sans"]
    return plt


CJK_NAMES = ("CJK SC", "CJK", "WenQuanYi", "Heiti", "SimHei", "Droid Sans Fallback")


def _find_cjk(fonts) -> str | None:
    """The first font family among ``fonts`` (matplotlib FontEntry) that draws Chinese, by preference."""
    for key in CJK_NAMES:
        for font in fonts:
            if key in font.name:
                return font.name
    return None


@functools.cache
def cjk_font() -> str | None:
    """A font family that can draw 狗 and 它, or None (the plots then write pinyin), said once.

    matplotlib's font cache predates fonts installed after it was built (``make fonts``), so
    the system's font files are searched too and the CJK ones registered.
    """
    from matplotlib import font_manager

    found = _find_cjk(font_manager.fontManager.ttflist)
    if found is None:
        for path in font_manager.findSystemFonts():
            if any(key.replace(" ", "") in Path(path).name.replace(" ", "") for key in ("CJK", "wqy", "DroidSansFallback")):
                font_manager.fontManager.addfont(path)
        found = _find_cjk(font_manager.fontManager.ttflist)
    if found is None:
        print("course.demos: no CJK font is installed, so the plots write Chinese as pinyin "
              "(install one: `make fonts`, or apt-get install fonts-noto-cjk)", file=sys.stderr)
    return found


def save(fig, out_dir: str | os.PathLike, name: str) -> Path:
    """Save ``fig`` as ``out_dir/name.png`` and close it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    if fig.get_layout_engine() is None:  # a figure with a colour bar lays itself out (constrained)
        fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")  # no title or label cut at the edge
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def median_time(fn, *, repeats: int = 7, min_seconds: float = 0.01) -> float:
    """The median time of one call of ``fn`` over ``repeats`` timed batches, in seconds.

    Each batch repeats the call until it lasts ``min_seconds`` (short calls are
    not lost in the timer's resolution); the median of the batches is not moved
    by one batch that another process slowed down, nor by one lucky batch.
    """
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        count, start = 0, time.perf_counter()
        while True:
            fn()
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        times.append(elapsed / count)
    return statistics.median(times)


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): 1 for linear growth, 2 for quadratic."""
    lx = torch.log(torch.as_tensor(xs, dtype=torch.float64))
    ly = torch.log(torch.as_tensor(ys, dtype=torch.float64))
    lx, ly = lx - lx.mean(), ly - ly.mean()
    return float((lx * ly).sum() / (lx * lx).sum())


@contextmanager
def torch_threads(count: int = 1):
    """Run torch with ``count`` threads, then restore the setting.

    The demos' tensors are small: one thread is as fast, and on a shared
    machine it avoids OpenMP threads spinning against each other.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def demo(run):
    """Decorator for a demo's ``run(out_dir, *, size, units)``: ``units`` defaults to
    :func:`load_units`, the demo runs with one torch thread, and a unit that is still a stub
    is named (UnitNotImplemented) rather than shown as a traceback."""

    @functools.wraps(run)
    def wrapper(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
        units = load_units() if units is None else units
        with torch_threads(1), stubs_named(units):
            return run(out_dir, size=size, units=units)

    return wrapper


NOTEBOOK = "notebook"


def units_for(source: str, unit: str, namespace: dict | None = None) -> Units:
    """The units a lesson's demo runs, as the lesson notebooks ask for them.

    Inputs:
      source: "notebook" (the code written in the notebook for ``unit``, the
        reference solutions for the other units, as :func:`load_units`
        finds them), "solutions", or a folder.
      unit: the lesson's unit.
      namespace: the notebook's ``globals()`` (needed for "notebook").
    """
    if source != NOTEBOOK:
        return load_units(source)
    if namespace is None:
        raise ValueError('units_for("notebook", ...) needs the notebook\'s globals()')
    # Named as the notebook's own namespace, so its functions count as this module's (stubs_named).
    module = types.ModuleType(namespace.get("__name__", f"notebook_{unit}"))
    module.__dict__.update({k: v for k, v in namespace.items() if not k.startswith("__")})
    return load_units(None, **{unit: module})


def show(result: dict):
    """Display a demo's PNG in a notebook (returns the IPython Image), or print its path."""
    try:
        from IPython.display import Image, display
    except ImportError:
        print(result["png"])
        return None
    image = Image(filename=result["png"])
    display(image)
    return image


def length_axis(ax, lengths) -> None:
    """Label a log-scale x axis with exactly these lengths, as plain numbers."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
