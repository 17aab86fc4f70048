// lingbot-gst: the page of lingbot-webrtc-server (plain JS, no build step).
// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Signalling: JSON over the WebSocket /ws (docs/webrtc.md).  The server
// offers; this page answers.  Data channels are created by the server, as
// GStreamer's webrtcsink does: "input" carries navigation events in
// webrtcsink's JSON form {"event":"KeyPress","key":"ArrowUp",...} plus an
// "id" stamp; "control" brings chunk metrics and key echoes back.
"use strict";

const KEYS = new Set(["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight",
  "KeyW", "KeyA", "KeyS", "KeyD", "KeyI", "KeyJ", "KeyK", "KeyL"]);

const video = document.getElementById("video");
const statusLine = document.getElementById("status");
const logBox = document.getElementById("log");
const $ = (id) => document.getElementById(id);

let ws = null;
let pc = null;
let input = null;
let nextId = 1;
const held = new Set();
const stamps = new Map();        // key id -> performance.now() at keydown
const echoes = [];               // waiting for their first frame on screen
const latencies = [];            // key -> first frame, ms
const metrics = {
  frames: 0, windowFrames: 0, windowStart: 0, start: 0,
  chunks: 0, steadyFrames: 0, steadySeconds: 0, lastComputeFps: 0,
  lastFrame: 0, received: -1, rendererDropped: 0,
};

function log(text) {
  logBox.textContent = (text + "\n" + logBox.textContent).slice(0, 4000);
}

function setStatus(text) {
  statusLine.textContent = text;
}

function send(obj) {
  if (ws && ws.readyState === WebSocket.OPEN)
    ws.send(JSON.stringify(obj));
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

function fmt(x, digits = 1) {
  return Number.isFinite(x) ? x.toFixed(digits) : "–";
}

function showMetrics() {
  const now = performance.now();
  const sessionS = metrics.start ? (now - metrics.start) / 1000 : 0;
  // received (RTP statistics) rather than presented: the renderer may drop
  // frames (headless Chromium without a GPU drops about a third)
  const received = metrics.received >= 0 ? metrics.received : metrics.frames;
  $("m-frames").textContent = received + " / " +
    fmt(sessionS > 0 ? received / sessionS : NaN) +
    (metrics.rendererDropped > 0 ?
      " (" + metrics.rendererDropped + " not shown)" : "");
  $("m-compute").textContent = fmt(metrics.lastComputeFps) + " / " +
    fmt(metrics.steadySeconds > 0 ?
      metrics.steadyFrames / metrics.steadySeconds : NaN);
  $("m-chunks").textContent = String(metrics.chunks);
  $("m-latency").textContent = fmt(latencies[latencies.length - 1], 0) +
    " / " + fmt(percentile(latencies, 0.5), 0);
}

function onChunk(m) {
  metrics.chunks++;
  metrics.lastComputeFps = m["compute-fps"];
  if (m.index >= 1) {           // steady state: chunks after the first
    metrics.steadyFrames += m.frames;
    metrics.steadySeconds += m["compute-seconds"];
  }
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

// a frame is on screen: delivery fps, and the key presses it reflects.
// requestVideoFrameCallback runs at most once per rendering update, so two
// frames can be presented between callbacks; metadata.presentedFrames counts
// them all.
let lastPresented = -1;
function onFrame(now, meta) {
  let n = 1;
  if (meta && Number.isFinite(meta.presentedFrames)) {
    if (lastPresented >= 0 && meta.presentedFrames > lastPresented)
      n = meta.presentedFrames - lastPresented;
    lastPresented = meta.presentedFrames;
  }
  metrics.frames += n;
  metrics.windowFrames += n;
  if (!metrics.start)
    metrics.start = now;
  if (!metrics.windowStart)
    metrics.windowStart = now;
  metrics.lastFrame = now;
  if (now - metrics.windowStart >= 1000) {
    $("m-delivery").textContent =
      fmt(metrics.windowFrames * 1000 / (now - metrics.windowStart));
    metrics.windowFrames = 0;
    metrics.windowStart = now;
  }
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

// nothing is generated while no key is held, and the next chunk may take a
// while: the video stops, say so rather than keep the last rate
setInterval(() => {
  if (metrics.lastFrame && performance.now() - metrics.lastFrame > 1500) {
    $("m-delivery").textContent = held.size ? "0.0 (waiting for a chunk)" :
      "0.0 (no key held)";
    metrics.windowFrames = 0;
    metrics.windowStart = 0;
  }
}, 500);

// frames received from the RTP statistics; without a per-frame callback the
// decoded frames stand for the presented ones
let lastDecoded = 0;
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
    if (Number.isFinite(r.framesReceived))
      metrics.received = r.framesReceived;
    if (!video.requestVideoFrameCallback) {
      const n = r.framesDecoded || 0;
      for (; lastDecoded < n; lastDecoded++)
        onFrame(performance.now(), null);
    }
  });
  const q = video.getVideoPlaybackQuality ?
    video.getVideoPlaybackQuality() : null;
  if (q)
    metrics.rendererDropped = q.droppedVideoFrames;
  if (metrics.start)
    showMetrics();
}, 500);

if (video.requestVideoFrameCallback)
  video.requestVideoFrameCallback(onFrame);

// ---- signalling ----

function onControl(text) {
  let m;
  try {
    m = JSON.parse(text);
  } catch (e) {
    return;
  }
  if (m.type === "chunk")
    onChunk(m);
  else if (m.type === "key-echo")
    onEcho(m);
}

function newPeer() {
  pc = new RTCPeerConnection({ iceServers: [] });
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
      ch.onopen = () => setStatus("connected: hold a key to move " +
        "(nothing is generated before)");
    } else if (ch.label === "control") {
      ch.onmessage = (m) => onControl(m.data);
    }
  };
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === "failed")
      setStatus("WebRTC connection failed");
  };
}

async function onSignal(text) {
  const m = JSON.parse(text);
  if (m.type === "error") {
    setStatus("server: " + m.message);
    log("error " + m.code + ": " + m.message);
  } else if (m.type === "welcome") {
    setStatus("session " + m.session + " (" + m.encoder + "): negotiating");
    newPeer();
  } else if (!pc) {
    return;                     // closed meanwhile
  } else if (m.type === "offer") {
    await pc.setRemoteDescription({ type: "offer", sdp: m.sdp });
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    send({ type: "answer", sdp: pc.localDescription.sdp });
  } else if (m.type === "ice") {
    await pc.addIceCandidate({ candidate: m.candidate,
      sdpMLineIndex: m.sdpMLineIndex });
  }
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  ws = new WebSocket(scheme + "://" + location.host + "/ws");
  // one message at a time: onSignal awaits (setRemoteDescription, ...), and
  // a candidate handled before the offer is set would be refused
  let queue = Promise.resolve();
  ws.onmessage = (e) => {
    queue = queue.then(() => onSignal(e.data)).catch((err) => log(String(err)));
  };
  ws.onclose = (e) => {
    if (!statusLine.textContent.startsWith("server:"))
      setStatus("disconnected (" + e.code + (e.reason ? " " + e.reason : "") +
        ")");
    if (pc)
      pc.close();
    pc = null;
    input = null;
  };
}

window.addEventListener("pagehide", () => {
  send({ type: "bye" });
  if (ws)
    ws.close();
});

connect();
