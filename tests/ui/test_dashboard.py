"""The dashboard in a real browser (Debian's headless Chromium driven by Playwright) against
the real service with real data in it."""

from __future__ import annotations

import math
import os
import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from gac.contracts.measurements import Batch, RunInfo
from tests import factories as f

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = Path(__file__).parent / "screenshots"


VIEWPORT = {"width": 1280, "height": 800}  # a laptop's screen: the size the pages are read at


def staircase(plat, period: int, last: int = 96, fall_after: int | None = None, dtype: str = "bfloat16") -> Batch:  # type: ignore[no-untyped-def]
    """A step every `period` dims up to `last`; past `fall_after` every point 30 % faster (a fall)."""
    rows = []
    for x in range(1, last + 1):
        med = 20.0 * (1 + 0.25 * math.ceil(x / period)) * (0.7 if fall_after is not None and x > fall_after else 1.0)
        rows.append(f.measurement(x, median=med, p10_us=med * 0.98, p90_us=med * 1.02, dtype=dtype))
    return Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent=f"agent-{period}"), measurements=rows)


def ingest(svc, batch: Batch) -> None:  # type: ignore[no-untyped-def]
    r = httpx.post(f"{svc.url}/v1/batches", json=f.body(batch), headers=f.auth(svc.ingest_token))
    assert r.status_code == 201, r.text


# The boxes of the texts a chart draws (Plotly's annotations: the step labels, notes), in page pixels.
TEXT_BOXES = """(selector) => [...document.querySelectorAll(selector)].map((n) => {
    const r = n.getBoundingClientRect();
    return {text: n.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
})"""


