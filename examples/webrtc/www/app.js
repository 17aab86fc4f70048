// lingbot-gst: the page of lingbot-webrtc-server (plain JS, no build step).
// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Signalling: JSON over the WebSocket /ws (docs/webrtc.md).  The server
// offers; this page answers.  Data channels are created by the server, as
// GStreamer's webrtcsink does: "input" carries navigation events in
// webrtcsink's JSON form {"event":"KeyPress","key":"ArrowUp",...} plus an
// "id" stamp; "control" brings progress, chunk metrics and key echoes back.
//
// Reconnects: the welcome message's "resume" token is kept in
// sessionStorage (per tab, it survives a reload), and every connection
// asks for /ws?resume=TOKEN, so a reload takes the running session over
// and continues at its current chunk.  A busy server (close 4409) is
// retried with backoff; a lost connection (4408, 1006, ...) is resumed; a
// server that stops (1001: a restart) is retried with the same backoff,
// and gets a new session from the restarted one.
"use strict";

const KEYS = new Set(["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight",
  "KeyW", "KeyA", "KeyS", "KeyD", "KeyI", "KeyJ", "KeyK", "KeyL"]);
const TOKEN_KEY = "lingbot-resume";
const PICTURE_KEY = "lingbot-picture";   // the last picture, for a reload
const BACKOFF_S = [1, 2, 4, 8, 15];
// close codes (docs/webrtc.md): no retry after these
const CLOSE_REPLACED = 4410, CLOSE_CODEC = 4415, CLOSE_BUSY = 4409;
const CLOSE_GOING_AWAY = 1001;

const video = document.getElementById("video");
const startImage = document.getElementById("start");
const statusLine = document.getElementById("status");
const logBox = document.getElementById("log");
const endButton = document.getElementById("end");
const $ = (id) => document.getElementById(id);

let ws = null;
let pc = null;
let input = null;
let control = null;
let nextId = 1;
let lastOffer = null;            // the last offer's SDP (the tests read it)
let retryTimer = 0;
const held = new Set();
const stamps = new Map();        // key id -> performance.now() at keydown
const echoes = [];               // waiting for their first frame on screen
const latencies = [];            // key -> first frame, ms
// what the page knows, also read by tests/webrtc/browser-check.mjs
const state = {
  session: 0, peer: 0, resumed: false, codec: "", nextChunk: 0,
  phase: "connecting", chunk: -1, attempts: 0, retries: 0, busy: 0,
  fatal: "", chunks: [], firstChunk: -1, lastChunk: -1, firstFrame: false,
  informed: false, rejected: 0,
};
const metrics = {
  steadyFrames: 0, steadySeconds: 0, lastComputeFps: NaN,
  decoded: 0, decodedAt: 0, deliveryFps: NaN, lastFrame: 0,
};

function log(text) {
  logBox.textContent = (text + "\n" + logBox.textContent).slice(0, 4000);
}

function setStatus(text, error = false) {
  statusLine.textContent = text;
  statusLine.classList.toggle("error", error);
}

function send(obj) {
  if (ws && ws.readyState === WebSocket.OPEN)
    ws.send(JSON.stringify(obj));
}

function fmt(x, digits = 1) {
  return Number.isFinite(x) ? x.toFixed(digits) : "–";
}

// ---- the status line: what the generator does now ----

// the generator's phase from a server message, with the members of
// @extra (pass, passes, keys), then the status line
function setPhase(phase, chunk, extra = {}) {
  state.informed = true;
  state.phase = phase;
  state.chunk = chunk;
  Object.assign(state, extra);
  showPhase();
}

function showPhase() {
  if (state.fatal)
    return;
  const k = state.chunk;
  switch (state.phase) {
    case "waiting":
      setStatus(held.size ? "generating chunk " + k + "…" :
        "waiting for a key: hold one to generate chunk " + k);
      break;
    case "generating":
      setStatus("generating chunk " + k + "…" +
        (state.pass >= 0 ? " (pass " + (state.pass + 1) + "/" +
          state.passes + ")" : ""));
      break;
    case "decoding":
      setStatus("decoding chunk " + k + "… (keys: " + (state.keys || "none") +
        ")");
      break;
    case "ready":
      setStatus("chunk " + k + " ready (keys: " + (state.keys || "none") +
        ")" + (held.size ? ", generating chunk " + (k + 1) + "…" : ""));
      break;
    default:
      break;
  }
}

