// Shared by every section: the run's facts, the error box, and reading an API error.
"use strict";
const RUN = JSON.parse(document.getElementById("run-info").textContent);
document.getElementById("title").textContent = `anyformer · ${RUN.run}`;
document.getElementById("subtitle").textContent = `${RUN.family} model · ${RUN.task}`;

const errorBox = document.querySelector('[data-testid="error"]');
function showError(message) {
  errorBox.textContent = message;
  errorBox.hidden = false;
}
function clearError() {
  errorBox.hidden = true;
  errorBox.textContent = "";
}
// The API answers every refusal as {"error": "..."}; anything else (a proxy's page) is shown by status.
async function apiError(response) {
  try {
    const body = await response.json();
    if (body && body.error) return `${body.error} (HTTP ${response.status})`;
  } catch (e) { /* not JSON */ }
  return `the server answered HTTP ${response.status} ${response.statusText}`;
}
function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}
