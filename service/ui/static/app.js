// GAC dashboard: a small single-page app over the service's JSON API (/v1/...).
// Views: platforms, one platform (curves with cliffs, learned rules), a comparison of two
// platforms, and stored alignments. Charts are Plotly (served by the service, no CDN).
"use strict";

const view = document.getElementById("view");
const PAGE = 25;
const CURVES_PER_PAGE = 8;
const WEIGHT_ROWS = 500; // an alignment's weights shown at first

// ---------- helpers ----------
// A service may require a token for reads (GAC_REQUIRE_READ_TOKEN): the user pastes one once;
// it lives in this tab's session storage only and goes out as a Bearer header.
const TOKEN_KEY = "gac-read-token";

class NeedsToken extends Error {}

// An error answer as a sentence: its detail, or each field's message ("alignment_id: Input should be a valid UUID").
function errorText(status, body) {
  const d = body.detail;
  if (typeof d === "string") return d;
  if (Array.isArray(d) && d.every((e) => e && e.message)) return d.map((e) => `${String(e.field || "").replace(/^(path|query|body)\./, "")}: ${e.message}`).join("; ");
  return `${status} ${JSON.stringify(d || body)}`;
}

async function api(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch(url, token ? { headers: { Authorization: `Bearer ${token}` } } : {});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw answerError(r.status, body);
  return body;
}

// What an answer that is not ok stands for: a token to ask for (401), else its detail as a sentence.
function answerError(status, body) {
  if (status === 401) return new NeedsToken(typeof body.detail === "string" ? body.detail : "this service needs a token");
  return new Error(errorText(status, body));
}

function tokenForm(message) {
  const input = el("input", { type: "password", id: "token", placeholder: "gac_…", autocomplete: "off", size: 40 });
  const save = (ev) => {
    ev.preventDefault();
    if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    route();
  };
  return el("form", { class: "token-form", onsubmit: save },
    el("p", {}, message),
    el("p", { class: "muted" }, "Paste a read token (`gac token create --scope read`). It is kept in this tab only."),
    input, " ", el("button", { type: "submit" }, "Use token"));
}

// Unicode's explicit direction controls (embeddings, overrides, isolates). In text an agent or a
// manifest sent they would reverse what follows them, our own figures included: dropped from
// every text node and chart label (they are never needed to show a name).
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/g;
const shown = (s) => String(s).replace(BIDI_CONTROLS, "");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) node.append(c instanceof Node ? c : shown(c));
  return node;
}

const fmtUs = (v) => (v === null || v === undefined ? "–" : v >= 1000 ? `${(v / 1000).toFixed(2)} ms` : `${v.toFixed(1)} µs`);
const fmtDate = (s) => (s ? new Date(s).toLocaleString(undefined, { timeZoneName: "short" }) : "–"); // the reader's clock, named
const pct = (v) => `${(100 * v).toFixed(0)} %`;
// A signed percentage as people write it: "+25.0 %", "-17.4 %" (one sign, never "+-").
const signedPct = (v, digits = 1) => `${Number(v.toFixed(digits)) < 0 ? "-" : "+"}${Math.abs(v).toFixed(digits)} %`;

// How every list names a platform: two platforms can share a device and differ in the dtype
// they were profiled in or the thread count, so the name carries those and a short fingerprint.
// The service keeps the dtypes of a platform's curves (`dtypes`), not the agent's fast_dtype.
function platformName(p) {
  const d = p.descriptor || {};
  const parts = [d.device_name || p.label];
  const dtypes = p.dtypes && p.dtypes.length ? p.dtypes : d.fast_dtype ? [d.fast_dtype] : [];
  if (dtypes.length) parts.push(dtypes.join("+"));
  if (d.device_kind === "cpu" && d.threads) parts.push(`${d.threads} thread${d.threads === 1 ? "" : "s"}`);
  else if (d.compute_capability) parts.push(`sm_${d.compute_capability.replace(".", "")}`);
  parts.push(p.fingerprint.slice(0, 8));
  return parts.join(" · ");
}

// In a box of its own that scrolls sideways: a wide table on a narrow screen must not widen the page.
function table(headers, rows) {
  return el("div", { class: "table-wrap" }, el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : "" }, h.label || h)))),
    el("tbody", {}, rows)));
}

// A link fetched with the read token when there is one (a plain link cannot send it: 401 where reads need
// a token), saved from memory under the service's filename; without a token the link is followed as it is.
function downloadLink(href, label, fallbackName) {
  const save = async (token) => {
    const r = await fetch(href, { headers: { Authorization: `Bearer ${token}` } });
    if (!r.ok) throw answerError(r.status, await r.json().catch(() => ({})));
    const named = /filename="([^"]+)"/.exec(r.headers.get("Content-Disposition") || "");
    const url = URL.createObjectURL(await r.blob());
    el("a", { href: url, download: named ? named[1] : fallbackName }).click();
    setTimeout(() => URL.revokeObjectURL(url), 60000); // once the browser has read it: revoked at once, some save nothing
  };
  return el("a", { href, class: "download", onclick: (ev) => {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return;
    ev.preventDefault();
    save(token).catch(fail);
  } }, label);
}

function show(...nodes) {
  view.replaceChildren(...nodes);
}

function fail(err) {
  if (err instanceof NeedsToken) {
    const had = sessionStorage.getItem(TOKEN_KEY);
    sessionStorage.removeItem(TOKEN_KEY);
    show(tokenForm(had ? `That token was refused: ${err.message}` : err.message));
    return;
  }
  show(el("div", { class: "error" }, `Could not load: ${err.message}`));
}

// Go to a view with this state in the hash (empty values and the first page left out); the
// hashchange renders it. The same hash again renders nothing, so route() runs directly.
function goTo(path, state) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) {
    if (k === "page") { if (v > 0) q.set(k, v + 1); } else if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const hash = `#${path}${String(q) ? `?${q}` : ""}`;
  if (location.hash === hash) route(); else location.hash = hash;
}

function pager(page, total, size, go) {
  const pages = Math.max(1, Math.ceil(total / size));
  return el("div", { class: "toolbar" },
    el("button", { class: "secondary", disabled: page <= 0, onclick: () => go(page - 1) }, "‹ prev"),
    el("span", { class: "muted" }, `page ${page + 1} of ${pages} (${total})`),
    el("button", { class: "secondary", disabled: page + 1 >= pages, onclick: () => go(page + 1) }, "next ›"));
}

// ---------- charts ----------
const PLOT_CONFIG = { responsive: true, displaylogo: false };

