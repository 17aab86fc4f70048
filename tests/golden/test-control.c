/* lingbot-gst: camera control against control.safetensors
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * golden README section 3: the keyboard trace (virtual-clock schedule,
 * per-frame poses, chunk poses, relative poses, control tensors at 80x48
 * and 832x464), the synthetic yaw/pitch trace with the pitch limit, and the
 * offline poses.npy path.  Control tensors must be within 1e-5 absolute.
 */
#include "golden-common.h"
#include "test-npy.h"
#include "lingbot/control.h"
#include "kernels/error.h"

#include <glib/gstdio.h>

#include <json-glib/json-glib.h>

#define CONTROL_TOL 1e-5

static LingbotCheckpoint *fx;
static int img_w, img_h;

/* ---- small helpers ---- */

static char *
trace_json_from_metadata (const char *key)
{
  const char *md = lingbot_checkpoint_get_metadata_value (fx, key);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = NULL;
  JsonNode *r;
  JsonArray *ev;

  g_assert_nonnull (md);
  g_assert_true (json_parser_load_from_data (p, md, -1, NULL));
  r = json_parser_get_root (p);
  if (JSON_NODE_HOLDS_OBJECT (r))
    ev = json_object_get_array_member (json_node_get_object (r), "events");
  else
    ev = json_node_get_array (r);
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "events");
  json_builder_begin_array (b);
  for (guint i = 0; i < json_array_get_length (ev); i++) {
    JsonArray *pair = json_array_get_array_element (ev, i);
    json_builder_begin_object (b);
    json_builder_set_member_name (b, "delay_s");
    json_builder_add_double_value (b, json_array_get_double_element (pair, 0));
    json_builder_set_member_name (b, "message");
    json_builder_add_value (b,
        json_node_copy (json_array_get_element (pair, 1)));
    json_builder_end_object (b);
  }
  json_builder_end_array (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  return json_generator_to_data (gen, NULL);
}

static void
init_stream_config (LingbotControlConfig * cfg, int w, int h)
{
  lingbot_control_config_init (cfg, img_w, img_h, w, h);
}

static void
check_intrinsics (const LingbotControl * c, const char *name)
{
  float k[4];
  const float *want = golden_f32 (fx, name, NULL);
  lingbot_control_get_intrinsics (c, k);
  for (int i = 0; i < 4; i++)
    g_assert_cmpfloat (fabs (k[i] - want[i]), <=, 1e-6 * fabs (want[i]));
  golden_report ("%s: max rel err %.2g\n", name,
      MAX (MAX (fabs (k[0] - want[0]) / want[0],
              fabs (k[1] - want[1]) / want[1]),
          MAX (fabs (k[2] - want[2]) / want[2],
              fabs (k[3] - want[3]) / want[3])));
}

/* ---- keys, frame counts, parsing ---- */

/* The table of docs/elements.md, "Keys" */
static const struct
{
  const char *name;
  guint key;
} key_table[] = {
  {"ArrowUp", LINGBOT_KEY_W}, {"KeyW", LINGBOT_KEY_W}, {"w", LINGBOT_KEY_W},
  {"Up", LINGBOT_KEY_W}, {"KP_Up", LINGBOT_KEY_W}, {"forward", LINGBOT_KEY_W},
  {"ArrowDown", LINGBOT_KEY_S}, {"KeyS", LINGBOT_KEY_S},
  {"s", LINGBOT_KEY_S}, {"Down", LINGBOT_KEY_S}, {"KP_Down", LINGBOT_KEY_S},
  {"backward", LINGBOT_KEY_S},
  {"ArrowLeft", LINGBOT_KEY_A}, {"KeyA", LINGBOT_KEY_A},
  {"a", LINGBOT_KEY_A}, {"Left", LINGBOT_KEY_A}, {"KP_Left", LINGBOT_KEY_A},
  {"ArrowRight", LINGBOT_KEY_D}, {"KeyD", LINGBOT_KEY_D},
  {"d", LINGBOT_KEY_D}, {"Right", LINGBOT_KEY_D}, {"KP_Right", LINGBOT_KEY_D},
  {"KeyI", LINGBOT_KEY_I}, {"i", LINGBOT_KEY_I},
  {"KeyK", LINGBOT_KEY_K}, {"k", LINGBOT_KEY_K},
  {"KeyJ", LINGBOT_KEY_J}, {"j", LINGBOT_KEY_J},
  {"KeyL", LINGBOT_KEY_L}, {"l", LINGBOT_KEY_L},
};

static void
test_keys (void)
{
  g_autofree char *s = NULL;
  static const char *const unknown[] = {
    "KeyZZ", "Shift", "Shift_L", "", "KeyQ", "q", "Escape", "space", "Up ",
    " w", "ww", "ArrowUpp", "Key", "upward", "KP_Home", "Return", "F13",
  };

  /* every name in the table, as written, lower case, upper case and with
   * the case of each letter flipped (X sends "W" with Shift, browsers
   * "KeyW", a user may type "arrowup") */
  for (guint i = 0; i < G_N_ELEMENTS (key_table); i++) {
    const char *n = key_table[i].name;
    g_autofree char *lo = g_ascii_strdown (n, -1);
    g_autofree char *up = g_ascii_strup (n, -1);
    g_autofree char *flip = g_strdup (n);

    for (char *c = flip; *c; c++)
      *c = g_ascii_isupper (*c) ? g_ascii_tolower (*c) : g_ascii_toupper (*c);
    g_assert_cmphex (lingbot_key_from_name (n), ==, key_table[i].key);
    g_assert_cmphex (lingbot_key_from_name (lo), ==, key_table[i].key);
    g_assert_cmphex (lingbot_key_from_name (up), ==, key_table[i].key);
    g_assert_cmphex (lingbot_key_from_name (flip), ==, key_table[i].key);
  }
  /* each key has a name, and the names of the reference's table (spec
   * 2.1) are all there */
  {
    guint all = 0;
    for (guint i = 0; i < G_N_ELEMENTS (key_table); i++)
      all |= key_table[i].key;
    g_assert_cmphex (all, ==, LINGBOT_KEYS_ALL);
  }
  g_assert_cmphex (lingbot_key_from_name ("W"), ==, LINGBOT_KEY_W);
  g_assert_cmphex (lingbot_key_from_name ("Up"), ==, LINGBOT_KEY_W);
  g_assert_cmphex (lingbot_key_from_name ("up"), ==, LINGBOT_KEY_W);
  g_assert_cmphex (lingbot_key_from_name ("Left"), ==, LINGBOT_KEY_A);
  g_assert_cmphex (lingbot_key_from_name ("right"), ==, LINGBOT_KEY_D);
  g_assert_cmphex (lingbot_key_from_name ("Down"), ==, LINGBOT_KEY_S);
  g_assert_cmphex (lingbot_key_from_name ("J"), ==, LINGBOT_KEY_J);
  for (guint i = 0; i < G_N_ELEMENTS (unknown); i++)
    g_assert_cmphex (lingbot_key_from_name (unknown[i]), ==, 0);
  g_assert_cmpuint (lingbot_key_from_name (NULL), ==, 0);
  s = lingbot_keys_to_string (LINGBOT_KEY_W | LINGBOT_KEY_A | LINGBOT_KEY_L);
  g_assert_cmpstr (s, ==, "a,l,w");

  /* service semantics: taps, held set, idle */
  {
    LingbotKeyState ks;
    guint k;
    gboolean tap;
    lingbot_key_state_init (&ks);
    g_assert_false (lingbot_key_state_take (&ks, TRUE, &k, &tap));
    lingbot_key_state_press (&ks, LINGBOT_KEY_W);
    lingbot_key_state_release (&ks, LINGBOT_KEY_W);
    /* a tap is never lost even if released before the chunk */
    g_assert_true (lingbot_key_state_take (&ks, FALSE, &k, &tap));
    g_assert_cmpuint (k, ==, LINGBOT_KEY_W);
    g_assert_true (tap);
    g_assert_false (lingbot_key_state_take (&ks, TRUE, &k, &tap));
    lingbot_key_state_press (&ks, LINGBOT_KEY_I);
    lingbot_key_state_press (&ks, LINGBOT_KEY_I);       /* already held */
    lingbot_key_state_press (&ks, LINGBOT_KEY_L);
    g_assert_cmpuint (ks.revision, ==, 3);
    g_assert_true (lingbot_key_state_take (&ks, TRUE, &k, &tap));
    g_assert_cmpuint (k, ==, LINGBOT_KEY_I | LINGBOT_KEY_L);
    g_assert_true (tap);
    /* busy: held keys wait; idle: the held set */
    g_assert_false (lingbot_key_state_take (&ks, FALSE, &k, &tap));
    g_assert_true (lingbot_key_state_take (&ks, TRUE, &k, &tap));
    g_assert_false (tap);
  }
}

