// Review changes over the JSON API, as the page's user (session cookie and CSRF token). Shared
// by the review queue (review.js) and the run page's review controls (run/review.js).

import { errorText } from "./form_errors.js";
import { sendJSON } from "./http.js";

// Resolves to the response body; rejects with an Error whose message says what the server
// said (a 400's field errors, or its detail).
export async function send(method, path, body) {
  const answer = await sendJSON(`/api/${path}`, { method, body });
  if (!answer.ok) throw new Error(errorText(answer.body, answer.status));
  return answer.body;
}
