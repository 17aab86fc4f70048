/* lingbot-gst: eager CUDA module loading for multi-GPU worlds
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_backend_parse_devices() of two or more distinct GPUs sets
 * CUDA_MODULE_LOADING=EAGER before the CUDA runtime starts (the module's
 * probe), keeps a value the user set, and leaves one GPU (also one GPU
 * named twice) alone.  Each case runs in a fresh process: the probe and
 * the runtime's reading of the variable happen once per process.  Without
 * a GPU the parse fails after the probe; the variable is set before it.
 */
#include <stdlib.h>

#include "lingbot/backend.h"
#include "kernels/error.h"

static void
parse (const char *devices)
{
  LbBackend *be = NULL;
  int n = 0, *ord = NULL;
  if (lingbot_backend_parse_devices (devices, &be, &n, &ord, NULL))
    g_free (ord);
}

static void
check (const char *first, const char *second, const char *preset,
    const char *want)
{
  if (g_test_subprocess ()) {
    if (preset)
      g_setenv ("CUDA_MODULE_LOADING", preset, TRUE);
    else
      g_unsetenv ("CUDA_MODULE_LOADING");
    parse (first);
    if (second)
      parse (second);
    g_assert_cmpstr (g_getenv ("CUDA_MODULE_LOADING"), ==, want);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

static void
test_two_gpus (void)
{
  check ("0,1", NULL, NULL, "EAGER");
}

static void
test_user_value_kept (void)
{
  check ("1, 0", NULL, "LAZY", "LAZY");
}

static void
test_one_gpu (void)
{
  check ("0", NULL, NULL, NULL);
}

static void
test_one_gpu_twice (void)
{
  check ("0,0", NULL, NULL, NULL);
}

/* the runtime was probed by a one-GPU world first: too late to change */
static void
test_after_probe (void)
{
  check ("0", "0,1", NULL, NULL);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/backend/eager/two-gpus", test_two_gpus);
  g_test_add_func ("/backend/eager/user-value-kept", test_user_value_kept);
  g_test_add_func ("/backend/eager/one-gpu", test_one_gpu);
  g_test_add_func ("/backend/eager/one-gpu-twice", test_one_gpu_twice);
  g_test_add_func ("/backend/eager/after-probe", test_after_probe);
  return g_test_run ();
}
