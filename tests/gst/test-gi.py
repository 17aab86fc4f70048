#!/usr/bin/env python3
# lingbot-gst: libgstlingbot-1.0 from Python through GObject introspection
# (GstLingbot-1.0.typelib; suite gst)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   test-gi.py MKMODEL SPM_MODEL IMAGE
#
# GI_TYPELIB_PATH names the build's gst-libs/gst/lingbot/ (the typelib),
# LD_LIBRARY_PATH the library, GST_PLUGIN_PATH the plugin (build/gst).  On a dummy tiny model (lingbot-
# mkmodel --dummy, chunk 4, 64x64, 13 frames = chunk 0 alone):
#
# - the snippet of gst/README.md "From Python" (checked to be the same
#   text): a world created with GstLingbot.World.new(), handed to
#   `lingbotgen ! appsink` as a "lingbot.world" context; the chunk meta of
#   the latent buffer the appsink pulls (chunk 0, 13 frames, the world's
#   devices), the buffer a LingbotDevice memory of f32 [16, 4, 8, 8] whose
#   map is one download;
# - the same world in a second pipeline, `lingbotgen ! lingbotvaedec !
#   appsink`: no world created (no have-context), the meta seen by a probe
#   on lingbotvaedec's sink pad, 13 RGB frames of 64x64 at i / 16 s;
# - the context accessors: type, persistence, the world it holds.
#
# Exits 77 (skipped) without PyGObject, Gst's typelib or the build's
# GstLingbot-1.0.typelib (-Dintrospection=disabled).
import os
import subprocess
import sys
import tempfile
import textwrap

SKIP = 77


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


typelib_dir = os.environ.get("GI_TYPELIB_PATH", "").split(os.pathsep)[0]
if not os.path.exists(os.path.join(typelib_dir, "GstLingbot-1.0.typelib")):
    skip(f"no GstLingbot-1.0.typelib in '{typelib_dir}' "
         "(built without introspection)")
try:
    import gi
    gi.require_version("Gst", "1.0")
    gi.require_version("GstLingbot", "1.0")
    from gi.repository import Gst, GstLingbot
except (ImportError, ValueError) as e:
    skip(f"PyGObject or a typelib is missing: {e}")

failures = 0


def check(what, want, have):
    global failures
    if want == have:
        print(f"ok: {what}")
    else:
        print(f"FAIL: {what}: want {want!r}, have {have!r}")
        failures += 1


def bus_messages(pipeline):
    """Every message on the bus, errors printed."""
    msgs = []
    bus = pipeline.get_bus()
    while True:
        msg = bus.pop()
        if msg is None:
            return msgs
        if msg.type == Gst.MessageType.ERROR:
            err, debug = msg.parse_error()
            print(f"  error from {msg.src.get_name()}: {err.message} "
                  f"({debug})")
        msgs.append(msg)


mkmodel, spm, image = sys.argv[1:4]
tmp = tempfile.TemporaryDirectory()
model = os.path.join(tmp.name, "tiny")
subprocess.run([mkmodel, "--dummy", "--preset", "tiny", "--chunk", "4",
                "--tokenizer", spm, "--out", model, "--quiet"], check=True)

pipeline = None
try:
    # --- the snippet of gst/README.md "From Python" ---
    Gst.init(None)
    # the model is loaded once, here; every pipeline given the context uses it
    world = GstLingbot.World.new(model, "cpu:1", None, True)
    context = GstLingbot.context_new(world)

    pipeline = Gst.parse_launch(
        f"lingbotgen model-path={model} image-location={image} "
        "prompt='a quiet harbour' frames=13 width=64 height=64 ! "
        "appsink name=sink")
    pipeline.set_context(context)
    pipeline.set_state(Gst.State.PLAYING)
    sample = pipeline.get_by_name("sink").emit("pull-sample")
    meta = GstLingbot.buffer_get_lingbot_chunk_meta(sample.get_buffer())
    print(meta.get_chunk(), meta.get_frames(), meta.get_world().get_devices())
    pipeline.set_state(Gst.State.NULL)
    # --- end of the snippet ---
except Exception:
    if pipeline is not None:
        bus_messages(pipeline)
    raise

# the snippet is the README's, word for word
with open(__file__) as f:
    text = f.read()
begin = text.index("    # --- the snippet")
begin = text.index("\n", begin) + 1
snippet = textwrap.dedent(text[begin:text.index("    # --- end of the snippet")])
readme = os.path.join(os.environ["LINGBOT_SOURCE_ROOT"], "gst", "README.md")
with open(readme) as f:
    check("gst/README.md has the snippet this test runs", True,
          snippet in f.read())

