"""The attention viewer: one self-contained HTML page of sentences and their attention weights.

    attn-course viz [SENTENCE ...] [-o attention.html] [--source solutions|FOLDER]
                    [--weights FILE.json|FILE.pt] [--steps N]

Click a word: arcs go from it to the words it attends to, as thick as the weight.
Selectors switch between the sentences and between heads (and their average). The page
has its script and style inline, loads nothing from the network, and says so when the
machine has no font that draws Chinese (the words would show as empty boxes).

Where the weights come from:
  * default: the course's pronoun model (``course/demos/pronoun_model.py``), one
    self-attention layer trained to name the noun a pronoun refers to (他/她/它,
    he/she/it), so its attention had to learn content: position does not give the
    answer. Its shipped weights (``course/demos/weights/``) run in the
    ``MultiHeadAttention`` of ``--source``: the reference solutions, or a student's
    folder (their own ``multi_head.py`` and ``attention.py``); ``--steps N`` trains it
    anew for N steps with that module instead. Without SENTENCE the page holds the
    lessons' two: 我吃了一个苹果，它很甜 (click 它) and John went to the market because
    he wanted bread (click he). Chinese is cut into words by longest match against the
    model's own dictionary (its docstring says why not jieba);
  * ``--weights FILE``: weights you computed yourself, a JSON object
    ``{"tokens": [...], "weights": [[[...]]]}`` (heads x queries x keys, or
    queries x keys for one head), or a ``torch.save``d tensor of that shape
    (then SENTENCE gives the tokens).
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.core import i18n  # noqa: E402 - after the path is set
from autograder.core.i18n import N_, _  # noqa: E402


def tokenize(sentence: str) -> list[str]:
    """The pronoun model's words: split on spaces, Chinese cut by longest match (狗咬人 -> 狗 / 咬 / 人)."""
    from course.demos.pronoun_model import segment

    return segment(sentence)


def as_heads(weights, length: int) -> list[list[list[float]]]:
    """Validate weights as (H, L, L) (or (L, L) for one head) and return nested lists of floats."""
    try:
        import torch

        tensor = torch.as_tensor(weights, dtype=torch.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"weights must be a numeric array (heads, L, L) or (L, L): {error}") from None
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(0)
    if tensor.dim() != 3 or tensor.shape[-2:] != (length, length):
        raise ValueError(f"weights must have shape (heads, L, L) or (L, L) with L = {length} tokens; "
                         f"got {tuple(tensor.shape)}")
    if not bool(torch.isfinite(tensor).all()) or bool((tensor < 0).any()):
        raise ValueError("weights must be finite and non-negative")
    return [[[round(float(v), 5) for v in row] for row in head] for head in tensor]


