#!/bin/sh
# lingbot-webrtc-server's option checks: every refusal at start is one
# line, "lingbot-webrtc-server: ...", exit 2 for a wrong command line (an
# option out of its range, named with it; a stray argument; options that
# exclude each other) and exit 1 for a setting that cannot be used (a
# model folder, image, embeddings, devices, source; a descriptor limit
# too low for any connection), before any model is loaded.
#   test-server-options.sh LINGBOT-WEBRTC-SERVER
set -u
server=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

check() {   # EXPECTED-STATUS EXPECTED-LINE ARGS...
  want_rc=$1 want=$2
  shift 2
  rc=0
  "$server" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq "$want_rc" ] || fail "exit $rc (not $want_rc) for $*"
  grep -qxF -e "$want" "$tmp/err" ||
    { cat "$tmp/err"; fail "no line '$want' for $*"; }
  # the refusal is the only line (no log line before it); under the
  # sanitizers GStreamer's plugin scanner (a child, not instrumented)
  # may add the sanitizer runtime's own "==PID==..." lines
  [ "$(grep -cv '^==[0-9]*==' "$tmp/err")" -eq 1 ] ||
    { cat "$tmp/err"; fail "more than one line for $*"; }
  echo "ok: $* -> $want"
}

m="--model /nonexistent --image /nonexistent.jpg"
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --idle-timeout 0: 1..3600 seconds" $m --idle-timeout 0
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --idle-timeout 4000: 1..3600 seconds" $m --idle-timeout 4000
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --max-connections -1: at least 0 (0 = automatic)" $m \
  --max-connections -1
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --port 70000: 0..65535" $m --port 70000
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --max-sessions 0: at least 1" $m --max-sessions 0
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --ice-loopback 2: -1..1 (1 = 127.0.0.1 only, 0 = all interfaces, -1 = from --address)" \
  $m --ice-loopback 2
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: unexpected argument 'stray' (the server takes options only: see --help)" \
  $m --port 0 stray
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --set 'width': not NAME=VALUE (a lingbotbin property and its value, e.g. width=256)" \
  $m --set width
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: Unknown option --bogus" $m --bogus
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --max-message-size 10: 64..1048576" $m --max-message-size 10
check 2 "lingbot-webrtc-server: --model and --image are needed (or --source)" --port 0
# device groups: disjoint, one session each
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: --devices and --device-groups exclude each other (a group is a devices value)" \
  $m --devices cpu:1 --device-groups "cpu:1;cpu:1"
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --device-groups '0,1;1,2': GPU 1 is in group 1 and group 2 (groups must not share a device)" \
  $m --device-groups "0,1;1,2"
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: --max-sessions 3 is more than the 2 device groups (one session per group)" \
  $m --device-groups "cpu:1;cpu:1" --max-sessions 3
# a server id starts the resume tokens a front door routes by
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: invalid --server-id 'a-b': 1 to 31 letters, digits or _" \
  $m --server-id a-b --port 0
# the ICE options (docs/webrtc.md "Deploying"): credentials never on the
# command line, a relay policy only with a relay
unset LINGBOT_TURN_USER LINGBOT_TURN_PASSWORD
printf 'alice\n' >"$tmp/bad-credentials"
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --stun 'stun.example': not stun:HOST[:PORT]" $m \
  --stun stun.example
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --turn 'turn:alice:secret@relay.example': credentials do not belong in the URL (it shows in ps): use --turn-credentials FILE (user:password) or LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD" \
  $m --turn turn:alice:secret@relay.example
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: --turn needs credentials: --turn-credentials FILE (user:password) or LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD" \
  $m --turn turn:relay.example
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: --turn-credentials $tmp/bad-credentials: the first line is not user:password" \
  $m --turn turn:relay.example --turn-credentials "$tmp/bad-credentials"
# shellcheck disable=SC2086
export LINGBOT_TURN_USER=alice
check 2 "lingbot-webrtc-server: LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD are needed together" \
  $m --turn turn:relay.example
unset LINGBOT_TURN_USER
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: --turn-credentials without --turn" $m \
  --turn-credentials "$tmp/bad-credentials"
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: --ice-transport-policy relay needs --turn" $m \
  --ice-transport-policy relay
# shellcheck disable=SC2086
check 2 "lingbot-webrtc-server: invalid --ice-transport-policy 'none': all or relay" $m \
  --ice-transport-policy none
# what every session will need, said at start, not when a browser comes
# (the plugin found beside the executable, no GST_PLUGIN_PATH needed;
# loaded in this process, as the project's tests do: under the sanitizer
# build GStreamer's scanner process could not load an ASan-built plugin;
# a registry of the test's own)
unset GST_PLUGIN_PATH
export GST_REGISTRY_FORK=no GST_REGISTRY_1_0="$tmp/registry.bin"
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: --model /nonexistent: no such folder" $m \
  --port 0
