/* lingbot-gst: a live key change restarts the chunk in flight (issue 3.4;
 * suite gst)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbotgen's control pad is fed by a pad of the test, so that a key
 * press lands at a known DiT pass: the handler of the `pass` signal (rank
 * 0's thread, inside the chunk) pushes the record, whose chain applies it
 * before the handler returns; the restart check follows the signal.  The
 * pipelines end in a clock-synchronised sink (fakesink sync=true after a
 * queue), whose handoffs (after the clock wait) give the frames shown:
 * their GstLingbotFrameMeta (chunk, keys) and a digest of their bytes.
 */
#include "test-fixture.h"
#include <string.h>
#include <gst/check/gstcheck.h>
#include "gst/gstlingbotcontrolsrc.h"
#include "gst/lingbot/gstlingbotmeta.h"
#include "lingbot/lingbot.h"

static char *tmpdir;
static char *model_dir;
static char *embeds_path;
static char *image_path;

#define N_CHUNKS 5
#define N_FRAMES 77             /* 13 + 4 x 16 */

typedef struct
{
  guint keys, revision, restarts, restart_passes;
  gboolean tap;
} ChunkMsg;

typedef struct
{
  GstPad *ctl;                  /* the test's pad, linked to `control` */
  /* the press of D: pushed in the `pass` handler of this chunk and pass
   * (-1: never) */
  gint press_chunk, press_pass;
  gboolean live;
  /* what came out */
  ChunkMsg msg[N_CHUNKS];
  guint n_msgs;
  guint first_keys[N_CHUNKS];   /* the first shown frame of each chunk */
  gboolean seen[N_CHUNKS];
  guint rendered;
  GChecksum *bytes;             /* of every frame shown, in order */
  GstStructure *stats;          /* lingbotgen's stats at EOS */
} Run;

static GstBuffer *
record (GstLingbotControlRecordType type, guint keys, guint held,
    GstClockTime pts)
{
  GstLingbotControlRecord r = { 0 };
  GstBuffer *buf;

  r.magic = GST_LINGBOT_CONTROL_MAGIC;
  r.type = type;
  r.keys = keys;
  r.held = held;
  r.time_ns = pts;
  buf = gst_buffer_new_memdup (&r, sizeof (r));
  GST_BUFFER_PTS (buf) = pts;
  return buf;
}

static void
on_pass (GstElement * gen, guint64 chunk, gint pass, gint n_passes,
    gpointer data)
{
  Run *r = data;

  if ((gint64) chunk == r->press_chunk && pass == r->press_pass)
    g_assert_cmpint (gst_pad_push (r->ctl, record (GST_LINGBOT_CONTROL_PRESS,
                LINGBOT_KEY_D, LINGBOT_KEY_W | LINGBOT_KEY_D,
                GST_CLOCK_TIME_NONE)), ==, GST_FLOW_OK);
}

static void
on_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  Run *r = data;
  GstLingbotFrameMeta *m = gst_buffer_get_lingbot_frame_meta (buf);
  GstMapInfo map;

  g_assert_nonnull (m);
  g_assert_false (m->preview);
  g_assert_cmpuint (m->chunk, <, N_CHUNKS);
  if (!r->seen[m->chunk]) {
    r->seen[m->chunk] = TRUE;
    r->first_keys[m->chunk] = m->keys;
  }
  g_assert_true (gst_buffer_map (buf, &map, GST_MAP_READ));
  g_checksum_update (r->bytes, map.data, (gssize) map.size);
  gst_buffer_unmap (buf, &map);
  r->rendered++;
}

/* A session of N_CHUNKS chunks at 64 fps, 64x64: W pressed before it
 * starts, D as the run says; live (W held, D at a pass) or offline (the
 * whole trace before the start: W at 0, D at 0.5 s, then EOS). */
