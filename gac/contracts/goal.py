"""What an alignment optimizes: the objective, the latency objective's epsilon and its candidate window.

One type for each, shared by the manifest (`Manifest.objective`, `.epsilon`, `.window`), the
solver's options (`gac.solver.align.AlignOptions`), the result (`AlignmentResult.objective_kind`,
`.epsilon`, `.window`) and the command line (`gac align --objective --epsilon --window`). Each
enum is a StrEnum: it compares equal to, prints as and serializes as the word a manifest or a result spells.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final

from pydantic import Field, TypeAdapter


class Objective(StrEnum):
    """importance: the paper's (most kept importance x parameters); latency: the least predicted
    latency keeping at least 1 - epsilon of the importance objective's kept importance; frontier:
    the Pareto points of latency against kept importance."""

    IMPORTANCE = "importance"
    LATENCY = "latency"
    FRONTIER = "frontier"


class Window(StrEnum):
    """The latency objective's candidates: gac, every measured dim within +/- max(16, 5 %) of the
    compressor's, not below half of it; paper, also the multiples of 8 within +/- 64 (the paper's window)."""

    GAC = "gac"
    PAPER = "paper"


EPSILON_MIN: Final = 0
EPSILON_MAX: Final = 0.5
DEFAULT_EPSILON: Final = 0.005
# The kept importance the latency objective may give up, as a fraction of the importance-only optimum's.
Epsilon = Annotated[float, Field(ge=EPSILON_MIN, le=EPSILON_MAX, allow_inf_nan=False)]
# A library caller (gac.solver.align.AlignOptions) may also ask for more than that optimum keeps: a
# negative epsilon (the proof re-aligns a frontier point that keeps more than it).
LibraryEpsilon = Annotated[float, Field(le=EPSILON_MAX, allow_inf_nan=False)]
# The least share of predicted time the latency objective must save to give up importance: runs of one
# kernel on one GPU differ by about 2 % (docs/alignment.md), so a smaller gain is not one the measurements show.
DEFAULT_MIN_GAIN: Final = 0.02
MinGain = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]
_EPSILON: TypeAdapter[float] = TypeAdapter(Epsilon)
_LIBRARY_EPSILON: TypeAdapter[float] = TypeAdapter(LibraryEpsilon)


def valid_epsilon(value: float, below_zero: bool = False) -> float:
    """value, once it is a finite fraction within [EPSILON_MIN, EPSILON_MAX], or at most EPSILON_MAX
    when below_zero (pydantic's ValidationError, a ValueError, otherwise)."""
    return (_LIBRARY_EPSILON if below_zero else _EPSILON).validate_python(value)