def overlapping(boxes: list[dict]) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap (touching edges do not count)."""
    return [
        (a["text"], b["text"])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]
    ]


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    if CHROMIUM is None:
        if os.environ.get("GAC_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed and GAC_REQUIRE_BROWSER=1")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield b
        b.close()


def test_dashboard_shows_cliffs_compares_and_alignments(live_service, browser, database):
    # B's name is user data with markup in it: it must show as typed, never as HTML (in Plotly's legend too).
    a, b = f.platform(device_name="Sixteen-step CPU"), f.platform(device_name="Eight-step <b>CPU</b>")
    headers = f.auth(live_service.ingest_token)
    for plat, period in ((a, 16), (b, 8)):
        r = httpx.post(f"{live_service.url}/v1/batches", json=f.body(staircase(plat, period)), headers=headers)
        assert r.status_code == 201
    manifest = {
        "schema": "gac.manifest/v1",
        "model": "browser-test-model",
        "budget": {"params": 300 * 384},
        "target": {"platform": a.fingerprint()},
        "workload": {"tokens": [128], "dtype": "bfloat16"},
        "weights": [{"name": "w0", "kind": "linear_out", "out_features": 96, "in_features": 256, "dim": 71.4, "importance": 1.0}],
    }
    manifest["budget"] = {"params": 80 * 256}
    r = httpx.post(f"{live_service.url}/v1/align", json=manifest, headers=f.auth(live_service.read_token), timeout=120)
    assert r.status_code == 201

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    SCREENSHOTS.mkdir(exist_ok=True)

    # Platform list -> one platform: its curve chart, the cliff markers and the learned rule.
    # Platforms are named by device, the dtype they were profiled in, threads and a short fingerprint.
    page.goto(f"{live_service.url}/ui")
    page.wait_for_selector("a.platform-link")
    assert page.locator("a.platform-link").count() == 2
    assert page.locator("a.platform-link").all_text_contents() == [
        f"Eight-step <b>CPU</b> · bfloat16 · {b.fingerprint()[:8]}",
        f"Sixteen-step CPU · bfloat16 · {a.fingerprint()[:8]}",
    ]
    page.get_by_text("Sixteen-step CPU").click()
    page.wait_for_selector(".curve-card .main-svg")
    chart = page.locator(".curve-card .chart").first
    assert chart.get_attribute("data-steps") == "5"
    assert page.locator(".curve-card .shapelayer path").count() >= 5  # one dotted line per step
    assert page.locator(".curve-card ul.cliffs li").count() == 5
    assert "16→17: +" in page.locator(".curve-card ul.cliffs").inner_text()
    assert chart.get_attribute("data-labels") == "5"  # five steps far apart: every one labelled
    assert not overlapping(page.evaluate(TEXT_BOXES, ".curve-card .annotation-text"))
    assert "multiples of 16" in page.locator("table").nth(0).inner_text() or "% 16" in page.content()
    # Hovering the plot shows a point's figures.
    point = page.locator(".curve-card").first.locator(".scatterlayer .trace").first.locator(".points path").nth(20)
    point.scroll_into_view_if_needed()  # the mouse hovers what is on screen; the chart may start below it
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector(".hoverlayer .hovertext", timeout=5000)
    assert "median" in page.locator(".hoverlayer .hovertext").first.text_content()
    page.screenshot(path=str(SCREENSHOTS / f"platform-{database.backend}.png"), full_page=True)

    # Compare the two platforms on their common sweep.
    page.goto(f"{live_service.url}/ui#/")
    page.wait_for_selector("a.platform-link")
    for box in page.locator("tbody input[type=checkbox]").all():
        box.check()
    page.locator("#compare-btn").click()
    page.wait_for_selector("#compare-chart .main-svg")
    assert int(page.locator("#compare-chart").get_attribute("data-steps")) == 5 + 11
    assert page.locator("#compare-chart .scatterlayer .trace").count() == 3  # A, B and their ratio
    legend = page.locator("#compare-chart .legendtext").all_text_contents()
    assert any("Eight-step <b>CPU</b>" in t for t in legend), legend
    assert page.locator("#compare-chart .legendtext tspan[style*='bold']").count() == 0
    page.screenshot(path=str(SCREENSHOTS / f"compare-{database.backend}.png"), full_page=True)

    # The stored alignment, then its weights.
    page.goto(f"{live_service.url}/ui#/alignments")
    page.wait_for_selector("a.platform-name")
    assert page.locator("a.platform-name").all_text_contents() == [f"Sixteen-step CPU · bfloat16 · {a.fingerprint()[:8]}"]
    # What the predictions are for: the alignment's dtype and token counts, beside the platform's name.
    assert "bfloat16 · 128 tokens" in page.locator("table tbody tr").first.inner_text()
    page.get_by_text("browser-test-model").click()
    page.wait_for_selector("text=Weights")
    assert "w0" in page.locator("table").inner_text()
    assert page.locator("#workload").inner_text() == "bfloat16 at 128 tokens"
    page.screenshot(path=str(SCREENSHOTS / f"alignment-{database.backend}.png"), full_page=True)

    # The API docs page works offline too: Swagger UI renders from local assets.
    page.goto(f"{live_service.url}/docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=15000)
    assert page.locator(".swagger-ui .opblock").count() > 10

    assert problems == []
    # A bad id reads as a sentence naming the field, not as an error body (the browser logs the 422 itself).
    page.goto(f"{live_service.url}/ui#/alignments/not-an-id")
    said = page.locator(".error").inner_text()
    assert said.startswith("Could not load: alignment_id: ") and "{" not in said, said


def test_a_dense_curve_labels_its_largest_steps_and_shows_the_rest_on_hover(live_service, browser, database):
    # A step every 3 dims over 192 dims (63 steps), and a fall past 120: one label per step would
    # pile up into a smear at this width.
    plat = f.platform(device_name="Dense CPU", threads=2)
    r = httpx.post(
        f"{live_service.url}/v1/batches",
        json=f.body(staircase(plat, 3, last=192, fall_after=120)),
        headers=f.auth(live_service.ingest_token),
    )
    assert r.status_code == 201
    fp = plat.fingerprint()
    (cliffs,) = httpx.get(f"{live_service.url}/v1/platforms/{fp}/cliffs").json()
    steps = cliffs["steps"]
    assert len(steps) > 30

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{live_service.url}/ui#/p/{fp}")
    page.wait_for_selector(".curve-card .main-svg")
    assert page.locator("h1").inner_text() == f"Dense CPU · bfloat16 · 2 threads · {fp[:8]}"
    chart = page.locator(".curve-card .chart").first
    assert chart.get_attribute("data-steps") == str(len(steps))
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"platform-dense-{database.backend}.png"), full_page=True)

    # A few labels, the largest steps among them, none overlapping another.
    labels = page.evaluate(TEXT_BOXES, ".curve-card .annotation-text")
    assert 2 <= len(labels) <= 6 and chart.get_attribute("data-labels") == str(len(labels))
    assert not overlapping(labels), overlapping(labels)
    largest = max(steps, key=lambda s: abs(s["size_pct"]))
    assert largest["size_pct"] < 0  # the fall
    assert f"-{abs(largest['size_pct']):.0f} %" in [b["text"] for b in labels]

    # Signed percentages: a fall reads "-28.4 %", never "+-28.4 %".
    listed = page.locator(".curve-card ul.cliffs").first.inner_text()  # the largest steps; all of them fold away
    assert page.locator(".curve-card ul.cliffs").first.locator("li").count() == 12
    assert f"{largest['x_before']}→{largest['x']}: -{abs(largest['size_pct']):.1f} %" in listed
    assert "+-" not in page.locator("main").inner_text()

    # Every step has a marker on its line; an unlabelled one shows its size on hover.
    labelled_at = page.evaluate("() => document.querySelector('.curve-card .chart').layout.annotations.map((a) => a.x)")
    unlabelled = [i for i, s in enumerate(steps) if s["x"] - 0.5 not in labelled_at]
    markers = page.locator(".curve-card .scatterlayer .trace").last.locator(".points path")
    assert markers.count() == len(steps)
    i = unlabelled[len(unlabelled) // 2]
    markers.nth(i).scroll_into_view_if_needed()  # the mouse hovers what is on screen
    box = markers.nth(i).bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector(".curve-card .hoverlayer .hovertext", timeout=5000)
    hover = page.locator(".curve-card .hoverlayer .hovertext").first.text_content()
    s = steps[i]
    assert f"step {s['x_before']}→{s['x']}: {'+' if s['size_pct'] >= 0 else '-'}{abs(s['size_pct']):.1f} %" in hover, hover
    # Its size is between the curve model's levels, which the hover names (a point's hover shows its raw median).
    assert f"denoised {s['before_us']:.1f} µs → {s['after_us']:.1f} µs" in hover, hover
    first = page.locator(".curve-card ul.cliffs li").first.get_attribute("title")
    assert "denoised" in first and "not the raw medians" in first, first
    assert problems == []


def test_a_platform_page_shows_its_profile_quality_without_hovering(live_service, browser, database):
    """Flagged points (by reason), the timing threads and the load while profiling, in plain text on the page."""
    plat = f.platform(
        device_name="Busy CPU", cores=8, threads=4, native_dtypes=[], fast_dtype="float32", dtype_speed={"float32": 1, "bfloat16": 41.5}
    )
    rows = []
    for x in range(1, 41):
        busy = 3.5 if x in (20, 30) else 0.25
        quality = {20: "bimodal,busy", 30: "busy", 35: "isolated"}.get(x)
        med = 500.0 if quality else 20.0 * (1 + 0.25 * math.ceil(x / 16))
        rows.append(f.measurement(x, median=med, p10_us=med * 0.98, p90_us=med * 1.02, quality=quality, busy_cores=busy))
    batch = Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="busy-box"), measurements=rows)
    headers = f.auth(live_service.ingest_token)
    assert httpx.post(f"{live_service.url}/v1/batches", json=f.columns_body(batch), headers={**headers, **f.COLUMNS}).status_code == 201
    clean = f.platform(device_name="Quiet GPU", device_kind="cuda", compute_capability="9.0")
    assert httpx.post(f"{live_service.url}/v1/batches", json=f.body(staircase(clean, 16, last=32)), headers=headers).status_code == 201

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{live_service.url}/ui#/p/{plat.fingerprint()}")
    page.wait_for_selector("#profile-quality")
    assert page.locator("#profile-quality").get_attribute("data-flagged") == "3"
    # What its agent measured about dtypes, as text (bfloat16 emulated: 41.5x float32's time).
    facts = (page.locator("#fact-native_dtypes").inner_text(), page.locator("#fact-dtype_speed").inner_text())
    assert facts == ("none", "float32 1.00x · bfloat16 41.50x"), facts
    summary = page.locator("#quality-summary").inner_text()
    assert summary == (
        "40 points stored · 3 flagged · 4 timing threads on 8 cores · "
        "load while profiling: median 0.41 cores, max 3.50 cores busy with other work"
    ), summary
    flags = page.locator("#quality-flags")
    assert flags.is_visible()  # no hover, no click: the notice is on the page
    assert "3 of 40 stored points flagged" in flags.inner_text()
    assert [li.inner_text() for li in flags.locator("li").all()] == [
        "busy: 2 — other work took the cores",
        "bimodal: 1 — samples in two modes (stalls)",
        "isolated: 1 — far off both neighbours with a huge spread",
    ]
    run_row = page.locator(".quality-runs tbody tr")
    assert not run_row.first.is_visible()  # folded under the summary's figures
    page.locator(".quality-runs summary").click()
    assert run_row.count() == 1 and run_row.first.is_visible()
    cells = run_row.first.locator("td").all_inner_texts()
    assert cells[1:] == ["busy-box", "adhoc", "40", "3", "0.41 cores", "3.50 cores"], cells
    page.wait_for_selector(".curve-card .main-svg")
    assert page.locator(".curve-card .flagged-count").inner_text() == "3 flagged, not plotted"  # and on its curve
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"platform-quality-{database.backend}.png"), full_page=True)

    # A platform with nothing flagged and no load readings (a GPU's points) says so, with no notice.
    page.goto(f"{live_service.url}/ui#/p/{clean.fingerprint()}")
    page.wait_for_selector("#profile-quality")
    assert page.locator("#quality-flags").count() == 0 and page.locator(".flagged-count").count() == 0
    assert page.locator("#quality-summary").inner_text() == (
        "32 points stored · none flagged · timed on the device (no CPU timing threads) · "
        "load while profiling not recorded (no point came with a reading)"
    )
    assert problems == []


# ---------- an alignment's speed/importance frontier ----------

IN = 256  # linear_out weights: params = in_features * d, so importance kept is sum(s * IN * d)
DIMS = (71.4, 45.2, 30.7, 60.3, 85.5)  # the compressor's (unaligned) dims; importances 1, 2, 3, ...


def out_weights(dims, out_features: int = 96, first: int = 0) -> list[dict]:  # type: ignore[no-untyped-def]
    return [
        {
            "name": f"layers.{first + i}.out",
            "kind": "linear_out",
            "out_features": out_features,
            "in_features": IN,
            "dim": d,
            "importance": 1.0 + i,
        }
        for i, d in enumerate(dims)
    ]


def align_doc(model: str, weights: list[dict], target: str | None, **extra) -> dict:  # type: ignore[no-untyped-def]
    doc = {
        "schema": "gac.manifest/v1",
        "model": model,
        "budget": {"params": int(sum(w["dim"] for w in weights)) * IN},
        "workload": {"tokens": [128], "dtype": "bfloat16"},
        "weights": weights,
        **extra,
    }
    if target:
        doc["target"] = {"platform": target}
    return doc


def kept(weights: list[dict], dims) -> float:  # type: ignore[no-untyped-def]
    """Importance kept at these dims, in the manifest's units: sum over weights of s * params(d)."""
    return math.fsum(w["importance"] * w["in_features"] * d for w, d in zip(weights, dims))


