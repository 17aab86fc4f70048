/* lingbot-gst: the table of op parity cases, CPU vs fakedev
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every case of tests/common/op-cases.c on the emulated device: fakedev
 * runs the CPU kernels behind its residency checks, so each output must
 * equal the CPU's byte for byte, and no call may be refused for a
 * residency reason (fakedev_stats ().bad stays 0).  The same table runs
 * on CUDA in tests/gpu/test-ops-parity.c.
 */
#include "fakedev.h"
#include "op-cases.h"

static void
test_residency (void)
{
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  g_assert_cmpint (fakedev_stats ().n_ops, >, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  LbBackend *cpu = lb_cpu_backend ();
  LbBackend *fake = fakedev_backend ();
  OpCasesTarget target = {
    .ref = cpu->stream_new (cpu, 0, NULL),
    .dev = fake->stream_new (fake, 0, NULL),
    .exact = TRUE,
  };
  op_cases_add_tests ("/ops/parity/fakedev", &target);
  /* last: after every case */
  g_test_add_func ("/ops/parity/fakedev/~residency", test_residency);
  int ret = g_test_run ();
  fake->stream_free (target.dev);
  cpu->stream_free (target.ref);
  return ret;
}
