"Relabelled labels (RePOPE) and image-clustered statistics: values checkable by hand or from RePOPE's own figures, and every bad input refused with exit 2, nothing written."
import json, shutil
import numpy as np
import pytest
from conftest import run_cli
from pope_audit.foundation.metrics import (clustered_mcnemar, design_effect, metric_se, bootstrap_ci, scores, confusion, min_detectable, diff_ci)

A13 = 'data/pope/llava/answers/llava-v1.5-13b.jsonl'

def q13(shared): return ['--questions', shared/'data/pope/llava/llava_pope_test.jsonl', '--labels', shared/'data/pope/llava/coco']

def test_repope_error_rates(shared):
    "RePOPE's published 9.3% wrong yes labels and 1.7% wrong no labels, from the files."
    from pope_audit.benchmarks.relabel import read_relabel, label_changes, find_files, POPE_COCO
    from pope_audit.foundation.data import read_pope_files
    ch = label_changes(read_relabel('repope'), read_pope_files([find_files(POPE_COCO)])).set_index('split')
    assert round(139 / 1500, 3) == 0.093 and set(ch.yes_to_no) == {139}
    assert round(ch.no_to_yes.sum() / 4500, 3) == 0.017
    assert ch.kept.tolist() == [2512, 2549, 2630]

def test_score_relabel_llava_copy(shared, capsys):
    "LLaVA's older copy (other ids, 'imange', 2,910 random) joins by image and question; RePOPE's figures as it prints them."
    code, out, err = run_cli(capsys, 'score', shared/A13, *q13(shared), '--relabel', 'repope', '--boot', '0', '--json')
    assert code == 0, err
    doc = json.loads(out)
    cov = {r['split']: r for r in doc['relabel']['coverage']}
    assert {s: cov[s]['in_set'] for s in cov} == dict(adversarial=2684, popular=2727, random=2687)
    assert all(r['not_in_pope'] == 0 for r in cov.values())
    pr = {(r['variant'], r['split']): r for r in doc['relabel']['printed']}
    assert (pr['POPE', 'adversarial']['TP'], pr['POPE', 'adversarial']['FP']) == (1182, 117)
    assert (pr['RePOPE', 'adversarial']['TP'], pr['RePOPE', 'adversarial']['FN']) == (1036, 151)
    t = {(r['readout'], r['split']): r for r in doc['relabel']['table']}
    assert round(t['pope_parse', 'adversarial']['f1_relabelled'], 4) == 0.8889

def test_relabel_folder_prefers_repope_files(shared, tmp_path, capsys):
    "RePOPE's annotations folder holds the original POPE files too: the relabelled ones are taken."
    d = tmp_path/'annotations'; d.mkdir()
    for s in ('adversarial', 'popular', 'random'):
        shutil.copy(shared/'data/repope'/f'coco_repope_{s}.json', d)
        shutil.copy(shared/'data/pope/coco'/f'coco_pope_{s}.json', d)
    code, out, err = run_cli(capsys, 'score', shared/A13, *q13(shared), '--relabel', d, '--boot', '0', '--json')
    assert code == 0, err
    assert sorted(json.loads(out)['relabel']['source']) == ['adversarial', 'popular', 'random']

def _bad(tmp_path, name, lines):
    p = tmp_path/name; p.write_text('\n'.join(lines) + '\n'); return p

@pytest.mark.parametrize('name,lines,msg', [
    ('x_random.json', ['{"question_id": 1, "image": "COCO_val2014_000000310196.jpg", "text": "Is there a snowboard in the image?", "label": "yes"}',
                       '{"question_id": 2, "image": "COCO_val2014_000000310196.jpg", "text": "Is there a snowboard in the image?", "label": "no"}'],
     "x_random.json:2: field 'label': contradicts itself"),
    ('x_random.json', ['{"question_id": 1, "image": "a.jpg", "query": "Is there a dog?", "label": "yes"}'], "x_random.json:1: field 'text': missing field"),
    ('query_discriminative.json', ['{"question_id": 1, "image": "a.jpg", "text": "Is there a dog?", "label": "yes"}'], 'another benchmark'),
    ('x_random.json', ['{"question_id": 1, "image": "elsewhere.jpg", "text": "Is there a dog in the image?", "label": "yes"}'], 'holds none of the'),
])
def test_bad_relabel(shared, tmp_path, capsys, name, lines, msg):
    "A relabel file that is not POPE's layout, contradicts itself, names another benchmark, or matches nothing: one line, exit 2, nothing written."
    p = _bad(tmp_path, name, lines)
    out = tmp_path/'out'
    code, _, err = run_cli(capsys, 'score', shared/A13, *q13(shared), '--relabel', p, '--boot', '0', '--out', out)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() or not any(out.iterdir())

