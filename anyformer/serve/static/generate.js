// The language-model page: POST /api/generate with stream=true and append the text as it arrives.
"use strict";
const promptBox = document.querySelector('[data-testid="prompt"]');
const output = document.querySelector('[data-testid="output"]');
const goButton = document.getElementById("generate");
const stopButton = document.getElementById("stop");
const tokensBox = document.getElementById("max-new-tokens");
tokensBox.max = RUN.max_new_tokens;
tokensBox.value = Math.min(Number(tokensBox.value), RUN.max_new_tokens);
let running = null;  // the AbortController of the generation in progress

const optionalInt = id => { const v = document.getElementById(id).value; return v === "" ? null : Number(v); };

async function generate() {
  if (running) running.abort();
  const controller = running = new AbortController();
  clearError();
  output.replaceChildren();
  const prompt = promptBox.value;
  const shownPrompt = document.createElement("span"); shownPrompt.className = "prompt"; shownPrompt.textContent = prompt;
  const text = document.createTextNode("");
  output.append(shownPrompt, text);
  goButton.disabled = true; stopButton.disabled = false;
  try {
    const response = await fetch("/api/generate", { method: "POST", signal: controller.signal,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt, stream: true, max_new_tokens: Number(tokensBox.value),
        temperature: Number(document.getElementById("temperature").value),
        top_k: optionalInt("top-k"), seed: optionalInt("seed") }) });
    if (!response.ok) { showError(await apiError(response)); return; }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text.appendData(value);
    }
  } catch (e) {
    if (e.name !== "AbortError") showError(`generation broke off: ${e}`);
  } finally {
    if (running === controller) { running = null; goButton.disabled = false; stopButton.disabled = true; }
  }
}
goButton.addEventListener("click", generate);
stopButton.addEventListener("click", () => running && running.abort());
promptBox.addEventListener("keydown", e => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) generate(); });