static void
test_frame_counts (void)
{
  guint eff = 0, lat = 0;
  g_autoptr (GError) err = NULL;

  g_assert_true (lingbot_frame_count_resolve (77, 4,
          LINGBOT_FRAME_POLICY_TRUNCATE, &eff, &lat, &err));
  g_assert_cmpuint (eff, ==, 77);
  g_assert_cmpuint (lat, ==, 20);
  g_assert_cmpuint (lat / 4, ==, 5);
  g_assert_true (lingbot_frame_count_resolve (81, 4,
          LINGBOT_FRAME_POLICY_TRUNCATE, &eff, &lat, &err));
  g_assert_cmpuint (eff, ==, 77);
  g_assert_cmpuint (lat, ==, 20);
  g_assert_true (lingbot_frame_count_resolve (61, 4,
          LINGBOT_FRAME_POLICY_STRICT, &eff, &lat, &err));
  g_assert_cmpuint (lat, ==, 16);
  g_assert_false (lingbot_frame_count_resolve (81, 4,
          LINGBOT_FRAME_POLICY_STRICT, &eff, &lat, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  g_assert_false (lingbot_frame_count_resolve (78, 4,
          LINGBOT_FRAME_POLICY_TRUNCATE, &eff, &lat, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  g_assert_false (lingbot_frame_count_resolve (9, 4,
          LINGBOT_FRAME_POLICY_TRUNCATE, &eff, &lat, &err));
  g_clear_error (&err);

  g_assert_cmpuint (lingbot_frame_count_for_duration (60.0, 16, 4), ==, 957);
  g_assert_cmpuint (lingbot_frame_count_for_duration (120.0, 16, 4), ==, 1917);
  g_assert_cmpuint (lingbot_frame_count_for_duration (0.1, 16, 4), ==, 0);
  g_assert_cmpuint (lingbot_chunk_video_frames (0, 4), ==, 13);
  g_assert_cmpuint (lingbot_chunk_video_frames (1, 4), ==, 16);
  /* 13 + 4*16 = 77 */
  {
    guint total = 0;
    for (guint c = 0; c < 5; c++)
      total += lingbot_chunk_video_frames (c, 4);
    g_assert_cmpuint (total, ==, 77);
  }
}

static void
expect_trace_error (const char *json, const char *needle1, const char *needle2)
{
  g_autoptr (GError) err = NULL;
  LingbotControlTrace *t = lingbot_control_trace_new_from_data (json, -1,
      &err);
  g_assert_null (t);
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  if (needle1)
    g_assert_nonnull (strstr (err->message, needle1));
  if (needle2)
    g_assert_nonnull (strstr (err->message, needle2));
}

static void
test_trace_bad_inputs (void)
{
  const char *ok_ev =
      "{\"delay_s\": 0.5, \"message\": {\"type\": \"control\", "
      "\"key\": \"KeyW\", \"action\": \"press\"}}";
  g_autofree char *missing_delay = g_strdup_printf ("{\"events\": [%s, "
      "{\"message\": {\"type\": \"control\", \"key\": \"KeyA\", "
      "\"action\": \"press\"}}]}", ok_ev);
  g_autofree char *bad_delay = g_strdup_printf ("{\"events\": [%s, %s, "
      "{\"delay_s\": \"soon\", \"message\": {}}]}", ok_ev, ok_ev);
  g_autofree char *neg_delay = g_strdup_printf ("{\"events\": ["
      "{\"delay_s\": -1, \"message\": {}}]}");
  g_autofree char *no_msg = g_strdup_printf ("{\"events\": [%s, "
      "{\"delay_s\": 1}]}", ok_ev);
  g_autofree char *bad_action = g_strdup_printf ("{\"events\": [%s, "
      "{\"delay_s\": 1, \"message\": {\"type\": \"control\", "
      "\"key\": \"KeyA\", \"action\": 3}}]}", ok_ev);
  g_autofree char *no_key = g_strdup_printf ("{\"events\": [%s, "
      "{\"delay_s\": 1, \"message\": {\"type\": \"control\", "
      "\"action\": \"press\"}}]}", ok_ev);

  expect_trace_error ("{\"events\": [", "invalid JSON", NULL);
  expect_trace_error ("[1, 2]", "top level", NULL);
  expect_trace_error ("{\"event\": []}", "'events'", NULL);
  expect_trace_error ("{\"events\": [3]}", "event 0", NULL);
  expect_trace_error (missing_delay, "event 1", "delay_s");
  expect_trace_error (bad_delay, "event 2", "delay_s");
  expect_trace_error (neg_delay, "event 0", "delay_s");
  expect_trace_error (no_msg, "event 1", "message");
  expect_trace_error (bad_action, "event 1", "action");
  expect_trace_error (no_key, "event 1", "key");

  /* unknown keys and message types are skipped with a warning */
  {
    g_autoptr (GError) err = NULL;
    const char *json = "{\"events\": ["
        "{\"delay_s\": 0.2, \"message\": {\"type\": \"control\", "
        "\"key\": \"KeyQ\", \"action\": \"press\"}},"
        "{\"delay_s\": 0.1, \"message\": {\"type\": \"control\", "
        "\"key\": \"KeyW\", \"action\": \"press\"}},"
        "{\"delay_s\": 0.3, \"message\": {\"type\": \"ping\"}},"
        "{\"delay_s\": 0.4, \"message\": {\"type\": \"reset_pose\"}}]}";
    g_autoptr (LingbotControlTrace) t =
        lingbot_control_trace_new_from_data (json, -1, &err);
    const char *const *w;
    const LingbotControlEvent *ev;
    guint n;

    g_assert_no_error (err);
    ev = lingbot_control_trace_get_events (t, &n);
    g_assert_cmpuint (n, ==, 2);
    g_assert_cmpuint (ev[0].key, ==, LINGBOT_KEY_W);
    g_assert_cmpint (ev[1].type, ==, LINGBOT_CONTROL_EVENT_RESET);
    w = lingbot_control_trace_get_warnings (t);
    g_assert_nonnull (w[0]);
    g_assert_nonnull (strstr (w[0], "event 0"));
    g_assert_nonnull (strstr (w[0], "KeyQ"));
    g_assert_nonnull (w[1]);
    g_assert_nonnull (strstr (w[1], "ping"));
    g_assert_null (w[2]);
  }
  /* bad geometry */
  {
    LingbotControlConfig cfg;
    g_autoptr (GError) err = NULL;
    init_stream_config (&cfg, 81, 48);
    g_assert_null (lingbot_control_new (&cfg, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  }
}

/* action "reset" = every key up, the pose kept (a release of
 * LINGBOT_KEYS_ALL); type reset_pose = RESET; an unknown action is a
 * warning, not an error */
static void
test_trace_actions (void)
{
  const char *json = "{\"events\": ["
      "{\"delay_s\": 0.0, \"message\": {\"type\": \"control\", "
      "\"key\": \"KeyW\", \"action\": \"press\"}},"
      "{\"delay_s\": 0.0, \"message\": {\"type\": \"control\", "
      "\"key\": \"KeyD\", \"action\": \"keydown\"}},"
      "{\"delay_s\": 0.2, \"message\": {\"type\": \"control\", "
      "\"action\": \"reset\"}},"
      "{\"delay_s\": 0.3, \"message\": {\"type\": \"control\", "
      "\"key\": \"a\"}},"
      "{\"delay_s\": 0.4, \"message\": {\"type\": \"control\", "
      "\"key\": \"KeyZZ\", \"action\": \"RESET\"}},"
      "{\"delay_s\": 0.5, \"message\": {\"type\": \"control\", "
      "\"key\": \"w\", \"action\": \"tap\"}},"
      "{\"delay_s\": 0.6, \"message\": {\"type\": \"reset_pose\"}}]}";
  static const LingbotControlEvent want[] = {
    {0.0, LINGBOT_CONTROL_EVENT_PRESS, LINGBOT_KEY_W},
    {0.0, LINGBOT_CONTROL_EVENT_PRESS, LINGBOT_KEY_D},
    {0.2, LINGBOT_CONTROL_EVENT_RELEASE, LINGBOT_KEYS_ALL},
    {0.3, LINGBOT_CONTROL_EVENT_PRESS, LINGBOT_KEY_A},
    {0.4, LINGBOT_CONTROL_EVENT_RELEASE, LINGBOT_KEYS_ALL},
    {0.6, LINGBOT_CONTROL_EVENT_RESET, 0},
  };
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotControlTrace) t =
      lingbot_control_trace_new_from_data (json, -1, &err);
  const LingbotControlEvent *ev;
  const char *const *w;
  guint n;

  g_assert_no_error (err);
  ev = lingbot_control_trace_get_events (t, &n);
  g_assert_cmpuint (n, ==, G_N_ELEMENTS (want));
  for (guint i = 0; i < n; i++) {
    g_assert_cmpfloat (ev[i].time_s, ==, want[i].time_s);
    g_assert_cmpint (ev[i].type, ==, want[i].type);
    g_assert_cmphex (ev[i].key, ==, want[i].key);
  }
  w = lingbot_control_trace_get_warnings (t);
  g_assert_cmpstr (w[0], ==, "control trace: event 5: unknown action 'tap' "
      "ignored (press, release or reset)");
  g_assert_null (w[1]);
}

/* ---- the schedule (virtual clock) ---- */

static void
check_schedule (const LingbotTraceChunk * ch, guint n, const char *prefix)
{
  g_autofree char *nk = g_strconcat (prefix, ".chunk_keys", NULL);
  g_autofree char *nt = g_strconcat (prefix, ".chunk_is_tap", NULL);
  g_autofree char *nr = g_strconcat (prefix, ".chunk_request_time_s", NULL);
  g_autofree char *ns = g_strconcat (prefix, ".chunk_start_time_s", NULL);
  int64_t cnt;
  g_autofree double *keys = golden_f64 (fx, nk, &cnt);
  g_autofree double *tap = golden_f64 (fx, nt, NULL);
  g_autofree double *req = golden_f64 (fx, nr, NULL);
  g_autofree double *start = golden_f64 (fx, ns, NULL);

  g_assert_cmpint (n, ==, cnt);
  for (guint i = 0; i < n; i++) {
    g_assert_cmpuint (ch[i].keys, ==, (guint) keys[i]);
    g_assert_cmpint (ch[i].is_tap, ==, (gboolean) tap[i]);
    g_assert_cmpfloat (fabs (ch[i].request_time_s - req[i]), <, 1e-9);
    g_assert_cmpfloat (fabs (ch[i].start_time_s - start[i]), <, 1e-9);
  }
}

static void
test_stream_schedule (void)
{
  g_autofree char *path = golden_shared_data_path
      ("stream_lingbot_controls.json");
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotControlTrace) t = NULL;
  LingbotTraceChunk ch[64];
  guint frames, latent, n;

  if (path == NULL) {
    g_test_skip ("../shared/data/stream_lingbot_controls.json not found");
    return;
  }
  t = lingbot_control_trace_new_from_file (path, &err);
  g_assert_no_error (err);
  lingbot_control_trace_get_events (t, &n);
  g_assert_cmpuint (n, ==, 7);
  g_assert_null (lingbot_control_trace_get_warnings (t)[0]);

  frames = lingbot_frame_count_for_duration (60.0, 16, 4);
  g_assert_true (lingbot_frame_count_resolve (frames, 4,
          LINGBOT_FRAME_POLICY_TRUNCATE, NULL, &latent, NULL));
  n = lingbot_control_trace_schedule (t, latent / 4, 4, 16, ch);
  g_assert_cmpuint (n, ==, 60);
  check_schedule (ch, n, "stream");
}

static void
test_synthetic_schedule (void)
{
  g_autofree char *json = trace_json_from_metadata ("synthetic_trace");
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotControlTrace) t =
      lingbot_control_trace_new_from_data (json, -1, &err);
  LingbotTraceChunk ch[16];
  guint latent, n;

  g_assert_no_error (err);
  g_assert_true (lingbot_frame_count_resolve (253, 4,
          LINGBOT_FRAME_POLICY_TRUNCATE, NULL, &latent, NULL));
  n = lingbot_control_trace_schedule (t, latent / 4, 4, 16, ch);
  g_assert_cmpuint (n, ==, 16);
  check_schedule (ch, n, "synthetic");

  /* a trace that ends with nothing held produces what it can */
  {
    const char *j = "{\"events\": [{\"delay_s\": 1.0, \"message\": "
        "{\"type\": \"control\", \"key\": \"KeyW\", \"action\": \"press\"}},"
        "{\"delay_s\": 1.5, \"message\": {\"type\": \"control\", "
        "\"key\": \"KeyW\", \"action\": \"release\"}}]}";
    g_autoptr (LingbotControlTrace) t2 =
        lingbot_control_trace_new_from_data (j, -1, NULL);
    g_assert_cmpuint (lingbot_control_trace_schedule (t2, 5, 4, 16, ch), ==, 1);
  }
}

/* ---- the incremental schedule ---- */

/* The virtual clock as lingbot_control_trace_schedule() computed it before
 * the schedule object (the whole trace, every earlier chunk rescanned per
 * step), and lingbotgen's revision of a chunk (the events at or before its
 * request time replayed, resets not restarting the count): the reference
 * the object must equal bit for bit. */
static guint
reference_schedule (const LingbotControlEvent * events, guint n_ev,
    guint n_chunks, guint chunk_size, guint fps, LingbotScheduleChunk * out)
{
  guint ev = 0, done = 0;
  LingbotKeyState ks;
  double now = 0.0, last_end = 0.0;
  gboolean reset_pending = FALSE;

  lingbot_key_state_init (&ks);
  while (done < n_chunks) {
    gboolean idle, took;
    guint waiting = 0, keys = 0;
    gboolean is_tap = FALSE;
    double next = INFINITY;

    for (; ev < n_ev && events[ev].time_s <= now; ev++) {
      switch (events[ev].type) {
        case LINGBOT_CONTROL_EVENT_PRESS:
          lingbot_key_state_press (&ks, events[ev].key);
          break;
        case LINGBOT_CONTROL_EVENT_RELEASE:
          lingbot_key_state_release (&ks, events[ev].key);
          break;
        case LINGBOT_CONTROL_EVENT_RESET:
          lingbot_key_state_init (&ks);
          reset_pending = TRUE;
          break;
      }
    }
    idle = !(done > 0 && out[done - 1].end_time_s > now);
    for (guint i = 0; i < done; i++)
      if (out[i].start_time_s > now)
        waiting++;
    took = FALSE;
    if (ks.has_tap && (idle || waiting < 2))
      took = lingbot_key_state_take (&ks, idle, &keys, &is_tap);
    else if (!ks.has_tap && idle)
      took = lingbot_key_state_take (&ks, TRUE, &keys, &is_tap);
    if (took) {
      LingbotScheduleChunk *c = &out[done];
      LingbotKeyState r;
      guint base = 0;

      c->keys = keys;
      c->is_tap = is_tap;
      c->reset_before = reset_pending;
      c->request_time_s = now;
      c->start_time_s = MAX (now, last_end);
      c->end_time_s = c->start_time_s +
          (double) lingbot_chunk_video_frames (done, chunk_size) / fps;
      c->index = done;
      /* gstlingbotgen.c offline_revision () */
      lingbot_key_state_init (&r);
      for (guint i = 0; i < n_ev; i++) {
        if (events[i].time_s > now)
          continue;
        if (events[i].type == LINGBOT_CONTROL_EVENT_PRESS)
          lingbot_key_state_press (&r, events[i].key);
        else if (events[i].type == LINGBOT_CONTROL_EVENT_RELEASE)
          lingbot_key_state_release (&r, events[i].key);
        else {
          base += r.revision;
          lingbot_key_state_init (&r);
        }
      }
      c->revision = base + r.revision;
      last_end = c->end_time_s;
      reset_pending = FALSE;
      done++;
      continue;
    }
    if (ev < n_ev)
      next = events[ev].time_s;
    for (guint i = 0; i < done; i++) {
      if (out[i].start_time_s > now && out[i].start_time_s < next)
        next = out[i].start_time_s;
      if (out[i].end_time_s > now && out[i].end_time_s < next)
        next = out[i].end_time_s;
    }
    if (!isfinite (next))
      break;
    now = next;
  }
  return done;
}

static void
assert_chunks_equal (const LingbotScheduleChunk * a,
    const LingbotScheduleChunk * b, guint n)
{
  for (guint i = 0; i < n; i++) {
    g_assert_cmpuint (a[i].index, ==, i);
    g_assert_cmpuint (b[i].index, ==, i);
    g_assert_cmphex (a[i].keys, ==, b[i].keys);
    g_assert_cmpint (a[i].is_tap, ==, b[i].is_tap);
    g_assert_cmpint (a[i].reset_before, ==, b[i].reset_before);
    g_assert_cmpuint (a[i].revision, ==, b[i].revision);
    /* bit for bit, not within a tolerance */
    g_assert_cmpmem (&a[i].request_time_s, sizeof (double),
        &b[i].request_time_s, sizeof (double));
    g_assert_cmpmem (&a[i].start_time_s, sizeof (double),
        &b[i].start_time_s, sizeof (double));
    g_assert_cmpmem (&a[i].end_time_s, sizeof (double), &b[i].end_time_s,
        sizeof (double));
  }
}

/* Feeds @events one at a time, asking for chunks after each push; with
 * @mid_horizons, also after a horizon halfway to the next event.  Every
 * chunk decided before the end must have been requested before the
 * horizon of its moment.  Returns the chunks decided before
 * lingbot_control_schedule_end() in *n_early. */
static guint
feed_incrementally (const LingbotControlEvent * events, guint n_ev,
    guint n_chunks, guint chunk_size, guint fps_n, guint fps_d,
    gboolean mid_horizons, LingbotScheduleChunk * out, guint * n_early)
{
  g_autoptr (LingbotControlSchedule) s =
      lingbot_control_schedule_new (chunk_size, fps_n, fps_d, NULL);
  guint done = 0;
  LingbotScheduleStatus st = LINGBOT_SCHEDULE_WAIT;

  if (n_early)
    *n_early = n_chunks;        /* all of them, unless the end comes first */
  for (guint i = 0; i <= n_ev && done < n_chunks; i++) {
    double horizon = -INFINITY;

    for (int half = 0; half < 2 && done < n_chunks; half++) {
      if (half == 0 && i < n_ev) {
        g_assert_true (lingbot_control_schedule_push (s, &events[i]));
        horizon = events[i].time_s;
      } else if (half == 1 && mid_horizons && i + 1 < n_ev) {
        horizon = 0.5 * (events[i].time_s + events[i + 1].time_s);
        lingbot_control_schedule_set_horizon (s, horizon);
      } else if (half == 0 && i == n_ev) {
        if (n_early)
          *n_early = done;
        lingbot_control_schedule_end (s);
        horizon = INFINITY;
      } else
        continue;
      while (done < n_chunks) {
        st = lingbot_control_schedule_next (s, &out[done]);
        if (st != LINGBOT_SCHEDULE_CHUNK)
          break;
        g_assert_cmpfloat (out[done].request_time_s, <, horizon);
        done++;
      }
      /* the events are known to have ended only after the end */
      if (st == LINGBOT_SCHEDULE_ENDED)
        return done;
      if (i < n_ev && done < n_chunks)
        g_assert_cmpint (st, ==, LINGBOT_SCHEDULE_WAIT);
    }
  }
  return done;
}

/* the whole trace at once, one event at a time with horizons in between,
 * and the reference loop: the same plan bit for bit */
static void
check_schedule_ways (const LingbotControlEvent * events, guint n_ev,
    guint n_chunks, const char *what)
{
  g_autofree LingbotScheduleChunk *ref = g_new0 (LingbotScheduleChunk,
      n_chunks);
  g_autofree LingbotScheduleChunk *whole = g_new0 (LingbotScheduleChunk,
      n_chunks);
  g_autofree LingbotScheduleChunk *inc = g_new0 (LingbotScheduleChunk,
      n_chunks);
  g_autofree LingbotScheduleChunk *mid = g_new0 (LingbotScheduleChunk,
      n_chunks);
  guint n_ref, n_whole = 0, n_inc, n_mid, early = 0;

  n_ref = reference_schedule (events, n_ev, n_chunks, 4, 16, ref);
  {
    g_autoptr (LingbotControlSchedule) s =
        lingbot_control_schedule_new (4, 16, 1, NULL);
    for (guint i = 0; i < n_ev; i++)
      lingbot_control_schedule_push (s, &events[i]);
    lingbot_control_schedule_end (s);
    while (n_whole < n_chunks && lingbot_control_schedule_next (s,
            &whole[n_whole]) == LINGBOT_SCHEDULE_CHUNK)
      n_whole++;
  }
  n_inc = feed_incrementally (events, n_ev, n_chunks, 4, 16, 1, FALSE, inc,
      &early);
  n_mid = feed_incrementally (events, n_ev, n_chunks, 4, 16, 1, TRUE, mid,
      NULL);
  g_assert_cmpuint (n_whole, ==, n_ref);
  g_assert_cmpuint (n_inc, ==, n_ref);
  g_assert_cmpuint (n_mid, ==, n_ref);
  assert_chunks_equal (whole, ref, n_ref);
  assert_chunks_equal (inc, ref, n_ref);
  assert_chunks_equal (mid, ref, n_ref);
  if (what)
    golden_report ("%s: %u events, %u chunks, %u decided before the end of "
        "the events, all equal\n", what, n_ev, n_ref, early);
}

static LingbotControlTrace *
trace_from_shared_or_metadata (const char *shared, const char *md)
{
  g_autofree char *json = NULL;
  g_autofree char *path = shared ? golden_shared_data_path (shared) : NULL;

  if (shared) {
    if (path == NULL)
      return NULL;
    return lingbot_control_trace_new_from_file (path, NULL);
  }
  json = trace_json_from_metadata (md);
  return lingbot_control_trace_new_from_data (json, -1, NULL);
}

static void
test_schedule_incremental_golden (void)
{
  g_autoptr (LingbotControlTrace) stream =
      trace_from_shared_or_metadata ("stream_lingbot_controls.json", NULL);
  g_autoptr (LingbotControlTrace) synth =
      trace_from_shared_or_metadata (NULL, "synthetic_trace");
  const LingbotControlEvent *ev;
  guint n;
  LingbotTraceChunk ch[64];

  ev = lingbot_control_trace_get_events (synth, &n);
  check_schedule_ways (ev, n, 16, "synthetic_trace");
  check_schedule_ways (ev, n, 40, NULL);
  /* and the fixtures' plan through the old entry point */
  g_assert_cmpuint (lingbot_control_trace_schedule (synth, 16, 4, 16, ch),
      ==, 16);
  check_schedule (ch, 16, "synthetic");
  if (stream == NULL) {
    g_test_skip ("../shared/data/stream_lingbot_controls.json not found");
    return;
  }
  ev = lingbot_control_trace_get_events (stream, &n);
  check_schedule_ways (ev, n, 60, "stream_lingbot_controls.json");
  g_assert_cmpuint (lingbot_control_trace_schedule (stream, 60, 4, 16, ch),
      ==, 60);
  check_schedule (ch, 60, "stream");
}

/* random traces (fixed seed): presses, releases, "reset" (all keys up)
 * and reset_pose at times on a 0.05 s grid (many equal times, times equal
 * to chunk boundaries) */
static void
test_schedule_incremental_random (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (20240611);
  guint total_chunks = 0;

  for (int t = 0; t < 300; t++) {
    guint n_ev = (guint) g_rand_int_range (r, 0, 40);
    g_autofree LingbotControlEvent *ev = g_new0 (LingbotControlEvent,
        MAX (n_ev, 1));
    double time = 0.0;

    for (guint i = 0; i < n_ev; i++) {
      int kind = g_rand_int_range (r, 0, 20);
      time += 0.05 * g_rand_int_range (r, 0, 30);
      ev[i].time_s = time;
      if (kind < 10) {
        ev[i].type = LINGBOT_CONTROL_EVENT_PRESS;
        ev[i].key = 1u << g_rand_int_range (r, 0, 8);
      } else if (kind < 18) {
        ev[i].type = LINGBOT_CONTROL_EVENT_RELEASE;
        ev[i].key = 1u << g_rand_int_range (r, 0, 8);
      } else if (kind == 18) {
        ev[i].type = LINGBOT_CONTROL_EVENT_RELEASE;
        ev[i].key = LINGBOT_KEYS_ALL;
      } else {
        ev[i].type = LINGBOT_CONTROL_EVENT_RESET;
      }
    }
    check_schedule_ways (ev, n_ev, 30, NULL);
    {
      LingbotScheduleChunk ref[30];
      total_chunks += reference_schedule (ev, n_ev, 30, 4, 16, ref);
    }
  }
  golden_report ("300 random traces: %u chunks, all equal\n", total_chunks);
  g_assert_cmpuint (total_chunks, >, 1000);
}

/* the state is the key state, the clock and the events ahead of it:
 * bounded however long the session, live or offline */
static void
test_schedule_bounded_state (void)
{
  g_autoptr (LingbotControlSchedule) off =
      lingbot_control_schedule_new (4, 16, 1, NULL);
  g_autoptr (LingbotControlSchedule) live =
      lingbot_control_schedule_new (4, 16, 1, NULL);
  guint n_off = 0, n_live = 0, max_off = 0, max_live = 0;

  /* W held throughout, D tapped every 0.7 s: 3 events per 1.4 s, chunks
   * back to back */
  for (guint i = 0; i < 30000; i++) {
    LingbotControlEvent e = { 0 };
    LingbotScheduleChunk c;

    e.time_s = 0.7 * (i / 2);
    e.type = i % 2 ? LINGBOT_CONTROL_EVENT_RELEASE :
        LINGBOT_CONTROL_EVENT_PRESS;
    e.key = i == 0 ? LINGBOT_KEY_W : LINGBOT_KEY_D;
    if (i % 2 == 1 && i / 2 == 0)
      continue;
    lingbot_control_schedule_push (off, &e);
    lingbot_control_schedule_push (live, &e);
    while (lingbot_control_schedule_next (off, &c) == LINGBOT_SCHEDULE_CHUNK)
      n_off++;
    /* a live consumer takes one chunk per event (it never calls next) */
    if (lingbot_control_schedule_take_live (live, &c))
      n_live++;
    max_off = MAX (max_off, lingbot_control_schedule_get_n_queued (off));
    max_live = MAX (max_live, lingbot_control_schedule_get_n_queued (live));
  }
  golden_report ("30000 events: %u offline chunks (at most %u events "
      "queued), %u live chunks (at most %u queued)\n", n_off, max_off,
      n_live, max_live);
  g_assert_cmpuint (n_off, >, 10000);
  g_assert_cmpuint (n_live, >, 10000);
  g_assert_cmpuint (max_off, <=, 4);
  g_assert_cmpuint (max_live, <=, 4);
}

/* a chunk in flight looking again (key restarts): peek_live says what
 * take_live would take without taking it; retake_live takes it for the
 * chunk taken last (the tap consumed, the chunk not counted again, a
 * pending reset left for the next chunk) */
static void
test_schedule_retake (void)
{
  g_autoptr (LingbotControlSchedule) s =
      lingbot_control_schedule_new (4, 16, 1, NULL);
  LingbotControlEvent e = { 0 };
  LingbotScheduleChunk c, p;

  g_assert_false (lingbot_control_schedule_peek_live (s, &p));
  e.type = LINGBOT_CONTROL_EVENT_PRESS;
  e.key = LINGBOT_KEY_W;
  lingbot_control_schedule_push (s, &e);
  /* nothing taken yet: nothing to retake, the tap stays */
  g_assert_false (lingbot_control_schedule_retake_live (s, &c));
  g_assert_true (lingbot_control_schedule_peek_live (s, &p));
  g_assert_cmphex (p.keys, ==, LINGBOT_KEY_W);
  g_assert_true (p.is_tap);
  g_assert_cmpuint (p.revision, ==, 1);
  g_assert_cmpuint (p.index, ==, 0);
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_W);
  g_assert_true (c.is_tap);
  /* held W, no tap: peek sees the held set, twice the same */
  g_assert_true (lingbot_control_schedule_peek_live (s, &p));
  g_assert_false (p.is_tap);
  g_assert_cmpuint (p.index, ==, 1);
  g_assert_true (lingbot_control_schedule_peek_live (s, &p));
  g_assert_false (p.is_tap);

  /* D pressed while chunk 0 runs: peek, then retake for chunk 0 */
  e.key = LINGBOT_KEY_D;
  lingbot_control_schedule_push (s, &e);
  g_assert_true (lingbot_control_schedule_peek_live (s, &p));
  g_assert_cmphex (p.keys, ==, LINGBOT_KEY_W | LINGBOT_KEY_D);
  g_assert_true (p.is_tap);
  g_assert_cmpuint (p.revision, ==, 2);
  g_assert_true (lingbot_control_schedule_retake_live (s, &c));
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_W | LINGBOT_KEY_D);
  g_assert_true (c.is_tap);
  g_assert_cmpuint (c.revision, ==, 2);
  g_assert_cmpuint (c.index, ==, 0);
  g_assert_true (isnan (c.request_time_s));
  /* the tap was consumed: the next chunk is 1 and takes the held set */
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_false (c.is_tap);
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_W | LINGBOT_KEY_D);
  g_assert_cmpuint (c.index, ==, 1);

  /* a reset: peek reports it, retake leaves it for the next chunk */
  e.type = LINGBOT_CONTROL_EVENT_RESET;
  e.key = 0;
  lingbot_control_schedule_push (s, &e);
  e.type = LINGBOT_CONTROL_EVENT_PRESS;
  e.key = LINGBOT_KEY_S;
  lingbot_control_schedule_push (s, &e);
  g_assert_true (lingbot_control_schedule_peek_live (s, &p));
  g_assert_true (p.reset_before);
  g_assert_true (lingbot_control_schedule_retake_live (s, &c));
  g_assert_false (c.reset_before);
  g_assert_cmpuint (c.index, ==, 1);
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_true (c.reset_before);
  g_assert_cmpuint (c.index, ==, 2);

  /* every key released and no tap: nothing to peek or retake */
  e.type = LINGBOT_CONTROL_EVENT_RELEASE;
  e.key = LINGBOT_KEYS_ALL;
  lingbot_control_schedule_push (s, &e);
  g_assert_false (lingbot_control_schedule_peek_live (s, &p));
  g_assert_false (lingbot_control_schedule_retake_live (s, &c));
}

