"""One platform's curve list (GET /v1/platforms/{id}/curves: each curve's counts) on ~1M measurements in Postgres:
each curve's rows counted apart (LATERAL, what Postgres runs) against every row grouped first (what SQLite runs),
side by side in one process, for the platform whose rows were stored first and the one stored last.

    python benchmarks/curve_list.py [--platforms 20] [--curves 50] [--points 1000] [--repeat 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory

import psycopg
from sqlalchemy import func, select
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.queries import load  # noqa: E402
from gac.service.curves.repository import summaries  # noqa: E402
from gac.service.db import make_engine, upgrade  # noqa: E402
from gac.service.models import Curve  # noqa: E402
from tests.fixtures.database import make_database  # noqa: E402


def timed(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    fn()  # warm: the first read pulls pages into the cache
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--platforms", type=int, default=20)
    ap.add_argument("--curves", type=int, default=50)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    with TemporaryDirectory() as scratch:
        db = make_database("postgres", Path(scratch))
        try:
            upgrade(db.url)
            dsn = db.url.replace("postgresql+psycopg://", "postgresql://")
            load(dsn, a.platforms, a.curves, a.points)
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("UPDATE measurements SET quality = 'busy' WHERE id % 97 = 0")  # some flagged rows, as a fleet has
                c.execute("ANALYZE")
            engine = make_engine(db.url)
            ratios = []
            with Session(engine) as s:
                first, last = s.execute(select(func.min(Curve.platform_id), func.max(Curve.platform_id))).one()
                for which, pid in (("stored first", first), ("stored last", last)):
                    lateral = partial(summaries, s, pid, None, None, None, lateral=True)
                    grouped = partial(summaries, s, pid, None, None, None, lateral=False)
                    assert lateral() == grouped(), "the two queries must read the same counts"
                    new, old = timed(lateral, a.repeat), timed(grouped, a.repeat)
                    ratio = statistics.median(new) / statistics.median(old)
                    ratios.append(ratio)
                    print(
                        f"platform {which}: lateral median {statistics.median(new):.1f} ms (worst {max(new):.1f}), "
                        f"grouped {statistics.median(old):.1f} ms (worst {max(old):.1f}): {ratio:.2f}x the time"
                    )
            engine.dispose()
            print(f"lateral / grouped: median {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x")
        finally:
            db.drop()


if __name__ == "__main__":
    main()
