"""The attention viewer (course/viz.py): the page it writes, driven in headless Chromium.

The browser test talks to Chromium over the DevTools protocol (websocket-client,
a dependency of the Jupyter stack nbgrader installs): it loads the page,
clicks a token with a real mouse event, reads back the arcs that appear, and
saves a screenshot. It needs Debian's ``chromium`` (``apt-get install -y chromium``)
and is skipped, with that reason, where there is none.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from course import viz  # noqa: E402

ARTIFACTS = Path(os.environ.get("ATTN_COURSE_ARTIFACTS", ROOT / "build" / "test-artifacts"))
TOKENS = ["John", "went", "home", "because", "he", "was", "tired"]
# Two heads with known weights: head 0 looks back one token, head 1 spreads over the sentence.
HEAD0 = [[1.0 if j == max(i - 1, 0) else 0.0 for j in range(7)] for i in range(7)]
HEAD1 = [[0.6] + [0.4 / 6] * 6 for _ in range(7)]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


# ---------------------------------------------------------------- the page itself (no browser)

def test_page_is_self_contained(tmp_path):
    page = viz.render_html(TOKENS, [HEAD0, HEAD1], title="t </script> & <b>")
    assert "<script src" not in page and "<link" not in page, "the page must not load anything"
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    assert page.count("</script>") == 2, "a title or token must not be able to close the script"
    assert "&lt;b&gt;" in page


def test_tokenize_words_and_chinese():
    assert viz.tokenize("狗咬人") == ["狗", "咬", "人"]
    assert viz.tokenize("the dog  bites") == ["the", "dog", "bites"]


def test_bad_weights_are_refused_with_the_shape():
    with pytest.raises(ValueError, match=r"L = 7"):
        viz.render_html(TOKENS, [[0.5, 0.5]])
    with pytest.raises(ValueError, match="non-negative"):
        viz.render_html(["a"], [[-1.0]])


def test_cli_writes_the_tiny_model_page(tmp_path, capsys):
    out = tmp_path / "page.html"
    assert viz.main(["狗咬人", "-o", str(out), "--steps", "150"]) == 0
    page = out.read_text(encoding="utf-8")
    data = json.loads(page.split('type="application/json">')[1].split("</script>")[0].replace("<\\/", "</"))
    assert data["tokens"] == ["狗", "咬", "人"]
    assert len(data["weights"]) == 2 and all(abs(sum(r) - 1) < 1e-3 for h in data["weights"] for r in h)


def test_cli_trains_the_tiny_model_with_a_students_module(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("attention", "multi_head"):
        shutil.copyfile(ROOT / "solutions" / f"{name}.py", folder / f"{name}.py")
    out = tmp_path / "page.html"
    assert viz.main(["a b c d", "-o", str(out), "--source", str(folder), "--steps", "20"]) == 0
    assert str(folder) in out.read_text(encoding="utf-8")
    assert viz.main(["a b", "-o", str(out), "--source", str(tmp_path / "missing")]) == 2


def test_cli_on_the_stubs_says_what_to_implement_first(tmp_path, capsys):
    """The stubs still in place: the tiny model's multi_head.py needs attention.py, written first."""
    out = tmp_path / "page.html"
    assert viz.main(["a b", "-o", str(out), "--source", str(ROOT / "assignments"), "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attn-course viz: implement attention.py first, then multi_head.py (") and not out.exists()


def test_cli_takes_the_students_weights(tmp_path):
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"tokens": TOKENS, "weights": [HEAD0, HEAD1]}))
    out = tmp_path / "page.html"
    assert viz.main(["--weights", str(weights), "-o", str(out)]) == 0
    assert '"John"' in out.read_text(encoding="utf-8")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tokens": TOKENS, "weights": [[1.0]]}))
    assert viz.main(["--weights", str(bad), "-o", str(out)]) == 2


# ---------------------------------------------------------------- headless Chromium

class DevTools:
    """A minimal Chrome DevTools Protocol client for one page."""

    def __init__(self, url: str):
        import websocket

        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while not any(m.get("method") == event for m in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(event)
            self.events.append(json.loads(self.ws.recv()))

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, x: float, y: float):
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