_PAGE = """<!DOCTYPE html>
<html lang="__LANG__">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
  h1 { font-size: 18px; margin: 0 0 4px; }
  p.note { margin: 0 0 16px; color: #555; font-size: 13px; max-width: 60em; }
  #font-warning { margin: 0 0 16px; padding: 8px 12px; border: 1px solid #c00; border-radius: 6px;
                  background: #fff0f0; color: #900; font-size: 14px; max-width: 60em; }
  #font-warning[hidden], #sentence-control[hidden] { display: none; }
  #controls { margin-bottom: 12px; font-size: 14px; }
  #stage { position: relative; padding-top: 170px; }
  #arcs { position: absolute; left: 0; top: 0; overflow: visible; pointer-events: none; }
  #tokens { display: flex; flex-wrap: nowrap; gap: 10px; }
  .token { font-family: inherit; font-size: 18px; padding: 6px 10px; border: 1px solid #bbb; border-radius: 6px;
           background: #f6f6f6; cursor: pointer; }
  .token.query { background: #1f5fbf; color: #fff; border-color: #1f5fbf; }
  .token.key { border-color: #e07000; }
  path.arc { fill: none; stroke: #e07000; stroke-linecap: round; }
  #details { margin-top: 16px; font-size: 13px; color: #333; min-height: 1.5em; }
</style>
</head>
<body>
<h1>__TITLE__</h1>
<p class="note">__NOTE__Click a word: arcs go to the words it attends to, as thick as the weight
(weights below __MIN__ are not drawn).</p>
<p id="font-warning" role="alert" hidden>No font on this machine draws Chinese: the Chinese words below
show as empty boxes. Install one (Debian: <code>apt-get install fonts-noto-cjk</code>) and reload the page.</p>
<div id="controls"><span id="sentence-control"><label for="sentence">Sentence </label><select id="sentence"></select>
</span><label for="head">Head </label><select id="head"></select></div>
<div id="stage"><svg id="arcs" xmlns="http://www.w3.org/2000/svg"></svg><div id="tokens"></div></div>
<div id="details">No token selected.</div>
<script id="attention-data" type="application/json">__DATA__</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attention-data").textContent);
  var sentences = data.sentences, MIN = data.min_weight, tokens, heads, average;
  var choice = document.getElementById("sentence"), select = document.getElementById("head");
  var row = document.getElementById("tokens"), warning = document.getElementById("font-warning");
  var svg = document.getElementById("arcs"), details = document.getElementById("details");
  var SVGNS = "http://www.w3.org/2000/svg", selected = null;
  sentences.forEach(function (s, n) {
    var o = document.createElement("option"); o.value = String(n); o.textContent = s.tokens.join(" ");
    choice.appendChild(o);
  });
  document.getElementById("sentence-control").hidden = sentences.length < 2;
  data.head_names.forEach(function (name, h) {
    var o = document.createElement("option"); o.value = String(h); o.textContent = name; select.appendChild(o);
  });
  if (data.head_names.length > 1) {
    var o = document.createElement("option"); o.value = "average"; o.textContent = "average of heads"; select.appendChild(o);
  }
  function load(n) {
    tokens = sentences[n].tokens; heads = sentences[n].weights; selected = null;
    average = heads[0].map(function (r, i) {
      return r.map(function (v, j) {
        return heads.reduce(function (s, h) { return s + h[i][j]; }, 0) / heads.length;
      });
    });
    while (row.firstChild) row.removeChild(row.firstChild);
    tokens.forEach(function (t, i) {
      var b = document.createElement("button");
      b.className = "token"; b.textContent = t; b.dataset.index = String(i); b.type = "button";
      b.addEventListener("click", function () { selected = (selected === i ? null : i); draw(); });
      row.appendChild(b);
    });
    choice.value = String(n);
    draw();
  }
  function matrix() { return select.value === "average" ? average : heads[Number(select.value)]; }
  function centre(el, box) {
    var r = el.getBoundingClientRect();
    return { x: r.left + r.width / 2 - box.left, y: r.top - box.top };
  }
  function draw() {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var stage = document.getElementById("stage"), box = stage.getBoundingClientRect();
    svg.setAttribute("width", String(box.width)); svg.setAttribute("height", String(box.height));
    var buttons = row.querySelectorAll(".token");
    buttons.forEach(function (b) { b.classList.remove("query", "key"); });
    if (selected === null) { details.textContent = "No token selected."; return; }
    var weights = matrix()[selected], from = centre(buttons[selected], box), listed = [];
    buttons[selected].classList.add("query");
    weights.forEach(function (w, j) {
      if (w < MIN) return;
      var to = centre(buttons[j], box), path = document.createElementNS(SVGNS, "path"), d;
      if (j === selected) {
        d = "M " + (from.x - 8) + " " + from.y + " C " + (from.x - 25) + " " + (from.y - 45) + " " +
            (from.x + 25) + " " + (from.y - 45) + " " + (from.x + 8) + " " + from.y;
      } else {
        var lift = Math.min(150, 25 + 0.35 * Math.abs(to.x - from.x));
        d = "M " + from.x + " " + from.y + " C " + from.x + " " + (from.y - lift) + " " +
            to.x + " " + (to.y - lift) + " " + to.x + " " + to.y;
      }
      path.setAttribute("d", d);
      path.setAttribute("class", "arc");
      path.setAttribute("stroke-width", (1 + 14 * w).toFixed(2));
      path.setAttribute("stroke-opacity", (0.25 + 0.75 * w).toFixed(2));
      path.dataset.query = String(selected); path.dataset.key = String(j); path.dataset.weight = String(w);
      var tip = document.createElementNS(SVGNS, "title");
      tip.textContent = tokens[selected] + " \u2192 " + tokens[j] + ": " + w.toFixed(3);
      path.appendChild(tip); svg.appendChild(path);
      buttons[j].classList.add("key");
      listed.push([w, j]);
    });
    listed.sort(function (a, b) { return b[0] - a[0]; });
    details.textContent = "\u201c" + tokens[selected] + "\u201d attends to: " + listed.map(function (p) {
      return tokens[p[1]] + " " + (100 * p[0]).toFixed(0) + "%";
    }).join(", ");
  }
  // A font that draws Chinese draws two different characters differently; without one, both
  // come out as the same missing-glyph box (or as nothing), pixel for pixel.
  function pixels(text, family) {
    var canvas = document.createElement("canvas"), ctx = canvas.getContext("2d");
    canvas.width = canvas.height = 48;
    ctx.font = "36px " + family; ctx.textBaseline = "top"; ctx.fillText(text, 4, 4);
    return Array.prototype.join.call(ctx.getImageData(0, 0, 48, 48).data, ",");
  }
  function cjkRenders() {
    var family = getComputedStyle(row).fontFamily;
    return pixels("\u5b83", family) !== pixels("\u82f9", family);  // 它, 苹
  }
  var CJK = /[\u3400-\u9fff\uf900-\ufaff]/;
  var chinese = sentences.some(function (s) { return s.tokens.some(function (t) { return CJK.test(t); }); });
  warning.hidden = !chinese || cjkRenders();
  choice.addEventListener("change", function () { load(Number(choice.value)); });
  select.addEventListener("change", draw);
  window.addEventListener("resize", draw);
  window.attentionViewer = { draw: draw, load: load, cjkRenders: cjkRenders,
                             select: function (i) { selected = i; draw(); } };
  load(0);
}());
</script>
</body>
</html>
"""


