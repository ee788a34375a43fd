// The run's review on its page: labels, assignee, human score, flag and resolution; comments on
// the run and on each step (in the step's panel, and as a count badge on the step's graph node).
// It starts from the page's review-state block and follows the review events of the run's
// socket, so what another reviewer does appears here without a reload. Controls are drawn only
// for users who may review (the server refuses the others anyway). Comment bodies are Markdown
// a user wrote: rendered through markdown.js (no raw HTML, sanitised), never as HTML.

import { renderMarkdown } from "./markdown.js";
import { element } from "./format.js";
import { EVENTS } from "./statuses.js";
import { send } from "../reviewapi.js";

const BADGE_OFFSET = { x: 84, y: -22 };

export class RunReview {
  constructor({ section, state, runId, onOpenStep }) {
    this.section = section;
    this.runId = runId;
    this.onOpenStep = onOpenStep;
    this.review = state.review;
    this.kinds = state.kinds;
    this.assignees = state.assignees;
    this.canReview = state.can_review;
    this.canModerate = state.can_moderate;
    this.user = state.user;
    this.comments = new Map(state.comments.map((comment) => [comment.id, comment]));
    this.graph = null;
    this.stepThread = null; // {stepId, list, heading}: the open step panel's comments
    this.render();
  }

  // One live event; the others (the run's execution) are not this module's.
  apply(event) {
    switch (event.type) {
      case EVENTS.comment_created:
      case EVENTS.comment_edited:
        this.comments.set(event.comment.id, event.comment);
        this.commentsChanged(event.comment.step);
        break;
      case EVENTS.comment_deleted:
        this.comments.delete(event.comment);
        this.commentsChanged(event.step);
        break;
      case EVENTS.review_changed:
        this.review = event.review;
        this.renderSummary();
        this.renderControls();
        break;
      default:
        break;
    }
  }

  commentsChanged(stepId) {
    if (stepId == null) this.renderRunComments();
    else {
      this.updateBadge(stepId);
      if (this.stepThread && this.stepThread.stepId === stepId) this.renderStepThread();
    }
  }

  commentsOf(stepId) {
    return [...this.comments.values()].filter((comment) => comment.step === stepId).sort((a, b) => a.id - b.id);
  }

  // The run's review section ------------------------------------------------------------------

  render() {
    this.summary = element("div", { class: "review-summary", id: "review-summary" });
    this.controls = element("div", { class: "review-controls", id: "review-controls" });
    this.message = element("p", { class: "hint", id: "review-message", role: "status", "aria-live": "polite" });
    this.runComments = element("ol", { class: "comments", id: "run-comments" });
    const children = [element("h2", { id: "review-title" }, "Review"), this.summary];
    if (this.canReview) children.push(this.controls);
    children.push(this.message, element("h3", {}, "Comments on the run"), this.runComments);
    if (this.canReview) children.push(this.commentForm(null, "run-comment-form"));
    this.section.replaceChildren(...children);
    this.renderSummary();
    this.renderControls();
    this.renderRunComments();
  }

  renderSummary() {
    const review = this.review;
    const labels = review.labels.length
      ? review.labels.map((label) => element("span", { class: "label-chip", dataset: { kind: label.id } }, label.name))
      : [element("span", { class: "hint" }, "none")];
    const resolution = review.resolution;
    this.summary.replaceChildren(
      element(
        "dl",
        { class: "review-facts" },
        element("dt", {}, "Labels"),
        element("dd", { id: "review-labels" }, ...labels),
        element("dt", {}, "Assignee"),
        element("dd", { id: "review-assignee" }, review.assignee || "no one"),
        element("dt", {}, "Human score"),
        element("dd", { id: "review-score" }, review.human_score == null ? "—" : String(review.human_score)),
        element("dt", {}, "Flag"),
        element("dd", { id: "review-flag" }, review.flagged ? "flagged for review" : "—"),
        element("dt", {}, "Resolution"),
        element(
          "dd",
          { id: "review-resolution" },
          resolution ? `resolved by ${resolution.by || "—"}${resolution.note ? `: ${resolution.note}` : ""}` : "open",
          resolution && resolution.fixed_by ? " · fixed by " : "",
          resolution && resolution.fixed_by ? element("a", { href: `/runs/${resolution.fixed_by}/` }, `run ${resolution.fixed_by}`) : "",
        ),
      ),
    );
  }

