// The series classifier page: upload a CSV, POST /api/predict; shows the top classes and the series
// drawn over its attention per time step.
"use strict";
const canvas = document.querySelector('[data-testid="series"]');
const ctx2d = canvas.getContext("2d");
const list = document.querySelector('[data-testid="prediction"]');
const note = document.querySelector('[data-testid="warning"]');
const COLOURS = ["#4cc9f0", "#f72585", "#b5e48c", "#ffd166", "#cdb4db", "#90e0ef"];

function draw(series, steps) {
  const W = canvas.width, H = canvas.height, T = steps.length;
  ctx2d.fillStyle = "#000";
  ctx2d.fillRect(0, 0, W, H);
  const top = Math.max(...steps) || 1;
  steps.forEach((w, t) => {  // attention as red shading behind the lines
    ctx2d.fillStyle = `rgba(220, 40, 40, ${(0.85 * w / top).toFixed(3)})`;
    ctx2d.fillRect(t * W / T, 0, Math.ceil(W / T), H);
  });
  const all = series.flat();
  const lo = Math.min(...all), hi = Math.max(...all), span = hi - lo || 1;
  series.slice(0, COLOURS.length).forEach((channel, c) => {
    ctx2d.strokeStyle = COLOURS[c];
    ctx2d.lineWidth = 1.5;
    ctx2d.beginPath();
    channel.forEach((v, t) => {
      const x = (t + 0.5) * W / T, y = H - 8 - (v - lo) / span * (H - 16);
      t ? ctx2d.lineTo(x, y) : ctx2d.moveTo(x, y);
    });
    ctx2d.stroke();
  });
}

async function predict(file) {
  let response;
  try {
    response = await fetch("/api/predict", { method: "POST", body: file,
      headers: { "Content-Type": file.type || "text/csv" } });
  } catch (e) { showError(`cannot reach the server: ${e}`); return; }
  if (!response.ok) { list.replaceChildren(); note.hidden = true; showError(await apiError(response)); return; }
  const result = await response.json();
  clearError();
  note.textContent = result.warning ? `warning: ${result.warning}` : "";
  note.hidden = !result.warning;
  list.replaceChildren(...result.top.map(t => {
    const li = document.createElement("li");
    li.textContent = `${t.class} ${(100 * t.probability).toFixed(1)}%`;
    return li;
  }));
  draw(result.series, result.attention.steps);
}
document.querySelector('[data-testid="upload"]').addEventListener("change", e => {
  if (e.target.files[0]) predict(e.target.files[0]);
});
