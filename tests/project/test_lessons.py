"""The lessons and their demos: every claim of the course, run small, checked by its numbers.

Each demo runs at ``size="small"`` against the reference solutions, saves its
PNG into a temporary folder and returns the numbers it plotted; the tests
assert the qualitative claim the lesson makes about them. Seeds are fixed and
the demos run on one torch thread.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autograder.authoring.lesson import languages  # noqa: E402
from course import lessons, make_plots  # noqa: E402
from course.demos import DEMOS, UnitNotImplemented, load_units, run_demo, units_for  # noqa: E402

PNG_LIMIT = 200_000  # bytes: small enough to commit (the README shows two of them)


def check_figure(fig, name: str) -> None:
    """Every plot axis is labelled, and an image (colour encodes a value) comes with a labelled colour bar."""
    colour_bars = [ax for ax in fig.axes if hasattr(ax, "_colorbar")]
    for ax in fig.axes:
        if ax in colour_bars:
            assert ax.get_ylabel() or ax.get_xlabel(), f"{name}: a colour bar without a label"
            continue
        assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: axes {ax.get_title()!r} lack a label"
        assert not ax.images or colour_bars, f"{name}: colour encodes a value but there is no colour bar"


def run_small(name: str, tmp_path: Path, units=None) -> dict:
    module = DEMOS[name]
    save = module.save

    def checked_save(fig, *args, **kwargs):
        check_figure(fig, name)
        return save(fig, *args, **kwargs)

    module.save = checked_save
    try:
        result = run_demo(name, tmp_path, size="small", units=units)
    finally:
        module.save = save
    png = Path(result["png"])
    assert png == tmp_path / f"{name}.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size < PNG_LIMIT, f"{png.name} is {png.stat().st_size} bytes"
    return result


def geometric_mean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


# ------------------------------------------------------------------ the nine claims

def test_1_rnn_signal_decays_with_distance(tmp_path):
    r = run_small("rnn_decay", tmp_path)
    rnn, lstm, open_lstm = (r["norms"][k] for k in ("tanh RNN", "LSTM (forget bias 0)", "LSTM (forget bias 3)"))
    for values in (rnn, lstm, open_lstm):
        assert values[0] == pytest.approx(math.sqrt(r["hidden"]), rel=1e-6), "distance 0 is the identity"
    assert rnn[50] < 1e-6 * rnn[1] and rnn[50] < rnn[25] < rnn[5], f"tanh RNN should fade: {rnn[1]}, {rnn[25]}, {rnn[50]}"
    assert lstm[50] > rnn[50], "the LSTM's gates should slow the fade"
    assert open_lstm[50] > 1e-2 and open_lstm[50] > 1e4 * rnn[50], "open forget gates carry the signal far"
    five = r["five_percent"]
    assert five["tanh RNN"] < (five["LSTM (forget bias 3)"] or len(rnn)), f"5% of the signal is left after: {five}"


def test_plots_fall_back_to_pinyin_with_a_warning(monkeypatch, capsys):
    """No CJK font anywhere: cjk_font says so once and returns None (the plots then write pinyin)."""
    from matplotlib import font_manager

    from course.demos import _common

    monkeypatch.setattr(font_manager.fontManager, "ttflist", [])
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *a, **k: [])
    assert _common.cjk_font.__wrapped__() is None
    assert "no CJK font" in capsys.readouterr().err


def test_plots_use_the_cjk_font_when_one_is_installed():
    from matplotlib import font_manager

    from course.demos import _common

    if not any("CJK" in Path(f).name for f in font_manager.findSystemFonts()):
        pytest.skip("no CJK font installed (make fonts)")
    font = _common.cjk_font()
    assert font and font in _common.pyplot().rcParams["font.family"]


def test_1b_the_fixed_context_vector_is_a_bottleneck(tmp_path):
    r = run_small("seq2seq", tmp_path)
    fixed, attention = r["fixed_vector"], r["attention"]
    assert fixed[0] > 0.8, f"a short sequence fits in the fixed vector (n={r['lengths'][0]}): {fixed}"
    assert fixed[-1] < 0.5, f"a long one should not (n={r['lengths'][-1]}): {fixed}"
    assert attention[-1] > 0.7 and attention[-1] - fixed[-1] > 0.3, f"attention should recall it: {attention}"


def test_1c_the_lessons_quote_where_float32_loses_the_signal(tmp_path):
    """The lessons' number is the demo's, at the size the lessons show (full: about 4 s)."""
    r = run_demo("rnn_decay", tmp_path, size="full")
    step = r["float32_floor"]["tanh RNN"]
    tiny, norms = DEMOS["rnn_decay"].FLOAT32_TINY, r["norms"]["tanh RNN"]
    assert step is not None and norms[step - 1] >= tiny > norms[step]
    for lang in languages(lessons.lesson_course()):
        parts = lessons.parse(lessons.lesson_path("recurrent_cells", lang).read_text(encoding="utf-8"))
        text = "\n".join(arg for kind, arg in parts if kind == "markdown")
        assert re.search(rf"(?<!\d){step}(?!\d)", text), f"{lang}/recurrent_cells.md should quote step {step}"


def test_2_recurrence_is_serial(tmp_path):
    r = run_small("serial_time", tmp_path)
    lengths, rnn_calls, attention_calls = r["lengths"], r["rnn_calls"], r["attention_calls"]
    per_token = (rnn_calls[-1] - rnn_calls[0]) / (lengths[-1] - lengths[0])
    assert per_token >= 1 and all(c == rnn_calls[0] + per_token * (n - lengths[0]) for n, c in zip(lengths, rnn_calls)), (
        f"the RNN launches a fixed number of kernels per token: {rnn_calls} for L = {lengths}")
    assert len(set(attention_calls)) == 1, f"attention launches the same kernels at every L: {attention_calls}"
    assert r["rnn_seconds"][-1] > 2 * r["attention_seconds"][-1], (
        f"at L={lengths[-1]} unroll took {r['rnn_seconds'][-1]:.4f}s, attention {r['attention_seconds'][-1]:.4f}s")
    assert r["rnn_slope"] > 0.6, f"the RNN's time should grow linearly with L (log-log slope {r['rnn_slope']:.2f})"
    assert r["chain_seconds"][-1] > 3 * r["batch_seconds"][-1], (
        f"{lengths[-1]} tokens in one chain should cost more than in a batch: {r['chain_seconds']} vs {r['batch_seconds']}")
    assert r["step_seconds"][-1] > r["step_seconds"][0], f"a wider step costs more: {r['step_seconds']}"


def test_3_attention_path_is_length_one(tmp_path):
    r = run_small("path_length", tmp_path)
    rnn, att = r["rnn"], r["attention"]
    quarter = len(att) // 4
    near, far = geometric_mean(att[1 : 1 + quarter]), geometric_mean(att[-quarter:])
    assert 0.1 < far / near < 10, f"attention's dependence should not depend on distance: near {near:.3g}, far {far:.3g}"
    assert rnn[-1] < 1e-6 * rnn[1], f"the RNN's dependence should fade: {rnn[1]:.3g} -> {rnn[-1]:.3g}"
    assert att[-1] > 1e3 * rnn[-1]


def test_4_scaling_by_sqrt_dk(tmp_path):
    r = run_small("scaling", tmp_path)
    for d, var, scaled in zip(r["dims"], r["variance"], r["scaled_variance"]):
        assert 0.7 < var / d < 1.4, f"var(q.k) should be about d_k={d}, got {var:.1f}"
        assert 0.7 < scaled < 1.4, f"var(q.k / sqrt(d_k)) should be about 1, got {scaled:.2f}"
    assert r["max_weight"][-1] > 0.9, "unscaled, softmax should saturate at large d_k"
    assert max(r["scaled_max_weight"]) < 0.5, "scaled, the largest weight should stay moderate"
    assert r["max_weight"][0] < r["max_weight"][-1]
    assert r["gradient"][-1] < 0.5 * r["scaled_gradient"][-1], "unscaled, the softmax gradient should shrink"


def test_5_heads_look_at_different_things(tmp_path):
    r = run_small("heads", tmp_path)
    assert r["accuracy"] > 0.9, f"the tiny model should learn its task, accuracy {r['accuracy']:.2f}"
    back, forward = r["back"], r["forward"]
    looks_back = [h for h, w in enumerate(back) if w > 0.6]
    looks_forward = [h for h, w in enumerate(forward) if w > 0.6]
    assert looks_back and looks_forward and set(looks_back).isdisjoint(looks_forward), (
        f"one head should look back, another forward: back {back}, forward {forward}")


def test_6_no_order_without_positions(tmp_path):
    r = run_small("order", tmp_path)
    none, sin, rope = (r["difference"][k] for k in ("no positions", "sinusoidal", "RoPE"))
    assert max(none) < 1e-5 and r["sentence_difference"]["no positions"] < 1e-5, (
        f"without positions 狗咬人 and 人咬狗 should give the same (permuted) vectors: {none}")
    assert min(sin) > 1e-3 and r["sentence_difference"]["sinusoidal"] > 1e-3, f"sinusoidal: {sin}"
    assert min(rope) > 1e-3 and r["sentence_difference"]["RoPE"] > 1e-3, f"RoPE: {rope}"


def test_7_residuals_let_depth_train(tmp_path):
    r = run_small("residual_depth", tmp_path)
    plain = r["no_residual"]
    assert plain[-1] < 1e-6 * plain[0], f"without residuals the gradient should vanish with depth: {plain}"
    for name in ("pre_norm", "post_norm", "residual_only"):
        values = r[name]
        assert 0.1 < values[-1] / values[0] < 20, f"{name}: with residuals it should keep its size: {values}"
        assert values[-1] > 1e3 * plain[-1]


def test_8_capstone_transformer_recalls_where_lstm_falls(tmp_path):
    r = run_small("capstone", tmp_path)
    ks, lstm, transformer = r["distances"], r["lstm"], r["transformer"]
    assert min(transformer) > 0.8, f"the Transformer should stay accurate at every k {ks}: {transformer}"
    assert lstm[0] > 0.9, f"the LSTM should solve short distances (k={ks[0]}): {lstm}"
    assert lstm[-1] < 0.4, f"the LSTM should fall towards chance ({r['chance']:.3f}) at k={ks[-1]}: {lstm}"
    assert transformer[-1] - lstm[-1] > 0.4


def test_9_the_price_is_quadratic(tmp_path):
    r = run_small("price", tmp_path)
    assert 1.8 < r["attention_memory_slope"] < 2.1, f"attention memory ~ L^{r['attention_memory_slope']:.2f}"
    assert 0.9 < r["rnn_memory_slope"] < 1.1, f"RNN memory ~ L^{r['rnn_memory_slope']:.2f}"
    att, rnn = r["attention_seconds"], r["rnn_seconds"]
    assert att[-1] / att[0] > rnn[-1] / rnn[0], f"attention's time should grow faster: {att} vs {rnn}"


def test_10_flash_attention_holds_a_line_of_memory(tmp_path, capfd):
    """Small size: unit 2's peak grows like L^2, the tiles' like L; the profiler writes nothing."""
    r = run_small("efficient_memory", tmp_path)
    assert 1.8 < r["naive_slope"] < 2.1 and r["tiled_slope"] < 1.1, (r["naive_slope"], r["tiled_slope"])
    assert len(set(r["tiled_bytes_per_token"])) == 1 and r["max_difference"] < 1e-5
    captured = capfd.readouterr()
    assert "profiler" not in captured.err + captured.out, captured.err[-500:]


def test_11_a_kv_cache_keeps_the_step_cheap(tmp_path):
    """Small size: without a cache the step grows with n far faster than with one, same output."""
    r = run_small("decode_time", tmp_path)
    uncached, cached = r["uncached_seconds"], r["cached_seconds"]
    assert uncached[-1] / uncached[0] > 4 * cached[-1] / cached[0], (uncached, cached)
    assert r["max_difference"] < 1e-5


def test_demos_run_on_a_students_folder(tmp_path):
    """load_units takes a folder of unit files that import their siblings relatively."""
    folder = tmp_path / "submission"
    folder.mkdir()
    for name in ("attention", "multi_head", "positional_encoding"):
        shutil.copyfile(ROOT / "solutions" / f"{name}.py", folder / f"{name}.py")
    units = load_units(folder)
    assert list(units) == ["attention", "multi_head", "positional_encoding"] and units.source == str(folder)
    assert units.need("multi_head").__name__.endswith(".multi_head")
    r = run_small("order", tmp_path / "plots", units=units)
    assert max(r["difference"]["no positions"]) < 1e-5
    with pytest.raises(ValueError, match="recurrent_cells.py"):
        run_demo("rnn_decay", tmp_path, size="small", units=units)
    with pytest.raises(ValueError, match="no unit 'rnn'"):
        units.need("rnn")


def test_without_solutions_the_demos_use_stand_ins_and_assignments(tmp_path):
    """A tree without solutions/: the units come from the stand-ins, then from assignments/."""
    course = tmp_path / "tree"
    (course / "course").mkdir(parents=True)
    shutil.copyfile(ROOT / "course" / "course.toml", course / "course" / "course.toml")
    for part in ("course/demos", "course/stand_ins", "assignments"):
        shutil.copytree(ROOT / part, course / part)
    code = ("from course.demos import load_units\n"
            "u = load_units()\n"
            "print(u.need('attention').__file__, u.need('recurrent_cells').__file__, len(u))\n"
            "print(u.source)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=course, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(course)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    files, source = proc.stdout.splitlines()
    attention, recurrent, count = files.split()
    assert Path(attention) == course / "course" / "stand_ins" / "attention.py"
    assert Path(recurrent) == course / "assignments" / "recurrent_cells.py"
    assert int(count) == len(lessons.lesson_course().units) and source == "stand-ins + assignments"


def stub_folder(tmp_path: Path, solved: tuple[str, ...] = ()) -> Path:
    """assignments/ (the stubs) with the units in ``solved`` replaced by the reference."""
    folder = tmp_path / "units"
    shutil.copytree(ROOT / "assignments", folder)
    for name in solved:
        shutil.copyfile(ROOT / "solutions" / f"{name}.py", folder / f"{name}.py")
    return folder


@pytest.mark.parametrize("solved, message", [
    ((), r"implement attention\.py first, then multi_head\.py \(multi_head\.py says: __init__: not implemented"),
    (("attention",), r"implement multi_head\.py first \("),
    (("multi_head",), r"implement attention\.py first \(attention\.py says: \w+: not implemented yet\)"),
])
def test_a_demo_on_stubs_names_the_file_to_implement_first(tmp_path, solved, message):
    """The stub hit, after the siblings it imports that are still stubs, in course order."""
    units = load_units(stub_folder(tmp_path, solved))
    with pytest.raises(UnitNotImplemented, match=message):
        run_demo("heads", tmp_path, size="small", units=units)


def test_a_notebooks_own_stub_is_named_too(tmp_path):
    """In a lesson notebook the unit is the notebook's namespace (units_for), not a file."""
    namespace = {"__name__": "__main__"}
    exec(compile((ROOT / "assignments" / "attention.py").read_text(encoding="utf-8"), "<cell>", "exec"), namespace)
    with pytest.raises(UnitNotImplemented, match=r"^implement attention\.py first \(attention\.py says"):
        run_demo("scaling", tmp_path, size="small", units=units_for("notebook", "attention", namespace))


