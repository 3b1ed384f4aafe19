"The paper's own per-question records (package assets, derived by tests/paper_fixtures.py): the paper's figures from them, their provenance, the deriver's round trip and its refusals."
import csv, hashlib, json, sys
from pathlib import Path
import numpy as np
import pytest
from pope_audit.foundation.paper import PAPER, PAPER_RECORDS, paper_records, paper_attention, paper_provenance
from pope_audit.foundation.metrics import confusion, scores, design_effect, linearised, clustered_var, clustered_mcnemar, mcnemar_test

sys.path.insert(0, str(Path(__file__).parent))
import paper_fixtures

SPLITS = ('adversarial', 'popular', 'random')

def f1(r, n): return scores(confusion(r[n], r.label))['f1']


@pytest.mark.parametrize('split,printed,unrounded', [('adversarial', 6.13, 6.13), ('popular', 5.37, 5.37), ('random', 3.16, 3.15)])
def test_gap_per_split(split, printed, unrounded):
    "The paper's gaps 6.13 / 5.37 / 3.16 are differences of F1 rounded to 4 decimals; the records' own random gap is 3.15."
    r = paper_records(split)
    e, t = f1(r, 'eight_token'), f1(r, 'two_token')
    assert (round(e, 4), round(t, 4)) == (PAPER['eight_token'][split]['f1'], PAPER['two_token'][split]['f1'])
    assert round(100 * (round(e, 4) - round(t, 4)), 2) == printed
    assert round(100 * (e - t), 2) == unrounded


@pytest.mark.parametrize('split', SPLITS)
def test_eight_token_confusion_and_images(split):
    "The eight-token confusion matrix is the paper's; 500 images of six questions, three present and three absent."
    r = paper_records(split)
    c = confusion(r.eight_token, r.label)
    assert {k: c[k] for k in ('tp', 'tn', 'fp', 'fn')} == {k: PAPER['eight_token'][split][k] for k in ('tp', 'tn', 'fp', 'fn')}
    per = r.groupby('image').label.agg(['size', lambda l: (l == 'yes').sum()])
    assert len(per) == 500 and set(per['size']) == {6} and set(per.iloc[:, 1]) == {3}


def test_design_effect_on_the_papers_records():
    "Linearised design effects by image on the adversarial split (no resampling: exact to 3 decimals), all below 1 on POPE's balanced images."
    r = paper_records('adversarial')
    got = [round(design_effect(r[n], r.label, 'f1', r.image), 3) for n in ('eight_token', 'two_token')]
    z = linearised(r.eight_token, r.label) - linearised(r.two_token, r.label)
    assert got == [0.865, 0.280]
    assert round(clustered_var(z, r.image) / clustered_var(z), 3) == 0.662
    assert round(design_effect(r.eight_token, r.label, 'f1', r.question_id), 12) == 1      # one question per cluster: no effect


def test_mcnemar_on_the_papers_records():
    "660 questions right only under eight tokens, 264 only under two; Obuchowski by image has 500 clusters and a larger statistic (deff < 1)."
    r = paper_records('adversarial')
    m, c = mcnemar_test(r.eight_token, r.two_token, r.label), clustered_mcnemar(r.eight_token, r.two_token, r.label, r.image)
    assert (m['a_only'], m['b_only'], c['clusters']) == (660, 264, 500)
    assert c['statistic'] > m['statistic']


def test_attention_diagnostic_reproduces_the_papers_effect():
    "Wrong answers drew more attention to the image: d = -0.455 (the paper's -0.46), and its p = 1.4e-24 is Mann–Whitney's, not a t-test's."
    from pope_audit.appendix.attention import compare_groups
    a = paper_attention()
    c = compare_groups(a.grounding, a.prediction == a.label, n_boot=0)
    assert (c['n_correct'], c['n_wrong']) == (2490, 510)
    assert round(c['cohens_d'], 3) == -0.455 and round(c['cohens_d'], 2) == -0.46
    assert f"{c['mannwhitney_p']:.1e}" == '1.4e-24' and c['welch_p'] > 1e-23 and c['student_p'] > 1e-23


def test_provenance_names_every_file_and_matches_it():
    prov = paper_provenance()
    assert sorted(prov) == ['attention_adversarial.csv'] + [f'gap_{s}.csv' for s in SPLITS]
    for name, p in prov.items():
        assert p['repository'] == 'Kesav2k04/ugaa-research' and len(p['commit']) == 40 and p['source'].startswith('experiments/')
        assert hashlib.sha256((PAPER_RECORDS/name).read_bytes()).hexdigest() == p['sha256'], name
        assert p['rows'] == 3000 and p['note'] and p['checks']
    assert {prov[f'gap_{s}.csv']['commit'] for s in SPLITS} == {'da8adaef8f447932f4c9e7b88df59f2d5b915e48'}
    assert prov['attention_adversarial.csv']['commit'] == 'acffc21525f7a4175f6a2690547b2c91dcbec040'


def test_records_refuse_an_unknown_split():
    with pytest.raises(ValueError, match="no paper records for split 'existence'"): paper_records('existence')


