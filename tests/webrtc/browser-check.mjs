// lingbot-gst: drive the lingbot-webrtc-server page in headless Chromium.
// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Run by tests/webrtc/run-browser-check.sh (suite browser); by hand:
//
//   mkdir -p /tmp/pw && cd /tmp/pw && npm install playwright-core
//   NODE_PATH=/tmp/pw/node_modules node tests/webrtc/browser-check.mjs \
//       http://127.0.0.1:8080/ [--chromium /usr/bin/chromium] [--out /tmp/webrtc]
//       [--codec VP8|H264] [--scenario basic|full] [--timeout-ms 60000]
//       [--no-loopback-flag] [--stun URL] [--expect-status TEXT]
//       [--restart COMMAND]
//
// --no-loopback-flag leaves out --allow-loopback-in-peer-connection (an
// ordinary browser: no 127.0.0.1 candidates of its own).
//
// basic (any codec): the offer's codec and fmtp; the start image until the
// first frame; "waiting for a key", then "generating chunk 0…" while ArrowUp
// is held; frames decoded with a key frame; compute fps, the keys of each
// chunk and a delivery fps on the page; a reload mid-session resumes the
// same session at the next chunk (not 0) and decodes within the first
// frames of its first chunk (a key frame forced for the joiner); a browser
// without the codec gets a clear error.
// full (adds): a table of malformed messages from the page on the WebSocket
// and both channels, each refused with an error reply, the viewer still
// receiving; a replacement socket (raw, from node) with bad JSON and 2 MiB
// of fragments closed with 1009 while the viewer streams on; a second
// browser refused with 4409 that retries with backoff and says why, and
// gets in when the first ends its session; that browser vanishing
// (SIGSTOP) and its slot free again within 35 s.
//
// lifecycle (a server with --set frames=61 and --restart, a shell command
// that stops it with SIGTERM and starts it again on the same port): a
// chunk, then the restart: the page says the server is shutting down and
// retries in 1 s (attempt 1), as after a crash, gets a new session, and
// shows neither the old chunk list nor its compute fps; then W held until
// the video ends: the page keeps its peer connection until the last of the
// 61 frames arrived (framesReceived at close = the previews + 61).
//
// relay (tests/webrtc/test-webrtc-nat.sh, a stand-in source): frames
// decoded, and a relay candidate in the selected candidate pair.
// relay-absent (the same without the relay): the page shows a status line
// that contains --expect-status (the server's reason, naming the relay).
//
// Screenshots OUT-waiting.png, OUT-held.png, OUT-resumed.png.  Exit 0 =
// everything seen, 1 = a check failed (listed on stderr), 2 = usage.
// Console errors and page errors make the check fail.

import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { createConnection } from "node:net";

const require = createRequire(import.meta.url);
let chromium;
try {
  ({ chromium } = require("playwright-core"));
} catch (e) {
  // ES module resolution ignores NODE_PATH; createRequire honours it
  console.error("playwright-core not found: npm install playwright-core " +
    "in a scratch folder and set NODE_PATH=<folder>/node_modules");
  process.exit(2);
}

const args = process.argv.slice(2);
let url = "http://127.0.0.1:8080/";
let exe = "/usr/bin/chromium";
let out = "/tmp/webrtc";
let codec = "VP8";
let scenario = "basic";
let timeoutMs = 60000;
let loopbackFlag = true;
let stun = null;
let expectStatus = null;   // the server's --stun: the page's RTCPeerConnection has it
let restartCmd = null;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === "--chromium") exe = args[++i];
  else if (a === "--out") out = args[++i];
  else if (a === "--codec") codec = args[++i];
  else if (a === "--scenario") scenario = args[++i];
  else if (a === "--timeout-ms") timeoutMs = Number(args[++i]);
  else if (a === "--no-loopback-flag") loopbackFlag = false;
  else if (a === "--stun") stun = args[++i];
  else if (a === "--expect-status") expectStatus = args[++i];
  else if (a === "--restart") restartCmd = args[++i];
  else if (a.startsWith("http")) url = a;
  else {
    console.error("unknown argument " + a);
    process.exit(2);
  }
}
if (!["VP8", "H264"].includes(codec) ||
  !["basic", "full", "relay", "relay-absent", "lifecycle"]
    .includes(scenario)) {
  console.error("--codec VP8|H264, --scenario " +
    "basic|full|relay|relay-absent|lifecycle");
  process.exit(2);
}