// Plotly renders a subset of HTML (<b>, <a>, <br>, entities) in trace names, titles, annotations and
// hover text, and substitutes %{...} in hover templates. Anything from user data (platform and model
// names, axis names from the agents) goes through this first: every special character becomes a
// numeric entity, which Plotly shows as the plain character.
const plotText = (s) => shown(s).replace(/[&<>"'%]/g, (c) => `&#${c.charCodeAt(0)};`);

function pointsTrace(points, label, color) {
  const name = plotText(label);
  return {
    type: "scatter", mode: "lines+markers", name, x: points.map((p) => p.x), y: points.map((p) => p.median_us),
    line: { color, width: 1.5 }, marker: { color, size: 4 },
    error_y: { type: "data", symmetric: false, array: points.map((p) => p.p90_us - p.median_us),
      arrayminus: points.map((p) => p.median_us - p.p10_us), color, thickness: 1, width: 0 },
    // A point's rows, re-runs and other agents' alike: the curve does not say how many runs they came from.
    customdata: points.map((p) => [p.p10_us, p.p90_us, p.n, plural(p.measurements, "measurement")]),
    hovertemplate: "%{x}: median %{y:.2f} µs<br>p10 %{customdata[0]:.2f} · p90 %{customdata[1]:.2f}<br>n = %{customdata[2]} samples, %{customdata[3]}<extra>" + name + "</extra>",
  };
}

// Step labels above a chart: the largest steps first, each only where it keeps clear of the
// labels already placed, at most STEP_LABELS of them. A dense curve (a step every few dims)
// otherwise prints its labels on top of each other; every step keeps its dotted line and its
// figure on hover (stepHover).
const STEP_LABELS = 6;
const LABEL_FONT = 10;
const labelText = (s) => signedPct(s.size_pct, 0);
const labelWidthPx = (text) => 0.62 * LABEL_FONT * text.length + 6; // system-ui digits at 10 px, and a margin

function labelledSteps(steps, xMin, xMax, plotWidthPx) {
  const perPx = xMax > xMin && plotWidthPx > 0 ? (xMax - xMin) / plotWidthPx : 0;
  const placed = [];
  for (const s of [...steps].sort((a, b) => Math.abs(b.size_pct) - Math.abs(a.size_pct) || a.x - b.x)) {
    if (placed.length >= STEP_LABELS) break;
    const w = labelWidthPx(labelText(s));
    if (placed.every((p) => Math.abs(p.s.x - s.x) >= perPx * (w + p.w) / 2)) placed.push({ s, w });
  }
  return placed.map((p) => p.s);
}

function cliffShapes(steps, color, labelled = steps) {
  const shapes = steps.map((s) => ({
    type: "line", xref: "x", yref: "paper", x0: s.x - 0.5, x1: s.x - 0.5, y0: 0, y1: 1,
    line: { color, width: 1, dash: "dot" },
  }));
  const notes = labelled.map((s) => ({
    x: s.x - 0.5, y: 1, xref: "x", yref: "paper", yanchor: "bottom", showarrow: false,
    text: labelText(s), font: { size: LABEL_FONT, color }, captureevents: false,
  }));
  return { shapes, notes };
}

// Every step as a small marker at the top of its dotted line, just under where labels go, its size
// on hover (the labels show a few). On an axis of their own (STEP_AXIS), away from the curve's
// points: Plotly's closest-point hover prefers the smaller marker when two are under the pointer.
const STEP_AXIS = { overlaying: "y", range: [0, 1], visible: false, fixedrange: true };

function stepHover(steps, color) {
  return {
    type: "scatter", mode: "markers", name: "steps", showlegend: false, yaxis: "y2", cliponaxis: false,
    x: steps.map((s) => s.x - 0.5), y: steps.map(() => 0.985),
    marker: { color, size: 8, symbol: "triangle-down" },
    hovertemplate: steps.map((s) => `step ${s.x_before}→${s.x}: ${signedPct(s.size_pct)}<br>${stepLevels(s)}<extra></extra>`),
  };
}

const SWEEP_END = "end of the sweep (nothing larger measured)";

function plotCurve(div, curve, cliffs) {
  const frontier = new Set(cliffs.frontier);
  // The sweep's largest dim is always on the frontier ("no larger dim is as fast"), since nothing
  // larger was measured: marked as the sweep's end, not as a cliff-free dim, however slow it is.
  const last = curve.points.length ? Math.max(...curve.points.map((p) => p.x)) : null;
  const onFrontier = curve.points.filter((p) => frontier.has(p.x) && p.x !== last);
  const sweepEnd = curve.points.filter((p) => frontier.has(p.x) && p.x === last);
  const margin = { l: 60, r: 10, t: 48, b: 40 }; // the step labels sit under Plotly's mode bar, not behind it
  const xs = curve.points.map((p) => p.x);
  const span = xs.length ? Math.max(...xs) - Math.min(...xs) : 0;
  // Plotly pads the x range by about 5 % on each side of the markers' extent.
  const labelled = labelledSteps(cliffs.steps, Math.min(...xs) - 0.05 * span, Math.max(...xs) + 0.05 * span,
    (div.clientWidth || 500) - margin.l - margin.r);
  const { shapes, notes } = cliffShapes(cliffs.steps, "#d92d20", labelled);
  const traces = [
    pointsTrace(curve.points, "median (p10–p90)", "#2f6fde"),
    { type: "scatter", mode: "markers", name: "cliff-free", x: onFrontier.map((p) => p.x), y: onFrontier.map((p) => p.median_us),
      marker: { color: "#079455", size: 7, symbol: "diamond" }, hoverinfo: "skip" },
  ];
  if (sweepEnd.length) {
    traces.push({ type: "scatter", mode: "markers", name: SWEEP_END, x: sweepEnd.map((p) => p.x), y: sweepEnd.map((p) => p.median_us),
      marker: { color: "#98a2b3", size: 9, symbol: "diamond-open", line: { width: 2 } }, hoverinfo: "skip" });
    // The hover comes from the points' trace (its small markers win it): say it on that dim's.
    const median = traces[0];
    median.hovertemplate = curve.points.map((p) => (p.x === last ? median.hovertemplate.replace("<extra>", `<br>${SWEEP_END}<extra>`) : median.hovertemplate));
  }
  if (cliffs.steps.length) traces.push(stepHover(cliffs.steps, "#d92d20"));
  div.dataset.steps = String(cliffs.steps.length);
  div.dataset.labels = String(labelled.length);
  return Plotly.newPlot(div, traces, {
    margin, hovermode: "closest", shapes, annotations: notes, yaxis2: STEP_AXIS,
    xaxis: { title: { text: plotText(curve.curve.axis) } }, yaxis: { title: { text: "latency (µs)" }, rangemode: "tozero" },
    legend: { orientation: "h", y: -0.2 },
  }, PLOT_CONFIG);
}

const LISTED_STEPS = 12; // under a chart: the largest steps, in order of dim; every step behind "all N steps"

// Every row of such a curve was flagged: it has no steps because it has no points, which says nothing of cliffs.
const NO_POINTS = "no usable points: every measurement was flagged by the agents' quality gate (a later run measures them again)";

// A step is between the curve model's denoised levels, not the two raw medians (a point's hover shows its own):
// where the model pools a comb's teeth, one noisy tooth's median can sit far from its level.
const stepLevels = (s) => `denoised ${fmtUs(s.before_us)} → ${fmtUs(s.after_us)}`;

function cliffList(cliffs) {
  if (cliffs.curve && cliffs.curve.points === 0) return el("p", { class: "muted no-points" }, NO_POINTS);
  if (!cliffs.steps.length) return el("p", { class: "muted" }, "no steps above the noise");
  const item = (s) => el("li", { title: `${stepLevels(s)} (the curve model's levels, not the raw medians); z = ${s.z.toFixed(1)}, confidence ${(100 * s.confidence).toFixed(0)} %` },
    `${s.x_before}→${s.x}: ${signedPct(s.size_pct)}`);
  if (cliffs.steps.length <= LISTED_STEPS) return el("ul", { class: "cliffs" }, cliffs.steps.map(item));
  const largest = new Set([...cliffs.steps].sort((a, b) => Math.abs(b.size_pct) - Math.abs(a.size_pct)).slice(0, LISTED_STEPS));
  return el("div", {},
    el("ul", { class: "cliffs" }, cliffs.steps.filter((s) => largest.has(s)).map(item)),
    el("details", { class: "all-steps" }, el("summary", {}, `all ${cliffs.steps.length} steps`),
      el("ul", { class: "cliffs" }, cliffs.steps.map(item))));
}

function curveTitle(c) {
  return `${c.op} ${c.dtype} · ${c.axis} swept · ${c.fixed_key}`;
}

// ---------- views ----------
async function platformsView(state) {
  const page = state.page || 0;
  const name = state.name || "";
  const kind = state.kind || "";
  const data = await api("/v1/platforms", { limit: PAGE, cursor: page * PAGE, name, device_kind: kind });
  const chosen = new Set();
  const compare = el("button", { disabled: true, id: "compare-btn",
    onclick: () => { const [a, b] = [...chosen]; location.hash = `#/compare/${a}/${b}`; } }, "Compare 2 selected");
  const rows = data.items.map((p) => el("tr", {},
    el("td", {}, el("input", { type: "checkbox", "aria-label": `select ${platformName(p)}`, onchange: (e) => {
      if (e.target.checked) chosen.add(p.fingerprint); else chosen.delete(p.fingerprint);
      compare.disabled = chosen.size !== 2;
    } })),
    el("td", {}, el("a", { href: `#/p/${p.fingerprint}`, class: "platform-link", title: `${p.label}\n${p.fingerprint}` }, platformName(p))),
    el("td", {}, p.descriptor.device_kind),
    el("td", { class: "muted" }, [p.descriptor.torch_version && `torch ${p.descriptor.torch_version}`, p.descriptor.timing].filter(Boolean).join(" · ")),
    el("td", { class: "num" }, p.curves),
    el("td", { class: "num" }, p.runs),
    el("td", { class: "num" }, p.agents),
    el("td", {}, fmtDate(p.first_seen)),
    el("td", {}, fmtDate(p.last_seen))));
  const filter = el("input", { placeholder: "device name contains…", value: name, id: "name-filter" });
  const kindSel = el("select", { id: "kind-filter" }, ["", "cuda", "cpu", "rocm"].map((k) => el("option", { value: k, selected: k === kind }, k || "any kind")));
  const apply = () => goTo("/", { name: filter.value, kind: kindSel.value });
  filter.addEventListener("change", apply);
  kindSel.addEventListener("change", apply);
  show(
    el("h1", {}, "Platforms"),
    el("p", { class: "muted" }, "Every exact hardware + software stack that measurements came from."),
    el("div", { class: "toolbar" }, filter, kindSel, compare),
    data.items.length
      ? table(["", "platform", "kind", "stack", { label: "curves", num: 1 }, { label: "runs", num: 1 }, { label: "agents", num: 1 }, "first seen", "last seen"], rows)
      : el("div", { class: "empty", id: "platforms-none" }, name || kind
        // A filter that matches nothing is not an empty service: say what was asked for.
        ? `No platform matches ${[name && `device name contains “${name}”`, kind && `kind ${kind}`].filter(Boolean).join(" and ")}.`
        : "No platforms yet: run `gac agent run --server … --token …` on a machine."),
    pager(page, data.total, PAGE, (p) => goTo("/", { name, kind, page: p })));
}

// ---------- a platform's profile quality ----------
// What each of the agent's quality flags means (gac.contracts.measurements.QUALITY_FLAGS), said on the
// page: a flagged point is kept out of curves and alignments, and the reader must see why without hovering.
const FLAG_MEANING = {
  bimodal: "samples in two modes (stalls)",
  isolated: "far off both neighbours with a huge spread",
  busy: "other work took the cores",
};
const fmtCores = (v) => (v === null || v === undefined ? "–" : `${v.toFixed(2)} cores`);
const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function threadsText(q, d) {
  if (q.threads) return `${plural(q.threads, "timing thread")}${q.cores ? ` on ${plural(q.cores, "core")}` : ""}`;
  return d.device_kind === "cpu" ? "timing threads not recorded" : "timed on the device (no CPU timing threads)";
}

function loadText(q) {
  if (!q.load_read) return "load while profiling not recorded (no point came with a reading)";
  return `load while profiling: median ${fmtCores(q.busy_cores_median)}, max ${fmtCores(q.busy_cores_max)} busy with other work`;
}

function flagsNotice(q) {
  const reasons = Object.entries(q.flagged_by_reason).map(([r, n]) =>
    el("li", { "data-reason": r }, el("b", {}, `${r}: ${n}`), ` — ${FLAG_MEANING[r] || "flagged by the agent"}`));
  return el("div", { class: "notice", id: "quality-flags" },
    el("b", {}, `${q.flagged} of ${plural(q.measurements, "stored point")} flagged`),
    " by the agents' quality gate: kept out of curves and alignments, measured again by a later run.",
    el("ul", { class: "flags" }, reasons));
}

function qualityRuns(q, total) {
  const rows = q.runs.map((r) => el("tr", { class: r.flagged ? "flagged" : "" },
    el("td", {}, fmtDate(r.started_at)), el("td", {}, (r.agents && r.agents.length ? r.agents : [r.agent]).join(", ")), el("td", {}, r.plan),
    el("td", { class: "num" }, r.measurements),
    el("td", { class: "num" }, r.flagged ? el("span", { class: "pill bad" }, r.flagged) : "0"),
    el("td", { class: "num" }, fmtCores(r.busy_cores_mean)), el("td", { class: "num" }, fmtCores(r.busy_cores_max))));
  // Folded: the summary line above has the figures, and the curves stay on the first screen.
  return el("details", { class: "quality-runs" },
    el("summary", {}, q.runs.length < total ? `by run (the newest ${q.runs.length} of ${total})` : `by run (${plural(total, "run")}, newest first)`),
    table(["started", "agent", "plan", { label: "points", num: 1 }, { label: "flagged", num: 1 },
      { label: "load mean", num: 1 }, { label: "load max", num: 1 }], rows));
}

function qualitySection(q, platform) {
  const flagged = q.flagged
    ? el("span", { class: "pill bad" }, `${q.flagged} flagged`)
    : el("span", { class: "pill good" }, "none flagged");
  return el("section", { id: "profile-quality", "data-flagged": q.flagged },
    el("h2", {}, "Profile quality"),
    el("p", { class: "summary", id: "quality-summary" },
      `${plural(q.measurements, "point")} stored · `, flagged, ` · ${threadsText(q, platform.descriptor)} · ${loadText(q)}`),
    q.flagged ? flagsNotice(q) : null,
    q.runs.length ? qualityRuns(q, Math.max(platform.runs, q.runs.length)) : null);
}

// 85017493504 -> "79.2 GiB (85,017,493,504 bytes)": the size a reader knows, with the exact figure.
function fmtBytes(n) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let v = n, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i ? `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]} (${n.toLocaleString()} bytes)` : `${n} bytes`;
}

// A descriptor fact as text: lists joined, the measured dtype speeds as "bfloat16 2.50x · float32 1.00x".
function factText(v, k) {
  if (k && k.endsWith("_bytes") && typeof v === "number") return fmtBytes(v);
  if (Array.isArray(v)) return v.length ? v.join(", ") : "none";
  if (typeof v === "object") return Object.entries(v).map(([k, r]) => `${k} ${Number(r).toFixed(2)}x`).join(" · ");
  return String(v);
}

async function platformView(ref, state) {
  const [platform, rules, cliffs, quality] = await Promise.all([
    api(`/v1/platforms/${ref}`), api(`/v1/platforms/${ref}/rules`),
    api(`/v1/platforms/${ref}/cliffs`, { op: state.op, dtype: state.dtype }), api(`/v1/platforms/${ref}/quality`),
  ]);
  const page = state.page || 0;
  const d = platform.descriptor;
  const facts = Object.entries(d).filter(([, v]) => v !== null && v !== undefined)
    .flatMap(([k, v]) => [el("dt", {}, k === "dtype_speed" ? "dtype_speed (GEMM time / float32's)" : k),
      el("dd", { class: k.endsWith("isa") ? "mono" : "", id: `fact-${k}` }, factText(v, k))]);
  const ruleRows = rules.map((r) => el("tr", {},
    el("td", {}, r.op), el("td", {}, r.dtype), el("td", {}, r.axis),
    el("td", {}, r.modulus ? el("span", { class: "pill" }, `% ${r.modulus}`) : el("span", { class: "muted" }, "none")),
    el("td", { class: "num" }, `${r.support} / ${r.curves}`),
    // worst_step_pct is the largest signed step: at or below 0 these curves only fall (get faster).
    el("td", { class: "num" }, r.worst_step_pct > 0 ? signedPct(r.worst_step_pct, 0) : "none"),
    el("td", {}, r.text)));
  const opSel = el("select", { id: "op-filter" }, ["", "gemm", "gemv", "sdpa", "lowrank", "mlp"].map((o) => el("option", { value: o, selected: o === (state.op || "") }, o || "any op")));
  const dtSel = el("select", { id: "dtype-filter" }, ["", "float16", "bfloat16", "float32"].map((o) => el("option", { value: o, selected: o === (state.dtype || "") }, o || "any dtype")));
  const refilter = () => goTo(`/p/${ref}`, { op: opSel.value, dtype: dtSel.value });
  opSel.addEventListener("change", refilter);
  dtSel.addEventListener("change", refilter);

  const visible = cliffs.slice(page * CURVES_PER_PAGE, (page + 1) * CURVES_PER_PAGE);
  const cards = visible.map((c) => {
    const usable = c.curve.points > 0; // else every row was flagged: nothing to plot, no noise to state
    const chart = usable ? el("div", { class: "chart", id: `curve-${c.curve.id}` }) : "";
    const card = el("div", { class: "card curve-card", "data-curve": c.curve.id },
      el("h3", {}, curveTitle(c.curve)),
      el("div", { class: "muted" },
        usable ? `${c.curve.points} dims (${c.curve.x_min}–${c.curve.x_max}), ${c.curve.measurements} measurements, noise ≈ ${c.noise_pct.toFixed(2)} %`
          : `no usable points, ${plural(c.curve.measurements, "measurement")}`,
        c.curve.flagged ? [" · ", el("span", { class: "pill bad flagged-count" }, `${c.curve.flagged} flagged, not plotted`)] : "",
        c.modulus ? [" · ", el("span", { class: "pill" }, `wants % ${c.modulus.m}`)] : "",
        " · ", downloadLink(`/v1/curves/${c.curve.id}/download?format=csv`, "CSV", `curve-${c.curve.id}.csv`),
        " · ", downloadLink(`/v1/curves/${c.curve.id}/download?format=json`, "JSON", `curve-${c.curve.id}.json`)),
      (c.notes || []).length ? el("div", { class: "muted curve-notes" }, c.notes.join("; ")) : "",
      chart, cliffList(c));
    if (usable) api(`/v1/curves/${c.curve.id}`).then((curve) => plotCurve(chart, curve, c)).catch((e) => chart.replaceWith(el("div", { class: "error" }, e.message)));
    return card;
  });
  show(
    el("h1", {}, platformName(platform)),
    el("p", { class: "muted" }, platform.label, " · ", el("span", { class: "mono" }, platform.fingerprint)),
    el("dl", { class: "kv" }, facts,
      el("dt", {}, "seen"), el("dd", {}, `${fmtDate(platform.first_seen)} – ${fmtDate(platform.last_seen)} (when the service heard from its agents; each run says when it was measured); ${plural(platform.runs, "run")} by ${plural(platform.agents, "agent")}`)),
    qualitySection(quality, platform),
    el("h2", {}, "Learned alignment rules"),
    rules.length ? table(["op", "dtype", "axis", "modulus", { label: "curves", num: 1 }, { label: "largest rise", num: 1 }, "what the data says"], ruleRows)
      : el("div", { class: "empty" }, "No curves measured yet."),
    el("h2", {}, `Curves (${cliffs.length})`),
    el("div", { class: "toolbar" }, opSel, dtSel),
    el("div", { class: "cards" }, cards),
    pager(page, cliffs.length, CURVES_PER_PAGE, (p) => goTo(`/p/${ref}`, { op: state.op, dtype: state.dtype, page: p })));
}

async function compareView(a, b, state) {
  const [pa, pb, pairs] = await Promise.all([api(`/v1/platforms/${a}`), api(`/v1/platforms/${b}`), api("/v1/compare/curves", { a, b })]);
  const header = [el("h1", {}, "Compare platforms"),
    el("p", {}, el("b", {}, "A: "), platformName(pa), " ", el("span", { class: "muted" }, pa.label), el("br"),
      el("b", {}, "B: "), platformName(pb), " ", el("span", { class: "muted" }, pb.label))];
  if (!pairs.length) {
    show(...header, el("div", { class: "empty" }, "These platforms have no sweep in common."));
    return;
  }
  // The sweep is named in the hash by its fields (not its place in the list, which new curves shift).
  const sweep = (p) => ({ op: p.op, dtype: p.dtype, axis: p.axis, fixed: p.fixed_key });
  const idx = Math.max(0, pairs.findIndex((p) => p.op === state.op && p.dtype === state.dtype && p.axis === state.axis && p.fixed_key === state.fixed));
  const sel = el("select", { id: "pair-select", onchange: (e) => goTo(`/compare/${a}/${b}`, sweep(pairs[Number(e.target.value)])) },
    pairs.map((p, i) => el("option", { value: i, selected: i === idx }, `${p.op} ${p.dtype} · ${p.axis} · ${p.fixed_key}`)));
  const pair = pairs[idx];
  const cmp = await api("/v1/compare", { a, b, op: pair.op, dtype: pair.dtype, axis: pair.axis, fixed: pair.fixed_key });
  const chart = el("div", { class: "chart tall", id: "compare-chart" });
  show(...header, el("div", { class: "toolbar" }, "sweep:", sel), el("div", { class: "card" }, chart,
    el("div", { class: "cards" },
      el("div", {}, el("b", {}, "A cliffs "), cmp.a.modulus ? el("span", { class: "pill" }, `% ${cmp.a.modulus.m}`) : "", cliffList(cmp.a)),
      el("div", {}, el("b", {}, "B cliffs "), cmp.b.modulus ? el("span", { class: "pill" }, `% ${cmp.b.modulus.m}`) : "", cliffList(cmp.b)))));
  const sa = cliffShapes(cmp.a.steps, "#2f6fde");
  const sb = cliffShapes(cmp.b.steps, "#e67e22");
  const ratio = cmp.points.filter((p) => p.ratio !== null);
  chart.dataset.steps = String(cmp.a.steps.length + cmp.b.steps.length);
  Plotly.newPlot(chart, [
    pointsTrace(cmp.a_points, `A ${platformName(pa)}`, "#2f6fde"),
    pointsTrace(cmp.b_points, `B ${platformName(pb)}`, "#e67e22"),
    { type: "scatter", mode: "lines", name: "B / A", x: ratio.map((p) => p.x), y: ratio.map((p) => p.ratio), yaxis: "y2",
      line: { color: "#98a2b3", width: 1 }, hovertemplate: "%{x}: B/A = %{y:.3f}<extra></extra>" },
  ], {
    margin: { l: 60, r: 60, t: 24, b: 40 }, hovermode: "closest", shapes: [...sa.shapes, ...sb.shapes],
    xaxis: { title: { text: plotText(pair.axis) } }, yaxis: { title: { text: "latency (µs)" }, rangemode: "tozero" },
    yaxis2: { title: { text: "B / A (time ratio)" }, overlaying: "y", side: "right", showgrid: false, ticksuffix: "×", tickformat: ".2f" },
    legend: { orientation: "h", y: -0.2 },
  }, PLOT_CONFIG);
}

// The platforms a page of alignments names (each fetched once); a platform that cannot be read
// (deleted, or refused) is left out and shown by its id.
async function platformsById(ids) {
  const distinct = [...new Set(ids.filter((id) => id !== null && id !== undefined))];
  const found = await Promise.all(distinct.map((id) => api(`/v1/platforms/${id}`).catch(() => null)));
  return new Map(distinct.map((id, i) => [id, found[i]]).filter(([, p]) => p));
}

const platformLink = (id, p) => el("a", { href: `#/p/${id}`, class: "platform-name", title: p ? `${p.label}\n${p.fingerprint}` : null },
  p ? platformName(p) : `platform ${id}`);

// "1,024 and 1 tokens": the token counts (GEMM rows) a workload's latencies are predicted at.
const tokensText = (tokens) => `${(tokens || []).map((t) => t.toLocaleString()).join(" and ")} token${(tokens || []).length === 1 && tokens[0] === 1 ? "" : "s"}`;

// `gac align --profile-missing` (or --enqueue-missing --wait) stores an alignment per round. A heuristic,
// on this page's rows only: an alignment is an earlier pass when a later one here has the same model,
// compressor, platform, workload (dtype, tokens), weights count and budget. Dimmed, not hidden: it may be a real re-run.
const passKey = (a) => JSON.stringify([a.model, a.compressor, a.platform_id, a.dtype, a.tokens, a.weights, a.budget]);
function earlierPasses(items) {
  const latest = new Map();
  for (const a of items) {
    const t = Date.parse(a.created_at);
    if (!(latest.get(passKey(a)) >= t)) latest.set(passKey(a), t);
  }
  return new Set(items.filter((a) => Date.parse(a.created_at) < latest.get(passKey(a))));
}

async function alignmentsView(state) {
  const page = state.page || 0;
  const data = await api("/v1/alignments", { limit: PAGE, cursor: page * PAGE });
  const platforms = await platformsById(data.items.map((a) => a.platform_id));
  const earlier = earlierPasses(data.items);
  const rows = data.items.map((a) => {
    const speedup = a.predicted_unaligned_us && a.predicted_aligned_us ? a.predicted_unaligned_us / a.predicted_aligned_us : null;
    return el("tr", { class: earlier.has(a) ? "earlier-pass" : "" },
      el("td", {}, el("a", { href: `#/alignments/${a.id}` }, a.model),
        earlier.has(a) ? [" ", el("span", { class: "pill", title: "a later alignment on this page has the same model, compressor, platform, workload, weights and budget" }, "earlier pass")] : ""),
      el("td", {}, a.compressor || "–"),
      el("td", {}, a.platform_id ? platformLink(a.platform_id, platforms.get(a.platform_id)) : el("span", { class: "muted" }, "rules only")),
      el("td", {}, a.dtype ? `${a.dtype} · ${tokensText(a.tokens)}` : el("span", { class: "muted" }, "–")),
      el("td", { class: "num" }, a.weights),
      el("td", { class: "num" }, `${pct(a.aligned_share_before)} → ${pct(a.aligned_share_after)}`),
      el("td", { class: "num" }, `${fmtUs(a.predicted_unaligned_us)} → ${fmtUs(a.predicted_aligned_us)}`),
      el("td", { class: "num" }, speedup ? el("span", { class: speedup >= 1 ? "pill good" : "pill bad" }, `${speedup.toFixed(2)}×`) : "–"),
      el("td", {}, fmtDate(a.created_at)));
  });
  show(el("h1", {}, "Alignments"),
    el("p", { class: "muted" }, "Manifests aligned by POST /v1/align or `gac align`; latencies are predicted from the measured curves."),
    data.items.length ? table(["model", "compressor", "platform", "workload", { label: "weights", num: 1 }, { label: "aligned", num: 1 }, { label: "predicted latency", num: 1 }, { label: "speed-up", num: 1 }, "when"], rows)
      : el("div", { class: "empty" }, `No alignments yet: \`gac align manifest.json --server ${location.origin}\` stores one here (without --server, \`gac align\` keeps it in its local database).`),
    pager(page, data.total, PAGE, (p) => goTo("/alignments", { page: p })));
}

// ---------- an alignment's speed/importance frontier ----------
const pctKept = (v) => `${(100 * v).toFixed(1)} %`;
const fmtX = (v) => `${v.toFixed(2)}×`;
const fmtParams = (v) => Math.round(v).toLocaleString();

// The chart's y scale is the solver's importance_kept (solver/align.py): V(dims) / V(importance-only
// dims), where V(dims) = sum over weights of importance x params at those dims. An `objective` (the
// result's, or a baseline's) is V(dims) - V(compressor's dims), and V of the chosen dims is
// sum(weight.importance x weight.params), so V at the compressor's own dims is that minus the result's
// objective, and every absolute objective maps onto the relative scale. Null when the result does not
// carry the importances (older results) or every importance is 0.
function keptScale(r) {
  const lat = r.latency || {};
  const vChosen = (r.weights || []).reduce((s, w) => s + (w.importance || 0) * w.params, 0);
  const vCompressor = vChosen - r.objective;
  const io = (r.baselines || []).find((b) => b.method === "importance-only");
  let vRef = null;
  if (io) vRef = io.objective + vCompressor;
  else if ((r.objective_kind || "importance") === "importance") vRef = vChosen; // the choice is that optimum
  else if (lat.importance_kept > 0) vRef = vChosen / lat.importance_kept;
  if (!(vChosen > 0 && vRef > 0 && vCompressor > 0)) return null;
  return { of: (objective) => (objective + vCompressor) / vRef, compressor: vCompressor / vRef };
}

// Why a frontier point can keep more than 100 % of the importance-only optimum's importance: that
// optimum (the paper's objective) chooses among each window's cliff-free dims only, while the
// frontier may take any measured dim (solver/align.py, _align_for_latency).
const KEPT_ABOVE_100 = "Importance kept is relative to the importance-only optimum, which picks only cliff-free dims "
  + "(a dim no larger dim is as fast as). Frontier points may use any measured dim: a smaller, slower dim frees "
  + "parameters for other weights, so a point can keep more than 100 %, at a latency cost.";

// "97–128, 131" for a sorted list of dims.
const MAX_RUNS = 40; // runs of dims shown per missing curve: a sparse first pass lists hundreds (the JSON has them all)
function dimRanges(dims) {
  const out = [];
  for (let i = 0; i < dims.length; ) {
    let j = i;
    while (j + 1 < dims.length && dims[j + 1] === dims[j] + 1) j++;
    out.push(j > i ? `${dims[i]}–${dims[j]}` : String(dims[i]));
    i = j + 1;
  }
  // "ranges", not "runs": a run here is a profiling run.
  return out.length > MAX_RUNS ? `${out.slice(0, MAX_RUNS).join(", ")}, … ${(out.length - MAX_RUNS).toLocaleString()} more ranges` : out.join(", ");
}

// The weights a missing curve is for: a few names, the rest folded (a model's layers share curves,
// so one curve can name hundreds of weights and push the job's link off the screen).
const NAMED_ITEMS = 3;
function itemNames(items) {
  if (items.length <= NAMED_ITEMS + 1) return [" for ", el("span", { class: "mono" }, items.join(", "))];
  return [` for ${items.length.toLocaleString()} weights: `, el("span", { class: "mono" }, items.slice(0, NAMED_ITEMS).join(", ")),
    el("details", { class: "all-items" }, el("summary", {}, `${(items.length - NAMED_ITEMS).toLocaleString()} more`),
      el("span", { class: "mono" }, items.slice(NAMED_ITEMS).join(", ")))];
}

// Whether an alignment lacks points or queued a job for them. Its prediction may still be complete (every
// weight priced at its original, the compressor's and the chosen dim) while dims it would weigh (window,
// look-ahead) are unmeasured: aligned again with them, it may choose other dims and predict another speed-up.
const lacksPoints = (stored) => (stored.result.latency || {}).missing_points > 0 || (stored.result.missing || []).length > 0 || (stored.jobs || []).length > 0;

// What the alignment lacks: the count, then each missing curve and the weights that need it.
function missingNotice(stored) {
  const r = stored.result;
  const lat = r.latency || {};
  const missing = r.missing || [];
  const rules = r.rule_items || [];
  const badFrontier = (r.frontier || []).filter((p) => !(p.latency_us > 0)).length;
  const provisional = lat.complete && !badFrontier;
  const what = [];
  if (lat.missing_points) what.push(`${lat.missing_points.toLocaleString()} curve point${lat.missing_points === 1 ? "" : "s"} missing`);
  if (rules.length) what.push(`${rules.length.toLocaleString()} weight${rules.length === 1 ? "" : "s"} without any measured curve (rule candidates)`);
  if (badFrontier) what.push(`${badFrontier} frontier point${badFrontier === 1 ? "" : "s"} without a latency`);
  const curves = missing.map((m) => {
    const fixed = Object.entries(m.fixed_shape || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    const dims = [...(m.dims || [])].sort((a, b) => a - b);
    return el("li", {},
      el("span", { class: "mono" }, `${m.op} ${m.dtype}, ${m.axis} swept at ${fixed}`),
      `: ${dims.length.toLocaleString()} dim${dims.length === 1 ? "" : "s"} (${dimRanges(dims)})`,
      m.items && m.items.length ? itemNames(m.items) : "",
      m.reasons && m.reasons.length ? el("span", { class: "muted" }, ` · ${m.reasons.join(", ")}`) : "",
      m.estimated_seconds !== null && m.estimated_seconds !== undefined ? el("span", { class: "muted" }, ` · ≈ ${m.estimated_seconds.toFixed(1)} s to profile`) : "");
  });
  const lead = provisional
    ? [el("b", {}, "Provisional"), `: ${what.length ? what.join("; ") : "some points are missing"}. `,
      "The prediction prices every weight at its chosen, original and compressor's dims, but dims the alignment would weigh "
        + "are not measured yet: aligned again once they are, it may choose other dims and predict another speed-up. "]
    : [el("b", {}, "Predicted latency is incomplete"), `: ${what.length ? what.join("; ") : "some points are missing"}. `,
      "No chart is drawn rather than one with gaps. "];
  return el("div", { class: `notice${provisional ? " provisional" : ""}`, id: "frontier-missing" },
    ...lead,
    "To measure them: `gac align MANIFEST --profile-missing` on the platform's machine, "
      + "or `gac align MANIFEST --server URL --enqueue-missing --wait` to queue a job for its agents; the alignment is then made again.",
    curves.length ? el("ul", { class: "missing" }, curves) : "",
    rules.length ? el("p", {}, "Weights on rule candidates: ", el("span", { class: "mono" }, rules.join(", "))) : "",
    stored.jobs && stored.jobs.length ? el("p", {}, `Profiling job${stored.jobs.length === 1 ? "" : "s"} queued: `,
      stored.jobs.flatMap((j, i) => [i ? ", " : "", el("a", { href: `#/jobs/${j}` }, `#${j}`)]), " (each link shows its state)") : "");
}

// "predicted unaligned X µs → GAC Y µs (Z×), keeping W % of the importance-only optimum's importance"
function frontierSummary(r) {
  const lat = r.latency || {};
  if (!lat.complete || !(lat.unaligned_us > 0) || !(lat.aligned_us > 0)) return null;
  const scale = keptScale(r);
  const kept = lat.importance_kept ?? (scale ? scale.of(r.objective) : null);
  const speedup = lat.speedup ?? lat.unaligned_us / lat.aligned_us;
  return el("p", { class: "summary", id: "frontier-summary" },
    `predicted unaligned ${fmtUs(lat.unaligned_us)} → GAC `, el("b", {}, fmtUs(lat.aligned_us)),
    ` (${fmtX(speedup)})`,
    kept !== null ? `, keeping ${pctKept(kept)} of the importance-only optimum's importance` : "");
}

// The section above the weights: the summary line, then the chart, or why there is none.
// Returns the nodes and a function drawing the chart once they are in the page (Plotly sizes to them).
function frontierSection(stored) {
  const r = stored.result;
  const lat = r.latency || {};
  const frontier = r.frontier || [];
  const nodes = [el("h2", {}, "Speed / importance frontier")];
  const measured = lat.complete || lat.missing_points > 0 || (r.missing || []).length > 0 || (r.rule_items || []).length > 0;
  if (r.platform === "rules only" || !measured) {
    nodes.push(el("div", { class: "empty", id: "frontier-none" },
      `No predicted latency: aligned by the rule d % ${r.align} == 0 alone, without a platform's measured curves, so there is no frontier to plot.`));
    return { nodes, draw: () => {} };
  }
  const summary = frontierSummary(r);
  if (summary) nodes.push(summary);
  if (!lat.complete || frontier.some((p) => !(p.latency_us > 0))) {
    nodes.push(missingNotice(stored));
    return { nodes, draw: () => {} };
  }
  if (lacksPoints(stored)) nodes.push(missingNotice(stored)); // complete, and still provisional
  if (!frontier.length) {
    nodes.push(el("div", { class: "empty", id: "frontier-none" },
      `No frontier stored for this alignment (objective "${r.objective_kind || "importance"}"): align with "objective": "frontier" to see the whole trade-off.`));
    return { nodes, draw: () => {} };
  }
  const chart = el("div", { class: "chart tall", id: "frontier-chart" });
  nodes.push(el("div", { class: "card" }, chart, el("p", { class: "muted axis-note", id: "frontier-axis-note" }, KEPT_ABOVE_100)));
  return { nodes, draw: () => plotFrontier(chart, r) };
}

function plotFrontier(div, r) {
  const lat = r.latency;
  const scale = keptScale(r);
  const unaligned = lat.unaligned_us;
  const kind = r.objective_kind || "importance";
  // customdata per point: [params, speed-up vs unaligned, a note]; every string here is ours, not user data.
  const info = (us, params, note) => [
    params === null || params === undefined ? "–" : fmtParams(params),
    unaligned > 0 && us > 0 ? `${fmtX(unaligned / us)} vs unaligned` : "–",
    note ? ` · ${note}` : "",
  ];
  const hover = (label) => `<b>${plotText(label)}</b><br>%{x:.1f} µs · %{y:.1f} % of the importance-only optimum's importance`
    + "<br>%{customdata[0]} params · %{customdata[1]}%{customdata[2]}<extra></extra>";
  const marker = (label, pts, style) => ({
    type: "scatter", mode: "markers", name: plotText(label), x: pts.map((p) => p.us), y: pts.map((p) => 100 * p.kept),
    customdata: pts.map((p) => info(p.us, p.params, p.note)), hovertemplate: hover(label), marker: style, cliponaxis: false,
  });

  const points = [...r.frontier].sort((a, b) => a.latency_us - b.latency_us || a.importance_kept - b.importance_kept);
  const traces = [{
    type: "scatter", mode: "lines+markers", name: "frontier", line: { shape: "hv", color: "#2f6fde", width: 2 },
    marker: { color: "#2f6fde", size: 6 }, x: points.map((p) => p.latency_us), y: points.map((p) => 100 * p.importance_kept),
    customdata: points.map((p) => info(p.latency_us, p.params, p.chosen ? "chosen" : "")), hovertemplate: hover("frontier"),
  }];

  const io = (r.baselines || []).find((b) => b.method === "importance-only");
  const ioUs = lat.importance_only_us ?? (io ? io.latency_us : kind === "importance" ? lat.aligned_us : null);
  if (ioUs > 0) {
    traces.push(marker("importance-only optimum", [{ us: ioUs, kept: 1, params: io ? io.total_params : kind === "importance" ? r.total_params : null }],
      { symbol: "circle-open", size: 18, color: "#7a5af8", line: { width: 2.5 } }));
  }
  const nearest = (r.baselines || []).find((b) => b.method === "nearest-8");
  if (nearest && nearest.latency_us > 0 && scale) {
    traces.push(marker("round to 8 (nearest)", [{ us: nearest.latency_us, kept: scale.of(nearest.objective), params: nearest.total_params,
      note: nearest.within_budget ? "" : "over the budget" }], { symbol: "square", size: 11, color: "#e67e22", line: { color: "#fff", width: 1 } }));
  }
  const shapes = [];
  const notes = [];
  if (unaligned > 0 && scale) {
    traces.push(marker("unaligned (compressor's dims)", [{ us: unaligned, kept: scale.compressor, params: r.unaligned_params }],
      { symbol: "x", size: 12, color: "#d92d20", line: { color: "#fff", width: 1 } }));
  } else if (unaligned > 0) {
    // Its kept importance is not in this result: a line at its latency, no invented y.
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: unaligned, x1: unaligned, y0: 0, y1: 1, line: { color: "#d92d20", width: 1.5, dash: "dash" } });
    notes.push({ x: unaligned, y: 1, xref: "x", yref: "paper", yanchor: "bottom", showarrow: false, text: "unaligned", font: { color: "#d92d20", size: 11 } });
  }
  if (kind !== "importance" && r.epsilon !== null && r.epsilon !== undefined) {
    const floor = 100 * (1 - r.epsilon);
    shapes.push({ type: "line", xref: "paper", yref: "y", x0: 0, x1: 1, y0: floor, y1: floor, line: { color: "#98a2b3", width: 1, dash: "dot" } });
    notes.push({ x: 0, y: floor, xref: "paper", yref: "y", xanchor: "left", yanchor: "bottom", showarrow: false,
      text: `keep ≥ ${floor.toFixed(1)} % (ε = ${r.epsilon})`, font: { color: "#667085", size: 10 } });
  }
  const chosen = points.find((p) => p.chosen);
  const pick = chosen ? { us: chosen.latency_us, kept: chosen.importance_kept, params: chosen.params }
    : { us: lat.aligned_us, kept: lat.importance_kept ?? (scale ? scale.of(r.objective) : null), params: r.total_params };
  if (pick.us > 0 && pick.kept !== null && pick.kept !== undefined) {
    traces.push(marker("GAC (chosen)", [pick], { symbol: "star", size: 17, color: "#079455", line: { color: "#fff", width: 1 } }));
  }
  div.dataset.points = String(points.length);
  return Plotly.newPlot(div, traces, {
    margin: { l: 70, r: 20, t: 28, b: 50 }, hovermode: "closest", shapes, annotations: notes,
    xaxis: { title: { text: "predicted latency of the compressed weights (µs)" }, ticksuffix: " µs", zeroline: false, automargin: true },
    // Two short lines rather than one long one: a single line was longer than the chart is tall
    // and was clipped. The second says why a point can pass 100 % (KEPT_ABOVE_100).
    yaxis: { title: { text: "importance kept, % of the importance-only optimum<br>above 100 %: also dims that optimum skips", font: { size: 12 } },
      ticksuffix: " %", zeroline: false, automargin: true },
    legend: { orientation: "h", y: -0.22 },
  }, PLOT_CONFIG);
}

