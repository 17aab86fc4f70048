/* lingbot-gst: backend registry and devices-string parsing
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/backend.h"
#include "kernels/error.h"
#include "comm/collectives.h"
#include "lingbot/backend.h"
#include "lingbot/lingbot.h"

static void
test_cpu_always_there (void)
{
  g_autoptr (GError) err = NULL;
  LbBackend *be = lingbot_backend_get ("cpu", &err);
  g_assert_no_error (err);
  g_assert_nonnull (be);
  g_assert_cmpstr (be->name, ==, "cpu");
  g_assert_cmpstr (lb_ops_first_missing (be->ops), ==, NULL);
  /* auto is CPU unless a complete CUDA backend has a device */
  LbBackend *a = lingbot_backend_get ("auto", NULL);
  g_assert_nonnull (a);
  if (lingbot_backend_cuda (NULL) == NULL)
    g_assert_true (a == be);
}

static void
test_unknown_backend (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_null (lingbot_backend_get ("tpu", &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "unknown backend \"tpu\" (expected cpu, cuda or auto)");
}

static void
test_cuda_probe (void)
{
  g_autoptr (GError) err = NULL;
  LbBackend *be = lingbot_backend_cuda (&err);
  if (be) {
    g_assert_no_error (err);
    g_assert_cmpint (be->device_count, >, 0);
    g_assert_nonnull (be->ops->gemm);
    /* the module's extras by name; its NCCL collectives registered for
     * CUDA groups when NCCL loads */
    g_assert_nonnull (lb_backend_get_proc (be, "lingbot_backend_cuda_trim"));
    g_assert_null (lb_backend_get_proc (be, "lingbot_backend_no_such"));
    LbCollectivesProc nccl = (LbCollectivesProc) lb_backend_get_proc (be,
        LB_COLLECTIVES_NCCL_PROC);
    g_assert_nonnull (nccl);
    if (nccl (NULL))
      g_assert_cmpstr (lb_collectives_lookup (LB_DEVICE_CUDA)->name, ==,
          "nccl");
  } else {
    /* no GPU here: the module loads (or is absent) and says why */
    g_assert_nonnull (err);
    g_assert_true (err->code == LB_ERROR_DEVICE ||
        err->code == LB_ERROR_UNSUPPORTED);
    g_test_message ("CUDA unavailable: %s", err->message);
  }
}

static void
test_extras (void)
{
  /* lb_backend_get_proc() is NULL-safe; the CPU backend has no extras */
  g_assert_null (lb_backend_get_proc (NULL, LB_COLLECTIVES_NCCL_PROC));
  g_assert_null (lb_backend_get_proc (lb_cpu_backend (),
          LB_COLLECTIVES_NCCL_PROC));
}

static void
test_parse_cpu_devices (void)
{
  LbBackend *be = NULL;
  int n = 0;
  g_autofree int *ord = NULL;
  g_autoptr (GError) err = NULL;

  g_assert_true (lingbot_backend_parse_devices ("cpu:4", &be, &n, &ord, &err));
  g_assert_no_error (err);
  g_assert_true (be == lb_cpu_backend ());
  g_assert_cmpint (n, ==, 4);
  g_clear_pointer (&ord, g_free);
  g_assert_true (lingbot_backend_parse_devices ("cpu", &be, &n, &ord, &err));
  g_assert_cmpint (n, ==, 1);
}

static void
test_parse_errors (void)
{
  static const struct
  {
    const char *in;
    const char *msg;
  } cases[] = {
    {"", "devices: empty string (expected cpu:N or GPU ordinals like 0,1)"},
    {"cpu:0", "devices \"cpu:0\": at least one rank is needed"},
    {"cpu:x", "devices \"cpu:x\": expected cpu:N with N between 1 and 64"},
    {"cpu:65", "devices \"cpu:65\": expected cpu:N with N between 1 and 64"},
    {"0,a", "devices \"0,a\": \"a\" is not a GPU ordinal"},
    {"0,,1", "devices \"0,,1\": \"\" is not a GPU ordinal"},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    LbBackend *be = NULL;
    int n = 0, *ord = NULL;
    g_autoptr (GError) err = NULL;
    g_assert_false (lingbot_backend_parse_devices (cases[i].in, &be, &n, &ord,
            &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
    g_assert_cmpstr (err->message, ==, cases[i].msg);
    g_assert_null (ord);
  }
}

static void
test_parse_gpu_without_device (void)
{
  if (lingbot_backend_cuda (NULL) != NULL) {
    g_test_skip ("a CUDA device is present");
    return;
  }
  LbBackend *be = NULL;
  int n = 0, *ord = NULL;
  g_autoptr (GError) err = NULL;
  g_assert_false (lingbot_backend_parse_devices ("0,1", &be, &n, &ord, &err));
  g_assert_nonnull (err);
  g_assert_null (ord);
}

/* lingbot_world_check_devices(): the same parse through the public API
 * (lingbotgen checks its devices with it), nothing created */
static void
test_world_check_devices (void)
{
  g_autoptr (GError) err = NULL;
  int n = 0;

  g_assert_true (lingbot_world_check_devices ("cpu:3", &n, &err));
  g_assert_no_error (err);
  g_assert_cmpint (n, ==, 3);
  g_assert_true (lingbot_world_check_devices ("cpu", NULL, &err));
  g_assert_no_error (err);
  g_assert_false (lingbot_world_check_devices ("cpu:0", &n, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "devices \"cpu:0\": at least one rank is needed");
  g_clear_error (&err);
  g_assert_false (lingbot_world_check_devices (NULL, &n, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
}

/* a host tensor the machine cannot hold is an error, not an abort (a
 * 2048x2048 session under a memory limit used to abort in GLib) */
static void
test_cpu_alloc_fails (void)
{
  LbBackend *be = lb_cpu_backend ();
  g_autoptr (GError) err = NULL;
  LbStream *s = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  const int64_t shape[2] = { (int64_t) 1 << 22, (int64_t) 1 << 22 };
  g_assert_null (lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==,
      "cannot allocate 70368744177664 bytes of host memory");
  be->stream_free (s);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/backend/cpu", test_cpu_always_there);
  g_test_add_func ("/backend/cpu-alloc-fails", test_cpu_alloc_fails);
  g_test_add_func ("/backend/unknown", test_unknown_backend);
  g_test_add_func ("/backend/cuda-probe", test_cuda_probe);
  g_test_add_func ("/backend/extras", test_extras);
  g_test_add_func ("/backend/devices/cpu", test_parse_cpu_devices);
  g_test_add_func ("/backend/devices/errors", test_parse_errors);
  g_test_add_func ("/backend/devices/gpu-absent",
      test_parse_gpu_without_device);
  g_test_add_func ("/backend/devices/world-check", test_world_check_devices);
  return g_test_run ();
}
