"""How long rescoring 9,000 records under every readout takes: read records.jsonl, apply all readouts, score per split.

Uses real records: the built-in demo's run (9,000 questions of the shipped tiny VLM, with logits of every candidate
id and decoded text, so all nine readouts apply), made first if needed. Also times LLaVA-1.5-13B's real answer file
(8,910 text answers) joined to LLaVA's question files. Prints the median of five repetitions of each.

    python benchmarks/rescore_speed.py [--demo-dir pope-demo]

The last line streams a million records (the demo's, repeated under new ids) and reports time and peak memory.
"""
import argparse, statistics, time
from pathlib import Path
from pope_audit.core import shared_dir
from pope_audit.data import read_llava_questions
from pope_audit.scoring import read_records, read_llava_answers, score_records

p = argparse.ArgumentParser()
p.add_argument('--demo-dir', default='/tmp/pope-demo-bench')
a = p.parse_args()
run = Path(a.demo_dir)/'run'
if not (run/'records.jsonl').exists():
    from pope_audit.demo import demo
    demo(a.demo_dir, progress=False)


def timed(fn, n=5):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); out = fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


t, st = timed(lambda: score_records(read_records(run)))
print(f'{st.readout.nunique()} readouts x {len(read_records(run))} records (read + score): {t:.2f} s')
sh = shared_dir(required=True)
qs = read_llava_questions(sh/'data/pope/llava/llava_pope_test.jsonl', sh/'data/pope/llava/coco')
t2, st2 = timed(lambda: score_records(read_llava_answers(sh/'data/pope/llava/answers/llava-v1.5-13b.jsonl', qs)))
print(f'{st2.readout.nunique()} readouts x 8910 LLaVA-1.5-13B answers (read + join + score): {t2:.2f} s')


# A million records: the demo's records repeated under new question ids (a hundred-odd runs kept together), scored under
# every readout through the streaming reader. Peak memory is this process's and its workers' largest resident size.
import json, resource, tempfile
from pope_audit.stream import stream_predictions
from pope_audit.scoring import score_predictions
big = Path(tempfile.mkdtemp())/'records.jsonl'
lines = (run/'records.jsonl').read_text().splitlines()
n_big, k = 0, 0
with open(big, 'w') as f:
    while n_big < 1_000_000:
        for l in lines:
            o = json.loads(l); o['question_id'] = f"{o['question_id']}-{k}"
            f.write(json.dumps(o) + '\n'); n_big += 1
            if n_big == 1_000_000: break
        k += 1
t0 = time.perf_counter()
preds = stream_predictions(big)
st3 = score_predictions(preds)
t3 = time.perf_counter() - t0
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 2**20
print(f'{st3.readout.nunique()} readouts x {n_big} records, streamed (read + score): {t3:.1f} s, peak memory {peak:.2f} GB '
      f'({big.stat().st_size / 2**30:.2f} GB of records)')
big.unlink()