const failures = [];
const consoleErrors = [];
// while the server restarts, a retry may find its port closed: Chromium
// logs that refused WebSocket as a console error of its own
let restarting = false;
const fail = (what) => {
  failures.push(what);
  console.error("FAIL: " + what);
};
const check = (cond, what) => {
  if (!cond)
    fail(what);
  return cond;
};
const note = (what) => console.log(what);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const chromiumArgs = [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
  "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync",
  "--autoplay-policy=no-user-gesture-required",
].concat(loopbackFlag ? ["--allow-loopback-in-peer-connection"] : []);

// every status line the page showed, in order
function recordStatuses() {
  window.__statuses = [];
  document.addEventListener("DOMContentLoaded", () => {
    const el = document.getElementById("status");
    const push = () => window.__statuses.push(el.textContent);
    push();
    new MutationObserver(push).observe(el, { childList: true,
      characterData: true, subtree: true });
  });
}

async function newPage(ctx, name) {
  const page = await ctx.newPage();
  await page.addInitScript(recordStatuses);
  page.on("console", (m) => {
    if (m.type() === "error" && !(restarting &&
      /WebSocket connection to .* failed: .*ERR_CONNECTION_REFUSED/
        .test(m.text()))) {
      consoleErrors.push(name + ": " + m.text());
      console.error(name + " console error: " + m.text());
    }
  });
  page.on("pageerror", (e) => {
    consoleErrors.push(name + ": " + String(e));
    console.error(name + " page error: " + e);
  });
  return page;
}

async function snap(page) {
  return page.evaluate(async () => {
    const get = (id) => document.getElementById(id).textContent.trim();
    let rtp = null;
    // app.js's top-level bindings are visible here
    // eslint-disable-next-line no-undef
    const p = typeof pc !== "undefined" ? pc : null;
    if (p) {
      try {
        (await p.getStats()).forEach((r) => {
          if (r.type === "inbound-rtp" && r.kind === "video")
            rtp = { received: r.framesReceived || 0,
              decoded: r.framesDecoded || 0, keys: r.keyFramesDecoded || 0 };
        });
      } catch (e) { /* closed meanwhile */ }
    }
    const img = document.getElementById("start");
    let ice = null;
    if (p) {
      const c = p.getConfiguration();
      ice = { servers: JSON.parse(JSON.stringify(c.iceServers || [])),
        policy: c.iceTransportPolicy };
    }
    return {
      ice,
      // eslint-disable-next-line no-undef
      st: JSON.parse(JSON.stringify(state)), offer: lastOffer, rtp,
      status: get("status"),
      statusError: document.getElementById("status").classList
        .contains("error"),
      statuses: window.__statuses.slice(),
      atClose: window.__framesAtClose,
      startSrc: img.getAttribute("src") || "",
      startHidden: img.hidden, startLoaded: img.complete &&
        img.naturalWidth > 0,
      compute: get("m-compute"), chunks: get("m-chunks"),
      delivery: get("m-delivery"), frames: get("m-frames"),
      latency: get("m-latency"),
    };
  });
}

function brief(s) {
  if (!s)
    return "?";
  return JSON.stringify({ status: s.status, session: s.st.session,
    resumed: s.st.resumed, next: s.st.nextChunk, first: s.st.firstChunk,
    last: s.st.lastChunk, phase: s.st.phase, rtp: s.rtp, retries:
    s.st.retries, rejected: s.st.rejected, compute: s.compute,
    chunks: s.chunks, delivery: s.delivery });
}

