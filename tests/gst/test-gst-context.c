/* lingbot-gst: the shared world (GstContext "lingbot.world"): between elements,
 * from the application, the search after a refused world
 * (test `gst-context`, suites gst, elements, pipeline)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The fixture and the pipeline runner: test-gst-common.c.
 */
#include "test-gst-common.h"

GST_START_TEST (test_context_shared)
{
  g_autofree char *g1 = gen_desc ("lingbotgen name=g1", "cpu:1", NULL);
  g_autofree char *g2 = gen_desc ("lingbotgen name=g2", "cpu:1", NULL);
  g_autofree char *desc = g_strdup_printf ("%s ! fakesink %s ! fakesink",
      g1, g2);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *e1, *e2;
  GstContext *c1, *c2;
  LingbotWorld *w1, *w2;

  g_assert_no_error (err);
  e1 = gst_bin_get_by_name (GST_BIN (p), "g1");
  e2 = gst_bin_get_by_name (GST_BIN (p), "g2");
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);

  c1 = gst_element_get_context (e1, GST_LINGBOT_WORLD_CONTEXT_TYPE);
  c2 = gst_element_get_context (e2, GST_LINGBOT_WORLD_CONTEXT_TYPE);
  g_assert_nonnull (c1);
  g_assert_true (c1 == c2);
  w1 = element_world (e1);
  w2 = element_world (e2);
  g_assert_true (w1 == w2);
  g_assert_cmpstr (lingbot_world_get_devices (w1), ==, "cpu:1");

  lingbot_world_unref (w1);
  lingbot_world_unref (w2);
  gst_context_unref (c1);
  gst_context_unref (c2);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (e1);
  gst_object_unref (e2);
  gst_object_unref (p);
}

GST_END_TEST;

static GstBusSyncReply
answer_need_context (GstBus * bus, GstMessage * msg, gpointer user_data)
{
  const char *type;
  GstContext *ctx = user_data;

  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_NEED_CONTEXT
      && gst_message_parse_context_type (msg, &type)
      && g_strcmp0 (type, GST_LINGBOT_WORLD_CONTEXT_TYPE) == 0)
    gst_element_set_context (GST_ELEMENT (GST_MESSAGE_SRC (msg)), ctx);
  return GST_BUS_PASS;
}