# the world and its context
check("world devices, precision, ranks", ("cpu:1", "fp32", 1),
      (world.get_devices(), world.get_precision(), world.get_n_ranks()))
check("world model path", os.path.realpath(model),
      os.path.realpath(world.get_model_path()))
check("world matches its model and devices", (True, True, False),
      (world.matches(model, "cpu:1"), world.matches(None, None),
       world.matches(model, "cpu:2")))
check("context type, persistent",
      (GstLingbot.WORLD_CONTEXT_TYPE, "lingbot.world", True),
      (context.get_context_type(), GstLingbot.WORLD_CONTEXT_TYPE,
       context.is_persistent()))
check("the context's world", world.get_model_path(),
      GstLingbot.context_get_world(context).get_model_path())
check("the context's structure", ("cpu:1", "fp32"),
      (context.get_structure().get_string("devices"),
       context.get_structure().get_string("precision")))
check("no world in another context", None,
      GstLingbot.context_get_world(Gst.Context.new("other", True)))

# the latent buffer pulled by the snippet
buf = sample.get_buffer()
caps = sample.get_caps()
s = caps.get_structure(0)
check("latent caps", ("application/x-lingbot-latent", 4, 8, 8, 64, 64),
      (s.get_name(), s.get_int("frames")[1], s.get_int("height")[1],
       s.get_int("width")[1], s.get_int("video-width")[1],
       s.get_int("video-height")[1]))
check("latent caps feature", True,
      caps.get_features(0).contains(GstLingbot.CAPS_FEATURE_MEMORY_LINGBOT_DEVICE))
check("chunk meta: chunk, frames, keys", (0, 13, 0),
      (meta.get_chunk(), meta.get_frames(), meta.get_keys()))
check("chunk meta: DiT within compute seconds", True,
      0 < meta.get_dit_seconds() <= meta.get_compute_seconds())
check("chunk meta: the session's world", ("cpu:1", world.get_model_path()),
      (meta.get_world().get_devices(), meta.get_world().get_model_path()))
check("buffer duration: 13 frames at 16 fps", (0, 13 * Gst.SECOND // 16),
      (buf.pts, buf.duration))
check("a LingbotDevice memory", (1, True),
      (buf.n_memory(),
       GstLingbot.is_lingbot_device_memory(buf.peek_memory(0))))
downloads = GstLingbot.device_memory_get_n_downloads()
ok, info = buf.map(Gst.MapFlags.READ)
check("mapped: f32 [16, 4, 8, 8], one download", (True, 16 * 4 * 8 * 8 * 4, 1),
      (ok, info.size, GstLingbot.device_memory_get_n_downloads() - downloads))
buf.unmap(info)
no_meta = Gst.Buffer.new_allocate(None, 16, None)
check("no meta on another buffer", None,
      GstLingbot.buffer_get_lingbot_chunk_meta(no_meta))
del buf, meta, sample

# the same world decodes in a second pipeline: no world is created
pipeline = Gst.parse_launch(
    f"lingbotgen model-path={model} image-location={image} "
    "prompt='a quiet harbour' frames=13 width=64 height=64 ! "
    "lingbotvaedec name=dec ! video/x-raw,format=RGB ! "
    "appsink name=video sync=false")
pipeline.set_context(context)
seen = []


def on_latents(pad, probe):
    m = GstLingbot.buffer_get_lingbot_chunk_meta(probe.get_buffer())
    seen.append((m.get_chunk(), m.get_frames(), m.get_world().get_devices()))
    return Gst.PadProbeReturn.OK


pipeline.get_by_name("dec").get_static_pad("sink").add_probe(
    Gst.PadProbeType.BUFFER, on_latents)
sink = pipeline.get_by_name("video")
pipeline.set_state(Gst.State.PLAYING)
frames = []
while True:
    sample = sink.emit("try-pull-sample", 120 * Gst.SECOND)
    if sample is None:
        break
    b = sample.get_buffer()
    vs = sample.get_caps().get_structure(0)
    frames.append((b.pts, b.get_size(), vs.get_string("format"),
                   vs.get_int("width")[1], vs.get_int("height")[1]))
msgs = bus_messages(pipeline)
check("decode: EOS after the frames", True, sink.get_property("eos"))
check("decode: the latent buffer's meta", [(0, 13, "cpu:1")], seen)
check("decode: 13 RGB frames of 64x64 at i / 16 s",
      [(i * Gst.SECOND // 16, 64 * 64 * 3, "RGB", 64, 64) for i in range(13)],
      frames)
check("decode: the world was not created again (no have-context)", [],
      [m.src.get_name() for m in msgs
       if m.type == Gst.MessageType.HAVE_CONTEXT])
pipeline.set_state(Gst.State.NULL)

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