def test_torchs_own_not_implemented_error_is_not_a_stub(tmp_path):
    """Raised in a module that is not a unit (as torch raises it for an operator a device lacks)."""
    helper, attention = {"__name__": "helper"}, {"__name__": "__main__"}
    exec("def missing(*args, **kwargs):\n    raise NotImplementedError('no kernel for this device')\n", helper)
    attention.update(scaled_dot_product_attention=helper["missing"], softmax=helper["missing"])
    with pytest.raises(NotImplementedError, match="no kernel"):
        run_demo("scaling", tmp_path, size="small", units=units_for("notebook", "attention", attention))


NOTEBOOK_STUB = (ROOT / "assignments" / "attention.py").read_text(encoding="utf-8")


def notebook_namespace(source: str) -> dict:
    """A notebook's globals after running ``source`` as its cells."""
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


def nbgrader_stub() -> str:
    """attention.py as nbgrader's release leaves it in a notebook: each region a bare NotImplementedError()."""
    from autograder.authoring import stubgen

    return stubgen.clear_regions((ROOT / "solutions" / "attention.py").read_text(encoding="utf-8"))


def test_auto_takes_the_notebooks_code_once_it_is_written(tmp_path):
    """SOURCE = "auto": the answer cells when filled in; still stubs, the course's assignments/ file."""
    written = notebook_namespace((ROOT / "solutions" / "attention.py").read_text(encoding="utf-8"))
    assert units_for("auto", "attention", written).need("attention").__name__ == "__main__"
    stubbed = notebook_namespace(nbgrader_stub())
    units = units_for("auto", "attention", stubbed)
    mine = Path(units.need("attention").__file__)
    assert mine == ROOT / "assignments" / "attention.py"
    with pytest.raises(UnitNotImplemented) as caught:
        run_demo("scaling", tmp_path, size="small", units=units)
    message = str(caught.value)
    assert message.startswith("implement attention.py first (attention.py says: ") and str(mine) in message
    assert "answer cells are not all filled in" in message and "SOURCE" in message
    # "notebook" keeps the answer cells, stubs and all, and says so without an empty message.
    with pytest.raises(UnitNotImplemented, match=r"says: not implemented yet\)\. It ran attention\.py "
                                                 r"from this notebook's answer cells"):
        run_demo("scaling", tmp_path, size="small", units=units_for("notebook", "attention", stubbed))


