"Shared fixtures: the shared data folder and tiny model folders saved with `save_pretrained`; a private temporary folder and cache."
import os, shutil, tempfile
import pytest
from pope_audit.foundation.core import shared_dir

_SAVED = {}

def pytest_configure(config):
    "Everything the suite writes (pytest's tmp_path, mkdtemp, subprocesses, the package cache) goes below one folder removed at the end."
    worker = os.environ.get('PYTEST_XDIST_WORKER')       # `-n 2`: a worker works below the folder its controller made (pytest's tmp_path is there)
    root = os.environ['TMPDIR'] if worker and os.path.basename(os.environ.get('TMPDIR', '')).startswith('pope-audit-tests-') \
        else tempfile.mkdtemp(prefix='pope-audit-tests-')
    own = os.path.join(root, worker) if worker else root   # caches of its own: two workers never assemble one model in one folder at once
    for var, val in (('TMPDIR', root), ('POPE_AUDIT_CACHE', os.path.join(own, 'cache')),     # matplotlib's font cache, and any other
                     ('MPLCONFIGDIR', os.path.join(own, 'matplotlib')), ('XDG_CACHE_HOME', os.path.join(own, 'xdg-cache'))):  # library's, not in ~
        _SAVED[var] = os.environ.get(var)
        os.environ[var] = val
    tempfile.tempdir = None                  # recomputed from TMPDIR on next use
    _SAVED['root'] = None if worker else root  # the controller removes it at the end

    config.addinivalue_line('markers', 'slow: minutes on a CPU; run with POPE_AUDIT_SLOW=1 (CI does, in its own step)')

def pytest_collection_modifyitems(config, items):
    "Tests marked slow are skipped, saying how to run them, unless POPE_AUDIT_SLOW=1."
    if os.environ.get('POPE_AUDIT_SLOW') == '1': return
    for item in items:
        if 'slow' in item.keywords: item.add_marker(pytest.mark.skip(reason='slow: minutes on a CPU; run with POPE_AUDIT_SLOW=1'))

def pytest_unconfigure(config):
    for var in ('TMPDIR', 'POPE_AUDIT_CACHE', 'MPLCONFIGDIR', 'XDG_CACHE_HOME'):
        if _SAVED.get(var) is None: os.environ.pop(var, None)
        else: os.environ[var] = _SAVED[var]
    tempfile.tempdir = None
    if _SAVED['root']: shutil.rmtree(_SAVED['root'], ignore_errors=True)


@pytest.fixture(scope='session')
def shared():
    d = shared_dir()
    if d is None: pytest.skip('shared data not found: set POPE_AUDIT_SHARED to the folder holding data/pope and tokenizers/')
    return d


@pytest.fixture(scope='session')
def pope(shared):
    from pope_audit.foundation.data import read_pope_files
    return read_pope_files([shared/'data/pope/coco'])


@pytest.fixture(scope='session')
def tiny_dirs(tmp_path_factory):
    "Folders holding each tiny family, saved the way a hub checkpoint is."
    from pope_audit.models.tiny import save_tiny, TINY
    root = tmp_path_factory.mktemp('tiny')
    return {fam: save_tiny(fam, root/fam) for fam in TINY}


def run_trained(folder, specs, n_images, seed=11, family='llava15'):
    "The trained tiny VLM of `family` on `n_images` scenes of the built-in benchmark with corrections `specs`: (adapter, run folder, images)."
    from pope_audit.running.inference import run
    from pope_audit.models.adapters import load_adapter
    from pope_audit.benchmarks.synthetic import synthetic_benchmark
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    qs, imgs = synthetic_benchmark(folder/'bench', n_images=n_images, seed=seed)
    model = str(tiny_vlm_dir(family))
    out = run(model, qs, imgs, folder/'run', batch_size=4, max_new_tokens=1, progress=False, corrections=specs)
    return load_adapter(model), out, imgs


@pytest.fixture(scope='session')
def bench(tmp_path_factory):
    "Eight scenes of the built-in benchmark: (questions, image folder)."
    from pope_audit.benchmarks.synthetic import synthetic_benchmark
    return synthetic_benchmark(tmp_path_factory.mktemp('bench'), n_images=8)


def run_cli(capsys, *args):
    "Run the command line in this process; return (exit code, stdout, stderr)."
    from pope_audit.interface.cli import main
    code = 0
    try: main([str(a) for a in args])
    except SystemExit as e: code = e.code
    o = capsys.readouterr()
    return code, o.out, o.err
