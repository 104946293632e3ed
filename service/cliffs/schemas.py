from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gac.contracts.api import CombLevel, CurveCliffs, CurvePoint, CurveSummary
from gac.contracts.api import Modulus as ModulusOut
from gac.contracts.api import Step as StepOut

__all__ = [
    "Analysis",
    "CombLevel",
    "ComparableCurve",
    "ComparedPoint",
    "Comparison",
    "CurveCliffs",
    "CurveSummary",
    "ModulusOut",
    "Rule",
    "StepOut",
]


class _Out(BaseModel):
    # Each field's docstring is its description in the OpenAPI document.
    model_config = ConfigDict(use_attribute_docstrings=True)


class Analysis(_Out):
    """A curve's cliffs without the curve: what the analyses cache keeps, as JSON."""

    steps: list[StepOut]
    """As CurveCliffs.steps."""
    frontier: list[int]
    """As CurveCliffs.frontier."""
    modulus: ModulusOut | None
    """As CurveCliffs.modulus."""
    noise_pct: float
    """As CurveCliffs.noise_pct."""
    tolerance: float
    """As CurveCliffs.tolerance."""
    notes: list[str]
    """As CurveCliffs.notes."""
    comb: list[CombLevel] = []
    """As CurveCliffs.comb."""


class Rule(_Out):
    """What a platform's data says about one (op, dtype, axis): e.g. gemm bf16 n wants multiples of 16."""

    op: str
    """The kernel family."""
    dtype: str
    """The element type."""
    axis: str
    """The swept shape field."""
    modulus: int | None
    """The modulus most of these curves agree on; null: no simple modulus explains them."""
    curves: int
    """Curves measured for this (op, dtype, axis)."""
    support: int
    """Curves whose own modulus is this one."""
    agreement: float
    """The mean agreement of the supporting curves (0 when there is no modulus)."""
    worst_step_pct: float
    """The largest step seen on these curves, in %."""
    # It can hold most of the speed where the modulus (every cliff-free dim is a multiple of it) is small.
    fastest_multiple: int | None = None
    """The multiple that holds most of the speed on most of these curves; null: most have no faster multiples."""
    fastest_pct: float | None = None
    """How much less time fastest_multiple's multiples take than the dims around them, in % (median over the curves)."""
    text: str
    """The rule in words."""


class ComparedPoint(_Out):
    """One dimension of a comparison: both platforms' median latencies there."""

    x: int
    """The swept dimension's value."""
    a_us: float | None
    """Platform a's median latency in µs; null where a did not measure it."""
    b_us: float | None
    """Platform b's median latency in µs; null where b did not measure it."""
    ratio: float | None
    """b_us / a_us; null unless both measured it."""


class Comparison(_Out):
    """The same sweep on two platforms (GET /v1/compare)."""

    a: CurveCliffs
    """Platform a's curve and its cliffs."""
    b: CurveCliffs
    """Platform b's curve and its cliffs."""
    a_points: list[CurvePoint]
    """Platform a's points."""
    b_points: list[CurvePoint]
    """Platform b's points."""
    points: list[ComparedPoint]
    """Every dimension either platform measured, ascending."""


class ComparableCurve(_Out):
    """A curve both platforms measured (GET /v1/compare/curves)."""

    op: str
    """The kernel family."""
    dtype: str
    """The element type."""
    axis: str
    """The swept shape field."""
    fixed_key: str
    """The fixed shape as canonical text, e.g. "k=128,m=2048"."""
    a_curve_id: int
    """The curve's id on platform a."""
    b_curve_id: int
    """The curve's id on platform b."""