def test_a_relative_folder_is_found_in_the_course(tmp_path, monkeypatch):
    """SOURCE = "assignments" from a notebook in another folder: the course's assignments/."""
    monkeypatch.chdir(tmp_path)
    units = load_units("assignments")
    assert Path(units.need("attention").__file__) == ROOT / "assignments" / "attention.py"
    (tmp_path / "assignments").mkdir()
    shutil.copyfile(ROOT / "solutions" / "attention.py", tmp_path / "assignments" / "attention.py")
    assert Path(load_units("assignments").need("attention").__file__) == tmp_path / "assignments" / "attention.py"
    with pytest.raises(ValueError, match=r"not a folder .*nor .*nowhere"):
        load_units("nowhere")


def test_a_demo_cell_on_a_stub_says_so_and_goes_on(tmp_path, capsys):
    """run_and_show (the lessons' demo cell) prints one line and returns None; shows a plot once."""
    from course.demos import run_and_show

    assert run_and_show("scaling", tmp_path, size="small", units=load_units(ROOT / "assignments")) is None
    out = capsys.readouterr().out
    assert out.startswith("scaling: not run yet: implement attention.py first") and out.count("\n") == 1
    result = run_and_show("scaling", tmp_path, size="small", units=load_units())
    assert result["png"] and capsys.readouterr().out.count("Image") == 1  # outside a kernel, the image's repr