// ---- keys -> "input" ----

function sendKey(press, code) {
  if (!input || input.readyState !== "open")
    return;
  const msg = { event: press ? "KeyPress" : "KeyRelease", key: code,
    modifier_state: "" };
  if (press) {
    msg.id = nextId++;
    stamps.set(msg.id, performance.now());
  }
  input.send(JSON.stringify(msg));
}

document.addEventListener("keydown", (e) => {
  if (!KEYS.has(e.code))
    return;
  e.preventDefault();
  if (e.repeat || held.has(e.code))
    return;
  held.add(e.code);
  sendKey(true, e.code);
  showPhase();
});

document.addEventListener("keyup", (e) => {
  if (!KEYS.has(e.code))
    return;
  e.preventDefault();
  if (held.delete(e.code))
    sendKey(false, e.code);
});

window.addEventListener("blur", () => {
  for (const code of held)
    sendKey(false, code);
  held.clear();
});

// ---- metrics ----

function percentile(values, p) {
  if (values.length === 0)
    return NaN;
  const s = [...values].sort((a, b) => a - b);
  const x = (s.length - 1) * p;
  const lo = Math.floor(x), hi = Math.ceil(x);
  return s[lo] + (s[hi] - s[lo]) * (x - lo);
}

function showMetrics() {
  $("m-compute").textContent = fmt(metrics.lastComputeFps) + " / " +
    fmt(metrics.steadySeconds > 0 ?
      metrics.steadyFrames / metrics.steadySeconds : NaN);
  $("m-chunks").textContent = state.chunks.length === 0 ? "–" :
    state.chunks.slice(-8).map((c) => c.index + ": " + (c.keys || "–"))
      .join(" · ");
  $("m-latency").textContent = fmt(latencies[latencies.length - 1], 0) +
    " / " + fmt(percentile(latencies, 0.5), 0);
}

// a whole chunk: the server's generate + decode seconds
function onChunk(m) {
  state.chunks.push({ index: m.index, keys: m.keys, frames: m.frames,
    computeSeconds: m["compute-seconds"], vaeSeconds: m["vae-seconds"],
    generateSeconds: m["generate-seconds"] });
  if (state.chunks.length > 200)
    state.chunks.shift();
  if (state.firstChunk < 0)
    state.firstChunk = m.index;
  state.lastChunk = m.index;
  metrics.lastComputeFps = m["compute-fps"];
  if (m.index >= 1) {           // steady state: chunks after the first
    metrics.steadyFrames += m.frames;
    metrics.steadySeconds += m["compute-seconds"];
  }
  setPhase("ready", m.index, { keys: m.keys });
  showMetrics();
}

function onEcho(m) {
  const t0 = stamps.get(m.id);
  stamps.delete(m.id);
  $("m-server").textContent = fmt(m["server-ms"], 0) + " (chunk " +
    m.chunk + ")";
  if (t0 !== undefined)
    echoes.push({ t0, rtp: m["rtp-timestamp"] >>> 0,
      arrived: performance.now() });
}

function firstFrame() {
  if (state.firstFrame)
    return;
  state.firstFrame = true;
  startImage.hidden = true;
}

// a frame is on screen: the key presses it reflects
function onFrame(now, meta) {
  firstFrame();
  metrics.lastFrame = now;
  for (let i = 0; i < echoes.length;) {
    const e = echoes[i];
    // RTP timestamps wrap at 2^32: "at or after" is a small forward step
    const reached = meta && meta.rtpTimestamp !== undefined ?
      ((meta.rtpTimestamp - e.rtp) >>> 0) < 0x80000000 : now >= e.arrived;
    if (reached) {
      latencies.push(now - e.t0);
      if (latencies.length > 500)
        latencies.shift();
      echoes.splice(i, 1);
    } else {
      i++;
    }
  }
  showMetrics();
  if (video.requestVideoFrameCallback)
    video.requestVideoFrameCallback(onFrame);
}
if (video.requestVideoFrameCallback)
  video.requestVideoFrameCallback(onFrame);
