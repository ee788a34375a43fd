// The pool page, for its admins: add worker rows, move them up and down (the position fields
// follow the rows), and test a stored worker's or the conductor's connection through the API.
// Without this module the form still works: positions are plain number fields.

import { sendJSON } from "./http.js";

const form = document.getElementById("pool-form");
const rows = document.getElementById("worker-rows");
const template = document.getElementById("worker-row-template");
const total = form.querySelector("input[name='workers-TOTAL_FORMS']");

function renumber() {
  rows.querySelectorAll("tr.worker-row").forEach((row, index) => {
    const order = row.querySelector("input[name$='-ORDER']");
    if (order) order.value = String(index + 1);
  });
}

document.getElementById("add-worker").addEventListener("click", () => {
  const index = Number(total.value);
  const html = template.innerHTML.replaceAll("__prefix__", String(index));
  const holder = document.createElement("tbody");
  holder.innerHTML = html;
  const row = holder.querySelector("tr");
  rows.appendChild(row);
  total.value = String(index + 1);
  renumber();
  row.querySelector("input[name$='-name']").focus();
});

rows.addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button) return;
  const row = button.closest("tr");
  if (button.classList.contains("move-up") && row.previousElementSibling) {
    rows.insertBefore(row, row.previousElementSibling);
    renumber();
  } else if (button.classList.contains("move-down") && row.nextElementSibling) {
    rows.insertBefore(row.nextElementSibling, row);
    renumber();
  }
});

function describe(result) {
  if (!result.ok) return `Error: ${result.error}`;
  const latency = result.latency === null ? "" : ` · ${result.latency.toFixed(2)} s`;
  return `OK: "${result.answer}" · ${result.tokens_in} tokens in, ${result.tokens_out} out${latency}`;
}

async function testConnection(button) {
  const output = button.parentElement.querySelector(".connection-result");
  button.disabled = true;
  output.dataset.state = "running";
  output.textContent = "Calling…";
  try {
    const response = await sendJSON(button.dataset.url, { csrf: form });
    const body = response.body;
    if (!response.ok) throw new Error(body.detail || `${response.status} ${response.statusText}`);
    output.dataset.state = body.ok ? "ok" : "error";
    output.textContent = describe(body);
  } catch (error) {
    output.dataset.state = "error";
    output.textContent = `Error: ${error.message}`;
  } finally {
    button.disabled = false;
  }
}

form.addEventListener("click", (event) => {
  const button = event.target.closest("button.test-connection");
  if (button) testConnection(button);
});