static void
run_session (Run * r, const char *extra)
{
  g_autofree char *desc = g_strdup_printf ("lingbotgen name=gen "
      "model-path=%s prompt-embeds=%s image-location=%s width=64 height=64 "
      "devices=cpu:1 seed=7 fps=64 frames=%d is-live=%s signal-passes=true "
      "%s ! lingbotvaedec ! queue max-size-buffers=0 max-size-time=0 "
      "max-size-bytes=0 ! fakesink name=sink sync=true qos=true "
      "max-lateness=-1 signal-handoffs=true", model_dir, embeds_path,
      image_path, N_FRAMES, r->live ? "true" : "false", extra);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *gen, *sink;
  GstPad *control;
  GstSegment seg;
  GstBus *bus;
  gboolean eos = FALSE;

  g_assert_no_error (err);
  r->bytes = g_checksum_new (G_CHECKSUM_SHA256);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  g_signal_connect (gen, "pass", G_CALLBACK (on_pass), r);
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), r);
  r->ctl = gst_pad_new ("ctl", GST_PAD_SRC);
  control = gst_element_get_static_pad (gen, "control");
  g_assert_cmpint (gst_pad_link (r->ctl, control), ==, GST_PAD_LINK_OK);
  gst_object_unref (control);

  /* PAUSED: the pads are active, the session waits for the control
   * stream's caps */
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PAUSED), !=,
      GST_STATE_CHANGE_FAILURE);
  g_assert_true (gst_pad_set_active (r->ctl, TRUE));
  g_assert_true (gst_pad_push_event (r->ctl,
          gst_event_new_stream_start ("ctl")));
  g_assert_true (gst_pad_push_event (r->ctl,
          gst_event_new_caps (gst_caps_from_string
              (GST_LINGBOT_CONTROL_CAPS))));
  gst_segment_init (&seg, GST_FORMAT_TIME);
  g_assert_true (gst_pad_push_event (r->ctl, gst_event_new_segment (&seg)));
  g_assert_cmpint (gst_pad_push (r->ctl, record (GST_LINGBOT_CONTROL_PRESS,
              LINGBOT_KEY_W, LINGBOT_KEY_W, 0)), ==, GST_FLOW_OK);
  if (!r->live) {
    g_assert_cmpint (gst_pad_push (r->ctl,
            record (GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_D,
                LINGBOT_KEY_W | LINGBOT_KEY_D, GST_SECOND / 2)), ==,
        GST_FLOW_OK);
    g_assert_true (gst_pad_push_event (r->ctl, gst_event_new_eos ()));
  }

  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  while (!eos) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
        GST_MESSAGE_ELEMENT | GST_MESSAGE_LATENCY | GST_MESSAGE_EOS |
        GST_MESSAGE_ERROR);
    const GstStructure *s;

    g_assert_nonnull (msg);
    g_assert_cmpint (GST_MESSAGE_TYPE (msg), !=, GST_MESSAGE_ERROR);
    s = gst_message_get_structure (msg);
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS) {
      eos = TRUE;
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_LATENCY) {
      /* what gst-launch-1.0 does */
      gst_bin_recalculate_latency (GST_BIN (p));
    } else if (s && gst_structure_has_name (s, "lingbot-chunk")) {
      ChunkMsg *c;
      guint64 index = 0;

      g_assert_true (gst_structure_get_uint64 (s, "index", &index));
      g_assert_cmpuint (index, ==, r->n_msgs);
      g_assert_cmpuint (index, <, N_CHUNKS);
      c = &r->msg[r->n_msgs++];
      g_assert_true (gst_structure_get_uint (s, "keys", &c->keys));
      g_assert_true (gst_structure_get_uint (s, "revision", &c->revision));
      g_assert_true (gst_structure_get_boolean (s, "tap", &c->tap));
      g_assert_true (gst_structure_get_uint (s, "restarts", &c->restarts));
      g_assert_true (gst_structure_get_uint (s, "restart-passes",
              &c->restart_passes));
    }
    gst_message_unref (msg);
  }
  g_object_get (gen, "stats", &r->stats, NULL);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_pad_set_active (r->ctl, FALSE);
  gst_object_unref (r->ctl);
  gst_object_unref (sink);
  gst_object_unref (gen);
  gst_object_unref (bus);
  gst_object_unref (p);
}

static void
run_clear (Run * r)
{
  g_checksum_free (r->bytes);
  gst_structure_free (r->stats);
}

static guint64
stats_restarts (const GstStructure * st)
{
  guint64 v = G_MAXUINT64;

  g_assert_true (gst_structure_get_uint64 (st, "restarts", &v));
  return v;
}