/* the live path: a tap, else (idle) the held set, of every event pushed */
static void
test_schedule_live (void)
{
  g_autoptr (LingbotControlSchedule) s =
      lingbot_control_schedule_new (4, 16, 1, NULL);
  LingbotControlEvent e = { 0 };
  LingbotScheduleChunk c;

  g_assert_false (lingbot_control_schedule_take_live (s, &c));
  e.type = LINGBOT_CONTROL_EVENT_PRESS;
  e.key = LINGBOT_KEY_W;
  lingbot_control_schedule_push (s, &e);
  e.type = LINGBOT_CONTROL_EVENT_RELEASE;
  lingbot_control_schedule_push (s, &e);
  /* a tap is never lost, even released before the chunk */
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_W);
  g_assert_true (c.is_tap);
  g_assert_cmpuint (c.revision, ==, 1);
  g_assert_false (c.reset_before);
  g_assert_cmpuint (c.index, ==, 0);
  g_assert_true (isnan (c.request_time_s));
  g_assert_false (lingbot_control_schedule_take_live (s, &c));

  e.time_s = 1.0;
  e.type = LINGBOT_CONTROL_EVENT_PRESS;
  e.key = LINGBOT_KEY_I | LINGBOT_KEY_L;        /* one record, two keys */
  lingbot_control_schedule_push (s, &e);
  e.key = LINGBOT_KEY_I;        /* already held */
  lingbot_control_schedule_push (s, &e);
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_I | LINGBOT_KEY_L);
  g_assert_true (c.is_tap);
  g_assert_cmpuint (c.revision, ==, 3);
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_false (c.is_tap);
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_I | LINGBOT_KEY_L);
  g_assert_cmpuint (c.revision, ==, 3);
  g_assert_cmpuint (c.index, ==, 2);

  /* the action "reset": every key up, a pending tap kept, no reset */
  e.key = LINGBOT_KEY_W;
  lingbot_control_schedule_push (s, &e);
  e.type = LINGBOT_CONTROL_EVENT_RELEASE;
  e.key = LINGBOT_KEYS_ALL;
  lingbot_control_schedule_push (s, &e);
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_I | LINGBOT_KEY_L | LINGBOT_KEY_W);
  g_assert_true (c.is_tap);
  g_assert_false (c.reset_before);
  g_assert_cmpuint (c.revision, ==, 4);
  g_assert_false (lingbot_control_schedule_take_live (s, &c));

  /* reset_pose: keys cleared, reported once, the revision goes on */
  e.type = LINGBOT_CONTROL_EVENT_PRESS;
  e.key = LINGBOT_KEY_A;
  lingbot_control_schedule_push (s, &e);
  e.type = LINGBOT_CONTROL_EVENT_RESET;
  e.key = 0;
  lingbot_control_schedule_push (s, &e);
  g_assert_false (lingbot_control_schedule_take_live (s, &c));
  e.type = LINGBOT_CONTROL_EVENT_PRESS;
  e.key = LINGBOT_KEY_S;
  lingbot_control_schedule_push (s, &e);
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_S);
  g_assert_true (c.reset_before);
  g_assert_cmpuint (c.revision, ==, 6);
  g_assert_true (lingbot_control_schedule_take_live (s, &c));
  g_assert_false (c.reset_before);
  g_assert_false (c.is_tap);
  g_assert_cmpuint (c.revision, ==, 6);
}

