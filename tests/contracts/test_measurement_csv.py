"""The CSV layouts both readers share (gac ingest, gac align --measurements) and the download's header."""

from __future__ import annotations

import csv
import io

import pytest

from gac.contracts.measurement_csv import curve_header, layout_problem, row_point


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_table_row_and_a_curve_download_row_are_the_same_point():
    table = rows('op,dtype,shape,sweep_axis,median_us,n\ngemm,float16,"k=64,m=8,n=24",n,5.0,300\n')[0]
    header = ",".join(curve_header("n"))
    download = rows(f'{header}\ngemm,float16,n,"k=64,m=8",24,5.0,4.9,5.2,5.0,300,2,abc\n')[0]
    assert row_point(table) == row_point(download) == ({"k": 64, "m": 8, "n": 24}, "n", "300")


def test_an_axis_named_n_never_reads_the_swept_value_as_the_sample_count():
    # The download's column n is the swept N: without `samples` the count is unknown, not 24.
    assert row_point({"op": "gemm", "axis": "n", "fixed": "k=64,m=8", "n": "24"})[2] == ""
    # With an x column, a column n is the sample count.
    assert row_point({"axis": "n", "fixed": "k=64,m=8", "x": "24", "n": "300"}) == ({"k": 64, "m": 8, "n": 24}, "n", "300")


@pytest.mark.parametrize(
    ("rec", "said"),
    [
        ({"fixed": "k=64", "x": "3"}, "needs `shape` and `sweep_axis`"),
        ({"axis": "n", "fixed": "k=64", "dim": "3"}, "no column 'n' (or 'x') holds the swept n"),
        ({"axis": "n", "fixed": "k=64", "x": "3.5"}, "the swept n ('x') must be an integer, not '3.5'"),
        ({"axis": "n", "fixed": "k=sixty", "x": "3"}, "malformed shape component 'k=sixty'"),
    ],
)
def test_a_row_that_is_neither_layout_says_what_it_lacks(rec, said):
    with pytest.raises(ValueError) as bad:
        row_point(rec)
    assert said in str(bad.value)


def test_a_header_needs_one_layout():
    assert layout_problem(["op", "dtype", "shape", "sweep_axis", "median_us", "p10_us"]) is None
    assert layout_problem(curve_header("head_dim")) is None
    said = layout_problem(["op", "dtype", "axis", "median_us"])
    assert said is not None and "op, dtype, shape, sweep_axis, median_us" in said and "has axis, dtype, median_us, op" in said
    assert layout_problem(None) is not None
