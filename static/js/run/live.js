// The run's websocket: the events after the seq of the page's snapshot, then live ones; on a drop,
// reconnect with backoff from the last seq seen (?after=<seq>) so nothing is missed and nothing is
// applied twice. The page's snapshot is its only state load: the socket never sends another.

const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 10000;
// The close code of the run's consumer that no retry can change: no such run, or no access.
const REFUSED = new Set([4403]);

export class LiveConnection {
  // onEvent(event) gets each new event once, in seq order; onState(state) gets
  // "connecting" | "live" | "reconnecting" | "finished" | "refused".
  // ``after``: the seq the page's snapshot is current to.
  constructor({ path, after, onEvent, onState }) {
    this.path = path;
    this.onEvent = onEvent;
    this.onState = onState;
    this.lastSeq = after;
    this.socket = null;
    this.retries = 0;
    this.retryTimer = null;
    this.stopped = false;
    this.ended = false; // finished, listening for review events only
  }

  // Once the run has finished, the page says so whatever the socket does.
  report(state) {
    this.onState(this.ended && state !== "refused" ? "finished" : state);
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  // No more events of the run's execution will come (it has finished and every event was
  // received). With ``listen``, the socket stays open (or opens) for the review events that
  // may still come (comments, labels...), and the state stays "finished".
  finish({ listen = false } = {}) {
    if (listen) {
      this.ended = true;
      this.onState("finished");
      if (!this.socket && !this.stopped && !this.retryTimer) this.connect();
      return;
    }
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.retryTimer);
    if (this.socket) this.socket.close(1000, "run finished");
    this.socket = null;
    this.onState("finished");
  }

  url() {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${window.location.host}${this.path}?after=${this.lastSeq}`;
  }

  connect() {
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.report(this.retries ? "reconnecting" : "connecting");
    const socket = new WebSocket(this.url());
    this.socket = socket;
    socket.addEventListener("open", () => {
      if (socket !== this.socket) return;
      this.retries = 0;
      this.report("live");
    });
    socket.addEventListener("message", (message) => {
      if (socket !== this.socket) return;
      this.receive(socket, message.data);
    });
    socket.addEventListener("close", (event) => {
      if (socket !== this.socket || this.stopped) return;
      this.socket = null;
      if (REFUSED.has(event.code)) {
        this.stopped = true;
        this.report("refused");
        return;
      }
      this.scheduleReconnect();
    });
  }

  receive(socket, text) {
    let event;
    try {
      event = JSON.parse(text);
    } catch {
      return;
    }
    if (typeof event.seq !== "number") return;
    if (event.seq <= this.lastSeq) return; // seen already
    if (event.seq > this.lastSeq + 1) {
      // A gap: fetch what is missing from the stored events rather than draw out of order.
      this.resync(socket);
      return;
    }
    this.lastSeq = event.seq;
    this.onEvent(event);
  }

  resync(socket) {
    if (socket !== this.socket) return;
    this.socket = null;
    socket.close(4000, "resync");
    this.connect();
  }

  scheduleReconnect() {
    this.retries += 1;
    this.report("reconnecting");
    const backoff = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** (this.retries - 1));
    const jitter = backoff * 0.2 * Math.random();
    this.retryTimer = setTimeout(() => this.connect(), backoff + jitter);
  }
}
