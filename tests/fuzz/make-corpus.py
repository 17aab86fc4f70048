#!/usr/bin/env python3
# lingbot-gst: writes the seed and reproducer files of tests/fuzz/corpus
# (docs/fuzzing.md).  Run from the source root; the outputs are committed.
# Seeds are small valid inputs; repro-* files are inputs that once broke a
# parser (each now gives a clean error).  The SentencePiece seed is the
# three tiny models spm_train writes.
import json
import os
import shutil
import struct
import subprocess
import tempfile

ROOT = os.path.join('tests', 'fuzz', 'corpus')


def put(name, fname, data):
    d = os.path.join(ROOT, name)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) < 20000, (name, fname, len(data))
    with open(os.path.join(d, fname), 'wb') as f:
        f.write(data)


def safetensors(tensors, meta=None, extra=b'', raw_header=None):
    """tensors: [(name, dtype, shape, begin, end)], data zero-filled"""
    h = {}
    end = 0
    for name, dt, shape, b, e in tensors:
        h[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [b, e]}
        end = max(end, e)
    if meta:
        h['__metadata__'] = meta
    hdr = raw_header if raw_header is not None else json.dumps(h).encode()
    return struct.pack('<Q', len(hdr)) + hdr + bytes(end) + extra


def npy(descr, shape, fortran=False, data=None, version=1):
    hdr = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, 'True' if fortran else 'False',
        '(' + ''.join('%d, ' % s for s in shape).rstrip(' ') + ')'
        if len(shape) != 1 else '(%d,)' % shape[0])
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(hdr) + 1) % 64) % 64
    hdr = hdr + ' ' * pad + '\n'
    head = b'\x93NUMPY' + bytes([version, 0])
    head += struct.pack('<H' if version == 1 else '<I', len(hdr))
    if data is None:
        n = 1
        for s in shape:
            n *= s
        data = bytes(n * int(descr[2:]))
    return head + hdr.encode() + data


def f32(vals):
    return struct.pack('<%df' % len(vals), *vals)


# ---- safetensors ----
put('safetensors', 'seed-two-f32',
    safetensors([('a', 'F32', [2, 3], 0, 24), ('b', 'F32', [4], 24, 40)]))
put('safetensors', 'seed-bf16-f16-metadata',
    safetensors([('x', 'BF16', [2, 2], 0, 8), ('y', 'F16', [3], 8, 14)],
                meta={'format': 'pt'}))
put('safetensors', 'seed-scalar-i64-empty',
    safetensors([('s', 'I64', [], 0, 8), ('e', 'F32', [0, 5], 8, 8)]))
put('safetensors', 'repro-gap-between-tensors',
    safetensors([('a', 'F32', [2], 0, 8), ('b', 'F32', [2], 16, 24)]))
put('safetensors', 'repro-trailing-bytes',
    safetensors([('a', 'F32', [2], 0, 8)], extra=b'\x00' * 8))
put('safetensors', 'repro-header-length-huge',
    struct.pack('<Q', 1 << 62) + b'{}')

# ---- sharded index (next to shards a.safetensors, b.safetensors) ----
put('safetensors-index', 'seed-two-shards', json.dumps({
    'metadata': {'total_size': 16},
    'weight_map': {'a': 'a.safetensors', 'b': 'b.safetensors'}}))
put('safetensors-index', 'repro-shard-etc-passwd', json.dumps({
    'weight_map': {'a': '/etc/passwd'}}))
put('safetensors-index', 'repro-shard-dotdot', json.dumps({
    'weight_map': {'a': 'a.safetensors', 'b': '../x'}}))
put('safetensors-index', 'repro-weight-map-not-object',
    '{"weight_map": [1, 2]}')

# ---- npy ----
put('npy', 'seed-f32-2x3', npy('<f4', [2, 3]))
put('npy', 'seed-f64-fortran', npy('<f8', [3, 2], fortran=True))
put('npy', 'seed-i64-v2', npy('<i8', [4], version=2))
put('npy', 'seed-f16-scalar', npy('<f2', []))

# ---- poses: a 16-bit length of poses.npy, it, then intrinsics.npy ----
def poses_input(p, k):
    return struct.pack('<H', len(p)) + p + k


eye = [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]
p2 = npy('<f4', [2, 4, 4], data=f32(eye + eye))
put('poses', 'seed-two-poses-no-intrinsics', poses_input(p2, b''))
put('poses', 'seed-two-poses-intrinsics',
    poses_input(p2, npy('<f4', [2, 4], data=f32([500, 500, 416, 240] * 2))))
put('poses', 'seed-f64-pose-one-row',
    poses_input(npy('<f8', [1, 4, 4], data=struct.pack('<16d', *eye)),
                npy('<f4', [4], data=f32([500, 500, 416, 240]))))