#define WD (LINGBOT_KEY_W | LINGBOT_KEY_D)

/* Live, D pressed after DiT pass 1 of chunk 2 (W held from the start):
 * with the default key-restart the chunk restarts (2 passes thrown away)
 * and chunk 2, the next chunk delivered, is made and shown with W+D: its
 * first frame on the synchronised sink carries W+D.  With key-restart=0
 * (the behaviour before) chunk 2 keeps W and the key shows a chunk later.
 * The restarted session's frames are byte-identical to a session whose D
 * was pressed before chunk 2 started (after the last pass of chunk 1). */
GST_START_TEST (test_key_restart_live)
{
  Run on = { 0 }, off = { 0 }, early = { 0 };

  on.live = off.live = early.live = TRUE;
  on.press_chunk = off.press_chunk = 2;
  on.press_pass = off.press_pass = 1;
  /* key-cut off: a session faster than real time would otherwise cut
   * chunk 1 short where the key comes between chunks (test_key_cut_live),
   * and the frames shown would depend on the timing */
  run_session (&on, "key-cut=false");
  run_session (&off, "key-restart=0 key-cut=false");
  /* pressed after chunk 1's clean pass (the last pass callback) */
  early.press_chunk = 1;
  early.press_pass = 4;
  run_session (&early, "key-restart=0 key-cut=false");

  g_assert_cmpuint (on.n_msgs, ==, N_CHUNKS);
  g_assert_cmpuint (off.n_msgs, ==, N_CHUNKS);
  g_assert_cmpuint (early.n_msgs, ==, N_CHUNKS);
  for (guint k = 0; k < N_CHUNKS; k++) {
    /* restart: D from chunk 2 on, taken as the tap (revision 2) */
    g_assert_cmpuint (on.msg[k].keys, ==, k < 2 ? LINGBOT_KEY_W : WD);
    g_assert_cmpuint (on.msg[k].revision, ==, k < 2 ? 1 : 2);
    g_assert_cmpuint (on.msg[k].restarts, ==, k == 2 ? 1 : 0);
    g_assert_cmpuint (on.msg[k].restart_passes, ==, k == 2 ? 2 : 0);
    g_assert_true (on.seen[k]);
    g_assert_cmpuint (on.first_keys[k], ==, k < 2 ? LINGBOT_KEY_W : WD);
    /* no restart: chunk 2 keeps W, D from chunk 3 on */
    g_assert_cmpuint (off.msg[k].keys, ==, k < 3 ? LINGBOT_KEY_W : WD);
    g_assert_cmpuint (off.msg[k].restarts, ==, 0);
    g_assert_cmpuint (off.first_keys[k], ==, k < 3 ? LINGBOT_KEY_W : WD);
    /* the key pressed before chunk 2 */
    g_assert_cmpuint (early.msg[k].keys, ==, on.msg[k].keys);
    g_assert_cmpuint (early.msg[k].revision, ==, on.msg[k].revision);
    g_assert_cmpuint (early.msg[k].tap, ==, on.msg[k].tap);
  }
  g_assert_true (on.msg[2].tap);
  g_assert_cmpuint (stats_restarts (on.stats), ==, 1);
  g_assert_cmpuint (stats_restarts (off.stats), ==, 0);
  g_assert_cmpuint (on.rendered, ==, N_FRAMES);
  g_assert_cmpuint (early.rendered, ==, N_FRAMES);
  g_assert_cmpstr (g_checksum_get_string (on.bytes), ==,
      g_checksum_get_string (early.bytes));
  g_assert_cmpstr (g_checksum_get_string (on.bytes), !=,
      g_checksum_get_string (off.bytes));
  run_clear (&on);
  run_clear (&off);
  run_clear (&early);
}

GST_END_TEST;

/* Offline (is-live=false) nothing restarts whatever key-restart says:
 * the keys follow the control stream's times (W at 0, D at 0.5 s, all
 * known before the session starts, so a live-style restart would take
 * the final W+D at once), and the frames are the same with key-restart
 * 0, the default and 64 with key-restart-max 8. */
