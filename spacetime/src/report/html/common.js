"use strict";
// Shared by the trace and bench pages: errors counted into the DOM (a test reads them),
// the data, formatting as the terminal summary formats, DOM built with textContent only.
document.body.dataset.errors = "0";
function countError() {
  document.body.dataset.errors = String(Number(document.body.dataset.errors || 0) + 1);
}
window.addEventListener("error", countError);
window.addEventListener("unhandledrejection", countError);

const DATA = JSON.parse(document.getElementById("data").textContent);

// Bytes in binary units, as spacetime's summary writes them.
function fmtBytes(b) {
  if (b === null || b === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = b, u = 0;
  while (v >= 1024 && u + 1 < units.length) { v /= 1024; u++; }
  if (u === 0) return b + " B";
  return (v >= 100 ? v.toFixed(0) : v.toFixed(1)) + " " + units[u];
}

// A duration in the unit that keeps three digits, as the summary writes it.
function fmtNs(ns) {
  if (ns === null || ns === undefined) return "?";
  if (ns === 0) return "0";
  if (ns >= 60e9) { const s = Math.floor(ns / 1e9); return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s"; }
  if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
  if (ns >= 1e6) return (ns / 1e6).toFixed(1) + " ms";
  if (ns >= 1e3) return (ns / 1e3).toFixed(0) + " µs";
  return ns + " ns";
}

// An element with attributes and children; strings become text nodes, never markup.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, String(v));
    else if (k === "style") e.setAttribute("style", v);
    else e[k] = v;
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.append(typeof k === "string" || typeof k === "number" ? document.createTextNode(String(k)) : k);
  }
  return e;
}

function chip(title, value, attrs) {
  return el("div", Object.assign({ class: "chip" }, attrs || {}), el("b", {}, title), value);
}

const CELL_CHARS = 240;

function table(headers, rows, numeric) {
  const t = el("table");
  const h = el("tr");
  headers.forEach((x, i) => h.append(el("th", { class: numeric[i] ? "num" : "" }, x)));
  t.append(h);
  for (const r of rows) {
    const tr = el("tr", r.bad ? { class: "bad" } : {});
    r.cells.forEach((x, i) => {
      const attrs = { class: numeric[i] ? "num" : (r.mono && r.mono[i] ? "mono" : "") };
      // A long command line is cut; all of it shows on hover.
      if (typeof x === "string" && x.length > CELL_CHARS) { attrs.title = x; x = x.slice(0, CELL_CHARS) + "…"; }
      tr.append(el("td", attrs, x));
    });
    t.append(tr);
  }
  return t;
}

// What has no program of its own; programs' and commands' colours come with the data (no
// program gets the failures' red).
const NO_PROGRAM = "#adb3b8";

// A canvas sized for the screen's pixel ratio; returns its 2D context and CSS size.
function sizedCanvas(canvas, cssHeight) {
  const w = Math.max(300, canvas.clientWidth || canvas.parentElement.clientWidth || 1000);
  const r = window.devicePixelRatio || 1;
  canvas.style.height = cssHeight + "px";
  canvas.width = Math.round(w * r);
  canvas.height = Math.round(cssHeight * r);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(r, 0, 0, r, 0, 0);
  return { ctx: ctx, w: w, h: cssHeight };
}

// Round times (1, 2 or 5 × 10^k) within [t0, t1], about `want` of them.
function ticksIn(t0, t1, want) {
  const raw = (t1 - t0) / Math.max(1, want);
  let p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-12))));
  for (const m of [1, 2, 5, 10]) if (p * m >= raw) { p = p * m; break; }
  const out = [];
  for (let k = Math.ceil(t0 / p - 1e-9); k * p <= t1 + p * 1e-9; k++) out.push(k * p);
  return out;
}

// Labels along x at round values of [t0, t1], each centred on its tick unless that would cut
// it at the canvas's edge (the first and last are then moved inside). Returns the right edge
// of the rightmost label, which the page records for its tests.
function xLabels(ctx, box, t0, t1, y, fmt) {
  const cw = ctx.canvas.width / (window.devicePixelRatio || 1), span = Math.max(1e-9, t1 - t0);
  ctx.textAlign = "left"; ctx.textBaseline = "top";
  let right = 0;
  for (const t of ticksIn(t0, t1, Math.max(2, Math.floor(box.w / 110)))) {
    const s = fmt(t), tw = ctx.measureText(s).width;
    const left = Math.min(Math.max(0, box.x + box.w * (t - t0) / span - tw / 2), cw - 2 - tw);
    ctx.fillText(s, left, y);
    right = Math.max(right, left + tw);
  }
  ctx.canvas.dataset.labelsRight = right.toFixed(1);
  return right;
}

// An x/y chart frame in `box` (x and w given; y and h set here): grid lines and `yTicks`
// labels along y, `fmt` labels of [t0, t1] along x; returns the box.
function frame(ctx, w, h, t0, t1, yTicks, box, fmt) {
  box = box || { x: 64, w: w - 80 };
  box.y = 8; box.h = h - 30;
  ctx.strokeStyle = "#c7ccd1"; ctx.fillStyle = "#5d6975"; ctx.lineWidth = 1;
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (const [v, label] of yTicks) {
    const y = box.y + box.h * (1 - v);
    ctx.beginPath(); ctx.moveTo(box.x, y + 0.5); ctx.lineTo(box.x + box.w, y + 0.5); ctx.stroke();
    ctx.fillText(label, box.x - 6, y);
  }
  xLabels(ctx, box, t0, t1, box.y + box.h + 6, fmt || ((t) => fmtNs(Math.round(t))));
  return box;
}
