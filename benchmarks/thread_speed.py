"""The runner's automatic thread count against torch's default, on a machine kept busy by the benchmark itself.

The engine the runner uses (`Engine.answer`, first step only) on POPE's real questions with the tiny LLaVA-1.5 at real
token geometry (576 image tokens, one stand-in picture per image name). The benchmark starts `--load` busy processes
(default: one per usable core), waits for the load average to see them, then answers the same images in chunks,
each chunk twice back to back — once with the thread count the runner would choose (`choose_threads`: affinity,
cgroup quota, less the cores other work keeps busy), once with the count torch chose at start — alternating which goes
first. It prints the medians of the per-question wall and CPU time of each, their ratios, and checks that the two give
the same decisions and logits within 1e-5.

    python benchmarks/thread_speed.py [--limit 30] [--load 2] [--chunk 4]
"""
import argparse, multiprocessing as mp, os, statistics, time
import torch

DEFAULT = torch.get_num_threads()          # torch's own choice, before anything sets it
from PIL import Image
from pope_audit.foundation.core import shared_dir
from pope_audit.foundation.data import read_pope_files
from pope_audit.models.engine import Engine
from pope_audit.running.inference import plan
from pope_audit.models.adapters import Llava15
from pope_audit.running.runconfig import choose_threads, usable_cpus
from pope_audit.models.tiny import tiny_llava15, stand_in_images


def spin():
    "A competing job: one core kept busy."
    while True: pass


if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('--limit', type=int, default=30, help='first N questions of each split')
    p.add_argument('--load', type=int, default=None, help='busy processes to start (default: one per usable core)')
    p.add_argument('--chunk', type=int, default=4, help='images per interleaved chunk')
    p.add_argument('--settle', type=float, default=30, help='seconds for the load average to see the busy processes')
    p.add_argument('--batch-size', type=int, default=8)
    a = p.parse_args()
    import tempfile
    from pathlib import Path
    qs = read_pope_files([shared_dir(required=True)/'data/pope/coco']).groupby('split').head(a.limit).reset_index(drop=True)
    images = stand_in_images(qs.image.unique(), Path(tempfile.mkdtemp())/'images')
    engine = Engine(Llava15(*tiny_llava15()))
    pl = plan(qs)
    busy = [mp.Process(target=spin, daemon=True) for _ in range(a.load if a.load is not None else usable_cpus())]
    for b in busy: b.start()
    time.sleep(a.settle)
    os.environ.pop('OMP_NUM_THREADS', None)
    auto, _ = choose_threads(None, 1)
    load0 = os.getloadavg()[0]
    print(f'{len(qs)} questions, {len(pl)} images; {len(busy)} busy processes; load {load0:.1f}; threads: auto {auto}, torch default {DEFAULT}')

    def answer(chunk, threads):
        torch.set_num_threads(threads)
        w0, c0, out = time.perf_counter(), time.process_time(), []
        with torch.no_grad():
            for image, texts, rows in chunk:
                out += engine.answer(Image.open(images/image).convert('RGB'), texts, a.batch_size, max_new_tokens=1, topk=1)
        return out, time.perf_counter() - w0, time.process_time() - c0

    wall, cpu, same, worst = {'auto': [], 'default': []}, {'auto': [], 'default': []}, True, 0.0
    chunks = [pl[i:i + a.chunk] for i in range(0, len(pl), a.chunk)]
    for k, chunk in enumerate(chunks):
        n = sum(len(t) for _, t, _ in chunk)
        res = {}
        for name in (('auto', 'default') if k % 2 == 0 else ('default', 'auto')):
            res[name], w, c = answer(chunk, auto if name == 'auto' else DEFAULT)
            wall[name].append(w / n); cpu[name].append(c / n)
        for x, y in zip(res['auto'], res['default']):
            same &= x['greedy_id'] == y['greedy_id']
            worst = max(worst, max(abs(v - y['logits'][i]) for i, v in x['logits'].items()))
    for b in busy: b.terminate()
    mw = {k: statistics.median(v) for k, v in wall.items()}
    mc = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"median per question: auto ({auto} threads) {mw['auto'] * 1000:.1f} ms wall / {mc['auto'] * 1000:.1f} ms CPU, "
          f"torch default ({DEFAULT} threads) {mw['default'] * 1000:.1f} ms wall / {mc['default'] * 1000:.1f} ms CPU; load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"ratio default/auto = {mw['default'] / mw['auto']:.2f} wall, {mc['default'] / mc['auto']:.2f} CPU over {len(qs)} questions; "
          f"decisions identical: {'yes' if same else 'no'}; largest logit difference {worst:.1e} ({'within' if worst <= 1e-5 else 'OVER'} 1e-5)")
