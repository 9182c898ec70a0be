"""What every demo shares: where the course code comes from, seeds, plots, timers.

The one place that decides which implementation the demos run is
:func:`load_units`: by default the instructor's ``solutions/``, or a
student's folder (the same files the grader takes), or modules passed in
directly (a notebook's own namespace, for instance). The units are the ones
``course.toml`` lists; files are loaded by the engine's loader, as the grader
loads them.
"""
from __future__ import annotations

import dis
import functools
import inspect
import math
import os
import statistics
import sys
import time
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from autograder.core.i18n import N_, _, gettext, translate_text
from autograder.trust.loader import load_folder, load_stand_ins
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

    def __init__(self, modules: Mapping[str, types.ModuleType], source: str, course: Course,
                 where: Mapping[str, str] | None = None):
        unknown = sorted(set(modules) - set(course.units))
        if unknown:
            raise ValueError(f"no unit {', '.join(unknown)}; the units are {', '.join(course.units)}")
        self._modules = {name: modules[name] for name in course.units if name in modules}
        self.source, self.course = source, course
        self._where = dict(where or {})

    def where(self, name: str) -> str:
        """Where unit ``name``'s code came from, in words: its file, or this notebook."""
        if name in self._where:
            return self._where[name]
        file = getattr(self._modules.get(name), "__file__", None)
        return str(file) if file else _("this notebook's answer cells")

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
        ``assignments/``); a relative folder that is not in the working
        folder is looked for in the course's folder (:func:`find_folder`).
      modules: override single units with already-imported modules, e.g.
        ``load_units(attention=my_module)``.
    Returns:
      Units, without the units the source does not have.
    """
    course = demo_course()
    if source is None or str(source) == "solutions":
        found, label = _reference_units(course, set(modules))
    else:
        folder = find_folder(source)
        found, label = load_folder(course, folder), str(folder)
    return Units({**found, **modules}, label, course)


def find_folder(source: str | os.PathLike) -> Path:
    """The folder ``source`` names: as given (relative to the working folder), else, for a
    relative name, in the course's folder, so that "assignments" is the course's assignments/
    from a notebook in any folder. ValueError naming both places when neither holds it."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        return folder
    in_course = demo_course().root / folder
    if not folder.is_absolute() and in_course.is_dir():
        return in_course
    places = str(folder.resolve()) + ("" if folder.is_absolute() else f" nor {in_course}")
    raise ValueError(f"load_units: {source} is not a folder (neither {places})")


