"""The page every HTML report is: one self-contained file (inline CSS, inline SVG plots, a
small inline script; nothing fetched), a verdict strip and sections, and the pieces tables and
cards are made of. Every piece of text that could come from a user, a prompt, a server or a
dataset goes through ``esc``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from html import escape

CSS = """
:root{--ok:#137333;--bad:#b3261e;--warn:#a15c00;--muted:#5f6368;--line:#dadce0}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1120px;margin:0 auto;padding:1em 1.2em 3em;color:#202124}
h1{font-size:22px;margin:.3em 0 .1em}h2{font-size:17px;margin:1.4em 0 .4em}.meta{color:var(--muted);margin:0 0 .8em}
table{border-collapse:collapse;margin:.4em 0 1.2em;font-variant-numeric:tabular-nums}
td,th{border-bottom:1px solid var(--line);padding:3px 10px;text-align:left;vertical-align:top}
th{background:#f1f3f4;font-weight:600}td.n{text-align:right}
.strip{display:flex;flex-wrap:wrap;gap:8px;margin:.6em 0 1em}
.card{border:1px solid var(--line);border-radius:8px;padding:6px 12px;min-width:108px;background:#fff}
.card .k{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:19px;font-weight:600}.card .s{font-size:11px;color:var(--muted);max-width:240px}
.card.PASS,.card.good{border-left:5px solid var(--ok)}.card.FAIL,.card.bad{border-left:5px solid var(--bad)}
.card.INCONCLUSIVE,.card.warn{border-left:5px solid var(--warn)}
.PASS,.ok,.good,.steady{color:var(--ok)}.FAIL,.failed,.bad,.invalid{color:var(--bad)}
.INCONCLUSIVE,.interrupted,.oom,.warn,.unsteady,.partial{color:var(--warn)}
nav.tabs{display:flex;flex-wrap:wrap;gap:2px;border-bottom:1px solid var(--line);margin:0 0 .6em}
nav.tabs a{padding:6px 14px;text-decoration:none;color:var(--muted);border:1px solid transparent;border-bottom:none;border-radius:6px 6px 0 0}
nav.tabs a.on{color:#202124;border-color:var(--line);background:#fff;margin-bottom:-1px}
body.js main>section{display:none}body.js main>section.on{display:block}
svg.plot{width:100%;max-width:980px;height:auto;display:block;margin:.4em 0 1em}.pt{cursor:crosshair}
.def{color:var(--muted);font-size:12px}code{background:#f1f3f4;padding:0 3px;border-radius:3px}
#tip{position:absolute;pointer-events:none;background:#202124;color:#fff;font-size:12px;padding:4px 8px;border-radius:4px;max-width:420px}
@media print{nav.tabs,#tip{display:none}main>section{display:block!important;break-inside:avoid-page}body{max-width:none}}
"""
# Tabs and tooltips; the page reads in full without it.


JS = """(function(){var d=document,secs=[].slice.call(d.querySelectorAll('main>section')),
links=[].slice.call(d.querySelectorAll('nav.tabs a'));if(!secs.length)return;d.body.classList.add('js');
function show(id){secs.forEach(function(s){s.classList.toggle('on',s.id===id)});
links.forEach(function(a){a.classList.toggle('on',a.getAttribute('href')==='#'+id)})}
links.forEach(function(a){a.addEventListener('click',function(e){e.preventDefault();
var id=a.getAttribute('href').slice(1);show(id);history.replaceState(null,'','#'+id)})});
var h=location.hash.slice(1);show(h&&d.getElementById(h)?h:secs[0].id);
var tip=d.getElementById('tip');[].forEach.call(d.querySelectorAll('svg .pt'),function(u){
var t=u.querySelector('title');if(t){u.setAttribute('data-tip',t.textContent);u.removeChild(t)}});
function at(e){return e.target&&e.target.getAttribute&&e.target.getAttribute('data-tip')}
d.addEventListener('mouseover',function(e){var v=at(e);if(v){tip.textContent=v;tip.hidden=false}});
d.addEventListener('mousemove',function(e){if(!tip.hidden){tip.style.left=(e.pageX+14)+'px';
tip.style.top=(e.pageY+14)+'px'}});d.addEventListener('mouseout',function(e){if(at(e))tip.hidden=true})})();"""


def esc(x: object) -> str:
    """HTML-escape any value's text."""
    return escape("-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x)))


def num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    text = f"{x:.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    return f"{text}{unit}"


NUMBER = re.compile(r"[-+]?[\d.,]+(e[-+]?\d+)?%?( ?(ms|s|µs|req/s|/s))?|-")


def cell(c: str) -> str:
    """A cell, right-aligned when it holds a figure (text reads better left-aligned)."""
    plain = re.sub(r"<[^>]+>", "", c)
    return f"<td class=n>{c}</td>" if NUMBER.fullmatch(plain) else f"<td>{c}</td>"


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[str]]) -> str:
    head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>" if headers else ""
    body = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def pairs(rows: Iterable[tuple[str, str]]) -> str:
    return table(None, [(esc(k), esc(v)) for k, v in rows])


def card(label: str, value: str, cls: str = "", sub: str = "") -> str:
    """A verdict strip card; every argument is plain text (escaped here)."""
    return (
        f"<div class='card {esc(cls)}'><div class=k>{esc(label)}</div><div class=v>{esc(value)}</div>"
        + (f"<div class=s>{esc(sub)}</div>" if sub else "")
        + "</div>"
    )


def page(title: str, header: str, strip: list[str], sections: list[tuple[str, str, str]]) -> str:
    """The document: header, verdict strip, tabs over the non-empty sections (id, title, body)."""
    sections = [s for s in sections if s[2]]
    nav = "".join(f"<a href='#{sid}'>{esc(name)}</a>" for sid, name, _ in sections)
    main = "".join(
        f"<section id='{sid}'><h2>{esc(name)}</h2>{body}</section>" for sid, name, body in sections
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<header>{header}</header><div class='strip'>{''.join(strip)}</div>"
        f"<nav class='tabs'>{nav}</nav><main>{main}</main><div id='tip' hidden></div>"
        f"<script>{JS}</script></body></html>\n"
    )


def svg(svg: str | None, what: str) -> str:
    return svg or f"<p class=def>({esc(what)}: no data)</p>"