mkdir "$tmp/model"
# a model folder without its parts: refused at start, not per browser
check 1 "lingbot-webrtc-server: --model $tmp/model: world: DiT weights not found: $tmp/model/transformers does not exist" \
  --model "$tmp/model" --image /nonexistent.jpg --port 0
# the parts are only located at start (none is read): empty files do
mkdir -p "$tmp/model/transformers" "$tmp/model/google/umt5-xxl"
: >"$tmp/model/Wan2.1_VAE.pth"
check 1 "lingbot-webrtc-server: --model $tmp/model: world: text encoder not found: $tmp/model/models_t5_umt5-xxl-enc-bf16.pth does not exist, nor .safetensors or .dummy.json (without one, give prompt embeddings: lingbotgen's prompt-embeds, lingbot-generate --prompt-embeds, or load_text_encoder FALSE in LingbotWorldOptions)" \
  --model "$tmp/model" --image /nonexistent.jpg --port 0
: >"$tmp/model/models_t5_umt5-xxl-enc-bf16.pth"
: >"$tmp/model/google/umt5-xxl/spiece.model"
check 1 "lingbot-webrtc-server: --image /nonexistent.jpg: no such file" \
  --model "$tmp/model" --image /nonexistent.jpg --port 0
: >"$tmp/start.jpg"
check 1 "lingbot-webrtc-server: --image $tmp/start.jpg: not a usable JPEG: JPEG: Empty input file" \
  --model "$tmp/model" --image "$tmp/start.jpg" --port 0
cp "$(dirname "$0")/../data/gpu-start.jpg" "$tmp/start.jpg"
ok="--model $tmp/model --image $tmp/start.jpg"
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: --prompt-embeds /nonexistent.emb: not a usable prompt-embeds file: cannot open: No such file or directory" \
  $ok --prompt-embeds /nonexistent.emb --port 0
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: invalid --devices 'gpu': devices \"gpu\": \"gpu\" is not a GPU ordinal" \
  $ok --devices gpu --port 0
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: invalid --devices 'cpu:0': devices \"cpu:0\": at least one rank is needed" \
  $ok --devices cpu:0 --port 0
check 1 "lingbot-webrtc-server: invalid --source 'videotestsrc ! ! bogus': syntax error" \
  --source "videotestsrc ! ! bogus" --port 0
check 1 "lingbot-webrtc-server: invalid --source 'videotestsrc ! nosuchelement': no element \"nosuchelement\"" \
  --source "videotestsrc ! nosuchelement" --port 0
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: not a lingbotbin property: bogus=1" $ok \
  --set bogus=1 --port 0
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: --set width=wide: not a value of lingbotbin's width (gint)" \
  $ok --set width=wide --port 0
# tools/webrtc-demo.sh refuses its own wrong arguments before it builds
demo="$(dirname "$0")/../../tools/webrtc-demo.sh"
check_demo() {   # EXPECTED-LINE ARGS...
  want=$1
  shift
  rc=0
  bash "$demo" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 2 ] || fail "webrtc-demo.sh: exit $rc (not 2) for $*"
  [ "$(cat "$tmp/err")" = "$want" ] ||
    { cat "$tmp/err"; fail "webrtc-demo.sh: not '$want' for $*"; }
  echo "ok: webrtc-demo.sh $* -> $want"
}
check_demo "webrtc-demo.sh: --port needs a value (see --help)" --port
check_demo "webrtc-demo.sh: invalid --port '0': 1..65535 (see --help)" \
  --port 0
check_demo "webrtc-demo.sh: invalid --port '8o80': 1..65535 (see --help)" \
  --port 8o80
check_demo "webrtc-demo.sh: --model needs a value (see --help)" --model
check_demo "webrtc-demo.sh: unknown argument --bogus (see --help)" --bogus
# an IPv6 address is in brackets in the URL the server prints (where this
# machine has IPv6 loopback); a stand-in source, stopped once it listens
"$server" --source "videotestsrc is-live=true" --address ::1 --port 0 \
  >"$tmp/out" 2>"$tmp/err" &
pid=$!
i=0
while ! grep -q "listening on" "$tmp/err" && kill -0 "$pid" 2>/dev/null &&
  [ $i -lt 200 ]; do
  sleep 0.1
  i=$((i + 1))
done
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if grep -q "listening on" "$tmp/err"; then
  grep -q "listening on http://\[::1\]:[1-9][0-9]*/ " "$tmp/err" ||
    { cat "$tmp/err"; fail "--address ::1: the URL is not http://[::1]:PORT/"; }
  echo "ok: --address ::1 -> http://[::1]:PORT/"
else
  cat "$tmp/err"
  echo "no IPv6 loopback here: --address ::1 not checked"
fi
# 100 descriptors leave none for a connection beside one session's 64 + 128
ulimit -n 100 || { echo "cannot lower RLIMIT_NOFILE: skipped"; exit 77; }
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: RLIMIT_NOFILE is 100: too few descriptors for any connection with 1 session (64 + 128 per session are kept for the pipelines); lower --max-sessions, or raise the limit (ulimit -n)" $ok --port 0