def _functions(module: types.ModuleType) -> Iterator[types.FunctionType]:
    """The functions ``module`` defines, its classes' methods included."""
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported, not defined here
        if inspect.isfunction(value):
            yield value
        elif inspect.isclass(value):
            yield from (f for f in vars(value).values() if inspect.isfunction(f))


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of every function nested in it."""
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _codes(constant)


def _raises_bare_not_implemented(code: types.CodeType) -> bool:
    """Whether ``code`` holds ``raise NotImplementedError()`` (or without the call), no message:
    what nbgrader's release leaves in a notebook's answer cell."""
    loaded = False
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and instruction.argval == "NotImplementedError":
            loaded = True
        elif loaded and instruction.opname in ("PRECALL", "CALL", "CACHE", "PUSH_NULL") and not instruction.arg:
            continue
        elif loaded and instruction.opname == "RAISE_VARARGS":
            return True
        else:
            loaded = False
    return False


def _is_stub(module: types.ModuleType) -> bool:
    """Whether a function of ``module`` is still a stub: it raises the stub file's
    NotImplementedError("<name>: not implemented yet"), or nbgrader's bare NotImplementedError()."""
    for function in _functions(module):
        for code in _codes(function.__code__):
            if any(isinstance(c, str) and c.endswith(NOT_IMPLEMENTED) for c in code.co_consts) \
                    or _raises_bare_not_implemented(code):
                return True
    return False


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
    order (the unit's siblings, course.toml ``stand_ins``, that are still stubs, then the unit),
    where the demos took each from, and how to point them at another folder."""
    try:
        yield
    except NotImplementedError as error:
        unit = _raising_unit(units, error)
        if unit is None:
            raise
        first = [s for s in units.course.units if s in units.course.units[unit].stand_ins
                 and s in units and _is_stub(units[s])]
        names = (*first, unit)
        files = [units.course.units[name].file for name in names]
        then = "".join(_(", then {file}").format(file=file) for file in files[1:])
        says = translate_text(str(error)) or _(NOT_IMPLEMENTED)
        ran = "; ".join(_("{file} from {where}").format(file=file, where=units.where(name))
                        for name, file in zip(names, files))
        raise UnitNotImplemented(_(
            "implement {file} first{then} ({last} says: {says}). It ran {ran}. To run your code from another folder, "
            "set SOURCE in the lesson's setup cell (or --source) to the folder that holds your {file}."
        ).format(file=files[0], then=then, last=files[-1], says=says, ran=ran)) from None


# What a stub raises (autograder/authoring/stubgen.py writes it), for the message above.
STUB_SAYS = N_("{name}: not implemented yet")


def tr(message: str) -> str:
    """A plot's text in the language this process speaks (:mod:`autograder.core.i18n`): in English
    where the translation writes Chinese and no font here draws it (:func:`cjk_font`)."""
    text = gettext(message)
    if text != message and any("\u3400" <= c <= "\u9fff" for c in text) and cjk_font() is None:
        return message
    return text


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
    for _round in range(repeats):
        count, start = 0, time.perf_counter()
        while True:
            fn()
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        times.append(elapsed / count)
    return statistics.median(times)


# How the lessons write a measured number. Every demo has ``quotes(result)``: the numbers the
# lessons quote from it, written these ways (course/lessons/measured.json holds the reference
# run's, and tests/project/test_lesson_numbers.py reruns the demos to check them); a demo whose
# numbers are times on this machine has ``timings(result)``: (value, format) pairs, which the
# lessons quote as the range measured over several runs.

def percent(x: float) -> str:
    """0.902 -> "90%"."""
    return f"{x:.0%}"


def sci(x: float, digits: int = 1) -> str:
    """Scientific notation as the lessons write it: sci(3.64e-1) -> "3.6e-1", sci(7.2e-47, 0) -> "7e-47"."""
    if x == 0:
        return "0"
    exponent = math.floor(math.log10(abs(x)))
    mantissa = round(x / 10**exponent, digits)
    if abs(mantissa) >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.{digits}f}e{exponent}"


def sig(x: float, digits: int = 2) -> str:
    """``x`` to ``digits`` significant figures, in plain notation: 155.9 -> "160", 0.815 -> "0.82"."""
    if x == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(x)))
    rounded = round(x, decimals)
    return f"{rounded:.{max(decimals, 0)}f}"


def magnitude(x: float) -> str:
    """The power of ten nearest ``x``: 1.8e-7 -> "1e-7"."""
    return f"1e{round(math.log10(abs(x)))}"


def power_above(x: float) -> str:
    """The smallest power of ten above ``x``: 5.96e-7 -> "1e-6" (a bound: "agree within 1e-6")."""
    return f"1e{math.floor(math.log10(abs(x))) + 1}"


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): 1 for linear growth, 2 for quadratic."""
    lx = torch.log(torch.as_tensor(xs, dtype=torch.float64))
    ly = torch.log(torch.as_tensor(ys, dtype=torch.float64))
    lx, ly = lx - lx.mean(), ly - ly.mean()
    return float((lx * ly).sum() / (lx * lx).sum())


@contextmanager
def quiet_stderr():
    """Silence what native code writes to file descriptor 2 meanwhile (torch's profiler writes
    "profiler_start" lines there, past Python's sys.stderr, into a notebook's outputs)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


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
AUTO = "auto"


def _notebook_module(unit: str, namespace: dict) -> types.ModuleType:
    """The notebook's namespace as a module, named as the namespace is, so that the functions its
    cells define count as this module's (:func:`stubs_named`, :func:`_is_stub`)."""
    module = types.ModuleType(namespace.get("__name__", f"notebook_{unit}"))
    module.__dict__.update({k: v for k, v in namespace.items() if not k.startswith("__")})
    return module


def units_for(source: str, unit: str, namespace: dict | None = None) -> Units:
    """The units a lesson's demo runs, as the lesson notebooks ask for them (the setup cell's SOURCE).

    Inputs:
      source: "auto" (this notebook's code for ``unit`` once every answer cell
        is filled in, else ``unit``'s file in the course's assignments/ folder:
        a student's own, wherever the notebook is opened), "notebook" (the
        notebook's code for ``unit``, filled in or not), "solutions", or a
        folder (:func:`load_units`). With "auto" and "notebook" the other units
        are the ones :func:`load_units` finds by default (the reference; in a
        student's bundle, which has none, their own assignments/).
      unit: the lesson's unit.
      namespace: the notebook's ``globals()`` (needed for "auto" and "notebook").
    """
    if namespace is not None:  # a notebook's cell: the kernel speaks the notebook's language (its LANG)
        from autograder.nbgrader.kernel_side import speak

        speak(namespace, default=False)
    if source not in (NOTEBOOK, AUTO):
        return load_units(source)
    if namespace is None:
        raise ValueError(f'units_for("{source}", ...) needs the notebook\'s globals()')
    module = _notebook_module(unit, namespace)
    if source == AUTO:
        course = demo_course()
        mine = _folder_units(course, course.assignments).get(unit)
        if mine is not None and not _written_here(module, mine):
            where = _("{file} (this notebook's answer cells are not all filled in)").format(file=mine.__file__)
            reference = load_units(None, **{unit: mine})
            return Units(dict(reference), reference.source, course, {unit: where})
    return load_units(None, **{unit: module})


def _written_here(module: types.ModuleType, stub: types.ModuleType) -> bool:
    """Whether the notebook ``module`` defines every function and class the unit's file ``stub``
    defines, none of them still a stub: the answer cells are all filled in."""
    names = {name for name, value in vars(stub).items()
             if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == stub.__name__}
    defined = {value.__name__ for value in vars(module).values()
               if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__}
    return names <= defined and not _is_stub(module)


def code_for(source: str, unit: str, namespace: dict) -> dict:
    """The definitions of ``unit`` that SOURCE picks (:func:`units_for`), as a namespace: what a
    lesson's test cells test, so that they test the code its demos run (the notebook's ``globals()``
    themselves when that is the notebook's code)."""
    module = units_for(source, unit, namespace).need(unit)
    return namespace if module.__name__ == namespace.get("__name__") and not getattr(module, "__file__", None) \
        else vars(module)


def show(result: dict) -> None:
    """Display a demo's PNG, once, in a notebook (IPython's display; returns nothing, so that a
    cell ending with it does not show the image a second time), or print its path without IPython."""
    try:
        from IPython.display import Image, display
    except ImportError:
        print(result["png"])
        return
    display(Image(filename=result["png"]))


def run_and_show(name: str, out_dir, *, size: str = "full", units: Units | None = None) -> dict | None:
    """What a lesson's demo cell does: run demo ``name``, show its plot once and return its numbers.
    A unit that is still a stub is said in one line (which file, where the demo took it from) and
    the demo returns None: the rest of the notebook still runs."""
    from . import run_demo

    try:
        result = run_demo(name, out_dir, size=size, units=units)
    except UnitNotImplemented as error:
        print(_("{name}: not run yet: {problem}").format(name=name, problem=error))
        return None
    show(result)
    return result


def length_axis(ax, lengths) -> None:
    """Label a log-scale x axis with exactly these lengths, as plain numbers."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
