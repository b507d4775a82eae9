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

// A colour per program: hues spread by the golden angle.
function hue(i) {
  if (i < 0) return "hsl(210, 8%, 70%)";
  return "hsl(" + ((i * 137.508) % 360).toFixed(1) + ", 55%, 58%)";
}

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

// Round ticks (1, 2 or 5 × 10^k) over [0, span].
function ticks(span, want) {
  const raw = span / Math.max(1, want);
  let p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-12))));
  for (const m of [1, 2, 5, 10]) if (p * m >= raw) { p = p * m; break; }
  const out = [];
  for (let t = 0; t <= span + 1e-9; t += p) out.push(t);
  return out;
}

// An x/y chart frame: axes, time ticks along x, `ylabels` along y; returns the plot's box.
function frame(ctx, w, h, t0, t1, yTicks) {
  const box = { x: 64, y: 8, w: w - 76, h: h - 30 };
  ctx.strokeStyle = "#c7ccd1"; ctx.fillStyle = "#5d6975"; ctx.lineWidth = 1;
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (const [v, label] of yTicks) {
    const y = box.y + box.h * (1 - v);
    ctx.beginPath(); ctx.moveTo(box.x, y + 0.5); ctx.lineTo(box.x + box.w, y + 0.5); ctx.stroke();
    ctx.fillText(label, box.x - 6, y);
  }
  ctx.textBaseline = "top";
  const span = Math.max(1, t1 - t0);
  for (const t of ticks(span, Math.max(2, Math.floor(box.w / 110)))) {
    const x = box.x + box.w * t / span;
    ctx.textAlign = t === 0 ? "left" : "center";
    ctx.fillText(fmtNs(t0 + t), x, box.y + box.h + 6);
  }
  return box;
}
