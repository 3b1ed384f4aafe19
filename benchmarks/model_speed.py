"""Training and loading time of the shipped models side by side, in one run: the tiny VLMs trained from scratch and the VLM
around the real SmolLM2-135M-Instruct.

Training: the seconds each shipped model's `training.json` recorded (the run that made the shipped weights, with its
thread count), not re-measured here (minutes each; `--retrain` re-measures SmolLM2's by replaying its recorded calls in a scratch
folder, about an hour). Loading: each in a fresh process with an empty cache, the first load (assembly: for SmolLM2 the GGUF is checked,
de-quantised and built into LLaVA) and a later load (the cached folder), each to a `load_adapter` family ready to run.
Reports wall and CPU seconds, the load average while measured, and each model's ratio to the tiny LLaVA-1.5.

    python benchmarks/model_speed.py [--n 1] [--retrain]
"""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile, time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument('--n', type=int, default=1, help='repetitions of each load')
p.add_argument('--retrain', action='store_true', help="re-measure SmolLM2's training at the shipped settings")
a = p.parse_args()

from pope_audit.models.tinyvlm import ASSETS_ROOT, TRAINED
from pope_audit.models.smollm2 import ASSET
MODELS = {f'tiny-{f}': (f"from pope_audit.models.tinyvlm import tiny_vlm_dir as d; folder = d({f!r})", ASSETS_ROOT/TRAINED[f]) for f in TRAINED}
MODELS['smollm2 (real LM)'] = ("from pope_audit.models.smollm2 import smollm2_dir as d; folder = d()", ASSET)
LOAD = "\nfrom pope_audit.models.adapters import load_adapter; load_adapter(str(folder), device='cpu')"


def one(code, cache):
    "Wall and CPU seconds of a fresh interpreter running `code` with `cache` as the package's cache."
    r0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, '-c', code], check=True, capture_output=True, env={**os.environ, 'POPE_AUDIT_CACHE': cache, 'OMP_NUM_THREADS': '1'})
    w, r1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return w, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


rows, load0 = [], os.getloadavg()[0]
for name, (make, asset) in MODELS.items():
    info = json.loads((asset/'training.json').read_text())
    first, later = [], []
    for _ in range(a.n):
        with tempfile.TemporaryDirectory() as cache:
            first.append(one(make + LOAD, cache))
            later.append(one(make + LOAD, cache))
    rows.append(dict(model=name, train_s=info.get('train_seconds'), train_threads=info.get('threads'),
                     first_load_wall_s=statistics.median(w for w, _ in first), first_load_cpu_s=statistics.median(c for _, c in first),
                     later_load_wall_s=statistics.median(w for w, _ in later), later_load_cpu_s=statistics.median(c for _, c in later)))
if a.retrain:
    t0 = time.time()
    from pope_audit.models.smollm2 import replay_smollm2
    replay_smollm2()                                       # every recorded call, in order, with the thread count they ran with
    rows[-1]['train_s_now'] = round(time.time() - t0, 1)
import pandas as pd
t = pd.DataFrame(rows).set_index('model')
ref = t.loc['tiny-llava15']
for c in ('train_s', 'first_load_wall_s', 'later_load_wall_s'): t[c.replace('_s', '') + '_ratio'] = (t[c] / ref[c]).round(2)
print(f'load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores')
print(t.round(1).to_string())