# The page's own words, each written once in _PAGE (HTML, or a string of its script), and replaced there
# by its translation: in English the page is _PAGE itself.
PAGE_TEXTS = (
    N_("Click a word: arcs go to the words it attends to, as thick as the weight\n(weights below __MIN__ are not drawn)."),
    N_("No font on this machine draws Chinese: the Chinese words below\nshow as empty boxes. Install one (Debian: "
       "<code>apt-get install fonts-noto-cjk</code>) and reload the page."),
    N_("Sentence "),
    N_("Head "),
    N_("No token selected."),
    N_("average of heads"),
    N_("\u201d attends to: "),
)


def _translated_page() -> str:
    """_PAGE with its words in the language this process speaks."""
    page = _PAGE
    for text in PAGE_TEXTS:
        if text not in page:
            raise AssertionError(f"viewer: {text!r} is not in the page")  # a text edited in one place only
        page = page.replace(text, _(text))
    return page


def render_page(sentences, *, title: str | None = None, head_names: list[str] | None = None,
                min_weight: float = 0.01, note: str = "") -> str:
    """The viewer page for ``sentences``, pairs (tokens, weights (H, L, L) or (L, L), rows = queries),
    with the same number of heads; ``note`` is a sentence said before how to use the page."""
    if not sentences:
        raise ValueError("no sentence to draw")
    drawn = []
    for tokens, weights in sentences:
        if not tokens:
            raise ValueError("a sentence has no tokens")
        drawn.append({"tokens": list(tokens), "weights": as_heads(weights, len(tokens))})
    count = len(drawn[0]["weights"])
    if any(len(s["weights"]) != count for s in drawn):
        raise ValueError(f"the sentences have {sorted({len(s['weights']) for s in drawn})} heads: they must agree")
    names = head_names or [_("head {number}").format(number=h) for h in range(count)]
    if len(names) != count:
        raise ValueError(f"{len(names)} head names for {count} heads")
    data = {"sentences": drawn, "head_names": names, "min_weight": min_weight}
    # "</" cannot end the script element early once escaped; the JSON stays valid.
    payload = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    title = _("Attention viewer") if title is None else title
    values = {"DATA": payload, "MIN": str(min_weight), "TITLE": html.escape(title),
              "NOTE": html.escape(note) + " " if note else "", "LANG": i18n.language()}
    # One pass, so a title or token that spells a placeholder is left as it is.
    return re.sub(r"__(DATA|MIN|TITLE|NOTE|LANG)__", lambda m: values[m.group(1)], _translated_page())


def render_html(tokens: list[str], weights, **options) -> str:
    """The viewer page for one sentence: ``tokens`` and ``weights`` (H, L, L) or (L, L), rows = queries."""
    return render_page([(tokens, weights)], **options)