GST_START_TEST (test_key_restart_offline)
{
  Run a = { 0 }, b = { 0 }, c = { 0 };

  a.press_chunk = b.press_chunk = c.press_chunk = -1;
  run_session (&a, "key-restart=0");
  run_session (&b, "");
  run_session (&c, "key-restart=64 key-restart-max=8");
  g_assert_cmpuint (a.n_msgs, ==, N_CHUNKS);
  for (guint k = 0; k < N_CHUNKS; k++) {
    g_assert_cmpuint (b.msg[k].restarts, ==, 0);
    g_assert_cmpuint (c.msg[k].restarts, ==, 0);
    g_assert_cmpuint (b.msg[k].keys, ==, a.msg[k].keys);
    g_assert_cmpuint (c.msg[k].keys, ==, a.msg[k].keys);
  }
  /* the trace's keys: W first, W+D once the virtual clock passes 0.5 s */
  g_assert_cmpuint (a.msg[0].keys, ==, LINGBOT_KEY_W);
  g_assert_cmpuint (a.msg[N_CHUNKS - 1].keys, ==, WD);
  g_assert_cmpuint (a.rendered, ==, N_FRAMES);
  g_assert_cmpstr (g_checksum_get_string (a.bytes), ==,
      g_checksum_get_string (b.bytes));
  g_assert_cmpstr (g_checksum_get_string (a.bytes), ==,
      g_checksum_get_string (c.bytes));
  g_assert_cmpuint (stats_restarts (c.stats), ==, 0);
  run_clear (&a);
  run_clear (&b);
  run_clear (&c);
}

GST_END_TEST;

/* ---- key-cut: a key change while the generator waits ---- */

#define CUT_FPS 8
#define CUT_FRAMES 45           /* 13 + 2 x 16: three chunks */
#define CUT_CHUNKS 3

typedef struct
{
  guint64 chunk;
  guint keys;
  GstClockTime pts;
} Shown;

typedef struct
{
  GstPad *ctl;
  GArray *shown;                /* Shown, in render order */
  GstClockTime pts[CUT_CHUNKS];
  guint keys[CUT_CHUNKS];
  gboolean cut[CUT_CHUNKS];
  guint64 latency[CUT_CHUNKS];  /* lingbotgen's, stamping the chunk */
  guint n_msgs;
  guint64 frames_cut;           /* lingbotvaedec's stats */
} CutRun;

static void
on_cut_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  CutRun *r = data;
  GstLingbotFrameMeta *m = gst_buffer_get_lingbot_frame_meta (buf);
  Shown f;

  g_assert_nonnull (m);
  f.chunk = m->chunk;
  f.keys = m->keys;
  f.pts = GST_BUFFER_PTS (buf);
  g_array_append_val (r->shown, f);
}

/* A live session of CUT_CHUNKS chunks of 2 s (16 frames at 8 fps; the
 * tiny model makes one far faster), W held from the start; D pressed by
 * this thread as soon as chunk 1's lingbot-chunk message comes, while the
 * generator waits for chunk 2's due time. */
