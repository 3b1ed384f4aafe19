"""How long rescoring under every readout takes: 9,000 records, a real answer file, and a million records from records.jsonl
and from its Parquet export.

Uses real records: the built-in demo's run (9,000 questions of the shipped tiny VLM, with logits of every candidate
id and decoded text, so all nine readouts apply), made first if needed. Also times LLaVA-1.5-13B's real answer file
(8,910 text answers) joined to LLaVA's question files. Prints the medians of the repetitions, CPU time beside wall time.

    python benchmarks/rescore_speed.py [--demo-dir pope-demo] [--repeat 3]

The last lines stream a million records (the demo's, repeated under new ids `{id}-{k}`) through every readout and score
them (no intervals), from records.jsonl and from the Parquet export of the same records, each run in a fresh process:
wall time, CPU seconds (the process and its workers), peak resident memory, and the ratio to reading the file alone
(every line through `json.loads` in the same workers; the Parquet columns the scorer reads), which is the floor. The
machine's load average is printed beside each, since on a shared machine wall time follows it and CPU time does not.
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument('--demo-dir', default='/tmp/pope-demo-bench')
p.add_argument('--repeat', type=int, default=3, help='repetitions of each timing (medians are printed)')
p.add_argument('--records', type=int, default=1_000_000, help='records in the large file')
a = p.parse_args()
run = Path(a.demo_dir)/'run'
if not (run/'records.jsonl').exists():
    from pope_audit.interface.demo import demo
    demo(a.demo_dir, progress=False)


def timed(fn, n=a.repeat):
    "Medians of wall and CPU seconds of `fn()` over `n` calls, and its last result."
    ws, cs = [], []
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn(); ws.append(time.perf_counter() - w0); cs.append(time.process_time() - c0)
    return statistics.median(ws), statistics.median(cs), out


from pope_audit.foundation.core import shared_dir
from pope_audit.foundation.data import read_llava_questions
from pope_audit.benchmarks.scoring import read_records, read_llava_answers, score_records
w, c, st = timed(lambda: score_records(read_records(run)))
print(f'{st.readout.nunique()} readouts x {len(read_records(run))} records (read + score): {w:.2f} s wall, {c:.2f} s CPU (load {os.getloadavg()[0]:.1f})')
sh = shared_dir(required=True)
qs = read_llava_questions(sh/'data/pope/llava/llava_pope_test.jsonl', sh/'data/pope/llava/coco')
w, c, st2 = timed(lambda: score_records(read_llava_answers(sh/'data/pope/llava/answers/llava-v1.5-13b.jsonl', qs)))
print(f'{st2.readout.nunique()} readouts x 8910 LLaVA-1.5-13B answers (read + join + score): {w:.2f} s wall, {c:.2f} s CPU (load {os.getloadavg()[0]:.1f})')


# A million records: the demo's records repeated under new question ids (a hundred-odd runs kept together).
work = Path(tempfile.mkdtemp())
big, big_pq = work/'records.jsonl', work/'records.parquet'
lines = (run/'records.jsonl').read_bytes().split(b'\n')[:-1]
qid = re.compile(rb'"question_id": ("[^"]*"|[^,]+),')
n_big, k = 0, 0
with open(big, 'wb') as f:                    # the id rewritten in the bytes: the same file json.dumps would write, made faster
    while n_big < a.records:
        part = []
        for l in lines[:a.records - n_big]:
            m = qid.search(l); q = json.loads(m.group(1))
            part.append(l[:m.start(1)] + json.dumps(f'{q}-{k}').encode() + l[m.end(1):])
        f.write(b'\n'.join(part) + b'\n'); n_big += len(part); k += 1

# Its Parquet export: the demo's records exported once, then repeated with the same ids, in the export's row groups.
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
from pope_audit.running.stream import export_parquet, parquet_schema
small = pq.read_table(export_parquet(run, work/'demo.parquet'))
with pq.ParquetWriter(big_pq, parquet_schema()) as wr:
    done, k, rest = 0, 0, small.slice(0, 0)
    while done < a.records:
        t = small.slice(0, a.records - done)
        t = t.set_column(t.schema.get_field_index('question_id'), 'question_id', pc.binary_join_element_wise(t['question_id'], pa.scalar(f'{k}'), '-'))
        rest = pa.concat_tables([rest, t]); done += len(t); k += 1
        while len(rest) >= 50_000 or (done == a.records and len(rest)):
            wr.write_table(rest.slice(0, 50_000)); rest = rest.slice(50_000)

CHILD = """
import resource, sys, time
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
path, what = sys.argv[1], sys.argv[2]
w0, c0 = time.perf_counter(), cpu()
if what == 'score':
    from pope_audit.running.stream import stream_predictions
    from pope_audit.benchmarks.scoring import score_predictions
    preds = stream_predictions(path); score_predictions(preds); n = len(preds)
elif path.endswith('.parquet'):
    import pyarrow.parquet as pq
    n = pq.read_table(path, columns=['split', 'question_id', 'label', 'schema', 'logit_ids', 'logit_values', 'derived', 'surface', 'greedy_id', 'text']).num_rows
else:
    import json, os
    from concurrent.futures import ProcessPoolExecutor
    from pope_audit.running.stream import line_ranges
    from pope_audit.running.runconfig import usable_cpus
    def read(job):
        with open(job[0], 'rb') as f:
            f.seek(job[1]); return sum(1 for l in f.read(job[2] - job[1]).split(b'\\n')[:-1] if json.loads(l))
    workers = min(8, usable_cpus())
    with ProcessPoolExecutor(workers) as ex: n = sum(ex.map(read, [(path, s, e) for s, e, _ in line_ranges(path, workers * 4)]))
wall, c = time.perf_counter() - w0, cpu()
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 2**20
print(n, wall, c - c0, peak)
"""


def fresh(path, what):
    "Wall, CPU, peak GB and rows of one fresh process reading or scoring `path`."
    out = subprocess.run([sys.executable, '-c', CHILD, str(path), what], capture_output=True, text=True, check=True).stdout.split()
    return float(out[1]), float(out[2]), float(out[3]), int(out[0])


def measure(path, what):
    load0 = os.getloadavg()[0]
    runs = [fresh(path, what) for _ in range(a.repeat)]
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), max(r[2] for r in runs), runs[0][3],
            load0, os.getloadavg()[0])


for name, path in (('records.jsonl', big), ('Parquet export', big_pq)):
    fw, fc, _, _, _, _ = measure(path, 'read')
    w, c, peak, n, l0, l1 = measure(path, 'score')
    print(f'{n} records x every readout from {name} ({path.stat().st_size / 2**20:.0f} MB), streamed and scored: {w:.1f} s wall, {c:.1f} s CPU, '
          f'peak memory {peak:.2f} GB; reading the file alone {fw:.1f} s wall, {fc:.1f} s CPU (ratio {w / fw:.2f} wall, {c / fc:.2f} CPU); '
          f'load {l0:.1f} -> {l1:.1f} on {len(os.sched_getaffinity(0))} CPUs; medians of {a.repeat}')
for f in work.iterdir(): f.unlink()
work.rmdir()
