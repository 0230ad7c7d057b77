// The text classifier page: a text box, POST /api/predict as JSON; shows the classes, best first.
"use strict";
const box = document.querySelector('[data-testid="text"]');
const list = document.querySelector('[data-testid="prediction"]');
document.querySelector('[data-testid="length-note"]').textContent =
  `Texts are read up to their first ${RUN.max_length} tokens; classes: ${RUN.classes.join(", ")}`;

async function classify() {
  let response;
  try {
    response = await fetch("/api/predict", { method: "POST", body: JSON.stringify({ text: box.value }),
      headers: { "Content-Type": "application/json" } });
  } catch (e) { showError(`cannot reach the server: ${e}`); return; }
  if (!response.ok) { list.replaceChildren(); showError(await apiError(response)); return; }
  const result = await response.json();
  clearError();
  const items = Object.entries(result.predictions[0].probabilities).sort((a, b) => b[1] - a[1]).slice(0, 5)
    .map(([c, q]) => `${c} ${(100 * q).toFixed(1)}%`);
  list.replaceChildren(...items.map(text => { const li = document.createElement("li"); li.textContent = text; return li; }));
}
document.querySelector('[data-testid="predict"]').addEventListener("click", classify);