def test_alignment_page_plots_the_speed_importance_frontier(live_service, browser, database):
    plat = f.platform(device_name="Frontier CPU")
    r = httpx.post(f"{live_service.url}/v1/batches", json=f.body(staircase(plat, 16)), headers=f.auth(live_service.ingest_token))
    assert r.status_code == 201
    fp = plat.fingerprint()
    weights = out_weights(DIMS)
    post = lambda doc: httpx.post(f"{live_service.url}/v1/align", json=doc, headers=f.auth(live_service.read_token), timeout=120)  # noqa: E731

    # The model name is user data with markup: the page must show it as typed.
    model = 'frontier <b>model</b> & "co"'
    r = post(align_doc(model, weights, fp, objective="frontier", epsilon=0.05))
    assert r.status_code == 201, r.text
    stored = r.json()
    res, lat = stored["result"], stored["result"]["latency"]
    assert res["frontier"] and lat["complete"] and res["objective_kind"] == "frontier"
    # Another weight wider than the platform measured (n <= 96): the prediction lacks points.
    wider = out_weights([100.4], out_features=128, first=len(weights))
    r = httpx.post(  # and a profiling job queued for what it lacks
        f"{live_service.url}/v1/align",
        params={"enqueue_missing": "true"},
        json=align_doc("incomplete-model", [*weights, *wider], fp, objective="frontier"),
        headers=f.auth(live_service.ingest_token),
        timeout=120,
    )
    assert r.status_code == 201, r.text
    incomplete = r.json()
    assert incomplete["jobs"], incomplete
    assert not incomplete["result"]["latency"]["complete"] and incomplete["result"]["frontier"]
    r = post(align_doc("importance-model", weights, fp, objective="importance"))
    assert r.status_code == 201, r.text
    importance = r.json()
    assert importance["result"]["frontier"] == [] and importance["result"]["latency"]["complete"]
    r = post(align_doc("rules-model", weights, None))
    assert r.status_code == 201, r.text
    rules = r.json()
    assert rules["result"]["platform"] == "rules only" and rules["result"]["frontier"] == []

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    SCREENSHOTS.mkdir(exist_ok=True)

    page.goto(f"{live_service.url}/ui#/alignments/{stored['id']}")
    page.wait_for_selector("#frontier-chart .main-svg")
    assert page.locator("h1").inner_text() == model
    assert page.locator("h1 b").count() == 0
    assert page.locator("a.platform-name").inner_text() == f"Frontier CPU · bfloat16 · {fp[:8]}"
    # The frontier objective says what it reports (every trade-off point) and which one it chose.
    objective = page.locator("#objective").inner_text()
    n = len(res["frontier"])
    said = f"frontier: every trade-off point of predicted latency against importance kept ({n} points); chose the fastest keeping ≥ "
    assert objective.startswith(said), objective
    # Each weight's latency at the compressor's dim beside the chosen one's: why the dim moved.
    heads = [t.strip() for t in page.locator("th").all_text_contents()]
    assert heads.index("latency before") + 1 == heads.index("latency after"), heads
    first = stored["result"]["weights"][0]
    row = page.locator("tr", has_text=first["name"]).first.inner_text()
    assert f"{first['latency_before_us']:.1f} µs" in row and f"{first['latency_us']:.1f} µs" in row, row

    # The y axis says what 100 % is and why a point can pass it, and its title is not clipped:
    # it lies inside the chart, clear of the tick labels.
    ytitle = page.locator("#frontier-chart .g-ytitle text")
    assert "above 100 %" in ytitle.text_content()
    title, frame = ytitle.bounding_box(), page.locator("#frontier-chart").bounding_box()
    assert frame["x"] <= title["x"] and title["x"] + title["width"] <= frame["x"] + frame["width"]
    assert frame["y"] <= title["y"] and title["y"] + title["height"] <= frame["y"] + frame["height"]
    ticks = page.evaluate(TEXT_BOXES, "#frontier-chart .ytick text")
    assert ticks and all(title["x"] + title["width"] <= t["left"] for t in ticks), (title, ticks)
    assert "more than 100 %" in page.locator("#frontier-axis-note").inner_text()
    texts = "#frontier-chart .annotation-text, #frontier-chart .g-xtitle text, #frontier-chart .legendtext"
    assert not overlapping(page.evaluate(TEXT_BOXES, texts))

    # The one-line summary, from the stored figures.
    summary = page.locator("#frontier-summary").inner_text()
    assert summary == (
        f"predicted unaligned {lat['unaligned_us']:.1f} µs → GAC {lat['aligned_us']:.1f} µs ({lat['speedup']:.2f}×), "
        f"keeping {100 * lat['importance_kept']:.1f} % of the importance-only optimum's importance"
    )

    traces = page.evaluate(
        "() => document.getElementById('frontier-chart').data"
        ".map((t) => ({name: t.name, mode: t.mode, x: Array.from(t.x), y: Array.from(t.y)}))"
    )
    by_name = {t["name"]: t for t in traces}
    assert set(by_name) == {
        "frontier",
        "GAC (chosen)",
        "importance-only optimum",
        "round to 8 (nearest)",
        "unaligned (compressor&#39;s dims)",
    }
    front = sorted(res["frontier"], key=lambda p: (p["latency_us"], p["importance_kept"]))
    assert by_name["frontier"]["mode"] == "lines+markers"
    assert by_name["frontier"]["x"] == [p["latency_us"] for p in front]
    assert by_name["frontier"]["y"] == pytest.approx([100 * p["importance_kept"] for p in front])

    def point(name: str) -> tuple[float, float]:
        t = by_name[name]
        assert len(t["x"]) == len(t["y"]) == 1, t
        return t["x"][0], t["y"][0]

    chosen = next(p for p in res["frontier"] if p["chosen"])
    assert point("GAC (chosen)") == (chosen["latency_us"], pytest.approx(100 * chosen["importance_kept"]))
    assert point("importance-only optimum") == (lat["importance_only_us"], 100)
    # The baselines' absolute objectives on the solver's relative scale, recomputed here from the
    # manifest: kept(dims) / kept(importance-only dims), the latter = kept(chosen dims) / importance_kept.
    reference = kept(weights, [w["dim"] for w in res["weights"]]) / lat["importance_kept"]
    nearest = next(b for b in res["baselines"] if b["method"] == "nearest-8")
    nearest_dims = [8 * math.floor(d / 8 + 0.5) for d in DIMS]
    assert nearest["total_params"] == IN * sum(nearest_dims)
    assert point("round to 8 (nearest)") == (nearest["latency_us"], pytest.approx(100 * kept(weights, nearest_dims) / reference, rel=1e-4))
    unaligned_share = pytest.approx(100 * kept(weights, DIMS) / reference, rel=1e-4)
    assert point("unaligned (compressor&#39;s dims)") == (lat["unaligned_us"], unaligned_share)
    assert page.locator("#frontier-chart .legendtext").all_text_contents() == [
        "frontier",
        "importance-only optimum",
        "round to 8 (nearest)",
        "unaligned (compressor's dims)",
        "GAC (chosen)",
    ]

    # Hovering the chosen point shows its figures.
    star = page.locator("#frontier-chart .scatterlayer .trace").last.locator(".points path").first
    box = star.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#frontier-chart .hoverlayer .hovertext", timeout=5000)
    hover = page.locator("#frontier-chart .hoverlayer .hovertext").first.text_content()
    assert "µs" in hover and "params" in hover and "vs unaligned" in hover, hover
    page.screenshot(path=str(SCREENSHOTS / f"alignment-frontier-{database.backend}.png"), full_page=True)

    # A result that does not carry the importances (an older one) cannot place the unaligned point:
    # the page draws its latency as a vertical line instead of inventing a y value.
    older = page.evaluate(
        """(res) => {
            const r = {...res, baselines: [], weights: res.weights.map((w) => ({...w, importance: 0}))};
            const div = document.createElement("div");
            document.body.append(div);
            return plotFrontier(div, r).then(() => {
                const out = {names: div.data.map((t) => t.name), shapes: div.layout.shapes.map((s) => [s.x0, s.x1, s.yref]),
                             notes: div.layout.annotations.map((a) => a.text)};
                Plotly.purge(div);
                div.remove();
                return out;
            });
        }""",
        res,
    )
    assert older["names"] == ["frontier", "importance-only optimum", "GAC (chosen)"]
    assert [lat["unaligned_us"], lat["unaligned_us"], "paper"] in older["shapes"]
    assert "unaligned" in older["notes"]

    # Incomplete latency: what is missing, and no chart with gaps.
    page.goto(f"{live_service.url}/ui#/alignments/{incomplete['id']}")
    page.wait_for_selector("h1:text-is('incomplete-model')")
    missing = page.locator("#frontier-missing").inner_text()
    points = incomplete["result"]["latency"]["missing_points"]
    assert f"{points} curve points missing" in missing and "layers.5.out" in missing, missing
    # Each missing curve lists its dims, runs of consecutive dims shown as ranges ("100–104, 106").
    for need in incomplete["result"]["missing"]:
        dims = sorted(need["dims"])
        runs = [[dims[0]]]
        for d in dims[1:]:
            runs[-1].append(d) if d == runs[-1][-1] + 1 else runs.append([d])
        shown = ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
        assert f"{len(dims)} dims ({shown})" in missing, (shown, missing)
    assert page.locator(".main-svg").count() == 0 and page.locator("#frontier-chart").count() == 0
    assert "--enqueue-missing" in missing and "--profile-missing" in missing  # how to measure them
    # At a real model's size: counts with thousands separators, a few weight names and the rest folded,
    # and the dims past the first 40 ranges counted as ranges (a "run" is a profiling run).
    big = page.evaluate(
        """(stored) => {
            const r = stored.result, need = r.missing[0];
            const dims = Array.from({length: 1100}, (_, i) => 2 * i + 1);  // 1,100 ranges of one dim
            const items = Array.from({length: 200}, (_, i) => `model.layers.${i}.mlp.down_proj`);
            const big = {...stored, result: {...r, latency: {...r.latency, missing_points: 2778}, missing: [{...need, dims, items}]}};
            const node = missingNotice(big);
            document.body.append(node);
            const out = {text: node.innerText, shown: node.querySelector("details").open};
            node.remove();
            return out;
        }""",
        incomplete,
    )
    assert "2,778 curve points missing" in big["text"] and "1,100 dims" in big["text"], big
    assert "… 1,060 more ranges" in big["text"] and "runs" not in big["text"], big
    assert "for 200 weights: model.layers.0.mlp.down_proj, model.layers.1.mlp.down_proj, model.layers.2.mlp.down_proj" in big["text"]
    assert "model.layers.3.mlp" not in big["text"] and "197 more" in big["text"] and not big["shown"], big
    page.screenshot(path=str(SCREENSHOTS / f"alignment-incomplete-{database.backend}.png"), full_page=True)
    # Its job, a click away: the queue says its state, its points and which platform's agents take it.
    (job,) = incomplete["jobs"]
    page.locator("#frontier-missing a", has_text=f"#{job}").click()
    page.wait_for_selector(f"#job-{job}")
    cells = page.locator(f"#job-{job} td").all_inner_texts()
    points = httpx.get(f"{live_service.url}/v1/jobs/{job}").json()["points"]
    assert cells[:3] == [f"#{job}", "queued", f"– / {points:,}"] and cells[4] == f"{fp[:12]} (Frontier CPU)" and cells[5] == "0 / 3", cells

    # No frontier stored (the importance objective): the summary, a note, no chart.
    page.goto(f"{live_service.url}/ui#/alignments/{importance['id']}")
    page.wait_for_selector("h1:text-is('importance-model')")
    assert page.locator("#frontier-summary").inner_text().startswith("predicted unaligned")
    assert "No frontier stored" in page.locator("#frontier-none").inner_text()
    assert page.locator(".main-svg").count() == 0

    # Rules only: no latency at all, no chart.
    page.goto(f"{live_service.url}/ui#/alignments/{rules['id']}")
    page.wait_for_selector("h1:text-is('rules-model')")
    assert "No predicted latency" in page.locator("#frontier-none").inner_text()
    assert page.locator(".main-svg").count() == 0 and page.locator("#frontier-summary").count() == 0
    page.wait_for_selector("text=Weights")
    assert page.locator("#predicted").inner_text() == "no latency data (rules only)"
    assert "this platform" not in page.locator("#aligned-share").inner_text()

    assert problems == []


