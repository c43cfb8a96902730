"""HTML building blocks: escaping by default, formatting of values, tables and the page layout.

Everything inserted into a page goes through ``esc``: a value is HTML only if
it is a ``Safe``, and only this module and the pages (pages/) make those, from constant
templates whose holes are escaped (``fmt``). Job arguments, errors, queue and
worker names are user data and are always escaped.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, LiteralString
from urllib.parse import quote, urlencode


class Safe(str):
    """Text that is HTML already: inserted as it is."""

    __slots__ = ()


def esc(value: object) -> Safe:
    """Value as HTML text: Safe as is, None as nothing, anything else escaped (quotes too)."""
    if isinstance(value, Safe):
        return value
    if value is None:
        return Safe("")
    return Safe(html.escape(str(value), quote=True))


def fmt(template: LiteralString, /, **values: object) -> Safe:
    """``template.format(**values)`` with every value escaped; templates use plain ``{name}`` holes only."""
    return Safe(template.format_map({key: esc(value) for key, value in values.items()}))


def join(parts: Iterable[object], sep: LiteralString = "") -> Safe:
    """Escaped parts joined into one Safe."""
    return Safe(sep.join(esc(part) for part in parts))


def url(*segments: object, **query: object) -> str:
    """A path from segments (each percent-encoded) and a query string without the None values."""
    path = "/" + "/".join(quote(str(s), safe="") for s in segments)
    params = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(params) if params else "")


# -- values for people -------------------------------------------------------


def duration(seconds: float | None) -> str:
    """'', '850ms', '4.2s', '3m05s', '2h01m', '3d04h'."""
    if seconds is None:
        return ""
    if seconds < 0:
        return "-" + duration(-seconds)
    if seconds < 0.9995:
        return f"{round(seconds * 1000)}ms"
    if seconds < 59.95:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    for size, unit, small, small_unit in ((86400, "d", 3600, "h"), (3600, "h", 60, "m"), (60, "m", 1, "s")):
        if whole >= size:
            return f"{whole // size}{unit}{(whole % size) // small:02d}{small_unit}"
    return f"{whole}s"  # pragma: no cover - whole >= 60 here


def timestamp(value: datetime | None, *, precise: bool = False) -> Safe:
    """A <time> in UTC (to the millisecond if precise), with how long ago (or ahead) it is as a tooltip."""
    if value is None:
        return Safe("")
    utc = value.astimezone(UTC)
    delta = (datetime.now(UTC) - utc).total_seconds()
    rel = f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"
    text = utc.strftime("%Y-%m-%d %H:%M:%S") + (f".{utc.microsecond // 1000:03d}" if precise else "")
    return fmt('<time datetime="{iso}" title="{rel}">{text}</time>', iso=utc.isoformat(), rel=rel, text=text)


def ago(value: datetime | None) -> Safe:
    """How long ago (or ahead), with the UTC time as a tooltip."""
    if value is None:
        return Safe("")
    utc = value.astimezone(UTC)
    delta = (datetime.now(UTC) - utc).total_seconds()
    rel = f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"
    return fmt('<time datetime="{iso}" title="{iso}">{rel}</time>', iso=utc.isoformat(), rel=rel)


def number(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def short_json(value: Any) -> str:
    """JSON on one line, for a table cell."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


_TRACEBACK: Final = re.compile(r"^(?:\s*[+|] ?)?(?:Exception Group )?Traceback \(most recent call last\):$")
_GROUP_PREFIX: Final = re.compile(r"^\s*[+|] ?")


def exception_line(text: str | None, limit: int = 160) -> str:
    """The line that names an error: for a Python traceback the exception (``ValueError: boom``) of the
    last one (the one raised), also when it carries notes or a group's sub-exceptions; else the last line."""
    if not text:
        return ""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    line = lines[-1].strip() if lines else ""
    headers = [i for i, candidate in enumerate(lines) if _TRACEBACK.match(candidate) and not candidate.startswith(" ")]
    if not headers:
        headers = [i for i, candidate in enumerate(lines) if _TRACEBACK.match(candidate)]
    if headers:
        group = "Exception Group" in lines[headers[-1]]
        for candidate in lines[headers[-1] + 1 :]:
            body = _GROUP_PREFIX.sub("", candidate) if group else candidate
            if body and not body.startswith(" "):  # frames and their source lines are indented
                line = body.strip()
                break
    return line if len(line) <= limit else line[: limit - 1] + "…"


