// LatencyView front end (labkit/widgets/latency_view.py): one histogram per metric (ms on x,
// requests on y) with P50 (solid) and P99 (dashed) markers. The percentile values are written in a
// row of their own above the plot, never on the bars (nor on each other when P50 ≈ P99).

const LV_H = 184, LV_PAD = { left: 34, right: 10, top: 36, bottom: 30 }, LV_BINS = 20;

function histogram(values, bins, max) {
  const counts = new Array(bins).fill(0);
  for (const v of values) counts[Math.min(bins - 1, Math.floor((v / max) * bins))] += 1;
  return counts;
}

// A percentile line across the plot with a small flag on top (the value is in the row above).
function drawMarker(ctx, box, x, color, dashed) {
  lkPolyline(ctx, [[x, box.y], [x, box.y + box.h]], color, dashed);
  ctx.fillStyle = color;
  ctx.beginPath(); ctx.moveTo(x - 4, box.y - 5); ctx.lineTo(x + 4, box.y - 5); ctx.lineTo(x, box.y); ctx.fill();
}

// "P50 12.3 ms   P99 45.6 ms", right-aligned in the row above the plot, each in its marker's colour.
function drawPercentileRow(ctx, box, items) {
  ctx.font = "10px sans-serif"; ctx.textBaseline = "bottom"; ctx.textAlign = "right";
  let x = box.x + box.w;
  for (const item of items.slice().reverse()) {
    ctx.fillStyle = item.color;
    ctx.fillText(item.text, x, box.y - 7);
    x -= ctx.measureText(item.text).width + 12;
  }
}

function drawHistogram(ctx, box, samplesS, pct, palette, L, name) {
  ctx.font = "11px sans-serif"; ctx.fillStyle = palette.ink;
  ctx.textAlign = "left"; ctx.textBaseline = "bottom";
  ctx.fillText(`${L(name)} · n=${samplesS.length}`, box.x - LV_PAD.left + 4, box.y - 21);
  if (samplesS.length === 0) return;
  const ms = samplesS.map((s) => s * 1000);
  const max = Math.max(...ms) * 1.05 || 1;
  const counts = histogram(ms, LV_BINS, max);
  const top = Math.max(...counts);
  const axes = lkAxes(ctx, box, 2, top, top <= 4 ? [0, top] : [0, Math.round(top / 2), top], palette, "");
  const binW = box.w / LV_BINS;
  counts.forEach((count, i) => {
    ctx.fillStyle = lkAlpha(palette.prefill, 0.75);
    ctx.fillRect(box.x + i * binW, axes.py(count), Math.max(1, binW - 1), axes.py(0) - axes.py(count));
  });
  const xOf = (v) => box.x + (v / max) * box.w;
  ctx.fillStyle = palette.ink; ctx.textBaseline = "top";
  ctx.textAlign = "left"; ctx.fillText("0", box.x, box.y + box.h + 2);
  ctx.textAlign = "right"; ctx.fillText(lkFmt(max, 1), box.x + box.w, box.y + box.h + 2);
  if (pct) {
    drawMarker(ctx, box, xOf(pct.p50 * 1000), palette.ink, false);
    drawMarker(ctx, box, xOf(pct.p99 * 1000), palette.internal_frag, true);
    drawPercentileRow(ctx, box, [
      { color: palette.ink, text: `P50 ${lkFmt(pct.p50 * 1000, 1)} ms` },
      { color: palette.internal_frag, text: `P99 ${lkFmt(pct.p99 * 1000, 1)} ms` }]);
  }
}

function render({ model, el }) {
  el.classList.add("lk-view", "lk-latency-view");
  const header = lkHeader(el);
  const legendBox = lkEl("div");
  const canvas = lkEl("canvas");
  el.append(legendBox, canvas);
  const L = (key) => (model.get("labels") || {})[key] || key;

  function draw() {
    const p = model.get("palette");
    const n = model.get("num_finished");
    header.title.textContent = L("title");
    header.status.textContent = n === 0 ? L("waiting") : `${L("finished")} ${n}`;
    legendBox.replaceChildren(lkLegend([{ color: lkAlpha(p.prefill, 0.75), label: L("count") },
      { color: p.ink, label: L("p50"), kind: "line" }, { color: p.internal_frag, label: L("p99"), kind: "dash" }]));
    const width = lkWidth(el) - 18;
    const narrow = width < 520;
    const panelW = narrow ? width : width / 2;
    const ctx = lkSize(canvas, width, narrow ? 2 * LV_H : LV_H);
    ["ttft_s", "tpot_s"].forEach((name, i) => {
      const x = narrow ? 0 : i * panelW, y = narrow ? i * LV_H : 0;
      const box = { x: x + LV_PAD.left, y: y + LV_PAD.top, w: panelW - LV_PAD.left - LV_PAD.right,
                    h: LV_H - LV_PAD.top - LV_PAD.bottom };
      drawHistogram(ctx, box, model.get(name), (model.get("percentiles") || {})[name], p, L, name);
    });
  }

  return lkWatch(model, el, ["ttft_s", "tpot_s", "percentiles", "num_finished", "labels", "palette"], draw);
}

export default { render };