@pytest.fixture
def guarded(database, tmp_path):  # type: ignore[no-untyped-def]
    """A live service whose reads need a token, holding one staircase of "Guarded CPU": (service, platform, read token)."""
    from gac.service.settings import Settings
    from tests.fixtures.database import SECRET, _truncate
    from tests.fixtures.live_service import LiveService
    from tests.fixtures.tokens import make_token

    settings = Settings(database_url=database.url, secret_key=SECRET, data_dir=tmp_path)
    svc = LiveService(db_url=database.url, data_dir=tmp_path, extra_env={"GAC_REQUIRE_READ_TOKEN": "true"})
    ingest_token, read = make_token(settings, "ingest"), make_token(settings, "read")
    svc.start()
    try:
        plat = f.platform(device_name="Guarded CPU")
        assert httpx.post(f"{svc.url}/v1/batches", json=f.body(staircase(plat, 16)), headers=f.auth(ingest_token)).status_code == 201
        f.refused(httpx.get(f"{svc.url}/v1/platforms"), 401)  # reads really are closed
        yield svc, plat, read
    finally:
        svc.stop()
        _truncate(database.url)


def test_dashboard_asks_for_a_token_when_reads_need_one(guarded, browser):
    svc, _, read = guarded
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{svc.url}/ui")
    page.wait_for_selector("form.token-form")
    assert "token" in page.locator("form.token-form").inner_text().lower()
    # A wrong token is refused and the form asks again, saying so.
    page.fill("#token", "gac_not-a-real-token")
    page.click("form.token-form button")
    page.wait_for_selector("text=That token was refused")
    # The read token opens every view, and survives navigation within the tab.
    page.fill("#token", read)
    page.click("form.token-form button")
    page.wait_for_selector("a.platform-link")
    assert page.get_by_text("Guarded CPU").count() == 1
    page.goto(f"{svc.url}/ui#/alignments")
    page.wait_for_selector("text=No alignments yet")
    assert page.evaluate("sessionStorage.getItem('gac-read-token')") == read
    assert not errors, errors


