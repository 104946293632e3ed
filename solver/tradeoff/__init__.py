"""Speed against importance under one parameter budget: the exact two-resource knapsack.

One entry, `Tradeoff` (an instance: the importance optimum, the fastest choice keeping enough
importance, the frontier), and the types its callers hand it or read back. The method lives in
the package's modules: api (the questions, and which method answers each), problem, dual,
closing, fastest, optimum, dp, group, core and fill.
"""

from gac.solver.tradeoff.api import EXACT_SECONDS, Fastest, ImportanceOutOfReach, Tradeoff
from gac.solver.tradeoff.problem import Point, TradeoffItem, TradeoffStats

__all__ = ["EXACT_SECONDS", "Fastest", "ImportanceOutOfReach", "Point", "Tradeoff", "TradeoffItem", "TradeoffStats"]
