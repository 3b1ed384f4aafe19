"""The paper's per-question loop against our runner, side by side, on POPE's real 9,000-question structure.

The three official POPE files from the shared folder, one stand-in picture per image name (640x480), and the tiny
LLaVA-1.5 at real token geometry (576 image tokens, the real LLaMA tokenizer). The naive loop is the paper's method:
per question, open the image, run the processor on the full prompt, `generate(max_new_tokens=1)`. Ours is
`pope_audit.inference.run` with first-token scoring only (`max_new_tokens=1`), so both do the same work per question.
The last line is the ratio of wall-clock times measured in this one process, and whether every greedy decision
matches.

    python benchmarks/runner_speed.py                 # all 9,000 questions (minutes)
    python benchmarks/runner_speed.py --limit 300     # the first 300 of each split
"""
import argparse, tempfile, time
from pathlib import Path
import torch
from PIL import Image
from tqdm.auto import tqdm
from pope_audit.core import shared_dir
from pope_audit.data import read_pope_files
from pope_audit.inference import run, reference_logits
from pope_audit.models import Llava15
from pope_audit.readouts import READOUTS
from pope_audit.scoring import read_records
from pope_audit.tiny import tiny_llava15, stand_in_images

p = argparse.ArgumentParser()
p.add_argument('--limit', type=int, help='first N questions of each split')
p.add_argument('--batch-size', type=int, default=8)
p.add_argument('--threads', type=int, default=0, help='torch threads (0: leave as is)')
a = p.parse_args()
if a.threads: torch.set_num_threads(a.threads)

qs = read_pope_files([shared_dir(required=True)/'data/pope/coco'])
if a.limit: qs = qs.groupby('split').head(a.limit).reset_index(drop=True)
work = Path(tempfile.mkdtemp())
images = stand_in_images(qs.image.unique(), work/'images')
adapter = Llava15(*tiny_llava15())
print(f'{len(qs)} questions, {qs.image.nunique()} images, {len(qs[["image", "question"]].drop_duplicates())} distinct (image, question) pairs')

t0 = time.perf_counter()
out = run(adapter, qs, images, work/'run', batch_size=a.batch_size, max_new_tokens=1, topk=1)
t_ours = time.perf_counter() - t0
ours = {(r.split, r.question_id): r for r in read_records(out)}

t0 = time.perf_counter()
naive = {}
with torch.no_grad():
    for q in tqdm(qs.itertuples(), total=len(qs), unit='q', desc='naive, per question'):
        image = Image.open(images/q.image).convert('RGB')
        naive[q.split, q.question_id] = reference_logits(adapter, image, q.question)
t_naive = time.perf_counter() - t0

same, worst = True, 0.0
for k, logits in naive.items():
    r = ours[k]
    same &= r.greedy_id == int(logits.argmax())
    same &= READOUTS['derived'](r) == ('yes' if max(logits[i] for i in r.derived['yes']) >= max(logits[i] for i in r.derived['no']) else 'no')
    worst = max(worst, max(abs(v - float(logits[i])) for i, v in r.logits.items()))
print(f'naive {t_naive:.1f} s ({t_naive / len(qs) * 1000:.1f} ms/question), ours {t_ours:.1f} s ({t_ours / len(qs) * 1000:.1f} ms/question); '
      f'largest logit difference {worst:.2e}; threads {torch.get_num_threads()}')
print(f'ratio naive/ours = {t_naive / t_ours:.2f} over {len(qs)} questions; decisions identical: {"yes" if same else "no"}')
