// The runs list: keyboard navigation (j/k move, Enter opens) and the new-run form.
// A plain ES module; the page works without it except for these two things.

const table = document.getElementById("runs-table");
const rows = table ? Array.from(table.querySelectorAll("tbody tr[data-href]")) : [];
let selected = -1;

// The selected row is marked with aria-current; moving the selection also moves focus to the
// row's link, so screen readers announce it and Enter follows it.
function select(index, { focus = true } = {}) {
  if (!rows.length) return;
  const next = Math.max(0, Math.min(rows.length - 1, index));
  if (selected >= 0) rows[selected].removeAttribute("aria-current");
  selected = next;
  const row = rows[selected];
  row.setAttribute("aria-current", "true");
  if (focus) {
    row.querySelector("a.row-link")?.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }
}

function typingInField(event) {
  const target = event.target;
  return (
    target instanceof HTMLElement &&
    (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))
  );
}

// Enter on a button or link outside the table keeps its own meaning.
function onOtherControl(event) {
  const target = event.target;
  return target instanceof Element && target !== document.body && !target.closest("#runs-table tbody");
}

function pageLink(id, hash) {
  const link = document.getElementById(id);
  if (link) window.location.assign(link.href.split("#")[0] + hash);
}

document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
  if (typingInField(event)) return;
  if (event.key === "j") {
    // Past the last row, the next page (same filters) opens with its first row selected.
    if (selected === rows.length - 1) pageLink("page-next", "#first");
    else select(selected + 1);
  } else if (event.key === "k") {
    if (selected <= 0 && rows.length) pageLink("page-prev", "#last");
    else select(selected - 1);
  } else if (event.key === "Enter" && selected >= 0 && !onOtherControl(event)) {
    // A row link focused with Tab wins over the j/k selection.
    const focusedRow = event.target instanceof Element ? event.target.closest("tr[data-href]") : null;
    window.location.assign((focusedRow || rows[selected]).dataset.href);
  } else {
    return;
  }
  event.preventDefault();
});

rows.forEach((row, index) => {
  row.addEventListener("click", (event) => {
    if (!(event.target instanceof HTMLAnchorElement)) select(index, { focus: false });
  });
});

// Arriving from the previous or next page by keyboard keeps the keyboard going.
const arrivedByKeyboard = ["#first", "#last"].includes(window.location.hash);
if (rows.length) {
  select(window.location.hash === "#last" ? rows.length - 1 : 0, { focus: arrivedByKeyboard });
}

// New run: POST /api/runs/ with the session's CSRF token, then open the run's live page.
const form = document.getElementById("new-run");
if (form) {
  const poolSelect = form.querySelector("[name=pool]");
  const simBadge = document.getElementById("new-run-pool-sim");
  const submit = document.getElementById("new-run-submit");

  const showSimulated = () => {
    const option = poolSelect.selectedOptions[0];
    simBadge.hidden = !(option && option.dataset.simulated);
    if (option && option.dataset.simulated) simBadge.textContent = option.dataset.simulated;
  };
  poolSelect.addEventListener("change", showSimulated);
  showSimulated();

  const clearErrors = () => {
    form.querySelectorAll("[data-error-for]").forEach((el) => (el.textContent = ""));
    form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
  };

  const showErrors = (errors) => {
    const general = [];
    for (const [field, messages] of Object.entries(errors)) {
      const text = Array.isArray(messages) ? messages.join(" ") : String(messages);
      const slot = form.querySelector(`[data-error-for="${CSS.escape(field)}"]`);
      const input = form.querySelector(`[name="${CSS.escape(field)}"]`);
      if (slot && field !== "__all__") {
        slot.textContent = text;
        if (input) input.setAttribute("aria-invalid", "true");
      } else {
        general.push(field === "detail" || field === "non_field_errors" ? text : `${field}: ${text}`);
      }
    }
    document.getElementById("new-run-error").textContent = general.join(" ");
    if (errors.reference || errors.grader) document.getElementById("new-run-grading").open = true;
    const firstInvalid = form.querySelector("[aria-invalid=true]");
    if (firstInvalid) firstInvalid.focus();
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    const question = form.elements.input.value.trim();
    if (!question) {
      showErrors({ input: ["Write a question first."] });
      return;
    }
    const payload = {
      input: question,
      pool: Number(poolSelect.value),
      strategy: form.elements.strategy.value,
    };
    const reference = form.elements.reference.value.trim();
    if (reference) payload.reference = reference;
    if (form.elements.grader.value) payload.grader = form.elements.grader.value;
    submit.disabled = true;
    try {
      const response = await fetch("/api/runs/", {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          Accept: "application/json",
          "X-CSRFToken": form.elements.csrfmiddlewaretoken.value,
        },
        body: JSON.stringify(payload),
      });
      const body = await response.json().catch(() => ({}));
      if (response.status === 201 && body.id) {
        window.location.assign(`/runs/${body.id}/`);
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
