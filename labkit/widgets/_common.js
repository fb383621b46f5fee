// Shared helpers for labkit views. Python prepends this file to each widget's module
// (labkit/widgets/base.py: bundle_esm), so every widget stays one self-contained ES module:
// no imports, no CDN, nothing fetched at run time.
//
// A view's picture is a pure function of its model's traits: draw() reads model.get(...) and
// repaints everything, so a page reload or Voila shows the current state.

const LK_FALLBACK_WIDTH = 640;

function lkEl(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// Size a canvas in CSS pixels, sharp on high-DPI screens; returns a cleared 2D context.
function lkSize(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(width * dpr));
  canvas.height = Math.max(1, Math.round(height * dpr));
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  return ctx;
}

function lkWidth(el) {
  return el.clientWidth > 0 ? el.clientWidth : LK_FALLBACK_WIDTH;
}

// Redraw when any listed trait changes or the element is resized, at most once per frame.
// Returns the cleanup function anywidget calls when the view is removed.
function lkWatch(model, el, names, draw) {
  let pending = false;
  let lastWidth = -1;
  const schedule = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  };
  for (const name of names) model.on("change:" + name, schedule);
  let observer = null;
  if (typeof ResizeObserver !== "undefined") {
    observer = new ResizeObserver(() => {
      const width = lkWidth(el);
      if (width !== lastWidth) { lastWidth = width; schedule(); }
    });
    observer.observe(el);
  }
  draw();
  return () => {
    for (const name of names) model.off("change:" + name, schedule);
    if (observer) observer.disconnect();
  };
}

function lkTooltip(el) {
  const tip = lkEl("div", "lk-tip");
  tip.style.display = "none";
  el.appendChild(tip);
  return {
    show(x, y, lines) {
      tip.replaceChildren(...lines.map((line) => lkEl("div", "", line)));
      tip.style.left = (x + 14) + "px";
      tip.style.top = (y + 14) + "px";
      tip.style.display = "block";
    },
    hide() { tip.style.display = "none"; },
  };
}

// items: [{color, label, kind}] with kind "box" (default), "line", "dash", "hatch" or "dot".
function lkLegend(items) {
  const box = lkEl("div", "lk-legend");
  for (const item of items) {
    const entry = lkEl("span", "lk-legend-item");
    const swatch = lkEl("span", "lk-swatch lk-swatch-" + (item.kind || "box"));
    swatch.style.setProperty("--lk-color", item.color);
    entry.append(swatch, document.createTextNode(item.label));
    box.appendChild(entry);
  }
  return box;
}

// Mouse position in CSS pixels relative to the canvas, plus the same relative to el.
function lkMouse(event, canvas, el) {
  const c = canvas.getBoundingClientRect();
  const e = el.getBoundingClientRect();
  return { x: event.clientX - c.left, y: event.clientY - c.top,
           ex: event.clientX - e.left, ey: event.clientY - e.top };
}

function lkFmt(value, digits) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  return Number(value).toFixed(digits === undefined ? 1 : digits);
}

function lkAlpha(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
}

// Diagonal stripes over a rectangle (marks waste without hiding what is underneath).
function lkHatch(ctx, x, y, w, h, color) {
  if (w <= 0 || h <= 0) return;
  ctx.save();
  ctx.beginPath();
  ctx.rect(x, y, w, h);
  ctx.clip();
  ctx.strokeStyle = color;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let d = -h; d < w; d += 4) {
    ctx.moveTo(x + d, y + h);
    ctx.lineTo(x + d + h, y);
  }
  ctx.stroke();
  ctx.restore();
}

// Axes box with horizontal grid lines at the given y ticks; maps data → pixels.
// box: {x, y, w, h}; returns {px(i), py(v)} for x index 0..n-1 and y in [0, yMax].
function lkAxes(ctx, box, n, yMax, ticks, palette, yLabel) {
  const px = (i) => box.x + (n <= 1 ? 0 : (i / (n - 1)) * box.w);
  const py = (v) => box.y + box.h - (Math.min(v, yMax) / yMax) * box.h;
  ctx.font = "10px sans-serif";
  ctx.fillStyle = palette.ink;
  ctx.strokeStyle = palette.grid;
  ctx.lineWidth = 1;
  for (const tick of ticks) {
    const y = Math.round(py(tick)) + 0.5;
    ctx.beginPath(); ctx.moveTo(box.x, y); ctx.lineTo(box.x + box.w, y); ctx.stroke();
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    ctx.fillText(String(tick), box.x - 4, y);
  }
  if (yLabel) {
    ctx.save();
    ctx.translate(10, box.y + box.h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    ctx.fillText(yLabel, 0, 0);
    ctx.restore();
  }
  return { px, py };
}

function lkPolyline(ctx, points, color, dashed) {
  if (points.length === 0) return;
  ctx.save();
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.setLineDash(dashed ? [5, 3] : []);
  ctx.beginPath();
  points.forEach(([x, y], i) => (i === 0 ? ctx.moveTo(x, y) : ctx.lineTo(x, y)));
  ctx.stroke();
  ctx.restore();
}

// Title row: a heading and a right-aligned status line, both replaced on redraw.
function lkHeader(el) {
  const header = lkEl("div", "lk-header");
  const title = lkEl("span", "lk-title");
  const status = lkEl("span", "lk-status");
  header.append(title, status);
  el.appendChild(header);
  return { title, status };
}

// The step slider of a scrubbable view (labkit/widgets/history.py): scrub the recorded steps,
// jump to the peak, or follow the engine again. Returns a refresh() to call from draw().
function lkStepSlider(el, model, L) {
  const row = lkEl("div", "lk-controls lk-scrub");
  const label = lkEl("span", "", "");
  const slider = lkEl("input");
  slider.type = "range"; slider.min = "0"; slider.step = "1";
  slider.className = "lk-scrub-slider";
  const where = lkEl("span", "lk-scrub-where lk-mono");
  const peak = lkEl("button", "lk-scrub-peak");
  const follow = lkEl("button", "lk-scrub-follow");
  row.append(label, slider, where, peak, follow);
  el.appendChild(row);
  const pin = (index) => {
    model.set("pinned", true); model.set("cursor", index); model.save_changes();
  };
  slider.addEventListener("input", () => pin(Number(slider.value)));
  peak.addEventListener("click", () => pin(model.get("peak_index")));
  follow.addEventListener("click", () => { model.set("pinned", false); model.save_changes(); });
  return function refresh() {
    const steps = model.get("history_steps") || [];
    const cursor = model.get("cursor");
    row.style.display = steps.length > 1 ? "" : "none";
    label.textContent = L("scrub");
    peak.textContent = L("peak");
    peak.title = L("peak_note");
    follow.textContent = L("follow");
    follow.disabled = !model.get("pinned");
    slider.max = String(Math.max(0, steps.length - 1));
    if (document.activeElement !== slider) slider.value = String(Math.max(0, cursor));
    const state = model.get("pinned") ? L("pinned") : (model.get("running") ? L("live") : L("ended"));
    const onPeak = cursor === model.get("peak_index") ? ` (${L("peak_note")})` : "";
    where.textContent = cursor >= 0 ? `${L("step")} ${steps[cursor]}${onPeak} · ${state}` : "";
  };
}
