#!/usr/bin/python3
# lingbot-gst: the pipeline of tools/demo.sh, run through PyGObject
# (python3-gi, Debian's /usr/bin/python3; tools/deps.sh installs it)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   demo-run.py --model DIR --image START.jpg --trace TRACE.json --out OUT.mp4
#               [--prompt TEXT] [--devices cpu:2] [--precision fp32]
#               [--frames 77] [--width 416] [--height 240] [--seed 7]
#
#   lingbotcontrolsrc ! lingbotgen ! lingbotvaedec ! videoconvert ! x264enc
#     ! h264parse ! mp4mux ! filesink
#
# It reads the bus itself (no text scraped from gst-launch-1.0 -m): one
# progress line per lingbotvaedec `lingbot-decode` message (frames so far,
# seconds, rate, ETA), then a legend and one line per chunk: lingbotgen's
# `lingbot-chunk` (index, frames, keys, dit and compute seconds to the
# millisecond) with the vae-seconds of lingbotvaedec's `lingbot-decode` of
# the same chunk index (lingbot-chunk's own vae-seconds is always 0), the
# steady fps of lingbotvaedec's `lingbot-summary`, and what the written file
# holds (GstPbutils' discoverer: duration, size, rate).  Ctrl-C sends EOS
# (as gst-launch-1.0 -e): the chunk in flight is finished and written.
# Exit status: 0, 1 on an error message (printed), 2 on bad arguments.
import argparse
import os
import signal
import sys
import time

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstPbutils", "1.0")
from gi.repository import Gst, GstPbutils  # noqa: E402


def make(factory, **props):
    """An element of @factory with @props set from their string forms (as
    gst-launch-1.0 sets them: enums and flags by nick)."""
    e = Gst.ElementFactory.make(factory, None)
    if e is None:
        sys.exit(f"demo-run: no element {factory} (GST_PLUGIN_PATH, "
                 "tools/deps.sh)")
    for name, value in props.items():
        Gst.util_set_object_arg(e, name.replace("_", "-"), str(value))
    return e


def seconds(ns):
    return f"{ns / Gst.SECOND:.2f} s"


def main():
    ap = argparse.ArgumentParser(prog="demo-run.py")
    ap.add_argument("--model", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompt",
                    default="a green meadow under a wide sky, walking forward")
    ap.add_argument("--devices", default="cpu:2")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--frames", type=int, default=77)
    ap.add_argument("--width", type=int, default=416)
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()

    Gst.init(None)
    chain = [
        make("lingbotcontrolsrc", location=a.trace),
        make("lingbotgen", model_path=a.model, image_location=a.image,
             prompt=a.prompt, devices=a.devices, precision=a.precision,
             frames=a.frames, seed=a.seed, width=a.width, height=a.height),
        make("lingbotvaedec"),
        make("videoconvert"),
        make("x264enc", tune="zerolatency", speed_preset="ultrafast"),
        make("h264parse"),
        make("mp4mux"),
        make("filesink", location=a.out),
    ]
    pipeline = Gst.Pipeline.new("demo")
    for e in chain:
        pipeline.add(e)
    for up, down in zip(chain, chain[1:]):
        if not up.link(down):
            sys.exit(f"demo-run: cannot link {up.get_name()} to "
                     f"{down.get_name()}")

    # Ctrl-C: EOS, as gst-launch-1.0 -e; the loop below sees it in 0.1 s
    signal.signal(signal.SIGINT, lambda *_: pipeline.send_event(
        Gst.Event.new_eos()))

    bus = pipeline.get_bus()
    t0 = time.monotonic()
    if pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
        # the element posted why on the bus
        pass
    # chunk index -> lingbot-chunk line, and -> lingbot-decode vae-seconds
    done, chunks, vae, steady, rc = 0, {}, {}, None, 0
    while True:
        msg = bus.timed_pop_filtered(
            Gst.SECOND // 10, Gst.MessageType.ELEMENT | Gst.MessageType.EOS |
            Gst.MessageType.ERROR | Gst.MessageType.WARNING)
        if msg is None:
            continue
        if msg.type == Gst.MessageType.EOS:
            break
        if msg.type == Gst.MessageType.ERROR:
            err, debug = msg.parse_error()
            print(f"demo-run: ERROR from {msg.src.get_name()}: {err.message}",
                  file=sys.stderr)
            if debug:
                print(f"   {debug}", file=sys.stderr)
            rc = 1
            break
        if msg.type == Gst.MessageType.WARNING:
            err, _ = msg.parse_warning()
            print(f"demo-run: WARNING from {msg.src.get_name()}: "
                  f"{err.message}", file=sys.stderr)
            continue
        s = msg.get_structure()
        name = s.get_name()
        if name == "lingbot-decode":
            vae[s.get_value("index")] = s.get_value("vae-seconds")
            done += s.get_value("frames")
            el = time.monotonic() - t0
            line = (f"   chunk {s.get_value('index')}: {done}/{a.frames} "
                    f"frames, {el:.1f} s, {done / el:.2f} fps")
            if a.frames > 0 and done < a.frames:
                line += f", ETA {el * (a.frames - done) / done:.0f} s"
            print(line, flush=True)
        elif name == "lingbot-chunk":
            chunks[s.get_value('index')] = (
                f"   lingbot-chunk {s.get_value('index')}: "
                f"{s.get_value('frames')} frames, keys "
                f"{s.get_value('keys-string') or '-'}, dit "
                f"{s.get_value('dit-seconds'):.3f} s, compute "
                f"{s.get_value('compute-seconds'):.3f} s")
        elif name == "lingbot-summary":
            ok, v = s.get_double("steady-fps")
            if ok:
                steady = v
    pipeline.set_state(Gst.State.NULL)
    if rc:
        return rc
    el = time.monotonic() - t0
    if chunks:
        print("== per chunk: dit = the DiT's 4 + 1 passes; compute = all of "
              "lingbotgen's time for it\n   (camera poses from the keys + "
              "condition encode + DiT); vae = lingbotvaedec's decode,\n"
              "   which runs beside the next chunk's generation")
    for i, c in sorted(chunks.items()):
        v = f"{vae[i]:.3f} s" if i in vae else "-"
        print(f"{c}, vae {v}")
    if steady is not None:
        print(f"== steady {steady:.2f} fps (chunks after the first, compute)")
    size = os.stat(a.out).st_size
    print(f"== wrote {a.out} ({size} bytes) in {el:.1f} s")
    info = GstPbutils.Discoverer.new(10 * Gst.SECOND).discover_uri(
        Gst.filename_to_uri(a.out))
    video = info.get_video_streams()
    if video:
        v = video[0]
        print(f"   duration {seconds(info.get_duration())}, "
              f"{v.get_width()}x{v.get_height()}, "
              f"{v.get_framerate_num()}/{v.get_framerate_denom()} fps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