async function waitFor(page, what, pred, ms = timeoutMs) {
  const end = Date.now() + ms;
  let s;
  while (Date.now() < end) {
    s = await snap(page);
    if (pred(s))
      return s;
    await sleep(100);
  }
  fail(what + " (last state " + brief(s) + ")");
  return s;
}

const decoded = (s) => (s.rtp ? s.rtp.decoded : 0);
const connected = (s) => s.st.informed && s.st.phase !== "connecting";

// ---- a raw WebSocket client (node): what a page cannot send ----

function rawWs(token) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = createConnection({ host: u.hostname, port: Number(u.port) });
    const ws = { sock, texts: [], closeCode: 0, closed: false, buf:
      Buffer.alloc(0), upgraded: false };
    sock.on("error", () => { ws.closed = true; });
    sock.on("close", () => { ws.closed = true; });
    sock.on("connect", () => {
      sock.write("GET /ws?resume=" + token + " HTTP/1.1\r\nHost: " + u.host +
        "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
        "Sec-WebSocket-Version: 13\r\n\r\n");
    });
    sock.on("data", (d) => {
      ws.buf = Buffer.concat([ws.buf, d]);
      if (!ws.upgraded) {
        const end = ws.buf.indexOf("\r\n\r\n");
        if (end < 0)
          return;
        if (!ws.buf.subarray(0, end).toString().startsWith("HTTP/1.1 101"))
          return reject(new Error("no WebSocket upgrade"));
        ws.upgraded = true;
        ws.buf = ws.buf.subarray(end + 4);
        resolve(ws);
      }
      while (ws.buf.length >= 2) {
        let len = ws.buf[1] & 0x7f, at = 2;
        if (len === 126) {
          if (ws.buf.length < 4) return;
          len = ws.buf.readUInt16BE(2);
          at = 4;
        } else if (len === 127) {
          if (ws.buf.length < 10) return;
          len = Number(ws.buf.readBigUInt64BE(2));
          at = 10;
        }
        if (ws.buf.length < at + len)
          return;
        const op = ws.buf[0] & 0x0f;
        const payload = ws.buf.subarray(at, at + len);
        if (op === 1 && !payload.toString().includes("\"type\":\"ice\""))
          ws.texts.push(payload.toString());
        else if (op === 8 && len >= 2)
          ws.closeCode = payload.readUInt16BE(0);
        ws.buf = ws.buf.subarray(at + len);
      }
    });
  });
}

function rawFrame(ws, fin, op, payload) {
  const len = payload.length;
  const hdr = [(fin ? 0x80 : 0) | op];
  if (len < 126) {
    hdr.push(0x80 | len);
  } else if (len <= 0xffff) {
    hdr.push(0x80 | 126, len >> 8, len & 0xff);
  } else {
    hdr.push(0x80 | 127);
    for (let i = 7; i >= 0; i--)
      hdr.push(Number((BigInt(len) >> BigInt(8 * i)) & 0xffn));
  }
  const mask = [1, 2, 3, 4];
  const body = Buffer.from(payload);
  for (let i = 0; i < len; i++)
    body[i] ^= mask[i % 4];
  if (!ws.closed)
    ws.sock.write(Buffer.concat([Buffer.from(hdr.concat(mask)), body]));
}

async function until(what, pred, ms = timeoutMs) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred())
      return true;
    await sleep(50);
  }
  fail(what);
  return false;
}

// ---- the checks ----

