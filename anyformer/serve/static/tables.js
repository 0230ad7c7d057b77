// The table page: a form with one cell per column, POST /api/predict as JSON; shows the class and its
// probability (and the others'), or the number.
"use strict";
const form = document.querySelector('[data-testid="row-form"]');
const list = document.querySelector('[data-testid="prediction"]');
const note = document.querySelector('[data-testid="warning"]');
document.querySelector('[data-testid="target"]').textContent = RUN.target;

RUN.columns.forEach(column => {
  const label = document.createElement("label");
  label.textContent = `${column.name} `;
  const input = document.createElement("input");
  input.name = column.name;
  input.dataset.testid = `cell-${column.name}`;
  input.placeholder = column.kind === "category" ? column.values.slice(0, 4).join(", ") : column.kind;
  if (column.kind === "category") {  // the values training saw, offered as the user types
    const options = document.createElement("datalist");
    options.id = `values-${form.children.length}`;
    column.values.forEach(v => { const o = document.createElement("option"); o.value = v; options.append(o); });
    input.setAttribute("list", options.id);
    label.append(options);
  }
  label.append(input);
  form.append(label, document.createElement("br"));
});

async function predict() {
  const row = {};
  new FormData(form).forEach((value, key) => { row[key] = value === "" ? null : value; });
  let response;
  try {
    response = await fetch("/api/predict", { method: "POST", body: JSON.stringify({ row }),
      headers: { "Content-Type": "application/json" } });
  } catch (e) { showError(`cannot reach the server: ${e}`); return; }
  if (!response.ok) { list.replaceChildren(); showError(await apiError(response)); return; }
  const result = await response.json();
  clearError();
  note.textContent = result.warning ? `warning: ${result.warning}` : "";
  note.hidden = !result.warning;
  const p = result.predictions[0];
  const items = "value" in p ? [`${p.value.toPrecision(6)}`]
    : Object.entries(p.probabilities).sort((a, b) => b[1] - a[1]).slice(0, 5)
        .map(([c, q]) => `${c} ${(100 * q).toFixed(1)}%`);
  list.replaceChildren(...items.map(text => { const li = document.createElement("li"); li.textContent = text; return li; }));
}
document.querySelector('[data-testid="predict"]').addEventListener("click", predict);