def test_relabel_other_benchmark_answers(shared, tmp_path, capsys):
    "Answers of another benchmark (MME's subtasks) cannot be relabelled with a POPE relabel set."
    from pope_audit.benchmarks.relabel import relabel_join, read_relabel
    import pandas as pd
    with pytest.raises(Exception, match='another benchmark'):
        relabel_join(pd.DataFrame(dict(split=['existence'], image=['a.jpg'], question=['Is there a dog?'], label=['yes'])), read_relabel('repope'))

def test_download_stand_in(shared, tmp_path, monkeypatch):
    "The download path, on a local folder laid out as the host lays out the repository; a wrong file is refused and not kept."
    from pope_audit.benchmarks.relabel import REPOPE, fetch_files
    host = tmp_path/'host'; d = host/REPOPE.repo/REPOPE.commit/REPOPE.folder; d.mkdir(parents=True)
    for s in ('adversarial', 'popular', 'random'): shutil.copy(shared/'data/repope'/f'coco_repope_{s}.json', d)
    shutil.copy(shared/'data/pope/coco/coco_pope_popular.json', d/'coco_repope_popular.json')
    monkeypatch.setenv('POPE_AUDIT_CACHE', str(tmp_path/'cache'))
    with pytest.raises(Exception, match='not the pinned version'): fetch_files(REPOPE, base=host.as_uri())
    assert not list((tmp_path/'cache').rglob('coco_repope_popular.json'))
    shutil.copy(shared/'data/repope/coco_repope_popular.json', d)
    got = fetch_files(REPOPE, base=host.as_uri())
    assert sorted(p.name for p in got.iterdir()) == ['coco_repope_adversarial.json', 'coco_repope_popular.json', 'coco_repope_random.json']

def test_repope_rule():
    "RePOPE's compute_answer: substring tests, yes first."
    from pope_audit.foundation.readouts import READOUTS, Record
    got = [READOUTS['repope'](Record('random', 1, '', '', 'yes', text=t)) for t in ['Yes', 'nothing', 'Yes and no', 'a cat', 'Not really']]
    assert got == ['yes', 'no', 'yes', 'unknown', 'no']

def test_cluster_design_effect_by_hand():
    "All-or-nothing images: the design effect of accuracy is (n − 1)/(G − 1); singleton clusters give back the textbook variance."
    img = np.repeat(np.arange(100), 6)
    lab = np.tile(['yes', 'no'], 300)
    right = np.repeat(np.arange(100) % 4 != 0, 6)
    pred = np.where(right, lab, np.where(lab == 'yes', 'no', 'yes'))
    assert abs(design_effect(pred, lab, 'accuracy', img) - 599 / 99) < 1e-9
    assert abs(metric_se(pred, lab, 'accuracy') ** 2 - 0.75 * 0.25 / 599) < 1e-12
    lo, hi = bootstrap_ci(pred, lab, 'accuracy', n_boot=4000, clusters=img)
    lq, hq = bootstrap_ci(pred, lab, 'accuracy', n_boot=4000)
    assert (hi - lo) > 2 * (hq - lq)                      # the image interval is about sqrt(6) times wider

def test_obuchowski_singletons():
    "With every question its own cluster Obuchowski's statistic is (b − c)²(N − 1) / (N(b + c) − (b − c)²)."
    b, c, n = 30, 10, 200
    lab = ['yes'] * n
    pa = ['yes'] * b + ['no'] * c + ['yes'] * (n - b - c)
    pb = ['no'] * b + ['yes'] * c + ['yes'] * (n - b - c)
    got = clustered_mcnemar(pa, pb, lab)['statistic']
    assert abs(got - (b - c) ** 2 * (n - 1) / (n * (b + c) - (b - c) ** 2)) < 1e-9

def test_yes_bias_and_tnr():
    "The paper's adversarial matrices: eight-token yes-bias (1356 − 1500)/3000, two-token (2280 − 1500)/3000."
    eight = dict(tp=1174, fp=182, tn=1318, fn=326, up=0, un=0)
    two = dict(tp=1438, fp=842, tn=658, fn=62, up=0, un=0)
    assert abs(scores(eight)['yes_bias'] + 0.048) < 1e-12 and abs(scores(two)['yes_bias'] - 0.26) < 1e-12
    assert abs(scores(eight)['tnr'] - 1318 / 1500) < 1e-12

def test_min_detectable():
    assert abs(min_detectable(0.01, 0.05, 0.8) - 0.028016) < 1e-5

def test_score_resample_questions(shared, capsys):
    "--resample questions gives the question-level intervals; images are the default and report the design effect."
    args = ['score', shared/A13, *q13(shared), '--splits', 'adversarial', '--boot', '300', '--readouts', 'pope_parse', '--json']
    code, out, err = run_cli(capsys, *args)
    img = json.loads(out)
    code2, out2, _ = run_cli(capsys, *args, '--resample', 'questions')
    q = json.loads(out2)
    assert code == code2 == 0 and img['resample'] == 'images' and q['resample'] == 'questions'
    assert 0.8 < img['f1_intervals'][0]['deff'] < 1.0 and q['f1_intervals'][0]['deff'] is None
