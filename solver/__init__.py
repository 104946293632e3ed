"""The alignment solver: a plain library (no web, no DB imports).

Entry point: `align(manifest, lookup, options) -> AlignmentResult`. The service
passes a DB-backed LatencyLookup; the CLI and tests pass a FileLookup or None
(rules only).
"""

from gac.solver.align import RULES_ONLY, AlignOptions, BudgetBelowFeasible, align, budget_params
from gac.solver.candidates import CandidateOptions
from gac.solver.crosscheck import CrossCheckDisagreement
from gac.solver.frontier import cliff_free_frontier, dominated_dims
from gac.solver.lookup import FileLookup, LatencyLookup, PointLatency
from gac.solver.mckp import InfeasibleBudget, MckpSolution, solve_mckp

__all__ = [
    "RULES_ONLY",
    "AlignOptions",
    "BudgetBelowFeasible",
    "CandidateOptions",
    "CrossCheckDisagreement",
    "PointLatency",
    "FileLookup",
    "InfeasibleBudget",
    "LatencyLookup",
    "MckpSolution",
    "align",
    "budget_params",
    "cliff_free_frontier",
    "dominated_dims",
    "solve_mckp",
]
