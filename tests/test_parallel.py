"Data-parallel runs on the CPU: two gloo processes write the records one process writes, survive a kill -9, and keep the lock."
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from pope_audit.running.runconfig import RunFolder

CLI = [sys.executable, '-m', 'pope_audit.interface.cli']


@pytest.fixture
def args(shared, pope, tiny_dirs, tmp_path):
    from pope_audit.models.tiny import stand_in_images
    imgs = stand_in_images(pope.groupby('split').head(30).image.unique(), tmp_path/'img')
    return lambda out, *extra: ['run', '--model', str(tiny_dirs['llava15']), '--questions', str(shared/'data/pope/coco'), '--images', str(imgs),
                                '--limit', '30', '--batch-size', '4', '--max-new-tokens', '3', '--out', str(out), *extra]


def children(pid):
    "Process ids whose parent is `pid` (from /proc)."
    out = []
    for d in Path('/proc').iterdir():
        if d.name.isdigit():
            try: ppid = int((d/'stat').read_text().rsplit(')', 1)[1].split()[1])
            except (OSError, IndexError, ValueError): continue
            if ppid == pid: out.append(int(d.name))
    return out


@pytest.mark.slow      # 41 s of CPU: three torchrun runs; the folder and launcher checks below stay in the default suite; CI runs it (POPE_AUDIT_SLOW=1)
def test_two_processes_equal_one_and_survive_a_killed_worker(args, tmp_path):
    subprocess.run(CLI + args(tmp_path/'one'), check=True, capture_output=True)
    r = subprocess.run(CLI + args(tmp_path/'two', '--processes', '2'), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    one = (tmp_path/'one'/'records.jsonl').read_bytes()
    assert (tmp_path/'two'/'records.jsonl').read_bytes() == one
    m = json.loads((tmp_path/'two'/'manifest.json').read_text())
    assert m['status'] == 'complete' and m['environment']['world_size'] == 2 and set(m['shards']['plan']) == {'0', '1'}
    # kill -9 one worker part-way, then resume (with another number of processes): nothing lost, nothing doubled
    out = tmp_path/'killed'
    p = subprocess.Popen(CLI + args(out, '--processes', '2'), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline and not any(f.stat().st_size for f in out.glob('records.rank*.jsonl')): time.sleep(0.05)
    workers = [c for t in children(p.pid) for c in children(t)] or children(p.pid)
    os.kill(max(workers), signal.SIGKILL)
    p.wait()
    assert json.loads((out/'manifest.json').read_text())['status'] == 'running'
    r = subprocess.run(CLI + args(out), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out/'records.jsonl').read_bytes() == one and not list(out.glob('records.rank*'))


def test_a_second_run_is_refused_while_the_folder_is_held(args, tmp_path):
    holder = subprocess.Popen([sys.executable, '-c', f'from pope_audit.running.runconfig import RunFolder; import time; RunFolder({str(tmp_path/"run")!r}).lock(); print("held", flush=True); time.sleep(600)'],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == 'held'
    r = subprocess.run(CLI + args(tmp_path/'run', '--processes', '2'), capture_output=True, text=True)
    holder.kill(); holder.wait()
    assert r.returncode == 2 and f'in use by pid {holder.pid}' in r.stderr
