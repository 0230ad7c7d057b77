// The classifier page: draw or upload, then POST /api/predict; shows the top classes and the rollout.
"use strict";
const canvas = document.querySelector('[data-testid="canvas"]');
const ctx2d = canvas.getContext("2d");
const list = document.querySelector('[data-testid="prediction"]');
const heat = document.querySelector('[data-testid="attention"]');
const note = document.querySelector('[data-testid="warning"]');
let sent = 0, shown = 0;  // answers can overtake each other: only the newest request's is drawn

function blank() {
  ctx2d.fillStyle = "#000";
  ctx2d.fillRect(0, 0, canvas.width, canvas.height);
}
blank();

async function predict(blob) {
  const id = ++sent;
  let response;
  try {
    response = await fetch("/api/predict", { method: "POST", body: blob,
      headers: { "Content-Type": blob.type || "application/octet-stream" } });
  } catch (e) { showError(`cannot reach the server: ${e}`); return; }
  if (id < shown) return;
  shown = id;
  if (!response.ok) { forget(); showError(await apiError(response)); return; }
  const result = await response.json();
  clearError();
  note.textContent = result.warning ? `warning: ${result.warning}` : "";
  note.hidden = !result.warning;
  list.replaceChildren(...result.top.map(t => {
    const li = document.createElement("li");
    const cls = document.createElement("span"); cls.className = "cls"; cls.textContent = t.class;
    const bar = document.createElement("span"); bar.className = "bar";
    const fill = document.createElement("span"); fill.style.width = `${(100 * t.probability).toFixed(1)}%`;
    bar.append(fill);
    const pct = document.createElement("span"); pct.textContent = `${(100 * t.probability).toFixed(1)}%`;
    li.append(cls, bar, pct);
    return li;
  }));
  heat.src = result.attention.png;
  heat.hidden = false;
}
// An answer shown beside an error would read as the answer to the input that failed.
function forget() {
  list.replaceChildren();
  heat.hidden = true;
  heat.removeAttribute("src");
  note.hidden = true;
}
const predictCanvas = () => canvas.toBlob(b => predict(b), "image/png");
const predictSoon = debounce(predictCanvas, 150);

// Drawing: pointer events serve mouse, pen and touch alike.
let drawing = false;
function at(e) {
  const r = canvas.getBoundingClientRect();
  return [(e.clientX - r.left) * canvas.width / r.width, (e.clientY - r.top) * canvas.height / r.height];
}
canvas.addEventListener("pointerdown", e => {
  drawing = true;
  canvas.setPointerCapture(e.pointerId);
  ctx2d.strokeStyle = "#fff"; ctx2d.lineWidth = 22; ctx2d.lineCap = "round"; ctx2d.lineJoin = "round";
  ctx2d.beginPath();
  ctx2d.moveTo(...at(e));
  ctx2d.lineTo(...at(e));
  ctx2d.stroke();
});
canvas.addEventListener("pointermove", e => {
  if (!drawing) return;
  ctx2d.lineTo(...at(e));
  ctx2d.stroke();
  predictSoon();  // updates while drawing, at most one request per pause
});
const stop = () => { if (drawing) { drawing = false; predictSoon(); } };
canvas.addEventListener("pointerup", stop);
canvas.addEventListener("pointercancel", stop);
document.getElementById("clear").addEventListener("click", () => {
  blank(); forget(); clearError();
});

// Uploads and drops: the file's own bytes go to the server, so it is read exactly as `anyformer predict` reads it.
function useFile(file) {
  if (!file) return;
  predict(file);
  const url = URL.createObjectURL(file);
  const img = new Image();
  img.onload = () => { blank(); ctx2d.drawImage(img, 0, 0, canvas.width, canvas.height); URL.revokeObjectURL(url); };
  img.onerror = () => URL.revokeObjectURL(url);
  img.src = url;
}
document.querySelector('[data-testid="upload"]').addEventListener("change", e => useFile(e.target.files[0]));
canvas.addEventListener("dragover", e => { e.preventDefault(); canvas.classList.add("drop"); });
canvas.addEventListener("dragleave", () => canvas.classList.remove("drop"));
canvas.addEventListener("drop", e => {
  e.preventDefault(); canvas.classList.remove("drop");
  useFile(e.dataTransfer.files[0]);
});