GST_START_TEST (test_context_application)
{
  LingbotWorldOptions opts = LINGBOT_WORLD_OPTIONS_INIT;
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWorld) world = NULL;
  g_autofree char *g1 = NULL, *desc = NULL;
  GstContext *ctx;
  GstElement *p, *gen;
  GstBus *bus;
  LingbotWorld *used;
  Run r;

  opts.model_path = model_dir;
  opts.load_text_encoder = FALSE;
  world = lingbot_world_new (&opts, &err);
  g_assert_no_error (err);
  ctx = gst_lingbot_context_new (world);

  /* the world field serialises to its description (model, devices,
   * precision), not NULL; it cannot be parsed back */
  {
    const GValue *v = gst_structure_get_value (gst_context_get_structure
        (ctx), "world");
    g_autofree char *want = g_strdup_printf ("model=%s devices=%s "
        "precision=%s", lingbot_world_get_model_path (world),
        lingbot_world_get_devices (world),
        lingbot_world_get_precision (world));
    g_autofree char *text = gst_lingbot_world_to_string (world);
    g_autofree char *quoted = g_strdup_printf ("\"%s\"", want);
    g_autofree char *ser = NULL, *str = NULL, *field = NULL;
    g_autofree char *contents = NULL;
    GValue back = G_VALUE_INIT;

    g_assert_nonnull (strstr (want, model_dir));
    g_assert_nonnull (strstr (want, " devices=cpu:1 "));
    g_assert_cmpstr (text, ==, want);
    g_assert_null (gst_lingbot_world_to_string (NULL));
    g_assert_nonnull (v);
    ser = gst_value_serialize (v);
    g_assert_cmpstr (ser, ==, quoted);
    str = gst_structure_to_string (gst_context_get_structure (ctx));
    field = g_strdup_printf ("world=(LingbotWorld)%s", quoted);
    if (strstr (str, field) == NULL)
      g_error ("context %s has no %s", str, field);
    contents = g_strdup_value_contents (v);
    g_assert_nonnull (strstr (contents, want));
    g_value_init (&back, GST_TYPE_LINGBOT_WORLD);
    g_assert_false (gst_value_deserialize (&back, quoted));
    g_assert_null (g_value_get_boxed (&back));
    g_value_unset (&back);
  }

  /* answered from a bus sync handler, and the run uses it */
  g1 = gen_desc ("lingbotgen name=gen", "cpu:1", NULL);
  desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! %s ! "
      "lingbotvaedec ! appsink name=sink sync=false", trace_path, g1);
  p = pipeline_new (desc, &r);
  bus = gst_element_get_bus (p);
  gst_bus_set_sync_handler (bus, answer_need_context, ctx, NULL);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  used = element_world (gen);
  g_assert_true (used == world);
  lingbot_world_unref (used);
  pipeline_run (p, &r);
  check_run (&r);
  run_clear (&r);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);
  gst_object_unref (gen);
  gst_object_unref (p);

  /* set on the pipeline up front */
  p = gst_parse_launch ("lingbotgen name=gen ! fakesink", &err);
  g_assert_no_error (err);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  g_object_set (gen, "model-path", model_dir, "prompt-embeds", embeds_path,
      NULL);
  gst_element_set_context (p, ctx);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  used = element_world (gen);
  g_assert_true (used == world);
  lingbot_world_unref (used);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (gen);
  gst_object_unref (p);
  gst_context_unref (ctx);
}

GST_END_TEST;

/* A neighbour that holds a world: a probe on its pad answering the
 * "lingbot.world" CONTEXT query with @world (none: not answered), and
 * noting when it was asked (@clock counts the answers of both). */
typedef struct
{
  LingbotWorld *world;
  guint *clock;
  guint asked;                  /* 0: never, else the @clock value */
} Neighbour;

static GstPadProbeReturn
neighbour_answer (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Neighbour *n = user_data;
  GstQuery *query = GST_PAD_PROBE_INFO_QUERY (info);
  const char *type;
  GstContext *ctx;

  if (GST_QUERY_TYPE (query) != GST_QUERY_CONTEXT
      || !gst_query_parse_context_type (query, &type)
      || g_strcmp0 (type, GST_LINGBOT_WORLD_CONTEXT_TYPE) != 0)
    return GST_PAD_PROBE_OK;
  n->asked = ++*n->clock;
  if (n->world == NULL)
    return GST_PAD_PROBE_OK;
  ctx = gst_lingbot_context_new (n->world);
  gst_query_set_context (query, ctx);
  gst_context_unref (ctx);
  return GST_PAD_PROBE_HANDLED;
}

static void
add_neighbour (GstElement * p, const char *element, const char *pad,
    Neighbour * n)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (p), element);
  GstPad *q = gst_element_get_static_pad (e, pad);

  gst_pad_add_probe (q, GST_PAD_PROBE_TYPE_QUERY_BOTH |
      GST_PAD_PROBE_TYPE_PUSH, neighbour_answer, n, NULL);
  gst_object_unref (q);
  gst_object_unref (e);
}

/* The world an element answers a CONTEXT query with: the one it uses */
static LingbotWorld *
answered_world (GstElement * e)
{
  GstQuery *q = gst_query_new_context (GST_LINGBOT_WORLD_CONTEXT_TYPE);
  GstContext *ctx = NULL;
  LingbotWorld *w = NULL;

  if (gst_element_query (e, q)) {
    gst_query_parse_context (q, &ctx);
    if (ctx)
      w = gst_lingbot_context_get_world (ctx);
  }
  gst_query_unref (q);
  return w;
}

