"The light commands in a fresh process each: which modules they import (no torch; no transformers but for probe and lint's tokenizers)."
import json, os, random, subprocess, sys
from pathlib import Path
import pytest
from pope_audit.interface.cli import parser
from pope_audit.foundation.tokens import LLAVA_EIGHT

HARNESS = """
import json, sys
from pope_audit.interface.cli import main
try: main(sys.argv[2:])
except SystemExit as e: code = e.code
else: code = 0
json.dump(dict(modules=sorted(sys.modules), code=code), open(sys.argv[1], 'w'))
"""


def imported(tmp_path, *argv) -> set[str]:
    "The modules `pope-audit ARGV` imported in a fresh interpreter (the command must succeed)."
    out = tmp_path/'modules.json'
    r = subprocess.run([sys.executable, '-c', HARNESS, str(out), *map(str, argv)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and out.exists(), r.stderr[-2000:]
    d = json.loads(out.read_text())
    assert d['code'] in (0, None), (argv, d['code'], r.stderr[-2000:])
    return set(d['modules'])


@pytest.fixture(scope='module')
def records(tmp_path_factory):
    "Sixty records that every readout applies to, with a correction's quantities (as a run with --correction writes them)."
    rng, path = random.Random(7), tmp_path_factory.mktemp('light')/'records.jsonl'
    ids = LLAVA_EIGHT['yes'] + LLAVA_EIGHT['no']
    with open(path, 'w') as f:
        for i in range(60):
            lg = {str(t): round(rng.uniform(-5, 5), 3) for t in ids}
            y, n = max(lg[str(t)] for t in (3869, 4874)), max(lg[str(t)] for t in (694, 1939))
            f.write(json.dumps(dict(split=('random', 'popular', 'adversarial')[i % 3], question_id=i, image=f'{i // 6}.png', question=f'Is there a thing {i}?',
                                    label='yes' if i % 2 else 'no', greedy_id=3869 if y >= n else 1939, logits=lg, logsumexp=8.0,
                                    derived={'yes': [3869, 4874], 'no': [694, 1939]}, surface=LLAVA_EIGHT, text='Yes' if y >= n else 'No',
                                    corrections={'vdd': dict(delta=y - n, tau=0.25, frozen=False)})) + '\n')
    return path


def no_stack(mods):
    "Neither torch nor transformers was imported."
    assert 'torch' not in mods and 'transformers' not in mods, sorted(m for m in mods if m.split('.')[0] in ('torch', 'transformers'))[:5]


def test_help_loads_nothing_heavy(tmp_path):
    mods = imported(tmp_path, '--help')
    no_stack(mods)
    assert not {'pandas', 'numpy'} & mods                     # the parser's choices are plain data


@pytest.mark.parametrize('what', ['readouts', 'templates', 'families'])
def test_ls(tmp_path, what): no_stack(imported(tmp_path, 'ls', what))


def test_score_report_reconstruct(tmp_path, records):
    no_stack(imported(tmp_path, 'score', records, '--boot', 20, '--out', tmp_path/'scored'))
    assert (tmp_path/'scored'/'scores.csv').exists()
    no_stack(imported(tmp_path, 'report', records, '--out', tmp_path/'report'))     # with a corrections section
    assert 'vdd' in (tmp_path/'report'/'report.md').read_text()
    no_stack(imported(tmp_path, 'reconstruct', records))
    no_stack(imported(tmp_path, 'reconstruct'))


def test_score_llava_answers(tmp_path, shared):
    l = shared/'data/pope/llava'
    no_stack(imported(tmp_path, 'score', l/'answers/llava-v1.5-13b.jsonl', '--questions', l/'llava_pope_test.jsonl', '--labels', l/'coco', '--boot', 0))


def test_probe_tokenizer_code_only(tmp_path, shared):
    from pope_audit.foundation.tokens import shared_tokenizer
    shared_tokenizer('llama-spm')        # the GGUF conversion is cached once, here (where torch is installed, transformers' config path imports it;
                                         # without torch it converts all the same: test_vocab_parity.test_gguf_without_torch)
    mods = imported(tmp_path, 'probe', '--tokenizer', shared/'tokenizers/llama-spm', '--ids', 'llava-two')
    assert 'torch' not in mods
    assert 'tokenizers' in mods and 'transformers' in mods
    model_code = sorted(m for m in mods if m.startswith('transformers.') and ('modeling' in m or m.endswith('configuration_utils')))
    assert not model_code, model_code[:5]


def test_every_family_is_in_the_catalogue():
    "`ls families` reads the suite's catalogue (a JSON file: no torch); every registered family is in it."
    from pope_audit.foundation.registry import FAMILIES
    import pope_audit
    listed = [e['name'] for e in json.loads((Path(pope_audit.__file__).parent/'assets'/'families.json').read_text())]
    assert set(FAMILIES) <= set(listed)


# --- the light install: this environment without the `run` extra ------------------------------------------------------

RUN_EXTRA = ('torch', 'functorch', 'accelerate', 'bitsandbytes', 'fastcore', 'nvidia', 'triton')   # and what torch brings (CUDA libraries)


@pytest.fixture(scope='module')
def light_site(tmp_path_factory):
    "A site-packages of links to this one's packages less the `run` extra's (code and metadata): what `pip install pope-audit` leaves."
    import site, pope_audit
    d = tmp_path_factory.mktemp('light-site')
    for p in Path(site.getsitepackages()[0]).iterdir():
        if not p.name.split('-')[0].lower().startswith(RUN_EXTRA): (d/p.name).symlink_to(p)
    return f'{d}{os.pathsep}{Path(pope_audit.__file__).parent.parent}'     # the package itself from its own folder (an editable install's hook needs site)


def light(tmp_path, light_site, *argv):
    "`pope-audit ARGV` in a fresh interpreter that sees no `run` extra (`-S`: only the light site): (exit code, stdout, stderr, torch imported)."
    out = tmp_path/'light.json'
    code = HARNESS.replace("json.dump(dict(modules=sorted(sys.modules), code=code)", "json.dump(dict(modules=sorted(sys.modules), code=code, torch=__import__('importlib.util').util.find_spec('torch') is not None)")
    r = subprocess.run([sys.executable, '-S', '-c', code, str(out), *map(str, argv)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, 'PYTHONPATH': light_site})
    assert out.exists(), r.stderr[-2000:]
    d = json.loads(out.read_text())
    assert not d['torch'] and 'torch' not in d['modules']       # torch cannot be found at all there
    return d['code'] or 0, r.stdout, r.stderr


@pytest.mark.parametrize('argv', [('run', '--model', 'x', '--questions', 'q', '--device', 'cpu'), ('demo', '--images', '8'),
                                  ('audit', '--demo'), ('precision', '--demo')], ids=lambda a: a[0])
def test_model_commands_name_the_run_extra(tmp_path, light_site, argv):
    "Without the extra, a command that runs a model ends in one line naming it, exit 2, before anything is written."
    code, out, err = light(tmp_path, light_site, *argv, '--out', tmp_path/'never')
    assert (code, out, len(err.strip().splitlines())) == (2, '', 1), err
    assert f'pope-audit {argv[0]}: error:' in err and 'torch is not installed' in err and "pip install 'pope-audit[run]'" in err
    assert not (tmp_path/'never').exists()


def test_a_torch_that_does_not_import(tmp_path, tmp_path_factory):
    "A `[run]` install whose torch is there by its metadata but fails to import (a CUDA build without its libraries): one line, exit 2."
    import site, pope_audit
    d = tmp_path_factory.mktemp('broken-torch-site')
    for p in Path(site.getsitepackages()[0]).iterdir():
        if p.name != 'torch': (d/p.name).symlink_to(p)                 # torch's metadata stays: pip would call it installed
    (d/'torch').mkdir()
    (d/'torch'/'__init__.py').write_text("raise OSError('libcudart.so.13: cannot open shared object file: No such file or directory')\n")
    r = subprocess.run([sys.executable, '-S', '-m', 'pope_audit.interface.cli', 'run', '--model', 'x', '--questions', 'q', '--out', tmp_path/'never'],
                       capture_output=True, text=True, timeout=300, env={**os.environ, 'PYTHONPATH': f'{d}{os.pathsep}{Path(pope_audit.__file__).parent.parent}'})
    assert (r.returncode, len(r.stderr.strip().splitlines())) == (2, 1), r.stderr[-2000:]
    assert 'torch does not import (OSError: libcudart.so.13' in r.stderr and "pip install 'pope-audit[run]'" in r.stderr
    assert not (tmp_path/'never').exists()


def test_light_commands_without_the_run_extra(tmp_path, light_site, records, shared):
    "probe (a GGUF vocabulary and a chat template), lint, score, report, reconstruct, export and ls, with no torch to be found."
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    code, out, err = light(tmp_path, light_site, 'probe', '--tokenizer', gguf, '--ids', 'llava-two')
    assert code == 0 and '3869' in out and "3582  yes excluded" in out, err
    code, out, err = light(tmp_path, light_site, 'probe', '--tokenizer', shared/'tokenizers/qwen3')
    assert code == 0 and "joins the prompt with ''" in out and '9454' in out, err          # Qwen3's chat template, rendered by jinja2
    (tmp_path/'eval.py').write_text('YES_ID, NO_ID = 3582, 1217\n')
    code, out, err = light(tmp_path, light_site, 'lint', tmp_path/'eval.py', '--tokenizer', gguf, '--template', 'llava15')
    assert code == 1 and '3582' in out, err                                                   # the reference evaluator's ids: a wrong finding
    code, out, err = light(tmp_path, light_site, 'score', records, '--boot', 20, '--out', tmp_path/'scored')
    assert code == 0 and (tmp_path/'scored'/'scores.csv').exists(), err
    code, out, err = light(tmp_path, light_site, 'report', records, '--out', tmp_path/'report')
    assert code == 0 and (tmp_path/'report'/'report.html').exists(), err
    code, out, err = light(tmp_path, light_site, 'export', records, '--out', tmp_path/'records.parquet')
    assert code == 0 and (tmp_path/'records.parquet').read_bytes()[:4] == b'PAR1', err
    code, out, err = light(tmp_path, light_site, 'score', tmp_path/'records.parquet', '--boot', 0)
    _, direct, _ = light(tmp_path, light_site, 'score', records, '--boot', 0)
    rows = lambda text: [l for l in text.splitlines() if l.split()[:1] in (['derived'], ['two_token'], ['eight_token'])][:3]
    assert code == 0 and '(records)' in out and len(rows(out)) == 3 and rows(out) == rows(direct), err   # the export reads back as records
    code, out, err = light(tmp_path, light_site, 'reconstruct', tmp_path/'records.parquet')
    assert code == 0 and 'equals the measured F1' in out, err
    code, out, err = light(tmp_path, light_site, 'reconstruct', records)
    assert code == 0 and 'identity check: F1 of two_token predicted from derived and the flip rates equals' in out, err
    for what in ('readouts', 'templates', 'families', 'benchmarks'): assert light(tmp_path, light_site, 'ls', what)[0] == 0


def test_readme_shows_the_refusal_as_printed(tmp_path, light_site):
    "The light-install refusal the README shows is the line `run` prints."
    _, _, err = light(tmp_path, light_site, 'run', '--model', 'x', '--questions', 'q', '--out', tmp_path/'never')
    assert f'```\n{err.strip()}\n```' in (Path(__file__).parent.parent/'README.md').read_text()


def test_chapters_that_need_the_run_extra(tmp_path, light_site):
    "The README lists exactly the chapters whose module does not import with the run extra hidden."
    from pope_audit.interface.layers import LAYERS
    root = Path(__file__).parent.parent
    script = 'import importlib, sys\nfor m in sys.argv[1:]:\n    try: importlib.import_module("pope_audit." + m)\n    except ImportError: print(m)\n'
    mods = [m for ms in LAYERS.values() for m in ms]
    r = subprocess.run([sys.executable, '-S', '-c', script, *mods], capture_output=True, text=True, timeout=300, env={**os.environ, 'PYTHONPATH': light_site})
    heavy = set(r.stdout.split())
    assert {'adapters', 'inference', 'demo'} <= heavy and not {'scoring', 'tokens', 'lint', 'report', 'stream', 'cli'} & heavy, heavy
    from pope_audit.interface.layers import needs_run_extra
    assert heavy == set(needs_run_extra())                     # the architecture chapter's list, read from the code, is what imports
    chapter = {}
    for nb in root.glob('nbs/*/*.ipynb'):
        for c in json.loads(nb.read_text())['cells']:
            for m in __import__('re').findall(r'#\|\s*default_exp\s+\w+\.(\w+)', ''.join(c['source'])): chapter[m] = nb.stem
    readme = (root/'README.md').read_text()
    said = readme[readme.index('**Which chapters need the `run` extra.**'):]
    said = said[:said.index('Every other chapter')]
    assert set(__import__('re').findall(r'\b(\d\d[a-z]?_\w+)', said)) == {chapter[m] for m in heavy}


@pytest.mark.slow
def test_precommit_hook_lints_without_torch(tmp_path, shared):
    "pre-commit builds the shipped hook's environment from this repository's last commit; it lints a file there, and has no torch."
    root = Path(__file__).parent.parent
    if not (root/'.git').exists(): pytest.skip('not a git checkout')
    rev = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    proj = tmp_path/'project'
    proj.mkdir()
    (proj/'eval_pope.py').write_text('YES_ID, NO_ID = 3582, 1217   # the reference evaluator\'s ids\n')
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    (proj/'.pre-commit-config.yaml').write_text(f'repos:\n- repo: {root}\n  rev: {rev}\n  hooks:\n  - id: pope-audit-lint\n'
                                                f'    args: [--tokenizer, {gguf}, --template, llava15]\n')
    git = lambda *a: subprocess.run(['git', *a], cwd=proj, capture_output=True, text=True, check=True)
    git('init', '-q'); git('add', '.')
    env = {**os.environ, 'PRE_COMMIT_HOME': str(tmp_path/'pre-commit-home'), 'PATH': f'{Path(sys.executable).parent}{os.pathsep}{os.environ["PATH"]}'}
    r = subprocess.run(['pre-commit', 'run', '--files', 'eval_pope.py'], cwd=proj, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 1 and '3582' in r.stdout and 'pope-audit lint' in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]   # a wrong finding fails the commit
    (py,) = (tmp_path/'pre-commit-home').glob('repo*/py_env-*/bin/python')
    where = subprocess.run([str(py), '-c', 'import importlib.util as u; print([m for m in ("torch", "accelerate", "bitsandbytes", "pope_audit") if u.find_spec(m)])'],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where == "['pope_audit']", where