  renderControls() {
    if (!this.canReview) return;
    const review = this.review;
    const labelled = new Set(review.labels.map((label) => label.id));
    const labelBoxes = this.kinds.map((kind) => {
      const box = element("input", { type: "checkbox", id: `review-kind-${kind.id}`, checked: labelled.has(kind.id) });
      box.addEventListener("change", () =>
        this.change(box.checked ? send("POST", `runs/${this.runId}/labels/`, { kind: kind.id }) : send("DELETE", `runs/${this.runId}/labels/${kind.id}/`)),
      );
      return element("label", { class: "review-kind" }, box, ` ${kind.name}`);
    });

    const assign = element("select", { id: "review-assign" }, element("option", { value: "" }, "No one"));
    for (const name of this.assignees) {
      assign.append(element("option", { value: name, selected: name === review.assignee }, name === this.user ? `${name} (me)` : name));
    }
    assign.addEventListener("change", () => this.change(send("PUT", `runs/${this.runId}/assignee/`, { assignee: assign.value || null })));

    const score = element("input", { type: "number", id: "review-score-input", min: "0", max: "1", step: "0.1", value: review.human_score ?? "" });
    const setScore = element("button", { type: "button", id: "review-score-set" }, "Set score");
    setScore.addEventListener("click", () =>
      this.change(send("PUT", `runs/${this.runId}/score/`, { score: score.value === "" ? null : Number(score.value) })),
    );

    const flag = element("input", { type: "checkbox", id: "review-flag-input", checked: review.flagged });
    flag.addEventListener("change", () => this.change(send("PUT", `runs/${this.runId}/flag/`, { flagged: flag.checked })));

    const resolution = [];
    if (review.resolution) {
      const reopen = element("button", { type: "button", id: "review-reopen" }, "Reopen");
      reopen.addEventListener("click", () => this.change(send("DELETE", `runs/${this.runId}/resolution/`)));
      resolution.push(reopen);
    } else {
      const note = element("input", { type: "text", id: "review-note", maxlength: "2000", placeholder: "What was wrong, what fixed it" });
      const fixedBy = element("input", { type: "number", id: "review-fixed-by", min: "1", placeholder: "run id" });
      const resolve = element("button", { type: "button", id: "review-resolve", class: "primary" }, "Resolve");
      resolve.addEventListener("click", () =>
        this.change(
          send("PUT", `runs/${this.runId}/resolution/`, { note: note.value, fixed_by: fixedBy.value ? Number(fixedBy.value) : null }),
        ),
      );
      resolution.push(
        element("label", { for: "review-note" }, "Note "),
        note,
        element("label", { for: "review-fixed-by" }, " Fixed by replay "),
        fixedBy,
        " ",
        resolve,
      );
    }

    this.controls.replaceChildren(
      element("fieldset", { class: "review-kinds" }, element("legend", {}, "Failure kinds"), ...labelBoxes),
      element(
        "div",
        { class: "review-row" },
        element("label", { for: "review-assign" }, "Assign to "),
        assign,
        element("label", { for: "review-score-input" }, " Human score (0–1) "),
        score,
        " ",
        setScore,
        element("label", { class: "review-flag-label" }, flag, " Flag for review"),
      ),
      element("div", { class: "review-row" }, ...resolution),
    );
  }

  // A change through the API: the review event brings the result to every open page (this one
  // included); the response is drawn at once too.
  async change(request) {
    this.message.textContent = "";
    try {
      const review = await request;
      if (review && review.labels) {
        this.review = review;
        this.renderSummary();
        this.renderControls();
      }
    } catch (error) {
      this.message.textContent = error.message;
      this.renderControls();
    }
  }

  // Comments ----------------------------------------------------------------------------------

  renderRunComments() {
    this.renderComments(this.runComments, this.commentsOf(null), "No comments on the run yet.");
  }

  renderComments(list, comments, emptyText) {
    if (!comments.length) {
      list.replaceChildren(element("li", { class: "hint comment-empty" }, emptyText));
      return;
    }
    list.replaceChildren(...comments.map((comment) => this.commentItem(comment)));
  }

  commentItem(comment) {
    const body = element("div", { class: "markdown comment-body" });
    renderMarkdown(body, comment.body);
    const when = comment.created_at ? new Date(comment.created_at).toLocaleString() : "";
    const head = element(
      "div",
      { class: "comment-head" },
      element("strong", {}, comment.author || "someone"),
      " ",
      element("span", { class: "hint" }, `${when}${comment.edited_at ? " (edited)" : ""}`),
    );
    const item = element("li", { class: "comment", dataset: { commentId: comment.id } }, head, body);
    const own = this.canReview && comment.author === this.user;
    if (own) {
      const edit = element("button", { type: "button", class: "link-button comment-edit" }, "Edit");
      edit.addEventListener("click", () => this.editComment(item, comment));
      head.append(" ", edit);
    }
    if (own || this.canModerate) {
      const remove = element("button", { type: "button", class: "link-button comment-delete" }, "Delete");
      remove.addEventListener("click", () => this.change(send("DELETE", `comments/${comment.id}/`)));
      head.append(" ", remove);
    }
    return item;
  }

