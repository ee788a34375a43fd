// The batch form: POST /api/batches/ with the runs list's filters and the override, then open the
// batch page. Errors come back keyed by field ("override.pattern") and are shown beside it.

import { clearFormErrors, showFormErrors } from "./form_errors.js";
import { sendJSON } from "./http.js";

const form = document.getElementById("batch-form");
if (form) {
  const filters = JSON.parse(document.getElementById("batch-filters").textContent);
  const submit = document.getElementById("batch-submit");
  const kinds = form.querySelectorAll(".batch-kind");

  const kind = () => form.querySelector("[name=kind]:checked").value;
  const showKind = () => kinds.forEach((box) => (box.hidden = box.dataset.kind !== kind()));
  form.querySelectorAll("[name=kind]").forEach((radio) => radio.addEventListener("change", showKind));
  showKind();

  const summary = document.getElementById("batch-error");
  const showErrors = (errors) => showFormErrors(form, errors, summary);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFormErrors(form, summary);
    const override =
      kind() === "worker"
        ? { kind: "worker", from: form.elements.from.value.trim(), to: form.elements.to.value.trim() }
        : {
            kind: "instruction",
            match: form.elements.match.value,
            pattern: form.elements.pattern.value,
            replacement: form.elements.replacement.value,
          };
    submit.disabled = true;
    try {
      const response = await sendJSON("/api/batches/", { csrf: form, body: { project: Number(form.elements.project.value), filters, override } });
      const body = response.body;
      if (response.status === 201 && body.id) {
        window.location.assign(`/batches/${body.id}/`);
        return;
      }
      if (response.status === 400 && body && typeof body === "object") showErrors(body);
      else showErrors({ __all__: [body.detail || `The server answered ${response.status}.`] });
    } catch (error) {
      showErrors({ __all__: [`Could not reach the server: ${error.message}`] });
    }
    submit.disabled = false;
  });
}
