/* lingbot-gst: a test process under a lowered address-space limit
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The allocation tests (tests/session/test-session-alloc.c,
 * tests/gst/test-gst-alloc.c) lower their own RLIMIT_AS to what the
 * process uses plus a margin, then ask for more than the margin: the
 * request must fail with a GError, not abort.  Sanitizers and valgrind
 * reserve address space of their own, so the tests are skipped there.
 */
#include "test-rlimit.h"

#include <dlfcn.h>
#include <malloc.h>
#include <string.h>
#include <sys/resource.h>

/* ASan, TSan, MSan or valgrind: they map shadow memory or replace malloc,
 * so RLIMIT_AS means nothing there */
static gboolean
under_sanitizer (void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return TRUE;
#endif
#ifdef __has_feature
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) \
    || __has_feature(memory_sanitizer)
  return TRUE;
#endif
#endif
  const char *preload = g_getenv ("LD_PRELOAD");
  if (preload && (strstr (preload, "vgpreload") || strstr (preload, "asan")
          || strstr (preload, "tsan")))
    return TRUE;
  return dlsym (RTLD_DEFAULT, "__asan_init") != NULL ||
      dlsym (RTLD_DEFAULT, "__tsan_init") != NULL ||
      dlsym (RTLD_DEFAULT, "__msan_init") != NULL;
}

/* VmSize of /proc/self/status in bytes */
static guint64
vm_size (void)
{
  g_autofree char *status = NULL;
  g_assert_true (g_file_get_contents ("/proc/self/status", &status, NULL,
          NULL));
  const char *p = strstr (status, "VmSize:");
  g_assert_nonnull (p);
  return g_ascii_strtoull (p + strlen ("VmSize:"), NULL, 10) * 1024;
}

/**
 * lingbot_test_rlimit_init:
 *
 * Call from main() after g_test_init(), before any thread starts.  Under
 * a sanitizer or valgrind prints why the test cannot run and returns
 * %FALSE: main() then returns 77 (skipped).  Otherwise caps malloc at two
 * arenas (each new thread's arena reserves 64 MB of address space: with
 * two, the threads the test starts stay inside the margin) and returns
 * %TRUE.
 */
gboolean
lingbot_test_rlimit_init (void)
{
  if (under_sanitizer ()) {
    g_printerr ("skipped: RLIMIT_AS does not work under a sanitizer or "
        "valgrind\n");
    return FALSE;
  }
  mallopt (M_ARENA_MAX, 2);
  return TRUE;
}

/**
 * lingbot_test_rlimit_lower:
 * @margin: bytes of address space left above what the process uses
 *
 * Sets the soft RLIMIT_AS to the process's VmSize plus @margin; the limit
 * stays until the process exits (run it in a process of its own or a
 * g_test_trap_subprocess() child).  Start every thread the test needs
 * (ranks, OpenMP, OpenBLAS, streaming) before.
 *
 * Returns: %TRUE with the limit set; %FALSE, the test marked skipped
 * (g_test_skip()), where the hard limit is already below it.
 */
gboolean
lingbot_test_rlimit_lower (guint64 margin)
{
  struct rlimit rl;
  g_assert_cmpint (getrlimit (RLIMIT_AS, &rl), ==, 0);
  guint64 limit = vm_size () + margin;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < limit) {
    g_test_skip ("the hard RLIMIT_AS is already below the test's limit");
    return FALSE;
  }
  rl.rlim_cur = limit;
  g_assert_cmpint (setrlimit (RLIMIT_AS, &rl), ==, 0);
  g_test_message ("RLIMIT_AS %" G_GUINT64_FORMAT " MiB", limit >> 20);
  return TRUE;
}
