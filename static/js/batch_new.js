// The batch form: POST /api/batches/ with the runs list's filters and the override, then open the
// batch page. Errors come back keyed by field ("override.pattern") and are shown beside it.

const form = document.getElementById("batch-form");
if (form) {
  const filters = JSON.parse(document.getElementById("batch-filters").textContent);
  const submit = document.getElementById("batch-submit");
  const kinds = form.querySelectorAll(".batch-kind");

  const kind = () => form.querySelector("[name=kind]:checked").value;
  const showKind = () => kinds.forEach((box) => (box.hidden = box.dataset.kind !== kind()));
  form.querySelectorAll("[name=kind]").forEach((radio) => radio.addEventListener("change", showKind));
  showKind();

  const clearErrors = () => {
    form.querySelectorAll("[data-error-for]").forEach((el) => (el.textContent = ""));
  };

  const showErrors = (errors) => {
    const general = [];
    for (const [field, messages] of Object.entries(errors)) {
      const text = Array.isArray(messages) ? messages.join(" ") : String(messages);
      const slot = form.querySelector(`[data-error-for="${CSS.escape(field)}"]`);
      if (slot && field !== "__all__") slot.textContent = text;
      else general.push(field === "detail" ? text : `${field}: ${text}`);
    }
    document.getElementById("batch-error").textContent = general.join(" ");
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
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
      const response = await fetch("/api/batches/", {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          Accept: "application/json",
          "X-CSRFToken": form.elements.csrfmiddlewaretoken.value,
        },
        body: JSON.stringify({ project: Number(form.elements.project.value), filters, override }),
      });
      const body = await response.json().catch(() => ({}));
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