async function firstSession(page) {
  await page.goto(url, { waitUntil: "load", timeout: timeoutMs });
  let s = await waitFor(page, "session connected", connected);
  note("connected: " + brief(s));
  // the ICE servers of welcome (the server's --stun) in the page's
  // RTCPeerConnection, the policy "all" without --ice-transport-policy
  const urls = s.ice ? s.ice.servers.flatMap((x) => [].concat(x.urls)) : [];
  check(s.ice && s.ice.policy === "all", "iceTransportPolicy all: " +
    JSON.stringify(s.ice));
  check(stun ? urls.length === 1 && urls[0] === stun : urls.length === 0,
    "the page's iceServers are the server's (" + (stun || "none") + "): " +
    JSON.stringify(urls));
  // the offer came before any key: its codec and fmtp
  if (codec === "H264") {
    check(/a=rtpmap:102 H264\/90000/.test(s.offer), "offer has H264/90000");
    check(/a=fmtp:102 [^\r\n]*packetization-mode=1/.test(s.offer) &&
      /a=fmtp:102 [^\r\n]*profile-level-id=42e01f/.test(s.offer),
      "offer fmtp packetization-mode=1;profile-level-id=42e01f: " +
      (/a=fmtp:102[^\r\n]*/.exec(s.offer) || ["none"])[0]);
    check(/a=rtcp-fb:102 nack pli/.test(s.offer), "offer rtcp-fb nack pli");
  } else {
    check(/a=rtpmap:96 VP8\/90000/.test(s.offer), "offer has VP8/90000");
    check(/a=rtcp-fb:96 nack pli/.test(s.offer), "offer rtcp-fb nack pli");
  }
  // the server's preview (lingbotgen preview=true, docs/elements.md
  // "Preview"): the start image arrives as a video frame before any key
  s = await waitFor(page, "the preview decoded while waiting for a key",
    (x) => decoded(x) > 0 && /waiting for a key/.test(x.status));
  check(!/\d: /.test(s.chunks), "no chunk before a key: " + s.chunks);
  await page.screenshot({ path: out + "-waiting.png" });

  // hold ArrowUp: "generating chunk 0…", then video
  await page.click("#video");
  await page.keyboard.down("ArrowUp");
  s = await waitFor(page, "frames decoded with a key frame, the start image " +
    "hidden", (x) => decoded(x) > 0 && x.rtp.keys >= 1 && x.startHidden);
  s = await waitFor(page, "chunk metrics: compute fps and the keys of " +
    "chunk 0", (x) => /^\d/.test(x.compute) && /\b0: w\b/.test(x.chunks));
  check(s.statuses.some((t) => /^generating chunk 0…/.test(t)),
    "'generating chunk 0…' was shown (" + s.statuses.join(" | ") + ")");
  s = await waitFor(page, "a delivery fps above 0 while a key is held",
    (x) => /^\d/.test(x.delivery) && Number.parseFloat(x.delivery) > 0);
  s = await waitFor(page, "chunk 1", (x) => x.st.lastChunk >= 1);
  note("held: " + brief(s));
  await page.screenshot({ path: out + "-held.png" });
  await page.keyboard.up("ArrowUp");
  s = await waitFor(page, "the generator waiting again",
    (x) => /waiting for a key/.test(x.status));
  return s;
}

// a reload mid-session: the same session, the next chunk, a key frame at
// once for the joiner
async function reload(page) {
  let s = await snap(page);
  const session = s.st.session, last = s.st.lastChunk;
  await page.reload({ waitUntil: "load", timeout: timeoutMs });
  s = await waitFor(page, "the reloaded page connected", connected);
  check(s.st.resumed && s.st.session === session,
    "the reload resumed session " + session + " (" + brief(s) + ")");
  check(s.st.nextChunk === last + 1, "the reload continues at chunk " +
    (last + 1) + ", not 0 (next-chunk " + s.st.nextChunk + ")");
  check(/resumed at chunk/.test(s.statuses.join(" | ")),
    "the page said it resumed");
  // the world is idle (no key since chunk last): no frame comes until a
  // key moves it, so the picture the page had when it left stands in,
  // not the start image
  check(/^data:image\/jpeg;base64,/.test(s.startSrc) && (!s.startHidden ||
    decoded(s) > 0), "the reloaded page shows the picture it left, not " +
    "the start image (" + s.startSrc.slice(0, 40) + ", hidden " +
    s.startHidden + ")");
  await page.click("#video");
  await page.keyboard.down("ArrowUp");
  s = await waitFor(page, "the first chunk after the reload",
    (x) => x.st.firstChunk >= 0);
  check(s.st.firstChunk === last + 1, "the first chunk after the reload is " +
    (last + 1) + " (got " + s.st.firstChunk + ")");
  // one chunk (16 frames = 1 s) received: decodable from its first frames
  s = await waitFor(page, "16 frames received after the reload",
    (x) => x.rtp && x.rtp.received >= 16);
  check(s.rtp.keys >= 1 && s.rtp.decoded >= s.rtp.received - 4,
    "the joiner decodes from the start of its first chunk: " +
    JSON.stringify(s.rtp));
  note("resumed: " + brief(s));
  await page.screenshot({ path: out + "-resumed.png" });
  await page.keyboard.up("ArrowUp");
  return waitFor(page, "the generator waiting after the reload",
    (x) => /waiting for a key/.test(x.status));
}

