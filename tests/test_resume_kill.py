"A run killed by a real SIGKILL part-way resumes to exactly the records of an uninterrupted run."
import json, os, signal, subprocess, sys, time
from pope_audit.scoring import read_records
from pope_audit.tiny import stand_in_images

CLI = [sys.executable, '-c', 'from pope_audit.cli import main; main()']


def args(shared, model, images, out):
    return ['run', '--model', str(model), '--questions', str(shared/'data/pope/coco'), '--images', str(images),
            '--limit', '90', '--batch-size', '4', '--max-new-tokens', '6', '--out', str(out)]


def test_killed_run_resumes_exactly(shared, pope, tiny_dirs, tmp_path):
    images = stand_in_images(pope.groupby('split').head(90).image.unique(), tmp_path/'img')
    whole, broken = tmp_path/'whole', tmp_path/'broken'
    subprocess.run(CLI + args(shared, tiny_dirs['llava15'], images, whole), check=True, capture_output=True)
    p = subprocess.Popen(CLI + args(shared, tiny_dirs['llava15'], images, broken), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recs = broken/'records.jsonl'
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None and not (recs.exists() and recs.read_bytes().count(b'\n') >= 1):
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    n_killed = recs.read_bytes().count(b'\n')
    assert 0 < n_killed < 270
    assert json.loads((broken/'manifest.json').read_text())['status'] == 'running'
    subprocess.run(CLI + args(shared, tiny_dirs['llava15'], images, broken), check=True, capture_output=True)
    key = lambda r: r.key
    a, b = sorted(read_records(whole), key=key), sorted(read_records(broken), key=key)
    assert len(a) == 270 and a == b
    assert json.loads((broken/'manifest.json').read_text())['status'] == 'complete'


def test_resume_refuses_other_arguments(shared, pope, tiny_dirs, tmp_path):
    images = stand_in_images(pope.groupby('split').head(6).image.unique(), tmp_path/'img')
    a = args(shared, tiny_dirs['llava15'], images, tmp_path/'run')
    a[a.index('--limit') + 1] = '6'
    subprocess.run(CLI + a, check=True, capture_output=True)
    before = (tmp_path/'run'/'records.jsonl').read_bytes()
    a[a.index('--max-new-tokens') + 1] = '3'
    r = subprocess.run(CLI + a, capture_output=True, text=True)
    assert r.returncode == 2
    assert 'manifest.json' in r.stderr and 'decoding.max_new_tokens: 6 → 3' in r.stderr
    assert (tmp_path/'run'/'records.jsonl').read_bytes() == before
