"""The attention viewer: one self-contained HTML page for a sentence and its attention weights.

    attn-course viz [SENTENCE] [-o attention.html] [--source solutions|FOLDER]
                    [--weights FILE.json|FILE.pt] [--steps N]

Click a token: arcs go from it to the tokens it attends to, as thick as the
weight. A selector switches between heads (and their average). The page has
its script and style inline and loads nothing from the network.

Where the weights come from:
  * default: the course's tiny model (``course/demos/tiny_model.py``), trained
    for a few seconds with the ``MultiHeadAttention`` of ``--source``: the
    reference solutions, or a student's folder (their own ``multi_head.py``
    and ``attention.py``);
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

DEFAULT_SENTENCE = "John went to the market because he wanted bread"
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def tokenize(sentence: str) -> list[str]:
    """Words split on spaces; a sentence in Chinese characters (狗咬人) is split into characters."""
    words = sentence.split()
    if len(words) == 1 and _CJK.search(words[0]):
        return list(words[0])
    return words


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
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
  h1 { font-size: 18px; margin: 0 0 4px; }
  p.note { margin: 0 0 16px; color: #555; font-size: 13px; }
  #controls { margin-bottom: 12px; font-size: 14px; }
  #stage { position: relative; padding-top: 170px; }
  #arcs { position: absolute; left: 0; top: 0; overflow: visible; pointer-events: none; }
  #tokens { display: flex; flex-wrap: nowrap; gap: 10px; }
  .token { font-size: 18px; padding: 6px 10px; border: 1px solid #bbb; border-radius: 6px;
           background: #f6f6f6; cursor: pointer; }
  .token.query { background: #1f5fbf; color: #fff; border-color: #1f5fbf; }
  .token.key { border-color: #e07000; }
  path.arc { fill: none; stroke: #e07000; stroke-linecap: round; }
  #details { margin-top: 16px; font-size: 13px; color: #333; min-height: 1.5em; }
</style>
</head>
<body>
<h1>__TITLE__</h1>
<p class="note">Click a token: arcs go to the tokens it attends to, as thick as the weight
(weights below __MIN__ are not drawn).</p>
<div id="controls"><label for="head">Head </label><select id="head"></select></div>
<div id="stage"><svg id="arcs" xmlns="http://www.w3.org/2000/svg"></svg><div id="tokens"></div></div>
<div id="details">No token selected.</div>
<script id="attention-data" type="application/json">__DATA__</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attention-data").textContent);
  var tokens = data.tokens, heads = data.weights, MIN = data.min_weight;
  var select = document.getElementById("head"), row = document.getElementById("tokens");
  var svg = document.getElementById("arcs"), details = document.getElementById("details");
  var SVGNS = "http://www.w3.org/2000/svg", selected = null;
  var average = heads[0].map(function (r, i) {
    return r.map(function (v, j) {
      return heads.reduce(function (s, h) { return s + h[i][j]; }, 0) / heads.length;
    });
  });
  data.head_names.forEach(function (name, h) {
    var o = document.createElement("option"); o.value = String(h); o.textContent = name; select.appendChild(o);
  });
  if (heads.length > 1) {
    var o = document.createElement("option"); o.value = "average"; o.textContent = "average of heads"; select.appendChild(o);
  }
  tokens.forEach(function (t, i) {
    var b = document.createElement("button");
    b.className = "token"; b.textContent = t; b.dataset.index = String(i); b.type = "button";
    b.addEventListener("click", function () { selected = (selected === i ? null : i); draw(); });
    row.appendChild(b);
  });
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
  select.addEventListener("change", draw);
  window.addEventListener("resize", draw);
  window.attentionViewer = { draw: draw, select: function (i) { selected = i; draw(); } };
  draw();
}());
</script>
</body>
</html>
"""


def render_html(tokens: list[str], weights, *, title: str = "Attention viewer",
                head_names: list[str] | None = None, min_weight: float = 0.01) -> str:
    """The viewer page for ``tokens`` and ``weights`` (H, L, L) or (L, L), rows = queries."""
    if not tokens:
        raise ValueError("the sentence has no tokens")
    heads = as_heads(weights, len(tokens))
    names = head_names or [f"head {h}" for h in range(len(heads))]
    if len(names) != len(heads):
        raise ValueError(f"{len(names)} head names for {len(heads)} heads")
    data = {"tokens": list(tokens), "weights": heads, "head_names": names, "min_weight": min_weight}
    # "</" cannot end the script element early once escaped; the JSON stays valid.
    payload = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    page = _PAGE.replace("__DATA__", payload).replace("__MIN__", str(min_weight))
    return page.replace("__TITLE__", html.escape(title))


def tiny_model_weights(tokens: list[str], source: str = "solutions", steps: int = 400):
    """Per-head weights (H, L, L) of the tiny model, trained with ``source``'s multi_head.py,
    and its accuracy. Raises UnitNotImplemented while that unit (or its attention.py) is a stub."""
    from course.demos import load_units
    from course.demos._common import stubs_named
    from course.demos.tiny_model import MAX_LEN, attention_for, train_tiny_model

    if len(tokens) > MAX_LEN:
        raise ValueError(f"the tiny model reads at most {MAX_LEN} tokens; the sentence has {len(tokens)}")
    units = load_units(source)
    with stubs_named(units):
        trained = train_tiny_model(units, steps=steps)
        return attention_for(tokens, trained), trained.accuracy


def _load_weights(path: Path, tokens: list[str] | None):
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data.get("tokens", tokens), data["weights"]
        return tokens, data
    import torch

    return tokens, torch.load(path, map_location="cpu", weights_only=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attn-course viz", description=__doc__.splitlines()[0])
    parser.add_argument("sentence", nargs="?", help=f"the sentence (default: {DEFAULT_SENTENCE!r})")
    parser.add_argument("-o", "--output", type=Path, default=Path("attention.html"))
    parser.add_argument("--source", default="solutions",
                        help="where the tiny model's MultiHeadAttention comes from: solutions or your folder")
    parser.add_argument("--weights", type=Path, help="your own weights (.json or a torch.save'd tensor)")
    parser.add_argument("--steps", type=int, default=400, help="training steps of the tiny model")
    args = parser.parse_args(argv)
    from course.demos import UnitNotImplemented  # torch's import, only once the arguments are good

    tokens = tokenize(args.sentence) if args.sentence else None
    try:
        if args.weights:
            tokens, weights = _load_weights(args.weights, tokens)
            if not tokens:
                raise ValueError("give the sentence, or put \"tokens\" in the JSON file")
            title = f"Attention from {args.weights.name}"
        else:
            tokens = tokens or tokenize(DEFAULT_SENTENCE)
            weights, accuracy = tiny_model_weights(tokens, args.source, args.steps)
            title = (f"Tiny model ({args.source}): trained to name the previous and the next token, "
                     f"accuracy {accuracy:.0%}")
        page = render_html(tokens, weights, title=title)
    except UnitNotImplemented as error:  # the stubs are still in place: say what to write first
        print(f"attn-course viz: {error}", file=sys.stderr)
        return 2
    except (ValueError, OSError, KeyError, ImportError) as error:
        print(f"attn-course viz: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page, encoding="utf-8")
    print(f"wrote {args.output} ({len(tokens)} tokens, {len(weights)} head(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