// the malformed table, sent by the page itself
async function malformed(page) {
  const sent = await page.evaluate(() => {
    const big = "{\"event\":\"KeyPress\",\"key\":\"" + "x".repeat(70000) +
      "\"}";
    const badWs = ["{not json", "[]", "{}", "{\"type\":1}",
      "{\"type\":null}", "{\"type\":{}}", "{\"type\":\"bogus\"}",
      "{\"type\":\"ice\"}", "{\"type\":\"ice\",\"candidate\":7," +
      "\"sdpMLineIndex\":0}", "{\"type\":\"answer\"}",
      "{\"type\":\"answer\",\"sdp\":\"garbage\"}",
      "{\"type\":\"offer\",\"sdp\":\"v=0\"}", big];
    const badInput = ["{not json", "42", "{\"event\":5}",
      "{\"event\":\"KeyPress\"}", "{\"event\":\"Bogus\",\"key\":\"a\"}",
      "{\"id\":5,\"request\":{\"type\":3}}", "{\"id\":5,\"request\":5}",
      "{\"id\":5,\"request\":{\"type\":\"navigationEvent\"}}"];
    // (a browser refuses to send more than the channel's max-message-size
    // itself; the webrtc suite sends those)
    const badControl = ["{\"type\":\"hello\"}", "{\"type\":5}",
      "{\"id\":5,\"request\":{\"type\":3}}"];
    // eslint-disable-next-line no-undef
    for (const m of badWs) ws.send(m);
    // eslint-disable-next-line no-undef
    ws.send(new Uint8Array([1, 2, 3]));
    // eslint-disable-next-line no-undef
    for (const m of badInput) input.send(m);
    // eslint-disable-next-line no-undef
    input.send(new Uint8Array([1]));
    // eslint-disable-next-line no-undef
    for (const m of badControl) control.send(m);
    return badWs.length + badInput.length + badControl.length + 2;
  });
  let s = await waitFor(page, "an error reply for each of " + sent +
    " malformed messages", (x) => x.st.rejected >= sent);
  check(s.st.rejected === sent, "exactly " + sent + " error replies (" +
    s.st.rejected + ")");
  const res = await page.evaluate(async () => (await fetch("/")).status);
  check(res === 200, "the server still serves the page (" + res + ")");
  const before = decoded(s);
  await page.keyboard.down("KeyD");
  s = await waitFor(page, "the viewer still receiving frames",
    (x) => decoded(x) > before + 8);
  await page.keyboard.up("KeyD");
  note("after the malformed table: " + brief(s));
  return waitFor(page, "the generator waiting after the table",
    (x) => /waiting for a key/.test(x.status));
}