  editComment(item, comment) {
    const area = element("textarea", { rows: "3", maxlength: "10000", class: "comment-input" });
    area.value = comment.body;
    const save = element("button", { type: "submit" }, "Save");
    const form = element("form", { class: "comment-form" }, area, save);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.change(send("PATCH", `comments/${comment.id}/`, { body: area.value }));
    });
    item.replaceChildren(form);
    area.focus();
  }

  commentForm(stepId, id) {
    const area = element("textarea", { rows: "2", maxlength: "10000", class: "comment-input", "aria-label": "Comment (Markdown)", placeholder: "Comment (Markdown)" });
    const submit = element("button", { type: "submit" }, "Comment");
    const error = element("p", { class: "form-error", role: "alert" });
    const form = element("form", { class: "comment-form", id }, area, submit, error);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.textContent = "";
      submit.disabled = true;
      try {
        const comment = await send("POST", `runs/${this.runId}/comments/`, { body: area.value, step: stepId });
        area.value = "";
        this.comments.set(comment.id, comment);
        this.commentsChanged(comment.step);
      } catch (failure) {
        error.textContent = failure.message;
      }
      submit.disabled = false;
    });
    return form;
  }

  // The details panel's hook: the comments section of a step's panel.
  stepSection(step) {
    const heading = element("h3", {}, "Comments");
    const list = element("ol", { class: "comments step-comments", id: "step-comments" });
    this.stepThread = { stepId: step.id, list, heading };
    this.renderStepThread();
    const children = [heading, list];
    if (this.canReview) children.push(this.commentForm(step.id, "step-comment-form"));
    return element("section", { class: "panel-section step-review" }, ...children);
  }

  renderStepThread() {
    const { stepId, list, heading } = this.stepThread;
    const comments = this.commentsOf(stepId);
    heading.textContent = comments.length ? `Comments (${comments.length})` : "Comments";
    this.renderComments(list, comments, "No comments on this step yet.");
  }

  // Badges on the graph: the number of comments on a step, at its node's top-right corner.

  attachGraph(graph) {
    this.graph = graph;
    const cy = graph.cy;
    if (!cy) return;
    const style = getComputedStyle(document.documentElement);
    const colour = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
    cy.style()
      .selector("node.comment-badge")
      .style({
        shape: "ellipse",
        width: 22,
        height: 22,
        "z-index": 10,
        "background-color": colour("--accent", "#1f5fbf"),
        "border-width": 2,
        "border-color": colour("--ground", "#ffffff"),
        color: colour("--ground", "#ffffff"),
        label: "data(label)",
        "font-size": 11,
        "font-weight": "bold",
        "text-valign": "center",
        "text-halign": "center",
        "min-zoomed-font-size": 0,
      })
      .update();
    cy.on("position", "node.step", (event) => this.placeBadge(event.target.data("step")));
    cy.on("add", "node.step", (event) => this.updateBadge(event.target.data("step")));
    cy.on("tap", "node.comment-badge", (event) => this.onOpenStep(event.target.data("step")));
    const steps = new Set([...this.comments.values()].map((comment) => comment.step).filter((id) => id != null));
    for (const stepId of steps) this.updateBadge(stepId);
  }

  updateBadge(stepId) {
    const cy = this.graph && this.graph.cy;
    if (!cy) return;
    const count = this.commentsOf(stepId).length;
    const node = cy.getElementById(`s${stepId}`);
    const badge = cy.getElementById(`c${stepId}`);
    if (!count || node.empty()) {
      if (badge.nonempty()) badge.remove();
      return;
    }
    if (badge.nonempty()) badge.data("label", String(count));
    else {
      cy.add({
        group: "nodes",
        data: { id: `c${stepId}`, kind: "badge", step: stepId, label: String(count) },
        classes: "comment-badge",
        selectable: false,
      });
    }
    this.placeBadge(stepId);
  }

  placeBadge(stepId) {
    const cy = this.graph.cy;
    const node = cy.getElementById(`s${stepId}`);
    const badge = cy.getElementById(`c${stepId}`);
    if (node.empty() || badge.empty()) return;
    const { x, y } = node.position();
    badge.position({ x: x + BADGE_OFFSET.x, y: y + BADGE_OFFSET.y });
  }

  // How many comments a step's badge shows (0: no badge), for tests that read the graph.
  badgeCount(stepId) {
    const badge = this.graph && this.graph.cy ? this.graph.cy.getElementById(`c${stepId}`) : null;
    return badge && badge.nonempty() ? Number(badge.data("label")) : 0;
  }
}