// "bfloat16 at 1,024 and 1 tokens (weighted 1 : 4)": what an alignment's latencies are predicted for.
function workloadText(w) {
  if (!w) return "–";
  const weights = w.token_weights && w.token_weights.length > 1 ? ` (weighted ${w.token_weights.join(" : ")})` : "";
  return `${w.dtype || "float16"} at ${tokensText(w.tokens)}${weights}`;
}

async function alignmentView(id) {
  const stored = await api(`/v1/alignments/${id}`);
  const platform = (await platformsById([stored.platform_id])).get(stored.platform_id);
  const r = stored.result;
  const lat = r.latency || {};
  const cc = r.solver.cross_check;
  const weightRow = (w) => {
    const chosen = w.candidates.find((c) => c.dim === w.dim) || {};
    return el("tr", {},
      el("td", { class: "mono" }, w.name), el("td", { class: "num" }, w.dim_before),
      el("td", { class: "num" }, el("b", {}, w.dim)), el("td", { class: "num" }, w.params.toLocaleString()),
      el("td", {}, chosen.source || "–"), el("td", { class: "num" }, fmtUs(w.latency_before_us)), el("td", { class: "num" }, fmtUs(w.latency_us)),
      el("td", { class: "mono muted" }, w.candidates.map((c) => c.dim).join(" ")));
  };
  // The first WEIGHT_ROWS, the rest on request: 5,000 weights' rows took the page 2.7 s to build.
  const weights = table(["weight", { label: "before", num: 1 }, { label: "after", num: 1 }, { label: "params", num: 1 }, "source", { label: "latency before", num: 1 }, { label: "latency after", num: 1 }, "candidates"],
    r.weights.slice(0, WEIGHT_ROWS).map(weightRow));
  const rest = r.weights.length - WEIGHT_ROWS;
  const showAll = rest > 0 ? el("button", {
    class: "secondary", id: "all-weights",
    onclick: (ev) => { weights.querySelector("tbody").append(...r.weights.slice(WEIGHT_ROWS).map(weightRow)); ev.target.remove(); },
  }, `show the other ${rest.toLocaleString()} weights`) : "";
  const section = frontierSection(stored);
  const kind = r.objective_kind || "importance";
  const rulesOnly = r.platform === "rules only";
  // A platform with no curves in the workload's dtype prices nothing: every dim comes from the rule, as with no platform.
  const unpriced = !rulesOnly && r.weights.every((w) => w.candidates.every((c) => c.source === "rule"));
  const dtype = (r.workload || {}).dtype;
  const measuredIn = platform && platform.dtypes && platform.dtypes.length
    ? `; its curves are in ${platform.dtypes.join(", ")} (\`gac align --dtype\`, or ?dtype= on POST /v1/align)` : "";
  const keeping = `keeping ≥ ${pctKept(1 - (r.epsilon ?? 0))} of the importance-only optimum's importance`;
  const objective = kind === "importance" ? "importance (the paper's)"
    : kind === "frontier" ? `frontier: every trade-off point of predicted latency against importance kept (${plural((r.frontier || []).length, "point")}); chose the fastest ${keeping}`
    : `${kind}: the fastest choice ${keeping}`;
  show(el("h1", {}, `${r.model}`),
    el("dl", { class: "kv" },
      el("dt", {}, "platform"), el("dd", {}, stored.platform_id
        ? [platformLink(stored.platform_id, platform), " ", el("span", { class: "mono muted" }, r.platform)] : r.platform),
      el("dt", {}, "workload"), el("dd", { id: "workload" }, workloadText(r.workload || (stored.manifest || {}).workload)),
      el("dt", {}, "budget"), el("dd", {}, `${r.budget.toLocaleString()} params; used ${r.total_params.toLocaleString()}`),
      el("dt", {}, "objective"), el("dd", { id: "objective" }, objective),
      el("dt", {}, `multiples of ${r.align}`), el("dd", { id: "aligned-share" }, `${pct(r.aligned_share_before)} → ${pct(r.aligned_share_after)} of the dims `,
        el("span", { class: "muted" }, rulesOnly ? `(rules only: GAC picks multiples of ${r.align}, with no platform's measurements)`
          : unpriced ? `(GAC picks multiples of ${r.align}: this platform has no measurements in ${dtype || "this dtype"} near these dims)`
          : "(GAC picks the dims this platform runs fastest, multiples or not)")),
      el("dt", {}, "predicted"), el("dd", { id: "predicted" }, rulesOnly ? "no latency data (rules only)"
        : unpriced ? `no latency data: nothing measured in ${dtype || "this dtype"} near these dims on this platform${measuredIn}`
        : [`original ${fmtUs(lat.original_us)}, unaligned ${fmtUs(lat.unaligned_us)}, aligned ${fmtUs(lat.aligned_us)}${!lat.complete ? " (partial data)" : lacksPoints(stored) ? " (provisional: points missing, see below)" : ""}`,
          // These and the weights' latencies are the curve model's fitted values: they differ from a sum of the raw medians.
          el("div", { class: "muted", id: "predicted-note" }, "predicted from the curve model's estimates (denoised), not raw medians; so are the weights' latencies below")]),
      el("dt", {}, "solver"), el("dd", {}, `${r.solver.method}, ${(1000 * r.solver.seconds).toFixed(1)} ms; cross-check ${cc.method} ${cc.status}${cc.agrees === true ? ", agrees" : cc.agrees === false ? ", DISAGREES" : ""}`),
      el("dt", {}, "warnings"), el("dd", {}, r.warnings.length ? r.warnings.join("; ") : "none")),
    ...section.nodes,
    el("h2", {}, "Weights"), weights, showAll);
  await section.draw();
}

