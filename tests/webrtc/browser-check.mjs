// lingbot-gst: drive the lingbot-webrtc-server page in headless Chromium.
// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Not a meson test (CI has no Chromium); run it by hand, see docs/webrtc.md:
//
//   mkdir -p /tmp/pw && cd /tmp/pw && npm install playwright-core
//   NODE_PATH=/tmp/pw/node_modules node tests/webrtc/browser-check.mjs \
//       http://127.0.0.1:8080/ [--chromium /usr/bin/chromium] [--out /tmp/webrtc]
//       [--hold-ms 6000] [--timeout-ms 60000] [--no-loopback-flag]
//
// --no-loopback-flag leaves out --allow-loopback-in-peer-connection (an
// ordinary browser: no 127.0.0.1 candidates of its own).
//
// It opens the page, waits for the session, holds ArrowUp (nothing is
// generated before), waits for the video to play, for chunk metrics and a key -> frame latency on the page, releases the key and
// takes screenshots (OUT-connected.png, OUT-held.png, OUT-released.png).  Exit
// status 0 = everything seen, 1 = a check failed (listed on stderr), 2 = usage.
// Console errors and page errors are printed and make the check fail.

import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

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
let holdMs = 6000;
let timeoutMs = 60000;
let loopbackFlag = true;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === "--chromium") exe = args[++i];
  else if (a === "--out") out = args[++i];
  else if (a === "--hold-ms") holdMs = Number(args[++i]);
  else if (a === "--timeout-ms") timeoutMs = Number(args[++i]);
  else if (a === "--no-loopback-flag") loopbackFlag = false;
  else if (a.startsWith("http")) url = a;
  else {
    console.error("unknown argument " + a);
    process.exit(2);
  }
}

const failures = [];
const consoleErrors = [];
const fail = (what) => {
  failures.push(what);
  console.error("FAIL: " + what);
};
const note = (what) => console.log(what);

const profile = mkdtempSync(join(tmpdir(), "lingbot-chromium-"));
// a fresh profile: playwright wants it as launchPersistentContext's argument
// rather than --user-data-dir
const context = await chromium.launchPersistentContext(profile, {
  executablePath: exe,
  headless: true,
  viewport: { width: 960, height: 900 },
  args: [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
    "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
  ].concat(loopbackFlag ? ["--allow-loopback-in-peer-connection"] : []),
});

async function text(page, id) {
  return (await page.textContent("#" + id)).trim();
}

async function state(page) {
  return page.evaluate(async () => {
    const v = document.getElementById("video");
    // eslint-disable-next-line no-undef
    const p = typeof pc !== "undefined" ? pc : null;
    let rtp = null;
    if (p) {
      (await p.getStats()).forEach((r) => {
        if (r.type === "inbound-rtp" && r.kind === "video")
          rtp = { received: r.framesReceived, decoded: r.framesDecoded,
            dropped: r.framesDropped, fps: r.framesPerSecond };
      });
    }
    const q = v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality() : null;
    const get = (id) => document.getElementById(id).textContent.trim();
    return {
      currentTime: v.currentTime,
      frames: q ? q.totalVideoFrames : -1,
      droppedFrames: q ? q.droppedVideoFrames : -1, rtp,
      width: v.videoWidth, height: v.videoHeight,
      status: get("status"), chunks: get("m-chunks"),
      compute: get("m-compute"), latency: get("m-latency"),
      server: get("m-server"), delivery: get("m-delivery"),
      received: get("m-frames"), log: get("log"),
    };
  });
}

async function waitFor(page, what, pred, ms) {
  const end = Date.now() + ms;
  let s;
  while (Date.now() < end) {
    s = await state(page);
    if (pred(s))
      return s;
    await page.waitForTimeout(250);
  }
  fail(what + " (last state " + JSON.stringify(s) + ")");
  return s;
}

try {
  const page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") {
      consoleErrors.push(m.text());
      console.error("console error: " + m.text());
    } else {
      note("console " + m.type() + ": " + m.text());
    }
  });
  page.on("pageerror", (e) => {
    consoleErrors.push(String(e));
    console.error("page error: " + e);
  });

  await page.goto(url, { waitUntil: "load", timeout: timeoutMs });
  note("opened " + url);

  // lingbotgen is live: nothing is generated (the video stays black) until
  // a key is held, so wait for the session, then hold ArrowUp
  let s = await waitFor(page, "input channel open",
    (x) => /connected/.test(x.status), timeoutMs);
  note("connected: " + JSON.stringify(s));
  await page.screenshot({ path: out + "-connected.png" });
  // keys go to the document; click the video as a user would
  await page.click("#video");
  await page.keyboard.down("ArrowUp");
  const heldStart = Date.now();
  s = await waitFor(page, "video playing",
    (x) => x.frames > 0 && x.currentTime > 0, timeoutMs);
  const t1 = s.currentTime;
  await page.waitForTimeout(1500);
  s = await state(page);
  if (!(s.currentTime > t1))
    fail("video.currentTime does not advance (" + t1 + " -> " + s.currentTime + ")");
  note("playing: " + JSON.stringify(s));
  s = await waitFor(page, "chunk metrics and a key -> frame latency",
    (x) => Number(x.chunks) > 0 && /^\d/.test(x.latency) &&
      /^\d/.test(x.compute), timeoutMs);
  note("held: " + JSON.stringify(s));
  const rest = holdMs - (Date.now() - heldStart);
  if (rest > 0)
    await page.waitForTimeout(rest);
  s = await state(page);
  note("held " + holdMs + " ms: " + JSON.stringify(s));
  await page.screenshot({ path: out + "-held.png" });
  await page.keyboard.up("ArrowUp");
  await page.waitForTimeout(2000);
  s = await state(page);
  note("released: " + JSON.stringify(s));
  await page.screenshot({ path: out + "-released.png" });

  // a second key: a second echo (a later chunk) and a second latency
  const before = s;
  await page.keyboard.down("KeyD");
  s = await waitFor(page, "a second key echo and latency",
    (x) => x.server !== before.server && x.latency !== before.latency,
    timeoutMs);
  await page.keyboard.up("KeyD");
  note("second key: " + JSON.stringify(s));
  if (s.log)
    fail("the page logged: " + s.log);

  const stats = await page.evaluate(async () => {
    // app.js keeps its peer connection in a top-level `let`, visible here
    // eslint-disable-next-line no-undef
    const p = typeof pc !== "undefined" ? pc : null;
    if (!p)
      return null;
    const r = await p.getStats();
    const pair = [...r.values()].find((x) => x.type === "candidate-pair" &&
      x.nominated && x.state === "succeeded");
    const pick = (id) => {
      const c = id && r.get(id);
      return c ? c.candidateType + " " + (c.address || c.ip) + ":" + c.port : "?";
    };
    return pair ? { local: pick(pair.localCandidateId),
      remote: pick(pair.remoteCandidateId) } : "no succeeded pair";
  });
  note("ICE pair: " + JSON.stringify(stats));
  await page.close();
} catch (e) {
  fail(String(e));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

if (consoleErrors.length)
  fail(consoleErrors.length + " console error(s)");
if (failures.length) {
  console.error(failures.length + " check(s) failed");
  process.exit(1);
}
note("OK: screenshots " + out + "-{connected,held,released}.png");