static void
run_cut (CutRun * r, const char *gen_extra, const char *dec_extra)
{
  g_autofree char *desc = g_strdup_printf ("lingbotgen name=gen "
      "model-path=%s prompt-embeds=%s image-location=%s width=64 height=64 "
      "devices=cpu:1 seed=7 fps=%d frames=%d is-live=true %s ! "
      "lingbotvaedec name=dec %s ! queue max-size-buffers=0 "
      "max-size-time=0 max-size-bytes=0 ! fakesink name=sink sync=true "
      "qos=true max-lateness=-1 signal-handoffs=true", model_dir,
      embeds_path, image_path, CUT_FPS, CUT_FRAMES, gen_extra, dec_extra);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *gen, *sink, *dec;
  GstStructure *st = NULL;
  GstPad *control;
  GstSegment seg;
  GstBus *bus;
  gboolean eos = FALSE;

  g_assert_no_error (err);
  r->shown = g_array_new (FALSE, FALSE, sizeof (Shown));
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  dec = gst_bin_get_by_name (GST_BIN (p), "dec");
  g_signal_connect (sink, "handoff", G_CALLBACK (on_cut_handoff), r);
  r->ctl = gst_pad_new ("ctl", GST_PAD_SRC);
  control = gst_element_get_static_pad (gen, "control");
  g_assert_cmpint (gst_pad_link (r->ctl, control), ==, GST_PAD_LINK_OK);
  gst_object_unref (control);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PAUSED), !=,
      GST_STATE_CHANGE_FAILURE);
  g_assert_true (gst_pad_set_active (r->ctl, TRUE));
  g_assert_true (gst_pad_push_event (r->ctl,
          gst_event_new_stream_start ("ctl")));
  g_assert_true (gst_pad_push_event (r->ctl,
          gst_event_new_caps (gst_caps_from_string
              (GST_LINGBOT_CONTROL_CAPS))));
  gst_segment_init (&seg, GST_FORMAT_TIME);
  g_assert_true (gst_pad_push_event (r->ctl, gst_event_new_segment (&seg)));
  g_assert_cmpint (gst_pad_push (r->ctl, record (GST_LINGBOT_CONTROL_PRESS,
              LINGBOT_KEY_W, LINGBOT_KEY_W, 0)), ==, GST_FLOW_OK);

  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  while (!eos) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
        GST_MESSAGE_ELEMENT | GST_MESSAGE_LATENCY | GST_MESSAGE_EOS |
        GST_MESSAGE_ERROR);
    const GstStructure *s;

    g_assert_nonnull (msg);
    g_assert_cmpint (GST_MESSAGE_TYPE (msg), !=, GST_MESSAGE_ERROR);
    s = gst_message_get_structure (msg);
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS) {
      eos = TRUE;
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_LATENCY) {
      gst_bin_recalculate_latency (GST_BIN (p));
    } else if (s && gst_structure_has_name (s, "lingbot-chunk")) {
      guint64 index = 0, pts = 0;
      guint i = r->n_msgs++;

      g_assert_true (gst_structure_get_uint64 (s, "index", &index));
      g_assert_cmpuint (index, ==, i);
      g_assert_cmpuint (index, <, CUT_CHUNKS);
      g_assert_true (gst_structure_get_uint64 (s, "pts", &pts));
      r->pts[i] = pts;
      g_assert_true (gst_structure_get_uint (s, "keys", &r->keys[i]));
      g_assert_true (gst_structure_get_boolean (s, "cut", &r->cut[i]));
      g_assert_true (gst_structure_get_uint64 (s, "latency", &r->latency[i]));
      if (index == 1)
        g_assert_cmpint (gst_pad_push (r->ctl,
                record (GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_D,
                    LINGBOT_KEY_W | LINGBOT_KEY_D, GST_CLOCK_TIME_NONE)), ==,
            GST_FLOW_OK);
    }
    gst_message_unref (msg);
  }
  g_object_get (dec, "stats", &st, NULL);
  g_assert_true (gst_structure_get_uint64 (st, "frames-cut", &r->frames_cut));
  gst_structure_free (st);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_pad_set_active (r->ctl, FALSE);
  gst_object_unref (r->ctl);
  gst_object_unref (dec);
  gst_object_unref (sink);
  gst_object_unref (gen);
  gst_object_unref (bus);
  gst_object_unref (p);
}

/* the frames shown of @chunk, and the PTS of the first */
static guint
shown_of (const CutRun * r, guint64 chunk, GstClockTime * first)
{
  guint n = 0;

  for (guint i = 0; i < r->shown->len; i++) {
    const Shown *f = &g_array_index (r->shown, Shown, i);

    if (f->chunk == chunk && n++ == 0 && first)
      *first = f->pts;
  }
  return n;
}

/* Live, D pressed while the generator waits for chunk 2's due time: with
 * the default key-cut chunk 2 starts at once, W+D, stamped before the end
 * of chunk 1 (after at least one of its frames); lingbotvaedec (hold, the
 * default) drops chunk 1's frames from there on, which it still holds, so
 * the synchronised sink shows chunk 1's head, then chunk 2 from its
 * first frame (at most two of its frames dropped: chunk 1's frames leave
 * the decoder one frame before they are due, and one may be on its way),
 * timestamps increasing throughout; every frame
 * not shown is counted in frames-cut.  key-cut=false: chunk 2 follows
 * chunk 1's 16 frames, every frame is shown and nothing is cut. */
