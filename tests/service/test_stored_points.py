"""What a platform has stored on given curves (gac.service.curves.service.stored_medians), the query a
re-run of `gac profile` uses to leave those points out; and the local database held open for a run."""

from __future__ import annotations

import uuid

from gac.contracts.measurements import Batch, RunInfo
from tests import factories as f

GEMM = ("gemm", "bfloat16", "n", "k=256,m=128")


def test_stored_medians_combine_repeats_and_know_only_this_platform(settings, app, monkeypatch):
    from gac.service.curves.service import stored_medians
    from gac.service.ingest.service import LocalDatabase
    from tests.fixtures.database import SECRET

    monkeypatch.setenv("GAC_SECRET_KEY", SECRET)  # what a command on Postgres is given

    here, other = f.platform(), f.platform(device_name="Other CPU")
    run = RunInfo(id=uuid.uuid4(), agent="t")
    rows = [f.measurement(8, median=1.0), f.measurement(8, median=3.0), f.measurement(8, median=2.0), f.measurement(16, median=5.0)]
    with LocalDatabase(settings.url) as db:
        assert db.stored_medians(here.fingerprint(), [GEMM]) == {}  # a platform never seen: nothing
        receipt = db.ingest(Batch(id=uuid.uuid4(), platform=here, run=run, measurements=rows))
        assert receipt.inserted == 4
        db.ingest(
            Batch(id=uuid.uuid4(), platform=other, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=[f.measurement(24, median=9.0)])
        )
        sdpa = ("sdpa", "bfloat16", "head_dim", "b=1,h=8,s=128")
        assert db.stored_medians(here.fingerprint(), [GEMM, sdpa]) == {GEMM: {8: 2.0, 16: 5.0}}  # the median of repeats
    with app.state.sessionmaker() as session:
        assert stored_medians(session, other.fingerprint(), [GEMM]) == {GEMM: {24: 9.0}}
        assert stored_medians(session, here.fingerprint(), []) == {}
