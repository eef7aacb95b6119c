"""The numbers docs/ quotes from reports, rewritten from the reports and checked against them.

    python experiments/docs_quotes.py            # rewrite every quote in docs/ and priors/README.md
    python experiments/docs_quotes.py --check    # exit 1 listing each quote that differs from its report

A number taken from a report is written in the Markdown as a quote:

    the bandit made <!-- quote results/live-noise/report.json points/[report=live,concurrency=1]/contrast_ratio .2f -->0.91<!-- /quote -->x

The marker names the report (relative to the repository root), where the value lies in it, and
its Python format spec; the text up to ``<!-- /quote -->`` is the value as formatted. The path's
segments, separated by ``/``, are object keys (a ``/`` inside a key written ``~1``, as in a JSON
pointer), list indices, or ``[key=value,...]``, which picks the one list element whose fields
match (values compare as text, so ``concurrency=1`` matches 1).
A spec ending in ``x100`` multiplies by 100 first (``.1fx100`` renders 0.0123 as ``1.2``), for a
percentage written beside a ``%``. Rendered Markdown hides the markers, so a reader sees the
number. A quote that names a missing report or a path the report lacks is an error naming the
file, the line and the path.

A default or a constant of the code is quoted the same way, naming the module and the attribute
path instead of a report (``code`` in place of ``quote``):

    explored for <!-- code banditk.core.config GovernorConfig.explore_steps d -->32<!-- /code --> steps

A dataclass field's default reads from the class (its field default, or its default factory's
value); anything else is the attribute's value.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.io.atomic import atomic_write_text  # noqa: E402

#: The pages whose quotes this keeps; docs/results.md is generated whole by readme_results.py.
PAGES = ("docs/*.md", "priors/README.md")
QUOTE = re.compile(
    r"<!-- (?P<kind>quote|code) (?P<report>\S+) (?P<path>\S+) (?P<spec>\S+) -->(?P<text>.*?)<!-- /(?P=kind) -->"
)


class QuoteError(ValueError):
    """A quote that cannot be rendered: names the page, the line, the report and the path."""


@dataclass(frozen=True)
class Quote:
    page: str
    line: int
    kind: str  # "quote": a report's value; "code": a module's constant or default
    report: str  # the report, or the module
    path: str
    spec: str
    text: str

    def where(self) -> str:
        return f"{self.page}:{self.line}: {self.kind} of {self.report} {self.path}"


def code_value(module: str, path: str, where: str = "code"):
    """A module attribute by dotted path; a dataclass field's default where the class lacks it as
    an attribute (a default factory's value).

    >>> code_value("banditk.evaluation", "THRESHOLDS.real.throughput_vs_nospec")
    0.97
    """
    import dataclasses
    import importlib

    try:
        node = importlib.import_module(module)
    except ImportError as e:
        raise QuoteError(f"{where}: module `{module}` cannot be imported ({e})") from None
    for name in path.split("."):
        fields = (
            {f.name: f for f in dataclasses.fields(node)}
            if isinstance(node, type) and dataclasses.is_dataclass(node)
            else {}
        )
        if name in fields:  # a class's field: its default (a slotted class has no attribute for it)
            f = fields[name]
            if f.default is not dataclasses.MISSING:
                node = f.default
            elif f.default_factory is not dataclasses.MISSING:
                node = f.default_factory()
            else:
                raise QuoteError(f"{where}: field `{name}` of {node.__name__} has no default")
        elif isinstance(node, dict) and name in node:
            node = node[name]
        elif hasattr(node, name):
            node = getattr(node, name)
        else:
            raise QuoteError(f"{where}: no attribute `{name}`")
    return node


def select(data, path: str, where: str = "report"):
    """The value at ``path`` in parsed JSON ``data`` (see the module doc for the segments).

    >>> select({"points": [{"c": 1, "r": 0.5}, {"c": 2, "r": 0.7}]}, "points/[c=2]/r")
    0.7
    >>> select({"rows": [[1, 2], [3, 4]]}, "rows/1/0")
    3
    >>> select({"results": {"phases/c8": {"r": 1.01}}}, "results/phases~1c8/r")
    1.01
    """
    node = data
    for seg in (part.replace("~1", "/") for part in path.split("/")):
        if seg.startswith("[") and seg.endswith("]"):
            want = dict(part.split("=", 1) for part in seg[1:-1].split(",") if "=" in part)
            if not isinstance(node, list) or not want:
                raise QuoteError(f"{where}: `{seg}` selects from a list by key=value, found {type(node).__name__}")
            hits = [x for x in node if isinstance(x, dict) and all(str(x.get(k)) == v for k, v in want.items())]
            if len(hits) != 1:
                raise QuoteError(f"{where}: `{seg}` matches {len(hits)} elements, not one")
            node = hits[0]
        elif isinstance(node, list):
            if not seg.lstrip("-").isdigit() or not -len(node) <= int(seg) < len(node):
                raise QuoteError(f"{where}: `{seg}` is not an index of a list of {len(node)}")
            node = node[int(seg)]
        elif isinstance(node, dict):
            if seg not in node:
                raise QuoteError(f"{where}: no key `{seg}`")
            node = node[seg]
        else:
            raise QuoteError(f"{where}: `{seg}` goes below a {type(node).__name__}")
    return node


def render(value, spec: str, where: str = "quote") -> str:
    """``value`` formatted by ``spec`` (``x100`` suffix: times 100 first).

    >>> render(0.0123, ".2fx100"), render(0.9137, ".2f"), render("fixed:2", "s")
    ('1.23', '0.91', 'fixed:2')
    """
    scale = 1.0
    if spec.endswith("x100"):
        spec, scale = spec[: -len("x100")], 100.0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise QuoteError(f"{where}: the value is {type(value).__name__}, not a number or a string")
    if isinstance(value, (int, float)) and scale != 1.0:
        value = value * scale
    try:
        return format(value, spec)
    except (TypeError, ValueError) as e:
        raise QuoteError(f"{where}: format spec `{spec}` does not apply to {value!r} ({e})") from None


def quotes_in(text: str, page: str) -> list[Quote]:
    """Every quote of a page, with its line number."""
    out = []
    for m in QUOTE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(Quote(page, line, m["kind"], m["report"], m["path"], m["spec"], m["text"]))
    return out


def pages(root: Path = ROOT) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern) if p.name != "results.md"})


def rendered(text: str, page: str, root: Path = ROOT, cache: dict | None = None) -> str:
    """The page's text with every quote's value rendered from its report.

    Raises:
        QuoteError: a report is missing or unreadable, or lacks the quoted path.
    """
    cache = {} if cache is None else cache

    def value(q: Quote) -> str:
        if q.kind == "code":
            return render(code_value(q.report, q.path, q.where()), q.spec, q.where())
        if q.report not in cache:
            path = root / q.report
            try:
                cache[q.report] = json.loads(path.read_text())
            except FileNotFoundError:
                raise QuoteError(f"{q.where()}: no such report") from None
            except (OSError, ValueError) as e:
                raise QuoteError(f"{q.where()}: the report cannot be read ({e})") from None
        return render(select(cache[q.report], q.path, q.where()), q.spec, q.where())

    quotes = iter(quotes_in(text, page))

    def sub(m: re.Match) -> str:
        q = next(quotes)
        end = f"<!-- /{q.kind} -->"
        return m.group(0).replace(f"-->{q.text}{end}", f"-->{value(q)}{end}")

    return QUOTE.sub(sub, text)


def stale(root: Path = ROOT) -> list[str]:
    """Each quote whose text differs from its report's value, as ``page:line: ... doc X, report Y``."""
    out, cache = [], {}
    for page in pages(root):
        rel = page.relative_to(root).as_posix()
        text = page.read_text()
        new = rendered(text, rel, root, cache)
        for old_q, new_q in zip(quotes_in(text, rel), quotes_in(new, rel)):
            if old_q.text != new_q.text:
                out.append(f"{old_q.where()}: the page says {old_q.text!r}, the report gives {new_q.text!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 if a quote differs from its report; write nothing")
    p.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    try:
        if a.check:
            problems = stale(a.root)
            print("\n".join(problems) or "docs_quotes: every quote matches its report", file=sys.stderr)
            return 1 if problems else 0
        changed = []
        for page in pages(a.root):
            rel = page.relative_to(a.root).as_posix()
            text = page.read_text()
            new = rendered(text, rel, a.root)
            if new != text:
                atomic_write_text(page, new)
                changed.append(rel)
    except QuoteError as e:
        print(f"docs_quotes: {e}", file=sys.stderr)
        return 1
    print(f"docs_quotes: {', '.join(changed) + ' updated' if changed else 'every quote already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
