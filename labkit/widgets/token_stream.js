// TokenStream front end (labkit/widgets/token_stream.py): one row per request, text growing live.
// Model text is untrusted: it only ever goes through textContent, never innerHTML.

function requestRow(model, rid, L) {
  const palette = model.get("palette");
  const row = lkEl("div", "lk-req");
  const chip = lkEl("span", "lk-chip", rid);
  chip.style.background = model.get("colors")[rid] || palette.ink;
  const reason = model.get("finished")[rid];
  const count = model.get("num_tokens")[rid] || 0;
  const meta = lkEl("span", "lk-req-meta", `${count} ${L("tokens")} · ${reason ? L(reason) : L("running")}`);
  const text = lkEl("div", "lk-text");
  for (const [piece, kind] of model.get("segments")[rid] || []) {
    const span = lkEl("span", kind === "draft" ? "lk-draft" : "", piece);
    if (kind === "draft") {
      span.style.background = lkAlpha(palette.accepted, 0.28);
      span.title = L("draft");
    }
    text.appendChild(span);
  }
  row.append(chip, meta, text);
  return row;
}

function render({ model, el }) {
  el.classList.add("lk-view", "lk-token-stream");
  const header = lkHeader(el);
  const legendBox = lkEl("div");
  const list = lkEl("div", "lk-stream");
  el.append(legendBox, list);
  const L = (key) => (model.get("labels") || {})[key] || key;

  function draw() {
    const p = model.get("palette");
    const order = model.get("order");
    header.title.textContent = L("title");
    header.status.textContent = order.length === 0 ? L("waiting") : "";
    legendBox.replaceChildren(lkLegend([{ color: lkAlpha(p.accepted, 0.28), label: L("draft") }]));
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 8;
    list.replaceChildren(...order.map((rid) => requestRow(model, rid, L)));
    if (atBottom) list.scrollTop = list.scrollHeight;   // follow the newest text unless scrolled up
  }

  return lkWatch(model, el, ["order", "segments", "num_tokens", "finished", "colors", "labels",
    "palette"], draw);
}

export default { render };
