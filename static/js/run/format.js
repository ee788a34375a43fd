// Small formatting and DOM helpers shared by the run page's modules.

const integer = new Intl.NumberFormat("en-US");

export function formatCount(value) {
  return value == null ? "—" : integer.format(value);
}

export function formatCost(value) {
  if (value == null) return "—";
  if (value === 0) return "$0";
  return value < 0.01 ? `$${value.toFixed(5)}` : `$${value.toFixed(3)}`;
}

export function formatSeconds(value) {
  if (value == null) return "—";
  if (value < 10) return `${value.toFixed(2)} s`;
  if (value < 120) return `${value.toFixed(1)} s`;
  const minutes = Math.floor(value / 60);
  return `${minutes} min ${Math.round(value - minutes * 60)} s`;
}

export function formatScore(value) {
  return value == null ? "—" : String(Math.round(value * 1000) / 1000);
}

// Must give what orchestrator.graph.short_instruction gives (LABEL_CHARS there): nodes drawn
// before the server's graph arrives carry the same label as after.
export function shortInstruction(text, limit = 58) {
  const line = (text || "").split("\n", 1)[0].split(/\s+/).filter(Boolean).join(" ");
  return line.length <= limit ? line : line.slice(0, limit - 1).trimEnd() + "…";
}

export function stepName(step) {
  return `Step ${step.round}.${step.index}`;
}

export function stepTokens(step) {
  return (step.tokens_in || 0) + (step.tokens_out || 0);
}

// The label of a step on the graph: its number and worker, the short instruction (wrapped by
// the graph), then tokens and time.
export function stepGraphLabel(step) {
  return `${stepNumber(step)} · ${shortInstruction(step.worker, 28)}\n${shortInstruction(step.instruction)}\n${stepFacts(step)}`;
}

// The label of a step when the graph is zoomed out: its number, worker and facts, larger.
export function stepCompactLabel(step) {
  return `${stepNumber(step)} · ${shortInstruction(step.worker, 16)}\n${stepFacts(step)}`;
}

export function stepNumber(step) {
  return `${step.round}.${step.index}`;
}

function stepFacts(step) {
  const facts = [];
  if (stepTokens(step)) facts.push(`${formatCount(stepTokens(step))} tok`);
  if (step.latency != null) facts.push(formatSeconds(step.latency));
  if (step.attempts > 1) facts.push(`${step.attempts} tries`);
  return facts.length ? facts.join(" · ") : step.status;
}

// What a plan node says (orchestrator.graph.plan_label gives the same): the conductor's call of
// a round and what came of it.
export function planLabel(round, status, stepCount) {
  if (status === "accepted") return `Round ${round}: the conductor\naccepts the answer`;
  if (status === "failed") return `Round ${round}: the conductor\nwrote no usable plan`;
  if (status === "fallback") return `Round ${round}: no usable plan;\nfallback, not the conductor's`;
  return `Round ${round}: conductor\nplans ${stepCount === 1 ? "1 step" : `${stepCount} steps`}`;
}

// Build an element: element("a", {href: "#x", class: "y"}, "text", child). Text is always text.
export function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value == null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function statusBadge(status) {
  return element("span", { class: `status status-${status}` }, status);
}

export function setStatusBadge(badge, status) {
  badge.className = `status status-${status}`;
  badge.textContent = status;
}

// A run's verdict (orchestrator.wire.VERDICTS): right, wrong, unscored, failed, cancelled, pending.
export function setVerdictBadge(badge, verdict) {
  badge.className = `verdict verdict-${verdict}`;
  badge.textContent = verdict;
}
