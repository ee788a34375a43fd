// The statuses of runs and steps and the live event type names as the server defines them
// (orchestrator.wire.page_constants), read from the page's data block so that they are never
// retyped here.

const constants = JSON.parse(document.getElementById("status-constants").textContent);

export const RUN_STATUSES = constants.run;
export const RUN_FINISHED = new Set(constants.run_finished);
export const STEP_STATUSES = constants.step;
export const STEP_FINISHED = new Set(constants.step_finished);
// Event type names by their key in orchestrator/wire.py (EVENTS.step_finished, ...).
export const EVENTS = Object.freeze({ ...constants.events });
// A run's verdicts (orchestrator.wire.VERDICTS): right, wrong, unscored, failed, cancelled, pending.
export const VERDICTS = constants.verdicts;
