/* lingbot-gst: tensor channels between CUDA ranks: the event-ordered
 * hand-off (comm/channel.c) under real stream concurrency
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The flow of tests/comm/channel-device-flow.h with 8 M floats per message
 * and 48 in-place doubling kernels per message on the producer's stream,
 * one slot, no host synchronisation between the producer's kernels and the
 * consumer's copy: if the consumer's stream did not wait for the commit
 * event it would copy a partly doubled band, and if the producer did not
 * wait for the ack event the next message would overwrite the slot under
 * the consumer's copy.  Both show up as wrong values.
 *
 * Cases: hand-over between two groups on device 0; a same-device copy
 * (LB_CHANNEL_NO_HANDOVER); with two GPUs, a peer copy and host staging
 * (page-locked) from device 0 to device 1.  Exits 77 without a device.
 */
#include "../comm/channel-device-flow.h"
#include "lingbot/backend.h"

#include <stdio.h>

static LbBackend *cuda;

static void
run_case (const char *name, int prod_dev, int cons_dev, LbChannelFlags flags,
    LbTransportKind want)
{
  if (MAX (prod_dev, cons_dev) >= cuda->device_count) {
    g_test_skip ("needs two CUDA devices");
    return;
  }
  LbWorkerGroup *gp = dev_flow_group (cuda, 1, &prod_dev, "prod");
  LbWorkerGroup *gc = dev_flow_group (cuda, 1, &cons_dev, "cons");
  DevFlow f = {.n_messages = 12,.shape = {16, 4, 256, 512},.slow = 48 };
  LbChannel *ch = dev_flow_channel (&f, gp, gc, NULL, NULL, 1, flags);
  int n_pieces;
  const LbChannelPiece *plan = lb_channel_get_plan (ch, &n_pieces);
  g_assert_cmpint (n_pieces, ==, 1);
  g_assert_cmpint (plan[0].transport, ==, want);
  gint64 t0 = g_get_monotonic_time ();
  test_run_two (gp, dev_flow_produce, &f, gc, dev_flow_consume, &f);
  printf ("# channel %s (%s): %d messages of %.0f MB, %d doublings each, "
      "checked, %.1f ms\n", name, lb_transport_kind_name (want),
      f.n_messages, 16.0 * 4 * 256 * 512 * 4 / 1e6, f.slow,
      (g_get_monotonic_time () - t0) / 1e3);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

static void
test_handover (void)
{
  run_case ("hand-over", 0, 0, 0, LB_TRANSPORT_SAME_DEVICE);
}

static void
test_same_device_copy (void)
{
  run_case ("same-device copy", 0, 0, LB_CHANNEL_NO_HANDOVER,
      LB_TRANSPORT_PEER);
}

static void
test_peer (void)
{
  run_case ("peer", 0, 1, 0, LB_TRANSPORT_PEER);
}

static void
test_host_staged (void)
{
  run_case ("host-staged", 0, 1, LB_CHANNEL_NO_PEER_COPY,
      LB_TRANSPORT_HOST_STAGED);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) err = NULL;
  g_test_init (&argc, &argv, NULL);
  cuda = lingbot_backend_cuda (&err);
  if (cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return 77;
  }
  g_test_add_func ("/gpu/channel/hand-over", test_handover);
  g_test_add_func ("/gpu/channel/same-device-copy", test_same_device_copy);
  g_test_add_func ("/gpu/channel/peer", test_peer);
  g_test_add_func ("/gpu/channel/host-staged", test_host_staged);
  return g_test_run ();
}
