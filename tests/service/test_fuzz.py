"""The whole HTTP API fuzzed from its own OpenAPI document, with every schemathesis check.

What `st run --checks all` does, through the same engine, against the real service (uvicorn) on
each backend with an admin token: examples, coverage (boundary values, missing and unexpected
parameters, undeclared methods), fuzzing (schema-valid and schema-invalid requests) and stateful
(links between operations) phases. A failure is any server error, any status, header, content
type or body the document does not declare, a schema-valid request refused, a schema-invalid one
accepted, a token not enforced, ... No check is excluded; the few failures accepted are in
filter_failure, each with its reason.

Bounded and derandomized so CI is repeatable and stays about a minute per backend on 2 cores:
4,100 cases on the first backend (about 30 s of CPU here and 20 s in the service), 1,400 on the
other (20 s and 13 s); the coverage phase is most of it, whatever the number of examples. GAC_FUZZ_EXAMPLES=100 GAC_FUZZ_RANDOM=1
explores further with a new seed each run (the CLI's default is 100 examples).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import schemathesis
from pydantic import TypeAdapter, ValidationError
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.core.parameters import ParameterLocation
from schemathesis.engine import Status, events, from_schema
from schemathesis.generation.meta import CoveragePhaseData, CoverageScenario
from schemathesis.openapi.checks import IgnoredAuth, MissingHeaderNotRejected, RejectedPositiveData, UseAfterFree

from tests import factories as f
from tests.fixtures.database import BACKENDS, SECRET, _truncate
from tests.fixtures.live_service import LiveService
from tests.fixtures.tokens import make_token

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("GAC_FUZZ_EXAMPLES", "8"))
STATEFUL_STEPS = int(os.environ.get("GAC_FUZZ_STATEFUL_STEPS", "6"))
# One worker: two were a third faster on 2 cores, but Python 3.11's ast module is not safe across
# threads (cpython gh-106905: "AST constructor recursion depth mismatch" in schemathesis, at times).
WORKERS = int(os.environ.get("GAC_FUZZ_WORKERS", "1"))


def _sent(body, field: str):  # type: ignore[no-untyped-def]
    """The value a request body held at an error's field (body.plan.sweeps.0.fixed.n); the
    names pydantic adds for the branch of a union (values.list.1) are skipped."""
    value = body
    for part in field.split(".")[1:]:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
    return value


def refused_by_a_rule(case, response) -> bool:  # type: ignore[no-untyped-def]
    """A 422 to a schema-valid request whose every complaint is something JSON Schema cannot state.

    1. Rules between fields or against stored data: p10_us <= median_us <= p90_us, a
       measurement's shape and sweep_axis fit its op, a weight's dim is not above its original
       dim, token_weights has one entry per token count, a range's stop is not below its start,
       max_samples >= min_samples, the budget is above the smallest feasible total, a platform
       named in the body exists. They are our own validators' (`value_error`) or the services'
       (untyped) refusals.
    2. A dimension written as a float: the contracts' dimensions are strict integers by design
       ("64.5, "64" and true are not dimensions", and neither is 64.0), while JSON Schema counts
       64.0 as the integer 64 and has no way to say otherwise (`int_type` on a whole float sent).

    pydantic's other typed errors (missing, too_short, greater_than, literal_error,
    string_pattern_mismatch, ...) are the limits the document states: a schema-valid request
    refused by one of those means the document and the validators disagree, which stays a failure."""
    if response.status_code != 422:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, list) or not detail:
        return False

    def explained(item) -> bool:  # type: ignore[no-untyped-def]
        if not isinstance(item, dict):
            return False
        if item.get("type") in (None, "value_error"):
            return True
        sent = _sent(case.body, str(item.get("field", "")))
        return item.get("type") == "int_type" and isinstance(sent, float) and sent.is_integer()

    return all(explained(item) for item in detail)


def _schema_at(doc: dict, node, pointer: str):  # type: ignore[no-untyped-def]
    """The part of a schema at a JSON pointer, following $refs into doc's components."""
    for part in [p.replace("~1", "/").replace("~0", "~") for p in pointer.strip("/").split("/") if p]:
        while isinstance(node, dict) and "$ref" in node:
            node = doc["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
        node = node[int(part)] if isinstance(node, list) else node.get(part) if isinstance(node, dict) else None
    return node


_LAX = {"boolean": bool, "integer": int, "number": float, "date-time": datetime}


def read_as_declared_type(doc: dict, case) -> bool:  # type: ignore[no-untyped-def]
    """A schema-invalid request whose only fault is a value of the wrong JSON type where the
    document says boolean, integer, number or date-time, which pydantic's lax mode reads as that
    type: 0 or "yes" for a boolean, true or "64" for an integer, 0 (Unix time) for a date-time.

    The contracts parse these in pydantic's lax mode, more lenient than the JSON types the
    document states (a client's convenience, never a wrong value stored; strict mode would also
    refuse what the agent's own spool files hold); the document's types are the ones to send."""
    data = case.meta.phase.data if case.meta is not None else None
    if data is None or data.parameter_location is not ParameterLocation.BODY:
        return False
    body = doc["paths"][case.operation.path][case.method.lower()]["requestBody"]["content"][case.media_type]["schema"]

    def declared(pointer: str) -> type | None:
        node = _schema_at(doc, body, pointer.removesuffix("/type"))
        if not isinstance(node, dict):
            return None
        return _LAX.get(node.get("format") if node.get("type") == "string" else node.get("type"))

    if isinstance(data, CoveragePhaseData):
        return data.scenario is CoverageScenario.INCORRECT_TYPE and declared(data.location or "") is not None
    mutations = getattr(data, "mutations", ())
    for mutation in mutations:
        kind = declared(mutation.schema_pointer) if mutation.keywords == ("type",) else None
        try:
            TypeAdapter(kind).validate_json(json.dumps(mutation.new_value))  # type: ignore[arg-type]
        except (ValidationError, TypeError):
            return False
    return bool(mutations)


@dataclass
class FuzzRun:
    cases: int = 0
    seconds: float = 0.0
    failures: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    operations: int = 0
    untested: list[str] = field(default_factory=list)
    cpu: tuple[float, float] = (0.0, 0.0)  # this process's and the service's CPU seconds
    phases: dict[str, float] = field(default_factory=dict)

    def report(self) -> str:
        phases = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.phases.items() if seconds >= 0.1)
        lines = [
            f"{len(self.failures)} failures, {len(self.errors)} errors in {self.cases} cases of {self.operations} operations;"
            f" {self.seconds:.1f}s ({phases}); CPU {self.cpu[0]:.1f}s here, {self.cpu[1]:.1f}s in the service"
        ]
        for (check, label), examples in sorted(self.failures.items()):
            lines.append(f"- {check} on {label}: {len(examples)}x, e.g. {examples[0]}")
        lines.extend(f"- error: {e}" for e in self.errors)
        return "\n".join(lines)


