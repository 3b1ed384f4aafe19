"HallusionBench: the judge-reply rule and qAcc/fAcc/aAcc against utils.py's own outputs (run once, judge replies stubbed in), answers with and without a judge, and bad input."
import json
from pathlib import Path
import pytest
from pope_audit.interface.cli import main
from pope_audit.benchmarks.hallusionbench import hallusion_verdict

REF = json.loads((Path(__file__).parent/'reference/hallusionbench/utils_outputs.json').read_text())
CODE = {'correct': '1', 'incorrect': '0', 'unclear': '2'}


def reply(kind, j):
    "The judge's reply the reference run gave to row j."
    if kind == 'battery': return REF['battery'][j % len(REF['battery'])]
    return 'unclear' if j % 13 == 0 else 'incorrect' if j % 6 == 0 else 'correct'


@pytest.fixture(scope='module')
def qfile(shared): return shared/'data/hallusionbench/HallusionBench.json'


def result_file(qfile, path, kind='battery', judge=True, edit=None):
    rows = json.loads(qfile.read_text())
    out = [dict(r, model_prediction='Yes' if j % 3 else 'No, it is not.', **({'judge_reply': reply(kind, j)} if judge else {})) for j, r in enumerate(rows)]
    path.write_text(json.dumps(edit(out) if edit else out))
    return path


def score(args, capsys):
    main(['score', *map(str, args), '--json', '--boot', '0'])
    return json.loads(capsys.readouterr().out)


def test_rule_is_utils_py():
    assert [CODE[hallusion_verdict(r)] for r in REF['battery']] == REF['codes']


@pytest.mark.parametrize('kind', ['battery', 'mostly_right'])
@pytest.mark.parametrize('with_questions', [False, True])
def test_figures_are_evaluation_py(qfile, tmp_path, capsys, kind, with_questions):
    "The judge readout's qAcc, fAcc and aAcc, overall and for VD and VS, as evaluation.py computes them from utils.py's functions."
    doc = score([result_file(qfile, tmp_path/'res.json', kind), *(['--questions', qfile] if with_questions else [])], capsys)
    assert doc['benchmark'] == 'hallusionbench' and doc['kind'] == 'hallusionbench' and doc['hallusionbench']['judged']
    got = {r['part']: r['as_printed'] for r in doc['hallusionbench']['scores'] if r['readout'] == 'hallusionbench'}
    assert got == REF['figures'][kind]


def test_without_judge(qfile, tmp_path, capsys):
    "Without judge replies the section is computed from the other readouts, and says so."
    f = result_file(qfile, tmp_path/'res.json', judge=False)
    doc = score([f], capsys)
    assert not doc['hallusionbench']['judged'] and 'hallusionbench' not in {r['readout'] for r in doc['hallusionbench']['scores']}
    main(['score', str(f), '--boot', '0'])
    assert "no judge's replies in these answers, so these figures are computed from the other readouts" in capsys.readouterr().out


BAD = [  # (edit of the rows, splits, expected message)
    (lambda rs: rs + [rs[5]], None, "field '[1129].question_id': question VS/chart/0/1/1 is answered twice"),
    (lambda rs: [dict(rs[0], filename='./VS/chart/0_0.png')] + rs[1:], None, "field '[0].filename': question VS/chart/0/0/0 has no image"),
    (lambda rs: rs, ['hallusion-VD', 'hallusion-VS'], "field '[0].figure_id': an answer to question VS/chart/0/0/0, which has no image, when only questions with images"),
    (lambda rs: rs[:3] + [dict(rs[3], set_id='999')], None, "field '[3].question_id': answer to question VS/chart/999/0/3, which is not in the question set"),
]


@pytest.mark.parametrize('edit,splits,msg', BAD)
def test_bad_answers(qfile, tmp_path, capsys, edit, splits, msg):
    f = result_file(qfile, tmp_path/'bad.json', edit=edit)
    with pytest.raises(SystemExit) as e: score([f, '--questions', qfile, *(['--splits', *splits] if splits else [])], capsys)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert 'bad.json' in err and msg in err


