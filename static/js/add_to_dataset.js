// "Add to dataset" on the run page: lists the datasets of the run's project (from the API) and
// adds the run's question to the one chosen, with its reference, or with its answer as the
// reference when the user marks it right.

import { errorText } from "./form_errors.js";
import { getJSON, sendJSON } from "./http.js";

const box = document.getElementById("add-to-dataset");
const form = document.getElementById("add-to-dataset-form");
const select = document.getElementById("add-to-dataset-select");
const message = document.getElementById("add-to-dataset-message");

async function loadDatasets() {
  const datasets = (await getJSON("/api/datasets/")).filter((dataset) => String(dataset.project) === box.dataset.projectId);
  select.replaceChildren();
  for (const dataset of datasets) {
    const option = document.createElement("option");
    option.value = dataset.id;
    option.textContent = `${dataset.name} (${dataset.item_count})`;
    select.append(option);
  }
  if (!datasets.length) message.textContent = "The project has no dataset yet: make one on the Datasets page.";
}

box.addEventListener("toggle", () => {
  if (box.open && !select.options.length) loadDatasets().catch((error) => { message.textContent = `Could not list datasets: ${error.message}`; });
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  message.textContent = "Adding…";
  const { ok, status, body } = await sendJSON(`/api/datasets/${encodeURIComponent(select.value)}/items/`, {
    csrf: form,
    body: { run: Number(box.dataset.runId), answer_as_reference: document.getElementById("add-to-dataset-right").checked },
  });
  if (ok) message.textContent = `Added as item ${body.position}${body.reference ? " with a reference" : ""}.`;
  else message.textContent = `Not added: ${errorText(body) || status}`;
});
