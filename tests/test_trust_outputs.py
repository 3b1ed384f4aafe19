"No write destroys what it reads, an output that cannot be written gets one line and exit 2, and a run folder is reported as what it is."
import json, os, resource, shutil, subprocess, sys
from pathlib import Path
import pytest
from pope_audit.interface.cli import main

CLI = [sys.executable, '-c', 'from pope_audit.interface.cli import main; main()']


def cli(capsys, *args):
    "Exit code, standard output and standard error of `pope-audit ARGS`, run in this process."
    try: main([str(a) for a in args]); code = 0
    except SystemExit as e: code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope='module')
def run_dir(shared, pope, tiny_dirs, tmp_path_factory):
    "A complete run of the tiny LLaVA: the first 6 questions of each split (18 records)."
    from pope_audit.running.inference import run
    from pope_audit.models.tiny import stand_in_images
    d = tmp_path_factory.mktemp('trust')
    images = stand_in_images(pope.groupby('split').head(6).image.unique(), d/'img')
    return run(str(tiny_dirs['llava15']), [shared/'data/pope/coco'], images, d/'run', limit=6, batch_size=4, max_new_tokens=2, progress=False)


@pytest.fixture
def rd(run_dir, tmp_path):
    "A fresh copy of the run folder, and the bytes of its two files."
    out = tmp_path/'run'
    shutil.copytree(run_dir, out)
    return out, {n: (out/n).read_bytes() for n in ('records.jsonl', 'manifest.json')}


def unchanged(rd):
    out, before = rd
    return all((out/n).read_bytes() == b for n, b in before.items())


# 1. No write destroys what it reads