video.addEventListener("resize", () => {
  if (video.videoWidth > 0 && !video.requestVideoFrameCallback)
    firstFrame();
});

// delivery: frames the browser decoded (getStats), per second; apart from
// the server's compute fps
setInterval(async () => {
  if (!pc)
    return;
  let stats;
  try {
    stats = await pc.getStats();
  } catch (e) {
    return;                     // closed meanwhile
  }
  stats.forEach((r) => {
    if (r.type !== "inbound-rtp" || r.kind !== "video")
      return;
    const now = performance.now();
    const decoded = r.framesDecoded || 0;
    if (!metrics.decodedAt) {
      metrics.decodedAt = now;
      metrics.decoded = decoded;
    } else if (now - metrics.decodedAt >= 1000) {
      metrics.deliveryFps = (decoded - metrics.decoded) * 1000 /
        (now - metrics.decodedAt);
      metrics.decodedAt = now;
      metrics.decoded = decoded;
    }
    $("m-delivery").textContent = fmt(metrics.deliveryFps) +
      (metrics.deliveryFps === 0 ? held.size ? " (waiting for a chunk)" :
        " (no key held)" : "");
    $("m-frames").textContent = (r.framesReceived || 0) + " / " + decoded +
      " / " + (r.keyFramesDecoded || 0);
  });
}, 500);

// ---- signalling ----

function onControl(text) {
  let m;
  try {
    m = JSON.parse(text);
  } catch (e) {
    return;
  }
  switch (m.type) {
    case "chunk":
      onChunk(m);
      break;
    case "key-echo":
      onEcho(m);
      break;
    case "waiting":
      setPhase("waiting", m.chunk);
      break;
    case "progress":
      setPhase("generating", m.chunk, { pass: m.pass, passes: m.passes });
      break;
    case "decoding":
      setPhase("decoding", m.chunk, { keys: m.keys });
      break;
    case "status":
      // the generator's state when this tab joined, then a keepalive
      if (!state.informed)
        setPhase(m.state === "starting" ? "waiting" : m.state,
          m.state === "ready" ? m.chunk : m["next-chunk"],
          m.state === "generating" ? { pass: -1 } : {});
      break;
    case "error":
      state.rejected++;
      log("server: " + m.message);
      break;
    default:
      break;
  }
}

// the codec of the offer's video section, and whether this browser
// decodes it
function offeredCodec(sdp) {
  const m = /a=rtpmap:\d+ ([A-Za-z0-9-]+)\/90000/.exec(sdp);
  return m ? m[1] : "";
}

function canDecode(codec) {
  if (!window.RTCRtpReceiver || !RTCRtpReceiver.getCapabilities)
    return true;                // cannot tell: try
  const caps = RTCRtpReceiver.getCapabilities("video");
  return !caps || caps.codecs.some((c) =>
    c.mimeType.toLowerCase() === "video/" + codec.toLowerCase());
}

function codecError(codec) {
  state.fatal = "codec";
  setStatus("This browser cannot decode " + codec + " video, the codec the " +
    "server sends (lingbot-webrtc-server --encoder " + state.encoder + "). " +
    (codec === "H264" ? "Use a browser with H.264, or start the server " +
      "with --encoder vp8." : "Use another browser."), true);
  send({ type: "bye" });
}

// The server's STUN/TURN servers and policy (its --stun, --turn and
// --ice-transport-policy), as the welcome message gives them.
function newPeer(iceServers, iceTransportPolicy) {
  pc = new RTCPeerConnection({ iceServers: iceServers || [],
    iceTransportPolicy: iceTransportPolicy === "relay" ? "relay" : "all" });
  pc.ontrack = (e) => {
    video.srcObject = e.streams[0] || new MediaStream([e.track]);
    video.focus();
  };
  pc.onicecandidate = (e) => {
    if (e.candidate && e.candidate.candidate)
      send({ type: "ice", candidate: e.candidate.candidate,
        sdpMLineIndex: e.candidate.sdpMLineIndex });
  };
  pc.ondatachannel = (e) => {
    const ch = e.channel;
    if (ch.label === "input") {
      input = ch;
      ch.onopen = () => {
        if (!state.informed)
          setStatus("connected: hold a key to move (nothing is generated " +
            "before)");
      };
    } else if (ch.label === "control") {
      control = ch;
      ch.onmessage = (m) => onControl(m.data);
    }
  };
  const turn = (iceServers || []).filter((x) =>
    [].concat(x.urls).some((u) => /^turns?:/.test(u)));
  pc.onconnectionstatechange = () => {
    if (pc && pc.connectionState === "failed")
      setStatus("WebRTC connection failed" + (turn.length ?
        (iceTransportPolicy === "relay" ? " (only" : " (no direct path and " +
          "none") + " through the TURN relay " +
        turn.map((x) => [].concat(x.urls).join(", ")).join(", ") +
        ": is it running and reachable?)" : ""), true);
  };
}