@pytest.fixture(scope="module")
def browser():
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); the viewer's browser test needs it")
    pytest.importorskip("websocket", reason="websocket-client (installed with nbgrader's Jupyter stack) is missing")
    profile = tempfile.mkdtemp(prefix="attn-viz-chromium-")
    proc = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--window-size=1000,520",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromium did not start (exit code {proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as response:
            pages = [t for t in json.load(response) if t["type"] == "page"]
        yield DevTools(pages[0]["webSocketDebuggerUrl"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


def _open(devtools: DevTools, path: Path):
    devtools.events.clear()
    devtools.call("Page.enable")
    devtools.call("Page.navigate", url=path.as_uri())
    devtools.wait_for("Page.loadEventFired")


def _token_centre(devtools: DevTools, index: int):
    return devtools.js(
        f"(() => {{ const r = document.querySelectorAll('.token')[{index}].getBoundingClientRect();"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()")


def _arcs(devtools: DevTools):
    return devtools.js(
        "Array.from(document.querySelectorAll('path.arc')).map(p => ({query: +p.dataset.query, "
        "key: +p.dataset.key, weight: +p.dataset.weight, width: +p.getAttribute('stroke-width'), "
        "length: p.getTotalLength()}))")


def test_click_a_token_draws_its_arcs(browser, tmp_path):
    page = tmp_path / "viewer.html"
    page.write_text(viz.render_html(TOKENS, [HEAD0, HEAD1], title="test page"), encoding="utf-8")
    _open(browser, page)
    assert browser.js("document.querySelectorAll('.token').length") == len(TOKENS)
    assert _arcs(browser) == [], "no arcs before a click"

    he = TOKENS.index("he")
    browser.click(*_token_centre(browser, he))  # a real mouse event at the token
    arcs = _arcs(browser)
    assert [(a["query"], a["key"]) for a in arcs] == [(he, he - 1)], "head 0 attends to the previous token only"
    assert arcs[0]["weight"] == pytest.approx(1.0) and arcs[0]["length"] > 10
    assert browser.js("document.querySelector('.token.query').textContent") == "he"

    # Switch to head 1 with the selector: seven arcs, the one to "John" the thickest.
    browser.js("(() => { const s = document.getElementById('head'); s.value = '1';"
               " s.dispatchEvent(new Event('change')); })()")
    arcs = _arcs(browser)
    assert sorted(a["key"] for a in arcs) == list(range(len(TOKENS)))
    widest = max(arcs, key=lambda a: a["width"])
    assert widest["key"] == 0 and widest["weight"] == pytest.approx(0.6)
    assert all(a["width"] < widest["width"] for a in arcs if a["key"] != 0)
    assert "John 60%" in browser.js("document.getElementById('details').textContent")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = browser.call("Page.captureScreenshot", format="png")
    png = base64.b64decode(shot["data"])
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    (ARTIFACTS / "viz_click.png").write_bytes(png)

    # Clicking the selected token again clears the arcs.
    browser.click(*_token_centre(browser, he))
    assert _arcs(browser) == []


def test_tiny_model_page_in_the_browser(browser, tmp_path):
    """The page `attn-course viz` writes: the tiny model's head 0 / head 1 look back / forward."""
    out = tmp_path / "tiny.html"
    assert viz.main(["John went to the market because he wanted bread", "-o", str(out), "--steps", "250"]) == 0
    _open(browser, out)
    he = 6
    browser.click(*_token_centre(browser, he))
    heads = browser.js("Array.from(document.getElementById('head').options).map(o => o.value)")
    assert heads == ["0", "1", "average"]
    strongest = {}
    for head in ("0", "1"):
        browser.js(f"(() => {{ const s = document.getElementById('head'); s.value = '{head}';"
                   " s.dispatchEvent(new Event('change')); })()")
        arcs = _arcs(browser)
        assert arcs, f"head {head}: no arcs after the click"
        strongest[head] = max(arcs, key=lambda a: a["weight"])["key"]
    assert sorted(strongest.values()) == [he - 1, he + 1], (
        f"the tiny model's heads should look at the previous and the next token; strongest keys {strongest}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "viz_tiny_model.png").write_bytes(
        base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"]))
