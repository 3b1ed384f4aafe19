"What a newcomer meets on a fresh clone: output folders git ignores, one-line errors, a suite that writes only to its own temporary folder."
import os, re, subprocess, sys, tempfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_out_folders() -> set[str]:
    "Relative `--out` folders anywhere in the README (shell blocks and inline commands), and the commands' own defaults."
    text = (ROOT/'README.md').read_text()
    outs = {o.split('/')[0] for o in re.findall(r'--out\s+([^\s$/`][^\s`]*)', text)}
    from pope_audit.interface.audit import audit_demo
    from pope_audit.interface.precision import precision_demo
    import inspect
    defaults = {inspect.signature(f).parameters['out'].default for f in (audit_demo, precision_demo)}
    return outs | defaults | {'pope-demo'}


@pytest.mark.skipif(not (ROOT/'.git').exists(), reason='not a git checkout')
def test_every_default_output_folder_is_ignored():
    folders = _readme_out_folders()
    assert {'pope-demo', 'pope-audit-demo', 'pope-precision-demo', 'audit-demo', 'precision-demo', 'runs'} <= folders
    for f in sorted(folders):
        r = subprocess.run(['git', 'check-ignore', '-q', f'{f}/x'], cwd=ROOT)
        assert r.returncode == 0, f'{f}/ is not in .gitignore'


def test_report_on_a_missing_folder_says_it_is_missing(tmp_path):
    r = subprocess.run([sys.executable, '-m', 'pope_audit.interface.cli', 'report', str(tmp_path/'nothing')], capture_output=True, text=True)
    assert r.returncode == 2 and 'no such run folder or answer file' in r.stderr and '--out' not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_suite_writes_below_its_own_temporary_folder(tmp_path):
    "conftest points TMPDIR and the package cache at one folder it removes at the end; this test's tmp_path lies below it."
    root = Path(os.environ['TMPDIR'])
    assert root.name.startswith('pope-audit-tests-') and tmp_path.is_relative_to(root)
    assert Path(tempfile.mkdtemp()).is_relative_to(root)
    for var in ('POPE_AUDIT_CACHE', 'MPLCONFIGDIR', 'XDG_CACHE_HOME'): assert Path(os.environ[var]).is_relative_to(root), var


def test_the_suite_leaves_home_as_it_was(tmp_path, shared):
    "A command run as the tests run them, with HOME an empty folder: a figure drawn, a GGUF vocabulary read and cached, nothing written to HOME."
    home = tmp_path/'home'
    home.mkdir()
    code = ('import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt; plt.plot([1]); plt.savefig("f.png")\n'
            f'from pope_audit.foundation.tokens import load_tokenizer; load_tokenizer({str(shared/"tokenizers/llama-spm/ggml-vocab-llama-spm.gguf")!r})')
    r = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env={**os.environ, 'HOME': str(home)}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(home.rglob('*')), sorted(map(str, home.rglob('*')))[:5]     # matplotlib's font cache and the package's are in the test's folder


HUB_FAMILY = {'llava-hf/llava-1.5-7b-hf': 'llava15', 'llava-hf/llava-v1.6-mistral-7b-hf': 'llava-next',
              'Qwen/Qwen2-VL-7B-Instruct': 'qwen2-vl', 'Salesforce/instructblip-vicuna-7b': 'instructblip',
              'MAGAer13/mplug-owl2-llama2-7b': 'mplug-owl2'}


def _gpu_commands() -> list[list[str]]:
    "The README's `pope-audit run --model HUB ...` lines, one per family, as argument lists."
    import shlex
    text = (ROOT/'README.md').read_text()
    block = text[text.index('**On a GPU.**'):]
    block = re.search(r'```sh\n(.*?)```', block, re.S).group(1)
    return [shlex.split(l)[1:] for l in block.splitlines() if l.startswith('pope-audit run ')]


def test_readme_gpu_commands_name_every_family():
    from pope_audit.models.tiny import TINY
    hubs = [a[a.index('--model') + 1] for a in _gpu_commands()]
    assert set(hubs) == set(HUB_FAMILY) and set(HUB_FAMILY.values()) == set(TINY)


@pytest.mark.parametrize('hub', list(HUB_FAMILY))
def test_readme_gpu_command_runs_as_written(hub, tiny_dirs, bench, tmp_path):
    "Each family's README line, with the hub id swapped for the tiny model of its family and POPE/COCO for stand-ins, on the CPU."
    import json
    from pope_audit.interface.cli import main
    from pope_audit.interface.precision import cpu_4bit_accepts
    args = next(a for a in _gpu_commands() if a[a.index('--model') + 1] == hub)
    qs, imgs = bench
    swap = {hub: str(tiny_dirs[HUB_FAMILY[hub]]), 'POPE/output/coco': str(imgs.parent), 'coco/val2014': str(imgs)}
    args = [swap.get(x, x) for x in args]
    args[args.index('--out') + 1] = str(tmp_path/'run')
    if HUB_FAMILY[hub] == 'qwen2-vl' and not cpu_4bit_accepts(32):       # its tiny vision tower is 32 wide (real ones are not)
        (tmp_path/'keep.yaml').write_text('model_args:\n  quantization_config: {load_in_4bit: true, bnb_4bit_quant_type: nf4, '
                                          'llm_int8_skip_modules: [model.visual, lm_head]}\n')
        args += ['--config', str(tmp_path/'keep.yaml')]
    main(['--quiet', *args, '--limit', '1', '--max-new-tokens', '2', '--device', 'cpu'])
    m = json.loads((tmp_path/'run'/'manifest.json').read_text())
    assert m['identity']['quantization']['method'] == 'bitsandbytes-4bit'
    assert sum(1 for _ in open(tmp_path/'run'/'records.jsonl')) == 3          # one question of each split


def test_scratch_folders_go_with_worker_processes(tmp_path):
    "A scratch folder made in a pool worker (nbdev_test runs notebooks so) is gone when the pool ends: workers end without atexit."
    script = ('import os, sys\nfrom concurrent.futures import ProcessPoolExecutor\nfrom pope_audit.foundation.core import scratch_dir\n'
              'def mk(): return str(scratch_dir())\n'
              "if __name__ == '__main__':\n"
              '    with ProcessPoolExecutor(2) as ex: made = [ex.submit(mk).result() for _ in range(3)]\n'
              '    print(*made, scratch_dir(), sep="\\n")\n')
    (tmp_path/'s.py').write_text(script)
    out = subprocess.run([sys.executable, str(tmp_path/'s.py')], capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 4 and not any(Path(d).exists() for d in out)
