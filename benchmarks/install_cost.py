"""The two installs side by side, each into a fresh venv as a newcomer makes it: `pip install .` (light) and `pip install
".[run]"`, from a copy of the committed tree (git archive HEAD), pip's own cache off so neither reuses the other's
downloads. Prints, per install: wall and CPU time of pip, the machine's load before and after, the venv's size
(apparent bytes, as `du -sb`), its largest parts, and whether torch, accelerate and bitsandbytes are there.

    python benchmarks/install_cost.py [--keep DIR]      # minutes; several GB of disk for the run extra
"""
import argparse, os, resource, shutil, subprocess, sys, tempfile, time
from pathlib import Path

root = Path(__file__).resolve().parent.parent
p = argparse.ArgumentParser()
p.add_argument('--keep', help='make the venvs in this folder and keep them (default: a temporary folder, removed)')
a = p.parse_args()
work = Path(a.keep or tempfile.mkdtemp(prefix='pope-audit-install-'))
work.mkdir(parents=True, exist_ok=True)
load = lambda: ' '.join(Path('/proc/loadavg').read_text().split()[:3])


def size(path: Path) -> int:
    "Apparent size of everything below `path`, links not followed (du -sb)."
    return sum(f.lstat().st_size for f in path.rglob('*') if not f.is_dir() or f.is_symlink())


try:
    src = work/'src'
    src.mkdir()
    archive = subprocess.run(['git', 'archive', 'HEAD'], cwd=root, capture_output=True, check=True).stdout
    subprocess.run(['tar', '-x', '-C', str(src)], input=archive, check=True)
    for kind, spec in (('light', '.'), ('run', '.[run]')):
        env = work/f'venv-{kind}'
        subprocess.run([sys.executable, '-m', 'venv', str(env)], check=True)
        before, c0, t0 = load(), resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        r = subprocess.run([str(env/'bin'/'pip'), 'install', '-q', '--no-cache-dir', spec], cwd=src, capture_output=True, text=True)
        wall, c1 = time.time() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode: sys.exit(f'{kind}: pip failed:\n{r.stderr[-3000:]}')
        cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
        site = next((env/'lib').glob('python3*'))/'site-packages'
        parts = sorted(((size(d), d.name) for d in site.iterdir() if d.is_dir() and not d.name.endswith('-info')), reverse=True)[:5]
        have = subprocess.run([str(env/'bin'/'python'), '-c', "import importlib.util as u; print(' '.join(f'{m}={bool(u.find_spec(m))}' "
                               "for m in ('torch', 'accelerate', 'bitsandbytes', 'transformers')))"], capture_output=True, text=True).stdout.strip()
        torch = subprocess.run([str(env/'bin'/'pip'), 'show', 'torch'], capture_output=True, text=True).stdout
        version = next((l.split(': ', 1)[1] for l in torch.splitlines() if l.startswith('Version:')), 'none')
        print(f'pip install {spec:8s} {wall:6.0f} s wall, {cpu:5.0f} s CPU (load {before} -> {load()}); venv {size(env) / 1e9:.2f} GB; torch {version}; {have}')
        print('    largest: ' + ', '.join(f'{n} {s / 1e9:.2f} GB' for s, n in parts), flush=True)
finally:
    if not a.keep: shutil.rmtree(work, ignore_errors=True)
