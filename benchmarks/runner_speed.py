"""The paper's per-question loop against our runner, interleaved, on POPE's real 9,000-question structure.

The three official POPE files from the shared folder, one stand-in picture per image name (640x480), and the tiny
LLaVA-1.5 at real token geometry (576 image tokens, the real LLaMA tokenizer). The naive loop is the paper's method:
per question, open the image, run the processor on the full prompt, `generate(max_new_tokens=1)`. Ours is the engine
the runner uses (`Engine.answer`, first-step only: `max_new_tokens=1`), so both do the same work per question.

A machine whose load changes between two long phases fools a before/after timing (it once printed 128.85, ten times
the usual ratio). So the two methods are interleaved: the images are cut into chunks, and each chunk is timed with
both methods back to back (which goes first alternates), in wall time and in process CPU time. The ratio is of the
medians of the per-question times over chunks, so a load change hits both sides of the same chunks alike.

Torch runs the thread count the runner would choose (`choose_threads`: the usable cores less those other work keeps
busy), both sides alike. With a thread team as wide as the machine, another job on one core stalls every parallel
kernel at its barrier, and the naive loop (many small kernels) stalls far more than the batched engine: on the 2-core
development machine, the ratio went from 14.28 idle to 68.81 under load with two threads, against 12.34 idle and 12.67
with two busy processes beside it with one thread. `benchmarks/thread_speed.py` compares the two thread counts.

    python benchmarks/runner_speed.py                  # all 9,000 questions (minutes)
    python benchmarks/runner_speed.py --limit 300      # the first 300 of each split
    python benchmarks/runner_speed.py --processes 2    # also: one process against N processes (pope-audit run --processes)

The last line keeps its format: `ratio naive/ours = X over N questions; decisions identical: yes`.
"""
import argparse, statistics, subprocess, sys, tempfile, time
from pathlib import Path
import torch
from PIL import Image
from tqdm.auto import tqdm
from pope_audit.foundation.core import shared_dir
from pope_audit.foundation.data import read_pope_files
from pope_audit.models.engine import Engine, reference_logits
from pope_audit.running.inference import plan
from pope_audit.models.adapters import Llava15
from pope_audit.models.tiny import tiny_llava15, stand_in_images

p = argparse.ArgumentParser()
p.add_argument('--limit', type=int, help='first N questions of each split')
p.add_argument('--batch-size', type=int, default=8)
p.add_argument('--chunk', type=int, default=10, help='images per interleaved chunk')
p.add_argument('--threads', type=int, help="torch threads (default: the runner's automatic choice; 0: leave as torch chose)")
p.add_argument('--processes', type=int, default=0, help='also compare 1 process with N processes through `pope-audit run`')
a = p.parse_args()
from pope_audit.running.runconfig import choose_threads
if a.threads != 0: torch.set_num_threads(choose_threads(a.threads, 1)[0])

qs = read_pope_files([shared_dir(required=True)/'data/pope/coco'])
if a.limit: qs = qs.groupby('split').head(a.limit).reset_index(drop=True)
work = Path(tempfile.mkdtemp())
images = stand_in_images(qs.image.unique(), work/'images')
family = Llava15(*tiny_llava15())
engine = Engine(family)
pl = plan(qs)
print(f'{len(qs)} questions, {len(pl)} images, {sum(len(t) for _, t, _ in pl)} distinct (image, question) pairs; '
      f'chunks of {a.chunk} images; threads {torch.get_num_threads()}; load {__import__("os").getloadavg()[0]:.1f}')


def ours(chunk):
    "The engine: each image's distinct questions once, written to every row that asks them."
    out = {}
    for image, texts, rows in chunk:
        res = engine.answer(Image.open(images/image).convert('RGB'), texts, a.batch_size, max_new_tokens=1, topk=1)
        for r, ix in zip(res, rows):
            for i in ix: out[i] = r
    return out


def naive(chunk):
    "The paper's loop: one generate per question row."
    out = {}
    for image, texts, rows in chunk:
        for t, ix in zip(texts, rows):
            for i in ix: out[i] = reference_logits(family, Image.open(images/image).convert('RGB'), t)
    return out


def timed(fn, chunk):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(chunk)
    return out, time.perf_counter() - w0, time.process_time() - c0


per = {'ours': [], 'naive': []}
cpu = {'ours': [], 'naive': []}
same, worst = True, 0.0
chunks = [pl[i:i + a.chunk] for i in range(0, len(pl), a.chunk)]
with torch.no_grad():
    for k, chunk in enumerate(tqdm(chunks, unit='chunk', desc='interleaved')):
        n = sum(len(ix) for _, _, rows in chunk for ix in rows)
        order = [('ours', ours), ('naive', naive)] if k % 2 == 0 else [('naive', naive), ('ours', ours)]
        res = {}
        for name, fn in order:
            res[name], w, c = timed(fn, chunk)
            per[name].append(w / n); cpu[name].append(c / n)
        for i, logits in res['naive'].items():
            r = res['ours'][i]
            same &= r['greedy_id'] == int(logits.argmax())
            worst = max(worst, max(abs(v - float(logits[j])) for j, v in r['logits'].items()))
med = {k: statistics.median(v) for k, v in per.items()}
medc = {k: statistics.median(v) for k, v in cpu.items()}
print(f'median per question: naive {med["naive"] * 1000:.2f} ms wall / {medc["naive"] * 1000:.2f} ms CPU, '
      f'ours {med["ours"] * 1000:.2f} ms wall / {medc["ours"] * 1000:.2f} ms CPU; largest logit difference {worst:.2e}')
print(f'ratio of CPU-time medians naive/ours = {medc["naive"] / medc["ours"]:.2f}')

if a.processes > 1:
    def cli_run(out, *extra):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, '-m', 'pope_audit.interface.cli', 'run', '--model', str(work/'model'), '--questions', str(work/'q'),
                        '--images', str(images), '--batch-size', str(a.batch_size), '--max-new-tokens', '1', '--out', str(out), *extra],
                       check=True, capture_output=True)
        return time.perf_counter() - t0
    from pope_audit.benchmarks.builder import write_pope
    from pope_audit.models.tiny import save_tiny
    save_tiny('llava15', work/'model'); write_pope(qs, work/'q', prefix='coco_pope')
    t1, tn = cli_run(work/'one'), cli_run(work/'many', '--processes', str(a.processes))
    identical = (work/'one'/'records.jsonl').read_bytes() == (work/'many'/'records.jsonl').read_bytes()
    print(f'ratio 1 process / {a.processes} processes = {t1 / tn:.2f} over {len(qs)} questions; records identical: {"yes" if identical else "no"}')

print(f'ratio naive/ours = {med["naive"] / med["ours"]:.2f} over {len(qs)} questions; decisions identical: {"yes" if same else "no"}')