def badge(state: object) -> Safe:
    """A job state (or any short word) as a coloured pill."""
    text = str(state)
    cls = text if text in _BADGE_CLASSES else "other"
    return fmt('<span class="badge {cls}">{text}</span>', cls=cls, text=text)


_BADGE_CLASSES: Final = frozenset(
    {
        "scheduled",
        "waiting",
        "available",
        "running",
        "completed",
        "dead",
        "cancelled",
        "paused",
        "fire",
        "other",
        "enabled",
    }
)


# -- tables ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: heading, and 'num' for right-aligned numbers."""

    heading: str
    kind: str = ""


# Text cells longer than this are cut to one line (CSS: .clip) with the whole value in a tooltip, so a long
# task name, worker name or args never squeezes the other columns; 'wrap' columns wrap instead.
CLIP_AT: Final = 32


def _cell(column: Column, value: object) -> Safe:
    if isinstance(value, str) and not isinstance(value, Safe) and len(value) > CLIP_AT and "wrap" not in column.kind:
        return fmt('<span class="clip" title="{v}">{v}</span>', v=value)
    return esc(value)


def table(columns: Sequence[Column], rows: Iterable[Sequence[object]], *, empty: str = "nothing here") -> Safe:
    """A table of escaped cells (Safe cells are inserted as they are; long text is cut, with a tooltip)."""
    head = join(fmt('<th class="{kind}">{h}</th>', kind=c.kind, h=c.heading) for c in columns)
    body = join(
        fmt(
            "<tr>{cells}</tr>",
            cells=join(
                fmt('<td class="{k}">{v}</td>', k=c.kind, v=_cell(c, v)) for c, v in zip(columns, r, strict=True)
            ),
        )
        for r in rows
    )
    if not body:
        return fmt('<p class="empty">{empty}</p>', empty=empty)
    return fmt(
        '<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>',
        head=head,
        body=body,
    )


def definition_list(items: Mapping[str, object]) -> Safe:
    """Key/value pairs as a <dl>; values that are None are left out."""
    return fmt(
        '<dl class="props">{items}</dl>',
        items=join(fmt("<dt>{k}</dt><dd>{v}</dd>", k=k, v=v) for k, v in items.items() if v is not None and v != ""),
    )


def button_form(action: str, label: str, *, next_url: str, danger: bool = False, confirm: str = "") -> Safe:
    """A POST form with one button (no JavaScript; the server redirects back to next_url)."""
    return fmt(
        '<form method="post" action="{action}" class="inline">'
        '<input type="hidden" name="next" value="{next}">'
        '<button type="submit" class="{cls}" title="{confirm}">{label}</button></form>',
        action=action,
        next=next_url,
        cls="danger" if danger else "",
        confirm=confirm,
        label=label,
    )


# -- the page ----------------------------------------------------------------

