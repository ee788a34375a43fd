// JSON over HTTP as the page's user: the session cookie, and for writes Django's CSRF token. Every
// request of the pages' modules goes through here.

// The CSRF token: the form's (or the page's) hidden csrfmiddlewaretoken field, else the cookie.
export function csrfToken(scope = document) {
  const input = scope.querySelector("input[name=csrfmiddlewaretoken]");
  if (input && input.value) return input.value;
  const cookie = document.cookie.split("; ").find((part) => part.startsWith("csrftoken="));
  return cookie ? decodeURIComponent(cookie.slice("csrftoken=".length)) : "";
}

// A GET that did not answer 2xx: its status and (if JSON) its body.
export class HttpError extends Error {
  constructor(response, body) {
    super(`${response.status} ${response.statusText}`);
    this.status = response.status;
    this.body = body;
  }
}

// GET ``url``: resolves to the JSON body; rejects with an HttpError ("404 Not Found") on any
// other status than 2xx, or with the network's error.
export async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) throw new HttpError(response, await response.json().catch(() => null));
  return response.json();
}

// A write (POST by default) of ``body`` as JSON (none when undefined), with the CSRF token
// (``csrf``: a token, or an element holding the form's field; the page's field or cookie
// otherwise). Resolves to { ok, status, statusText, body } whatever the status (body: the JSON
// answer, {} if it was none, null for 204); rejects only when the server could not be reached.
export async function sendJSON(url, { method = "POST", body, csrf } = {}) {
  const token = typeof csrf === "string" ? csrf : csrfToken(csrf || document);
  const headers = { Accept: "application/json", "X-CSRFToken": token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    credentials: "same-origin",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = response.status === 204 ? null : await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, statusText: response.statusText, body: answer };
}