def _cpu_seconds(service: LiveService) -> float:
    """The service process's CPU time so far (Linux), to report the cost whatever the load."""
    try:
        fields = Path(f"/proc/{service.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()  # type: ignore[union-attr]
    except (OSError, AttributeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_reads(doc: dict, reads_open: bool) -> set[str]:
    """The operations anyone may call while GAC_REQUIRE_READ_TOKEN is off: every read of /v1 but
    the one that reports on the caller's token."""
    if not reads_open:
        return set()
    return {f"GET {path}" for path, ops in doc["paths"].items() if "get" in ops and path.startswith("/v1/")} - {"GET /v1/auth/token"}


def fuzz(service: LiveService, *, reads_open: bool, only_reads: bool = False, negative_coverage: bool = True) -> FuzzRun:
    """Every schemathesis check over every operation of the service's OpenAPI document (or, with
    only_reads, over its reads under /v1 in the fuzzing and stateful phases; without
    negative_coverage, the coverage phase sends schema-valid requests only).

    Against the real service under uvicorn, which answers on its own core while this process
    generates and checks (in process, through the ASGI transport, took more CPU than both)."""
    token = service.admin_token
    explore = os.environ.get("GAC_FUZZ_RANDOM") == "1"
    config = SchemathesisConfig.from_dict(
        {
            **({} if explore else {"seed": 20240611}),
            "headers": {"Authorization": f"Bearer {token}"},
            "workers": WORKERS,
            "generation": {"max-examples": EXAMPLES, "deterministic": not explore},
            "phases": {
                "stateful": {"max-steps": STATEFUL_STEPS},
                "coverage": {"enabled": not only_reads, "generation": {"mode": "all" if negative_coverage else "positive"}},
            },
        }
    )
    config.projects.override.checks.update(included_check_names=["all"])
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json", config=config)
    if only_reads:
        schema = schema.include(method="GET", path_regex="^/v1/")
    doc = httpx.get(f"{service.url}/openapi.json").json()
    open_ops = open_reads(doc, reads_open)
    selected = {
        f"{method.upper()} {path}"
        for path, ops in doc["paths"].items()
        for method in ops
        if not only_reads or (method == "get" and path.startswith("/v1/"))
    }

    @schema.hook
    def filter_failure(context, failure, case, response) -> bool:  # type: ignore[no-untyped-def]
        # No check is excluded; four kinds of failure are accepted, each for a stated reason.
        # 1. positive_data_acceptance: a refusal by something JSON Schema cannot state
        #    (refused_by_a_rule: rules between fields or against stored data; 64.0 as a dimension).
        if isinstance(failure, RejectedPositiveData) and refused_by_a_rule(case, response):
            return False
        # 2. negative_data_rejection: a wrong JSON type that pydantic's lax mode reads as the
        #    right one (read_as_declared_type: true as 1, "64" as 64, 0 as false or as a time).
        if isinstance(failure, AcceptedNegativeData) and read_as_declared_type(doc, case):
            return False
        # 3. ignored_auth and missing_required_header (Authorization), on the reads only, while
        #    GAC_REQUIRE_READ_TOKEN is off: the document declares the bearer scheme on reads (a
        #    token sent is still checked, and one is needed with the setting on), so these two
        #    checks flag the designed openness. With the setting on (the test below) they run on
        #    every operation, reads included, and nothing is accepted.
        if case.operation.label in open_ops and (
            isinstance(failure, IgnoredAuth)
            or (isinstance(failure, MissingHeaderNotRejected) and failure.header_name.lower() == "authorization")
        ):
            return False
        # 4. use_after_free on a job: DELETE /v1/jobs/{id} cancels the job, which stays readable
        #    (status "cancelled"): the queue keeps its history, as the README's table says.
        if isinstance(failure, UseAfterFree) and "/v1/jobs/" in failure.free and "/v1/jobs/" in failure.usage:
            return False
        return True

    run = FuzzRun()
    tested: set[str] = set()
    start, cpu, server_cpu = time.monotonic(), time.process_time(), _cpu_seconds(service)
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            run.cases += len(recorder.cases)
            tested.add(recorder.label)
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.status != Status.FAILURE or check.failure_info is None:
                        continue
                    interaction = recorder.interactions.get(case_id)
                    request = interaction.request if interaction else None
                    where = f"{request.method} {request.uri} {(request.body or b'')[:300]!r}" if request else case_id
                    response = interaction.response if interaction else None
                    answer = f"{response.status_code} {(response.content or b'')[:300]!r}" if response else "no response"
                    failure = check.failure_info.failure
                    text = f"{where} -> {answer}: {failure.title}: {failure.message[:600]!r}"
                    run.failures.setdefault((check.name, recorder.label), []).append(text)
        elif isinstance(event, events.PhaseFinished):
            run.phases[event.phase.name.value] = time.monotonic() - start - sum(run.phases.values())
        elif isinstance(event, events.NonFatalError):
            run.errors.append(f"{event.label}: {event.info.message if hasattr(event, 'info') else event.value}")
        elif isinstance(event, events.FatalError):
            run.errors.append(f"fatal: {event.exception!r}")
    run.seconds = time.monotonic() - start
    run.cpu = time.process_time() - cpu, _cpu_seconds(service) - server_cpu
    run.operations, run.untested = len(tested & selected), sorted(selected - tested)
    return run


def test_the_openapi_document_is_true(live_service, database):  # type: ignore[no-untyped-def]
    # The coverage phase's schema-invalid requests (two thirds of its 4,000) are refused by the
    # validators before any database is reached, the same code on both backends: they run on the
    # first backend only. Everything else, the schema-valid boundary values included, runs on each.
    run = fuzz(live_service, reads_open=True, negative_coverage=database.backend == BACKENDS[0])  # reads open: see filter_failure
    print(run.report())
    assert run.operations >= 27 and not run.untested  # every route is in the document, so every route is fuzzed
    assert not run.failures and not run.errors, run.report()


@pytest.fixture
def closed_reads_service(database, tmp_path):  # type: ignore[no-untyped-def]
    """The service with GAC_REQUIRE_READ_TOKEN=true."""
    from gac.service.settings import Settings

    service = LiveService(db_url=database.url, data_dir=tmp_path, extra_env={"GAC_REQUIRE_READ_TOKEN": "true"})
    service.admin_token = make_token(Settings(database_url=database.url, secret_key=SECRET, data_dir=tmp_path), "admin")
    service.start()
    yield service
    service.stop()
    _truncate(database.url)


def test_the_openapi_document_is_true_with_reads_closed(closed_reads_service):  # type: ignore[no-untyped-def]
    # The setting changes the reads only: they are fuzzed again, every check on, and nothing is
    # accepted about authentication: ignored_auth sends every read that succeeded again without a
    # token and with a wrong one, and expects 401. (Their boundary values were covered above:
    # the coverage phase, two thirds of the cost here, is left out.)
    f.refused(httpx.get(f"{closed_reads_service.url}/v1/platforms"), 401)
    run = fuzz(closed_reads_service, reads_open=False, only_reads=True)
    print(run.report())
    assert run.operations >= 17 and not run.untested
    assert not run.failures and not run.errors, run.report()
