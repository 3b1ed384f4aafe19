"""Execute every notebook top to bottom the way Jupyter's "Run All" does (nbclient, a real kernel, cwd = the notebook's folder).

Not nbdev_test: nbdev skips cells flagged `cuda`/`slow` and cells marked `#| eval: false`; plain Jupyter runs them all.
So this proves what a reader sees: GPU cells step aside with one line on a machine without a GPU, nothing needs files
outside the repository and the shared data folder, and nothing is written into the repository (the notebooks are run
in memory, not saved; the caller checks `git status`).

    python .ci/execute.py                     # every notebook, every cell (slow cells take minutes: training, full demos)
    python .ci/execute.py --skip-slow         # cells flagged `#| slow` are skipped (CI)
    python .ci/execute.py nbs/running/06_inference.ipynb

Cells marked `#| eval: false` (the export cell at the end of each notebook) are skipped as nbdev skips them: they
rewrite the package from the notebooks, which a reader's Run All must not do to an installed copy either.
"""
import argparse, re, sys, time
from pathlib import Path
import nbformat
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from nbclient import NotebookClient

root = Path(__file__).resolve().parent.parent
p = argparse.ArgumentParser()
p.add_argument('notebooks', nargs='*')
p.add_argument('--skip-slow', action='store_true', help='skip cells flagged #| slow')
p.add_argument('--timeout', type=int, default=900, help='seconds per cell')
p.add_argument('--jobs', type=int, default=2, help='notebooks run at once, each in its own kernel (default 2, as nbdev_test on two cores)')
a = p.parse_args()

def flags(src):
    return {m.group(1).strip() for m in re.finditer(r'^#\|\s*(.+)$', src, re.M)}

nbs = [Path(n) for n in a.notebooks] or sorted(p for p in (root/'nbs').rglob('*.ipynb') if not p.name.startswith(('_', '.')) and '.ipynb_checkpoints' not in p.parts)
def execute(path):
    "Run one notebook in memory; (name, whether it failed, what to print)."
    nb = nbformat.read(path, as_version=4)
    skipped = 0
    for c in nb.cells:
        if c.cell_type != 'code': continue
        f = flags(c.source)
        if 'eval: false' in f or (a.skip_slow and 'slow' in f):
            c.source, skipped = '', skipped + 1
    t0 = time.time()
    try:
        NotebookClient(nb, timeout=a.timeout, kernel_name='python3', resources={'metadata': {'path': str(path.parent)}}).execute()
        return path.name, False, f'ok      {path.name:28s} {time.time() - t0:6.1f} s' + (f'  ({skipped} cells skipped)' if skipped else '')
    except Exception as e:
        return path.name, True, f'FAILED  {path.name:28s} {time.time() - t0:6.1f} s  {type(e).__name__}: {str(e)[-1500:]}'

failed = []
with ProcessPoolExecutor(a.jobs, mp_context=multiprocessing.get_context('fork')) as ex:     # each notebook with its own client and kernel
    for name, bad, line in ex.map(execute, nbs):
        print(line, flush=True)
        if bad: failed.append(name)
print(f'{len(nbs) - len(failed)} passed, {len(failed)} failed')
sys.exit(1 if failed else 0)
