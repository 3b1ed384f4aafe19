"""How long the light commands take to answer: `pope-audit --help` and `ls readouts`, each in a fresh process.

Reports the medians of the child processes' CPU time (user + system, from `resource.getrusage`) beside their wall time,
and the machine's load while measured: on a shared machine the wall time follows the load, the CPU time does not.

    python benchmarks/cli_speed.py [--n 7]

The target: `--help` under 0.5 s of CPU.
"""
import argparse, os, resource, shutil, statistics, subprocess, sys, time

p = argparse.ArgumentParser()
p.add_argument('--n', type=int, default=7, help='repetitions of each command')
a = p.parse_args()
exe = shutil.which('pope-audit')
cmd = [exe] if exe else [sys.executable, '-m', 'pope_audit.interface.cli']


def one(argv):
    "Wall and CPU seconds of one fresh `pope-audit ARGV`."
    r0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd + argv, check=True, capture_output=True)
    w, r1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return w, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


for argv in (['--help'], ['ls', 'readouts']):
    load0 = os.getloadavg()[0]
    runs = [one(argv) for _ in range(a.n)]
    wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
    print(f"pope-audit {' '.join(argv)}: median {cpu:.2f} s CPU, {wall:.2f} s wall over {a.n} runs "
          f"(load {load0:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} CPUs)")
