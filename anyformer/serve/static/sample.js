// The generator page: pick a class, POST /api/sample, show the images.
"use strict";
const select = document.getElementById("class");
const gallery = document.querySelector('[data-testid="samples"]');
document.getElementById("n").max = RUN.max_samples;
document.getElementById("steps").max = RUN.max_steps;
RUN.classes.forEach((name, i) => select.append(new Option(name, i)));

document.getElementById("sample").addEventListener("click", async () => {
  clearError();
  const seed = document.getElementById("seed").value;
  const response = await fetch("/api/sample", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ class: Number(select.value), n: Number(document.getElementById("n").value),
      steps: Number(document.getElementById("steps").value), cfg: Number(document.getElementById("cfg").value),
      seed: seed === "" ? null : Number(seed) }) });
  if (!response.ok) { showError(await apiError(response)); return; }
  const result = await response.json();
  gallery.replaceChildren(...result.images.map(src => Object.assign(new Image(), { src, alt: result.class })));
});