async function onSignal(text) {
  const m = JSON.parse(text);
  if (m.type === "error") {
    log("error " + m.code + ": " + m.message);
    if (!m.fatal) {
      state.rejected++;         // a message of ours was refused
      return;
    }
    if (m.code === "busy") {
      state.busy++;
      state.busyMessage = m.message;
      state.busyRetryAfter = m["retry-after"];
    } else if (m.code === "shutdown") {
      // a restart: retried when the socket closes (1001); the session
      // ended with the old process, the next one starts a new one
      state.shutdownMessage = m.message;
      sessionStorage.removeItem(TOKEN_KEY);
    } else if (m.code === "timeout" || m.code === "ice") {
      // retried (resumed) when the socket closes, with the server's reason:
      // it names the TURN relay to check when one is configured
      state.lostMessage = m.message;
    } else {
      state.fatal = m.code;
      setStatus("server: " + m.message, true);
      if (m.code === "eos" || m.code === "pipeline")
        sessionStorage.removeItem(TOKEN_KEY);
    }
  } else if (m.type === "welcome") {
    const asked = sessionStorage.getItem(TOKEN_KEY);
    let picture = null;
    try {
      picture = JSON.parse(sessionStorage.getItem(PICTURE_KEY));
    } catch (e) { /* none */ }
    sessionStorage.removeItem(PICTURE_KEY);
    state.attempts = 0;
    if (!m.resumed && state.session)
      newSession();
    state.session = m.session;
    state.peer = m.peer;
    state.resumed = m.resumed;
    state.codec = m.codec;
    state.encoder = m.encoder;
    state.nextChunk = m["next-chunk"];
    sessionStorage.setItem(TOKEN_KEY, m.resume);
    // a resumed session shows where its world is now: the picture this
    // tab had on screen when it left (an idle world sends no frame until
    // a key moves it), else the start image
    const still = m.resumed && picture && picture.token === asked ?
      picture.url : m["start-image"];
    if (still && !state.firstFrame) {
      startImage.src = still;
      startImage.hidden = false;
    }
    endButton.disabled = false;
    setStatus("session " + m.session + (m.resumed ? " resumed at chunk " +
      m["next-chunk"] : "") + " (" + m.codec + "): negotiating…");
    newPeer(m["ice-servers"], m["ice-transport-policy"]);
  } else if (!pc) {
    return;                     // closed meanwhile
  } else if (m.type === "offer") {
    lastOffer = m.sdp;
    const codec = offeredCodec(m.sdp);
    if (codec && !canDecode(codec)) {
      codecError(codec);
      return;
    }
    await pc.setRemoteDescription({ type: "offer", sdp: m.sdp });
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    if (/m=video 0 /.test(pc.localDescription.sdp)) {
      codecError(codec || "the offered");
      return;
    }
    send({ type: "answer", sdp: pc.localDescription.sdp });
  } else if (m.type === "ice") {
    await pc.addIceCandidate({ candidate: m.candidate,
      sdpMLineIndex: m.sdpMLineIndex });
  }
}

// a new session after an automatic reconnect (a restarted server, an
// expired session): the old session's chunks and figures go
function newSession() {
  state.chunks = [];
  state.firstChunk = state.lastChunk = -1;
  metrics.steadyFrames = metrics.steadySeconds = 0;
  metrics.lastComputeFps = NaN;
  latencies.length = 0;
  echoes.length = 0;
  stamps.clear();
  $("m-server").textContent = "–";
  showMetrics();
}