# ---- control trace ----
with open(os.path.join('tests', 'data', 'gst', 'trace.json'), 'rb') as f:
    put('control-trace', 'seed-trace', f.read())
put('control-trace', 'seed-live-keys', json.dumps({'events': [
    {'delay_s': 0, 'message': {'type': 'control', 'key': 'KeyW',
                               'action': 'press'}},
    {'delay_s': 0.25, 'message': {'type': 'control', 'key': 'KeyA',
                                  'action': 'press'}},
    {'delay_s': 2, 'message': {'type': 'control', 'key': 'KeyW',
                               'action': 'release'}}]}))
put('control-trace', 'repro-events-number', '{"events": 3}')

# ---- JPEG ----
with open(os.path.join('tests', 'data', 'gpu-start.jpg'), 'rb') as f:
    jpg = f.read()
put('jpeg', 'seed-gpu-start', jpg)
sof = jpg.find(b'\xff\xc0')
assert sof > 0
big = bytearray(jpg)
# SOF0: marker, length (2), precision (1), height (2), width (2)
big[sof + 5:sof + 9] = struct.pack('>HH', 60000, 60000)
put('jpeg', 'repro-sof0-60000x60000', bytes(big))

# ---- SentencePiece: tiny models spm_train writes (identity normaliser:
# no 230 KB NFKC table) ----
spm_dir = tempfile.mkdtemp()
try:
    text = os.path.join(spm_dir, 'c.txt')
    with open(text, 'w') as f:
        f.write('the quick brown fox jumps over the lazy dog\n'
                'a red fox and a dog walk twelve km\nthe dog sleeps\n')
    for kind in ('unigram', 'bpe', 'char'):
        # spm_train's output differs run to run: keep committed models
        if os.path.exists(os.path.join(ROOT, 'spm', 'seed-' + kind)):
            continue
        prefix = os.path.join(spm_dir, kind)
        subprocess.run(['spm_train', '--input=' + text,
                        '--model_prefix=' + prefix, '--vocab_size=40',
                        '--model_type=' + kind, '--character_coverage=1.0',
                        '--hard_vocab_limit=false',
                        '--normalization_rule_name=identity'],
                       check=True, capture_output=True)
        with open(prefix + '.model', 'rb') as f:
            put('spm', 'seed-' + kind, f.read())
finally:
    shutil.rmtree(spm_dir)
put('spm', 'seed-empty', b'')

# ---- WebRTC signalling and data channel ----
sdp = ('v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n'
       'm=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\n'
       'a=rtpmap:96 VP8/90000\r\na=mid:video0\r\n')
put('webrtc-signalling', 'seed-answer',
    json.dumps({'type': 'answer', 'sdp': sdp}))
put('webrtc-signalling', 'seed-answer-rejected-video',
    json.dumps({'type': 'answer', 'sdp': sdp.replace('video 9', 'video 0')}))
put('webrtc-signalling', 'seed-ice', json.dumps({
    'type': 'ice', 'sdpMLineIndex': 0,
    'candidate': 'candidate:1 1 udp 2122260223 abcd.local 54321 typ host'}))
put('webrtc-signalling', 'seed-bye', '{"type":"bye"}')
put('webrtc-signalling', 'seed-not-object', '[1]')
put('webrtc-channel', 'seed-request-keypress', json.dumps({
    'id': 7, 'request': {'type': 'navigationEvent', 'event': {
        'event': 'KeyPress', 'key': 'Up', 'modifier_state': ''}}}))
put('webrtc-channel', 'seed-bare-keyrelease',
    '{"event":"KeyRelease","key":"KeyW"}')
put('webrtc-channel', 'seed-mouse', '{"event":"MouseMove","x":1,"y":2}')
put('webrtc-channel', 'seed-request-not-object', '{"request":5}')

# ---- pth: the fixtures of tests/data/fixtures, and reproducers made from
# tiny_state_dict.pth ----
with open(os.path.join('tests', 'data', 'fixtures', 'tiny_state_dict.pth'),
          'rb') as f:
    pth = f.read()
for fx in ('tiny_state_dict', 'tiny_state_dict_deflated',
           'nested_state_dict', 'wrapped_state_dict'):
    with open(os.path.join('tests', 'data', 'fixtures', fx + '.pth'),
              'rb') as f:
        put('pth', 'seed-' + fx.replace('_', '-'), f.read())


def central_entries(z):
    """(offset of the central directory header, name) of each entry"""
    at = z.find(b'PK\x01\x02')
    while at >= 0:
        n, m, k = struct.unpack_from('<HHH', z, at + 28)
        yield at, z[at + 46:at + 46 + n].decode()
        at = z.find(b'PK\x01\x02', at + 46 + n + m + k)