def test_auto_takes_the_file_while_the_notebook_defines_nothing_of_the_unit(tmp_path):
    """A notebook (or script) with none of the unit's definitions runs the course's assignments/ file."""
    units = units_for("auto", "attention", {"__name__": "__main__", "SIZE": "small"})
    assert Path(units.need("attention").__file__) == ROOT / "assignments" / "attention.py"


def test_make_plots_on_stubs_exits_2_naming_the_file(tmp_path, capsys):
    assert make_plots.main([str(tmp_path), "--size", "small", "--only", "scaling",
                            "--source", str(ROOT / "assignments")]) == 2
    assert "scaling: implement attention.py first" in capsys.readouterr().err


# ------------------------------------------------------------------ the lesson sources

def test_every_unit_has_an_english_lesson_with_each_demo_once():
    seen = []
    for unit in lessons.lesson_course().units:
        parts = lessons.parse(lessons.lesson_path(unit).read_text(encoding="utf-8"))
        kinds = [kind for kind, _ in parts]
        assert kinds.count("setup") == 1 and kinds.count("exercise") == 1, unit
        assert kinds.index("setup") < kinds.index("exercise")
        for kind, arg in parts:
            assert kind in ("markdown", "setup", "exercise", "demo"), f"{unit}: unknown placeholder {kind}"
            if kind == "demo":
                assert DEMOS[arg].UNIT == unit, f"demo {arg} belongs to {DEMOS[arg].UNIT}, not {unit}"
                seen.append(arg)
    assert sorted(seen) == sorted(DEMOS), "each demo appears in exactly one lesson"


