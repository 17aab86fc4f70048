/* lingbot-gst: copies between strided views, one backend copy per
 * contiguous run
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * What lingbot_dit_copy_rows() (dit-tensor.c) and vae_copy_runs()
 * (vae-ops.c) share: the split of two views of one shape into contiguous
 * runs, and the copy of run after run with the stream's backend.  Host
 * code only computes addresses here; it never reads the tensors.
 */
#include "lingbot/copy-runs.h"

/**
 * lingbot_copy_runs_split:
 * @dst: a view
 * @src: a view of @dst's shape
 * @run: (out): the elements of one run
 *
 * Finds the trailing dimensions of @dst and @src that are laid out as one
 * contiguous run in both (size-1 dimensions ignored).
 *
 * Returns: k, the first of those dimensions: dims [k, ndim) are one run
 *   of *@run elements, the leading ones [0, k) are iterated (0: the whole
 *   tensor is one run).
 */
int
lingbot_copy_runs_split (const LbTensor * dst, const LbTensor * src,
    int64_t * run)
{
  int k = src->ndim;
  int64_t n = 1;
  while (k > 0) {
    const int d = k - 1;
    if (src->shape[d] != 1 && (src->stride[d] != n || dst->stride[d] != n))
      break;
    n *= src->shape[d];
    k = d;
  }
  *run = n;
  return k;
}

/**
 * lingbot_copy_runs:
 * @s: the stream whose backend copies
 * @dst: the destination view
 * @src: a view of @dst's shape and dtype, not empty
 * @k: the first dimension of the runs (lingbot_copy_runs_split())
 * @run: the elements of one run (lingbot_copy_runs_split())
 * @kind: the direction of the copies
 * @error: %LB_ERROR_DEVICE from the backend's copy
 *
 * Copies @src into @dst with one backend copy of @run elements per index
 * of the leading dimensions [0, @k), in index order.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_copy_runs (LbStream * s, LbTensor * dst, const LbTensor * src, int k,
    int64_t run, LbCopyKind kind, GError ** error)
{
  const gsize es = lb_dtype_size (src->dtype);
  const int64_t n_runs = lb_tensor_numel (src) / run;
  int64_t idx[LB_MAX_DIMS] = { 0 };
  for (int64_t o = 0; o < n_runs; o++) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < k; d++) {
      so += idx[d] * src->stride[d];
      dof += idx[d] * dst->stride[d];
    }
    if (!s->backend->copy (s, (guint8 *) dst->data + dof * (int64_t) es,
            (const guint8 *) src->data + so * (int64_t) es, (gsize) run * es,
            kind, error))
      return FALSE;
    for (int d = k - 1; d >= 0; d--) {
      if (++idx[d] < src->shape[d])
        break;
      idx[d] = 0;
    }
  }
  return TRUE;
}