def patch_sizes(z, key, size):
    """the central directory's sizes of storage record data/KEY set to
    SIZE (compressed and uncompressed; the record itself unchanged)"""
    z = bytearray(z)
    for at, name in central_entries(z):
        if name.endswith('/data/' + key):
            struct.pack_into('<II', z, at + 20, size, size)
            return bytes(z)
    raise KeyError(key)


rec0 = [n for _, n in central_entries(pth) if n.endswith('/data/0')]
assert rec0, 'no data/0 record'
size0 = None
for at, name in central_entries(pth):
    if name == rec0[0]:
        size0 = struct.unpack_from('<I', pth, at + 24)[0]
put('pth', 'repro-central-size-beyond-record',
    patch_sizes(pth, '0', size0 + 4096))

# ---- npy reproducers ----
# an empty shape whose other extents overflow every stride computation
put('npy', 'repro-empty-shape-stride-overflow',
    npy('<f4', [0, 7774777772777777777, 1, 2], data=b''))

# one storage record seen as uint8, then float32: mapped in place for the
# first (the record at an odd offset), the second got a misaligned float
# pointer (the pickle is test-checkpoint-pth.c's two_dtype_pickle())
two_dtype_pkl = (
    b'\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01'
    b'ctorch._utils\n_rebuild_tensor_v2\nq\x02('
    b'(X\x07\x00\x00\x00storageq\x03ctorch\nByteStorage\nq\x04'
    b'X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06K\x08'
    b'tq\x07QK\x00K\x08\x85K\x01\x85\x89'
    b'ccollections\nOrderedDict\nq\x08)Rq\x09tq\x0aRq\x0b'
    b'X\x01\x00\x00\x00bq\x0ch\x02('
    b'(h\x03ctorch\nFloatStorage\nq\x0dh\x05h\x06K\x02'
    b'tq\x0eQK\x00K\x02\x85K\x01\x85\x89h\x08)Rq\x0ftq\x10Rq\x11u.')


def stored_zip(entries):
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, 'w', zipfile.ZIP_STORED) as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            z.writestr(info, data)
    return buf.getvalue()


for prefix in ('a', 'ab', 'abc', 'abcd'):
    z = stored_zip([(prefix + '/data.pkl', two_dtype_pkl),
                    (prefix + '/data/0', bytes(range(1, 9)))])
    at = z.find(bytes(range(1, 9)))
    if at % 4 != 0:
        break
assert at % 4 != 0
put('pth', 'repro-storage-two-dtypes', z)

# the central directory declares 3 GiB for storage record data/0 (12
# floats): that size reached g_try_malloc before any check
put('pth', 'repro-record-size-3gib', patch_sizes(pth, '0', 3 << 30))
# an empty SDP: gst_sdp_message_parse_buffer() asserted (g_critical)
put('webrtc-signalling', 'repro-answer-empty-sdp',
    '{"type":"answer","sdp":""}')

# ---- WebRTC: more messages for the server's checks ----
put('webrtc-signalling', 'seed-answer-h264',
    '{"type":"answer","sdp":"v=0\\r\\no=- 1 1 IN IP4 0.0.0.0\\r\\ns=-\\r\\n'
    't=0 0\\r\\nm=video 9 UDP/TLS/RTP/SAVPF 102\\r\\n"}')
put('webrtc-signalling', 'seed-ice-mdns', json.dumps({
    'type': 'ice', 'sdpMLineIndex': 0,
    'candidate': 'candidate:2712353452 1 udp 2122260223 '
                 '8c5e1b0e-5b1a-4f4e-9d0c-1f2e3d4c5b6a.local. 51234 typ host'}))
put('webrtc-signalling', 'seed-ice-end',
    '{"type":"ice","candidate":"","sdpMLineIndex":0}')
put('webrtc-signalling', 'seed-offer', '{"type":"offer","sdp":"v=0"}')
put('webrtc-signalling', 'seed-not-json', '{"type":"answer",')
put('webrtc-signalling', 'seed-invalid-utf8', b'{"type":"\xc3\x28"}')
put('webrtc-signalling', 'seed-deep-nesting', '[' * 4000 + ']' * 4000)
put('webrtc-channel', 'seed-bare-keypress-id',
    '{"event":"KeyPress","key":"Up","modifier_state":"","id":17}')
put('webrtc-channel', 'seed-request-unknown-type',
    '{"id":5,"request":{"type":"customUpstreamEvent"}}')
put('webrtc-channel', 'seed-key-too-long',
    '{"event":"KeyPress","key":"%s"}' % ('x' * 65))
put('webrtc-channel', 'seed-key-invalid-utf8',
    b'{"event":"KeyPress","key":"\xff\xfe"}')