def test_a_translation_keeps_the_same_cells():
    """A translated lesson (prose replaced, placeholder lines kept) renders the same code cells."""
    english = lessons.lesson_path("positional_encoding").read_text(encoding="utf-8")
    translated = "\n".join(line if lessons.PLACEHOLDER.match(line.strip()) else ("译文 " + line if line else "")
                           for line in english.splitlines())
    cells = [part for part in lessons.parse(translated) if part[0] != "markdown"]
    assert cells == [part for part in lessons.parse(english) if part[0] != "markdown"]
    assert all("译文" in text for kind, text in lessons.parse(translated) if kind == "markdown")


def test_prose_holds_no_code_cells():
    """Code lives in course/demos and solutions/, so a translation copies no code."""
    for path in lessons.HERE.glob("*/*.md"):
        assert "```" not in path.read_text(encoding="utf-8"), f"{path.name}: move code into a placeholder"


@pytest.mark.parametrize("unit", list(lessons.lesson_course().units))
def test_lesson_renders_as_a_jupytext_notebook(unit):
    jupytext = pytest.importorskip("jupytext")
    script = lessons.render(unit)
    notebook = jupytext.reads(script, fmt="py:percent")
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and any(c.cell_type == "markdown" for c in notebook.cells)
    for cell in code:
        compile(cell.source, f"<{unit} cell>", "exec")
    # The nbgrader notebook's cells: one answer cell per definition a student writes.
    graded = [c for c in code if c.metadata.get("nbgrader", {}).get("solution")]
    assert graded and all("### BEGIN SOLUTION" in c.source for c in graded)
    assert not any(re.search(r"^\s*from \.", c.source, re.M) for c in code), "relative imports cannot run in a notebook"