// ---------- the profiling queue ----------
const JOB_STATE = { queued: "", leased: "good", done: "good", failed: "bad", cancelled: "bad" };

// A platform's device as `gac jobs list` names it: "NVIDIA H100 80GB HBM3", "AMD EPYC, 1 thread"
// (two thread counts of one CPU are two platforms).
function deviceText(p) {
  const d = p.descriptor || {};
  const threads = d.device_kind === "cpu" && d.threads ? `, ${plural(d.threads, "thread")}` : "";
  return `${d.device_name || p.label}${threads}`;
}

// Which agents may take a job: a platform (its page, and its device where the service knows it),
// or any device of a kind and name.
function jobFor(m, platforms) {
  if (m.fingerprint) {
    const p = platforms.get(m.fingerprint);
    return [el("a", { href: `#/p/${m.fingerprint}`, class: "mono" }, m.fingerprint.slice(0, 12)),
      p ? el("span", { class: "job-device" }, ` (${deviceText(p)})`) : ""];
  }
  return [m.device_kind, m.device_name].filter(Boolean).join(" ") || "any agent";
}

// Points done of the job's total; a done job's points stored only flagged (kept out of curves) said too.
const jobPoints = (j) => `${j.points_done ?? "–"} / ${j.points.toLocaleString()}${j.points_flagged ? ` (${j.points_flagged} flagged)` : ""}`;

