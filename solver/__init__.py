"""The alignment solver: a plain library (no web, no DB imports).

Entry point: `align(manifest, lookup, options) -> AlignmentResult`. The service
passes a DB-backed LatencyLookup; the CLI and tests pass a FileLookup or None
(rules only).
"""

from solver.align import RULES_ONLY, AlignOptions, BudgetBelowFeasible, align, budget_params
from solver.candidates import CandidateOptions
from solver.crosscheck import CrossCheckDisagreement
from solver.frontier import cliff_free_frontier, dominated_dims
from solver.lookup import FileLookup, LatencyLookup, PointLatency
from solver.mckp import InfeasibleBudget, MckpSolution, solve_mckp

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
