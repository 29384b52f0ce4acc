"use strict";
// The labeling page: two clips loop side by side; keys or buttons answer which is better.
// Every URL is relative to the page (/label/RUN/SEED/). Its own scope: app.js shares the page.
(() => {
const FPS = 12, POLL_MS = 1500;
let state = null, sheets = {left: null, right: null}, frame = 0, busy = false;
let seq = 0;  // only the newest request's answer is shown (a slow poll must not undo a label)
let person = localStorage.getItem("backflip-labeler") || "";
let endArmed = 0;
const $ = id => document.getElementById(id);
window.labelingBusy = () => busy;  // for scripted people (the browser tests)

async function call(url, body) {
  const opts = body === undefined ? {} :
    {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  let r;
  try { r = await fetch(url, opts); }
  catch (e) { throw new Error("lost the server (" + e.message + "): is backflip ui still running? retrying…"); }
  let data = {};
  try { data = await r.json(); } catch (e) { /* an error page */ }
  if (!r.ok) throw new Error(data.error || `${r.status} ${r.statusText}`);
  return data;
}
function flash(text, kind) { const f = $("flash"); f.textContent = text; f.className = kind || ""; }
function loadSheet(side, seg) {
  const img = new Image();
  img.onload = () => { sheets[side] = img; };
  img.src = "clip/" + seg + ".png";
}
function minutes(s) {
  if (s === null || s === undefined) return "–";
  return s < 90 ? `${Math.round(s)} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`;
}
function show(s) {
  const prev = state && state.query ? state.query.id : null;
  state = s;
  document.body.dataset.state = s.run.state;
  $("task").innerHTML = "";
  const t = document.createElement("strong");
  t.textContent = s.task || "(no task statement: prefer the clip that does the task better)";
  $("task").append("Better means: ", t);
  $("run").textContent = s.run.text;
  const parts = [`labels ${s.answered} of ${s.target}`, `skipped ${s.skipped}`, `pending ${s.pending}`];
  if (s.me.per_minute) parts.push(`your pace ${s.me.per_minute.toFixed(1)}/min`);
  if (s.eta_s !== null) parts.push(`ETA at your pace ${minutes(s.eta_s)}`);
  parts.push(s.val_acc === null ? "reward model: not validated yet" : `reward model val. accuracy ${(100 * s.val_acc).toFixed(0)}%`);
  if (s.me.true_reward) parts.push(`you agree with the true reward on ${(100 * s.me.true_reward.rate).toFixed(0)}% of the ${s.me.true_reward.n} pairs it tells apart`);
  $("counts").textContent = parts.join(" · ");
  const q = s.query;
  document.body.dataset.query = q ? q.id : "";
  if (q && q.id !== prev) {
    sheets = {left: null, right: null}; frame = 0;
    loadSheet("left", q.left); loadSheet("right", q.right);
  }
  if (!q) sheets = {left: null, right: null};
}
async function refresh() {
  if (!person) return;
  const mine = ++seq;
  try {
    const s = await call("api/state?person=" + encodeURIComponent(person));
    if (mine === seq) show(s);
    if ($("flash").className === "error" && s.run.accepts) flash("");
  } catch (e) { if (mine === seq) flash(e.message, "error"); }
}
async function post(url, body, done) {
  if (busy) return;
  busy = true;
  const mine = ++seq;
  try {
    const s = await call(url, {...body, person: person});
    done(s);
    if (mine === seq) show(s);
  } catch (e) { flash("not saved: " + e.message, "error"); await refresh(); }
  busy = false;
}
function answer(choice) {
  if (!state || !state.query) return;
  const id = state.query.id;
  post("api/answer", {query: id, choice: choice}, () => flash(`saved: ${choice} for #${id}`, "ok"));
}
function undo() {
  post("api/undo", {}, s => flash(s.undone ? `undid #${s.undone}` : "nothing to undo", "ok"));
}
function endLabeling() {
  if (Date.now() - endArmed > 5000) {
    endArmed = Date.now();
    $("end").classList.add("confirm");
    $("end").textContent = `click again: the run trains on with the ${state ? state.answered : ""} labels given`;
    return;
  }
  endArmed = 0;
  $("end").classList.remove("confirm");
  post("api/end", {}, () => flash("labeling ended: the run trains on with the labels it has", "ok"));
}
function draw() {
  for (const side of ["left", "right"]) {
    const c = $(side), ctx = c.getContext("2d"), img = sheets[side];
    ctx.clearRect(0, 0, c.width, c.height);
    if (!img || !state || !state.query) continue;
    const n = state.segment_length, fh = img.height / n, f = frame % n;
    const h = Math.round(c.width * fh / img.width);  // the frame's own aspect ratio
    if (c.height !== h) c.height = h;
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(img, 0, f * fh, img.width, fh, 0, 0, c.width, c.height);
  }
  frame++;
}
function start() {
  $("who").hidden = !!person;
  $("board").hidden = !person;
  $("me").textContent = person ? `labeling as ${person}` : "";
  if (person) refresh(); else $("name").focus();
}
$("who").addEventListener("submit", ev => {
  ev.preventDefault();
  person = $("name").value.trim();
  if (person) localStorage.setItem("backflip-labeler", person);
  start();
});
$("rename").addEventListener("click", () => {
  person = ""; localStorage.removeItem("backflip-labeler"); start();
});
const KEYS = {ArrowLeft: "left", a: "left", ArrowRight: "right", d: "right",
              ArrowUp: "equal", e: "equal", ArrowDown: "skip", s: "skip"};
document.addEventListener("keydown", ev => {
  if (!person || ev.target.tagName === "INPUT") return;
  if (ev.key in KEYS) { ev.preventDefault(); answer(KEYS[ev.key]); }
  else if (ev.key === "u" || ev.key === "Backspace") { ev.preventDefault(); undo(); }
});
document.querySelectorAll("button[data-choice]").forEach(b =>
  b.addEventListener("click", () => answer(b.dataset.choice)));
$("undo").addEventListener("click", undo);
$("end").addEventListener("click", endLabeling);
setInterval(draw, 1000 / FPS);
setInterval(() => { if (!busy) refresh(); }, POLL_MS);
start();
})();
