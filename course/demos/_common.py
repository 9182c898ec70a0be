"""What every demo shares: where the course code comes from, seeds, plots, timers.

The one place that decides which implementation the demos run is
:func:`load_units`: by default the instructor's ``solutions`` package, or a
student's folder (the same files the grader takes), or modules passed in
directly (a notebook's own namespace, for instance).
"""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys
import functools
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
UNITS = ("recurrent_cells", "attention", "multi_head", "positional_encoding", "transformer_block")
SIZES = ("small", "full")
SEED = 0

_counter = itertools.count()


@dataclass
class Units:
    """The five course modules a demo may use (attributes named after the units)."""

    recurrent_cells: types.ModuleType | None = None
    attention: types.ModuleType | None = None
    multi_head: types.ModuleType | None = None
    positional_encoding: types.ModuleType | None = None
    transformer_block: types.ModuleType | None = None
    source: str = "solutions"

    def need(self, name: str) -> types.ModuleType:
        module = getattr(self, name)
        if module is None:
            raise ValueError(f"this demo needs {name}.py, which {self.source} does not provide")
        return module


def _load_folder(folder: Path) -> dict[str, types.ModuleType]:
    """Import the unit files of a submission folder as one private package.

    The files import their siblings relatively (``from .attention import ...``),
    so they are loaded as ``_demo_submission_N.<unit>``; the folder's missing
    units are simply absent.
    """
    package = f"_demo_submission_{next(_counter)}"
    pkg = types.ModuleType(package)
    pkg.__path__ = [str(folder)]
    sys.modules[package] = pkg
    modules = {}
    for name in UNITS:
        if (folder / f"{name}.py").is_file():
            modules[name] = importlib.import_module(f"{package}.{name}")
    return modules


def _reference_units() -> dict[str, types.ModuleType]:
    """The ``solutions`` package's units; empty where it is not installed (a student's release)."""
    found = {}
    for name in UNITS:
        try:
            found[name] = importlib.import_module(f"solutions.{name}")
        except ModuleNotFoundError as error:
            if error.name not in ("solutions", f"solutions.{name}"):
                raise
    return found


def _stand_in_units() -> dict[str, types.ModuleType]:
    """The course's trusted stand-ins (``course/stand_ins``: attention, multi_head), where present."""
    found = {}
    for name in UNITS:
        path = ROOT / "course" / "stand_ins" / f"{name}.py"
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"_demo_stand_in_{next(_counter)}_{name}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            found[name] = module
    return found


def load_units(source: str | os.PathLike | None = None, **modules: types.ModuleType) -> Units:
    """The course code the demos run.

    Inputs:
      source: None or "solutions" (the reference package; where it is not
        installed, the course's stand-ins and then ``assignments/`` fill in),
        or a folder holding any of the five unit files (a student's
        submission, ``assignments/``).
      modules: override single units with already-imported modules, e.g.
        ``load_units(attention=my_module)``.
    Returns:
      Units, with None for a unit the source does not have.
    """
    if source is None or str(source) == "solutions":
        found, label = _reference_units(), "solutions"
        if len(found) < len(UNITS):
            missing = [name for name in UNITS if name not in found and name not in modules]
            extra = {**_stand_in_units()}
            if (ROOT / "assignments").is_dir():
                extra = {**_load_folder(ROOT / "assignments"), **extra}
            found.update({name: extra[name] for name in missing if name in extra})
    else:
        folder = Path(source)
        if not folder.is_dir():
            raise ValueError(f"load_units: {folder} is not a folder")
        found, label = _load_folder(folder), str(folder)
    found.update(modules)
    return Units(**found, source=label)


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
    return plt


def save(fig, out_dir: str | os.PathLike, name: str) -> Path:
    """Save ``fig`` as ``out_dir/name.png`` and close it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def best_time(fn, *, repeats: int = 5, min_seconds: float = 0.02) -> float:
    """The smallest time of one call of ``fn`` over ``repeats`` timed batches, in seconds.

    Each batch repeats the call until it lasts ``min_seconds``, so short calls
    are not lost in the timer's resolution; the minimum is the least disturbed
    by other processes on the machine.
    """
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        count, start = 0, time.perf_counter()
        while True:
            fn()
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        best = min(best, elapsed / count)
    return best


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


def single_threaded(run):
    """Decorator for a demo's ``run``: it runs with one torch thread."""

    @functools.wraps(run)
    def wrapper(*args, **kwargs):
        with torch_threads(1):
            return run(*args, **kwargs)

    return wrapper


NOTEBOOK = "notebook"


def units_for(source: str, unit: str, namespace: dict | None = None) -> Units:
    """The units a lesson's demo runs, as the lesson notebooks ask for them.

    Inputs:
      source: "notebook" (the code written in the notebook for ``unit``, the
        reference solutions for the other units), "solutions", or a folder.
      unit: the lesson's unit.
      namespace: the notebook's ``globals()`` (needed for "notebook").
    """
    if source != NOTEBOOK:
        return load_units(source)
    if namespace is None:
        raise ValueError('units_for("notebook", ...) needs the notebook\'s globals()')
    module = types.ModuleType(f"notebook_{unit}")
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