CSS: Final = """
:root { --fg:#1f2328; --muted:#656d76; --line:#d8dee4; --bg:#f6f8fa; --card:#fff; --accent:#0969da;
  --ok:#1a7f37; --warn:#9a6700; --bad:#cf222e; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
  color:var(--fg); background:var(--bg); }
header { background:#24292f; color:#fff; padding:0 24px; display:flex; align-items:center; gap:24px; height:48px; }
header .brand { font-weight:700; font-size:16px; color:#fff; text-decoration:none; letter-spacing:.2px; }
header nav a { color:#d0d7de; text-decoration:none; margin-right:16px; }
header nav a.on, header nav a:hover { color:#fff; }
header .mode { margin-left:auto; font-size:12px; color:#d0d7de; }
main { max-width:max(1400px, 90vw); margin:0 auto; padding:20px 24px 48px; }
h1 { font-size:20px; margin:4px 0 16px; }
h2 { font-size:15px; margin:28px 0 8px; }
a { color:var(--accent); text-decoration:none; } a:hover { text-decoration:underline; }
.card { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:12px 16px; }
.scroll { overflow-x:auto; background:var(--card); border:1px solid var(--line); border-radius:6px; }
table { border-collapse:collapse; width:100%; }
th, td { padding:6px 7px; border-bottom:1px solid var(--line); text-align:left; vertical-align:top;
  white-space:nowrap; }
tbody tr:last-child td { border-bottom:none; }
tbody tr:hover { background:#f6f8fa; }
th { font-weight:600; font-size:12px; color:var(--muted); background:#f6f8fa; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
th.num { white-space:normal; }
td.wrap, td.code.wrap { white-space:normal; overflow-wrap:anywhere; min-width:9em; max-width:520px; }
.clip { display:inline-block; max-width:clamp(8em, 10vw, 24em); overflow:hidden; text-overflow:ellipsis;
  white-space:nowrap; vertical-align:top; }
td.code .clip { max-width:clamp(12ch, 12vw, 60ch); }
h1, dl.props dd { overflow-wrap:anywhere; }
td.code, pre.code { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12px; }
.badge { display:inline-block; padding:0 8px; border-radius:10px; font-size:12px; line-height:18px;
  background:#eaeef2; color:#24292f; }
.badge.available { background:#ddf4ff; color:#0550ae; } .badge.running { background:#fff8c5; color:#7d4e00; }
.badge.completed, .badge.enabled, .badge.fire { background:#dafbe1; color:#116329; }
.badge.dead { background:#ffebe9; color:#a40e26; } .badge.paused { background:#ffebe9; color:#a40e26; }
.badge.cancelled { background:#eaeef2; color:#57606a; }
.warn { color:var(--warn); font-weight:600; } .bad { color:var(--bad); font-weight:600; }
.muted, .empty { color:var(--muted); }
.empty { background:var(--card); border:1px dashed var(--line); border-radius:6px; padding:12px 16px; margin:0; }
.flash { background:#ddf4ff; border:1px solid #54aeff; border-radius:6px; padding:8px 12px; margin-bottom:16px; }
.tabs { margin:8px 0 12px; } .tabs a { display:inline-block; padding:3px 10px; border:1px solid var(--line);
  border-radius:14px; margin:0 4px 4px 0; background:var(--card); color:var(--fg); }
.tabs a.on { background:var(--accent); border-color:var(--accent); color:#fff; }
.toolbar { display:flex; gap:6px; align-items:center; margin-bottom:8px; color:var(--muted); font-size:12px; }
.toolbar a.on { color:var(--fg); font-weight:600; }
.split { display:grid; grid-template-columns:minmax(300px,1fr) minmax(0,2fr); gap:16px; align-items:start; }
.split h3 { font-size:13px; margin:0 0 6px; color:var(--muted); font-weight:600; }
.split pre + h3 { margin-top:14px; }
@media (max-width: 900px) { .split { grid-template-columns:1fr; } }
h1 .sub { color:var(--muted); font-weight:400; }
.grid { display:grid; grid-template-columns:repeat(auto-fit,minmax(100px,1fr)); gap:10px; margin-bottom:8px; }
.stat { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:10px 14px; }
.stat b { display:block; font-size:20px; font-variant-numeric:tabular-nums; white-space:nowrap; }
.pager { margin-top:10px; font-size:13px; }
.stat > span { color:var(--muted); font-size:12px; }
dl.props { display:grid; grid-template-columns:max-content 1fr; gap:4px 16px; margin:0; background:var(--card);
  border:1px solid var(--line); border-radius:6px; padding:12px 16px; }
dl.props dt { color:var(--muted); } dl.props dd { margin:0; word-break:break-word; }
pre { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:12px 16px; overflow:auto;
  font:12px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; margin:0; max-height:480px; }
pre.error { background:#fff8f8; border-color:#ffcecb; white-space:pre-wrap; overflow-wrap:anywhere; }
form.inline { display:inline; margin:0; }
button { font:inherit; font-size:12px; padding:2px 10px; border:1px solid var(--line); border-radius:6px;
  background:#f6f8fa; color:var(--fg); cursor:pointer; }
button:hover { background:#eef1f4; border-color:#afb8c1; }
button.danger { color:var(--bad); } button.danger:hover { background:var(--bad); color:#fff; border-color:var(--bad); }
.actions { display:flex; gap:8px; margin:12px 0; }
footer { color:var(--muted); font-size:12px; margin-top:32px; }
.charts { display:grid; grid-template-columns:repeat(auto-fit,minmax(320px,1fr)); gap:12px; margin-bottom:8px; }
figure.chart { margin:0; background:var(--card); border:1px solid var(--line); border-radius:6px;
  padding:8px 10px 4px; }
figure.chart figcaption { font-size:12px; font-weight:600; display:flex; flex-wrap:wrap; gap:2px 12px;
  margin-bottom:2px; }
figure.chart > svg { display:block; width:100%; height:auto; }
.legend { font-weight:400; color:var(--muted); display:inline-flex; flex-wrap:wrap; gap:2px 10px; }
.legend b { color:var(--fg); font-variant-numeric:tabular-nums; }
form.filters { display:flex; flex-wrap:wrap; gap:8px 10px; align-items:flex-end; background:var(--card);
  border:1px solid var(--line); border-radius:6px; padding:10px 14px; margin-bottom:12px; }
form.filters label { display:flex; flex-direction:column; font-size:12px; color:var(--muted); gap:2px; }
form.filters input, form.filters select { font:inherit; font-size:13px; padding:3px 6px; border:1px solid var(--line);
  border-radius:6px; background:#fff; color:var(--fg); }
form.filters input.wide { width:260px; }
.confirm { background:#fff8f8; border:1px solid #ffcecb; border-radius:6px; padding:12px 16px; margin:12px 0; }
td.act { width:1%; }
""".strip()

