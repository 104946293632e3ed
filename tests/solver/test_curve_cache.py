"""model_curve computed once per distinct (points, options): in memory per process, and through a
directory across processes (gac.solver.curve_cache), for the alignments and the cliffs view alike."""

from __future__ import annotations

import numpy as np

from gac.solver.cliffs import analyze
from gac.solver.curve_cache import CurveModels
from gac.solver.curve_model import CliffOptions, Point, model_curve


def _staircase(noise: float = 0.01, seed: int = 0) -> list[Point]:
    rng = np.random.default_rng(seed)
    return [Point(x, (10 + 2 * ((x + 15) // 16)) * (1 + noise * rng.standard_normal()), n=20) for x in range(64, 320)]


def test_the_same_points_are_modelled_once_and_others_again():
    cache, points = CurveModels(), _staircase()
    first = cache.model(points)
    assert cache.model(list(points)) is first and cache.computed == 1
    assert first == model_curve(points)  # what model_curve itself gives
    cache.model(points, CliffOptions(z=5.0))
    cache.model(_staircase(seed=1))
    assert cache.computed == 3  # other options, other points: other models


def test_another_process_reads_the_model_from_the_directory(tmp_path):
    points = _staircase()
    writer = CurveModels()
    writer.attach(tmp_path)
    made = writer.model(points)
    reader = CurveModels()  # as a process that starts with nothing in memory
    reader.attach(tmp_path)
    assert reader.model(points) == made and (reader.read, reader.computed) == (1, 0)
    for path in tmp_path.glob("*.curve.pickle"):
        path.write_bytes(b"cut short")
    again = CurveModels()
    again.attach(tmp_path)
    assert again.model(points) == made and (again.read, again.computed) == (0, 1)  # a damaged file is computed again


def test_the_cliffs_view_reads_the_model_an_alignment_made(monkeypatch):
    import gac.solver.curve_cache as curve_cache

    shared = CurveModels()
    monkeypatch.setattr(curve_cache, "CURVES", shared)
    points = _staircase()
    shared.model(points)  # what an alignment's latency model asked for
    analysis = analyze(points)
    assert shared.computed == 1 and analysis.steps == model_curve(points).steps
