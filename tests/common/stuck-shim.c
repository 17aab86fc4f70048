/* lingbot-gst tests: an LD_PRELOAD shim that makes a rank stop answering
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Test-only (never installed, nothing of it in the library): the stuck
 * kernel, driver call or collective of a GPU, on the CPU backend.  It
 * interposes lb_cpu_sgemm(); once armed, a call made on a thread named
 * LINGBOT_STUCK_THREAD (a rank thread's name, "lb-world-1" for rank 1 of a
 * world; the rank's OpenMP threads inherit it) never returns.  Every other
 * call goes to OpenBLAS unchanged.
 *
 *   LINGBOT_STUCK_THREAD    the thread name; unset: the shim does nothing
 *   LINGBOT_STUCK_ARM_FILE  armed once this file exists (looked at on each
 *                           call of that thread); unset: armed at once
 *
 * A test program that has the shim preloaded (and neither variable set)
 * arms and disarms it itself, at points of its choosing:
 * lingbot_stuck_shim_arm (name or NULL), found with
 * dlsym (RTLD_DEFAULT, ...); lingbot_stuck_shim_get_n_stuck () counts the
 * threads stuck so far.  A thread that got stuck prints one line to
 * stderr ("lingbot-stuck-shim: thread NAME stuck in lb_cpu_sgemm").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* kernels/cpu/cpu-internal.h's lb_cpu_sgemm(), the CPU ranks' f32 GEMM
 * (gboolean is an int) */
typedef void (*SgemmFunc) (const float *, int64_t, const float *, int,
    int64_t, int64_t, int64_t, int64_t, float, float, float *, int64_t);

static char stuck_thread[16];   /* written before armed is set */
static char arm_file[4096];     /* the constructor's only */
static int armed;               /* atomic */
static int n_stuck;             /* atomic */

void lingbot_stuck_shim_arm (const char *thread_name);
int lingbot_stuck_shim_get_n_stuck (void);

__attribute__((constructor))
     static void
     shim_init (void)
{
  const char *t = getenv ("LINGBOT_STUCK_THREAD");
  const char *f = getenv ("LINGBOT_STUCK_ARM_FILE");

  if (t == NULL || *t == '\0')
    return;
  snprintf (stuck_thread, sizeof stuck_thread, "%s", t);
  if (f != NULL && *f != '\0')
    snprintf (arm_file, sizeof arm_file, "%s", f);
  else
    __atomic_store_n (&armed, 1, __ATOMIC_RELEASE);
}

/**
 * lingbot_stuck_shim_arm:
 * @thread_name: (nullable): the name of the thread whose next
 *   lb_cpu_sgemm() call never returns (at most 15 characters); %NULL
 *   disarms (threads already stuck stay stuck)
 */
void
lingbot_stuck_shim_arm (const char *thread_name)
{
  __atomic_store_n (&armed, 0, __ATOMIC_RELEASE);
  if (thread_name == NULL)
    return;
  snprintf (stuck_thread, sizeof stuck_thread, "%s", thread_name);
  __atomic_store_n (&armed, 1, __ATOMIC_RELEASE);
}

/**
 * lingbot_stuck_shim_get_n_stuck:
 *
 * Returns: how many threads are stuck in the shim now.
 */
int
lingbot_stuck_shim_get_n_stuck (void)
{
  return __atomic_load_n (&n_stuck, __ATOMIC_ACQUIRE);
}

static void
maybe_stick (void)
{
  char name[16] = "";
  const int a = __atomic_load_n (&armed, __ATOMIC_ACQUIRE);

  if (!a && arm_file[0] == '\0')
    return;
  if (pthread_getname_np (pthread_self (), name, sizeof name) != 0
      || strcmp (name, stuck_thread) != 0)
    return;
  if (!a) {
    if (access (arm_file, F_OK) != 0)
      return;
    __atomic_store_n (&armed, 1, __ATOMIC_RELEASE);
  }
  fprintf (stderr, "lingbot-stuck-shim: thread %s stuck in lb_cpu_sgemm\n",
      name);
  __atomic_add_fetch (&n_stuck, 1, __ATOMIC_ACQ_REL);
  for (;;)
    pause ();
}

void lb_cpu_sgemm (const float *x, int64_t xld, const float *w, int trans_w,
    int64_t wld, int64_t m, int64_t n, int64_t k, float alpha, float b,
    float *y, int64_t yld);

void
lb_cpu_sgemm (const float *x, int64_t xld, const float *w, int trans_w,
    int64_t wld, int64_t m, int64_t n, int64_t k, float alpha, float b,
    float *y, int64_t yld)
{
  static SgemmFunc real;

  maybe_stick ();
  if (real == NULL)
    real = (SgemmFunc) dlsym (RTLD_NEXT, "lb_cpu_sgemm");
  if (real == NULL) {
    /* liblingbot came with a plugin, dlopen()ed without RTLD_GLOBAL (the
     * GStreamer plugin in gst-launch-1.0): ask the loaded copy itself */
    void *h = dlopen ("liblingbot.so.1", RTLD_NOLOAD | RTLD_LAZY);
    real = h ? (SgemmFunc) dlsym (h, "lb_cpu_sgemm") : NULL;
  }
  if (real == NULL) {
    fprintf (stderr, "lingbot-stuck-shim: no lb_cpu_sgemm to call\n");
    abort ();
  }
  real (x, xld, w, trans_w, wld, m, n, k, alpha, b, y, yld);
}