def test_a_platform_filter_that_matches_nothing_says_so(live_service, browser):
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui")
    assert page.locator(".empty").inner_text().startswith("No platforms yet")  # truly none

    plat = f.platform(device_name="Filtered CPU")
    ingest(live_service, staircase(plat, 16))
    page.reload()
    page.wait_for_selector("a.platform-link")
    page.fill("#name-filter", "zzz")
    page.press("#name-filter", "Enter")
    said = page.locator(".empty").inner_text()
    assert said == "No platform matches device name contains “zzz”.", said


def sweeps(plat, ks, sdpa: bool = False, last: int = 24) -> Batch:  # type: ignore[no-untyped-def]
    """One GEMM curve per k (n swept, a step every 8), and an SDPA curve if asked."""
    rows = [
        f.measurement(x, median=10.0 * (1 + 0.25 * math.ceil(x / 8)), shape={"m": 128, "n": x, "k": k})
        for k in ks
        for x in range(1, last + 1)
    ]
    rows += [f.measurement(x, op="sdpa", median=10.0 + x) for x in range(1, last + 1)] if sdpa else []
    return Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="sweeper"), measurements=rows)


def test_filters_and_pages_live_in_the_url(live_service, browser):
    plat = f.platform(device_name="Paged CPU")
    ingest(live_service, sweeps(plat, [256 + 32 * i for i in range(9)], sdpa=True))  # 10 curves: two pages of 8
    fp = plat.fingerprint()
    base = f"{live_service.url}/ui"
    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    hash_is = lambda h: page.wait_for_function("(h) => location.hash === h", arg=h)  # noqa: E731

    # A bookmarked filter opens filtered (it once asked for /v1/platforms/FP?op=sdpa/rules).
    page.goto(f"{base}#/p/{fp}?op=sdpa")
    page.wait_for_selector(".curve-card .main-svg, .error")
    assert page.locator(".error").count() == 0, page.locator(".error").inner_text()
    assert page.locator("h2", has_text="Curves").inner_text() == "Curves (1)"
    assert page.locator("#op-filter").input_value() == "sdpa"
    assert page.locator(".curve-card h3").all_inner_texts() == ["sdpa bfloat16 · head_dim swept · b=1,h=8,s=128"]

    # A page turn and a filter are each a step Back undoes.
    page.goto(f"{base}#/p/{fp}")
    page.wait_for_selector("h2:text-is('Curves (10)')")
    page.get_by_text("next ›").click()
    hash_is(f"#/p/{fp}?page=2")
    page.wait_for_selector("text=page 2 of 2 (10)")
    assert page.locator(".curve-card").count() == 2
    page.select_option("#dtype-filter", "bfloat16")
    hash_is(f"#/p/{fp}?dtype=bfloat16")
    page.wait_for_selector("text=page 1 of 2 (10)")
    page.go_back()
    hash_is(f"#/p/{fp}?page=2")
    page.wait_for_selector("text=page 2 of 2 (10)")
    assert page.locator("#dtype-filter").input_value() == ""
    page.go_back()
    hash_is(f"#/p/{fp}")
    page.wait_for_selector("text=page 1 of 2 (10)")

    # The platforms' name filter too.
    page.goto(f"{base}#/")
    page.wait_for_selector("a.platform-link")
    page.fill("#name-filter", "zzz")
    page.press("#name-filter", "Enter")
    hash_is("#/?name=zzz")
    page.wait_for_selector("#platforms-none")
    page.go_back()
    page.wait_for_selector("a.platform-link")
    assert page.locator("#name-filter").input_value() == ""
    page.goto(f"{base}#/?name=Paged")
    page.wait_for_selector("a.platform-link")
    assert page.locator("#name-filter").input_value() == "Paged"
    assert problems == []


def test_the_compared_sweep_lives_in_the_url(live_service, browser):
    a, b = f.platform(device_name="Left CPU"), f.platform(device_name="Right CPU", cores=4)
    for plat in (a, b):
        ingest(live_service, sweeps(plat, [256, 512]))
    url = f"{live_service.url}/ui#/compare/{a.fingerprint()}/{b.fingerprint()}"
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url)
    page.wait_for_selector("#compare-chart .main-svg")
    options = page.locator("#pair-select option").all_inner_texts()
    assert len(options) == 2 and page.locator("#pair-select").input_value() == "0"
    page.select_option("#pair-select", "1")
    page.wait_for_function("() => location.hash.includes('?')")
    shared = page.url
    assert "op=gemm" in shared and "axis=n" in shared, shared
    # The shared URL opens on that sweep.
    page.goto("about:blank")
    page.goto(shared)
    page.wait_for_selector("#compare-chart .main-svg")
    assert page.locator("#pair-select").input_value() == "1"
    chosen = page.locator("#pair-select option:checked").inner_text()
    assert chosen == options[1], (chosen, options)


# How far the page scrolls sideways: 0 when nothing is wider than the window.
SIDEWAYS = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


def test_a_phone_wide_window_scrolls_tables_in_their_box_not_the_page(live_service, browser):
    plat = f.platform(device_name="NVIDIA H100 80GB HBM3", device_kind="cuda", compute_capability="9.0")
    ingest(live_service, staircase(plat, 16))
    fp = plat.fingerprint()
    doc = align_doc("narrow-model", out_weights(DIMS), fp)
    r = httpx.post(f"{live_service.url}/v1/align", json=doc, headers=f.auth(live_service.read_token), timeout=120)
    assert r.status_code == 201, r.text
    page = browser.new_page(viewport={"width": 390, "height": 844})
    for where, ready in (
        ("#/", "a.platform-link"),
        (f"#/p/{fp}", ".curve-card .main-svg"),
        ("#/alignments", "a.platform-name"),
        (f"#/alignments/{r.json()['id']}", "text=Weights"),
    ):
        page.goto(f"{live_service.url}/ui{where}")
        page.wait_for_selector(ready)
        assert page.evaluate(SIDEWAYS) == 0, where
    # The platforms table is still wider than the window: it scrolls inside its own box.
    page.goto(f"{live_service.url}/ui#/")
    page.wait_for_selector("a.platform-link")
    box = page.locator(".table-wrap").first
    assert box.evaluate("(b) => b.scrollWidth > b.clientWidth && getComputedStyle(b).overflowX === 'auto'")


