"AMBER end to end: the official rule and printout against inference.py's own outputs, the response file, run, and bad input."
import json, subprocess, sys
from pathlib import Path
import pytest
from pope_audit.interface.cli import main
from pope_audit.benchmarks.amber import amber_answer, amber_scores, inference_text, read_amber_questions, AMBER_GROUPS
from pope_audit.benchmarks.scoring import load_answers, predictions

REF = json.loads((Path(__file__).parent/'reference/amber/inference_outputs.json').read_text())


def answer(kind, j, label):
    "The answers the reference run gave to the j-th question of query_discriminative.json."
    if kind == 'battery': return REF['battery'][j % len(REF['battery'])]
    a = 'Yes' if (label == 'yes') != (j % 7 == 0) else 'No'
    return a.lower() if j % 11 == 0 else a


@pytest.fixture(scope='module')
def questions(shared): return read_amber_questions(shared/'data/amber')


def responses(questions, path, kind='battery', edit=None):
    rs = [dict(id=int(q), response=answer(kind, j, l)) for j, (q, l) in enumerate(zip(questions.question_id, questions.label))]
    path.write_text(json.dumps(edit(rs) if edit else rs))
    return path


def score(args, capsys):
    main(['score', *map(str, args), '--json', '--boot', '0'])
    return json.loads(capsys.readouterr().out)


def test_questions(questions):
    "14,216 questions in five groups; both relation type strings land in amber-relation; labels from annotations.json."
    assert len(questions) == 14216 and tuple(dict.fromkeys(sorted(questions.split))) == tuple(sorted(AMBER_GROUPS))
    n = questions.groupby('split').label.value_counts().to_dict()
    assert n[('amber-relation', 'yes')] == 975 and n[('amber-relation', 'no')] == 689 and n[('amber-existence', 'no')] == 4924
    assert ('amber-existence', 'yes') not in n and n[('amber-state', 'yes')] == n[('amber-state', 'no')] == 2382


def test_rule_is_exact():
    assert [amber_answer(b) for b in REF['battery']] == ['yes', 'no'] + ['other'] * (len(REF['battery']) - 2)


@pytest.mark.parametrize('kind', ['battery', 'mostly_right'])
def test_printout_is_inference_py(questions, tmp_path, kind):
    "inference.py --evaluation_type d's printout, character for character, from AMBER's response file."
    recs = load_answers(responses(questions, tmp_path/'r.json', kind), questions=questions).records
    assert len(recs) == 14216
    assert inference_text(amber_scores(predictions(recs, ['amber'])), 'amber') == REF['printed'][kind]


def test_exact_beside_printed(questions, tmp_path):
    "The exact figures beside inference.py's: its F1 from rounded P and R, and existence's 0.001 in the denominator."
    sc = amber_scores(predictions(load_answers(responses(questions, tmp_path/'r.json', 'mostly_right'), questions=questions).records, ['amber']))
    ex = sc.set_index('section').loc['Exsitence']
    assert ex.no == 4924 and ex.precision == 100.0 and round(ex.recall, 2) == 77.90 and ex.as_printed['recall'] == 77.9
    assert round(ex.f1, 2) == 87.58 and ex.as_printed['f1'] == 87.5
    whole = sc.set_index('section').loc['Descriminative Task']
    assert whole.questions == 14216 and whole.right == 11077 and round(whole.accuracy, 2) == 77.92


def test_score_cli(shared, questions, tmp_path, capsys):
    "score reads AMBER's response JSON with its data folder, names the benchmark, gives every readout's AMBER figures."
    f = responses(questions, tmp_path/'resp.json', 'mostly_right')
    doc = score([f, '--questions', shared/'data/amber'], capsys)
    assert doc['benchmark'] == 'amber' and doc['kind'] == 'amber'
    assert doc['amber']['inference_py']['amber'] == REF['printed']['mostly_right']
    secs = {(s['readout'], s['section']): s for s in doc['amber']['sections']}
    assert secs[('pope_parse', 'Descriminative Task')]['right'] > secs[('amber', 'Descriminative Task')]['right']   # lower-case yes/no count for POPE's rule
    main(['score', str(f), '--questions', str(shared/'data/amber'), '--boot', '0'])
    out = capsys.readouterr().out
    assert "AMBER, discriminative task, as inference.py computes it" in out and 'inference.py itself, on the official rule (amber):' in out


BAD = [  # (edit of the response list, expected message)
    (lambda rs: [dict(id=7, response='A dog on a sofa.')] + rs, "field '[0].id': id 7: a generative (caption) id"),
    (lambda rs: rs[:5] + [rs[2]], "field '[5].id': id 1007 is answered twice (first at [2])"),
    (lambda rs: rs[:3] + [dict(id=20000, response='Yes')], "field '[3].id': id 20000: no question in the question set has it"),
    (lambda rs: rs[:3] + [dict(id=1010, response=None)], "field '[3].response': response must be a string"),
]


@pytest.mark.parametrize('edit,msg', BAD)
def test_bad_responses(shared, questions, tmp_path, capsys, edit, msg):
    f = responses(questions, tmp_path/'bad.json', edit=edit)
    with pytest.raises(SystemExit) as e: score([f, '--questions', shared/'data/amber'], capsys)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert 'bad.json' in err and msg in err


def test_needs_questions(questions, tmp_path, capsys):
    with pytest.raises(SystemExit) as e: score([responses(questions, tmp_path/'r.json')], capsys)
    assert e.value.code == 2 and "give AMBER's data folder (--questions)" in capsys.readouterr().err


def test_ls_and_no_torch(shared, questions, tmp_path, capsys):
    main(['ls', 'benchmarks'])
    assert 'amber ' in capsys.readouterr().out
    f = responses(questions, tmp_path/'r.json')
    code = ("import sys; from pope_audit.benchmarks.scoring import load_answers; from pope_audit.benchmarks.benchmark import benchmark_scores, find_benchmark; "
            f"q, _ = find_benchmark([{str(shared/'data/amber')!r}]).load([{str(shared/'data/amber')!r}]); "
            f"doc, text = benchmark_scores(load_answers({str(f)!r}, questions=q)); assert doc['benchmark'] == 'amber'; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_run_amber(shared, tmp_path, capsys):
    "run detects AMBER's data folder and reads its images from a flat folder; its records score as AMBER; report works."
    from pope_audit.models.tiny import stand_in_images
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    q = read_amber_questions(shared/'data/amber', ['amber-existence', 'amber-number'])
    stand_in_images(sorted(set(q.groupby('split').head(2).image)), tmp_path/'img', size=(32, 32))
    main(['run', '--model', tiny_vlm_dir('llava15'), '--questions', shared/'data/amber', '--images', tmp_path/'img',
          '--splits', 'amber-existence', 'amber-number', '--limit', '2', '--max-new-tokens', '2', '--out', tmp_path/'run', '--json'])
    capsys.readouterr()
    doc = score([tmp_path/'run'], capsys)
    assert doc['benchmark'] == 'amber'
    assert {s['section'] for s in doc['amber']['sections'] if s['readout'] == 'amber'} == {'Descriminative Task', 'Exsitence', 'Attribute', 'Number'}
    main(['report', tmp_path/'run'])
    assert (tmp_path/'run/report.html').is_file() and 'amber-number' in (tmp_path/'run/report.md').read_text()