# the paper's files rebuilt from the shipped fixtures and their provenance: the same bytes as the local copy they came from

def _rows(name):
    with open(PAPER_RECORDS/name, newline='') as f: return list(csv.DictReader(f))

def _dump(obj): return json.dumps(obj, indent=2)

def rebuild_gap(split):
    prov = paper_provenance()[f'gap_{split}.csv']
    qid = str if split == 'adversarial' else int           # the paper's adversarial file writes question ids as strings
    res = [dict(question_id=qid(int(r['question_id'])), label=r['label'], pred_2tok=r['two_token'], pred_8tok=r['eight_token'],
                top_token_id=3869 if r['eight_token'] == 'yes' else 1939) for r in _rows(f'gap_{split}.csv')]
    return dict(summary=prov['summary'], results=res)

def rebuild_attention():
    prov = paper_provenance()['attention_adversarial.csv']
    res = []
    for r in _rows('attention_adversarial.csv'):
        y, n = float(r['yes_raw']), float(r['no_raw'])
        res.append(dict(label=r['label'], prediction=r['prediction'], baseline_prediction=r['prediction'], yes_raw=y, no_raw=n, gap_raw=y - n,
                        grounding=float(r['grounding']), clip_l_max_sim=float(r['clip_l_max_sim']), visual_span=[1, 577], question_id=r['question_id']))
    return dict(summary=prov['summary'], results=res)

@pytest.fixture
def copy(tmp_path):
    "A folder laid out as the paper's repository, rebuilt from the fixtures."
    d = tmp_path/'ugaa-research'/'experiments'; d.mkdir(parents=True)
    for s in SPLITS: (d/f'pope_{s}_2tok_vs_8tok.json').write_text(_dump(rebuild_gap(s)))
    (d/'ugaa_full_adversarial_3000q_diagnostic.json').write_text(_dump(rebuild_attention()))
    return d.parent

def test_fixtures_hold_everything_of_their_source(copy):
    "Rebuilt from the fixtures, each of the paper's files has the sha256 of the local copy the fixture was derived from."
    prov = paper_provenance()
    for name, p in prov.items():
        assert hashlib.sha256((copy/p['source']).read_bytes()).hexdigest() == p['source_sha256'], name

def test_deriver_round_trip(shared, copy, tmp_path):
    "The deriver, run on the rebuilt copy, writes the shipped fixtures byte for byte."
    out = tmp_path/'out'
    paper_fixtures.main([str(copy), '--only', 'gap', '--commit', 'da8adaef8f447932f4c9e7b88df59f2d5b915e48', '--out', str(out)])
    for s in SPLITS: assert (out/f'gap_{s}.csv').read_bytes() == (PAPER_RECORDS/f'gap_{s}.csv').read_bytes()
    paper_fixtures.main([str(copy), '--only', 'attention', '--commit', 'acffc21525f7a4175f6a2690547b2c91dcbec040', '--out', str(out)])
    assert (out/'attention_adversarial.csv').read_bytes() == (PAPER_RECORDS/'attention_adversarial.csv').read_bytes()
    got = json.loads((out/'provenance.json').read_text())
    assert {k: v['sha256'] for k, v in got.items()} == {k: v['sha256'] for k, v in paper_provenance().items()}


def _break(copy, rel, how):
    p = copy/rel
    d = json.loads(p.read_text()); how(d); p.write_text(_dump(d))

@pytest.mark.parametrize('rel,how,msg', [
    ('experiments/pope_random_2tok_vs_8tok.json', lambda d: d['results'].pop(), "2999 of POPE random's 3000 questions"),
    ('experiments/pope_random_2tok_vs_8tok.json', lambda d: d['results'][3].update(label='yes'), "record 3: field 'label'"),
    ('experiments/pope_popular_2tok_vs_8tok.json', lambda d: d['results'][0].update(pred_8tok='no'), "record 0: field 'pred_8tok': not the greedy token"),
    ('experiments/pope_popular_2tok_vs_8tok.json', lambda d: d['results'][0].update(pred_2tok='no'), "field 'summary.eval_2token'"),
    ('experiments/pope_adversarial_2tok_vs_8tok.json', lambda d: d['results'][7].update(question_id='2'), 'question 2 appears twice'),
    ('experiments/ugaa_full_adversarial_3000q_diagnostic.json', lambda d: d['results'][2].update(gap_raw=9.0), "record 2: field 'gap_raw'"),
    ('experiments/ugaa_full_adversarial_3000q_diagnostic.json', lambda d: d['results'][2].update(grounding=None), "record 2: field 'grounding'"),
])
def test_deriver_refuses_a_bad_copy(shared, copy, tmp_path, capsys, rel, how, msg):
    "A copy that fails a check: one line naming the file, record and field, exit 2, nothing written."
    _break(copy, rel, how)
    out = tmp_path/'out'
    with pytest.raises(SystemExit) as e: paper_fixtures.main([str(copy), '--commit', 'da8adaef8f447932f4c9e7b88df59f2d5b915e48', '--out', str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and msg in err and rel in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