// a replacement socket with bad JSON and 2 MiB of fragments, while the
// viewer holds a key
async function badReplacement(page) {
  const token = await page.evaluate(() =>
    sessionStorage.getItem("lingbot-resume"));
  let s = await snap(page);
  const before = decoded(s);
  await page.keyboard.down("KeyW");
  const ws = await rawWs(token);
  await until("the replacement's welcome and offer", () =>
    ws.texts.length >= 2);
  rawFrame(ws, true, 1, Buffer.from("{\"type\":1}"));
  await until("an error reply to the replacement", () =>
    ws.texts.some((t) => t.includes("\"code\":\"bad-message\"")));
  const chunk = Buffer.alloc(256 * 1024, 0x79);
  rawFrame(ws, false, 1, chunk);
  for (let i = 1; i < 8; i++)
    rawFrame(ws, i === 7, 0, chunk);
  await until("1009 for 2 MiB of fragments", () => ws.closeCode === 1009 ||
    ws.closed);
  check(ws.closeCode === 1009, "closed with 1009 (" + ws.closeCode + ")");
  ws.sock.destroy();
  s = await waitFor(page, "the viewer receiving while the replacement " +
    "misbehaved", (x) => decoded(x) > before + 8);
  check(!s.st.fatal && s.st.retries === 0, "the viewer was not disturbed (" +
    brief(s) + ")");
  await page.keyboard.up("KeyW");
  return waitFor(page, "the generator waiting after the replacement",
    (x) => /waiting for a key/.test(x.status));
}

function descendants(pid) {
  let out;
  try {
    out = execFileSync("ps", ["-o", "pid=", "--ppid", String(pid)])
      .toString();
  } catch (e) {
    return [];                  // none
  }
  const kids = out.split(/\s+/).filter(Boolean).map(Number);
  return kids.concat(...kids.map(descendants));
}

// a second browser: busy, retries with backoff, gets in when the first
// ends its session; then it vanishes, and its slot is free again
async function busyAndVanish(page, ctx) {
  const server2 = await chromium.launchServer({ executablePath: exe,
    headless: true, args: chromiumArgs });
  const browser2 = await chromium.connect(server2.wsEndpoint());
  const pids = [server2.process().pid];
  let stopped = [];
  try {
    const page2 = await newPage(await browser2.newContext(), "second");
    await page2.goto(url, { waitUntil: "load", timeout: timeoutMs });
    let s2 = await waitFor(page2, "the second browser retrying after 4409",
      (x) => x.st.retries >= 2);
    check(s2.statuses.some((t) => /busy.*retrying in 1 s \(attempt 1\)/
      .test(t)) && s2.statuses.some((t) =>
      /busy.*retrying in 2 s \(attempt 2\)/.test(t)),
    "the page says why and backs off: " + s2.statuses.join(" | "));
    // the first ends its session: the second gets in (a new session)
    await page.click("#end");
    await waitFor(page, "'session ended'", (x) => /session ended/
      .test(x.status));
    s2 = await waitFor(page2, "the second browser connected", connected);
    check(!s2.st.resumed && s2.st.nextChunk === 0,
      "the second browser has a new session (" + brief(s2) + ")");

    // it vanishes: every process of that browser stopped
    pids.push(...descendants(pids[0]));
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGSTOP");
        stopped.push(pid);
      } catch (e) { /* gone */ }
    }
    const t0 = Date.now();
    const page3 = await newPage(await ctx.browser().newContext(), "third");
    await page3.goto(url, { waitUntil: "load", timeout: timeoutMs });
    const s3 = await waitFor(page3, "the vanished browser's slot free " +
      "within 35 s", connected, 35000);
    const dt = (Date.now() - t0) / 1000;
    note("slot free " + dt.toFixed(1) + " s after the browser vanished: " +
      brief(s3));
    check(dt <= 35, "slot free within 35 s (" + dt.toFixed(1) + " s)");
    check(s3.st.retries >= 1, "the third browser was refused first");
    await page3.click("#end");
    await page3.close();
  } finally {
    for (const pid of stopped) {
      try {
        process.kill(pid, "SIGCONT");
      } catch (e) { /* gone */ }
    }
    await browser2.close().catch(() => {});
    await server2.close().catch(() => {});
  }
}

