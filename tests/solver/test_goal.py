"""One type for each of the objective, epsilon and window, and one place where the options meet the manifest's fields."""

from __future__ import annotations

import pytest

from gac.contracts.goal import DEFAULT_EPSILON, Objective, Window
from gac.contracts.manifest import Manifest
from gac.solver.align import AlignOptions, resolve_goal, with_goal


def _manifest(**goal: object) -> Manifest:
    return Manifest.model_validate(
        {
            "model": "m",
            "budget": {"ratio": 0.3},
            "weights": [{"name": "w", "kind": "lowrank", "out_features": 64, "in_features": 64, "dim": 20, "importance": 1.0}],
            **goal,
        }
    )


def test_an_option_given_replaces_the_manifests_entry_and_the_rest_stay():
    manifest = _manifest(objective="importance", epsilon=0.01, window="paper")
    asked = with_goal(manifest, AlignOptions(objective=Objective.LATENCY))
    assert (asked.objective, asked.epsilon, asked.window) == (Objective.LATENCY, 0.01, Window.PAPER)
    assert with_goal(manifest, AlignOptions()) is manifest
    goal = resolve_goal(manifest, AlignOptions(objective=Objective.FRONTIER, window=Window.GAC), True, [])
    assert (goal.objective, goal.epsilon, goal.window) == (Objective.FRONTIER, 0.01, Window.GAC)


def test_the_defaults_and_no_latency_data():
    warnings: list[str] = []
    goal = resolve_goal(_manifest(), AlignOptions(), True, warnings)
    assert (goal.objective, goal.epsilon, goal.window) == (Objective.LATENCY, DEFAULT_EPSILON, Window.GAC) and not warnings
    goal = resolve_goal(_manifest(objective="frontier"), AlignOptions(), False, warnings)
    assert goal.objective is Objective.IMPORTANCE
    assert "objective 'frontier' needs latency data: solved for importance only" in warnings


def test_the_options_are_typed_and_checked():
    opts = AlignOptions(objective="latency", window="paper", epsilon=-0.01)  # words still read; a library may ask for more
    assert opts.objective is Objective.LATENCY and opts.window is Window.PAPER
    for bad in ({"objective": "fastest"}, {"window": "wide"}, {"epsilon": 0.7}, {"epsilon": float("nan")}):
        with pytest.raises(ValueError):
            AlignOptions(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        _manifest(epsilon=-0.01)  # a manifest's epsilon is a fraction given up, never below 0
    assert _manifest(objective="latency").model_dump(mode="json")["objective"] == "latency" == f"{Objective.LATENCY}"
