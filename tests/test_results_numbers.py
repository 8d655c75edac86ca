"""Every number the prose of docs/results.md states is one its section's reports hold.

The results sections (everything after the page's first ``## `` heading) read the committed runs.
Their generated blocks are checked against results/ by tests/test_docs.py; the sentences beside them
are written by hand and go stale when a sweep is rerun. The rule, for each ``## `` section:

1. A number in the prose (0.046, +3.9, −0.20, [−1.84, +3.08], 23.9%, 1e-4, 2,048, 48) must be printed
   in one of the section's generated blocks or in a report the section cites (a ``results/...`` path
   in a link, a code span or a block's source line: a file brings itself and its siblings of the
   same stem, report.md with report.json; a directory every report under it), or be a rounding, to
   the prose's own decimals, of a value those reports hold (0.03894 is quoted as 0.039 or 0.04).
2. Only the section's own reports count: all of results/ together holds so many values that their
   roundings carry nearly any number (nine in ten of all 3-decimal numbers in [0, 1]).
3. A number followed by "points" or "%" (alone or ending a list: "+1.4, +0.5 and −11 points") may be
   a hundredth-scaled value: 3.9 points is a difference of 0.039, 23.9% a ratio of 0.239. Elsewhere
   it must say its unit to be read so.
4. An integer is a count, a seed or a budget: printed exactly, never a rounding, unless the prose says
   it is approximate ("about 50 steps" is carried by 52).
5. A number written without a sign is a magnitude ("7.2 points below" quotes −0.072); a signed one
   must match with its sign. Unicode minus, '+', '±' and thousands commas are normalised away.
6. Code spans, fenced code, link targets, image lines, headings and generated blocks are not prose;
   digits inside names (tiny-500k, pass@1, Qwen3-1.7B, the 80/20 rule, top-1, r64) are not numbers.
   DEFINITIONS lists the few numbers the prose defines rather than measures.

A failure is fixed in the prose (quote the report, or cite the one that holds the number), never by
pasting a number into results/: a number no committed report holds, from an earlier run or worked
out by hand, is what this test exists to find. Raw records (per-run files under runs/, the probes'
updates.json) are not reports here: their hundreds of thousands of values would carry anything.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path

from bench.report.docs_tables import BLOCK

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
REPORT_SUFFIXES = {".md", ".json", ".yaml", ".txt", ".log"}

NUMBER = re.compile(
    r"(?<![\w@./])(?<![A-Za-z_][-−])"  # not inside a name: tiny-500k, pass@1, 80/20, top-1, x86_64
    r"(?P<sign>[+\-−±]?)"
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?(?P<exp>e[+\-−]?\d+)?(?P<pct>%)?"
    r"(?![\w/]|\.\d)"  # nor a version (3.11.7) or a name's tail (500k, 1.7B)
)
REPORT_NUMBER = re.compile(r"[+\-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[+\-−]?\d+)?")
CITED = re.compile(r"results/[\w.\-/]*[\w/]")
UNIT = re.compile(r"(?:(?:,| and| or| to|–)\s*[+\-−]?[\d.]+)*\s*(?:points?\b|%)")
APPROXIMATE = re.compile(r"(?:about|roughly|~)\s*$")
SENTENCE_END = re.compile(r"[.!?](?=\s)")

DEFINITIONS = {
    "36-token budget": "the default max_new_tokens (bench/config.py): a setting, not a result",
    "longer than 29 tokens": "that budget less DelTA's 20% buffer, worked out from the setting",
}
"""Phrases whose number the prose defines rather than measures, each with the reason."""


def _number(text: str) -> Decimal | None:
    """The value a printed number stands for: unicode minus, '+', '±' and thousands commas dropped."""
    try:
        return Decimal(text.replace("−", "-").replace(",", "").lstrip("+±"))
    except InvalidOperation:  # digits of a hash read as an exponent too large to hold
        return None


# ------------------------------------------------------------------------------------ the reports
@dataclass
class Carried:
    """The numbers reports print (matched exactly) and every value they hold (matched rounded)."""

    printed: set[Decimal] = field(default_factory=set)
    values: set[float] = field(default_factory=set)
    _rounded: dict[tuple[int, int], set[Decimal]] = field(default_factory=dict)

    def add_text(self, text: str) -> None:
        for m in REPORT_NUMBER.finditer(text):
            if (value := _number(m[0])) is not None and value.is_finite() and math.isfinite(float(value)):
                self.printed.add(value)
                self.values.add(float(value))

    def add_json(self, node: object) -> None:
        if isinstance(node, str):
            self.add_text(node)  # a report keeps its Markdown tables in strings too
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and math.isfinite(node):
            self.printed.add(Decimal(repr(node)))
            self.values.add(float(node))
        elif isinstance(node, (dict, list)):
            for child in node.values() if isinstance(node, dict) else node:
                self.add_json(child)

    def update(self, other: Carried) -> None:
        self.printed |= other.printed
        self.values |= other.values

    def rounded(self, decimals: int, scale: int) -> set[Decimal]:
        """Every value times ``scale`` rounded to ``decimals`` (negative: to tens, hundreds, ...)."""
        if (decimals, scale) not in self._rounded:
            self._rounded[decimals, scale] = {
                Decimal(format(round(v * scale, decimals), f".{max(decimals, 0)}f")) for v in self.values
            }
        return self._rounded[decimals, scale]


@cache
def _report(path: Path) -> Carried:
    carried = Carried()
    if path.suffix == ".json":
        carried.add_json(json.loads(path.read_text()))
    else:
        carried.add_text(path.read_text())
    return carried


def _reports(cited: Path) -> list[Path]:
    """The reports a cited path brings: a file itself and its siblings of the same stem, a directory
    every report under it; never the raw records (runs/*.json, updates.json)."""
    files = cited.parent.glob(f"{cited.stem}.*") if cited.is_file() else cited.rglob("*")
    return sorted(
        p for p in files if p.suffix in REPORT_SUFFIXES and p.name != "updates.json" and "runs" not in p.parts
    )


# ------------------------------------------------------------------------------------ the prose
@dataclass(frozen=True)
class Quote:
    line: int
    text: str  # as written
    value: Decimal
    signed: bool
    decimals: int | None  # its precision (-1: tens); None for a rate written as 1e-4, matched exactly
    integer: bool
    approximate: bool
    in_points: bool
    sentence: str


@dataclass
class Section:
    heading: str
    paragraphs: list[list[tuple[int, str]]]  # (line number, prose with what is not prose blanked)
    carried: Carried


def _blank(match: re.Match) -> str:
    return " " * len(match[0])


def _sections(text: str) -> list[Section]:
    """The page's ``## `` sections: their prose, paragraph by paragraph, and what their reports carry."""
    generated = set()  # line numbers inside generated blocks
    for m in BLOCK.finditer(text):
        first = text.count("\n", 0, m.start()) + 1
        generated.update(range(first, first + m[0].count("\n") + 1))
    sections: list[Section] = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            sections.append(Section(line[3:], [[]], Carried()))
        if not sections:
            continue
        section = sections[-1]
        for cited in CITED.findall(line):
            if (ROOT / cited).exists():
                for report in _reports(ROOT / cited):
                    section.carried.update(_report(report))
        if number in generated and not line.startswith("<!--"):
            section.carried.add_text(line)  # generated from results/, as tests/test_docs.py checks
        in_fence ^= line.startswith("```")
        prose = not (number in generated or in_fence or line.startswith(("#", "![", "```")))
        if not (prose and line.strip()) or line.startswith("- "):
            section.paragraphs.append([])
        if prose and line.strip():
            line = re.sub(r"`[^`]*`", _blank, line)
            section.paragraphs[-1].append((number, re.sub(r"(?<=\])\([^)]*\)", _blank, line)))
    return sections


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence around text[start:end], cut at a word to about 100 characters either side."""
    begin = max((m.end() for m in SENTENCE_END.finditer(text, 0, start)), default=0)
    stop = next((m.end() for m in SENTENCE_END.finditer(text, end)), len(text))
    if begin < start - 100:
        begin = text.index(" ", start - 100)
    if stop > end + 100:
        stop = text.rindex(" ", end, end + 100)
    return " ".join(text[begin:stop].split())


def _quotes(paragraph: list[tuple[int, str]]) -> Iterator[Quote]:
    text, offsets = "", []
    for number, line in paragraph:
        offsets.append((len(text), number))
        text += line.strip() + " "
    defined = [range(m.start(), m.end()) for phrase in DEFINITIONS for m in re.finditer(re.escape(phrase), text)]
    for m in NUMBER.finditer(text):
        value = _number(m[0].rstrip("%"))
        if value is None or any(m.start() in span for span in defined):
            continue
        integer = not (m["frac"] or m["exp"])
        approximate = bool(APPROXIMATE.search(text, 0, m.start()))
        decimals = None if m["exp"] else len(m["frac"] or ".") - 1
        if integer and approximate:
            decimals = -(len(m["int"]) - len(m["int"].rstrip("0")))  # about 50: to the nearest ten
        yield Quote(
            line=max(n for offset, n in offsets if offset <= m.start()),
            text=m[0],
            value=value,
            signed=m["sign"] in ("+", "-", "−"),
            decimals=decimals,
            integer=integer,
            approximate=approximate,
            in_points=bool(m["pct"] or UNIT.match(text, m.end())),
            sentence=_sentence(text, m.start(), m.end()),
        )


def _is_carried(quote: Quote, carried: Carried) -> bool:
    candidates = [quote.value] if quote.signed else [quote.value, -quote.value]
    if any(c in carried.printed for c in candidates):
        return True
    if quote.decimals is None:
        return False
    for scale in (1, 100) if quote.in_points else (1,):
        if quote.integer and not quote.approximate and scale == 1:
            continue  # a count is printed as it is
        rounded = carried.rounded(quote.decimals, scale)
        if any(c in rounded for c in candidates):
            return True
    return False


def offenders(text: str) -> list[str]:
    """One line per number of the page's prose that its section's reports do not carry."""
    found = []
    for section in _sections(text):
        for paragraph in section.paragraphs:
            for quote in _quotes(paragraph):
                if not _is_carried(quote, section.carried):
                    found.append(f"line {quote.line}: {quote.text}  in  “{quote.sentence}”  ({section.heading})")
    return found


def test_results_prose_quotes_the_reports():
    found = offenders(PAGE.read_text())
    assert not found, (
        f"docs/results.md: {len(found)} numbers in the prose are not in the reports their section cites. "
        "Quote the report as it prints the number (or cite the report that holds it); write 'points' or '%' "
        "after a hundredth-scaled value:\n" + "\n".join(found)
    )
