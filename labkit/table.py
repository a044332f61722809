"""Text tables: the one formatter behind every table the benchmarks and notebooks print.

A table is its columns, each a title, a width and how its numbers are written, and rows of cells. A cell
that is a string stands as it is (already written: "-", "1.23x", "12 GB"); any other value is written
with its column's format spec. Every cell, the title too, is padded to the column's width, right-aligned
unless the column says "<"; `gap` goes between columns. A value wider than its column pushes the rest of
its line right rather than being cut, as an f-string would.

    >>> columns = [Column("engine", 12, align="<"), Column("tok/s", 8, ".1f"), Column("x base", 8)]
    >>> print(format_table(columns, [["labkit", 21.25, "1.00x"], ["llama.cpp", 60.4, "2.84x"]]))
    engine         tok/s  x base
    labkit          21.2   1.00x
    llama.cpp       60.4   2.84x
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ALIGNMENTS = ("<", ">")


@dataclass(frozen=True)
class Column:
    """One column: its `title`, its `width` in characters, the format `spec` of its numbers (".1f", ".0%",
    "+.1%"; "" writes them as str() does) and its alignment, ">" (right, for numbers) or "<" (left)."""

    title: str
    width: int
    spec: str = ""
    align: str = ">"

    def __post_init__(self):
        if not isinstance(self.title, str):
            raise TypeError(f"Column title must be a string, got {type(self.title).__name__}.")
        if isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 0:
            raise ValueError(
                f"Column width must be a whole number of 0 or more characters, got {self.width!r}."
            )
        if self.align not in ALIGNMENTS:
            raise ValueError(f"Column align must be '<' (left) or '>' (right), got {self.align!r}.")
        if not isinstance(self.spec, str):
            raise TypeError(
                f"Column spec must be a format spec string such as '.1f', got {type(self.spec).__name__}."
            )

    def cell(self, value: object) -> str:
        """`value` padded to the column: a string as it is, anything else written with `spec`.

        >>> Column("MB", 8, ".1f").cell(12.345), Column("MB", 8, ".1f").cell("-")
        ('    12.3', '       -')
        """
        text = value if isinstance(value, str) else format(value, self.spec)
        return f"{text:{self.align}{self.width}}"


def format_row(columns: Sequence[Column], cells: Sequence[object], gap: str = "") -> str:
    """One line: each cell padded to its column, `gap` between them; one cell per column.

    >>> format_row([Column("a", 4), Column("b", 4)], [1, "x"], gap=" ")
    '   1    x'
    """
    if len(cells) != len(columns):
        raise ValueError(f"cells has {len(cells)} values for {len(columns)} columns: give one per column.")
    return gap.join(column.cell(value) for column, value in zip(columns, cells))


def format_table(columns: Sequence[Column], rows: Iterable[Sequence[object]], gap: str = "") -> str:
    """The title line, then one line per row (see format_row), joined by newlines.

    >>> print(format_table([Column("n", 3), Column("sq", 4)], [[2, 4], [3, 9]]))
      n  sq
      2   4
      3   9
    """
    if not columns or not all(isinstance(column, Column) for column in columns):
        raise TypeError("columns must be a non-empty sequence of labkit.table.Column.")
    if not isinstance(gap, str):
        raise TypeError(f"gap must be a string (what stands between two columns), got {type(gap).__name__}.")
    titles = format_row(columns, [column.title for column in columns], gap)
    return "\n".join([titles] + [format_row(columns, cells, gap) for cells in rows])
