#!/usr/bin/env python3
"""cmp_tp.py ONE.json ONE_CKPT TP.json... TP_CKPT — losses per step and every parameter of a TP run
against the one-rank run; TP ranks' losses against each other (bitwise)."""
import json, struct, sys
import numpy as np

def st(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); base = 8 + n; out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        a, z = v['data_offsets']; raw = b[base + a: base + z]
        if v['dtype'] == 'BF16':
            x = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif v['dtype'] == 'F32':
            x = np.frombuffer(raw, np.float32)
        else:
            continue
        out[k] = x
    return out

def losses(p):
    d = json.load(open(p)); return d, [(s['loss'], s['grad_norm']) for s in d['steps']]

one_j, one_ck, tp_js, tp_ck = sys.argv[1], sys.argv[2], sys.argv[3:-1], sys.argv[-1]
d1, l1 = losses(one_j)
ds = [losses(p) for p in tp_js]
for r, (d, l) in enumerate(ds[1:], 1):
    print('rank %d losses == rank 0 bitwise:' % r, l == ds[0][1])
worst = 0
for k, ((a, ga), (b, gb)) in enumerate(zip(l1, ds[0][1])):
    rel = abs(a - b) / abs(a); worst = max(worst, rel)
    print('step %d loss one %.7f tp %.7f rel %.2e | grad_norm %.5f %.5f' % (k + 1, a, b, rel, ga, gb))
print('largest loss difference %.2e relative' % worst)
for r, (d, l) in enumerate(ds):
    m = d['measure']
    print('rank %d max allocated %d predicted %d (%+.4f%%) mode %s' % (r, m['max_allocated_bytes'], m['predicted_peak_bytes'],
          100.0 * (m['max_allocated_bytes'] - m['predicted_peak_bytes']) / m['predicted_peak_bytes'], d.get('mode')))
import os
if not os.path.exists(one_ck + '/model.safetensors'):
    sys.exit(0)
a, b = st(one_ck + '/model.safetensors'), st(tp_ck + '/model.safetensors')
assert set(a) == set(b), (sorted(set(a) ^ set(b)))[:5]
big, where, n = 0, '', 0
for k in a:
    diff = float(np.max(np.abs(a[k] - b[k]))) if a[k].size else 0; n += a[k].size
    if diff > big: big, where = diff, k
print('params: %d tensors, %d values, largest |one - tp| %.3e in %s' % (len(a), n, big, where))
