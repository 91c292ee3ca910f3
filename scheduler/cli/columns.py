"""Plain columns, as kubectl prints them: the one table layout every list command shares.

No box and no folding: one line per row, columns two spaces apart, headers in capitals.
What a person copies or reads as a key (ids, STATE, TYPE, ZONE, MARKET, money) is never cut;
when the terminal is narrow, lower-value columns are left out first, then the free text
(a reason, a message) is shortened at a word, ending in '…'. `-o wide` shows every column
and runs past the terminal rather than cut anything, and with no width known (a pipe without
$COLUMNS) nothing is cut. The same columns and widths go to a terminal (with the state in
colour) and to a pipe, and a watcher keeps the columns it started with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

GAP = 2  # spaces between columns
ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Col:
    """One column. `drop`: 0 is always shown; the others are left out, highest first, when
    the terminal is narrow."""

    name: str
    drop: int = 0
    right: bool = False


@dataclass(frozen=True, slots=True)
class Layout:
    """The columns chosen for a width and each one's width."""

    cols: tuple[Col, ...]
    widths: Mapping[str, int]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.cols]


def natural(cols: Sequence[Col], rows: Sequence[Mapping[str, str]]) -> dict[str, int]:
    return {c.name: max([len(c.name), *(len(r.get(c.name, "")) for r in rows)]) for c in cols}


def layout(
    cols: Sequence[Col],
    rows: Sequence[Mapping[str, str]],
    width: int | None,
    *,
    shrink: Sequence[tuple[str, int]] = (),
    wide: bool = False,
    keep: Sequence[str] | None = None,
) -> Layout:
    """The columns that fit `width` (all of them when `wide` or no width is known) and their
    widths. `shrink`: the free-text columns that may be shortened, in turn, each down to
    its floor ((REASON, 30), (NAME, 16), (REASON, 8): REASON first, then NAME, then REASON
    again); every other column keeps its whole width. `keep`: exactly these columns (a
    watcher's first choice), still fitted to the width."""
    nat = natural(cols, rows)
    floors: dict[str, int] = {}  # what a column keeps before an optional one is added
    for name, floor in shrink:
        floors.setdefault(name, floor)
    if keep is not None:
        chosen = [c for c in cols if c.name in keep]
    elif wide or width is None:
        chosen = list(cols)
    else:
        picked = [c for c in cols if c.drop == 0]
        # What the kept columns need at their floors, then the others while they fit.
        used = sum(min(nat[c.name], floors.get(c.name, nat[c.name])) for c in picked)
        used += GAP * (len(picked) - 1)
        for c in sorted((c for c in cols if c.drop), key=lambda c: c.drop):
            if used + GAP + nat[c.name] <= width:
                picked.append(c)
                used += GAP + nat[c.name]
        chosen = [c for c in cols if c in picked]
    widths = {c.name: nat[c.name] for c in chosen}
    if width is not None and not wide:
        over = sum(widths.values()) + GAP * (len(chosen) - 1) - width
        for name, floor in shrink:
            if over <= 0:
                break
            if name in widths:
                cut = min(over, max(widths[name] - floor, 0))
                widths[name] -= cut
                over -= cut
    return Layout(tuple(chosen), widths)


def shorten(text: str, width: int) -> str:
    """`text` in at most `width` characters: cut at a word when one ends late enough,
    ending in '…'."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if space >= width * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + ELLIPSIS


def cells(lay: Layout, row: Mapping[str, str]) -> list[str]:
    """The row's cells, each padded (or shortened) to its column's width; the last column
    is not padded."""
    out = []
    last = lay.cols[-1].name if lay.cols else ""
    for c in lay.cols:
        w = lay.widths[c.name]
        text = shorten(row.get(c.name, ""), w)
        if c.name == last and not c.right:
            out.append(text)
        else:
            out.append(text.rjust(w) if c.right else text.ljust(w))
    return out


def lines(lay: Layout, rows: Sequence[Mapping[str, str]], *, headers: bool = True) -> list[str]:
    """The table as plain text lines."""
    head = [{c.name: c.name for c in lay.cols}] if headers else []
    return [(" " * GAP).join(cells(lay, r)).rstrip() for r in [*head, *rows]]


def rich_lines(
    lay: Layout,
    rows: Sequence[Mapping[str, str]],
    *,
    headers: bool = True,
    styles: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Text]:
    """The same lines for a terminal: the header in bold, and a cell in the style
    `styles[column][value]` gives (a job's state in colour). Text, never markup."""
    from rich.text import Text

    out = []
    if headers:
        out.append(
            Text(
                (" " * GAP).join(cells(lay, {c.name: c.name for c in lay.cols})).rstrip(),
                style="bold",
            )
        )
    for r in rows:
        line = Text()
        for i, (c, cell) in enumerate(zip(lay.cols, cells(lay, r), strict=True)):
            if i:
                line.append(" " * GAP)
            style = (styles or {}).get(c.name, {}).get(r.get(c.name, ""), "")
            line.append(cell, style=style)
        line.rstrip()
        out.append(line)
    return out
