// backflip UI: sortable tables, interactive curves (uPlot), live progress. No build step.
// Each page gets its data from the JSON in <script id="boot">; the live server also answers
// /api/... for updates, the static report embeds everything.
"use strict";

const BOOT = JSON.parse(document.getElementById("boot").textContent || "{}");
const LIVE = document.body.dataset.live === "true";
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#17becf", "#bcbd22", "#7f7f7f"];
const POLL_MS = 1500;

function $(sel, root = document) { return root.querySelector(sel); }
function $$(sel, root = document) { return Array.from(root.querySelectorAll(sel)); }
function fmt(x, digits = 1) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
}
function int(x) { return x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US"); }
function duration(s) {
  if (s === null || s === undefined) return "-";
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function shortNum(v) {
  if (v === null || v === undefined) return "";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
  if (a !== 0 && a < 1e-2) return v.toExponential(0);
  return String(+v.toPrecision(3));
}
async function getJSON(url) {
  const r = await fetch(url, {credentials: "same-origin", cache: "no-store"});
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}
function slug(name) { return "m-" + String(name).replace(/[^A-Za-z0-9_-]/g, "-"); }

// --- tables ------------------------------------------------------------------------------------

function makeSortable(table) {
  $$("thead th[data-key]", table).forEach((th, _) => {
    th.addEventListener("click", () => {
      const col = Array.from(th.parentNode.children).indexOf(th);
      const desc = !th.classList.contains("sorted-desc");
      $$("thead th", table).forEach(h => h.classList.remove("sorted-asc", "sorted-desc"));
      th.classList.add(desc ? "sorted-desc" : "sorted-asc");
      const rows = $$("tbody tr", table);
      const key = tr => {
        const td = tr.children[col];
        const v = td ? (td.dataset.v ?? td.textContent.trim()) : "";
        // A number only when the whole cell is one: a run id such as 20261130-031210-5283 is
        // text (parseFloat read its date alone, so two runs of one day tied and kept their order).
        const n = Number(v);
        return v !== "" && Number.isFinite(n) ? n : v.toLowerCase();
      };
      rows.sort((a, b) => {
        const x = key(a), y = key(b);
        if (x === y) return 0;
        if (x === "") return 1;
        if (y === "") return -1;
        return (x < y ? -1 : 1) * (desc ? -1 : 1);
      });
      const body = $("tbody", table);
      rows.forEach(r => body.appendChild(r));
    });
  });
}

function autosubmit() {
  $$("select[data-autosubmit]").forEach(s => s.addEventListener("change", () => s.form.submit()));
}

// --- plots -------------------------------------------------------------------------------------

function markerPlugin(steps) {
  return {
    hooks: {
      draw: u => {
        const ctx = u.ctx, {top, height} = u.bbox;
        ctx.save();
        ctx.lineWidth = 2 * devicePixelRatio;
        ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
        for (const m of u._markers || steps) {
          const x = u.valToPos(m.step, "x", true);
          if (!Number.isFinite(x)) continue;
          ctx.strokeStyle = m.active ? "#b00020" : "rgba(200,0,40,0.55)";
          ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
        }
        ctx.restore();
      },
    },
  };
}

function plotWidth(el) { return Math.max(260, Math.floor(el.clientWidth || 400)); }

// A curve from backflip.curves: {step, iqm, low, high, n, no_interval, [values, seeds]}.
// Few points (one, after a single metrics row) are drawn as dots: a line needs two.
function fewPoints(c) { return c.step.length < 40; }

// uPlot cannot size an axis from one value: give a single step some room on both sides.
function xScale() {
  return {time: false, range: (u, min, max) => min === max ? [min - 1, max + 1] : [min, max]};
}

// One metric of one run: a thin line per seed, the IQM bold, its interval shaded.
function runChart(el, name, c, markers) {
  const seeds = c.seeds.map(String);
  const series = [{label: "step", value: (u, v) => v === null ? "–" : int(v)}];
  const data = [c.step];
  seeds.forEach((s, i) => {
    series.push({label: `seed ${s}`, stroke: PALETTE[i % PALETTE.length], width: 1, spanGaps: true,
      points: {show: fewPoints(c)}});
    data.push(c.values[i]);
  });
  const bands = [];
  if (seeds.length > 1) {
    series.push({label: "IQM", stroke: "#111", width: 2.2, spanGaps: true, points: {show: fewPoints(c)}});
    data.push(c.iqm);
    if (c.high.some(v => v !== null)) {
      series.push({label: "CI high", stroke: "rgba(0,0,0,0.25)", width: 0.5, spanGaps: true, points: {show: false}});
      series.push({label: "CI low", stroke: "rgba(0,0,0,0.25)", width: 0.5, spanGaps: true, points: {show: false}});
      data.push(c.high, c.low);
      bands.push({series: [data.length - 2, data.length - 1], fill: "rgba(0,0,0,0.10)"});
    }
  }
  const opts = {
    width: plotWidth(el), height: 200,
    scales: {x: xScale()},
    series, bands,
    axes: [{values: (u, vals) => vals.map(shortNum), size: 30}, {values: (u, vals) => vals.map(shortNum), size: 46}],
    cursor: {drag: {x: true, y: false}},
    legend: {live: true},
    plugins: [markerPlugin(markers || [])],
  };
  el.innerHTML = "";
  const u = new uPlot(opts, data, el);
  u._markers = markers || [];
  return u;
}

const charts = {};

function findingMarkers() {
  const byMetric = {};
  $$(".finding-link").forEach(a => {
    const step = a.dataset.step === "" ? null : Number(a.dataset.step);
    if (step === null) return;
    (byMetric[a.dataset.metric] ||= []).push({step, active: false});
  });
  return byMetric;
}

function renderRunCurves(data) {
  const box = $("#plots");
  if (!box) return;
  const markers = findingMarkers();
  if (!data.names.length) {
    box.innerHTML = '<p class="muted" id="plots-loading">No metrics logged yet.</p>';
    return;
  }
  $("#plots-loading")?.remove();
  // the data layer decides the sections, their order and each chart's note (ui/data.py)
  const notes = data.notes || {};
  for (const group of data.groups || groupByPrefix(data.names)) {
    let grid = $(`.plot-group[data-group="${CSS.escape(group.key)}"] .grid`, box);
    for (const name of group.names) {
      const old = charts[name];
      if (old && layoutKey(old._curve) === layoutKey(data.curves[name])) {
        old.setData(rebuildData(old, data.curves[name]));
        old._curve = data.curves[name];
        continue;
      }
      if (old) {  // a seed appeared, or the interval did: draw the chart again with its series
        const body = old.root.parentElement;
        old.destroy();
        charts[name] = runChart(body, name, data.curves[name], markers[name]);
        charts[name]._curve = data.curves[name];
        continue;
      }
      if (!grid) {
        const sec = document.createElement("div");
        sec.className = "plot-group"; sec.dataset.group = group.key;
        const h = document.createElement("h3");
        h.textContent = group.title;
        grid = document.createElement("div");
        grid.className = "grid";
        sec.append(h, grid);
        box.appendChild(sec);
      }
      const card = document.createElement("div");
      card.className = "plot"; card.id = slug(name);
      const title = document.createElement("div");
      title.className = "plot-title";
      title.textContent = name;
      if (notes[name]) {
        const note = document.createElement("span");
        note.className = "plot-note";
        note.textContent = notes[name];
        title.append(" ", note);
      }
      if (data.curves[name].no_interval) {
        const note = document.createElement("span");
        note.className = "muted no-interval";
        note.textContent = ` (${data.curves[name].no_interval})`;
        title.appendChild(note);
      }
      const body = document.createElement("div");
      body.className = "plot-body";
      card.append(title, body);
      grid.appendChild(card);
      charts[name] = runChart(body, name, data.curves[name], markers[name]);
      charts[name]._curve = data.curves[name];
    }
  }
}

function groupByPrefix(names) {
  // curves from a server without `groups`: one section per name prefix, in the given order
  const out = [];
  for (const name of names) {
    const key = name.includes("/") ? name.split("/")[0] : "other";
    if (!out.length || out[out.length - 1].key !== key) out.push({key, title: `${key}/`, names: []});
    out[out.length - 1].names.push(name);
  }
  return out;
}

// The series runChart draws for a curve: its seeds, and whether an IQM and an interval go with them.
function layoutKey(c) {
  return `${c.seeds.join(",")}|${c.seeds.length > 1 && c.high.some(v => v !== null)}`;
}

function rebuildData(u, c) {
  // same series layout as runChart (layoutKey equal): x, seeds..., [iqm, [high, low]]
  const data = [c.step, ...c.values];
  if (u.series.length > c.seeds.length + 1) data.push(c.iqm);
  if (u.series.length > c.seeds.length + 2) data.push(c.high, c.low);
  return data;
}

// Sections of this page drawn again from the server's own rendering (the template stays the one
// owner of their markup): the doctor's findings once the run has ended.
async function refreshSections(ids) {
  const r = await fetch(location.pathname, {credentials: "same-origin", cache: "no-store"});
  if (!r.ok) throw new Error(`${location.pathname}: HTTP ${r.status}`);
  const fresh = new DOMParser().parseFromString(await r.text(), "text/html");
  for (const id of ids) {
    const now = document.getElementById(id), next = fresh.getElementById(id);
    if (now && next) now.replaceChildren(...next.childNodes);
  }
}

// After the run ends the doctor examines it: wait for its findings, then show them and mark
// their steps on the charts.
async function showFinalFindings() {
  for (let i = 0; i < 40; i++) {
    let f = null;
    try { f = await getJSON(BOOT.findings_url); } catch (e) { console.warn(e); }
    if (f !== null) {
      await refreshSections(["findings"]);
      wireFindings();
      const markers = findingMarkers();
      for (const [name, u] of Object.entries(charts)) { u._markers = markers[name] || []; u.redraw(false); }
      return;
    }
    await new Promise(done => setTimeout(done, 1500));
  }
}

function wireFindings() {
  $$(".finding-link").forEach(a => a.addEventListener("click", ev => {
    const card = document.getElementById(slug(a.dataset.metric));
    if (!card) return;
    ev.preventDefault();
    const u = charts[a.dataset.metric];
    if (u) {
      u._markers.forEach(m => m.active = String(m.step) === a.dataset.step);
      u.redraw(false);
    }
    $$(".plot.highlight").forEach(p => p.classList.remove("highlight"));
    card.classList.add("highlight");
    const still = matchMedia("(prefers-reduced-motion: reduce)").matches;
    card.scrollIntoView({behavior: still ? "auto" : "smooth", block: "center"});
    history.replaceState(null, "", "#" + card.id);
  }));
}

// --- pages ---------------------------------------------------------------------------------------

function indexPage() {
  const table = $("#runs");
  if (!table) return;
  makeSortable(table);
  const button = $("#compare-selected");
  const picks = () => $$(".pick:checked").map(c => c.value);
  $$(".pick").forEach(c => c.addEventListener("change", () => { if (button) button.disabled = picks().length < 2; }));
  button?.addEventListener("click", () => { location.href = "/compare?ids=" + encodeURIComponent(picks().join(",")); });
  if (!LIVE) return;
  const poll = async () => {
    const ids = $$('tr[data-status="running"]', table).map(tr => tr.dataset.id);
    if (!ids.length) return;
    try {
      const res = await getJSON("/api/progress?ids=" + encodeURIComponent(ids.join(",")));
      for (const p of res.runs) {
        const tr = $(`tr[data-id="${CSS.escape(p.id)}"]`, table);
        if (!tr) continue;
        tr.dataset.status = p.status;
        const badge = $(".badge", tr);
        badge.textContent = p.status_text || p.status;
        badge.className = "badge " + (p.status_text && p.status_text.startsWith("waiting") ? "waiting" : p.status);
        $(".progress-cell", tr).innerHTML = p.status === "running"
          ? `<span class="live-steps">${int(p.steps_done)}</span> <span class="muted">/ ${int(p.steps_total)} (${Math.round(100 * p.fraction)}%)</span>`
          : int(p.steps_total / Math.max(1, p.seeds.length));
        $(".duration", tr).textContent = duration(p.duration_s);
        if (p.iqm !== null) {
          const ci = document.createElement("span");
          ci.className = "muted"; ci.textContent = p.interval;
          const cell = $(".result", tr);
          cell.textContent = fmt(p.iqm) + " ";
          cell.appendChild(ci);
        }
      }
    } catch (e) { console.warn(e); }
  };
  poll();
  setInterval(poll, POLL_MS);
}

async function runPage() {
  if (!BOOT.run) return;
  wireFindings();
  let curves = BOOT.curves;
  if (!curves && LIVE) {
    try { curves = await getJSON(BOOT.curves_url); } catch (e) {
      $("#plots").innerHTML = `<p class="error">could not load curves: ${e.message}</p>`;
      return;
    }
  }
  if (curves) renderRunCurves(curves);
  if (location.hash.startsWith("#m-")) document.getElementById(location.hash.slice(1))?.scrollIntoView();
  if (!LIVE || BOOT.status !== "running") return;
  let lastCurves = Date.now();
  const timer = setInterval(async () => {
    let p;
    try { p = await getJSON(BOOT.progress_url); } catch (e) { console.warn(e); return; }
    for (const s of p.seeds) {
      const tr = document.getElementById("seed-" + s.seed);
      if (!tr) continue;
      const set = (f, text) => { const td = $(`[data-field="${f}"]`, tr); if (td) td.textContent = text; };
      set("steps", int(s.steps)); set("sps", fmt(s.sps, 0)); set("ret", fmt(s.ret));
      set("final_eval_return", fmt(s.final_eval_return)); set("wall_s", duration(s.wall_s));
      set("error", s.error || "");
      const b = $('[data-field="status"]', tr);
      b.textContent = s.status_text || s.status; b.className = "badge " + s.status;
    }
    const badge = $("#run-status");
    badge.textContent = p.status_text || p.status;
    badge.className = "badge " + (p.status_text && p.status_text.startsWith("waiting") ? "waiting" : p.status);
    $("#run-duration").textContent = duration(p.duration_s);
    const done = p.status !== "running";
    if (done || Date.now() - lastCurves > 6000) {
      lastCurves = Date.now();
      try { renderRunCurves(await getJSON(BOOT.curves_url)); } catch (e) { console.warn(e); }
    }
    if (done) {
      if (p.result) $("#run-result").textContent = p.result;
      clearInterval(timer);
      showFinalFindings();
    }
  }, POLL_MS);
}

function comparePage() {
  const c = BOOT.compare;
  const el = $("#compare-plot");
  if (!c || !el) return;
  $$(".swatch").forEach(s => s.style.background = PALETTE[Number(s.dataset.i) % PALETTE.length]);
  const tables = [], series = [{label: "step", value: (u, v) => v === null ? "–" : int(v)}], bands = [];
  c.sides.forEach((r, i) => {
    if (!r.curve || !r.curve.step.length) return;
    const color = PALETTE[i % PALETTE.length];
    tables.push([r.curve.step, r.curve.iqm, r.curve.high, r.curve.low]);
    const base = series.length;
    const label = r.label + (r.curve.no_interval ? ` (${r.curve.no_interval})` : "");
    series.push({label, stroke: color, width: 2.2, spanGaps: true, points: {show: fewPoints(r.curve)}});
    series.push({label: r.label + " CI high", stroke: color + "55", width: 0.5, spanGaps: true, points: {show: false}});
    series.push({label: r.label + " CI low", stroke: color + "55", width: 0.5, spanGaps: true, points: {show: false}});
    bands.push({series: [base + 1, base + 2], fill: color + "22"});
  });
  if (!tables.length) { el.innerHTML = '<p class="muted">No curves to show.</p>'; return; }
  const data = uPlot.join(tables);
  new uPlot({
    width: plotWidth(el), height: 380, scales: {x: xScale()}, series, bands,
    axes: [{values: (u, vals) => vals.map(shortNum)}, {values: (u, vals) => vals.map(shortNum), size: 50}],
    cursor: {drag: {x: true, y: false}},
  }, data, el);
}

function comparePicker() {
  // the pick form sends id=a&id=b; the page wants ids=a,b
  const form = $("#pick-form");
  form?.addEventListener("submit", ev => {
    ev.preventDefault();
    const ids = $$('input[name="id"]:checked', form).map(c => c.value);
    const metric = $('select[name="metric"]')?.value;
    location.href = "/compare?ids=" + encodeURIComponent(ids.join(",")) + (metric ? "&metric=" + encodeURIComponent(metric) : "");
  });
}

document.addEventListener("DOMContentLoaded", () => {
  autosubmit();
  indexPage();
  runPage();
  comparePage();
  comparePicker();
  $$("table.sortable").forEach(t => { if (t.id !== "runs") makeSortable(t); });
  window.backflipReady = true;
});
