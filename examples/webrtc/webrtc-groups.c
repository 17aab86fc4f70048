/* lingbot-gst: the WebRTC sender's device groups and its /status
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One room of the server of webrtc-server.h (see webrtc-server-private.h).
 * With device groups ("0,1,2,3;4,5,6,7", or "cpu:1;cpu:1") each session
 * runs its world on a group of its own: a new browser gets a free group,
 * the group is free again when its session ends.  Without them every
 * session uses the configured devices (shared).  /status tells a front
 * door or a monitor the groups, the sessions and the free slots.
 */
#define GST_USE_UNSTABLE_API 1

#include "webrtc-server-private.h"

#include <stdlib.h>
#include <string.h>

/**
 * lingbot_webrtc_device_groups_check:
 * @groups: device groups separated by ';', each a lingbotbin devices
 *   value: "cpu:N" or GPU ordinals "0,1,2,3"
 * @n_groups: (out) (optional): the number of groups
 * @error: where to put an error
 *
 * Checks device groups: none empty, GPU ordinals numbers, no ordinal in
 * two groups (their worlds would share a GPU).  CPU groups ("cpu:N", N
 * ranks on host threads) may repeat.
 *
 * Returns: (transfer full): the groups, %NULL-terminated and trimmed, or
 *   %NULL with @error set (G_IO_ERROR_INVALID_ARGUMENT,
 *   "invalid --device-groups 'GROUPS': ..." naming the group at fault)
 */
char **
lingbot_webrtc_device_groups_check (const char *groups, guint * n_groups,
    GError ** error)
{
  g_auto (GStrv) parts = NULL;
  g_autoptr (GHashTable) owner = NULL;
  guint n;

  if (groups == NULL || *groups == '\0') {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "invalid --device-groups '%s': no group", GST_STR_NULL (groups));
    return NULL;
  }
  owner = g_hash_table_new (NULL, NULL);
  parts = g_strsplit (groups, ";", -1);
  n = g_strv_length (parts);
  for (guint i = 0; i < n; i++) {
    g_auto (GStrv) ids = NULL;

    g_strstrip (parts[i]);
    if (*parts[i] == '\0') {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "invalid --device-groups '%s': group %u is empty", groups, i + 1);
      return NULL;
    }
    if (g_str_has_prefix (parts[i], "cpu:")) {
      guint64 ranks;

      if (!g_ascii_string_to_unsigned (parts[i] + 4, 10, 1, 64, &ranks, NULL)) {
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
            "invalid --device-groups '%s': group %u '%s' is not cpu:N "
            "(1..64 ranks)", groups, i + 1, parts[i]);
        return NULL;
      }
      continue;
    }
    ids = g_strsplit (parts[i], ",", -1);
    for (guint j = 0; ids[j]; j++) {
      guint64 ordinal;
      gpointer was;

      g_strstrip (ids[j]);
      if (!g_ascii_string_to_unsigned (ids[j], 10, 0, 1023, &ordinal, NULL)) {
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
            "invalid --device-groups '%s': group %u '%s' is not cpu:N or GPU "
            "ordinals (0,1,2,3)", groups, i + 1, parts[i]);
        return NULL;
      }
      if (g_hash_table_lookup_extended (owner, GUINT_TO_POINTER (ordinal +
                  1), NULL, &was)) {
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
            "invalid --device-groups '%s': GPU %u is in group %u and group "
            "%u (groups must not share a device)", groups, (guint) ordinal,
            GPOINTER_TO_UINT (was), i + 1);
        return NULL;
      }
      g_hash_table_insert (owner, GUINT_TO_POINTER (ordinal + 1),
          GUINT_TO_POINTER (i + 1));
    }
  }
  if (n_groups)
    *n_groups = n;
  return g_steal_pointer (&parts);
}

gboolean
groups_setup (LingbotWebrtcServer * server, const LingbotWebrtcConfig * cfg,
    GError ** error)
{
  g_auto (GStrv) groups = NULL;
  guint n = 0;

  if (cfg->device_groups == NULL) {
    server->max_sessions = MAX (cfg->max_sessions, 1);
    return TRUE;
  }
  groups = lingbot_webrtc_device_groups_check (cfg->device_groups, &n, error);
  if (groups == NULL)
    return FALSE;
  if (cfg->max_sessions > n) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "--max-sessions %u is more than the %u device groups (one session "
        "per group)", cfg->max_sessions, n);
    return FALSE;
  }
  server->max_sessions = cfg->max_sessions ? cfg->max_sessions : n;
  server->n_groups = n;
  server->groups = g_new0 (Group, n);
  for (guint i = 0; i < n; i++)
    server->groups[i].devices = g_strdup (groups[i]);
  return TRUE;
}

