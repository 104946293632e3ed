"""The two CSV layouts of measurements GAC reads (`gac ingest`, `gac align --measurements`):

- a table, one point per row: `op,dtype,shape,sweep_axis,median_us,...`, shape as 'k=4096,m=1024,n=512';
- a curve download (GET /v1/platforms/{id}/curve as CSV): `op,dtype,axis,fixed,<axis>,median_us,...`,
  the swept value in the column named after the axis (or in `x`, several curves to a file), the
  sample count in `samples`.

The service writes the second (curve_header); both readers parse a row here, so they agree on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gac.contracts.measurements import parse_shape_key

TABLE_COLUMNS = ("op", "dtype", "shape", "sweep_axis", "median_us")
CURVE_COLUMNS = ("op", "dtype", "axis", "fixed", "median_us")


def curve_header(axis: str) -> list[str]:
    """The columns of one curve's download. The sample count is `samples`, so an axis named n (a GEMM's N)
    does not collide with it."""
    return ["op", "dtype", "axis", "fixed", axis, "median_us", "p10_us", "p90_us", "mean_us", "samples", "measurements", "platform"]


def layout_problem(columns: Iterable[str] | None) -> str | None:
    """What a header lacks for either layout (None: it has one)."""
    have = set(columns or ())
    if set(TABLE_COLUMNS) <= have or set(CURVE_COLUMNS) <= have:
        return None
    return (
        f"a measurements CSV needs the columns {', '.join(TABLE_COLUMNS)} (or a curve download's "
        f"{', '.join(CURVE_COLUMNS)}); it has {', '.join(sorted(have)) or 'none'}"
    )


def row_point(rec: Mapping[str, str]) -> tuple[dict[str, int], str, str]:
    """A row's shape, swept axis and sample count ('' when it gives none). Raises ValueError naming what is wrong.

    A row with a `shape` is a table's; otherwise a curve download's, whose column named after the axis
    holds the swept value unless there is an `x` column (then a column `n` is the sample count)."""
    if rec.get("shape"):
        return parse_shape_key(rec["shape"]), rec.get("sweep_axis") or "", rec.get("samples") or rec.get("n") or ""
    axis = rec.get("axis") or ""
    x_column = "x" if "x" in rec else axis
    if not axis:
        raise ValueError("needs `shape` and `sweep_axis`, or `axis`, `fixed` and the swept value")
    if not rec.get(x_column):
        raise ValueError(f"no column {axis!r} (or 'x') holds the swept {axis}")
    try:
        swept = int(rec[x_column])
    except ValueError:
        raise ValueError(f"the swept {axis} ({x_column!r}) must be an integer, not {rec[x_column]!r}") from None
    shape = {**parse_shape_key(rec.get("fixed") or ""), axis: swept}
    return shape, axis, rec.get("samples") or ("" if x_column == "n" else rec.get("n") or "")