def pronoun_model_weights(sentences: list[str], source: str = "solutions", steps: int | None = None):
    """Each sentence's words and the pronoun model's weights (H, L, L) on them, and the model: the
    shipped weights, or trained ``steps`` steps, in ``source``'s MultiHeadAttention; and where that
    code came from (``solutions``, or in a student's bundle ``assignments``, or the folder). Raises
    UnitNotImplemented while that unit (or its attention.py) is a stub."""
    from course.demos import load_units
    from course.demos._common import stubs_named
    from course.demos.pronoun_model import MAX_LEN, attention_for, shipped_model, train_pronoun_model

    words = [tokenize(sentence) for sentence in sentences]
    for w in words:  # refused before any training
        if not w or len(w) > MAX_LEN:
            raise ValueError(f"the pronoun model reads 1 to {MAX_LEN} words; a sentence has {len(w)}")
    units = load_units(source)
    with stubs_named(units):
        trained = shipped_model(units) if steps is None else train_pronoun_model(units, steps=steps)
        return [(w, attention_for(w, trained)) for w in words], trained, units.source


def _load_weights(path: Path, tokens: list[str] | None):
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data.get("tokens", tokens), data["weights"]
        return tokens, data
    import torch

    return tokens, torch.load(path, map_location="cpu", weights_only=True)


def main(argv: list[str] | None = None) -> int:
    # --help in the language chosen (the command line chose --lang already): the docstring's first line
    # is catalogued by babel.cfg's command_line method.
    parser = argparse.ArgumentParser(prog="attn-course viz", description=_(__doc__.splitlines()[0]))
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE",
                        help=_("the sentences (default: the lessons' two, where 它 means 苹果 and he means John)"))
    parser.add_argument("-o", "--output", type=Path, default=Path("attention.html"))
    parser.add_argument("--source", default="solutions",
                        help=_("where the pronoun model's MultiHeadAttention comes from: solutions (where there "
                               "are none, as in a student's bundle, assignments/) or your folder"))
    parser.add_argument("--weights", type=Path, help=_("your own weights (.json or a torch.save'd tensor)"))
    parser.add_argument("--steps", type=int,
                        help=_("train the pronoun model for N steps instead of loading its shipped weights"))
    parser.add_argument("--lang", help=_("the language of the page and the messages (default: course.toml's)"))
    args = parser.parse_args(argv)
    if args.lang:
        try:
            i18n.choose(args.lang, i18n.course_locale())
        except ValueError as error:
            parser.error(str(error))
    from course.demos import UnitNotImplemented  # torch's import, only once the arguments are good

    try:
        note = ""
        if args.weights:
            if len(args.sentences) > 1:
                raise ValueError("--weights holds one sentence's weights: give at most one SENTENCE")
            tokens, weights = _load_weights(args.weights, tokenize(args.sentences[0]) if args.sentences else None)
            if not tokens:
                raise ValueError("give the sentence, or put \"tokens\" in the JSON file")
            sentences, title = [(tokens, weights)], _("Attention from {file}").format(file=args.weights.name)
        else:
            from course.demos.pronoun_model import SEEDS

            sentences, trained, code = pronoun_model_weights(args.sentences or list(SEEDS), args.source, args.steps)
            origin = _("its shipped weights") if args.steps is None else _("trained just now")
            title = _("Pronoun model, MultiHeadAttention from {source}, {origin} ({steps} steps)").format(
                source=code, origin=origin, steps=trained.steps)
            note = _("It was trained only to name the noun a pronoun (他/她/它, he/she/it) refers to. On fresh "
                     "sentences it names it for {accuracy:.0%} of the pronouns, and its attention puts the most "
                     "weight on it for {attention:.0%}. Click the pronoun; the other words were never asked "
                     "anything, so their rows are whatever training left.").format(
                accuracy=trained.accuracy, attention=trained.attention_accuracy)
        page = render_page(sentences, title=title, note=note)
    except UnitNotImplemented as error:  # the stubs are still in place: say what to write first
        print(f"attn-course viz: {error}", file=sys.stderr)
        return 2
    except (ValueError, OSError, KeyError, ImportError) as error:
        print(f"attn-course viz: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page, encoding="utf-8")
    words = sum(len(tokens) for tokens, _ in sentences)
    print(_("wrote {file} ({count} sentence(s), {words} tokens)").format(file=args.output, count=len(sentences),
                                                                         words=words))
    return 0


if __name__ == "__main__":
    sys.exit(main())
