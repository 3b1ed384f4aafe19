"What a newcomer meets on a fresh clone: output folders git ignores, one-line errors, a suite that writes only to its own temporary folder."
import os, re, subprocess, sys, tempfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_out_folders() -> set[str]:
    "Relative `--out` folders anywhere in the README (shell blocks and inline commands), and the commands' own defaults."
    text = (ROOT/'README.md').read_text()
    outs = {o.split('/')[0] for o in re.findall(r'--out\s+([^\s$/`][^\s`]*)', text)}
    from pope_audit.audit import audit_demo
    from pope_audit.precision import precision_demo
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
    r = subprocess.run([sys.executable, '-m', 'pope_audit.cli', 'report', str(tmp_path/'nothing')], capture_output=True, text=True)
    assert r.returncode == 2 and 'no such run folder or answer file' in r.stderr and '--out' not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_suite_writes_below_its_own_temporary_folder(tmp_path):
    "conftest points TMPDIR and the package cache at one folder it removes at the end; this test's tmp_path lies below it."
    root = Path(os.environ['TMPDIR'])
    assert root.name.startswith('pope-audit-tests-') and tmp_path.is_relative_to(root)
    assert Path(tempfile.mkdtemp()).is_relative_to(root)
    assert Path(os.environ['POPE_AUDIT_CACHE']).is_relative_to(root)
