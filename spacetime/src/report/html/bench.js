// The bench page: each command's runs as distributions (every run a dot, its mean ± σ and
// median, as hyperfine's whisker plot reads; a histogram of the times, as its histogram
// script draws), and a parameter scan's commands as curves over the parameter.
(function () {
  const D = DATA, R = D.results;
  const app = document.getElementById("app");
  app.append(el("h1", {}, "spacetime bench"), el("div", { class: "cmd" }, R.length + " commands" + (D.interrupted ? " (interrupted)" : "")));
  const pm = (f, fmt) => (f && f.mean !== null ? fmt(f.mean) + (f.stddev !== null && f.stddev !== undefined ? " ± " + fmt(f.stddev) : "") : "–");
  app.append(el("div", { id: "results", "data-count": R.length }, table(
    ["command", "runs", "time (mean ± σ)", "peak RSS (largest process)", "tree peak (all at once)", "failed runs"],
    R.map((r) => ({ bad: r.failed_runs > 0, mono: [true], cells: [r.command, String(r.runs), pm(r.wall, fmtNs), pm(r.peak, fmtBytes), pm(r.tree, fmtBytes), String(r.failed_runs)] })),
    [false, true, true, true, true, true])));

  const figures = [["wall", "Time", fmtNs], ["peak", "Peak RSS of the largest process", fmtBytes], ["tree", "Tree peak RSS (all processes at once)", fmtBytes]];

  // One row per command: the runs as dots (spread vertically so equal values show), the
  // mean with ±σ, the median.
  function distribution(key, fmt) {
    const canvas = el("canvas", { class: "dist", "data-figure": key });
    const rowH = 34;
    const draw = () => {
      const { ctx, w, h } = sizedCanvas(canvas, R.length * rowH + 34);
      ctx.clearRect(0, 0, w, h);
      let lo = Infinity, hi = -Infinity, dots = 0;
      for (const r of R) for (const v of (r[key] ? r[key].values : [])) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      if (!isFinite(lo)) { canvas.dataset.points = "0"; return; }
      if (hi === lo) { hi = lo * 1.05 + 1; lo = Math.max(0, lo * 0.95 - 1); }
      // A margin on both sides: the extreme runs are drawn whole.
      const pad = (hi - lo) * 0.04;
      lo = Math.max(0, lo - pad); hi = hi + pad;
      const box = { x: 12, w: w - 24 };
      const X = (v) => box.x + box.w * (v - lo) / (hi - lo);
      ctx.font = "11px system-ui, sans-serif";
      R.forEach((r, k) => {
        const f = r[key], y = 8 + k * rowH + rowH / 2, c = r.colour;
        if (!f) return;
        ctx.strokeStyle = "#c7ccd1"; ctx.beginPath(); ctx.moveTo(box.x, y + 0.5); ctx.lineTo(box.x + box.w, y + 0.5); ctx.stroke();
        f.values.forEach((v, j) => {
          const jitter = ((j * 7919) % 13 - 6) * 1.4;
          ctx.fillStyle = c; ctx.globalAlpha = 0.7; ctx.beginPath(); ctx.arc(X(v), y + jitter, 3, 0, 2 * Math.PI); ctx.fill(); ctx.globalAlpha = 1;
          dots++;
        });
        if (f.mean !== null) {
          const sd = f.stddev || 0;
          ctx.strokeStyle = "#111"; ctx.lineWidth = 2;
          ctx.beginPath(); ctx.moveTo(X(Math.max(lo, f.mean - sd)), y); ctx.lineTo(X(Math.min(hi, f.mean + sd)), y); ctx.stroke();
          ctx.beginPath(); ctx.moveTo(X(f.mean), y - 10); ctx.lineTo(X(f.mean), y + 10); ctx.stroke();
          ctx.lineWidth = 1;
        }
        if (f.median !== null) { ctx.strokeStyle = "#7b1fa2"; ctx.beginPath(); ctx.moveTo(X(f.median), y - 7); ctx.lineTo(X(f.median), y + 7); ctx.stroke(); }
      });
      ctx.fillStyle = "#5d6975"; ctx.textBaseline = "top";
      for (let k = 0; k <= 4; k++) {
        const v = lo + (hi - lo) * k / 4;
        ctx.textAlign = k === 0 ? "left" : k === 4 ? "right" : "center";
        ctx.fillText(fmt(v), X(v), h - 18);
      }
      canvas.dataset.points = String(dots);
    };
    return { canvas: canvas, draw: draw };
  }

  // The times of every command as overlaid histograms.
  function histogram() {
    const canvas = el("canvas", { id: "histogram" });
    const draw = () => {
      const { ctx, w, h } = sizedCanvas(canvas, 200);
      ctx.clearRect(0, 0, w, h);
      const all = R.flatMap((r) => (r.wall ? r.wall.values : []));
      if (!all.length) return;
      let lo = Math.min(...all), hi = Math.max(...all);
      if (hi === lo) { hi = lo + 1; }
      const bins = Math.max(5, Math.min(40, Math.round(Math.sqrt(all.length) * 2)));
      const counts = R.map((r) => {
        const c = new Array(bins).fill(0);
        for (const v of (r.wall ? r.wall.values : [])) c[Math.min(bins - 1, Math.floor((v - lo) / (hi - lo) * bins))]++;
        return c;
      });
      const top = Math.max(1, ...counts.flat());
      const box = frame(ctx, w, h, lo, hi, [[0, "0"], [1, String(top)]]);
      counts.forEach((c, k) => {
        ctx.fillStyle = R[k].colour; ctx.globalAlpha = 0.5;
        c.forEach((n, j) => { const bh = box.h * n / top; ctx.fillRect(box.x + box.w * j / bins, box.y + box.h - bh, box.w / bins - 1, bh); });
        ctx.globalAlpha = 1;
      });
    };
    return { canvas: canvas, draw: draw };
  }

  // A parameter scan: each command template a curve of its mean (± σ) over the parameter.
  function scans() {
    const names = new Set();
    R.forEach((r) => Object.keys(r.parameters || {}).forEach((n) => names.add(n)));
    const out = [];
    for (const name of names) {
      const withP = R.map((r, k) => ({ r: r, k: k, x: parseFloat((r.parameters || {})[name]) })).filter((e) => !isNaN(e.x));
      if (withP.length < 2) continue;
      const curves = new Map();
      for (const e of withP) {
        // The command with its value's last occurrence named: one curve per command template.
        const v = String(e.r.parameters[name]), at = e.r.command.lastIndexOf(v);
        const key = at < 0 ? e.r.command : e.r.command.slice(0, at) + "{" + name + "}" + e.r.command.slice(at + v.length);
        if (!curves.has(key)) curves.set(key, []);
        curves.get(key).push(e);
      }
      for (const [key, title, fmt] of figures) {
        if (!withP.some((e) => e.r[key])) continue;
        const canvas = el("canvas", { class: "scan", "data-parameter": name, "data-figure": key });
        const draw = () => {
          const { ctx, w, h } = sizedCanvas(canvas, 220);
          ctx.clearRect(0, 0, w, h);
          const xs = withP.map((e) => e.x), ys = withP.flatMap((e) => (e.r[key] ? [e.r[key].mean + (e.r[key].stddev || 0)] : []));
          const x0 = Math.min(...xs), x1 = Math.max(...xs), top = Math.max(1, ...ys);
          const box = { x: 64, y: 8, w: w - 76, h: h - 30 };
          const X = (x) => box.x + box.w * (x - x0) / Math.max(1e-12, x1 - x0), Y = (v) => box.y + box.h * (1 - v / top);
          ctx.fillStyle = "#5d6975"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
          for (const f of [0, 0.5, 1]) ctx.fillText(fmt(top * f), box.x - 6, Y(top * f));
          ctx.textAlign = "center"; ctx.textBaseline = "top";
          for (const x of [...new Set(xs)]) ctx.fillText(String(x), X(x), box.y + box.h + 6);
          let points = 0;
          for (const list of curves.values()) {
            list.sort((a, b) => a.x - b.x);
            ctx.strokeStyle = list[0].r.colour; ctx.fillStyle = list[0].r.colour; ctx.lineWidth = 2; ctx.beginPath();
            list.forEach((e, j) => { const f = e.r[key]; if (!f) return; if (j) ctx.lineTo(X(e.x), Y(f.mean)); else ctx.moveTo(X(e.x), Y(f.mean)); });
            ctx.stroke(); ctx.lineWidth = 1;
            for (const e of list) {
              const f = e.r[key]; if (!f) continue;
              const sd = f.stddev || 0;
              ctx.beginPath(); ctx.moveTo(X(e.x), Y(f.mean - sd)); ctx.lineTo(X(e.x), Y(f.mean + sd)); ctx.stroke();
              ctx.beginPath(); ctx.arc(X(e.x), Y(f.mean), 3, 0, 2 * Math.PI); ctx.fill();
              points++;
            }
          }
          canvas.dataset.points = String(points);
        };
        out.push({ title: title + " over " + name + " (" + [...curves.keys()].join(", ") + ")", canvas: canvas, draw: draw });
      }
    }
    return out;
  }

  const legend = el("div", { class: "legend" });
  R.forEach((r) => legend.append(el("span", { style: "--c:" + r.colour }, r.command)));
  app.append(legend);
  const charts = [];
  for (const [key, title, fmt] of figures) {
    if (!R.some((r) => r[key] && r[key].values.length)) continue;
    const c = distribution(key, fmt);
    app.append(el("h2", {}, title), el("p", { class: "note" }, "Each dot a run; black: mean ± σ; purple: median."), el("div", { class: "panel" }, c.canvas));
    charts.push(c);
  }
  const hist = histogram();
  app.append(el("h2", {}, "Times, as histograms"), el("div", { class: "panel" }, hist.canvas));
  charts.push(hist);
  for (const s of scans()) {
    app.append(el("h2", {}, s.title), el("div", { class: "panel" }, s.canvas));
    charts.push(s);
  }
  app.append(el("p", { class: "note" }, "spacetime " + D.version));
  const drawAll = () => charts.forEach((c) => c.draw());
  drawAll();
  window.addEventListener("resize", drawAll);
  document.body.dataset.rendered = "1";
})();