def test_step_labels_keep_clear_of_the_mode_bar(live_service, browser):
    plat = f.platform(device_name="Falling CPU")
    ingest(live_service, staircase(plat, 16, fall_after=88))  # the largest step is near the right edge
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/p/{plat.fingerprint()}")
    page.wait_for_selector(".curve-card .main-svg")
    page.hover(".curve-card .chart")  # the mode bar shows on hover
    labels = page.evaluate(TEXT_BOXES, ".curve-card .annotation-text")
    bar = page.evaluate(TEXT_BOXES, ".curve-card .modebar")
    assert labels and bar
    assert not overlapping(labels + bar), overlapping(labels + bar)


def test_the_rules_table_labels_the_largest_rise_not_a_fall(live_service, browser):
    plat = f.platform(device_name="Only-faster CPU")
    ingest(live_service, staircase(plat, 1000, fall_after=48))  # flat, then 30 % faster: one step, a fall
    (rule,) = httpx.get(f"{live_service.url}/v1/platforms/{plat.fingerprint()}/rules").json()
    assert rule["worst_step_pct"] < 0
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/p/{plat.fingerprint()}")
    page.wait_for_selector("text=Learned alignment rules")
    rules = page.locator("table", has=page.locator("th", has_text="modulus"))
    heads = [t.strip().lower() for t in rules.locator("th").all_inner_texts()]
    cells = rules.locator("tbody tr").first.locator("td").all_inner_texts()
    assert cells[heads.index("largest rise")] == "none", (heads, cells)


def job_plan(*values: int) -> dict:  # type: ignore[type-arg]
    sweep = {"op": "gemm", "dtypes": ["bfloat16"], "axis": "n", "fixed": {"m": 128, "k": 256}, "values": list(values)}
    return {"name": "tiny", "sweeps": [sweep]}


def test_the_jobs_page_names_each_platform_and_says_who_finished_what_when(live_service, browser):
    cpu = f.platform(device_name="AMD EPYC", threads=1)
    gpu = f.platform(device_name="NVIDIA H100 80GB HBM3", device_kind="cuda", compute_capability="9.0")
    for plat in (cpu, gpu):
        ingest(live_service, staircase(plat, 16, last=32))
    admin, agent = f.auth(live_service.admin_token), f.auth(live_service.ingest_token)

    def enqueue(plan: dict, match: dict, priority: int = 0) -> dict:  # type: ignore[type-arg]
        r = httpx.post(f"{live_service.url}/v1/jobs", json={"plan": plan, "match": match, "priority": priority}, headers=admin)
        assert r.status_code == 201, r.text
        return r.json()

    done = enqueue(job_plan(64, 72, 80), {"fingerprint": cpu.fingerprint()}, priority=5)
    waiting = enqueue(job_plan(88), {"fingerprint": cpu.fingerprint()})  # a second job for the same platform
    cancelled = enqueue(job_plan(64), {"fingerprint": gpu.fingerprint()})
    anyone = enqueue(job_plan(96), {})
    claim = {"platform": cpu.model_dump(mode="json"), "agent": "epyc-7"}
    assert httpx.post(f"{live_service.url}/v1/jobs/claim", json=claim, headers=agent).json()["id"] == done["id"]
    # Two of its three points stored only flagged by the agent's quality gate.
    run_id = uuid.uuid4()
    rows = [f.measurement(64, quality="bimodal"), f.measurement(72), f.measurement(80, quality="busy")]
    ingest(live_service, Batch(id=uuid.uuid4(), platform=cpu, run=RunInfo(id=run_id, agent="epyc-7"), measurements=rows))
    report = {"agent": "epyc-7", "points": 3, "run_id": str(run_id)}
    done = httpx.post(f"{live_service.url}/v1/jobs/{done['id']}/complete", json=report, headers=agent).json()
    assert done["points_flagged"] == 2
    cancelled = httpx.delete(f"{live_service.url}/v1/jobs/{cancelled['id']}", headers=admin).json()

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    looked_up: list[str] = []
    page.on("request", lambda r: looked_up.append(r.url) if "/v1/platforms/" in r.url else None)
    page.add_init_script(f"sessionStorage.setItem('gac-read-token', {live_service.read_token!r})")  # lease_owner needs a token
    page.goto(f"{live_service.url}/ui#/jobs")
    page.wait_for_selector(f"#job-{anyone['id']}")
    heads = [t.strip().lower() for t in page.locator("th").all_inner_texts()]
    cell = lambda job, head: page.locator(f"#job-{job['id']} td").nth(heads.index(head)).inner_text()  # noqa: E731
    fmt = lambda s: page.evaluate("(s) => fmtDate(s)", s)  # noqa: E731

    assert cell(done, "points") == "3 / 3 (2 flagged)"
    assert cell(done, "for") == f"{cpu.fingerprint()[:12]} (AMD EPYC, 1 thread)"
    assert cell(done, "agent") == "epyc-7"
    assert cell(done, "finished") == fmt(done["finished_at"]) != "–"
    assert cell(waiting, "for") == f"{cpu.fingerprint()[:12]} (AMD EPYC, 1 thread)"
    assert cell(waiting, "finished") == "–" and cell(waiting, "points") == "– / 1"
    assert cell(cancelled, "for") == f"{gpu.fingerprint()[:12]} (NVIDIA H100 80GB HBM3)"
    assert cell(cancelled, "finished") == fmt(cancelled["finished_at"]) != "–"
    assert cell(anyone, "for") == "any agent"
    # Each platform looked up once, however many jobs name it.
    assert sorted(looked_up) == sorted(f"{live_service.url}/v1/platforms/{p.fingerprint()}" for p in (cpu, gpu)), looked_up

    # Without a token the service leaves the agent out, and so does the page.
    anonymous = browser.new_page(viewport=VIEWPORT)
    anonymous.goto(f"{live_service.url}/ui#/jobs")
    anonymous.wait_for_selector(f"#job-{done['id']}")
    assert anonymous.locator(f"#job-{done['id']} td").nth(heads.index("agent")).inner_text() == "–"
    assert problems == []