put('webrtc-channel', 'seed-touch', '{"event":"TouchDown","identifier":1}')
put('webrtc-channel', 'seed-type-on-control', '{"type":"hello"}')


# ---- the WebSocket size guard: limit (u16 LE), read seed, client bytes ----
def ws_frame(opcode, length, fin=True, masked=True, payload=None):
    h = bytes([(0x80 if fin else 0) | opcode])
    m = 0x80 if masked else 0
    if length < 126:
        h += bytes([m | length])
    elif length <= 0xffff:
        h += bytes([m | 126]) + struct.pack('>H', length)
    else:
        h += bytes([m | 127]) + struct.pack('>Q', length)
    if masked:
        h += b'\x01\x02\x03\x04'
    if payload is None:
        payload = bytes(min(length, 4096))
    return h + payload


def guard_input(limit, seed, frames):
    return struct.pack('<H', limit) + bytes([seed]) + b''.join(frames)


put('ws-guard', 'seed-three-fragments-tripped', guard_input(250, 1, [
    ws_frame(1, 100, fin=False), ws_frame(0, 100, fin=False),
    ws_frame(0, 100)]))
put('ws-guard', 'seed-fragments-pings-within', guard_input(300, 2, [
    ws_frame(1, 100, fin=False), ws_frame(9, 125),
    ws_frame(0, 100, fin=False), ws_frame(10, 0), ws_frame(0, 100),
    ws_frame(2, 300)]))
put('ws-guard', 'seed-64bit-length', guard_input(1000, 3, [
    ws_frame(2, 1 << 40, payload=b'')]))
put('ws-guard', 'seed-16bit-length-unmasked', guard_input(65535, 4, [
    ws_frame(1, 1000, masked=False), ws_frame(8, 2, payload=b'\x03\xe8')]))
put('ws-guard', 'seed-zero-limit', guard_input(0, 5, [
    ws_frame(9, 0), ws_frame(1, 0), ws_frame(1, 1)]))
put('ws-guard', 'seed-not-frames',
    struct.pack('<H', 64) + b'\x06GET / HTTP/1.1\r\nHost: x\r\n\r\n')


# a frame that trips at the first byte of a synchronous read: the guard's
# read said "end of stream" (0) instead of an error; the seed makes the
# harness's first read synchronous and at least 6 bytes long
def first_read(seed):
    rng = (0x9e3779b9 ^ seed) & 0xffffffff
    rng = (rng * 1664525 + 1013904223) & 0xffffffff
    return 1 + (rng >> 8) % 4096, (rng >> 4) & 1


sync_seed = next(s for s in range(256)
                 if first_read(s)[1] == 0 and first_read(s)[0] >= 6)
put('ws-guard', 'repro-sync-read-stops-at-header',
    guard_input(10, sync_seed, [ws_frame(1, 100)]))

# ---- the static-file resolver: request paths, still percent-encoded ----
paths = {
    'seed-root': '/', 'seed-index': '/index.html',
    'seed-sub-page': '/sub/page.html', 'seed-link-inside': '/inside',
    'seed-dotdot': '/../secret.txt', 'seed-dotdot-sub': '/sub/../../secret.txt',
    'seed-encoded-dots': '/%2e%2e/secret.txt',
    'seed-encoded-dots-upper-slash': '/%2E%2E%2fsecret.txt',
    'seed-half-encoded-dots': '/.%2e/.%2e/secret.txt',
    'seed-double-encoded-dots': '/%252e%252e/secret.txt',
    'seed-encoded-backslash': '/..%5csecret.txt',
    'seed-backslash': '/..\\secret.txt',
    'seed-encoded-nul': '/%00', 'seed-nul-before-suffix': '/index.html%00.js',
    'seed-overlong-utf8-dots': '/%c0%ae%c0%ae/secret.txt',
    'seed-overlong-utf8-dots-3': '/%e0%80%ae%e0%80%ae/secret.txt',
    'seed-link-out': '/out', 'seed-link-to-parent': '/subdir-out/secret.txt',
    'seed-hidden': '/.hidden', 'seed-encoded-hidden': '/%2ehidden',
    'seed-double-slash': '//etc/passwd',
    'seed-encoded-slashes': '/%2fetc%2fpasswd',
    'seed-bad-escapes': '/%zz/%/%2', 'seed-relative': 'index.html',
    'seed-long-name': '/' + 'x' * 300,
    'seed-overlong-path': '/' + 'a/' * 6000 + 'index.html',
    'seed-dot-segments': '/./sub/./page.html',
}
for fname, path in paths.items():
    put('webrtc-path', fname, path)
put('webrtc-path', 'seed-raw-nul', b'/index.html\x00/../secret.txt')
