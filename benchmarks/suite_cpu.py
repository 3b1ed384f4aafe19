"""The default test suite's own CPU time, test by test: what a busy machine cannot inflate. Runs `nbdev_test --timing`
and `pytest -q tests` (the README's test command, as it stands) with a small pytest plugin that records, for every test,
the CPU time its process and the processes it waited for spent (setup, call and teardown), written as each test ends.
Prints the totals, the machine's load, the slowest tests and the CPU time per test file.

    python benchmarks/suite_cpu.py [--out DIR] [--top 40] [pytest arguments...]     # minutes: the whole default suite

The CPU total over 2 is what the suite takes on an idle 2-core machine at best (pytest runs one test at a time; nbdev_test
runs two notebooks at a time), so it is the figure to hold against a wall-clock budget measured on a loaded machine.
"""
import argparse, json, os, resource, subprocess, sys, time
from collections import defaultdict
from pathlib import Path


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class CpuPlugin:
    "Appends {test, cpu, wall, outcome} per test to the file named by POPE_AUDIT_SUITE_CPU."
    def __init__(self, path): self.path, self.start = path, {}

    def pytest_runtest_logstart(self, nodeid, location): self.start[nodeid] = (_cpu(), time.time())

    def pytest_runtest_logfinish(self, nodeid, location):
        c0, t0 = self.start.pop(nodeid)
        with open(self.path, 'a') as f: f.write(json.dumps(dict(test=nodeid, cpu=_cpu() - c0, wall=time.time() - t0)) + '\n')


def pytest_configure(config):
    if os.environ.get('POPE_AUDIT_SUITE_CPU'): config.pluginmanager.register(CpuPlugin(os.environ['POPE_AUDIT_SUITE_CPU']), 'suite-cpu')


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default='suite-cpu', help='folder for the per-test records and the logs')
    ap.add_argument('--top', type=int, default=40)
    ap.add_argument('--skip-notebooks', action='store_true', help='pytest only')
    a, rest = ap.parse_known_args()
    root, out = Path(__file__).resolve().parent.parent, Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    load = lambda: ' '.join(Path('/proc/loadavg').read_text().split()[:3])
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path(__file__).parent), os.environ.get('PYTHONPATH', '')])}
    totals = {}
    if not a.skip_notebooks:
        l0, c0, t0 = load(), _cpu(), time.time()
        with open(out/'nbdev_test.log', 'w') as f: r = subprocess.run(['nbdev_test', '--do_print', '--timing'], cwd=root, stdout=f, stderr=subprocess.STDOUT)
        totals['nbdev_test'] = (_cpu() - c0, time.time() - t0, l0, load(), r.returncode)
    rec = out/'tests.jsonl'
    rec.unlink(missing_ok=True)
    l0, c0, t0 = load(), _cpu(), time.time()
    with open(out/'pytest.log', 'w') as f:
        r = subprocess.run([sys.executable, '-m', 'pytest', '-q', 'tests', '-p', 'suite_cpu', '-p', 'no:cacheprovider', *rest], cwd=root, stdout=f,
                           stderr=subprocess.STDOUT, env={**env, 'POPE_AUDIT_SUITE_CPU': str(rec.resolve())})
    totals['pytest'] = (_cpu() - c0, time.time() - t0, l0, load(), r.returncode)
    for k, (cpu, wall, l0, l1, rc) in totals.items(): print(f'{k:10s} exit {rc}: {cpu / 60:5.1f} min CPU, {wall / 60:5.1f} min wall (load {l0} -> {l1})')
    cpu = sum(v[0] for v in totals.values())
    print(f'together: {cpu / 60:.1f} min CPU; on an idle 2-core machine at least {cpu / 120:.1f} min, at most {cpu / 60:.1f} min')
    rows = [json.loads(l) for l in rec.read_text().splitlines()] if rec.exists() else []
    print(f'\nslowest tests by CPU ({len(rows)} tests, {sum(r["cpu"] for r in rows) / 60:.1f} min CPU in all):')
    for r in sorted(rows, key=lambda r: -r['cpu'])[:a.top]: print(f'{r["cpu"]:7.1f} s CPU {r["wall"]:7.1f} s wall  {r["test"]}')
    per = defaultdict(float)
    for r in rows: per[r['test'].split('::')[0]] += r['cpu']
    print('\nCPU per test file:')
    for f, c in sorted(per.items(), key=lambda x: -x[1]): print(f'{c:7.1f} s  {f}')