def test_a_lessons_test_cells_test_what_source_picks():
    """In the lessons (not in nbgrader's notebooks), a public test cell tests the code SOURCE picks
    and is tagged raises-exception, so that a headless run shows its failure and goes on."""
    from autograder.authoring.notebook import build_notebook

    lesson = lessons.notebook("attention")
    graded = build_notebook(lessons.lesson_course(), "attention")
    tests = [c for c in lesson.cells if "public_test(" in c.source]
    assert tests and all("raises-exception" in c.metadata["tags"] for c in tests)
    assert all("code_for(SOURCE, 'attention', globals()))" in c.source for c in tests)
    assert not [c for c in graded.cells if "code_for" in c.source or "raises-exception" in c.metadata.get("tags", [])]


def test_rendered_lesson_runs_as_a_script(tmp_path):
    """The positional-encoding lesson, rendered and run top to bottom at the small size."""
    script = lessons.render("positional_encoding")
    script = script.replace('SIZE = "full"', 'SIZE = "small"').replace('PLOTS = "plots"', f'PLOTS = {str(tmp_path)!r}')
    path = tmp_path / "lesson.py"
    path.write_text(script, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "order.png").is_file()


def test_make_plots_writes_one_folder(tmp_path):
    out, readme = tmp_path / "plots", tmp_path / "img"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "course" / "make_plots.py"), str(out), "--size", "small",
         "--only", "order", "path_length", "--readme", str(readme)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["order.png", "path_length.png", "results.json"]
    assert (readme / "path_length.png").stat().st_size < PNG_LIMIT