void
groups_clear (LingbotWebrtcServer * server)
{
  if (server->refill) {
    g_source_destroy (server->refill);
    g_clear_pointer (&server->refill, g_source_unref);
  }
  for (guint i = 0; i < server->n_groups; i++) {
    g_free (server->groups[i].devices);
    g_free (server->groups[i].error);
  }
  g_clear_pointer (&server->groups, g_free);
  server->n_groups = 0;
}

gboolean
groups_take (LingbotWebrtcServer * server, Session * s, gint group)
{
  gint pick = -1;

  s->group = -1;
  if (group >= 0) {
    if ((guint) group < server->n_groups
        && server->groups[group].session == NULL)
      pick = group;
  } else {
    /* a group whose world was made (or never tried) first: one that
     * failed is tried again only when no other is free */
    for (guint i = 0; i < server->n_groups; i++) {
      if (server->groups[i].session != NULL)
        continue;
      if (server->groups[i].error == NULL) {
        pick = (gint) i;
        break;
      }
      if (pick < 0)
        pick = (gint) i;
    }
  }
  if (pick < 0)
    return server->n_groups == 0;
  server->groups[pick].session = s;
  s->group = pick;
  return TRUE;
}

gboolean
groups_build_world (LingbotWebrtcServer * server, Session * s, GError ** error)
{
  gboolean ok = session_build (s, error);

  if (s->group >= 0 && (guint) s->group < server->n_groups) {
    Group *g = &server->groups[s->group];

    g_clear_pointer (&g->error, g_free);
    if (!ok)
      g->error = g_strdup ((*error)->message);
  }
  return ok;
}

void
groups_release (LingbotWebrtcServer * server, Session * s)
{
  if (s->group >= 0 && (guint) s->group < server->n_groups
      && server->groups[s->group].session == s)
    server->groups[s->group].session = NULL;
  s->group = -1;
}

const char *
groups_devices (LingbotWebrtcServer * server, Session * s)
{
  if (s->group >= 0 && (guint) s->group < server->n_groups)
    return server->groups[s->group].devices;
  return server->devices;
}

/* With groups, every group holds a world before any browser comes: the
 * model loads (seconds on a CPU, about 15 s for the 14B model on a GPU)
 * while nobody waits, and a new browser joins a world that is ready.
 * A group whose last world could not be made (at start, or for a browser)
 * is not given one again here (a wrong model would fail forever, and
 * every session's end would retry it): its group makes one when a browser
 * comes and no other group is free, and that browser is told the error. */
void
groups_make_worlds (LingbotWebrtcServer * server)
{
  /* at most --max-sessions worlds in all: a lower cap leaves groups idle */
  guint held = 0;

  for (guint i = 0; i < server->n_groups; i++)
    held += server->groups[i].session != NULL;
  for (guint i = 0; i < server->n_groups && !server->stopping
      && held < server->max_sessions; i++) {
    g_autoptr (GError) err = NULL;
    Session *s;

    if (server->groups[i].session || server->groups[i].error)
      continue;
    held++;
    s = session_new (server, (gint) i);
    s->spare = TRUE;
    g_message ("session %u: a world made for group %u (%s) before any "
        "browser", s->id, i, server->groups[i].devices);
    if (!groups_build_world (server, s, &err)) {
      g_message ("session %u: group %u: the world cannot be made (not made "
          "again until a browser comes): %s", s->id, i, err->message);
      session_close (s, "pipeline");
    }
  }
}

static gboolean
refill_run (gpointer data)
{
  LingbotWebrtcServer *server = data;

  g_clear_pointer (&server->refill, g_source_unref);
  groups_make_worlds (server);
  return G_SOURCE_REMOVE;
}

void
groups_session_ended (LingbotWebrtcServer * server, Session * s)
{
  if (server->n_groups == 0 || server->stopping || s->spare || server->refill)
    return;
  server->refill = g_idle_source_new ();
  g_source_set_callback (server->refill, refill_run, server, NULL);
  g_source_attach (server->refill, server->context);
}

Session *
groups_spare (LingbotWebrtcServer * server)
{
  for (guint i = 0; i < server->n_groups; i++) {
    Session *s = server->groups[i].session;

    if (s && s->spare && !s->closed)
      return s;
  }
  return NULL;
}

guint
groups_n_active (LingbotWebrtcServer * server)
{
  GHashTableIter it;
  gpointer value;
  guint n = 0;

  g_hash_table_iter_init (&it, server->sessions);
  while (g_hash_table_iter_next (&it, NULL, &value))
    n += !((Session *) value)->spare && !((Session *) value)->closed;
  return n;
}

gboolean
groups_slot_free (LingbotWebrtcServer * server)
{
  if (groups_n_active (server) >= server->max_sessions)
    return FALSE;
  if (server->n_groups == 0)
    return TRUE;
  for (guint i = 0; i < server->n_groups; i++)
    if (server->groups[i].session == NULL || server->groups[i].session->spare)
      return TRUE;
  return FALSE;
}

