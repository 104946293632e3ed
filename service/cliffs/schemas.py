from __future__ import annotations

from pydantic import BaseModel

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


class Analysis(BaseModel):
    """A curve's cliffs without the curve: what the analyses cache keeps, as JSON."""

    steps: list[StepOut]
    frontier: list[int]
    modulus: ModulusOut | None
    noise_pct: float
    tolerance: float
    notes: list[str]
    comb: list[CombLevel] = []


class Rule(BaseModel):
    """What a platform's data says about one (op, dtype, axis): e.g. gemm bf16 n wants multiples of 16."""

    op: str
    dtype: str
    axis: str
    modulus: int | None  # None: no simple modulus explains these curves
    curves: int  # curves measured for this (op, dtype, axis)
    support: int  # curves whose own modulus is this one
    agreement: float  # mean agreement of the supporting curves
    worst_step_pct: float  # the largest step seen on these curves
    # The deepest multiple most of its curves run faster at, and by how much (median over those curves):
    # it can hold most of the speed where the modulus (every cliff-free dim is a multiple of it) is small.
    fastest_multiple: int | None = None
    fastest_pct: float | None = None
    text: str


class ComparedPoint(BaseModel):
    x: int
    a_us: float | None
    b_us: float | None
    ratio: float | None  # b / a


class Comparison(BaseModel):
    a: CurveCliffs
    b: CurveCliffs
    a_points: list[CurvePoint]
    b_points: list[CurvePoint]
    points: list[ComparedPoint]


class ComparableCurve(BaseModel):
    op: str
    dtype: str
    axis: str
    fixed_key: str
    a_curve_id: int
    b_curve_id: int