def test_run_report_audit(qfile, tmp_path, capsys):
    "run on the questions with images (nested file names), then score (no judge: says so), report and audit of the run folder."
    from pope_audit.benchmarks.hallusionbench import read_hallusion_questions
    from pope_audit.models.tiny import stand_in_images
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    q = read_hallusion_questions(qfile, ['hallusion-VD'])
    for n in sorted(set(q.image[:2])):
        (tmp_path/'img'/n).parent.mkdir(parents=True, exist_ok=True)
        stand_in_images([Path(n).name], (tmp_path/'img'/n).parent, size=(32, 32))
    main(['run', '--model', tiny_vlm_dir('llava15'), '--questions', qfile, '--images', tmp_path/'img', '--splits', 'hallusion-VD',
          '--limit', '2', '--max-new-tokens', '2', '--out', tmp_path/'run', '--json'])
    capsys.readouterr()
    doc = score([tmp_path/'run'], capsys)
    assert doc['benchmark'] == 'hallusionbench' and not doc['hallusionbench']['judged']
    assert {r['questions'] for r in doc['hallusionbench']['scores']} == {2}
    main(['report', tmp_path/'run'])
    assert 'hallusion-VD' in (tmp_path/'run/report.md').read_text()
    capsys.readouterr()
    main(['audit', tmp_path/'run', '--out', tmp_path/'audit', '--json'])
    rows = json.loads(capsys.readouterr().out)
    assert rows and {r['split'] for r in rows} >= {'hallusion-VD'}


def test_lmms_eval_log(qfile, tmp_path, capsys):
    "lmms-eval's hallusion_bench_image log (its docs are HallusionBench's rows with an image) scores as HallusionBench, with or without the question file."
    rows = [r for r in json.loads(qfile.read_text()) if r['visual_input'] != '0']
    log = tmp_path/'samples_hallusion_bench_image.jsonl'
    log.write_text(''.join(json.dumps(dict(doc_id=i, doc=r, target=r['gt_answer_details'], resps=[['Yes' if r['gt_answer'] == '1' else 'No']],
                                           filtered_resps=['Yes' if r['gt_answer'] == '1' else 'No'])) + '\n' for i, r in enumerate(rows)))
    for extra in ([], ['--questions', qfile]):
        doc = score([log, *extra], capsys)
        assert doc['benchmark'] == 'hallusionbench' and doc['kind'] == 'lmms-eval' and not doc['hallusionbench']['judged']
        s = {(r['readout'], r['part']): r for r in doc['hallusionbench']['scores']}
        assert s[('pope_parse', 'Overall')]['questions'] == 951 and s[('pope_parse', 'Overall')]['qAcc'] == 100.0


def test_vlmevalkit_table(qfile, tmp_path, capsys):
    "A VLMEvalKit HallusionBench table (its layout as Hallusion_rating reads it) scores as HallusionBench, joined to the question file."
    import pandas as pd
    rows = [r for r in json.loads(qfile.read_text()) if r['visual_input'] != '0']
    t = pd.DataFrame([{'index': f"{r['category']}_{r['subcategory']}_x_{r['set_id']}_{r['figure_id']}_{r['question_id']}", 'question': r['question'],
                       'answer': 'Yes' if r['gt_answer'] == '1' else 'No', 'category': r['category'], 'l2-category': r['subcategory'],
                       'prediction': 'Yes, it is.'} for r in rows])
    t.to_csv(tmp_path/'HallusionBench.tsv', sep='\t', index=False)
    doc = score([tmp_path/'HallusionBench.tsv', '--questions', qfile], capsys)
    assert doc['benchmark'] == 'hallusionbench' and doc['kind'] == 'vlmevalkit'
    s = {(r['readout'], r['part']): r for r in doc['hallusionbench']['scores']}
    assert s[('pope_parse', 'Overall')]['questions'] == 951 and s[('pope_parse', 'Overall')]['a_right'] == sum(r['gt_answer'] == '1' for r in rows)