// a browser that cannot decode the offered codec
async function noCodec(ctx) {
  const page = await newPage(ctx, "no-codec");
  await page.addInitScript((name) => {
    const orig = RTCRtpReceiver.getCapabilities;
    RTCRtpReceiver.getCapabilities = (kind) => {
      const caps = orig.call(RTCRtpReceiver, kind);
      if (caps && kind === "video")
        caps.codecs = caps.codecs.filter((c) =>
          c.mimeType.toLowerCase() !== "video/" + name.toLowerCase());
      return caps;
    };
  }, codec);
  await page.goto(url, { waitUntil: "load", timeout: timeoutMs });
  const s = await waitFor(page, "a clear error without " + codec,
    (x) => x.statusError && /cannot decode/.test(x.status));
  note("no codec: " + s.status);
  check(new RegExp(codec).test(s.status), "the error names " + codec);
  await page.close();
}

// a restart of the server (SIGTERM: error "shutdown", close 1001): the
// page retries with the backoff of a lost connection and starts anew
async function restart(page) {
  await page.goto(url, { waitUntil: "load", timeout: timeoutMs });
  let s = await waitFor(page, "session connected", connected);
  s = await waitFor(page, "the preview decoded while waiting for a key",
    (x) => decoded(x) > 0 && /waiting for a key/.test(x.status));
  await page.click("#video");
  await page.keyboard.down("ArrowUp");
  s = await waitFor(page, "chunk 0 with its compute fps",
    (x) => /^\d/.test(x.compute) && /\b0: w\b/.test(x.chunks));
  await page.keyboard.up("ArrowUp");
  s = await waitFor(page, "the generator waiting again",
    (x) => /waiting for a key/.test(x.status));
  note("before the restart: " + brief(s));
  if (!check(restartCmd, "--restart is needed"))
    return;
  restarting = true;
  execFileSync("sh", ["-c", restartCmd], { stdio: "inherit",
    timeout: 30000 });
  const said = "the server is shutting down (1001, a restart?): retrying " +
    "in 1 s (attempt 1)";
  s = await waitFor(page, "'" + said + "'",
    (x) => x.statuses.includes(said));
  s = await waitFor(page, "a new session after the restart",
    (x) => connected(x) && x.st.retries >= 1);
  restarting = false;
  note("after the restart: " + brief(s));
  check(!s.st.resumed && s.st.nextChunk === 0 && !s.st.fatal,
    "a new session, not resumed (" + brief(s) + ")");
  check(s.chunks === "–" && s.compute === "– / –" &&
    s.st.chunks.length === 0 && s.st.lastChunk === -1,
    "the old session's chunks and compute fps cleared: chunks '" +
    s.chunks + "', compute '" + s.compute + "'");
}

// frames received when the page closes its RTCPeerConnection: polled
// every 50 ms while it is open (window.__framesAtClose, -1 until then)
function watchClose() {
  window.__framesAtClose = -1;
  const Orig = window.RTCPeerConnection;
  window.RTCPeerConnection = class extends Orig {
    constructor(...args) {
      super(...args);
      this.frames = 0;
      const timer = setInterval(async () => {
        if (this.connectionState === "closed")
          return clearInterval(timer);
        try {
          (await this.getStats()).forEach((r) => {
            if (r.type === "inbound-rtp" && r.kind === "video")
              this.frames = r.framesReceived || 0;
          });
        } catch (e) { /* closed meanwhile */ }
      }, 50);
    }

    close() {
      window.__framesAtClose = this.frames;
      super.close();
    }
  };
}

