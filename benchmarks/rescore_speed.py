"""How long rescoring 9,000 records under every readout takes: read records.jsonl, apply all readouts, score per split.

Uses real records: the built-in demo's run (9,000 questions of the shipped tiny VLM, with logits of every candidate
id and decoded text, so all nine readouts apply), made first if needed. Also times LLaVA-1.5-13B's real answer file
(8,910 text answers) joined to LLaVA's question files. Prints the median of five repetitions of each.

    python benchmarks/rescore_speed.py [--demo-dir pope-demo]
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
