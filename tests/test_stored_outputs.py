"""The notebooks' stored outputs (what the docs site shows) hold no machine paths and no third-party debris, and keep the package's own notes."""
import json, re
from pathlib import Path
import pytest

NBS = sorted((Path(__file__).resolve().parent.parent/'nbs').rglob('*.ipynb'))

# a folder of this machine: a worktree or home, or a random temporary folder (the tour's documented /tmp/pope-audit-tour is the reader's own)
MACHINE_PATH = re.compile(r'(?<![\w.~/-])/(?:work|root|home|Users|private|var/folders)/[^\s\'"]*|(?<![\w.~/-])/tmp/(?!pope-audit-tour\b)[^\s\'"]+')
DEBRIS = {  # what third-party libraries print when nobody silenced them
    'tqdm bar': re.compile(r'\d+%\|[^|\n]{0,80}\|\s*\d+/\d+'),
    "tqdm's widget warning": re.compile(r'TqdmWarning|IProgress not found'),
    "transformers' loading bars": re.compile(r'Loading weights|Writing model shards|Loading checkpoint shards'),
    "datasets' bars": re.compile(r'Generating \w+ split|Saving the dataset|Map:\s+\d|Filter:\s+\d'),
    "bitsandbytes' kernel notice": re.compile(r'Failed to load CPU gemm_4bit'),
    'a Python warning': re.compile(r'\b(?:User|Future|Deprecation|Runtime|Resource)Warning:'),
}
CUT_CELL = re.compile(r'<td>[^<]{46}\.\.\.</td>')   # pandas' display.max_colwidth (50) cuts a table cell to its first 46 characters and '...'

def output_texts(path:Path):
    "(cell index, output kind, text) for every stored text output of a notebook; images are skipped."
    nb = json.loads(path.read_text(encoding='utf-8'))
    for i, c in enumerate(nb['cells']):
        outs = []
        for o in c.get('outputs', []):     # consecutive chunks of one stream read as one text, as Jupyter shows them
            if o['output_type'] == 'stream' and outs and outs[-1].get('name') == o['name'] and outs[-1]['output_type'] == 'stream':
                outs[-1] = dict(outs[-1], text=''.join(outs[-1]['text']) + ''.join(o['text']))
            else: outs.append(o)
        for o in outs:
            if o['output_type'] == 'stream': yield i, o['name'], ''.join(o['text'])
            elif o['output_type'] == 'error': yield i, 'error', o.get('ename', '') + ': ' + o.get('evalue', '') + '\n' + '\n'.join(o.get('traceback', []))
            else:
                for k, v in o.get('data', {}).items():
                    if k.startswith('text/') or k.endswith('json'): yield i, k, v if isinstance(v, str) else ''.join(v) if isinstance(v, list) else json.dumps(v)

def problems(path:Path) -> list[str]:
    out = []
    for i, kind, text in output_texts(path):
        out += [f'{path.name} cell {i} ({kind}): machine path {m.group(0)[:90]!r}' for m in MACHINE_PATH.finditer(text)]
        out += [f'{path.name} cell {i} ({kind}): {name}: {m.group(0)[:90]!r}' for name, rx in DEBRIS.items() for m in rx.finditer(text)]
        if kind == 'text/html': out += [f'{path.name} cell {i}: a table cell cut: {m.group(0)!r}' for m in CUT_CELL.finditer(text)]
    return out

def test_the_scan_finds_what_it_looks_for(tmp_path):
    bad = dict(cells=[dict(cell_type='code', source='', metadata={}, outputs=[
        dict(output_type='stream', name='stderr', text=['Loading weights: 100%|██████████| 64/64 [00:00<00:00, 29369.31it/s]\n']),
        dict(output_type='stream', name='stderr', text=['/work/main/.venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress not found.\n']),
        dict(output_type='execute_result', data={'text/plain': ['report: /tmp/tmpej9d0wfv/demo/report.html']}, metadata={}),
        dict(output_type='execute_result', data={'text/html': ['<td>' + 'logit of 3582 `yes` vs 1217 `no` (the audited ' + '...</td><td>short...</td>']}, metadata={}),
        dict(output_type='stream', name='stdout', text=['model /root/.cache/pope_audit/models/x, tour /tmp/pope-audit-tour/run, url https://example.org/home/a, ~/.cache/x\n'])])])
    p = tmp_path/'bad.ipynb'; p.write_text(json.dumps(bad))
    found = problems(p)
    assert [f.split(': ', 1)[1].split(' ', 1)[0] for f in found if 'machine path' in f] == ['machine'] * 3, found   # /work, /tmp/tmp…, /root
    for name in ('tqdm bar', "transformers' loading bars", "tqdm's widget warning"): assert any(name in f for f in found), (name, found)
    assert sum('a table cell cut' in f for f in found) == 1, found                       # the 46-character cut, not a short value ending in '...'
    assert not any('pope-audit-tour' in f or 'example.org' in f or '~/.cache' in f for f in found), found

@pytest.mark.parametrize('nb', NBS, ids=[p.name for p in NBS])
def test_no_machine_paths_or_library_debris(nb):
    found = problems(nb)
    assert not found, '\n'.join(found[:20])

def test_the_package_notes_are_kept():
    "The runner's out-of-memory back-off is the package's own note: stored, on standard error, where the chapter shows it."
    notes = [t for _, kind, t in output_texts(Path(NBS[0]).parents[1]/'running'/'06_inference.ipynb') if kind == 'stderr']
    assert any('out of memory at batch size 8' in t and 'answering it again at 4' in t for t in notes), notes