@pytest.mark.parametrize('target', ['records.jsonl', 'manifest.json', 'hardlink', 'symlink', 'fifo', '/dev/null'])
def test_export_never_writes_over_what_it_reads(rd, capsys, target):
    out, _ = rd
    path = {'hardlink': out/'alias.parquet', 'symlink': out/'link.parquet', 'fifo': out/'pipe.parquet', '/dev/null': Path('/dev/null')}.get(target, out/target)
    if target == 'hardlink': os.link(out/'records.jsonl', path)
    if target == 'symlink': path.symlink_to(out/'manifest.json')
    if target == 'fifo': os.mkfifo(path)
    code, stdout, err = cli(capsys, 'export', out, '--parquet', '--out', path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "field 'out': the output file" in err, err
    assert unchanged(rd) and not list(out.glob('.*.part'))
    assert {'records.jsonl': 'is the same file as', 'manifest.json': 'is the same file as', 'hardlink': 'is the same file as',
            'symlink': 'refusing to write through a symbolic link', 'fifo': 'is a FIFO, socket or device', '/dev/null': 'is a FIFO, socket or device'}[target] in err


def test_export_replaces_an_older_parquet_but_no_other_file(rd, capsys, tmp_path):
    out, _ = rd
    assert cli(capsys, 'export', out, '--parquet', '--out', tmp_path/'r.parquet')[0] == 0
    first = (tmp_path/'r.parquet').read_bytes()
    assert first[:4] == b'PAR1'
    assert cli(capsys, 'export', out, '--parquet', '--out', tmp_path/'r.parquet')[0] == 0       # an older export: replaced, no --force
    assert (tmp_path/'r.parquet').read_bytes()[:4] == b'PAR1'
    (tmp_path/'notes.txt').write_text('my notes\n')
    code, _, err = cli(capsys, 'export', out, '--parquet', '--out', tmp_path/'notes.txt')
    assert code == 2 and 'exists and is not a Parquet file' in err and (tmp_path/'notes.txt').read_text() == 'my notes\n'


def test_score_report_and_log_never_write_over_an_input(rd, capsys, tmp_path):
    out, _ = rd
    res = tmp_path/'res'; res.mkdir()
    os.link(out/'records.jsonl', res/'scores.csv')
    code, _, err = cli(capsys, 'score', out, '--boot', '0', '--out', res)
    assert code == 2 and "scores.csv: field 'out': the output file is the same file as" in err, err
    rep = tmp_path/'rep'; rep.mkdir()
    os.link(out/'manifest.json', rep/'report.md')
    code, _, err = cli(capsys, 'report', out, '--out', rep)
    assert code == 2 and 'report.md' in err and 'is the same file as' in err, err
    for log in (out/'records.jsonl', out/'manifest.json', res/'scores.csv'):
        code, _, err = cli(capsys, '--log-file', log, 'score', out, '--boot', '0')
        assert code == 2 and "field 'log-file': the log file is the same file as" in err, err
    os.mkfifo(tmp_path/'log.fifo')
    code, _, err = cli(capsys, '--log-file', tmp_path/'log.fifo', 'score', out, '--boot', '0')
    assert code == 2 and 'the log file is a FIFO, socket or device' in err
    code, _, err = cli(capsys, '--log-file', tmp_path/'new'/'records.jsonl', 'run', '--model', 'm', '--questions', 'q', '--out', tmp_path/'new')
    assert code == 2 and 'is the same file as' in err and not (tmp_path/'new').exists()   # not there yet: compared by name
    assert unchanged(rd)


def test_log_to_standard_output_where_the_help_says_so(rd, capsys):
    out, _ = rd
    code, stdout, err = cli(capsys, '--quiet', '--log-file', '-', 'score', out, '--boot', '0', '--out', out.parent/'res')
    assert code == 0 and ' results: ' in stdout and not Path('-').exists()
    from pope_audit.interface.cli import parser
    assert '- or /dev/stdout: standard output' in ' '.join(parser().format_help().split())


# 2. Outputs that cannot be written

def test_missing_folders_are_made(rd, capsys, tmp_path):
    out, _ = rd
    assert cli(capsys, '--log-file', tmp_path/'a'/'log.txt', 'score', out, '--boot', '0', '--out', tmp_path/'b'/'c')[0] == 0
    assert cli(capsys, 'export', out, '--parquet', '--out', tmp_path/'d'/'e'/'r.parquet')[0] == 0
    assert (tmp_path/'a'/'log.txt').is_file() and (tmp_path/'b'/'c'/'scores.csv').is_file() and (tmp_path/'d'/'e'/'r.parquet').is_file()


@pytest.mark.parametrize('args', [('export', 'RUN', '--parquet', '--out', 'LONG.parquet'), ('score', 'RUN', '--out', 'LONG'),
                                  ('report', 'RUN', '--out', 'LONG'), ('--log-file', 'LONG', 'score', 'RUN')])
def test_a_name_too_long_is_refused(rd, capsys, tmp_path, args):
    out, _ = rd
    args = [str(a).replace('RUN', str(out)).replace('LONG', str(tmp_path/('n' * 300))) for a in args]
    code, _, err = cli(capsys, *args)
    assert code == 2 and 'too long for its file system (3' in err and 'bytes; at most 255)' in err and 'Traceback' not in err, err
    assert unchanged(rd)


@pytest.mark.parametrize('name, kind', [('records.jsonl', 'folder'), ('records.jsonl', 'fifo'), ('manifest.json', 'folder'), ('manifest.json', 'fifo')])
def test_a_folder_or_fifo_where_run_writes_is_refused(tmp_path, capsys, name, kind):
    out = tmp_path/'run'; out.mkdir()
    (out/name).mkdir() if kind == 'folder' else os.mkfifo(out/name)
    code, _, err = cli(capsys, 'run', '--model', 'no-model-needed', '--questions', tmp_path, '--out', out)
    assert code == 2 and f"{name}: field 'out': the {name} is {'a folder' if kind == 'folder' else 'a FIFO, socket or device'}" in err, err
    assert sorted(p.name for p in out.iterdir()) == [name]


RUNNER = """
import contextlib, io, json, sys
from pope_audit.interface.cli import main
res = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try: main(args); code = 0
        except SystemExit as e: code = e.code
    res.append([code, err.getvalue()])
print(json.dumps(res))
"""


def test_read_only_and_full_file_systems_are_refused(rd, tmp_path):
    "In a private mount namespace: RO a read-only tmpfs, FULL a tmpfs filled up; every command that would write there gets one line and exit 2."
    out, _ = rd
    ro, full = tmp_path/'ro', tmp_path/'full'
    ro.mkdir(); full.mkdir()
    if not shutil.which('unshare') or subprocess.run(['unshare', '-rm', 'mount', '-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', str(ro)], capture_output=True).returncode:
        pytest.skip('cannot mount a file system here (needs unshare -rm and tmpfs): the read-only and full-disk cases are checked where it can')
    cases = [(['score', out, '--boot', '0', '--out', ro/'res'], 'is on a read-only file system'),
             (['report', out, '--out', ro/'rep'], 'is on a read-only file system'),
             (['export', out, '--parquet', '--out', ro/'r.parquet'], 'is on a read-only file system'),
             (['--log-file', ro/'log.txt', 'score', out, '--boot', '0'], "field 'log-file': the log file is on a read-only file system"),
             (['run', '--model', 'm', '--questions', 'q', '--out', ro/'run'], 'is on a read-only file system'),
             (['--log-file', full/'log.txt', 'score', out, '--boot', '0'], "field 'log-file': the log file is on a full file system (no space left)"),
             (['score', out, '--boot', '0', '--out', full/'res'], 'is on a full file system (no space left)')]
    script = ('mount -t tmpfs -o ro,size=64k tmpfs "$0" && mount -t tmpfs -o size=64k tmpfs "$1" && '
              '{ dd if=/dev/zero of="$1/fill" bs=4096 2>/dev/null; exec "$2" -c "$3" "$4"; }')
    r = subprocess.run(['unshare', '-rm', 'sh', '-c', script, str(ro), str(full), sys.executable, RUNNER,
                        json.dumps([[str(a) for a in args] for args, _ in cases])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for (args, msg), (code, err) in zip(cases, json.loads(r.stdout)):
        assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, (args, err)
    assert unchanged(rd) and not os.listdir(ro)


def test_a_disk_that_fills_mid_write_leaves_nothing_half_written(rd, tmp_path, capsys):
    "A write that fails after the checks (here: at the file-size limit, as on a disk filling up) is one line and exit 2, and leaves nothing."
    out, _ = rd
    cut = cut_run(rd, 10)                     # its status note is longer than the log's limit below
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, hard))
        code, _, err = cli(capsys, 'score', cut, '--boot', '0', '--out', tmp_path/'res')
        resource.setrlimit(resource.RLIMIT_FSIZE, (50, hard))
        code2, _, err2 = cli(capsys, '--log-file', tmp_path/'log.txt', 'score', cut, '--boot', '0', '--json')
    finally: resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code == 2 and 'error: cannot write an output (File too large)' in err and len(err.strip().splitlines()) == 1, err
    assert [p.name for p in (tmp_path/'res').iterdir()] == []                     # no results, no temporary file
    assert code2 == 2 and "field 'log-file': cannot write the log file (File too large)" in err2, err2


# 3. A run is reported as what it is

def cut_run(rd, n, status='running'):
    "The run folder with only its first `n` records and the manifest's status set to `status`."
    out, before = rd
    (out/'records.jsonl').write_bytes(b''.join(before['records.jsonl'].splitlines(keepends=True)[:n]))
    m = json.loads(before['manifest.json']); m['status'] = status
    (out/'manifest.json').write_text(json.dumps(m))
    return out


def test_an_incomplete_run_says_so_and_a_complete_one_does_not(rd, capsys):
    out, _ = rd
    code, stdout, err = cli(capsys, 'score', out, '--boot', '0')
    assert code == 0 and 'incomplete run' not in stdout + err
    code, stdout, _ = cli(capsys, 'score', out, '--boot', '0', '--json')
    run = json.loads(stdout)['run']
    assert (run['complete'], run['lacking'], run['questions'], run['records']) == (True, 0, 18, 18)
    code, stdout, err = cli(capsys, 'report', out, '--json')
    assert code == 0 and json.loads(stdout)['run']['complete'] and 'incomplete run' not in (out/'report.md').read_text() + err
    cut_run(rd, 10)
    code, stdout, err = cli(capsys, 'score', out, '--boot', '0')
    said = "incomplete run: 10 of 18 questions answered, 8 lacking (manifest status 'running')"
    assert code == 0 and stdout.startswith(said), stdout[:300]
    code, stdout, err = cli(capsys, 'score', out, '--boot', '0', '--json')
    run = json.loads(stdout)['run']
    assert (run['complete'], run['lacking'], run['questions'], run['records'], run['status']) == (False, 8, 18, 10, 'running') and said in err
    code, stdout, err = cli(capsys, 'report', out, '--json')
    assert code == 0 and json.loads(stdout)['run']['lacking'] == 8 and said in (out/'report.md').read_text()
    cut_run(rd, 18, status='running')          # every record, but the run never finished (killed before its manifest said so)
    code, stdout, _ = cli(capsys, 'score', out, '--boot', '0')
    assert stdout.startswith("incomplete run: 18 of 18 questions answered, 0 lacking (manifest status 'running')")


@pytest.mark.parametrize('text, message', [('[]', 'not a run manifest'), ('', 'manifest.json is empty'), ('{"identity": {"model"', 'manifest is not valid JSON'),
                                           ('{"status": "complete"}', 'not a run manifest')])
def test_a_bad_manifest_is_refused(rd, capsys, text, message):
    out, _ = rd
    (out/'manifest.json').write_text(text)
    for cmd in (('score', out, '--boot', '0'), ('report', out)):
        code, _, err = cli(capsys, *cmd)
        assert code == 2 and 'manifest.json' in err and message in err and len(err.strip().splitlines()) == 1, err
    assert not (out/'report.md').exists()


def test_records_of_another_run_are_refused(rd, capsys, tmp_path, run_dir):
    out, before = rd
    (out/'records.jsonl').unlink(); (out/'records.jsonl').symlink_to(run_dir/'records.jsonl')
    for cmd in (('score', out, '--boot', '0'), ('report', out)):
        code, _, err = cli(capsys, *cmd)
        assert code == 2 and 'records.jsonl is a symbolic link' in err, err
    (out/'records.jsonl').unlink()
    lines = before['records.jsonl'].decode().splitlines(keepends=True)
    other = json.loads(lines[4]); other['run_id'] = 'abcdef012345'; other['question_id'] = 999
    (out/'records.jsonl').write_text(''.join(lines) + json.dumps(other) + '\n')
    for cmd in (('score', out, '--boot', '0'), ('report', out)):
        code, _, err = cli(capsys, *cmd)
        assert code == 2 and "records.jsonl:19: field 'run_id': record written by another run (run_id abcdef012345)" in err, err
    # an older run folder, whose records carry no run identity: read, with a note
    (out/'records.jsonl').write_text(''.join(json.dumps({k: v for k, v in json.loads(l).items() if k != 'run_id'}) + '\n' for l in lines))
    code, stdout, err = cli(capsys, 'score', out, '--boot', '0')
    assert code == 0 and 'note: these records carry no run identity (written by an older pope-audit)' in stdout
    assert {json.loads(l)['run_id'] for l in lines} == {json.loads(before['manifest.json'])['run_id']}
