"""Questions per second against a local llama.cpp server, one request at a time against four in flight, side by side.

llama.cpp's server (llama-cpp-python, built and cached by `.ci/llama_server.py --install`) serves SmolLM2-135M-Instruct
from the shared folder on a loopback port; `run_served` asks the built-in benchmark's questions (the questions alone:
the model reads no images) at `--concurrency 1` and at 4, into fresh run folders, interleaved over `--rounds` so a load
change hits both alike. Questions per second counts every record written (a request answers all the questions that
share its image and text); the records of the two concurrencies are checked to be the same.

    python .ci/llama_server.py --install && python benchmarks/served_speed.py            # 20 images, 2 rounds
    python benchmarks/served_speed.py --images 50 --rounds 3

The last line keeps its format: `ratio concurrency 4/1 = X over N questions; records identical: yes`.
"""
import argparse, dataclasses, statistics, sys, tempfile, time
from pathlib import Path
from pope_audit.foundation.core import shared_dir
from pope_audit.running.served import ServedConfig, llama_server, run_served
from pope_audit.benchmarks.synthetic import synthetic_benchmark

p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
p.add_argument('--images', type=int, default=20, help='images of the built-in benchmark (18 questions each)')
p.add_argument('--rounds', type=int, default=2, help='rounds, each timing both concurrencies')
p.add_argument('--concurrency', type=int, default=4, help='the concurrency set against one')
a = p.parse_args()

gguf = shared_dir(required=True)/'models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf'
with tempfile.TemporaryDirectory() as tmp, llama_server(gguf) as url:
    qs, imgs = synthetic_benchmark(Path(tmp)/'bench', a.images, seed=7)
    cfg = ServedConfig(url, tokenizer=str(gguf), images=False, progress=False)
    run_served(cfg, qs.head(3), imgs, Path(tmp)/'warm')                       # the tokenizer probe and the server's first request, untimed
    times = {1: [], a.concurrency: []}
    for r in range(a.rounds):
        for n in (times if r % 2 == 0 else reversed(list(times))):
            t0 = time.perf_counter()
            run_served(dataclasses.replace(cfg, concurrency=n), qs, imgs, Path(tmp)/f'c{n}-{r}')
            times[n].append(time.perf_counter() - t0)
    same = all((Path(tmp)/f'c1-{r}/records.jsonl').read_bytes() == (Path(tmp)/f'c{a.concurrency}-{r}/records.jsonl').read_bytes() for r in range(a.rounds))
    rate = {n: len(qs) / statistics.median(t) for n, t in times.items()}
    print(f'{len(qs)} questions ({qs[["image", "question"]].drop_duplicates().shape[0]} distinct requests), {a.rounds} rounds, llama.cpp server at {url}')
    print(f"{'concurrency':>12} {'median s':>9} {'questions/s':>12}")
    for n, t in times.items(): print(f'{n:>12} {statistics.median(t):>9.2f} {rate[n]:>12.1f}')
    print(f'ratio concurrency {a.concurrency}/1 = {rate[a.concurrency] / rate[1]:.2f} over {len(qs)} questions; records identical: {"yes" if same else "NO"}')
    if not same: sys.exit(1)
