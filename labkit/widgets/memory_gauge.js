// MemoryGauge front end (labkit/widgets/memory_gauge.py): two stacked bars (the pool; the
// allocated slots split into useful / reserved-for-later / internal fragmentation) and a trend.

const MG_LEFT = 34, MG_BAR_H = 22, MG_TREND_H = 80;

// segments: [{value (0..100), color, hatch, label}] drawn left to right across box.
function drawBar(ctx, box, segments, palette, caption) {
  ctx.font = "11px sans-serif"; ctx.fillStyle = palette.ink;
  ctx.textAlign = "left"; ctx.textBaseline = "bottom";
  ctx.fillText(caption, box.x, box.y - 3);
  let x = box.x;
  for (const seg of segments) {
    const w = (Math.max(0, seg.value) / 100) * box.w;
    if (w <= 0) continue;
    ctx.fillStyle = seg.hatch ? "#ffffff" : seg.color;
    ctx.fillRect(x, box.y, w, box.h);
    if (seg.hatch) lkHatch(ctx, x, box.y, w, box.h, seg.color);
    const text = lkFmt(seg.value) + "%";
    if (w > ctx.measureText(text).width + 6) {
      ctx.fillStyle = seg.hatch || seg.light ? palette.ink : "#ffffff";
      ctx.textAlign = "center"; ctx.textBaseline = "middle";
      ctx.fillText(text, x + w / 2, box.y + box.h / 2);
    }
    x += w;
  }
  ctx.strokeStyle = palette.grid;
  ctx.strokeRect(box.x + 0.5, box.y + 0.5, box.w - 1, box.h - 1);
}

function poolSegments(model, p) {
  const usage = model.get("usage_perc");
  const external = Math.min(model.get("external_frag_perc"), 100 - usage);
  return [{ value: usage, color: lkAlpha(p.ink, 0.7) },
    { value: 100 - usage - external, color: p.free, light: true },
    { value: external, color: p.external_frag, hatch: true }];
}

function allocatedSegments(model, p) {
  if (model.get("usage_perc") <= 0) return [];   // nothing allocated: nothing to split
  const waste = model.get("waste_perc");
  const reserved = model.get("reserved_unused_perc"), internal = model.get("internal_frag_perc");
  const other = waste - reserved - internal;
  return [{ value: 100 - waste, color: p.used },
    { value: reserved, color: p.reserved_unused, light: true },
    { value: internal, color: p.internal_frag, hatch: true },
    { value: other > 0.05 ? other : 0, color: p.idle }];
}

function drawTrend(ctx, model, box, p, caption, stepLabel) {
  const h = model.get("history") || {};
  const steps = h.step || [];
  ctx.font = "11px sans-serif"; ctx.fillStyle = p.ink; ctx.textAlign = "left"; ctx.textBaseline = "bottom";
  ctx.fillText(caption, box.x, box.y - 3);
  const axes = lkAxes(ctx, box, Math.max(2, steps.length), 100, [0, 50, 100], p, "");
  const line = (key, color, dashed) => lkPolyline(ctx, (h[key] || []).map((v, i) => [axes.px(i), axes.py(v)]), color, dashed);
  line("usage", p.ink, false);
  line("waste", p.internal_frag, false);
  line("external_frag", p.external_frag, true);
  const shown = steps.indexOf(model.get("step"));
  if (shown >= 0 && steps.length > 1) {   // the step the bars show (slider, peak or newest)
    ctx.strokeStyle = lkAlpha(p.ink, 0.5); ctx.lineWidth = 1; ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(axes.px(shown), box.y); ctx.lineTo(axes.px(shown), box.y + box.h); ctx.stroke();
    ctx.setLineDash([]);
  }
  if (steps.length > 0) {
    ctx.fillStyle = p.ink; ctx.textBaseline = "top";
    ctx.textAlign = "left"; ctx.fillText(`${stepLabel} ${steps[0]}`, box.x, box.y + box.h + 2);
    ctx.textAlign = "right"; ctx.fillText(String(steps[steps.length - 1]), box.x + box.w, box.y + box.h + 2);
  }
}

function render({ model, el }) {
  el.classList.add("lk-view", "lk-memory-gauge");
  const header = lkHeader(el);
  const legendBox = lkEl("div");
  const canvas = lkEl("canvas");
  el.append(legendBox, canvas);
  const L = (key) => (model.get("labels") || {})[key] || key;
  const refreshSlider = lkStepSlider(el, model, L);

  function statusText() {
    if (model.get("step") < 0) return L("waiting");
    const parts = [`${L("step")} ${model.get("step")}`, `${L("running")} ${model.get("num_requests_running")}`,
      `${L("waiting_reqs")} ${model.get("num_requests_waiting")}`, `${L("preemptions")} ${model.get("num_preemptions")}`];
    if (model.get("simulated")) parts.push(L("simulated"));
    return parts.join(" · ");
  }

  function draw() {
    refreshSlider();
    const p = model.get("palette");
    header.title.textContent = L("title");
    header.status.textContent = statusText();
    legendBox.replaceChildren(lkLegend([
      { color: lkAlpha(p.ink, 0.7), label: L("usage") }, { color: p.free, label: L("free") },
      { color: p.external_frag, label: L("external_frag"), kind: "hatch" },
      { color: p.used, label: L("used") }, { color: p.reserved_unused, label: L("reserved_unused") },
      { color: p.internal_frag, label: L("internal_frag"), kind: "hatch" },
      { color: p.internal_frag, label: L("waste"), kind: "line" }]));
    const width = lkWidth(el) - 18;
    const ctx = lkSize(canvas, width, 16 + MG_BAR_H + 20 + MG_BAR_H + 24 + MG_TREND_H + 16);
    const barBox = (y) => ({ x: MG_LEFT, y, w: width - MG_LEFT - 6, h: MG_BAR_H });
    drawBar(ctx, barBox(16), poolSegments(model, p), p, L("pool"));
    drawBar(ctx, barBox(16 + MG_BAR_H + 20), allocatedSegments(model, p), p, L("allocated_split"));
    drawTrend(ctx, model, { x: MG_LEFT, y: 2 * (16 + MG_BAR_H) + 24, w: width - MG_LEFT - 6, h: MG_TREND_H },
      p, L("trend"), L("step"));
  }

  return lkWatch(model, el, ["step", "usage_perc", "waste_perc", "reserved_unused_perc",
    "internal_frag_perc", "external_frag_perc", "num_requests_running", "num_requests_waiting",
    "num_preemptions", "simulated", "history", "labels", "palette", "history_steps", "cursor",
    "peak_index", "pinned", "running"], draw);
}

export default { render };
