"""How long a GGUF vocabulary takes to load, each way side by side in one run, each in a fresh process with an empty cache:
transformers' own GGUF path (`AutoTokenizer.from_pretrained(folder, gguf_file=...)`, which imports torch), the package's
conversion without torch (`load_tokenizer`, first load: transformers' conversion fed by `gguf_metadata`), and the
package's later loads (the pickled conversion).

Reports the child processes' CPU time (user + system) beside their wall time and the load while measured, and the
ratios of the medians.

    python benchmarks/gguf_load_speed.py [--file GGUF] [--n 3]
"""
import argparse, os, resource, statistics, subprocess, sys, tempfile, time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument('--file', default=str(Path(__file__).resolve().parents[2]/'shared'/'tokenizers'/'qwen2'/'ggml-vocab-qwen2.gguf'))
p.add_argument('--n', type=int, default=3, help='repetitions of each way')
a = p.parse_args()
f = Path(a.file)
WAYS = {
    "transformers' own GGUF reader (torch)": f"from transformers import AutoTokenizer; AutoTokenizer.from_pretrained({str(f.parent)!r}, gguf_file={f.name!r})",
    'load_tokenizer, first load (no torch)': f"import sys; sys.modules['torch'] = None\nfrom pope_audit.foundation.tokens import load_tokenizer; load_tokenizer({str(f)!r})",
    'load_tokenizer, later loads (pickled)': f"import sys; sys.modules['torch'] = None\nfrom pope_audit.foundation.tokens import load_tokenizer; load_tokenizer({str(f)!r})",
}


def one(code, cache):
    "Wall and CPU seconds of one fresh interpreter running `code` with `cache` as the package's cache."
    r0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, '-c', code], check=True, capture_output=True, env={**os.environ, 'POPE_AUDIT_CACHE': cache})
    w, r1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return w, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


res = {}
for i in range(a.n):
    with tempfile.TemporaryDirectory() as cache:               # each round: an empty cache, filled by the first load
        for name, code in WAYS.items(): res.setdefault(name, []).append((*one(code, cache), os.getloadavg()[0]))
print(f'{f.name}, medians of {a.n} fresh processes each:')
for name, runs in res.items():
    print(f'  {name:40s} wall {statistics.median(w for w, _, _ in runs):6.2f} s   CPU {statistics.median(c for _, c, _ in runs):6.2f} s   '
          f'load {min(l for *_, l in runs):.1f}-{max(l for *_, l in runs):.1f}')
(wt, ct), (wf, cf), (wl, cl) = [(statistics.median(w for w, _, _ in r), statistics.median(c for _, c, _ in r)) for r in res.values()]
print(f'first load without torch / transformers\' own: {wf / wt:.2f}x wall, {cf / ct:.2f}x CPU; '
      f'later loads / transformers\' own: {wl / wt:.2f}x wall, {cl / ct:.2f}x CPU')
