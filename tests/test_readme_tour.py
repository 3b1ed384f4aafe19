"The README's tour as a newcomer pastes it: each shell block run as written, in the repository's root, and what it prints compared with the output the page shows under it."
import difflib, os, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
READER_TOUR = '/tmp/pope-audit-tour'          # the tour's folder when a reader pastes it (TOUR unset)
REGENERATE = 'execute nbs/index.ipynb (jupyter nbconvert --to notebook --execute --inplace), then python .ci/readme.py'


def tour_blocks(readme:str) -> list[tuple[str, str]]:
    "The tour's (shell block, the output block right under it) pairs; a shell block with no output under it is not one."
    tour = readme[readme.index('## A tour'):]
    tour = tour[:tour.index('\n## ', 1)]
    return re.findall(r'```sh\n(.*?)```\n\n```\n(.*?)```', tour, re.S)


def normalised(text:str, tour:str) -> list[str]:
    "What may differ between two runs of the same command: the tour folder, a results file's timestamp, trailing blanks."
    text = text.replace(tour, READER_TOUR)
    text = re.sub(r'\d{8}T\d{6}Z', 'YYYYMMDDTHHMMSSZ', text)
    return [l.rstrip() for l in text.rstrip().splitlines()]


def test_tour_blocks_are_found():
    "The tour shows the probe, a scoring of real answers, the paper's reconstruction and a run, each with its output."
    blocks = tour_blocks((ROOT/'README.md').read_text())
    firsts = [next(l for l in cmd.splitlines() if l.startswith('pope-audit')).split()[1:2] for cmd, _ in blocks]
    assert firsts == [['probe'], ['score'], ['reconstruct'], ['--quiet']], firsts


def test_normalised_paths_and_times():
    out = normalised('results: /x/t/scored/results_20261202T070747Z.json  \n/x/t/run\n\n', '/x/t')
    assert out == [f'results: {READER_TOUR}/scored/results_YYYYMMDDTHHMMSSZ.json', f'{READER_TOUR}/run']


@pytest.mark.parametrize('i', range(4), ids=['probe', 'score', 'reconstruct', 'run'])
def test_shown_output_is_what_the_command_prints(i, tmp_path, shared):
    "A stale shown output fails here, with the difference and how to regenerate the page."
    cmd, shown = tour_blocks((ROOT/'README.md').read_text())[i]
    env = {**os.environ, 'TOUR': str(tmp_path/'tour'), 'PYTHONUNBUFFERED': '1', 'PATH': f'{Path(sys.executable).parent}{os.pathsep}{os.environ["PATH"]}'}
    rel = os.path.relpath(shared, ROOT)               # the page shows ../shared, where the shared folder lies beside the clone
    if rel == '../shared': env.pop('POPE_AUDIT_SHARED', None)
    else: env['POPE_AUDIT_SHARED'] = rel
    r = subprocess.run(['bash', '-c', 'set -e -o pipefail\n' + cmd], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900)                  # one stream, unbuffered: in the order a terminal shows it
    assert r.returncode == 0, r.stdout[-3000:]
    got, want = normalised(r.stdout.replace(rel + '/', '../shared/'), str(tmp_path/'tour')), normalised(shown, str(tmp_path/'tour'))
    diff = '\n'.join(difflib.unified_diff(want, got, 'README.md (shown)', 'the command now', lineterm='', n=1))
    assert got == want, f'the README shows another output than the command prints; {REGENERATE}:\n{diff}'
