/* lingbot-gst: tensor channels between device ranks (emulated device)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The channel's stream-ordered hand-off (comm/channel.c): on device ranks
 * of a backend with events, commit records one event per producer rank and
 * slot, receive makes the consumer's stream wait for the producers', ack
 * records one per consumer rank, and the next acquire of the slot waits
 * for those; the channel itself never synchronises a stream, and host
 * staging is page-locked.  fakedev runs everything at once, so it checks
 * the data through every transport and counts that protocol exactly; its
 * stream-ordering checker proves the events order every access (and
 * refuses the flow with a wait left out), and tests/gpu/test-channel-cuda.c
 * runs the same flow on a GPU.
 */
#include "channel-device-flow.h"
#include "fakedev.h"

typedef struct
{
  const char *name;
  int prod_dev[2], cons_dev[2];
  int64_t prod_rows[2], cons_rows[2];
  LbChannelFlags flags;
  int n_slots;
  /* expected pieces per transport */
  int n_same, n_peer, n_staged;
} Case;

static const Case cases[] = {
  {"hand-over", {0, 1}, {0, 1}, {4, 4}, {4, 4}, 0, 1, 2, 0, 0},
  {"peer", {0, 1}, {2, 3}, {4, 4}, {4, 4}, 0, 2, 0, 2, 0},
  /* consumer 0 gathers from both producers, consumer 1 gets a strided
   * sub-band of producer 1's band handed over */
  {"reshard", {0, 1}, {0, 1}, {3, 5}, {4, 4}, 0, 1, 1, 2, 0},
  {"host-staged", {0, 1}, {2, 3}, {3, 5}, {4, 4}, LB_CHANNEL_NO_PEER_COPY, 2,
      0, 0, 3},
};

static void
test_flow (gconstpointer data)
{
  const Case *c = data;
  const int P = 2, Q = 2, M = 7;
  LbBackend *be = fakedev_backend ();
  LbWorkerGroup *gp = dev_flow_group (be, P, c->prod_dev, "prod");
  LbWorkerGroup *gc = dev_flow_group (be, Q, c->cons_dev, "cons");
  DevFlow f = {.n_messages = M,.shape = {3, 2, 8, 5},.slow = 2 };
  const FakeDevStats st0 = fakedev_stats ();
  LbChannel *ch = dev_flow_channel (&f, gp, gc, c->prod_rows, c->cons_rows,
      c->n_slots, c->flags);
  int n_pieces, count[LB_TRANSPORT_COUNT] = { 0 };
  const LbChannelPiece *plan = lb_channel_get_plan (ch, &n_pieces);
  for (int i = 0; i < n_pieces; i++)
    count[plan[i].transport]++;
  g_assert_cmpint (count[LB_TRANSPORT_SAME_DEVICE], ==, c->n_same);
  g_assert_cmpint (count[LB_TRANSPORT_PEER], ==, c->n_peer);
  g_assert_cmpint (count[LB_TRANSPORT_HOST_STAGED], ==, c->n_staged);
  const FakeDevStats st1 = fakedev_stats ();
  /* staging from the backend's page-locked allocator */
  g_assert_cmpint (st1.host_blocks - st0.host_blocks, ==,
      c->n_slots * c->n_staged);

  test_run_two (gp, dev_flow_produce, &f, gc, dev_flow_consume, &f);
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, 0);
  /* every message: P commit + Q ack records; each producer waits for the
   * Q acks of the slot, each consumer for the P commits */
  g_assert_cmpint (st.n_records - st1.n_records, ==, M * (P + Q));
  g_assert_cmpint (st.n_waits - st1.n_waits, ==, 2 * M * P * Q);
  /* the only synchronisations are the test's own */
  g_assert_cmpint (st.n_syncs - st1.n_syncs, ==, g_atomic_int_get (&f.syncs));
  g_assert_cmpint (g_atomic_int_get (&f.syncs), ==, M * Q + P);
  LbChannelStats cs;
  lb_channel_get_stats (ch, &cs);
  g_assert_cmpuint (cs.messages_received, ==, (guint64) M * Q);
  g_assert_cmpuint (cs.copies[LB_TRANSPORT_HOST_STAGED], ==,
      (guint) (2 * M * c->n_staged));
  g_assert_cmpuint (cs.copies[LB_TRANSPORT_PEER], ==, (guint) (M * c->n_peer));
  g_print ("# %s: %d messages, %d records, %d event waits, %d test syncs, "
      "no channel sync\n", c->name, M, st.n_records - st1.n_records,
      st.n_waits - st1.n_waits, f.syncs);
  lb_channel_free (ch);
  g_assert_cmpint (fakedev_stats ().host_blocks, ==, st0.host_blocks);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

/* The hand-off with the consumer's waits for the commit events left out
 * (fakedev_skip_waits): the stream-ordering checker refuses the
 * consumer's first read of the band the producer pushed, naming both
 * accesses, and the flow stops with that error instead of passing as it
 * would on a device that runs everything at once. */