GST_START_TEST (test_key_cut_live)
{
  CutRun on = { 0 }, off = { 0 };
  const GstClockTime frame = GST_SECOND / CUT_FPS;
  GstClockTime first2 = GST_CLOCK_TIME_NONE, raise;
  guint shown1, lost;

  run_cut (&on, "", "");
  run_cut (&off, "key-cut=false", "");

  g_assert_cmpuint (on.n_msgs, ==, CUT_CHUNKS);
  g_assert_cmpuint (off.n_msgs, ==, CUT_CHUNKS);
  for (guint k = 0; k < CUT_CHUNKS; k++) {
    g_assert_cmpuint (on.keys[k], ==, k < 2 ? LINGBOT_KEY_W : WD);
    g_assert_cmpuint (off.keys[k], ==, k < 2 ? LINGBOT_KEY_W : WD);
    g_assert_cmpint (on.cut[k], ==, k == 2);
    g_assert_false (off.cut[k]);
  }
  /* on: chunk 2 before the end of chunk 1 (16 frames), after its first */
  g_assert_cmpuint (on.pts[2], <, on.pts[1] + 16 * frame);
  g_assert_cmpuint (on.pts[2], >=, on.pts[1] + frame);
  for (guint i = 1; i < on.shown->len; i++)
    g_assert_cmpuint (g_array_index (on.shown, Shown, i).pts, >,
        g_array_index (on.shown, Shown, i - 1).pts);
  shown1 = shown_of (&on, 1, NULL);
  g_assert_cmpuint (shown1, >=, 1);
  g_assert_cmpuint (shown1, <, 16);
  /* at most two of chunk 2's frames gone: chunk 1's frame at chunk 2's
   * PTS + 1 frame is due to leave the decoder (one frame before its due
   * time) at the very moment chunk 2 is ready (stamped its ready time less
   * the latency), so whether it went first is a race; and as many more as
   * lingbotgen raised its latency for chunk 2 (its PTS goes back by the
   * raise, while chunk 1's frames leave on the latency known before) */
  raise = on.latency[2] > on.latency[1] ? on.latency[2] - on.latency[1] : 0;
  lost = 2 + (guint) ((raise + frame - 1) / frame);
  g_assert_cmpuint (shown_of (&on, 2, &first2), >=, 16 - lost);
  /* the decoder lets a frame go one frame before it is due: at most the
   * frames of that time and the one being pushed are gone */
  g_assert_cmpuint (first2, >=, on.pts[2]);
  g_assert_cmpuint (first2, <=, on.pts[2] + lost * frame);
  g_assert_cmpuint (g_array_index (on.shown, Shown,
          on.shown->len - 1).keys, ==, WD);
  g_assert_cmpuint (on.shown->len + on.frames_cut, ==, CUT_FRAMES);
  g_assert_cmpuint (on.frames_cut, >=, 16 - shown1);
  /* off: on the schedule, all shown */
  g_assert_cmpuint (off.pts[2], ==, off.pts[1] + 16 * frame);
  g_assert_cmpuint (off.shown->len, ==, CUT_FRAMES);
  g_assert_cmpuint (off.frames_cut, ==, 0);
  g_array_unref (on.shown);
  g_array_unref (off.shown);
}

GST_END_TEST;

static Suite *
key_restart_suite (void)
{
  Suite *s = suite_create ("lingbot-gst-key-restart");
  TCase *tc = tcase_create ("key-restart");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_key_restart_live);
  tcase_add_test (tc, test_key_restart_offline);
  tcase_add_test (tc, test_key_cut_live);
  return s;
}

int
main (int argc, char **argv)
{
  int failed;

  gst_check_init (&argc, &argv);
  tmpdir = lingbot_test_write_fixture ("lingbot-gst-key-restart-XXXXXX",
      &model_dir, &embeds_path, &image_path);
  failed = gst_check_run_suite (key_restart_suite (),
      "lingbot-gst-key-restart", __FILE__);
  lingbot_test_rm_rf (tmpdir);
  return failed;
}