def test_the_jobs_page_turned_lives_in_the_url(live_service, browser):
    admin = f.auth(live_service.admin_token)
    for _ in range(26):  # more than a page (25)
        r = httpx.post(f"{live_service.url}/v1/jobs", json={"plan": job_plan(64), "match": {}}, headers=admin)
        assert r.status_code == 201, r.text
    first = httpx.get(f"{live_service.url}/v1/jobs", params={"limit": 25}).json()
    pages = -(-first["total"] // 25)
    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{live_service.url}/ui#/jobs")
    page.wait_for_selector(f"text=page 1 of {pages} ({first['total']})")
    page.get_by_text("next ›").click()
    page.wait_for_function("(h) => location.hash === h", arg=f"#/jobs?at={first['next_cursor']}")
    page.wait_for_selector(f"text=page 2 of {pages} ({first['total']})")
    second = httpx.get(f"{live_service.url}/v1/jobs", params={"limit": 25, "cursor": first["next_cursor"]}).json()
    assert page.locator("tbody tr").count() == len(second["items"])
    shared = page.url  # opened elsewhere, it is the same page
    other = browser.new_page(viewport=VIEWPORT)
    other.goto(shared)
    other.wait_for_selector(f"text=page 2 of {pages} ({first['total']})")
    assert other.locator(f"#job-{second['items'][0]['id']}").count() == 1
    page.go_back()
    page.wait_for_function("() => location.hash === '#/jobs'")
    page.wait_for_selector(f"text=page 1 of {pages} ({first['total']})")
    assert problems == []


def test_a_curve_marks_its_last_dim_as_the_end_of_the_sweep_not_as_cliff_free(live_service, browser):
    # A step every 16 dims, then one odd, slow dim last: on the frontier only because nothing larger was measured.
    plat = f.platform(device_name="Odd-end CPU")
    batch = staircase(plat, 16, last=40)
    batch.measurements.append(f.measurement(41, median=110.0, p10_us=108.0, p90_us=112.0))
    ingest(live_service, batch)
    fp = plat.fingerprint()
    (cliffs,) = httpx.get(f"{live_service.url}/v1/platforms/{fp}/cliffs").json()
    assert 41 in cliffs["frontier"] and len(cliffs["frontier"]) > 1  # the API is unchanged: the last dim is on it

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{live_service.url}/ui#/p/{fp}")
    page.wait_for_selector(".curve-card .main-svg")
    traces = page.evaluate("() => document.querySelector('.curve-card .chart').data.map((t) => ({name: t.name, x: Array.from(t.x)}))")
    by_name = {t["name"]: t["x"] for t in traces}
    end = "end of the sweep (nothing larger measured)"
    assert by_name[end] == [41], traces
    assert by_name["cliff-free"] == sorted(set(cliffs["frontier"]) - {41}), traces
    assert end in page.locator(".curve-card .legendtext").all_text_contents()
    # Hovering that dim's point says so.
    point = page.locator(".curve-card .scatterlayer .trace").first.locator(".points path").last
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector(".curve-card .hoverlayer .hovertext", timeout=5000)
    hover = page.locator(".curve-card .hoverlayer .hovertext").first.text_content()
    assert "41: median 110.00" in hover and end in hover, hover
    assert problems == []


def test_an_alignment_says_its_predicted_latencies_are_the_curve_models_estimates(live_service, browser):
    plat = f.platform(device_name="Estimating CPU")
    ingest(live_service, staircase(plat, 16))
    r = httpx.post(
        f"{live_service.url}/v1/align",
        json=align_doc("estimated-model", out_weights(DIMS), plat.fingerprint()),
        headers=f.auth(live_service.read_token),
        timeout=120,
    )
    assert r.status_code == 201, r.text
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/alignments/{r.json()['id']}")
    page.wait_for_selector("text=Weights")
    predicted = page.locator("#predicted")
    assert predicted.inner_text().startswith("original ")
    # Beside the figures, not on hover: they are not sums of the raw medians.
    note = predicted.locator("#predicted-note")
    assert note.is_visible()
    said = note.inner_text()
    assert said == "predicted from the curve model's estimates (denoised), not raw medians; so are the weights' latencies below", said


def test_the_alignments_list_dims_earlier_passes_of_the_same_alignment(live_service, browser):
    # Three rounds of one `gac align --profile-missing`, then the same model at another budget.
    plat = f.platform(device_name="Rounds CPU")
    ingest(live_service, staircase(plat, 16))
    weights = out_weights(DIMS)
    docs = [align_doc("rounds-model", weights, plat.fingerprint(), compressor="asvd") for _ in range(3)]
    docs.append({**docs[0], "budget": {"params": docs[0]["budget"]["params"] - 8 * IN}})
    docs.append({**docs[0], "workload": {"tokens": [128], "dtype": "float32"}})  # another workload: not a pass of the first
    ids = []
    for doc in docs:
        r = httpx.post(f"{live_service.url}/v1/align", json=doc, headers=f.auth(live_service.read_token), timeout=120)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])

    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/alignments")
    page.wait_for_selector("a.platform-name")
    rows = page.locator("tbody tr")
    assert rows.count() == 5  # every one listed, none hidden
    row = {i: page.locator("tbody tr", has=page.locator(f"a[href='#/alignments/{i}']")) for i in ids}
    first, second, final, other_budget, other_dtype = (row[i] for i in ids)
    for r in (first, second):
        assert "earlier pass" in r.locator("td").first.inner_text()
        assert r.is_visible() and float(r.locator("td").first.evaluate("(td) => getComputedStyle(td).opacity")) < 1
    for r in (final, other_budget, other_dtype):
        assert "earlier pass" not in r.inner_text()
        assert r.locator("td").first.evaluate("(td) => getComputedStyle(td).opacity") == "1"


def test_hostile_names_neither_reverse_the_page_nor_widen_it(live_service, browser):
    """An agent's device name carrying a right-to-left override reversed the rest of its row (the short fingerprint
    read backwards); one 190-character word pushed every column off-screen."""
    rlo = f.platform(device_name="Override CPU\u202e")
    long = f.platform(device_name="W" * 190)
    for plat in (rlo, long):
        ingest(live_service, staircase(plat, 16))
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/")
    page.wait_for_selector("a.platform-link")
    names = page.locator("a.platform-link").all_text_contents()
    assert f"Override CPU · bfloat16 · {rlo.fingerprint()[:8]}" in names, names
    assert not any("\u202e" in n for n in names)
    width = page.evaluate("() => document.querySelector('main table').getBoundingClientRect().width")
    assert width <= VIEWPORT["width"], width


def test_a_platform_is_named_by_the_dtypes_of_its_curves_not_the_agents_fast_dtype(live_service, browser):
    plat = f.platform(device_name="Float32 CPU", fast_dtype="bfloat16")
    ingest(live_service, staircase(plat, 16, dtype="float32"))
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/")
    page.wait_for_selector("a.platform-link")
    assert page.locator("a.platform-link").all_text_contents() == [f"Float32 CPU · float32 · {plat.fingerprint()[:8]}"]


def test_a_large_alignment_shows_its_first_weights_and_the_rest_on_request(live_service, browser):
    doc = align_doc("wide-model", out_weights([71.4] * 620), None)
    r = httpx.post(f"{live_service.url}/v1/align", json=doc, headers=f.auth(live_service.read_token), timeout=120)
    assert r.status_code == 201, r.text
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/alignments/{r.json()['id']}")
    page.wait_for_selector("#all-weights")
    weights = page.locator("h2:text('Weights') + .table-wrap tbody tr")
    assert weights.count() == 500
    assert page.locator("#all-weights").inner_text() == "show the other 120 weights"
    page.locator("#all-weights").click()
    assert weights.count() == 620 and page.locator("#all-weights").count() == 0


def test_an_alignment_in_a_dtype_its_platform_never_measured_says_so(live_service, browser):
    plat = f.platform(device_name="Bf16 only CPU")
    ingest(live_service, staircase(plat, 16))
    doc = align_doc("unpriced-model", out_weights(DIMS), plat.fingerprint())
    doc["workload"]["dtype"] = "float16"
    r = httpx.post(f"{live_service.url}/v1/align", json=doc, headers=f.auth(live_service.read_token), timeout=120)
    assert r.status_code == 201, r.text
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/alignments/{r.json()['id']}")
    page.wait_for_selector("text=Weights")
    said = page.locator("#predicted").inner_text()
    assert said.startswith("no latency data: nothing measured in float16") and "its curves are in bfloat16" in said, said
    assert "runs fastest" not in page.locator("#aligned-share").inner_text()