/* The context dance after a refused world (gstcudautils): a downstream
 * neighbour answering with a world lingbotgen cannot use (its devices are
 * cpu:1, that world's cpu:2) does not end the search; upstream is asked
 * next, and only when nobody has a usable one does the element create its
 * own (and post have-context).  A usable world downstream ends the search
 * there. */
GST_START_TEST (test_context_requery)
{
  LingbotWorldOptions opts = LINGBOT_WORLD_OPTIONS_INIT;
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWorld) good = NULL;
  g_autoptr (LingbotWorld) bad = NULL;
  enum
  { GOOD, BAD, NONE, OWN };
  static const struct
  {
    int down, up;               /* what the neighbours answer with */
    int used;                   /* the world lingbotgen then holds */
    gboolean up_asked;
  } cases[] = {
    {BAD, GOOD, GOOD, TRUE},    /* the re-query */
    {GOOD, BAD, GOOD, FALSE},   /* a usable one downstream: no more */
    {BAD, NONE, OWN, TRUE},     /* nobody: its own */
    {NONE, GOOD, GOOD, TRUE},
  };

  opts.model_path = model_dir;
  opts.load_text_encoder = FALSE;
  good = lingbot_world_new (&opts, &err);
  g_assert_no_error (err);
  opts.devices = "cpu:2";
  bad = lingbot_world_new (&opts, &err);
  g_assert_no_error (err);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    LingbotWorld *worlds[] = { good, bad, NULL };
    g_autofree char *g = gen_desc ("lingbotgen name=gen", "cpu:1", NULL);
    g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc name=up "
        "location=%s ! %s ! fakesink name=down", trace_path, g);
    GstElement *p = gst_parse_launch (desc, &err);
    GstElement *gen;
    GstBus *bus;
    GstMessage *have;
    LingbotWorld *used, *answered;
    guint clock = 0;
    Neighbour down = { worlds[cases[i].down], &clock, 0 };
    Neighbour up = { worlds[cases[i].up], &clock, 0 };

    g_assert_no_error (err);
    add_neighbour (p, "down", "sink", &down);
    add_neighbour (p, "up", "src", &up);
    gen = gst_bin_get_by_name (GST_BIN (p), "gen");
    g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
        GST_STATE_CHANGE_SUCCESS);

    /* downstream first, then upstream unless downstream's was usable */
    g_assert_cmpuint (down.asked, ==, 1);
    g_assert_cmpuint (up.asked, ==, cases[i].up_asked ? 2 : 0);
    used = element_world (gen);
    answered = answered_world (gen);
    g_assert_nonnull (used);
    g_assert_true (answered == used);
    if (cases[i].used == OWN) {
      g_assert_true (used != good && used != bad);
      g_assert_cmpstr (lingbot_world_get_devices (used), ==, "cpu:1");
    } else {
      g_assert_true (used == worlds[cases[i].used]);
    }
    /* a created world is announced, a found one is not */
    bus = gst_element_get_bus (p);
    have = gst_bus_pop_filtered (bus, GST_MESSAGE_HAVE_CONTEXT);
    g_assert_true ((have != NULL) == (cases[i].used == OWN));
    g_clear_pointer (&have, gst_message_unref);
    gst_object_unref (bus);

    lingbot_world_unref (used);
    lingbot_world_unref (answered);
    gst_element_set_state (p, GST_STATE_NULL);
    gst_object_unref (gen);
    gst_object_unref (p);
  }
}

GST_END_TEST;

static Suite *
lingbot_gst_context_suite (void)
{
  Suite *s = suite_create ("lingbot-gst");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_context_shared);
  tcase_add_test (tc, test_context_application);
  tcase_add_test (tc, test_context_requery);
  return s;
}

int
main (int argc, char **argv)
{
  return test_gst_main (&argc, &argv, lingbot_gst_context_suite, __FILE__);
}