// the end of the video (--set frames=61): every frame received before
// the page closes its peer connection
async function lastFrame(page) {
  let s = await waitFor(page, "the preview decoded while waiting for a key",
    (x) => decoded(x) > 0 && /waiting for a key/.test(x.status));
  await sleep(1500);            // the previews all in
  s = await snap(page);
  const previews = s.rtp ? s.rtp.received : 0;
  // (the peer connection the restart closed counted already)
  await page.evaluate(() => { window.__framesAtClose = -1; });
  await page.click("#video");
  await page.keyboard.down("KeyW");
  s = await waitFor(page, "the end of the video",
    (x) => x.st.fatal === "eos");
  s = await waitFor(page, "the peer connection closed after the video",
    (x) => x.atClose >= 0, 15000);
  await page.keyboard.up("KeyW");
  note("end of the video: " + brief(s) + ", " + previews +
    " preview frame(s), " + s.atClose + " frames at close");
  check(s.atClose === previews + 61, "all 61 frames of the video " +
    "received before the page closed its peer connection: " + s.atClose +
    " = " + previews + " previews + " + (s.atClose - previews));
  check(/the session's video ended/.test(s.status) && s.statusError,
    "the page says the video ended: " + s.status);
}

// frames through the TURN relay of welcome's iceServers
async function relaySession(page) {
  await page.goto(url, { waitUntil: "load", timeout: timeoutMs });
  const s = await waitFor(page, "frames decoded", (x) => decoded(x) > 0);
  note("frames: " + brief(s));
  const pair = await page.evaluate(async () => {
    const byId = {};
    let transport = null;
    // eslint-disable-next-line no-undef
    (await pc.getStats()).forEach((r) => {
      byId[r.id] = r;
      if (r.type === "transport")
        transport = r;
    });
    const p = transport && byId[transport.selectedCandidatePairId];
    return p ? { local: byId[p.localCandidateId].candidateType,
      remote: byId[p.remoteCandidateId].candidateType } : null;
  });
  note("selected pair: " + JSON.stringify(pair));
  // the browser's own relay, or the server's (reached from the browser's
  // server-reflexive address): either way through the relay
  check(pair && (pair.local === "relay" || pair.remote === "relay"),
    "the selected pair goes through the relay: " + JSON.stringify(pair));
}

// no relay: the page says why, in the server's words
async function relayAbsent(page) {
  await page.goto(url, { waitUntil: "load", timeout: timeoutMs });
  const s = await waitFor(page, "a status with '" + expectStatus + "'",
    (x) => x.statuses.some((t) => t.includes(expectStatus)));
  note("status: " + s.statuses.find((t) => t.includes(expectStatus)));
}

const browser = await chromium.launch({ executablePath: exe, headless: true,
  args: chromiumArgs });
try {
  const ctx = await browser.newContext({ viewport: { width: 960,
    height: 900 } });
  const page = await newPage(ctx, "first");
  if (scenario === "relay" || scenario === "relay-absent") {
    await (scenario === "relay" ? relaySession(page) : relayAbsent(page));
    await page.close();
    await browser.close();
    if (consoleErrors.length)
      fail(consoleErrors.length + " console error(s)");
    if (failures.length)
      process.exit(1);
    note("OK (" + scenario + ")");
    process.exit(0);
  }
  if (scenario === "lifecycle") {
    await page.addInitScript(watchClose);
    await restart(page);
    await lastFrame(page);
    await page.close();
    await browser.close();
    if (consoleErrors.length)
      fail(consoleErrors.length + " console error(s)");
    if (failures.length)
      process.exit(1);
    note("OK (" + scenario + ")");
    process.exit(0);
  }
  await firstSession(page);
  if (scenario === "full") {
    await malformed(page);
    await badReplacement(page);
  }
  await reload(page);
  if (scenario === "full") {
    await busyAndVanish(page, ctx);
  } else {
    await page.click("#end");
    await waitFor(page, "'session ended'", (x) => /session ended/
      .test(x.status));
  }
  await page.close();
  await noCodec(ctx);
} catch (e) {
  fail(String(e && e.stack || e));
} finally {
  await browser.close();
}

if (consoleErrors.length)
  fail(consoleErrors.length + " console error(s)");
if (failures.length) {
  console.error(failures.length + " check(s) failed");
  process.exit(1);
}
note("OK (" + codec + ", " + scenario + "): screenshots " + out +
  "-{waiting,held,resumed}.png");
