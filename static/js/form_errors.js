// An API's 400 shown to the user: each field's messages beside its input (the element with
// data-error-for="<field>", the input marked aria-invalid and focused), the rest in the form's
// summary line; or the whole answer as one line (errorText). Field names are the API's, dotted for
// nested ones ("override.pattern", "edits[0].worker").

const GENERAL = new Set(["detail", "non_field_errors", "__all__"]);

function messagesText(messages) {
  return Array.isArray(messages) ? messages.join(" ") : String(messages);
}

// One line for an error answer: its detail, or "field: message" for each field, joined by "; ";
// the status when the body says nothing.
export function errorText(body, status) {
  if (body && typeof body === "object" && !Array.isArray(body)) {
    if (body.detail) return String(body.detail);
    const text = Object.entries(body)
      .map(([field, messages]) => (GENERAL.has(field) ? messagesText(messages) : `${field}: ${messagesText(messages)}`))
      .join("; ");
    if (text) return text;
  }
  return status ? `The server answered ${status}.` : "";
}

export function clearFormErrors(form, summary) {
  form.querySelectorAll("[data-error-for]").forEach((slot) => (slot.textContent = ""));
  form.querySelectorAll("[aria-invalid]").forEach((input) => input.removeAttribute("aria-invalid"));
  if (summary) summary.textContent = "";
}

// Show ``errors`` ({field: [messages]}) in ``form``; what has no slot goes to ``summary``.
export function showFormErrors(form, errors, summary) {
  const general = [];
  for (const [field, messages] of Object.entries(errors)) {
    const text = messagesText(messages);
    const slot = GENERAL.has(field) ? null : form.querySelector(`[data-error-for="${CSS.escape(field)}"]`);
    if (slot) {
      slot.textContent = text;
      form.querySelector(`[name="${CSS.escape(field)}"]`)?.setAttribute("aria-invalid", "true");
    } else {
      general.push(GENERAL.has(field) ? text : `${field}: ${text}`);
    }
  }
  if (summary) summary.textContent = general.join(" ");
  form.querySelector("[aria-invalid=true]")?.focus();
}