def test_the_dashboard_runs_under_its_content_security_policy(live_service, browser):
    """Only our own scripts, nothing framed: the backstop should an escape be missed. The page still draws."""
    plat = f.platform(device_name="Policed CPU")
    ingest(live_service, staircase(plat, 16))
    head = httpx.get(f"{live_service.url}/ui").headers
    assert "script-src 'self';" in head["content-security-policy"] and "frame-ancestors 'none'" in head["content-security-policy"]
    assert head["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in httpx.get(f"{live_service.url}/docs").headers["content-security-policy"]
    page = browser.new_page(viewport=VIEWPORT)
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if m.type == "error" else None)
    page.goto(f"{live_service.url}/ui#/")
    page.get_by_text("Policed CPU").click()
    page.wait_for_selector(".curve-card .main-svg")
    assert refused == []


def test_a_complete_alignment_still_lacking_points_says_so_and_links_its_job(live_service, browser):
    """A prediction can price every chosen dim (complete) while dims the alignment would weigh are unmeasured:
    the page must not read as final, and must name the points and the job queued for them."""
    plat = f.platform(device_name="Sparse CPU")
    rows = [m for m in staircase(plat, 16).measurements if m.x % 8 == 0 or m.x == 71]  # the lattice and the compressor's dim
    ingest(live_service, Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows))
    r = httpx.post(
        f"{live_service.url}/v1/align",
        params={"enqueue_missing": "true"},
        json=align_doc("provisional-model", out_weights([71.4]), plat.fingerprint()),
        headers=f.auth(live_service.ingest_token),
        timeout=120,
    )
    assert r.status_code == 201, r.text
    stored = r.json()
    lat = stored["result"]["latency"]
    assert lat["complete"] and lat["missing_points"] > 0 and stored["jobs"], stored  # the reviewer's case

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{live_service.url}/ui#/alignments/{stored['id']}")
    page.wait_for_selector("text=Weights")
    assert page.locator("#frontier-summary").inner_text().startswith("predicted unaligned")  # the figures stay
    assert page.locator("#predicted").inner_text().startswith("original ")
    assert "provisional" in page.locator("#predicted").inner_text()
    notice = page.locator("#frontier-missing").inner_text()
    assert notice.startswith(f"Provisional: {lat['missing_points']} curve points missing."), notice
    assert "may choose other dims" in notice and "No chart is drawn" not in notice, notice
    (job,) = stored["jobs"]
    page.locator("#frontier-missing a", has_text=f"#{job}").click()
    page.wait_for_selector(f"#job-{job}")
    assert problems == []


def test_a_curve_whose_rows_are_all_flagged_says_it_has_no_usable_points(live_service, browser):
    """Not "2 dims, noise 0.00 %, no steps above the noise", nor a cliff-free rule: nothing usable was measured."""
    plat = f.platform(device_name="Flagged CPU")
    rows = [f.measurement(x) for x in (56, 60, 64)] + [f.measurement(72, median=900.0, quality="isolated")]
    rows += [f.measurement(x, op="sdpa", median=900.0, quality="busy") for x in (64, 72)]
    ingest(live_service, Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows))

    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{live_service.url}/ui#/p/{plat.fingerprint()}")
    page.wait_for_selector(".curve-card .main-svg")
    gemm, sdpa = (page.locator(".curve-card", has_text=f"{op} bfloat16") for op in ("gemm", "sdpa"))
    # The flagged row at the sweep's end counts in neither the dims nor their range, as on the curve.
    assert gemm.locator("div.muted").first.inner_text().startswith("3 dims (56–64), 4 measurements"), gemm.inner_text()
    counts = sdpa.locator("div.muted").first.inner_text()
    assert counts.startswith("no usable points, 2 measurements · 2 flagged, not plotted"), counts
    assert "noise" not in counts and "dims" not in counts, counts
    assert sdpa.locator(".chart").count() == 0 and "no steps" not in sdpa.inner_text()
    assert sdpa.locator(".no-points").inner_text().startswith("no usable points")
    rule = page.locator("tr", has_text="sdpa").first.inner_text()
    assert "too few usable points" in rule and "cliff-free" not in rule and "no steps" not in rule, rule
    assert problems == []


def test_a_curve_point_hover_counts_measurements_not_runs(live_service, browser):
    """A point's count is of its stored rows (`measurements`); the curve does not say how many runs they came from."""
    plat = f.platform(device_name="Twice-measured CPU")
    ingest(live_service, staircase(plat, 16, last=32))
    ingest(live_service, staircase(plat, 16, last=32))  # a second run: every point now has two measurements
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live_service.url}/ui#/p/{plat.fingerprint()}")
    page.wait_for_selector(".curve-card .main-svg")
    point = page.locator(".curve-card .scatterlayer .trace").first.locator(".points path").nth(10)
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector(".curve-card .hoverlayer .hovertext", timeout=5000)
    hover = page.locator(".curve-card .hoverlayer .hovertext").first.text_content()
    assert "2 measurements" in hover and "run" not in hover, hover


def _download(page, link) -> tuple[str, bytes]:  # type: ignore[no-untyped-def]
    with page.expect_download(timeout=10_000) as got:
        link.click()
    return got.value.suggested_filename, Path(got.value.path()).read_bytes()


def test_curve_downloads_carry_the_read_token_where_reads_need_one(guarded, browser):
    """A plain link cannot send the tab's token: the download is fetched with it, under the service's filename."""
    svc, plat, read = guarded
    page = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(f"sessionStorage.setItem('gac-read-token', {read!r})")
    page.goto(f"{svc.url}/ui#/p/{plat.fingerprint()}")
    page.wait_for_selector(".curve-card .main-svg")
    card = page.locator(".curve-card").first
    for fmt in ("csv", "json"):
        link = card.get_by_role("link", name=fmt.upper(), exact=True)
        f.refused(httpx.get(f"{svc.url}{link.get_attribute('href')}"), 401)  # the link alone is refused
        want = httpx.get(f"{svc.url}{link.get_attribute('href')}", headers=f.auth(read))
        name, body = _download(page, link)
        assert name == want.headers["content-disposition"].split('filename="')[1].rstrip('"') and name.endswith(f".{fmt}")
        assert body == want.content
    assert page.locator("form.token-form").count() == 0 and not errors, errors


def test_curve_downloads_work_without_a_token(live_service, browser):
    plat = f.platform(device_name="Open CPU")
    ingest(live_service, staircase(plat, 16, last=32))
    page = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
    page.goto(f"{live_service.url}/ui#/p/{plat.fingerprint()}")
    page.wait_for_selector(".curve-card .main-svg")
    link = page.locator(".curve-card").first.get_by_role("link", name="CSV", exact=True)
    want = httpx.get(f"{live_service.url}{link.get_attribute('href')}")
    name, body = _download(page, link)
    assert name.endswith(".csv") and body == want.content
