"use strict";
// The labeling page: two clips play side by side at the env's real speed; keys or buttons
// answer which is better. Every URL is relative to the page (/label/RUN/SEED/). Its own scope:
// app.js shares the page.
//
// What a person can count on here:
// - the clips are the env's own frames where the run rendered them, scaled up by whole pixels
//   to fill half the window each; Space pauses, R replays, the speed goes from 0.25x to 2x, a
//   counter says which frame is shown and the last frame is held before the clip starts again;
// - an answer given while the server is away is kept in this page (and in localStorage) and
//   sent when it returns, with the page's own id for it, so the server records it once;
// - undo reaches back UNDO_LIMIT answers of this sitting (never an earlier one), one key press
//   at a time (a held key does not repeat it), and asks again before taking back an answer the
//   reward model has already trained on;
// - keys work whatever Shift or Caps Lock say.
(() => {
const POLL_MS = 1500, END_HOLD_MS = 700, UNDO_LIMIT = 10;
const OUTBOX = "backflip-outbox:" + location.pathname;
let state = null, busy = false;
let seq = 0;  // only the newest request's answer is shown (a slow poll must not undo a label)
let person = localStorage.getItem("backflip-labeler") || "";
let endArmed = 0, undoArmed = null;
const sitting = [];  // this sitting's answered query ids, newest last (undo's reach)
let outbox = JSON.parse(localStorage.getItem(OUTBOX) || "[]");  // answers not yet acknowledged
const player = {sheets: {left: null, right: null}, frame: 0, playing: true, speed: 1,
                last: 0, holdUntil: 0};
const $ = id => document.getElementById(id);
window.labelingBusy = () => busy;  // for scripted people (the browser tests)
window.labelingPlayer = () => ({frame: player.frame, playing: player.playing,
                                speed: player.speed, n: state ? state.clip_frames : 0});

async function call(url, body) {
  const opts = body === undefined ? {} :
    {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  let r;
  try { r = await fetch(url, opts); }
  catch (e) { const err = new Error("lost the server (" + e.message + "): is backflip ui still running? retrying…"); err.offline = true; throw err; }
  let data = {};
  try { data = await r.json(); } catch (e) { /* an error page */ }
  if (!r.ok) throw new Error(data.error || `${r.status} ${r.statusText}`);
  return data;
}
function flash(text, kind) { const f = $("flash"); f.textContent = text; f.className = kind || ""; }
function saveOutbox() { localStorage.setItem(OUTBOX, JSON.stringify(outbox)); }
function loadSheet(side, seg) {
  const img = new Image();
  img.onload = () => { player.sheets[side] = img; fit(); };
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
  if (s.eta_s !== null) parts.push(`labels' ETA at your pace ${minutes(s.eta_s)}`);
  if (s.run.eta_s !== null && s.run.eta_s !== undefined) parts.push(`run's ETA ${minutes(s.run.eta_s)}`);
  parts.push(s.val_acc === null ? "reward model: not validated yet" : `reward model val. accuracy ${(100 * s.val_acc).toFixed(0)}%`);
  if (s.me.true_reward) parts.push(`you agree with the true reward on ${(100 * s.me.true_reward.rate).toFixed(0)}% of the ${s.me.true_reward.n} pairs it tells apart`);
  if (outbox.length) parts.push(`${outbox.length} answer(s) kept in this page, to send`);
  $("counts").textContent = parts.join(" · ");
  const q = outbox.length ? null : s.query;  // answers kept here go first
  document.body.dataset.query = q ? q.id : "";
  if (q && q.id !== prev) {
    player.sheets = {left: null, right: null}; player.frame = 0; player.holdUntil = 0;
    loadSheet("left", q.left); loadSheet("right", q.right);
  }
  if (!q) player.sheets = {left: null, right: null};
  $("idle").hidden = !!q;
  if (!q) $("idle").textContent = idleText(s);
}
function idleText(s) {
  // why there is no pair to compare, and when there will be one
  if (outbox.length) return "Your kept answers go first: the next pair shows once they reach the server.";
  if (!s.run.accepts) return "No pair to compare: this run no longer uses answers.";
  if (s.run.phase) {
    const eta = s.run.eta_s !== null && s.run.eta_s !== undefined ? `, in about ${minutes(s.run.eta_s)}` : "";
    return `No pair to compare yet: the run is ${s.run.phase}, and the first pairs come when that is done${eta}. This page shows them as they arrive.`;
  }
  return "No pair to compare right now: the run asks for more as the policy learns, and this page shows them as they arrive.";
}
async function flushOutbox() {
  // the kept answers, oldest first, each with its id: a retry of one that did arrive is a no-op
  while (outbox.length) {
    const a = outbox[0];
    try { await call("api/answer", a); }
    catch (e) {
      if (e.offline) return false;
      flash(`kept answer for #${a.query} not used: ${e.message}`, "error");
    }
    outbox.shift(); saveOutbox();
    if (!sitting.includes(a.query)) { sitting.push(a.query); if (sitting.length > UNDO_LIMIT) sitting.shift(); }
  }
  return true;
}
async function refresh() {
  if (!person) return;
  const mine = ++seq;
  try {
    if (outbox.length && await flushOutbox()) flash("the kept answers reached the server", "ok");
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
  } catch (e) {
    if (e.offline && url === "api/answer") {  // kept, sent when the server is back
      outbox.push({...body, person: person}); saveOutbox();
      flash(`the server is away: your answer for #${body.query} is kept here and will be sent`, "error");
      if (state) show(state);
    } else { flash("not saved: " + e.message, "error"); await refresh(); }
  }
  busy = false;
}
function answerId() {
  return (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`).slice(0, 64);
}
function answer(choice) {
  if (!state || !state.query || outbox.length) return;
  const id = state.query.id;
  post("api/answer", {query: id, choice: choice, answer_id: answerId()}, () => {
    sitting.push(id); if (sitting.length > UNDO_LIMIT) sitting.shift();
    undoArmed = null;
    flash(`saved: ${choice} for #${id}`, "ok");
  });
}
function undo() {
  if (!sitting.length) {
    flash(`nothing to undo: undo reaches your last ${UNDO_LIMIT} answers of this sitting`, "ok");
    return;
  }
  const id = sitting[sitting.length - 1];
  const anyway = undoArmed === id;
  post("api/undo", {query: id, anyway: anyway}, s => {
    if (s.trained) {
      undoArmed = id;
      flash(`the reward model has already trained on your answer to #${id}: press U again to take it back anyway`, "error");
      return;
    }
    undoArmed = null;
    sitting.pop();
    flash(s.undone ? `undid #${s.undone}` : `#${id} had no answer of yours to undo`, "ok");
  });
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
// -- the player ------------------------------------------------------------------------------
function fit() {
  // each clip as large as half the window allows, by whole pixels (crisp), its own aspect
  for (const side of ["left", "right"]) {
    const c = $(side), img = player.sheets[side];
    if (!img || !state) continue;
    const n = state.clip_frames, w = img.width, h = img.height / n;
    // half the window's width each, and the clips, buttons and player within its height
    const roomW = Math.max(120, c.parentElement.clientWidth - 8);
    const roomH = Math.max(160, window.innerHeight - 340);
    const fitted = Math.min(roomW / w, roomH / h);
    const scale = fitted >= 1 ? Math.floor(fitted) : fitted;
    const cw = Math.round(w * scale), ch = Math.round(h * scale);
    if (c.width !== cw || c.height !== ch) { c.width = cw; c.height = ch; }
  }
}
function draw() {
  const n = state ? state.clip_frames : 1, f = Math.min(player.frame, n - 1);
  for (const side of ["left", "right"]) {
    const c = $(side), ctx = c.getContext("2d"), img = player.sheets[side];
    ctx.clearRect(0, 0, c.width, c.height);
    if (!img || !state || !state.query) continue;
    const fh = img.height / n;
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(img, 0, f * fh, img.width, fh, 0, 0, c.width, c.height);
  }
  const atEnd = state && player.frame >= n - 1;
  document.body.dataset.ended = atEnd ? "yes" : "no";
  $("frame").textContent = state && state.query ?
    `frame ${f + 1}/${n}${atEnd ? " · end of clip" : ""}${player.playing ? "" : " · paused"}` : "frame –";
}
function tick(now) {
  const fps = (state && state.fps) || 12, n = state ? state.clip_frames : 1;
  if (player.playing && now - player.last >= 1000 / (fps * player.speed)) {
    player.last = now;
    if (player.frame >= n - 1) {  // hold the last frame, then start again
      if (!player.holdUntil) player.holdUntil = now + END_HOLD_MS / player.speed;
      else if (now >= player.holdUntil) { player.frame = 0; player.holdUntil = 0; }
    } else player.frame++;
  }
  draw();
  requestAnimationFrame(tick);
}
function togglePlay() {
  player.playing = !player.playing;
  $("play").querySelector("span").textContent = player.playing ? "pause" : "play";
}
function replay() { player.frame = 0; player.holdUntil = 0; player.playing = true;
                    $("play").querySelector("span").textContent = "pause"; }
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
const KEYS = {arrowleft: "left", a: "left", arrowright: "right", d: "right",
              arrowup: "equal", e: "equal", arrowdown: "skip", s: "skip"};
document.addEventListener("keydown", ev => {
  if (!person || ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
  const key = ev.key.toLowerCase();  // Shift and Caps Lock change nothing
  if (key in KEYS) { ev.preventDefault(); if (!ev.repeat) answer(KEYS[key]); }
  else if (key === "u" || key === "backspace") { ev.preventDefault(); if (!ev.repeat) undo(); }
  else if (key === " ") { ev.preventDefault(); if (!ev.repeat) togglePlay(); }
  else if (key === "r") { ev.preventDefault(); if (!ev.repeat) replay(); }
});
document.querySelectorAll("button[data-choice]").forEach(b =>
  b.addEventListener("click", () => answer(b.dataset.choice)));
$("undo").addEventListener("click", undo);
$("end").addEventListener("click", endLabeling);
$("play").addEventListener("click", togglePlay);
$("replay").addEventListener("click", replay);
$("speed").addEventListener("change", () => { player.speed = parseFloat($("speed").value); });
window.addEventListener("resize", fit);
requestAnimationFrame(tick);
setInterval(() => { if (!busy) refresh(); }, POLL_MS);
start();
})();