/* after the end: the no-key chunks, the reset after the last chunk on the
 * first of them; timing fixed once a chunk is out; fractional rates */
static void
test_schedule_end (void)
{
  const LingbotControlEvent ev[] = {
    {0.0, LINGBOT_CONTROL_EVENT_PRESS, LINGBOT_KEY_W},
    {0.5, LINGBOT_CONTROL_EVENT_RELEASE, LINGBOT_KEYS_ALL},
    {2.0, LINGBOT_CONTROL_EVENT_RESET, 0},
  };
  g_autoptr (LingbotControlSchedule) s =
      lingbot_control_schedule_new (4, 16, 1, NULL);
  g_autoptr (GError) err = NULL;
  LingbotScheduleChunk c;

  g_assert_null (lingbot_control_schedule_new (0, 16, 1, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  g_assert_null (lingbot_control_schedule_new (4, 16, 0, &err));
  g_clear_error (&err);

  /* timing may change until a chunk is taken */
  g_assert_true (lingbot_control_schedule_set_timing (s, 2, 8, 1, NULL));
  g_assert_true (lingbot_control_schedule_set_timing (s, 4, 16, 1, NULL));
  for (guint i = 0; i < G_N_ELEMENTS (ev); i++)
    lingbot_control_schedule_push (s, &ev[i]);
  g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
      LINGBOT_SCHEDULE_CHUNK);
  g_assert_cmphex (c.keys, ==, LINGBOT_KEY_W);
  g_assert_true (lingbot_control_schedule_set_timing (s, 4, 16, 1, NULL));
  g_assert_false (lingbot_control_schedule_set_timing (s, 4, 30, 1, &err));
  g_assert_cmpstr (err->message, ==, "control schedule: chunk size 4 at "
      "16/1 fps cannot change to 4 at 30/1 after 1 chunks");
  /* nothing held after 0.5 s, the trace may go on: wait */
  g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
      LINGBOT_SCHEDULE_WAIT);
  g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
      LINGBOT_SCHEDULE_WAIT);
  lingbot_control_schedule_end (s);
  g_assert_true (lingbot_control_schedule_is_ended (s));
  g_assert_false (lingbot_control_schedule_push (s, &ev[0]));
  g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
      LINGBOT_SCHEDULE_ENDED);
  g_assert_cmpuint (c.index, ==, 1);
  g_assert_cmphex (c.keys, ==, 0);
  g_assert_false (c.is_tap);
  g_assert_true (c.reset_before);
  g_assert_cmpuint (c.revision, ==, 1);
  g_assert_cmpfloat (c.request_time_s, ==, 2.0);
  g_assert_cmpfloat (c.end_time_s, ==, 3.0);
  g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
      LINGBOT_SCHEDULE_ENDED);
  g_assert_cmpuint (c.index, ==, 2);
  g_assert_false (c.reset_before);
  g_assert_cmpfloat (c.request_time_s, ==, 3.0);
  g_assert_cmpuint (lingbot_control_schedule_get_n_queued (s), ==, 0);

  /* reset: a new stream */
  lingbot_control_schedule_reset (s);
  g_assert_true (lingbot_control_schedule_set_timing (s, 4, 30000, 1001, NULL));
  lingbot_control_schedule_push (s, &ev[0]);
  lingbot_control_schedule_set_horizon (s, 10.0);
  g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
      LINGBOT_SCHEDULE_CHUNK);
  g_assert_cmpuint (c.index, ==, 0);
  g_assert_cmpuint (c.revision, ==, 1);
  g_assert_cmpfloat (c.end_time_s, ==, 13.0 * 1001.0 / 30000.0);
  g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
      LINGBOT_SCHEDULE_CHUNK);
  g_assert_false (c.is_tap);
  g_assert_cmpfloat (c.request_time_s, ==, 13.0 * 1001.0 / 30000.0);
  g_assert_cmpfloat (c.end_time_s, ==, 13.0 * 1001.0 / 30000.0 +
      16.0 * 1001.0 / 30000.0);
}

