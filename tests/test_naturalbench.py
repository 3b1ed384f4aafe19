"NaturalBench (on the repository's fine-tuning test split, not the benchmark proper): extract_answer and get_scores against evaluation.py's own outputs, the answer file, run, and bad input."
import json
from pathlib import Path
import pytest
from pope_audit.interface.cli import main
from pope_audit.benchmarks.naturalbench import naturalbench_answer, naturalbench_scores, read_naturalbench_questions
from pope_audit.benchmarks.scoring import load_answers, predictions

REF = json.loads((Path(__file__).parent/'reference/naturalbench/evaluation_outputs.json').read_text())


def answer(kind, j, label):
    "The reference run's answer to item j (position in test_set.json)."
    if kind == 'battery': return REF['battery'][j % len(REF['battery'])]
    if j % 9 == 0: return 'I cannot tell'
    return {'Yes': 'No', 'No': 'Yes'}.get(label, label) if j % 5 == 0 else label   # mcq items: not scored


@pytest.fixture(scope='module')
def test_set(shared): return shared/'data/naturalbench/test_set.json'


def outputs(test_set, path, kind='battery', n=None):
    items = json.loads(test_set.read_text())
    path.write_text(json.dumps([answer(kind, j, o[2]) for j, o in enumerate(items)][:n]))
    return path


def score(args, capsys):
    main(['score', *map(str, args), '--json', '--boot', '0'])
    return json.loads(capsys.readouterr().out)


def test_rule_is_extract_answer():
    assert [naturalbench_answer(b) for b in REF['battery']] == REF['parsed']
    assert REF['mcq_task_type'].startswith('ValueError')            # why the multiple-choice groups are left out


def test_questions(test_set):
    q = read_naturalbench_questions(test_set)
    assert len(q) == 3372 and q.question_id.max() == 3799 and q.question_id.floordiv(4).nunique() == 843
    assert (q.groupby(q.question_id // 4).size() == 4).all()          # whole yes/no groups; the 107 multiple-choice groups left out
    assert list(q.label[:4]) == ['yes', 'no', 'no', 'yes']


@pytest.mark.parametrize('kind', ['battery', 'mostly_right'])
def test_scores_are_get_scores(test_set, tmp_path, capsys, kind):
    "score on evaluation.py's output_file: get_scores' figures, printed as it prints them, beside the exact ones."
    doc = score([outputs(test_set, tmp_path/'out.json', kind), '--questions', test_set], capsys)
    assert doc['benchmark'] == 'naturalbench' and doc['kind'] == 'naturalbench'
    s = {r['readout']: r for r in doc['naturalbench']['scores']}
    assert s['naturalbench']['as_printed'] == REF['printed'][kind] and s['naturalbench']['groups'] == 843
    printed = eval(REF['printed'][kind])                              # the dict get_scores printed
    for k, m in (('q_acc', 'Q_Acc'), ('i_acc', 'I_Acc'), ('acc', 'Acc'), ('g_acc', 'G_Acc')):
        assert s['naturalbench'][k] == pytest.approx(100 * printed[m], abs=1e-9)


def test_text(test_set, tmp_path, capsys):
    main(['score', str(outputs(test_set, tmp_path/'out.json', 'mostly_right')), '--questions', str(test_set), '--boot', '0'])
    out = capsys.readouterr().out
    assert 'NaturalBench, as its evaluation.py computes it' in out and f"naturalbench: {REF['printed']['mostly_right']}" in out


@pytest.mark.parametrize('n,msg', [(3802, "field '[3800]': 3802 responses for a question file of 3800 items"),
                                   (6, "field '[4]': 6 responses: the last 2x2 group is incomplete")])
def test_bad_answers(test_set, tmp_path, capsys, n, msg):
    items = json.loads(test_set.read_text())
    (tmp_path/'bad.json').write_text(json.dumps(['Yes'] * n))
    with pytest.raises(SystemExit) as e: score([tmp_path/'bad.json', '--questions', test_set], capsys)
    assert e.value.code == 2 and msg in capsys.readouterr().err


def test_incomplete_group_refused(test_set):
    q = read_naturalbench_questions(test_set)
    preds = q[['split', 'question_id', 'label']].assign(x='yes')
    with pytest.raises(Exception, match='incomplete 2x2 groups'): naturalbench_scores(preds[preds.question_id != 5])


def test_hub_name_detected():
    from pope_audit.benchmarks.benchmark import find_benchmark
    assert find_benchmark(['hf:BaiqiL/NaturalBench']).name == 'naturalbench'


def test_run_naturalbench(test_set, tmp_path, capsys):
    "run on the test split's first group (four items, two images), and its records score as NaturalBench."
    from pope_audit.models.tiny import stand_in_images
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    q = read_naturalbench_questions(test_set)
    stand_in_images(sorted(set(q.image[:4])), tmp_path/'img', size=(32, 32))
    main(['run', '--model', tiny_vlm_dir('llava15'), '--questions', test_set, '--images', tmp_path/'img',
          '--limit', '4', '--max-new-tokens', '2', '--out', tmp_path/'run', '--json'])
    capsys.readouterr()
    doc = score([tmp_path/'run'], capsys)
    assert doc['benchmark'] == 'naturalbench' and all(r['groups'] == 1 for r in doc['naturalbench']['scores'])


def test_lmms_eval_log(test_set, tmp_path, capsys):
    "lmms-eval's naturalbench log (one doc per item, Index its position; multiple-choice items skipped) scores as NaturalBench, with or without the question file."
    items = json.loads(test_set.read_text())
    log = tmp_path/'samples_naturalbench.jsonl'
    log.write_text(''.join(json.dumps(dict(doc_id=i, doc=dict(Index=i, Question=o[0], Question_Type='yes_no' if o[3] == 'yes_no' else 'multiple_choice', answer=o[2]),
                                           resps=[[answer('mostly_right', i, o[2])]], filtered_resps=[answer('mostly_right', i, o[2])])) + '\n' for i, o in enumerate(items)))
    for extra in ([], ['--questions', test_set]):
        doc = score([log, *extra], capsys)
        assert doc['benchmark'] == 'naturalbench' and doc['kind'] == 'lmms-eval'
        s = {r['readout']: r for r in doc['naturalbench']['scores']}
        assert s['naturalbench']['as_printed'] == REF['printed']['mostly_right']
