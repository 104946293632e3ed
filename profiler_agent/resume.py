"""Running the same command again continues: the points already stored for this platform are left
out of the plan before anything is timed.

What is stored is given per curve, as the service keys them (op, dtype, swept axis, fixed
shape), with each stored point's median: the local database answers for `gac profile`
(gac.service.curves.service.stored_medians), the service and the local spool for
`gac agent run --server` (known_on_server, known_in_spool).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

import httpx

from gac.agent.delivery.codec import read_document
from gac.agent.delivery.files import read_batch_file
from gac.agent.delivery.spool import Spool, norm_server
from gac.contracts.measurements import Dtype, Measurement, shape_key
from gac.contracts.plans import Sweep, SweepPlan

CurveKey = tuple[str, str, str, str]  # op, dtype, swept axis, fixed shape ("k=128,m=2048")
Known = dict[CurveKey, dict[int, float]]  # per curve, the stored medians (us) by swept dimension


def sweep_curve(sweep: Sweep, dtype: Dtype) -> CurveKey:
    return (sweep.op.value, dtype.value, sweep.axis, shape_key(sweep.fixed))


def on_plan(known: Known, plan: SweepPlan) -> Known:
    """The stored points a plan covers: on its curves, at its values (a curve may hold other plans' points too)."""
    out: Known = {}
    for sweep in plan.sweeps:
        values = set(sweep.value_list())
        for dtype in sweep.dtypes:
            key = sweep_curve(sweep, dtype)
            if have := {x: m for x, m in known.get(key, {}).items() if x in values}:
                out[key] = out.get(key, {}) | have
    return out


def plan_curves(plan: SweepPlan) -> list[CurveKey]:
    """The curves a plan's points lie on, each once."""
    return list(dict.fromkeys(sweep_curve(s, d) for s in plan.sweeps for d in s.dtypes))


def add_rows(known: Known, rows: Iterable[Measurement]) -> None:
    """Each row's point, but a flagged one's (gac.agent.quality): as in the service, it does not count as stored."""
    for m in rows:
        if not m.quality:
            _add_point(known, m.op.value, m.dtype.value, m.sweep_axis, m.shape, m.median_us)


def _add_point(known: Known, op: str, dtype: str, axis: str, shape: dict[str, int], median_us: float) -> None:
    fixed = {k: v for k, v in shape.items() if k != axis}
    known.setdefault((op, dtype, axis, shape_key(fixed)), {})[shape[axis]] = median_us


@dataclass(frozen=True)
class Remaining:
    plan: SweepPlan | None  # what is left to time; None when every point is stored
    skipped: int  # points of the plan already stored, left out
    # The stored medians of the adaptive sweeps left whole in `plan` (their coarse grids partly stored):
    # the runner times the rest of each grid and refines from all of it (PlanRunner's `stored`).
    known: Known = field(default_factory=dict)

    def skip_line(self, stored: str = "already stored for this platform") -> str | None:
        """'skipping 27 points already stored for this platform', or None when there are none."""
        if not self.skipped:
            return None
        return f"skipping {self.skipped} point{'s' if self.skipped != 1 else ''} {stored}"


def remaining(plan: SweepPlan, known: Known, adaptive: bool) -> Remaining:
    """The plan without its stored points. A sweep with none stored is kept as it is; otherwise each of its
    dtypes becomes a sweep over the values still to time, or, where an adaptive sweep's coarse grid is
    partly stored, stays adaptive with its stored medians in Remaining.known."""
    sweeps: list[Sweep] = []
    skipped = 0
    carried: Known = {}
    for sweep in plan.sweeps:
        if not any(known.get(sweep_curve(sweep, d)) for d in sweep.dtypes):
            sweeps.append(sweep)
            continue
        for dtype in sweep.dtypes:
            have = known.get(sweep_curve(sweep, dtype), {})
            left, skip, whole = _left_of(sweep, dtype, have, adaptive)
            skipped += skip
            if whole:
                carried[sweep_curve(sweep, dtype)] = have
            if left is not None:
                sweeps.append(left)
    return Remaining(plan.model_copy(update={"sweeps": sweeps}) if sweeps else None, skipped, carried)


def _left_of(sweep: Sweep, dtype: Dtype, have: dict[int, float], adaptive: bool) -> tuple[Sweep | None, int, bool]:
    """(the sweep left to time in this dtype or None, points skipped, whether it stays adaptive with `have` carried)."""
    from gac.agent.runner import values_to_refine

    one = sweep.model_copy(update={"dtypes": [dtype]})
    full = sweep.value_list()
    stored = sum(v in have for v in full)
    if not stored:
        return one, 0, False
    values = full
    if adaptive and sweep.adaptive is not None:
        coarse = sweep.coarse_values()
        if not all(v in have for v in coarse):
            # Where to refine depends on coarse medians not measured yet: the runner times the rest
            # of the grid and refines from the whole of it, the stored medians handed to it.
            return one, stored, True
        # The whole coarse grid is stored: refine from its stored medians, as the runner would have.
        values = sorted(set(coarse) | set(values_to_refine(full, coarse, have, sweep.adaptive.jump)))
    todo = [v for v in values if v not in have]
    left = one.model_copy(update={"values": todo, "adaptive": None}) if todo else None
    return left, stored, False


def planned_points(plan: SweepPlan, adaptive: bool, known: Mapping[CurveKey, Mapping[int, float]] | None = None) -> int:
    """Points the runner sets out to time (an adaptive sweep's coarse grid, less its `known` points; its
    refinement adds more)."""
    known = known or {}

    def todo(s: Sweep, d: Dtype) -> int:
        if not (adaptive and s.adaptive):
            return len(s.value_list())
        have = known.get(sweep_curve(s, d), {})
        return sum(v not in have for v in s.coarse_values())

    return sum(todo(s, d) for s in plan.sweeps for d in s.dtypes)


def known_in_spool(spool: Spool, server: str, fingerprint: str, run: UUID | None = None) -> Known:
    """The points this machine measured for `server` that wait in the spool (not sent yet); of one run only, if given."""
    known: Known = {}
    for rec in spool.records():
        if norm_server(rec.get("server", "")) != norm_server(server):
            continue
        try:
            batch = read_document(rec["batch"])
        except (KeyError, ValueError):
            continue  # a record `gac agent flush` will report
        if batch.platform.fingerprint() == fingerprint and (run is None or batch.run.id == run):
            add_rows(known, batch.measurements)
    return known


def known_in_file(path: Path, fingerprint: str) -> Known:
    """The points a results file (`--out`) holds for this platform; unreadable lines are `gac ingest`'s to report."""
    known: Known = {}
    if not path.is_file():
        return known
    for _, batch, _ in read_batch_file(path):
        if batch is not None and batch.platform.fingerprint() == fingerprint:
            add_rows(known, batch.measurements)
    return known


def known_in_run(client: httpx.Client, server: str, token: str, run: UUID) -> Known | None:
    """The points the service stores in one run (GET /v1/measurements?run=, every page); None when it cannot be asked."""
    base, headers = norm_server(server), {"Authorization": f"Bearer {token}"}
    known: Known = {}
    params: dict[str, str | int] = {"run": str(run), "limit": 5000}
    try:
        while True:
            page = client.get(f"{base}/v1/measurements", params=params, headers=headers)
            page.raise_for_status()
            body = page.json()
            for r in body["items"]:
                if not r.get("quality"):  # as in add_rows: a flagged point is timed again
                    _add_point(known, r["op"], r["dtype"], r["sweep_axis"], r["shape"], r["median_us"])
            if not body.get("next_cursor"):
                return known
            params["cursor"] = body["next_cursor"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def known_on_server(client: httpx.Client, server: str, token: str, fingerprint: str, curves: Iterable[CurveKey]) -> Known | None:
    """The stored medians of these curves on the service (GET /v1/platforms/{fp}/curves, then /v1/curves/{id}
    for each curve of the plan it has); None when the service cannot be asked."""
    base, headers = norm_server(server), {"Authorization": f"Bearer {token}"}
    wanted = set(curves)
    try:
        listed = client.get(f"{base}/v1/platforms/{fingerprint}/curves", headers=headers)
        if listed.status_code == 404:
            return {}  # the service has never seen this platform
        listed.raise_for_status()
        known: Known = {}
        for c in listed.json():
            key = (c["op"], c["dtype"], c["axis"], c["fixed_key"])
            if key in wanted and c.get("points"):
                curve = client.get(f"{base}/v1/curves/{c['id']}", headers=headers)
                curve.raise_for_status()
                known[key] = {p["x"]: p["median_us"] for p in curve.json()["points"]}
        return known
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def merge(*parts: Known) -> Known:
    out: Known = {}
    for part in parts:
        for key, points in part.items():
            out.setdefault(key, {}).update(points)
    return out


__all__ = [
    "CurveKey",
    "Known",
    "Remaining",
    "add_rows",
    "known_in_file",
    "known_in_run",
    "known_in_spool",
    "known_on_server",
    "merge",
    "plan_curves",
    "planned_points",
    "remaining",
    "sweep_curve",
]
