// The Cancel button, for those who may cancel (the server renders it only for them). Once the
// user confirms, it posts to the API and leaves the rest to the run's live events: run.finished
// hides it and redraws the steps the cancel closed. 202 means the server queued the cancel
// behind a busy database.

import { sendJSON } from "../http.js";
import { RUN_FINISHED } from "./statuses.js";

export class CancelButton {
  constructor({ form, store }) {
    this.form = form;
    this.store = store;
    if (!form) return;
    this.button = form.querySelector("button");
    this.message = form.querySelector("[role=status]");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      // A cancel cannot be undone: the button's data-confirm question is asked first.
      if (window.confirm(this.button.dataset.confirm)) this.cancel();
    });
  }

  async cancel() {
    this.button.disabled = true;
    this.message.textContent = "Cancelling…";
    try {
      const response = await sendJSON(this.form.action, { csrf: this.form });
      const body = response.body || {};
      if (!response.ok) throw new Error(body.detail || `${response.status} ${response.statusText}`);
      if (response.status === 202) this.message.textContent = "Cancel requested: the run stops as soon as the database is free.";
      else if (body.status !== "cancelled") this.message.textContent = `The run had already ${body.status}.`;
      else this.message.textContent = "Cancelled.";
    } catch (error) {
      this.button.disabled = false;
      this.message.textContent = `Could not cancel: ${error.message}`;
    }
  }

  render() {
    if (!this.form) return;
    this.form.hidden = RUN_FINISHED.has(this.store.run.status);
  }
}