function closePeer() {
  if (pc)
    pc.close();
  pc = null;
  input = null;
  control = null;
  state.informed = false;
  metrics.decodedAt = 0;
}

// frames received on @p's video so far
async function framesReceived(p) {
  let n = 0;
  try {
    (await p.getStats()).forEach((r) => {
      if (r.type === "inbound-rtp" && r.kind === "video")
        n = r.framesReceived || 0;
    });
  } catch (e) { /* closed meanwhile */ }
  return n;
}

// The end of the video: the server sees its end at the payloader and
// closes the socket, while its last frames may still be on their way.
// The peer stays until no frame came for 1 s (at most 5 s), then closes.
async function drainPeer() {
  const p = pc;
  let last = -1, since = performance.now();
  const start = since;
  while (p && p === pc && performance.now() - start < 5000) {
    const n = await framesReceived(p);
    if (n !== last) {
      last = n;
      since = performance.now();
    } else if (performance.now() - since >= 1000) {
      break;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  if (p && p === pc)
    closePeer();
}

// atLeast: the server's "retry-after" of a busy answer (seconds until a
// session kept for a reload may free its slot), or null
function retry(why, atLeast) {
  const delay = Math.max(BACKOFF_S[Math.min(state.attempts,
    BACKOFF_S.length - 1)], atLeast || 0);
  state.attempts++;
  state.retries++;
  setStatus(why + ": retrying in " + delay + " s (attempt " +
    state.attempts + ")");
  clearTimeout(retryTimer);
  retryTimer = setTimeout(connect, delay * 1000);
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const token = sessionStorage.getItem(TOKEN_KEY);
  ws = new WebSocket(scheme + "://" + location.host + "/ws" +
    (token ? "?resume=" + encodeURIComponent(token) : ""));
  // one message at a time: onSignal awaits (setRemoteDescription, ...), and
  // a candidate handled before the offer is set would be refused
  let queue = Promise.resolve();
  const socket = ws;
  ws.onmessage = (e) => {
    queue = queue.then(() => onSignal(e.data)).catch((err) => log(String(err)));
  };
  ws.onclose = (e) => {
    if (socket !== ws)
      return;
    if (state.fatal === "eos")
      drainPeer();
    else
      closePeer();
    endButton.disabled = true;
    if (e.code === CLOSE_BUSY) {
      retry(state.busyMessage || "the server is busy", state.busyRetryAfter);
    } else if (e.code === CLOSE_GOING_AWAY) {
      retry((state.shutdownMessage || "the server went away") +
        " (1001, a restart?)");
      state.shutdownMessage = null;
    } else if (e.code === CLOSE_REPLACED) {
      state.fatal = "replaced";
      setStatus("another tab or a reload took this session over", true);
    } else if (state.fatal || e.code === CLOSE_CODEC) {
      // said already (error message, codec, end of the video, bye)
    } else {
      // the server's reason in full (the close frame's is cut to 123 bytes)
      retry("connection lost (" + e.code + (state.lostMessage ? "): " +
        state.lostMessage : (e.reason ? " " + e.reason : "") + ")"));
      state.lostMessage = null;
    }
  };
}

endButton.addEventListener("click", () => {
  state.fatal = "bye";
  send({ type: "bye" });
  sessionStorage.removeItem(TOKEN_KEY);
  setStatus("session ended");
});

// no "bye" on pagehide: a reload resumes the session with its token; a
// closed tab's session ends after the server's resume timeout
window.addEventListener("pagehide", () => {
  savePicture();
  if (ws)
    ws.close();
});

// the picture on screen, kept (per tab) with the session's token for the
// reload that resumes it
function savePicture() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token || !state.firstFrame || !video.videoWidth)
    return;
  try {
    const c = document.createElement("canvas");
    c.width = video.videoWidth;
    c.height = video.videoHeight;
    c.getContext("2d").drawImage(video, 0, 0);
    sessionStorage.setItem(PICTURE_KEY, JSON.stringify({ token,
      url: c.toDataURL("image/jpeg", 0.85) }));
  } catch (e) { /* no picture: the start image then */ }
}

connect();
