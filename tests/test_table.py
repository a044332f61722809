"""labkit.table: columns padded as f-strings pad them, strings kept as written, bad columns refused."""

import pytest

from labkit.table import Column, format_row, format_table


def test_a_table_is_its_titles_then_its_rows_padded_like_f_strings():
    columns = [Column("engine", 12, align="<"), Column("tok/s", 8, ".1f"), Column("x base", 8)]
    table = format_table(columns, [["labkit", 21.25, "1.00x"], ["llama.cpp", 60.4, "2.84x"]])
    assert table.split("\n") == [
        f"{'engine':<12}{'tok/s':>8}{'x base':>8}",
        f"{'labkit':<12}{21.25:>8.1f}{'1.00x':>8}",
        f"{'llama.cpp':<12}{60.4:>8.1f}{'2.84x':>8}",
    ]


def test_a_gap_stands_between_columns_and_a_wide_value_pushes_the_line_right():
    columns = [Column("n", 3), Column("share", 6, ".0%")]
    assert format_table(columns, [[12345, 0.5]], gap="  ") == "  n   share\n12345     50%"
    assert format_row(columns, ["-", "-"]) == "  -     -"


def test_bad_columns_and_rows_are_refused_with_what_is_allowed():
    with pytest.raises(ValueError, match="align must be '<' \\(left\\) or '>'"):
        Column("x", 4, align="^")
    with pytest.raises(ValueError, match="width must be a whole number of 0 or more"):
        Column("x", -1)
    with pytest.raises(ValueError, match="width must be a whole number"):
        Column("x", True)
    with pytest.raises(TypeError, match="title must be a string"):
        Column(3, 4)
    with pytest.raises(TypeError, match="spec must be a format spec string"):
        Column("x", 4, spec=2)
    with pytest.raises(ValueError, match="cells has 1 values for 2 columns"):
        format_row([Column("a", 2), Column("b", 2)], [1])
    with pytest.raises(TypeError, match="columns must be a non-empty sequence"):
        format_table([], [])
    with pytest.raises(TypeError, match="gap must be a string"):
        format_table([Column("a", 2)], [], gap=2)