// The agent: the lease holder until when while leased; who held it on a done job. The service
// sends lease_owner only to a reader with a token.
function jobAgent(j) {
  if (j.status === "leased") return [j.lease_owner || "an agent", el("span", { class: "muted" }, ` until ${fmtDate(j.lease_expires_at)}`)];
  return j.lease_owner || "–";
}

async function jobsView(state) {
  // The queue pages by cursor (the last job id of the page before): the hash keeps each page's, so a
  // page can be bookmarked and Back turns back (#/jobs?at=25,50 is page 3).
  const trail = String(state.at || "").split(",").filter(Boolean);
  const page = trail.length;
  // One job (#/jobs/7, an alignment's link), else the queue, oldest first.
  const data = state.only ? { items: [await api(`/v1/jobs/${state.only}`)], total: 1 }
    : await api("/v1/jobs", { limit: PAGE, cursor: trail.length ? trail[trail.length - 1] : undefined });
  const turn = (p) => goTo("/jobs", { at: (p > page ? [...trail, data.next_cursor] : trail.slice(0, p)).join(",") });
  const platforms = await platformsById(data.items.map((j) => j.match.fingerprint)); // once per distinct platform
  const rows = data.items.map((j) => el("tr", { id: `job-${j.id}` },
    el("td", { class: "num" }, `#${j.id}`),
    el("td", {}, el("span", { class: `pill ${JOB_STATE[j.status] || ""}` }, j.status)),
    el("td", { class: "num" }, jobPoints(j)),
    el("td", {}, j.plan_name),
    el("td", {}, jobFor(j.match, platforms)),
    el("td", { class: "num" }, `${j.attempts} / ${j.max_attempts}`),
    el("td", {}, jobAgent(j)),
    el("td", {}, fmtDate(j.created_at)),
    el("td", {}, fmtDate(j.finished_at)),
    el("td", { class: j.error ? "" : "muted" }, j.error ? `${j.status === "leased" ? "earlier attempt: " : ""}${j.error}` : "–")));
  show(el("h1", {}, "Profiling jobs"),
    el("p", { class: "muted" }, "Points an alignment lacks, queued for the platform's agents (`gac agent run --jobs` there measures them); "
      + "points done of the job's total, as of the agent's last heartbeat while it runs; on a done job, those stored only "
      + "flagged by the agent's quality gate are counted apart (no curve uses them; the next alignment asks for them again)."),
    data.items.length ? table([{ label: "job", num: 1 }, "state", { label: "points", num: 1 }, "plan", "for", { label: "tries", num: 1 }, "agent", "queued", "finished", "error"], rows)
      : el("div", { class: "empty" }, "No profiling jobs: `gac align MANIFEST --server URL --enqueue-missing` queues the points an alignment lacks."),
    state.only ? el("p", {}, el("a", { href: "#/jobs" }, "every job")) : pager(page, data.total, PAGE, turn));
}

// ---------- router ----------
// A view's filters and page live in the hash's query (#/p/FP?op=sdpa&page=2), so a URL can be
// bookmarked and shared, and Back undoes a filter or a page turn.
function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const q = hash.indexOf("?");
  const parts = (q < 0 ? hash : hash.slice(0, q)).split("/").filter(Boolean).map(decodeURIComponent);
  const state = Object.fromEntries(new URLSearchParams(q < 0 ? "" : hash.slice(q + 1)));
  // Pages are counted from 1 in the URL, from 0 in the views.
  state.page = Math.max(0, (parseInt(state.page, 10) || 1) - 1);
  let done;
  if (parts[0] === "p" && parts[1]) done = platformView(parts[1], state);
  else if (parts[0] === "compare" && parts[1] && parts[2]) done = compareView(parts[1], parts[2], state);
  else if (parts[0] === "alignments" && parts[1]) done = alignmentView(parts[1]);
  else if (parts[0] === "alignments") done = alignmentsView(state);
  else if (parts[0] === "jobs") done = jobsView({ only: parts[1], at: state.at });
  else done = platformsView(state);
  show(el("p", { class: "muted" }, "loading…"));
  done.catch(fail);
}

window.addEventListener("hashchange", route);
route();