gint64
groups_retry_after (LingbotWebrtcServer * server)
{
  GHashTableIter it;
  gpointer value;
  gint64 now = g_get_monotonic_time (), soonest = -1;

  g_hash_table_iter_init (&it, server->sessions);
  while (g_hash_table_iter_next (&it, NULL, &value)) {
    Session *s = value;
    gint64 ready;

    if (s->closed || s->resume == NULL)
      continue;
    ready = g_source_get_ready_time (s->resume);
    if (ready >= 0 && (soonest < 0 || ready < soonest))
      soonest = ready;
  }
  if (soonest < 0)
    return -1;
  /* whole seconds, rounded up (the timer itself is a seconds timer,
   * which GLib may fire up to a second late to group wake-ups) */
  return (MAX (soonest - now, 0) + G_USEC_PER_SEC - 1) / G_USEC_PER_SEC;
}

static void
put_session (JsonBuilder * b, Session * s)
{
  json_builder_begin_object (b);
  server_put_int (b, "id", s->id);
  json_builder_set_member_name (b, "group");
  if (s->group >= 0)
    json_builder_add_int_value (b, s->group);
  else
    json_builder_add_null_value (b);
  server_put_string (b, "state", s->state);
  server_put_int (b, "peers", g_list_length (s->peers));
  /* no browser: kept for a reload to resume it */
  server_put_boolean (b, "waiting-reload", s->resume != NULL);
  /* a world made for its group, no browser yet */
  server_put_boolean (b, "spare", s->spare);
  json_builder_end_object (b);
}

static gint
by_id (gconstpointer a, gconstpointer b)
{
  const Session *x = a, *y = b;

  return x->id < y->id ? -1 : x->id > y->id;
}

char *
groups_status_json (LingbotWebrtcServer * server)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (JsonNode) root = NULL;
  GList *all = g_list_sort (g_hash_table_get_values (server->sessions), by_id);
  guint active = groups_n_active (server), free = 0, failing = 0;
  gint64 retry = groups_retry_after (server);

  /* the slots a new browser can have: below max-sessions, and with groups
   * a group with a spare world or none (one is made on demand) */
  if (active < server->max_sessions) {
    free = server->max_sessions - active;
    if (server->n_groups) {
      guint groups_free = 0;

      for (guint i = 0; i < server->n_groups; i++)
        groups_free += server->groups[i].session == NULL
            || server->groups[i].session->spare;
      free = MIN (free, groups_free);
    }
  }
  /* free groups whose last world could not be made: a browser sent here
   * makes it again, and likely gets the error */
  for (guint i = 0; i < server->n_groups; i++)
    failing += server->groups[i].session == NULL
        && server->groups[i].error != NULL;
  json_builder_begin_object (b);
  server_put_string_or_null (b, "server", server->server_id);
  server_put_int (b, "max-sessions", server->max_sessions);
  server_put_int (b, "free", free);
  json_builder_set_member_name (b, "retry-after");
  if (free == 0 && retry >= 0)
    json_builder_add_int_value (b, retry);
  else
    json_builder_add_null_value (b);
  server_put_int (b, "failing", failing);
  server_put_int (b, "peers", g_atomic_int_get (&server->n_peers));
  json_builder_set_member_name (b, "groups");
  json_builder_begin_array (b);
  for (guint i = 0; i < server->n_groups; i++) {
    Session *s = server->groups[i].session;

    json_builder_begin_object (b);
    server_put_int (b, "group", i);
    server_put_string (b, "devices", server->groups[i].devices);
    json_builder_set_member_name (b, "session");
    if (s)
      json_builder_add_int_value (b, s->id);
    else
      json_builder_add_null_value (b);
    server_put_string_or_null (b, "error", server->groups[i].error);
    json_builder_end_object (b);
  }
  json_builder_end_array (b);
  json_builder_set_member_name (b, "sessions");
  json_builder_begin_array (b);
  for (GList * l = all; l; l = l->next)
    if (!((Session *) l->data)->closed)
      put_session (b, l->data);
  json_builder_end_array (b);
  json_builder_end_object (b);
  g_list_free (all);
  root = json_builder_get_root (b);
  return json_to_string (root, FALSE);
}

void
groups_on_status (SoupServer * soup, SoupServerMessage * msg,
    const char *path, GHashTable * query, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  const char *method = soup_server_message_get_method (msg);
  char *json;

  if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) {
    soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
    return;
  }
  json = groups_status_json (server);
  soup_message_headers_replace (soup_server_message_get_response_headers
      (msg), "Cache-Control", "no-store");
  soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
  soup_server_message_set_response (msg, "application/json",
      SOUP_MEMORY_TAKE, json, strlen (json));
}