/* chunks taken live, then on the virtual clock: chunk k is still the
 * virtual clock's chunk k (the clock decides the skipped ones first) */
static void
test_schedule_live_then_offline (void)
{
  g_autofree char *json = trace_json_from_metadata ("synthetic_trace");
  g_autoptr (LingbotControlTrace) t =
      lingbot_control_trace_new_from_data (json, -1, NULL);
  g_autoptr (LingbotControlSchedule) s =
      lingbot_control_schedule_new (4, 16, 1, NULL);
  const LingbotControlEvent *ev;
  LingbotTraceChunk plan[16];
  LingbotScheduleChunk c;
  guint n;

  g_assert_cmpuint (lingbot_control_trace_schedule (t, 16, 4, 16, plan), ==,
      16);
  ev = lingbot_control_trace_get_events (t, &n);
  for (guint i = 0; i < n; i++)
    lingbot_control_schedule_push (s, &ev[i]);
  for (guint k = 0; k < 5; k++)
    g_assert_true (lingbot_control_schedule_take_live (s, &c));
  lingbot_control_schedule_end (s);
  for (guint k = 5; k < 16; k++) {
    g_assert_cmpint (lingbot_control_schedule_next (s, &c), ==,
        LINGBOT_SCHEDULE_CHUNK);
    g_assert_cmpuint (c.index, ==, k);
    g_assert_cmpint (c.reset_before, ==, plan[k].reset_before);
    g_assert_cmpmem (&c.start_time_s, 8, &plan[k].start_time_s, 8);
    g_assert_cmpmem (&c.end_time_s, 8, &plan[k].end_time_s, 8);
    g_assert_cmphex (c.keys, ==, plan[k].keys);
    g_assert_cmpint (c.is_tap, ==, plan[k].is_tap);
    g_assert_cmpmem (&c.request_time_s, 8, &plan[k].request_time_s, 8);
    g_assert_cmpuint (c.revision, ==, plan[k].revision);
  }
}

/* ---- per-frame poses ---- */

static void
check_frame_poses (const char *prefix)
{
  g_autofree char *nk = g_strconcat (prefix, ".chunk_keys", NULL);
  g_autofree char *nf = g_strconcat (prefix, ".frame_c2w", NULL);
  int64_t n_chunks, n;
  g_autofree double *keys = golden_f64 (fx, nk, &n_chunks);
  g_autofree double *want = golden_f64 (fx, nf, &n);
  LingbotCameraParams p;
  LingbotCamera cam;
  double maxerr = 0.0;
  gint64 frame = 0;

  lingbot_camera_params_init (&p);
  lingbot_camera_reset (&cam);
  for (int64_t c = 0; c < n_chunks; c++) {
    guint steps = c == 0 ? 12 : 16;
    for (guint s = 0; s <= steps; s++) {
      if (s > 0 || c == 0) {
        if (s > 0)
          lingbot_camera_step (&cam, &p, (guint) keys[c]);
        g_assert_cmpint (frame, <, n / 16);
        for (int i = 0; i < 16; i++)
          maxerr = MAX (maxerr, fabs (cam.c2w[i] - want[frame * 16 + i]));
        frame++;
      }
    }
  }
  g_assert_cmpint (frame, ==, n / 16);
  golden_report ("%s.frame_c2w: %" G_GINT64_FORMAT " frames, max abs err "
      "%.3g\n", prefix, frame, maxerr);
  g_assert_cmpfloat (maxerr, <, 1e-9);
}

static void
test_frame_poses (void)
{
  check_frame_poses ("stream");
  check_frame_poses ("synthetic");
}

static void
test_pitch_limit (void)
{
  LingbotCameraParams p;
  LingbotCamera cam;
  double lim;

  lingbot_camera_params_init (&p);
  lingbot_camera_reset (&cam);
  lim = p.pitch_limit_degrees * (G_PI / 180.0);
  for (int s = 1; s <= 200; s++) {
    double before = cam.pitch;
    lingbot_camera_step (&cam, &p, LINGBOT_KEY_I | LINGBOT_KEY_L);
    if (s <= 170)
      g_assert_cmpfloat (cam.pitch, >, before);
    else
      g_assert_cmpfloat (cam.pitch, ==, before);
    g_assert_cmpfloat (cam.pitch, <=, lim);
  }
}

/* ---- chunk poses, relative poses and control tensors (live path) ---- */

typedef struct
{
  const char *prefix;
  const int *control_chunks;
  guint n_control_chunks;
} LiveCase;