# Live charts: every few seconds, the section's fragment is fetched again from
# its data-src (same origin) and put in place. Pages work without it.
LIVE_JS: Final = """
(function () {
  var box = document.getElementById("live");
  if (!box || !window.fetch) { return; }
  var src = box.getAttribute("data-src");
  var every = 1000 * (parseInt(box.getAttribute("data-every"), 10) || 10);
  function tick() {
    if (document.hidden) { setTimeout(tick, every); return; }
    fetch(src, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) { box.innerHTML = html; box.setAttribute("data-updated", String(Date.now())); }
      })
      .catch(function () {})
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
""".strip()


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# The Content-Security-Policy allows exactly this stylesheet and this script,
# and fetches from this origin only.
CSS_HASH: Final = _sha256(CSS)
LIVE_JS_HASH: Final = _sha256(LIVE_JS)
CONTENT_SECURITY_POLICY: Final = (
    f"default-src 'none'; style-src '{CSS_HASH}'; script-src '{LIVE_JS_HASH}'; connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

LIVE_SCRIPT: Final = Safe("<script>" + LIVE_JS + "</script>")

NAV: Final = (
    ("overview", "/", "Overview"),
    ("jobs", "/jobs", "Jobs"),
    ("dead", "/dead", "Dead letters"),
    ("schedules", "/schedules", "Schedules"),
)


def layout(
    title: str,
    body: Safe,
    *,
    section: str = "",
    read_only: bool = False,
    refresh: int | None = None,
    flash: str | None = None,
    live: bool = False,
) -> str:
    """A whole page: header with navigation, an optional flash line, the body; refresh reloads every N s;
    live adds the script that keeps the page's #live section up to date."""
    nav = join(
        fmt('<a href="{href}" class="{on}">{label}</a>', href=href, on="on" if key == section else "", label=label)
        for key, href, label in NAV
    )
    meta = fmt('<meta http-equiv="refresh" content="{n}">', n=refresh) if refresh else Safe("")
    mode = "read-only" if read_only else ""
    note = fmt('<div class="flash">{flash}</div>', flash=flash) if flash else Safe("")
    return fmt(
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">{meta}'
        "<title>{title} · pgsched</title><style>{css}</style></head>"
        '<body><header><a class="brand" href="/">pgsched</a><nav>{nav}</nav><span class="mode">{mode}</span></header>'
        "<main>{note}{body}</main>{script}</body></html>\n",
        meta=meta,
        title=title,
        css=Safe(CSS),
        nav=nav,
        mode=mode,
        note=note,
        body=body,
        script=LIVE_SCRIPT if live else Safe(""),
    )