static void
test_commit_wait_left_out (void)
{
  const int prod_dev[1] = { 0 }, cons_dev[1] = { 1 };
  if (g_strcmp0 (g_getenv ("FAKEDEV_ORDER"), "off") == 0) {
    g_test_skip ("FAKEDEV_ORDER=off");
    return;
  }
  LbBackend *be = fakedev_backend ();
  LbWorkerGroup *gp = dev_flow_group (be, 1, prod_dev, "prod");
  LbWorkerGroup *gc = dev_flow_group (be, 1, cons_dev, "cons");
  DevFlow f = {.n_messages = 3,.shape = {3, 2, 8, 5},.slow = 2 };
  LbChannel *ch = dev_flow_channel (&f, gp, gc, NULL, NULL, 1, 0);
  int n_pieces;
  const LbChannelPiece *plan = lb_channel_get_plan (ch, &n_pieces);
  g_assert_cmpint (n_pieces, ==, 1);
  g_assert_cmpint (plan[0].transport, ==, LB_TRANSPORT_PEER);
  const FakeDevStats st0 = fakedev_stats ();
  fakedev_skip_waits (1, -1);
  GError *ep = NULL, *ec = NULL;
  LbWorkerJob jp = LB_WORKER_JOB_INIT, jc = LB_WORKER_JOB_INIT;
  g_assert_true (lb_worker_group_submit (gp, &jp, -1, dev_flow_produce, &f,
          &ep));
  g_assert_true (lb_worker_group_submit (gc, &jc, -1, dev_flow_consume, &f,
          &ec));
  g_assert_false (lb_worker_group_wait (gc, &jc, &ec));
  /* the producer stops too (the consumer's group failed), or finishes */
  lb_channel_cancel (ch);
  lb_worker_group_wait (gp, &jp, &ep);
  g_clear_error (&ep);
  fakedev_skip_waits (-1, 0);
  /* [3, 2, 8, 5] f32: the whole band, 960 bytes, pushed by one copy */
  g_assert_error (ec, LB_ERROR, LB_ERROR_DEVICE);
  if (!g_regex_match_simple ("^rank 0: stream order: read after write in "
          "allocation #[0-9]+ \\(960 bytes on fakedev:1, made by .*\\): "
          "copy on stream #[0-9]+ \\(fakedev:1\\) reads bytes \\[0, "
          "960\\), not ordered after D2D copy on stream #[0-9]+ "
          "\\(fakedev:0\\), which wrote bytes \\[0, 960\\) \\(no event "
          "wait or synchronisation between them\\)$", ec->message, 0, 0))
    g_error ("unexpected refusal: %s", ec->message);
  g_clear_error (&ec);
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.n_order_violations - st0.n_order_violations, ==, 1);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

/* CPU ranks have no events: the same flow synchronises after every
 * transport leg, as before. */
static void
test_cpu_unchanged (void)
{
  int a[2] = { 0, 1 }, b[2] = { 2, 3 };
  LbWorkerGroup *gp = dev_flow_group (lb_cpu_backend (), 2, a, "prod");
  LbWorkerGroup *gc = dev_flow_group (lb_cpu_backend (), 2, b, "cons");
  DevFlow f = {.n_messages = 5,.shape = {2, 1, 6, 3},.slow = 1 };
  LbChannel *ch = dev_flow_channel (&f, gp, gc, NULL, NULL, 1,
      LB_CHANNEL_NO_PEER_COPY);
  test_run_two (gp, dev_flow_produce, &f, gc, dev_flow_consume, &f);
  LbChannelStats cs;
  lb_channel_get_stats (ch, &cs);
  g_assert_cmpuint (cs.copies[LB_TRANSPORT_HOST_STAGED], ==, 2 * 2 * 5);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

static gboolean
record_backend_name (LbRank * rank, gpointer data, GError ** error)
{
  const char **names = data;
  (void) error;
  names[rank->rank] = lb_comm_backend_name (rank);
  return TRUE;
}

static const char *
group_collectives (const int *ordinals)
{
  const char *names[2] = { NULL, NULL };
  g_autoptr (GError) err = NULL;
  LbWorkerGroup *g = lb_worker_group_new (fakedev_backend (), 2, ordinals,
      NULL, &err);
  g_assert_no_error (err);
  g_assert_true (lb_worker_group_run (g, record_backend_name, names, &err));
  g_assert_no_error (err);
  g_assert_cmpstr (names[0], ==, names[1]);
  lb_worker_group_shutdown (g);
  lb_worker_group_unref (g);
  return names[0];
}

/* A device group naming one device twice (devices "0,0") takes the local
 * collectives even where a device library (NCCL) is registered for its
 * device type: NCCL refuses a device twice in a communicator. */
static void
test_repeated_ordinals (void)
{
  static LbCollectivesClass devlib;
  static const int distinct[2] = { 0, 1 }, same[2] = { 0, 0 };
  const LbDeviceType type = fakedev_backend ()->device_type;

  devlib = *lb_collectives_lookup (type);
  devlib.name = "devlib";
  lb_collectives_register (type, &devlib);
  g_assert_cmpstr (group_collectives (distinct), ==, "devlib");
  g_assert_cmpstr (group_collectives (same), ==, "local");
  lb_collectives_register (type, NULL);
  g_assert_cmpstr (group_collectives (distinct), ==, "local");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *path = g_strdup_printf ("/comm/channel-device/%s",
        cases[i].name);
    g_test_add_data_func (path, &cases[i], test_flow);
  }
  g_test_add_func ("/comm/channel-device/cpu-unchanged", test_cpu_unchanged);
  g_test_add_func ("/comm/channel-device/repeated-ordinals",
      test_repeated_ordinals);
  g_test_add_func ("/comm/channel-device/commit-wait-left-out",
      test_commit_wait_left_out);
  return g_test_run ();
}