static void
run_live (const LiveCase * lc)
{
  g_autofree char *nk = g_strconcat (lc->prefix, ".chunk_keys", NULL);
  g_autofree char *np = g_strconcat (lc->prefix, ".chunk_poses", NULL);
  g_autofree char *nr = g_strconcat (lc->prefix, ".chunk_poses_rel", NULL);
  g_autofree char *nprev = g_strconcat (lc->prefix, ".chunk_previous_pose",
      NULL);
  int64_t n_chunks;
  g_autofree double *keys = golden_f64 (fx, nk, &n_chunks);
  g_autofree double *poses = golden_f64 (fx, np, NULL);
  const float *rel = golden_f32 (fx, nr, NULL);
  g_autofree double *prev = lingbot_checkpoint_has_tensor (fx, nprev) ?
      golden_f64 (fx, nprev, NULL) : NULL;
  LingbotControlConfig cfg;
  g_autoptr (LingbotControl) c = NULL;
  g_autoptr (GError) err = NULL;
  gsize nel;
  g_autofree float *buf = NULL;
  double pose_err = 0.0, rel_err = 0.0, ctl_err = 0.0;

  init_stream_config (&cfg, 80, 48);
  c = lingbot_control_new (&cfg, &err);
  g_assert_no_error (err);
  if (g_str_equal (lc->prefix, "stream"))
    check_intrinsics (c, "stream.intrinsics_used_tiny");
  nel = lingbot_control_get_chunk_n_elements (c, 0, 6);
  g_assert_cmpuint (nel, ==, 384 * 4 * 6 * 10);
  buf = g_new (float, nel);

  for (int64_t k = 0; k < n_chunks; k++) {
    const double *cp, *pp;
    const float *cr;

    g_assert_true (lingbot_control_advance (c, (guint) keys[k], &err));
    g_assert_no_error (err);
    g_assert_cmpint (lingbot_control_get_chunk_index (c), ==, k);
    cp = lingbot_control_get_chunk_poses (c);
    for (int i = 0; i < 64; i++)
      pose_err = MAX (pose_err, fabs (cp[i] - poses[k * 64 + i]));
    pp = lingbot_control_get_previous_pose (c);
    if (k == 0)
      g_assert_null (pp);
    else
      g_assert_nonnull (pp);
    if (prev && k > 0)
      for (int i = 0; i < 16; i++)
        pose_err = MAX (pose_err, fabs (pp[i] - prev[k * 16 + i]));
    cr = lingbot_control_get_chunk_rel_poses (c);
    rel_err = MAX (rel_err, golden_max_abs_diff_f32 (cr, rel + k * 64, 64));

    for (guint j = 0; j < lc->n_control_chunks; j++) {
      if (lc->control_chunks[j] == k) {
        g_autofree char *name = g_strdup_printf ("%s.control_tiny_chunk%d",
            lc->prefix, (int) k);
        const float *want = golden_f32 (fx, name, NULL);
        double e;
        g_assert_true (lingbot_control_fill (c, buf, nel, 0, 6, &err));
        g_assert_no_error (err);
        e = golden_max_abs_diff_f32 (buf, want, (int64_t) nel);
        ctl_err = MAX (ctl_err, e);
        g_assert_cmpfloat (e, <=, CONTROL_TOL);
      }
    }
  }
  golden_report ("%s: chunk_poses max abs err %.3g, chunk_poses_rel %.3g, "
      "control_tiny %.3g\n", lc->prefix, pose_err, rel_err, ctl_err);
  g_assert_cmpfloat (pose_err, <, 1e-9);
  g_assert_cmpfloat (rel_err, <=, CONTROL_TOL);
}

static void
test_stream_chunks (void)
{
  static const int chunks[] = { 0, 1, 2, 3, 4, 5, 59 };
  LiveCase lc = { "stream", chunks, G_N_ELEMENTS (chunks) };
  run_live (&lc);
}

static void
test_synthetic_chunks (void)
{
  static const int chunks[] = { 0, 1, 12, 13 };
  LiveCase lc = { "synthetic", chunks, G_N_ELEMENTS (chunks) };
  run_live (&lc);
}

/* sum and sum of squares over all cells, per (channel, frame) */
static void
check_sums (const float *ctl, int hl, int wl, const char *sum_name,
    const char *sumsq_name, const char *what)
{
  g_autofree double *ws = golden_f64 (fx, sum_name, NULL);
  g_autofree double *wq = sumsq_name ? golden_f64 (fx, sumsq_name,
      NULL) : NULL;
  double es = 0.0, eq = 0.0;
  gsize plane = (gsize) hl * wl;

  for (int i = 0; i < 384 * 4; i++) {
    double s = 0.0, q = 0.0;
    for (gsize j = 0; j < plane; j++) {
      double v = ctl[i * plane + j];
      s += v;
      q += v * v;
    }
    es = MAX (es, fabs (s - ws[i]));
    if (wq)
      eq = MAX (eq, fabs (q - wq[i]) / MAX (1.0, fabs (wq[i])));
  }
  golden_report ("%s: per-(channel,frame) sum max abs err %.3g over %"
      G_GSIZE_FORMAT " cells (mean cell err %.3g)%s", what, es, plane,
      es / plane, wq ? "" : "\n");
  if (wq)
    g_printerr (", sumsq max rel err %.3g\n", eq);
  /* a sum of n cells each within 1e-5 */
  g_assert_cmpfloat (es, <=, CONTROL_TOL * plane);
  g_assert_cmpfloat (eq, <=, 1e-5);
}

static void
check_row (const float *ctl, int hl, int wl, int row, const char *name,
    const char *what)
{
  const float *want = golden_f32 (fx, name, NULL);
  double e = 0.0;

  for (int i = 0; i < 384 * 4; i++)
    e = MAX (e, golden_max_abs_diff_f32 (ctl + (gsize) i * hl * wl +
            (gsize) row * wl, want + (gsize) i * wl, wl));
  golden_report ("%s: max abs err %.3g\n", what, e);
  g_assert_cmpfloat (e, <=, CONTROL_TOL);
}

