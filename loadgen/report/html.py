"""report.html: one self-contained file that opens offline.

Plots are embedded as base64 PNG data URIs, the CSS is inline and so is every script (a few
lines here; the interactive section's, ``interactive.py``, with its data and chart library);
a Content-Security-Policy forbids every other source, so the page cannot load
anything from the network even by mistake. On load the script records, on ``<body>``, how many
images decoded (``data-images-ok`` of ``data-images-total``) and any script or resource error
(``data-errors``, a JSON list): a headless browser can check the page rendered whole.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

from loadgen.report.blocks import Alert, Image, Markup, Section, Table, Text

_CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
  color:#1d1d1f;margin:0;background:#f6f7f9}
main{max-width:1200px;margin:0 auto;padding:16px 28px 48px;background:#fff}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #e3e5e8;
  padding-bottom:4px}
nav{font-size:12px;color:#555;margin-bottom:8px}nav a{color:#2557a7;margin-right:10px;text-decoration:none}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #e3e5e8;padding:4px 9px;vertical-align:top;text-align:left}
th{background:#f0f2f5;font-weight:600}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:nth-child(even){background:#fafbfc}
.alert{border-left:5px solid;padding:8px 12px;margin:8px 0;border-radius:3px}
.alert.ok{border-color:#2e7d32;background:#edf7ee}.alert.warning{border-color:#e69500;background:#fff6e0}
.alert.error{border-color:#c62828;background:#fdecea}
p{margin:6px 0;max-width:900px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:14px}
figure{margin:0;border:1px solid #e3e5e8;padding:8px;background:#fff}
figure.wide{grid-column:1/-1}figure.wide img{max-width:960px}
figure img{width:100%;height:auto;display:block}
figcaption{font-size:12px;color:#555;margin-top:4px}
"""

# Errors are collected from the first moment (capture phase sees failed <img> loads too).
_HEAD_SCRIPT = """
window.__reportErrors=[];
window.addEventListener('error',function(e){var t=e.target;
  window.__reportErrors.push(t&&t!==window&&t.tagName?('failed to load '+t.tagName.toLowerCase()):
  String(e.message||e));},true);
(function(){var ce=console.error;console.error=function(){
  window.__reportErrors.push(Array.prototype.join.call(arguments,' '));return ce.apply(console,arguments);};})();
"""

_LOAD_SCRIPT = """
window.addEventListener('load',function(){var imgs=document.images,ok=0;
  for(var i=0;i<imgs.length;i++){if(imgs[i].complete&&imgs[i].naturalWidth>0){ok++;}}
  var b=document.body;b.dataset.imagesOk=String(ok);b.dataset.imagesTotal=String(imgs.length);
  b.dataset.errors=JSON.stringify(window.__reportErrors);b.dataset.loaded='1';});
"""


def render_html(title: str, sections: Sequence[Section]) -> str:
    nav = " ".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in sections)
    body = "\n".join(_section(s) for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{escape(title)}</title>
<style>{_CSS}</style>
<script>{_HEAD_SCRIPT}</script>
</head>
<body>
<main>
<h1>{escape(title)}</h1>
<nav>{nav}</nav>
{body}
</main>
<script>{_LOAD_SCRIPT}</script>
</body>
</html>
"""


def _section(section: Section) -> str:
    parts = [
        f'<section id="{section.anchor}">',
        f"<h{section.level}>{escape(section.title)}</h{section.level}>",
    ]
    images = [b for b in section.blocks if isinstance(b, Image)]
    parts += [_block(b) for b in section.blocks if not isinstance(b, Image)]
    if images:
        parts.append('<div class="plots">' + "".join(_figure(i) for i in images) + "</div>")
    parts.append("</section>")
    return "\n".join(parts)


def _block(block: object) -> str:
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Alert):
        text = f" {escape(block.text)}" if block.text else ""
        return f'<div class="alert {escape(block.level)}"><strong>{escape(block.title)}</strong>{text}</div>'
    if isinstance(block, Text):
        return f"<p>{escape(block.text)}</p>"
    if isinstance(block, Markup):
        return block.html
    raise TypeError(f"unknown report block {block!r}")


def _table(table: Table) -> str:
    align = table.align.ljust(len(table.header), "l")

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(
            f"<{tag}{' class=r' if a == 'r' else ''}>{escape(str(c))}</{tag}>" for c, a in zip(row, align)
        )

    rows = "".join(f"<tr>{cells('td', r)}</tr>" for r in table.rows)
    return f"<table><thead><tr>{cells('th', table.header)}</tr></thead><tbody>{rows}</tbody></table>"


def _figure(image: Image) -> str:
    data = base64.b64encode(image.png).decode("ascii")
    wide = (
        ' class="wide"'
        if image.file.endswith(("per_second.png", "server_view.png", "curve_ttft.png", "gpu_telemetry.png"))
        else ""
    )
    return (
        f'<figure{wide}><img alt="{escape(image.title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(image.caption)}</figcaption></figure>"
    )
