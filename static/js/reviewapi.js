// Review changes over the JSON API, as the page's user (session cookie and CSRF token). Shared
// by the review queue (review.js) and the run page's review controls (run/review.js).

function csrfToken() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  return input ? input.value : "";
}

// Resolves to the response body; rejects with an Error whose message says what the server
// said (the first field error of a 400, or its detail).
export async function send(method, path, body) {
  const response = await fetch(`/api/${path}`, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const first = data && typeof data === "object" ? Object.entries(data)[0] : null;
    const text = first ? `${first[0] === "detail" ? "" : `${first[0]}: `}${[].concat(first[1]).join(" ")}` : "";
    throw new Error(text || `The server answered ${response.status}.`);
  }
  return data;
}