static void
test_stream_480p (void)
{
  g_autofree double *keys = golden_f64 (fx, "stream.chunk_keys", NULL);
  LingbotControlConfig cfg;
  g_autoptr (LingbotControl) c = NULL;
  g_autoptr (GError) err = NULL;
  g_autofree float *buf = NULL;
  gsize nel;

  init_stream_config (&cfg, 832, 464);
  c = lingbot_control_new (&cfg, &err);
  g_assert_no_error (err);
  check_intrinsics (c, "stream.intrinsics_used_480p");
  g_assert_cmpint (lingbot_control_get_latent_height (c), ==, 58);
  g_assert_cmpint (lingbot_control_get_latent_width (c), ==, 104);
  nel = lingbot_control_get_chunk_n_elements (c, 0, 58);
  buf = g_new (float, nel);
  g_assert_true (lingbot_control_advance (c, (guint) keys[0], &err));
  g_assert_true (lingbot_control_fill (c, buf, nel, 0, 58, &err));
  g_assert_no_error (err);
  check_row (buf, 58, 104, 0, "stream.control_480p_chunk0_row0",
      "stream.control_480p_chunk0_row0");
  check_sums (buf, 58, 104, "stream.control_480p_chunk0_sum", NULL,
      "stream.control_480p_chunk0_sum");

  /* a short buffer is refused */
  g_assert_false (lingbot_control_fill (c, buf, nel - 1, 0, 58, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
}

static void
test_row_bands (void)
{
  LingbotControlConfig cfg;
  g_autoptr (LingbotControl) c = NULL;
  const int hl = 58, wl = 104;
  gsize nel;
  g_autofree float *full = NULL;
  g_autofree float *band = NULL;

  init_stream_config (&cfg, 832, 464);
  c = lingbot_control_new (&cfg, NULL);
  nel = lingbot_control_get_chunk_n_elements (c, 0, hl);
  full = g_new (float, nel);
  band = g_new (float, nel);
  g_assert_true (lingbot_control_advance (c, LINGBOT_KEY_W | LINGBOT_KEY_L,
          NULL));
  g_assert_true (lingbot_control_advance (c, LINGBOT_KEY_W | LINGBOT_KEY_I,
          NULL));
  g_assert_true (lingbot_control_fill (c, full, nel, 0, hl, NULL));
  /* 4 ranks, uneven bands */
  for (int r = 0; r < 4; r++) {
    int r0 = hl * r / 4, r1 = hl * (r + 1) / 4, rows = r1 - r0;
    g_assert_true (lingbot_control_fill (c, band,
            lingbot_control_get_chunk_n_elements (c, r0, r1), r0, r1, NULL));
    for (int i = 0; i < 384 * 4; i++)
      g_assert_cmpmem (band + (gsize) i * rows * wl, (gsize) rows * wl * 4,
          full + (gsize) i * hl * wl + (gsize) r0 * wl, (gsize) rows * wl * 4);
  }
}

/* ---- offline path ---- */

static LingbotControl *
offline_from_fixture (int w, int h, guint frame_num)
{
  const LbTensor *poses = golden_get (fx, "input.offline_poses");
  const float *intr = golden_f32 (fx, "input.offline_intrinsics", NULL);
  LingbotControlConfig cfg;
  g_autoptr (GError) err = NULL;
  LingbotControl *c;

  lingbot_control_config_init (&cfg, img_w, img_h, w, h);
  cfg.has_intrinsics = TRUE;
  memcpy (cfg.intrinsics, intr, 4 * sizeof (float));
  c = lingbot_control_new_offline (&cfg, poses->data,
      (guint) poses->shape[0], frame_num, &err);
  g_assert_no_error (err);
  g_assert_nonnull (c);
  return c;
}

static void
check_offline_poses (LingbotControl * c, const char *prefix, guint latent)
{
  g_autofree char *ni = g_strconcat (prefix, ".interp_c2w", NULL);
  g_autofree char *nr = g_strconcat (prefix, ".poses_rel", NULL);
  g_autofree char *nk = g_strconcat (prefix, ".intrinsics_used", NULL);
  guint n;
  const float *ip = lingbot_control_get_offline_poses (c, &n);
  const float *rp = lingbot_control_get_offline_rel_poses (c, NULL);
  double ei, er;

  g_assert_cmpuint (n, ==, latent);
  g_assert_cmpuint (lingbot_control_get_n_chunks (c), ==, latent / 4);
  ei = golden_max_abs_diff_f32 (ip, golden_f32 (fx, ni, NULL), 16 * n);
  er = golden_max_abs_diff_f32 (rp, golden_f32 (fx, nr, NULL), 16 * n);
  golden_report ("%s: interp_c2w max abs err %.3g, poses_rel %.3g\n",
      prefix, ei, er);
  g_assert_cmpfloat (ei, <=, 1e-5);
  g_assert_cmpfloat (er, <=, CONTROL_TOL);
  check_intrinsics (c, nk);
}

static void
test_offline_tiny (void)
{
  g_autoptr (LingbotControl) c = offline_from_fixture (80, 48, 61);
  g_autoptr (GError) err = NULL;
  gsize nel = lingbot_control_get_chunk_n_elements (c, 0, 6);
  g_autofree float *buf = g_new (float, nel);
  g_autofree float *pl = g_new (float, 4 * 48 * 80 * 6);
  double e, emax = 0.0;

  check_offline_poses (c, "offline_tiny", 16);

  {
    float k[4];
    lingbot_control_get_intrinsics (c, k);
    lingbot_control_plucker (lingbot_control_get_offline_rel_poses (c, NULL),
        4, k, 80, 48, pl);
    e = golden_max_abs_diff_f32 (pl, golden_f32 (fx,
            "offline_tiny.plucker_chunk0", NULL), 4 * 48 * 80 * 6);
    golden_report ("offline_tiny.plucker_chunk0: max abs err %.3g\n", e);
    g_assert_cmpfloat (e, <=, CONTROL_TOL);
  }

  for (int k = 0; k < 4; k++) {
    g_autofree char *name = g_strdup_printf ("offline_tiny.control_chunk%d",
        k);
    g_assert_true (lingbot_control_advance (c, 0, &err));
    g_assert_true (lingbot_control_fill (c, buf, nel, 0, 6, &err));
    g_assert_no_error (err);
    e = golden_max_abs_diff_f32 (buf, golden_f32 (fx, name, NULL), nel);
    emax = MAX (emax, e);
    g_assert_cmpfloat (e, <=, CONTROL_TOL);
  }
  golden_report ("offline_tiny.control_chunk0..3: max abs err %.3g\n", emax);
  g_assert_false (lingbot_control_advance (c, 0, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
}

static void
test_offline_480p (void)
{
  g_autoptr (LingbotControl) c = offline_from_fixture (832, 464, 77);
  g_autoptr (GError) err = NULL;
  gsize nel = lingbot_control_get_chunk_n_elements (c, 0, 58);
  g_autofree float *buf = g_new (float, nel);
  g_autofree double *shape = golden_f64 (fx, "offline_480p.control_shape",
      NULL);

  check_offline_poses (c, "offline_480p", 20);
  g_assert_cmpint ((int) shape[1], ==, 384);
  g_assert_cmpint ((int) shape[3], ==, lingbot_control_get_latent_height (c));
  g_assert_cmpint ((int) shape[4], ==, lingbot_control_get_latent_width (c));
  g_assert_true (lingbot_control_advance (c, 0, &err));
  g_assert_true (lingbot_control_fill (c, buf, nel, 0, 58, &err));
  g_assert_no_error (err);
  check_row (buf, 58, 104, 0, "offline_480p.control_chunk0_row0",
      "offline_480p.control_chunk0_row0");
  check_row (buf, 58, 104, 57, "offline_480p.control_chunk0_rowlast",
      "offline_480p.control_chunk0_rowlast");
  check_sums (buf, 58, 104, "offline_480p.control_chunk0_sum",
      "offline_480p.control_chunk0_sumsq", "offline_480p.control_chunk0");
}

static void
test_offline_files (void)
{
  g_autofree char *pp = golden_shared_data_path ("poses.npy");
  g_autofree char *ip = golden_shared_data_path ("intrinsics.npy");
  g_autoptr (LingbotControl) ref = NULL;
  g_autoptr (LingbotControl) c = NULL;
  g_autoptr (GError) err = NULL;
  LingbotControlConfig cfg;
  gsize nel;
  g_autofree float *a = NULL;
  g_autofree float *b = NULL;

  if (pp == NULL || ip == NULL) {
    g_test_skip ("../shared/data/poses.npy or intrinsics.npy not found");
    return;
  }
  lingbot_control_config_init (&cfg, img_w, img_h, 80, 48);
  c = lingbot_control_new_offline_from_files (&cfg, pp, ip, 61, &err);
  g_assert_no_error (err);
  check_offline_poses (c, "offline_tiny", 16);
  ref = offline_from_fixture (80, 48, 61);
  nel = lingbot_control_get_chunk_n_elements (c, 0, 6);
  a = g_new (float, nel);
  b = g_new (float, nel);
  for (int k = 0; k < 4; k++) {
    g_autofree char *name = g_strdup_printf ("offline_tiny.control_chunk%d",
        k);
    g_assert_true (lingbot_control_advance (c, 0, NULL));
    g_assert_true (lingbot_control_advance (ref, 0, NULL));
    g_assert_true (lingbot_control_fill (c, a, nel, 0, 6, NULL));
    g_assert_true (lingbot_control_fill (ref, b, nel, 0, 6, NULL));
    g_assert_cmpmem (a, nel * 4, b, nel * 4);
  }

  /* too many frames for the file */
  g_clear_pointer (&c, lingbot_control_free);
  c = lingbot_control_new_offline_from_files (&cfg, pp, ip, 289, &err);
  g_assert_null (c);
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  c = lingbot_control_new_offline_from_files (&cfg, "/nonexistent.npy", ip,
      61, &err);
  g_assert_null (c);
  g_assert_nonnull (err);
}

/* ---- one loader for poses.npy / intrinsics.npy ---- */

static char *poses_dir;

static char *
npy (const char *name, const char *descr, int ndim, const int64_t * shape,
    const void *data, gsize nbytes)
{
  char *path = g_build_filename (poses_dir, name, NULL);
  lingbot_test_write_npy (path, descr, ndim, shape, data, nbytes);
  return path;
}

/* identity rotations, translation (i, 2i, 3i) */
static void
fill_poses (float *p, guint n)
{
  memset (p, 0, 16 * sizeof (float) * n);
  for (guint i = 0; i < n; i++) {
    float *m = p + 16 * i;
    m[0] = m[5] = m[10] = m[15] = 1.0f;
    m[3] = (float) i;
    m[7] = 2.0f * i;
    m[11] = 3.0f * i;
  }
}

static void
expect_load_error (const char *pp, const char *ip, GQuark domain, int code,
    const char *message)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotPoses) p = lingbot_poses_load (pp, ip, &err);

  g_assert_null (p);
  g_assert_error (err, domain, code);
  g_assert_cmpstr (err->message, ==, message);
}

static void
test_poses_load (void)
{
  g_autoptr (GError) err = NULL;
  float poses[16 * 3], k3[12], k1[4] = { 415.5f, 415.7f, 415.8f, 239.8f };
  double poses64[16 * 3];
  int64_t pose_ints[16 * 2] = { 0 };
  const int64_t s344[] = { 3, 4, 4 }, s244[] = { 2, 4, 4 },
      s044[] = { 0, 4, 4 }, s144[] = { 1, 4, 4 }, s34[] = { 3, 4 },
      s4[] = { 4 }, s14[] = { 1, 4 }, s04[] = { 0, 4 }, s33[] = { 3, 3 },
      s24[] = { 2, 4 }, s44[] = { 4, 4 }, s3[] = { 3 };
  g_autofree char *p3 = NULL, *p3d = NULL, *p2 = NULL, *p0 = NULL,
      *p1 = NULL, *pbad = NULL, *pint = NULL, *pnan = NULL, *k3p = NULL,
      *k4 = NULL, *k14 = NULL, *k04 = NULL, *k33 = NULL, *k24 = NULL,
      *kvec3 = NULL, *missing = NULL, *msg = NULL;

  for (guint i = 0; i < 12; i++)
    k3[i] = k1[i % 4] + (float) (i / 4);
  fill_poses (poses, 3);
  for (guint i = 0; i < 48; i++)
    poses64[i] = poses[i];
  p3 = npy ("p3.npy", "<f4", 3, s344, poses, sizeof poses);
  p3d = npy ("p3d.npy", "<f8", 3, s344, poses64, sizeof poses64);
  p2 = npy ("p2.npy", "<f4", 3, s244, poses, 32 * sizeof (float));
  p0 = npy ("p0.npy", "<f4", 3, s044, NULL, 0);
  p1 = npy ("p1.npy", "<f4", 3, s144, poses, 16 * sizeof (float));
  pbad = npy ("pbad.npy", "<f4", 2, s44, poses, 16 * sizeof (float));
  pint = npy ("pint.npy", "<i8", 3, s244, pose_ints, sizeof pose_ints);
  poses[22] = NAN;
  pnan = npy ("pnan.npy", "<f4", 3, s244, poses, 32 * sizeof (float));
  poses[22] = 0.0f;
  k3p = npy ("k3.npy", "<f4", 2, s34, k3, sizeof k3);
  k4 = npy ("k4.npy", "<f4", 1, s4, k1, sizeof k1);
  k14 = npy ("k14.npy", "<f4", 2, s14, k1, sizeof k1);
  k04 = npy ("k04.npy", "<f4", 2, s04, NULL, 0);
  k33 = npy ("k33.npy", "<f4", 2, s33, k3, 9 * sizeof (float));
  k24 = npy ("k24.npy", "<f4", 2, s24, k3, 8 * sizeof (float));
  kvec3 = npy ("kvec3.npy", "<f4", 1, s3, k1, 3 * sizeof (float));
  missing = g_build_filename (poses_dir, "missing.npy", NULL);

  /* good shapes: (n,4,4) with (n,4), (4,), (1,4) or no intrinsics; f64
   * converted */
  {
    g_autoptr (LingbotPoses) p = lingbot_poses_load (p3, k3p, &err);
    g_assert_no_error (err);
    g_assert_cmpuint (p->n_poses, ==, 3);
    g_assert_cmpuint (p->n_intrinsics, ==, 3);
    g_assert_cmpmem (p->poses, 48 * 4, poses, sizeof poses);
    g_assert_cmpmem (p->intrinsics, 12 * 4, k3, sizeof k3);
  }
  {
    g_autoptr (LingbotPoses) p = lingbot_poses_load (p3d, k4, &err);
    g_assert_no_error (err);
    g_assert_cmpuint (p->n_poses, ==, 3);
    g_assert_cmpmem (p->poses, 48 * 4, poses, sizeof poses);
    g_assert_cmpuint (p->n_intrinsics, ==, 1);
    g_assert_cmpmem (p->intrinsics, 16, k1, sizeof k1);
  }
  {
    g_autoptr (LingbotPoses) p = lingbot_poses_load (p2, k14, &err);
    g_assert_no_error (err);
    g_assert_cmpuint (p->n_poses, ==, 2);
    g_assert_cmpuint (p->n_intrinsics, ==, 1);
    g_assert_cmpmem (p->intrinsics, 16, k1, sizeof k1);
  }
  {
    g_autoptr (LingbotPoses) p = lingbot_poses_load (p1, NULL, &err);
    g_assert_no_error (err);
    g_assert_cmpuint (p->n_poses, ==, 1);
    g_assert_cmpuint (p->n_intrinsics, ==, 0);
    g_assert_null (p->intrinsics);
  }

  /* any other row count: its first row for every frame, as the reference
   * reads intrinsics.npy (3 rows with 2 poses, 2 rows with 1 pose) */
  {
    g_autoptr (LingbotPoses) p = lingbot_poses_load (p2, k3p, &err);
    g_assert_no_error (err);
    g_assert_cmpuint (p->n_poses, ==, 2);
    g_assert_cmpuint (p->n_intrinsics, ==, 1);
    g_assert_cmpmem (p->intrinsics, 16, k3, 4 * sizeof (float));
  }
  {
    g_autoptr (LingbotPoses) p = lingbot_poses_load (p1, k24, &err);
    g_assert_no_error (err);
    g_assert_cmpuint (p->n_poses, ==, 1);
    g_assert_cmpuint (p->n_intrinsics, ==, 1);
    g_assert_cmpmem (p->intrinsics, 16, k3, 4 * sizeof (float));
  }

  /* refused, with the file, the shape found and the one expected */
  msg = g_strdup_printf ("%s: intrinsics must have shape [4] or [N, 4] with "
      "N >= 1 (the first row is used unless N is the number of poses), got "
      "[0, 4]", k04);
  expect_load_error (p3, k04, LB_ERROR, LB_ERROR_SHAPE, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: intrinsics must have shape [4] or [N, 4] with "
      "N >= 1 (the first row is used unless N is the number of poses), got "
      "[3, 3]", k33);
  expect_load_error (p3, k33, LB_ERROR, LB_ERROR_SHAPE, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: intrinsics must have shape [4] or [N, 4] with "
      "N >= 1 (the first row is used unless N is the number of poses), got "
      "[3]", kvec3);
  expect_load_error (p3, kvec3, LB_ERROR, LB_ERROR_SHAPE, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: poses must have shape [n, 4, 4] with 1 <= n "
      "<= 16777216, got [0, 4, 4]", p0);
  expect_load_error (p0, k4, LB_ERROR, LB_ERROR_SHAPE, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: poses must have shape [n, 4, 4] with 1 <= n "
      "<= 16777216, got [4, 4]", pbad);
  expect_load_error (pbad, k4, LB_ERROR, LB_ERROR_SHAPE, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: poses must have shape [n, 4, 4] with 1 <= n "
      "<= 16777216, got [3, 4]", k3p);
  expect_load_error (k3p, NULL, LB_ERROR, LB_ERROR_SHAPE, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: poses must be floating point (f32, f64 or "
      "f16), got i64 [2, 4, 4]", pint);
  expect_load_error (pint, NULL, LB_ERROR, LB_ERROR_FORMAT, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: poses: element 22 is nan, not a finite "
      "number", pnan);
  expect_load_error (pnan, NULL, LB_ERROR, LB_ERROR_FORMAT, msg);
  g_free (msg);
  msg = g_strdup_printf ("%s: cannot open: No such file or directory", missing);
  expect_load_error (missing, k4, LB_ERROR, LB_ERROR_NOT_FOUND, msg);
  expect_load_error (p3, missing, LB_ERROR, LB_ERROR_NOT_FOUND, msg);
  g_free (msg);
  msg = NULL;

  /* the library's offline path goes through the same loader */
  {
    LingbotControlConfig cfg;
    g_autoptr (LingbotControl) c = NULL;
    g_autofree char *m2 = g_strdup_printf ("%s: intrinsics must have shape "
        "[4] or [N, 4] with N >= 1 (the first row is used unless N is the "
        "number of poses), got [0, 4]", k04);

    lingbot_control_config_init (&cfg, img_w, img_h, 80, 48);
    c = lingbot_control_new_offline_from_files (&cfg, p3, k04, 1, &err);
    g_assert_null (c);
    g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
    g_assert_cmpstr (err->message, ==, m2);
  }
}

/* (4,) intrinsics give the same session as the (n, 4) file's first row */
static void
test_offline_files_vector_intrinsics (void)
{
  const LbTensor *poses = golden_get (fx, "input.offline_poses");
  const float *intr = golden_f32 (fx, "input.offline_intrinsics", NULL);
  g_autofree char *pp = npy ("fx-poses.npy", "<f4", 3, poses->shape,
      poses->data, lb_tensor_nbytes (poses));
  const int64_t s4[] = { 4 };
  g_autofree char *ip = npy ("fx-k4.npy", "<f4", 1, s4, intr,
      4 * sizeof (float));
  g_autoptr (LingbotControl) ref = offline_from_fixture (80, 48, 61);
  g_autoptr (LingbotControl) c = NULL;
  g_autoptr (GError) err = NULL;
  LingbotControlConfig cfg;
  gsize nel;
  g_autofree float *a = NULL;
  g_autofree float *b = NULL;

  lingbot_control_config_init (&cfg, img_w, img_h, 80, 48);
  c = lingbot_control_new_offline_from_files (&cfg, pp, ip, 61, &err);
  g_assert_no_error (err);
  check_offline_poses (c, "offline_tiny", 16);
  nel = lingbot_control_get_chunk_n_elements (c, 0, 6);
  a = g_new (float, nel);
  b = g_new (float, nel);
  for (int k = 0; k < 4; k++) {
    g_assert_true (lingbot_control_advance (c, 0, NULL));
    g_assert_true (lingbot_control_advance (ref, 0, NULL));
    g_assert_true (lingbot_control_fill (c, a, nel, 0, 6, NULL));
    g_assert_true (lingbot_control_fill (ref, b, nel, 0, 6, NULL));
    g_assert_cmpmem (a, nel * 4, b, nel * 4);
  }

  /* no intrinsics file: the config's intrinsics, if it has any */
  g_clear_pointer (&c, lingbot_control_free);
  c = lingbot_control_new_offline_from_files (&cfg, pp, NULL, 61, &err);
  g_assert_null (c);
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "control: the offline path needs "
      "intrinsics");
  g_clear_error (&err);
  cfg.has_intrinsics = TRUE;
  memcpy (cfg.intrinsics, intr, 4 * sizeof (float));
  c = lingbot_control_new_offline_from_files (&cfg, pp, NULL, 61, &err);
  g_assert_no_error (err);
  check_offline_poses (c, "offline_tiny", 16);
}

static void
test_reset_pose (void)
{
  LingbotControlConfig cfg;
  g_autoptr (LingbotControl) a = NULL;
  g_autoptr (LingbotControl) b = NULL;

  init_stream_config (&cfg, 80, 48);
  a = lingbot_control_new (&cfg, NULL);
  b = lingbot_control_new (&cfg, NULL);
  g_assert_true (lingbot_control_advance (a, LINGBOT_KEY_W | LINGBOT_KEY_J,
          NULL));
  g_assert_true (lingbot_control_advance (a, LINGBOT_KEY_D, NULL));
  lingbot_control_reset_pose (a);
  g_assert_true (lingbot_control_advance (a, LINGBOT_KEY_S, NULL));
  g_assert_null (lingbot_control_get_previous_pose (a));
  g_assert_true (lingbot_control_advance (b, LINGBOT_KEY_S, NULL));
  g_assert_cmpmem (lingbot_control_get_chunk_poses (a), 64 * 8,
      lingbot_control_get_chunk_poses (b), 64 * 8);
  g_assert_cmpmem (lingbot_control_get_chunk_rel_poses (a), 64 * 4,
      lingbot_control_get_chunk_rel_poses (b), 64 * 4);
}

/* 50k events in reverse time order, pairs at equal times: sorted by time,
 * equal times in file order (the sort is O(n log n); its insertion sort
 * took 13 s here) */
static void
test_trace_sort_large (void)
{
  const guint n = 50000;
  GString *j = g_string_new ("{\"events\": [");
  for (guint i = 0; i < n; i++) {
    /* times n/2-1 .. 0 in steps of 0.01 s, two events each: W then D */
    const guint slot = (n - 1 - i) / 2;
    g_string_append_printf (j, "%s{\"delay_s\": %u.%02u, \"message\": "
        "{\"type\": \"control\", \"key\": \"%s\", \"action\": "
        "\"press\"}}", i ? "," : "", slot / 100, slot % 100,
        i % 2 ? "KeyD" : "KeyW");
  }
  g_string_append (j, "]}");
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotControlTrace) t =
      lingbot_control_trace_new_from_data (j->str, -1, &err);
  g_string_free (j, TRUE);
  g_assert_no_error (err);
  guint got = 0;
  const LingbotControlEvent *ev = lingbot_control_trace_get_events (t, &got);
  g_assert_cmpuint (got, ==, n);
  for (guint i = 0; i < n; i++) {
    g_assert_cmpfloat_with_epsilon (ev[i].time_s, (i / 2) * 0.01, 1e-9);
    g_assert_cmphex (ev[i].key, ==, i % 2 ? LINGBOT_KEY_D : LINGBOT_KEY_W);
  }
}

int
main (int argc, char **argv)
{
  int rc;
  g_autofree double *wh = NULL;

  g_test_init (&argc, &argv, NULL);
  fx = golden_open ("control.safetensors");
  wh = golden_f64 (fx, "input.image_size_wh", NULL);
  img_w = (int) wh[0];
  img_h = (int) wh[1];

  g_test_add_func ("/golden/control/keys", test_keys);
  g_test_add_func ("/golden/control/frame-counts", test_frame_counts);
  g_test_add_func ("/golden/control/trace-bad-inputs", test_trace_bad_inputs);
  g_test_add_func ("/golden/control/trace-sort-large", test_trace_sort_large);
  g_test_add_func ("/golden/control/trace-actions", test_trace_actions);
  g_test_add_func ("/golden/control/stream-schedule", test_stream_schedule);
  g_test_add_func ("/golden/control/synthetic-schedule",
      test_synthetic_schedule);
  g_test_add_func ("/golden/control/schedule-incremental-golden",
      test_schedule_incremental_golden);
  g_test_add_func ("/golden/control/schedule-incremental-random",
      test_schedule_incremental_random);
  g_test_add_func ("/golden/control/schedule-bounded-state",
      test_schedule_bounded_state);
  g_test_add_func ("/golden/control/schedule-live", test_schedule_live);
  g_test_add_func ("/golden/control/schedule-end", test_schedule_end);
  g_test_add_func ("/golden/control/schedule-live-then-offline",
      test_schedule_live_then_offline);
  g_test_add_func ("/golden/control/frame-poses", test_frame_poses);
  g_test_add_func ("/golden/control/pitch-limit", test_pitch_limit);
  g_test_add_func ("/golden/control/stream-chunks", test_stream_chunks);
  g_test_add_func ("/golden/control/synthetic-chunks", test_synthetic_chunks);
  g_test_add_func ("/golden/control/stream-480p", test_stream_480p);
  g_test_add_func ("/golden/control/row-bands", test_row_bands);
  g_test_add_func ("/golden/control/offline-tiny", test_offline_tiny);
  g_test_add_func ("/golden/control/offline-480p", test_offline_480p);
  g_test_add_func ("/golden/control/offline-files", test_offline_files);
  g_test_add_func ("/golden/control/reset-pose", test_reset_pose);
  g_test_add_func ("/golden/control/schedule-retake", test_schedule_retake);
  g_test_add_func ("/golden/control/poses-load", test_poses_load);
  g_test_add_func ("/golden/control/offline-files-vector-intrinsics",
      test_offline_files_vector_intrinsics);
  poses_dir = g_dir_make_tmp ("lingbot-control-XXXXXX", NULL);
  g_assert_nonnull (poses_dir);
  rc = g_test_run ();
  {
    /* the fixtures written by the loader tests */
    GDir *d = g_dir_open (poses_dir, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name (d))) {
      g_autofree char *p = g_build_filename (poses_dir, name, NULL);
      g_unlink (p);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (poses_dir);
    g_free (poses_dir);
  }
  lingbot_checkpoint_unref (fx);
  return rc;
}
